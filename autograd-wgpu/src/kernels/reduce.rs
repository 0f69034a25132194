//! Reductions of f32 over any set of dims (sum, max, min; NaN propagates
//! through max and min) and the arg reductions along one dim (the value and
//! the index of its first occurrence, a NaN being the extreme), as the
//! reference backend defines them.
//!
//! A reduction of many elements per output runs one workgroup per output: each
//! invocation folds a strided share of the reduced elements, then the
//! workgroup combines its 256 partial results as a tree in workgroup memory
//! (partial sums of a few thousand elements keep an f32 sum close to the
//! reference's f64 one). A reduction of few elements per output runs one
//! invocation per output, which keeps the workgroups full.
//!
//! f16 and bf16 inputs are read as they are (each element widened from its
//! half of a word as it is folded); the f32 results are rounded once by
//! the cast kernel: the bits of widening the input first, without its
//! launch and its f32 copy (a bias gradient under autocast is one).

use super::{ENTRY, GROUP, buf, constants, grid, launch};
use crate::WgpuStorage;
use crate::device::Gpu;
use crate::kernels::elementwise::FLOAT;
use autograd_core::{ArgReduceOp, DType, Error, Layout, ReduceOp, Result, validate};

/// Below this many reduced elements per output, one invocation per output.
const PER_THREAD_MAX: usize = 64;

/// The WGSL index walk of one operand: `{name}_base(i)` is the storage
/// index of the first reduced element of output `i`, `{name}_off(j)` the
/// offset of reduced element `j` from it, both read from the table that
/// starts at `lay[{at}]` (`at` a WGSL expression: `0u` for a table alone).
///
/// The table ([`table`]): `[outputs, kept rank, reduced rank, reduced
/// count, offset, kept dims.., kept strides.., reduced dims.., reduced
/// strides..]`.
pub(super) fn walk(name: &str, at: &str) -> String {
    format!(
        r#"
fn {name}_base(i: u32) -> u32 {{
    let t = {at};
    let rk = lay[t + 1u];
    if (rk == 0u) {{ return lay[t + 4u]; }}
    var off = lay[t + 4u];
    var rem = i;
    for (var d = rk; d > 1u; d = d - 1u) {{
        let n = lay[t + 4u + d];
        off = off + (rem % n) * lay[t + 4u + rk + d];
        rem = rem / n;
    }}
    // the outermost index needs no division: it is below its size
    return off + rem * lay[t + 5u + rk];
}}
fn {name}_off(j: u32) -> u32 {{
    let t = {at};
    let rk = lay[t + 1u];
    let rr = lay[t + 2u];
    let base = t + 5u + 2u * rk;
    if (rr == 0u) {{ return 0u; }}
    var off = 0u;
    var rem = j;
    for (var d = rr; d > 1u; d = d - 1u) {{
        let n = lay[base + d - 1u];
        off = off + (rem % n) * lay[base + rr + d - 1u];
        rem = rem / n;
    }}
    // as in the base: a row of one reduced dim is `j * stride`, no division
    return off + rem * lay[base + rr];
}}
"#
    )
}

/// The identity and the combining formula of `op` on `acc` and `x`.
fn combine(op: ReduceOp) -> (&'static str, &'static str) {
    match op {
        ReduceOp::Sum => ("0.0", "acc + x"),
        ReduceOp::Max => ("neg_inf()", "max_nan(acc, x)"),
        ReduceOp::Min => ("-neg_inf()", "min_nan(acc, x)"),
    }
}

/// `out` (f32 results) rounded to `dtype` when that is a half.
pub(super) fn narrowed(gpu: &Gpu, out: WgpuStorage, dtype: DType) -> Result<WgpuStorage> {
    if dtype == DType::F32 {
        return Ok(out);
    }
    super::cast::cast(gpu, &out, &Layout::contiguous(autograd_core::Shape::new(vec![out.len()])), dtype)
}

