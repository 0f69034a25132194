//! `unfold` (im2col) and `fold` (col2im) on f32, for convolution and
//! pooling: one invocation per output element, any number of spatial dims
//! up to [`MAX_RANK`], any input strides.
//!
//! `fold` runs one invocation per image element, summing the column
//! elements that read it in kernel-offset order: the order the reference
//! adds them in, so the sums are the same, and no float atomics.

use super::{ENTRY, GROUP, buf, constants, grid, launch};
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::validate::{self, WindowSizes};
use autograd_core::window::Window;
use autograd_core::{DType, Error, Layout, Result};

/// The most spatial dims the kernels index (the host path takes more).
pub(crate) const MAX_RANK: usize = 6;

/// The table shared by both kernels: `[outputs, rank, N, C, spatial..,
/// kernel.., positions.., stride.., dilation.., padding before..]`, then
/// the operand's offset and strides.
fn table(op: &str, outputs: usize, window: &Window, sizes: &WindowSizes, operand: &Layout) -> Result<Vec<u32>> {
    let fits = |v: usize| u32::try_from(v).map_err(|_| Error::msg(format!("{op}: {v} is past the GPU kernels' 32-bit indices")));
    let mut t = vec![fits(outputs)?, fits(window.rank())?, fits(sizes.batch)?, fits(sizes.channels)?];
    let pads: Vec<usize> = window.padding().iter().map(|p| p.0).collect();
    // the kernels form positions in the padded image in 32 bits
    for (&n, &(lo, hi)) in sizes.spatial.iter().zip(window.padding()) {
        let padded = n.checked_add(lo).and_then(|v| v.checked_add(hi));
        fits(padded.ok_or_else(|| Error::msg(format!("{op}: a padded size overflows")))?)?;
    }
    for v in [&sizes.spatial[..], window.kernel(), &sizes.positions[..], window.stride(), window.dilation(), &pads] {
        for &x in v {
            t.push(fits(x)?);
        }
    }
    t.push(fits(operand.offset())?);
    for (&s, &d) in operand.strides().iter().zip(operand.dims()) {
        t.push(if d == 1 { 0 } else { fits(s)? });
    }
    Ok(t)
}

/// What both kernels start with: the bindings (the table, the input, the
/// output, of `element`s) and the table's sizes by section and dim.
fn head(element: &str) -> String {
    format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> xs: array<{element}>;\n\
         @group(0) @binding(2) var<storage, read_write> ys: array<{element}>;\n\
         fn size_of(section: u32, d: u32) -> u32 {{ return lay[4u + section * lay[1] + d]; }}\n\
         fn operand(k: u32) -> u32 {{ return lay[4u + 6u * lay[1] + k]; }}\n"
    )
}

/// Columns `[N, C * K, L]` of the image `s` (`[N, C, *spatial]`) of
/// 4-byte elements (f32, or narrower ones spread one per word: moved as
/// bits), taps in the padding set to the bits `pad`.
pub(crate) fn unfold(gpu: &Gpu, s: &WgpuStorage, layout: &Layout, window: &Window, pad: u32) -> Result<WgpuStorage> {
    let name = "unfold";
    validate::input(name, s.len(), layout)?;
    let sizes = validate::unfold(name, layout, window, DType::F32)?;
    super::indexable(name, &[s])?;
    let outputs = sizes.batch * sizes.channels * window.kernel_numel() * sizes.num_positions();
    let out = WgpuStorage::uninit(gpu, name, DType::F32, outputs)?;
    if outputs == 0 {
        return Ok(out);
    }
    let mut t = table(name, outputs, window, &sizes, layout)?;
    t.push(pad);
    let m = constants(gpu, bytemuck::cast_slice(&t));
    let source = format!(
        "{head}{ENTRY}\
             let r = lay[1];\n\
             var o: array<u32, 6>;\n\
             var k: array<u32, 6>;\n\
             var rem = i;\n\
             for (var d = r; d > 0u; d = d - 1u) {{ o[d - 1u] = rem % size_of(2u, d - 1u); rem = rem / size_of(2u, d - 1u); }}\n\
             for (var d = r; d > 0u; d = d - 1u) {{ k[d - 1u] = rem % size_of(1u, d - 1u); rem = rem / size_of(1u, d - 1u); }}\n\
             let c = rem % lay[3];\n\
             let n = rem / lay[3];\n\
             var off = operand(0u) + n * operand(1u) + c * operand(2u);\n\
             for (var d = 0u; d < r; d = d + 1u) {{\n\
                 let p = o[d] * size_of(3u, d) + k[d] * size_of(4u, d);\n\
                 let lo = size_of(5u, d);\n\
                 if (p < lo || p - lo >= size_of(0u, d)) {{ ys[i] = lay[arrayLength(&lay) - 1u]; return; }}\n\
                 off = off + (p - lo) * operand(3u + d);\n\
             }}\n\
             ys[i] = xs[off];\n\
         }}\n",
        head = head("u32"),
    );
    launch(gpu, name, &source, &[&m, buf(s, name)?, buf(&out, name)?], grid(gpu, name, (outputs as u32).div_ceil(GROUP))?)?;
    Ok(out)
}

