//! Softmax and layer normalisation on f32 as one kernel per row, forward
//! and backward (the trait's composites launch five to nine kernels and
//! hold their temporaries in device memory; a row kernel reads its row,
//! keeps the row's statistics in registers and writes the result once).
//!
//! A row is the elements reduced together: those along `dim` for softmax,
//! the trailing `k` dims for layer normalisation. Each operand is read
//! through its own strides ([`walk`]), so a transposed or broadcast view
//! costs no copy. A row has one invocation, a 32-wide segment of a
//! workgroup or a whole workgroup, by its length ([`lanes_for`]): each
//! invocation folds a strided share of the row, and the segment combines
//! the shares as a tree in workgroup memory, as the reductions do.
//!
//! The formulas are the composites' (`autograd_core::backend::composite`),
//! step for step: the same sums divided by the same counts, so the kernels
//! differ from them only in the order of the additions.
//!
//! f16 and bf16 operands are read as they are (each element widened from
//! its half of a word as it is read, `cast::operands`) and the f32 results
//! rounded once by the cast kernel: the bits of widening the operands,
//! running the f32 kernel and rounding (`low::through_f32`), without the
//! widening launches and f32 copies.

use super::reduce::{narrowed, table, walk};
use super::{GROUP, buf, constants, grid, launch};
use crate::WgpuStorage;
use crate::device::Gpu;
use crate::kernels::elementwise::FLOAT;
use autograd_core::{DType, Error, Layout, Result, validate};

/// The `lay` table of a row kernel: `[rows, elements per row, eps as f32
/// bits, then where each operand's walk table starts]`, then the tables
/// ([`walk`]); and the number of rows and of elements per row.
fn rows_table(op: &str, operands: &[(&Layout, &[usize])], eps: f32) -> Result<(Vec<u32>, usize, usize)> {
    let header = 3 + operands.len();
    let mut tables = Vec::new();
    let mut starts = Vec::with_capacity(operands.len());
    let mut shape: Option<(usize, usize)> = None;
    for &(layout, dims) in operands {
        let (t, rows, count) = table(op, layout, dims)?;
        // every operand walks the same rows (the callers' shapes agree);
        // a broadcast rstd has one element per row
        let (r0, c0) = *shape.get_or_insert((rows, count));
        if rows != r0 || (count != c0 && count != 1) {
            return Err(Error::msg(format!("{op}: operands of {rows} x {count} and {r0} x {c0} elements per row")));
        }
        let start = header + tables.len();
        starts.push(u32::try_from(start).map_err(|_| Error::msg(format!("{op}: a layout table past 32-bit indices")))?);
        tables.extend(t);
    }
    let (rows, count) = shape.unwrap_or((0, 0));
    let fits = |v: usize| u32::try_from(v).map_err(|_| Error::msg(format!("{op}: {v} is past the GPU kernels' 32-bit indices")));
    let mut lay = vec![fits(rows)?, fits(count)?, eps.to_bits()];
    lay.extend(starts);
    lay.extend(tables);
    Ok((lay, rows, count))
}

/// The invocations that share a row of `n` elements: one for short rows
/// (no workgroup memory, no barriers), a 32-wide segment for rows up to a
/// few thousand elements (a workgroup holds 8 such rows: PyTorch's CUDA
/// softmax gives short rows a warp each for the same reason), the whole
/// workgroup beyond.
fn lanes_for(n: usize) -> u32 {
    match n {
        0..64 => 1,
        64..=4096 => 32,
        _ => GROUP,
    }
}