/// The table of a reduction of `layout` over `dims` ([`walk`]), the
/// number of outputs and of elements reduced into each.
pub(super) fn table(op: &str, layout: &Layout, dims: &[usize]) -> Result<(Vec<u32>, usize, usize)> {
    let fits = |v: usize| {
        u32::try_from(v).map_err(|_| Error::msg(format!("{op}: {v} is past the GPU kernels' 32-bit indices (shape {:?})", layout.dims())))
    };
    let (mut kd, mut ks, mut rd, mut rs) = (vec![], vec![], vec![], vec![]);
    for (d, (&n, &s)) in layout.dims().iter().zip(layout.strides()).enumerate() {
        // a dim of one element is never stepped: any stride will do
        let s = if n == 1 { 0 } else { s };
        if dims.contains(&d) {
            rd.push(fits(n)?);
            rs.push(fits(s)?);
        } else {
            kd.push(fits(n)?);
            ks.push(fits(s)?);
        }
    }
    let outputs: usize = kd.iter().map(|&n| n as usize).product();
    let count: usize = rd.iter().map(|&n| n as usize).product();
    let mut t = vec![fits(outputs)?, fits(kd.len())?, fits(rd.len())?, fits(count)?, fits(layout.offset())?];
    t.extend(kd);
    t.extend(ks);
    t.extend(rd);
    t.extend(rs);
    Ok((t, outputs, count))
}

/// `op` over `dims` of f32, f16 or bf16 `s` (dims kept with size one, as
/// the trait's), in `s`'s dtype.
pub(crate) fn reduce(gpu: &Gpu, op: ReduceOp, s: &WgpuStorage, layout: &Layout, dims: &[usize]) -> Result<WgpuStorage> {
    let name = "reduce";
    validate::input(name, s.len(), layout)?;
    validate::reduce_dims(name, layout.rank(), dims)?;
    validate::reduce_output(name, layout, dims, s.dtype)?;
    let input = super::cast::operands(name, &[("xs", s.dtype)])?;
    super::indexable(name, &[s])?;
    let (t, outputs, count) = table(name, layout, dims)?;
    narrowed(gpu, sums(gpu, name, op, s, (t, outputs, count), &input)?, s.dtype)
}

/// [`reduce`]'s f32 results, `input` the binding and load of `s`'s elements.
fn sums(
    gpu: &Gpu,
    name: &str,
    op: ReduceOp,
    s: &WgpuStorage,
    (t, outputs, count): (Vec<u32>, usize, usize),
    input: &str,
) -> Result<WgpuStorage> {
    let out = WgpuStorage::uninit(gpu, name, DType::F32, outputs)?;
    if outputs == 0 {
        return Ok(out);
    }
    let (identity, comb) = combine(op);
    if count == 0 {
        let value = match op {
            ReduceOp::Sum => 0.0,
            ReduceOp::Max => f32::NEG_INFINITY,
            ReduceOp::Min => f32::INFINITY,
        };
        return super::elementwise::fill(gpu, &out, value);
    }
    let m = constants(gpu, bytemuck::cast_slice(&t));
    let walk = walk("x", "0u");
    let head = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         {input}\
         @group(0) @binding(2) var<storage, read_write> ys: array<f32>;\n\
         {FLOAT}\n{walk}\n\
         fn comb(acc: f32, x: f32) -> f32 {{ return {comb}; }}\n"
    );
    let (x, y) = (buf(s, name)?, buf(&out, name)?);
    if count < PER_THREAD_MAX {
        let source = format!(
            "{head}{ENTRY}\
                 let base = x_base(i);\n\
                 var acc: f32 = {identity};\n\
                 for (var j = 0u; j < lay[3]; j = j + 1u) {{ acc = comb(acc, xs_at(base + x_off(j))); }}\n\
                 ys[i] = acc;\n\
             }}\n"
        );
        return launch(gpu, name, &source, &[&m, x, y], grid(gpu, name, (outputs as u32).div_ceil(GROUP))?).map(|_| out);
    }
    let source = format!(
        "{head}\
         var<workgroup> part: array<f32, {GROUP}>;\n\
         @compute @workgroup_size({GROUP})\n\
         fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {{\n\
             let i = wg.x + wg.y * nw.x;\n\
             // the whole workgroup takes the same branch: the barriers stay uniform\n\
             if (i >= lay[0]) {{ return; }}\n\
             let base = x_base(i);\n\
             var acc: f32 = {identity};\n\
             for (var j = lid.x; j < lay[3]; j = j + {GROUP}u) {{ acc = comb(acc, xs_at(base + x_off(j))); }}\n\
             part[lid.x] = acc;\n\
             workgroupBarrier();\n\
             for (var w = {half}u; w > 0u; w = w / 2u) {{\n\
                 if (lid.x < w) {{ part[lid.x] = comb(part[lid.x], part[lid.x + w]); }}\n\
                 workgroupBarrier();\n\
             }}\n\
             if (lid.x == 0u) {{ ys[i] = part[0]; }}\n\
         }}\n",
        half = GROUP / 2
    );
    let groups = u32::try_from(outputs).map_err(|_| Error::msg(format!("{name}: {outputs} outputs are past the GPU grid")))?;
    launch(gpu, name, &source, &[&m, x, y], grid(gpu, name, groups)?).map(|_| out)
}