/// The contiguous `[N, C, *spatial]` f32 image whose elements sum the
/// columns' taps that read them.
pub(crate) fn fold(gpu: &Gpu, s: &WgpuStorage, layout: &Layout, window: &Window, spatial: &[usize]) -> Result<WgpuStorage> {
    let name = "fold";
    validate::input(name, s.len(), layout)?;
    let sizes = validate::fold(layout, window, spatial, DType::F32)?;
    super::indexable(name, &[s])?;
    let outputs = sizes.batch * sizes.channels * sizes.image_numel();
    let out = WgpuStorage::uninit(gpu, name, DType::F32, outputs)?;
    if outputs == 0 {
        return Ok(out);
    }
    let mut t = table(name, outputs, window, &sizes, layout)?;
    t.push(u32::try_from(window.kernel_numel()).map_err(|_| Error::msg(format!("{name}: the kernel is past 32-bit indices")))?);
    let m = constants(gpu, bytemuck::cast_slice(&t));
    let source = format!(
        "{head}{ENTRY}\
             let r = lay[1];\n\
             var x: array<u32, 6>;\n\
             var rem = i;\n\
             for (var d = r; d > 0u; d = d - 1u) {{ x[d - 1u] = rem % size_of(0u, d - 1u); rem = rem / size_of(0u, d - 1u); }}\n\
             let c = rem % lay[3];\n\
             let n = rem / lay[3];\n\
             let taps = lay[arrayLength(&lay) - 1u];\n\
             var acc = 0.0;\n\
             for (var kf = 0u; kf < taps; kf = kf + 1u) {{\n\
                 // the window position whose tap at kernel offset kf reads x, if any\n\
                 var kr = kf;\n\
                 var k: array<u32, 6>;\n\
                 for (var d = r; d > 0u; d = d - 1u) {{ k[d - 1u] = kr % size_of(1u, d - 1u); kr = kr / size_of(1u, d - 1u); }}\n\
                 var ok = true;\n\
                 var pos = 0u;\n\
                 for (var d = 0u; d < r; d = d + 1u) {{\n\
                     let p = x[d] + size_of(5u, d);\n\
                     let reach = k[d] * size_of(4u, d);\n\
                     if (p < reach) {{ ok = false; break; }}\n\
                     let q = p - reach;\n\
                     let st = size_of(3u, d);\n\
                     if (q % st != 0u || q / st >= size_of(2u, d)) {{ ok = false; break; }}\n\
                     pos = pos * size_of(2u, d) + q / st;\n\
                 }}\n\
                 if (ok) {{\n\
                     acc = acc + xs[operand(0u) + n * operand(1u) + (c * taps + kf) * operand(2u) + pos * operand(3u)];\n\
                 }}\n\
             }}\n\
             ys[i] = acc;\n\
         }}\n",
        head = head("f32"),
    );
    launch(gpu, name, &source, &[&m, buf(s, name)?, buf(&out, name)?], grid(gpu, name, (outputs as u32).div_ceil(GROUP))?)?;
    Ok(out)
}