/// The WGSL of a row kernel whose rows have `lanes` invocations each:
/// `bindings` (binding 0 is `lay`), a walk per name in `walked` (operand
/// `k`'s table), and `body`, which sees `row`, `owns` (whether `row` is
/// one of the rows: the last workgroup's spare segments run the last row
/// again and must not write), `lane`, `lanes` and `n` (elements per row),
/// and combines the lanes' shares with `all_sum(v, lid.x)` and
/// `all_max(v, lid.x)` (`lid.x` picks the slot in workgroup memory).
fn source(lanes: u32, bindings: &str, walked: &[&str], body: &str) -> String {
    let walks: String = walked.iter().enumerate().map(|(k, name)| walk(name, &format!("lay[{}u]", 3 + k))).collect();
    // A segment combines its lanes' values as a tree in workgroup memory;
    // every invocation reaches every barrier (no early return), and the
    // leading one keeps a lane from overwriting `part` while another still
    // reads the previous combination's result.
    let tree = |name: &str, comb: &str| {
        if lanes == 1 {
            return format!("fn {name}(v: f32, l: u32) -> f32 {{ return v; }}\n");
        }
        format!(
            "fn {name}(v: f32, l: u32) -> f32 {{\n\
                 workgroupBarrier();\n\
                 part[l] = v;\n\
                 workgroupBarrier();\n\
                 let lane = l % {lanes}u;\n\
                 for (var w = {half}u; w > 0u; w = w / 2u) {{\n\
                     if (lane < w) {{ let a = part[l]; let b = part[l + w]; part[l] = {comb}; }}\n\
                     workgroupBarrier();\n\
                 }}\n\
                 return part[l - lane];\n\
             }}\n",
            half = lanes / 2
        )
    };
    let part = if lanes == 1 { String::new() } else { format!("var<workgroup> part: array<f32, {GROUP}>;\n") };
    format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n{bindings}\n{FLOAT}\n{walks}\n\
         {part}{sum}{max}\
         @compute @workgroup_size({GROUP})\n\
         fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {{\n\
             let first = (wg.x + wg.y * nw.x) * {per}u;\n\
             let owns = first + lid.x / {lanes}u < lay[0];\n\
             let row = min(first + lid.x / {lanes}u, lay[0] - 1u);\n\
             let lane = lid.x % {lanes}u;\n\
             let lanes = {lanes}u;\n\
             let n = lay[1];\n\
             {body}\n\
         }}\n",
        per = GROUP / lanes,
        sum = tree("all_sum", "a + b"),
        max = tree("all_max", "max_nan(a, b)"),
    )
}

/// Launches the row kernel of `body` over `rows` rows (at least one) of
/// `count` elements.
#[allow(clippy::too_many_arguments)]
fn run(
    gpu: &Gpu,
    op: &str,
    lay: &[u32],
    rows: usize,
    count: usize,
    bindings: &str,
    walked: &[&str],
    body: &str,
    buffers: &[&wgpu::Buffer],
) -> Result<()> {
    let lanes = lanes_for(count);
    let src = source(lanes, bindings, walked, body);
    let m = constants(gpu, bytemuck::cast_slice(lay));
    let mut all: Vec<&wgpu::Buffer> = vec![&m];
    all.extend_from_slice(buffers);
    let rows32 = u32::try_from(rows).map_err(|_| Error::msg(format!("{op}: {rows} rows are past the GPU grid")))?;
    launch(gpu, op, &src, &all, grid(gpu, op, rows32.div_ceil(GROUP / lanes))?)
}

/// The binding of f32 `name` at `binding`, read-only or read-write.
fn binding(binding: usize, name: &str, write: bool) -> String {
    let access = if write { "read_write" } else { "read" };
    format!("@group(0) @binding({binding}) var<storage, {access}> {name}: array<f32>;\n")
}

/// The dtype of a row kernel's operands: one of f32, f16 or bf16 for all
/// (the caller routes mixed dtypes elsewhere); the results are rounded
/// to it.
fn common(op: &'static str, operands: &[&WgpuStorage]) -> Result<DType> {
    let dtype = operands.first().map_or(DType::F32, |s| s.dtype);
    match operands.iter().find(|s| s.dtype != dtype) {
        Some(s) => Err(Error::DTypeMismatch { op, lhs: dtype, rhs: s.dtype }),
        None => Ok(dtype),
    }
}

/// A contiguous layout of `layout`'s shape: the kernels' outputs.
fn dense(layout: &Layout) -> Layout {
    Layout::contiguous(layout.shape().clone())
}