/// Max or min of f32, f16 or bf16 `s` along `dim` (in `s`'s dtype) and
/// the index of its first occurrence (int64), one invocation per output.
pub(crate) fn arg_reduce(gpu: &Gpu, op: ArgReduceOp, s: &WgpuStorage, layout: &Layout, dim: usize) -> Result<(WgpuStorage, WgpuStorage)> {
    let name = "max/min";
    validate::input(name, s.len(), layout)?;
    validate::arg_reduce(name, layout, dim)?;
    let input = super::cast::operands(name, &[("xs", s.dtype)])?;
    super::indexable(name, &[s])?;
    let (t, outputs, _) = table(name, layout, &[dim])?;
    let vals = WgpuStorage::uninit(gpu, name, DType::F32, outputs)?;
    let idxs = WgpuStorage::uninit(gpu, name, DType::I64, outputs)?;
    if outputs == 0 {
        return Ok((narrowed(gpu, vals, s.dtype)?, idxs));
    }
    let beats = match op {
        ArgReduceOp::Max => "x > cur",
        ArgReduceOp::Min => "x < cur",
    };
    let m = constants(gpu, bytemuck::cast_slice(&t));
    let walk = walk("x", "0u");
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         {input}\
         @group(0) @binding(2) var<storage, read_write> ys: array<f32>;\n\
         @group(0) @binding(3) var<storage, read_write> idx: array<u32>;\n\
         {FLOAT}\n{walk}\n\
         {ENTRY}\
             let base = x_base(i);\n\
             var cur = xs_at(base);\n\
             var at = 0u;\n\
             // a NaN is the extreme: the first one wins and nothing beats it\n\
             for (var j = 1u; j < lay[3] && !is_nan(cur); j = j + 1u) {{\n\
                 let x = xs_at(base + x_off(j));\n\
                 if (is_nan(x) || {beats}) {{ cur = x; at = j; }}\n\
             }}\n\
             ys[i] = cur;\n\
             // int64 little-endian: the low word, then a zero high word\n\
             idx[2u * i] = at;\n\
             idx[2u * i + 1u] = 0u;\n\
         }}\n"
    );
    let bufs = [&m, buf(s, name)?, buf(&vals, name)?, buf(&idxs, name)?];
    launch(gpu, name, &source, &bufs, grid(gpu, name, (outputs as u32).div_ceil(GROUP))?)?;
    // the value is an element of `s`: its rounding back is exact
    Ok((narrowed(gpu, vals, s.dtype)?, idxs))
}
