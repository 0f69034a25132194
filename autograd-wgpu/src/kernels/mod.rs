//! WGSL kernels and what launches them: operand layouts passed as a table
//! of `u32` (the device walks any strides, as the CPU kernels do), one
//! invocation per output element, dispatched over two grid dimensions so
//! that outputs past `65,535 x 256` elements still fit the device's limit
//! on workgroups per dimension.

/// The WGSL of `wide32(a, b)`: the whole 64-bit product of two `u32`s as
/// `(low word, high word)`, from 16-bit halves (WGSL has no 64-bit
/// integer). A macro, so that the kernels' helper strings can `concat!` it.
macro_rules! wide32_wgsl {
    () => {
        r#"
fn wide32(a: u32, b: u32) -> vec2<u32> {
    let al = a & 0xffffu; let ah = a >> 16u; let bl = b & 0xffffu; let bh = b >> 16u;
    let ll = al * bl; let lh = al * bh; let hl = ah * bl;
    let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
    return vec2<u32>((ll & 0xffffu) | (mid << 16u), ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u));
}
"#
    };
}

pub(crate) mod cast;
pub(crate) mod dropout;
pub(crate) mod elementwise;
pub(crate) mod fused;
pub(crate) mod half;
pub(crate) mod index;
pub(crate) mod integer;
pub(crate) mod matmul;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod rows;
pub(crate) mod window;

use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::{Error, Layout, Result};
use wgpu::util::DeviceExt;

/// Invocations per workgroup of the elementwise kernels.
pub(crate) const GROUP: u32 = 256;

/// The entry point of a kernel of one invocation per output element
/// (a two-dimensional grid of [`GROUP`]-invocation workgroups): `i` is the
/// element, and invocations past the `lay[0]` elements return. The kernel
/// goes on with its body and closes the brace.
pub(crate) const ENTRY: &str = "@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = gid.x + gid.y * nw.x * 256u;
    if (i >= lay[0]) { return; }
";
const _: () = assert!(GROUP == 256, "ENTRY spells the workgroup size out");

/// The WGSL that every strided kernel shares: `at(i, k)`, the storage
/// index of output element `i` in operand `k`, read from `lay`
/// (`[numel, rank, dims.., then per operand: offset, strides..]`; rank 0
/// when every operand is contiguous, where the index is offset + i).
pub(crate) const STRIDED: &str = r#"
fn at(i: u32, k: u32) -> u32 {
    let rank = lay[1];
    let base = 2u + rank + k * (rank + 1u);
    var off = lay[base];
    if (rank == 0u) { return off + i; }
    var rem = i;
    for (var d = rank; d > 0u; d = d - 1u) {
        let n = lay[1u + d];
        off = off + (rem % n) * lay[base + d];
        rem = rem / n;
    }
    return off;
}
"#;

/// The `lay` table of operands read through `layouts` (all of one shape)
/// for [`STRIDED`]'s `at`: `Err` when a size, offset or stride does not
/// fit the kernels' 32-bit indices.
///
/// Dims are coalesced first (dropped when of size one, merged with the
/// next where every operand steps over both as one), so that a contiguous
/// operand costs no division per element: integer division has no vector
/// instruction on a CPU, which is what Mesa's lavapipe runs kernels on.
pub(crate) fn meta(op: &str, layouts: &[&Layout]) -> Result<Vec<u32>> {
    let shape = layouts[0].dims();
    let fits =
        |v: usize| u32::try_from(v).map_err(|_| Error::msg(format!("{op}: {v} is past the GPU kernels' 32-bit indices (shape {shape:?})")));
    let numel: usize = shape.iter().product();
    // (size, stride per operand), outermost first, dims of one dropped
    let mut dims: Vec<(usize, Vec<usize>)> = Vec::with_capacity(shape.len());
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let strides: Vec<usize> = layouts.iter().map(|l| l.strides()[d]).collect();
        if let Some((pn, ps)) = dims.last_mut()
            && ps.iter().zip(&strides).all(|(&p, &s)| s.checked_mul(n) == Some(p))
        {
            *pn *= n;
            *ps = strides;
            continue;
        }
        dims.push((n, strides));
    }
    let contiguous = dims.is_empty() || (dims.len() == 1 && dims[0].1.iter().all(|&s| s == 1));
    if contiguous {
        dims.clear();
    }
    let mut m = vec![fits(numel)?, fits(dims.len())?];
    for (n, _) in &dims {
        m.push(fits(*n)?);
    }
    for (k, l) in layouts.iter().enumerate() {
        m.push(fits(l.offset())?);
        for (_, strides) in &dims {
            m.push(fits(strides[k])?);
        }
    }
    Ok(m)
}