/// `exp(x - max) / sum` along `dim` of `s` (f32, f16 or bf16, the result
/// in its dtype), contiguous. A row whose maximum is not finite (a NaN in
/// it, all `-inf`, or a `+inf`) is NaN, as in the composite (there
/// `inf - inf` makes it so).
pub(crate) fn softmax(gpu: &Gpu, s: &WgpuStorage, layout: &Layout, dim: usize) -> Result<WgpuStorage> {
    let op = "softmax";
    validate::input(op, s.len(), layout)?;
    validate::reduce_dims(op, layout.rank(), &[dim])?;
    let numel = validate::output(op, layout.shape(), DType::F32)?;
    let dtype = s.dtype;
    let bindings = super::cast::operands(op, &[("xs", dtype)])? + &binding(2, "ys", true);
    let out = WgpuStorage::uninit(gpu, op, DType::F32, numel)?;
    if numel == 0 {
        return narrowed(gpu, out, dtype);
    }
    super::indexable(op, &[s, &out])?;
    let lo = dense(layout);
    let (lay, rows, count) = rows_table(op, &[(layout, &[dim]), (&lo, &[dim])], 0.0)?;
    let body = "let xb = x_base(row);\n\
        let yb = y_base(row);\n\
        var m = neg_inf();\n\
        for (var j = lane; j < n; j = j + lanes) { m = max_nan(m, xs_at(xb + x_off(j))); }\n\
        m = all_max(m, lid.x);\n\
        let finite = (bitcast<u32>(m) & 0x7fffffffu) < 0x7f800000u;\n\
        var s = 0.0;\n\
        for (var j = lane; j < n; j = j + lanes) { let e = exp(xs_at(xb + x_off(j)) - m); if (owns) { ys[yb + y_off(j)] = e; } s = s + e; }\n\
        s = all_sum(s, lid.x);\n\
        if (owns) { for (var j = lane; j < n; j = j + lanes) { let k = yb + y_off(j); ys[k] = select(nan(), ys[k] / s, finite); } }";
    run(gpu, op, &lay, rows, count, &bindings, &["x", "y"], body, &[buf(s, op)?, buf(&out, op)?])?;
    narrowed(gpu, out, dtype)
}

/// The input gradient of a softmax along `dim` from its output `y` and the
/// output's gradient `g` (both f32, f16 or bf16, the result in their
/// dtype): `y (g - sum(g y))`, or with `log` `g - exp(y) sum(g)`;
/// contiguous.
pub(crate) fn softmax_backward(
    gpu: &Gpu,
    y: &WgpuStorage,
    ly: &Layout,
    g: &WgpuStorage,
    lg: &Layout,
    dim: usize,
    log: bool,
) -> Result<WgpuStorage> {
    let op = "softmax_backward";
    validate::input(op, y.len(), ly)?;
    validate::input(op, g.len(), lg)?;
    validate::softmax_backward(ly, lg, dim, DType::F32)?;
    let dtype = common(op, &[y, g])?;
    let bindings = super::cast::operands(op, &[("ys", dtype), ("gs", dtype)])? + &binding(3, "os", true);
    let numel = ly.shape().numel();
    let out = WgpuStorage::uninit(gpu, op, DType::F32, numel)?;
    if numel == 0 {
        return narrowed(gpu, out, dtype);
    }
    super::indexable(op, &[y, g, &out])?;
    let lo = dense(ly);
    let (lay, rows, count) = rows_table(op, &[(ly, &[dim]), (lg, &[dim]), (&lo, &[dim])], 0.0)?;
    let (fold, result) = if log {
        ("s = s + gs_at(gb + g_off(j));", "gs_at(gb + g_off(j)) - exp(ys_at(yb + y_off(j))) * s")
    } else {
        ("s = s + gs_at(gb + g_off(j)) * ys_at(yb + y_off(j));", "ys_at(yb + y_off(j)) * (gs_at(gb + g_off(j)) - s)")
    };
    let body = format!(
        "let yb = y_base(row);\n\
         let gb = g_base(row);\n\
         let ob = o_base(row);\n\
         var s = 0.0;\n\
         for (var j = lane; j < n; j = j + lanes) {{ {fold} }}\n\
         s = all_sum(s, lid.x);\n\
         if (owns) {{ for (var j = lane; j < n; j = j + lanes) {{ os[ob + o_off(j)] = {result}; }} }}"
    );
    run(gpu, op, &lay, rows, count, &bindings, &["y", "g", "o"], &body, &[buf(y, op)?, buf(g, op)?, buf(&out, op)?])?;
    narrowed(gpu, out, dtype)
}

/// `(xhat, rstd)` over the trailing `k` dims of `s` (f32, f16 or bf16,
/// both results in its dtype): `mean = sum / n`, `var = sum((x -
/// mean)^2) / n`, `rstd = 1 / sqrt(var + eps)`, `xhat = (x - mean) rstd`;
/// `None` where the composite serves better (rows of no elements, whose
/// statistics are NaN).
pub(crate) fn layer_norm(gpu: &Gpu, s: &WgpuStorage, layout: &Layout, k: usize, eps: f64) -> Result<Option<(WgpuStorage, WgpuStorage)>> {
    let op = "layer_norm";
    validate::input(op, s.len(), layout)?;
    validate::layer_norm(op, layout, k)?;
    let r = layout.rank();
    let numel = validate::output(op, layout.shape(), DType::F32)?;
    let dims: Vec<usize> = (r - k..r).collect();
    let (lay, rows, count) = rows_table(op, &[(layout, &dims)], eps as f32)?;
    if count == 0 {
        return Ok(None);
    }
    let dtype = s.dtype;
    let bindings = super::cast::operands(op, &[("xs", dtype)])? + &binding(2, "ys", true) + &binding(3, "rs", true);
    let xhat = WgpuStorage::uninit(gpu, op, DType::F32, numel)?;
    let rstd = WgpuStorage::uninit(gpu, op, DType::F32, rows)?;
    if rows > 0 {
        super::indexable(op, &[s, &xhat])?;
        let body = "let xb = x_base(row);\n\
            let cnt = f32(n);\n\
            var s = 0.0;\n\
            for (var j = lane; j < n; j = j + lanes) { s = s + xs_at(xb + x_off(j)); }\n\
            let mean = all_sum(s, lid.x) / cnt;\n\
            var q = 0.0;\n\
            for (var j = lane; j < n; j = j + lanes) { let d = xs_at(xb + x_off(j)) - mean; q = q + d * d; }\n\
            let r = 1.0 / sqrt_f(all_sum(q, lid.x) / cnt + bitcast<f32>(lay[2]));\n\
            if (owns) { for (var j = lane; j < n; j = j + lanes) { ys[row * n + j] = (xs_at(xb + x_off(j)) - mean) * r; } }\n\
            if (owns && lane == 0u) { rs[row] = r; }";
        run(gpu, op, &lay, rows, count, &bindings, &["x"], body, &[buf(s, op)?, buf(&xhat, op)?, buf(&rstd, op)?])?;
    }
    Ok(Some((narrowed(gpu, xhat, dtype)?, narrowed(gpu, rstd, dtype)?)))
}

/// The input gradient of [`layer_norm`] from the gradient `g` of `xhat`
/// (all three operands f32, f16 or bf16, the result in their dtype):
/// `((g - mean(g)) - xhat mean(g xhat)) rstd` over the trailing `k` dims;
/// contiguous.
pub(crate) fn layer_norm_backward(
    gpu: &Gpu,
    (g, lg): (&WgpuStorage, &Layout),
    (xhat, lx): (&WgpuStorage, &Layout),
    (rstd, lr): (&WgpuStorage, &Layout),
    k: usize,
) -> Result<WgpuStorage> {
    let op = "layer_norm_backward";
    for (s, l) in [(g, lg), (xhat, lx), (rstd, lr)] {
        validate::input(op, s.len(), l)?;
    }
    validate::layer_norm_backward(lg, lx, lr, k, DType::F32)?;
    let dtype = common(op, &[g, xhat, rstd])?;
    let bindings = super::cast::operands(op, &[("gs", dtype), ("xs", dtype), ("rs", dtype)])? + &binding(4, "os", true);
    let numel = lg.shape().numel();
    let out = WgpuStorage::uninit(gpu, op, DType::F32, numel)?;
    if numel == 0 {
        return narrowed(gpu, out, dtype);
    }
    super::indexable(op, &[g, xhat, rstd, &out])?;
    let r = lg.rank();
    let dims: Vec<usize> = (r - k..r).collect();
    let (lay, rows, count) = rows_table(op, &[(lg, &dims), (lx, &dims), (lr, &dims)], 0.0)?;
    let body = "let gb = g_base(row);\n\
        let xb = x_base(row);\n\
        let cnt = f32(n);\n\
        var a = 0.0;\n\
        var b = 0.0;\n\
        for (var j = lane; j < n; j = j + lanes) { let gv = gs_at(gb + g_off(j)); a = a + gv; b = b + gv * xs_at(xb + x_off(j)); }\n\
        let m1 = all_sum(a, lid.x) / cnt;\n\
        let m2 = all_sum(b, lid.x) / cnt;\n\
        let r = rs_at(r_base(row));\n\
        if (owns) { for (var j = lane; j < n; j = j + lanes) { os[row * n + j] = ((gs_at(gb + g_off(j)) - m1) - xs_at(xb + x_off(j)) * m2) * r; } }";
    run(gpu, op, &lay, rows, count, &bindings, &["g", "x", "r"], body, &[buf(g, op)?, buf(xhat, op)?, buf(rstd, op)?, buf(&out, op)?])?;
    narrowed(gpu, out, dtype)
}