/// A small read-only buffer of `u32`s or `f32`s for one launch.
pub(crate) fn constants(gpu: &Gpu, bytes: &[u8]) -> wgpu::Buffer {
    let mut padded = bytes.to_vec();
    padded.resize(padded.len().max(4).div_ceil(4) * 4, 0);
    gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: None, contents: &padded, usage: wgpu::BufferUsages::STORAGE })
}

/// The workgroup grid for `groups` workgroups: at most 65,535 along x.
pub(crate) fn grid(gpu: &Gpu, op: &str, groups: u32) -> Result<(u32, u32)> {
    let max = gpu.limits.max_compute_workgroups_per_dimension.max(1);
    let x = groups.min(max);
    let y = groups.div_ceil(x.max(1));
    if y > max {
        return Err(Error::msg(format!("{op}: {groups} workgroups are past the device's grid ({max} x {max})")));
    }
    Ok((x, y))
}

/// Binds `buffers` (binding 0, 1, ..) to the kernel of `source` and
/// records `groups` workgroups (a grid of (x, y) when given as such) after
/// the work recorded before it (submitted in batches: `Gpu::record`).
pub(crate) fn launch(gpu: &Gpu, op: &str, source: &str, buffers: &[&wgpu::Buffer], groups: (u32, u32)) -> Result<()> {
    launch3(gpu, op, source, buffers, (groups.0, groups.1, 1))
}

/// [`launch`] on a three-dimensional grid.
pub(crate) fn launch3(gpu: &Gpu, op: &str, source: &str, buffers: &[&wgpu::Buffer], groups: (u32, u32, u32)) -> Result<()> {
    let pipeline = gpu.pipeline(op, source)?;
    gpu.scoped(op, || {
        let entries: Vec<wgpu::BindGroupEntry<'_>> =
            buffers.iter().enumerate().map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() }).collect();
        let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(op),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        gpu.record(|enc| {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(op), timestamp_writes: None });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(groups.0, groups.1, groups.2);
        })
    })?
}

/// The buffer of a storage that holds elements (callers handle empty outputs first).
pub(crate) fn buf<'a>(s: &'a WgpuStorage, op: &str) -> Result<&'a wgpu::Buffer> {
    // a kernel given the buffer may write it: the host's copy of what it
    // wrote last may be stale from here on
    if let Ok(Some(block)) = &s.block {
        block.set_shadow(None);
    }
    s.buffer()?.ok_or_else(|| Error::msg(format!("{op}: an operand has no elements but its layout reads some")))
}

/// `Err` unless every element of every operand has a 32-bit index: the
/// kernels index storages with `u32` (offsets below the storage's length,
/// which `validate::input` checks, then fit as well).
pub(crate) fn indexable(op: &str, operands: &[&WgpuStorage]) -> Result<()> {
    // element indices, and the 32-bit words of 8-byte elements
    let words = |s: &WgpuStorage| s.len().checked_mul(s.dtype.size_in_bytes()).map_or(usize::MAX, |b| b.div_ceil(4));
    match operands.iter().find(|s| u32::try_from(s.len().max(words(s))).is_err()) {
        Some(s) => Err(Error::msg(format!("{op}: a storage of {} elements is past the GPU kernels' 32-bit indices", s.len()))),
        None => Ok(()),
    }
}
