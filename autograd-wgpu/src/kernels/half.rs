//! Unary and binary ops on f16 and bf16 as one kernel each: every operand
//! element widened as it is read (the cast kernel's conversions, exact),
//! the op's f32 formula ([`unary_expr`], [`binary_expr`]), the result
//! rounded to nearest even as it is written, two elements per invocation
//! (one output word).
//!
//! The same bits as widening the operands, running the f32 kernel and
//! rounding the result (`low::through_f32`, which scatter-add, fold and
//! attention take; a NaN result aside, whose sign and payload the compiler picks),
//! in one launch instead of three or four and without the f32
//! temporaries: these two families are most of a mixed-precision step's
//! launches.

use super::cast::{self, CONVERSIONS};
use super::elementwise::{FLOAT, binary_expr, unary_expr};
use super::{GROUP, STRIDED, buf, constants, grid, launch, meta};
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::{BinaryOp, DType, Error, Layout, Result, UnaryOp, validate};

/// Whether these kernels serve the dtype.
pub(crate) fn served(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

/// Element `index` of the operand array `array` of `dtype`, widened.
fn load(dtype: DType, array: &str, index: &str) -> String {
    cast::load(dtype, array, index).unwrap_or_default()
}

/// `op` on the f16 or bf16 `s` through `layout`, in `s`'s dtype.
pub(crate) fn unary(gpu: &Gpu, op: UnaryOp, s: &WgpuStorage, layout: &Layout) -> Result<WgpuStorage> {
    let (expr, params) = unary_expr(op);
    let read = format!("let x = {};", load(s.dtype, "xs", "at(e, 0u)"));
    run(gpu, "unary op", &[(s, layout)], &read, expr, params)
}

/// `op` on the f16 or bf16 `a` and `b` (one dtype, one shape: broadcast
/// dims carry stride 0), in their dtype (comparisons give 1 or 0).
pub(crate) fn binary(gpu: &Gpu, op: BinaryOp, a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
    let name = "binary op";
    if a.dtype != b.dtype {
        return Err(Error::DTypeMismatch { op: name, lhs: a.dtype, rhs: b.dtype });
    }
    validate::same_shape(name, la, lb)?;
    let read = format!("let a = {};\n let b = {};", load(a.dtype, "xs", "at(e, 0u)"), load(b.dtype, "x1", "at(e, 1u)"));
    run(gpu, name, &[(a, la), (b, lb)], &read, binary_expr(op), [0.0; 2])
}

/// The launch both share: operands bound as `xs`, `x1` (words), the
/// output `ys`, the parameters `p` when `expr` reads them; `read` sets
/// the formula's inputs for output element `e`.
fn run(
    gpu: &Gpu,
    name: &'static str,
    operands: &[(&WgpuStorage, &Layout)],
    read: &str,
    expr: &str,
    params: [f32; 2],
) -> Result<WgpuStorage> {
    let dtype = operands[0].0.dtype;
    if !served(dtype) {
        return Err(Error::msg(format!("{name}: no half kernel for {dtype:?}")));
    }
    for (s, l) in operands {
        validate::input(name, s.len(), l)?;
    }
    let n = validate::output(name, operands[0].1.shape(), dtype)?;
    let out = WgpuStorage::uninit(gpu, name, dtype, n)?;
    if n == 0 {
        return Ok(out);
    }
    // the output too: broadcast operands may be far smaller than it
    let mut storages: Vec<&WgpuStorage> = operands.iter().map(|(s, _)| *s).collect();
    storages.push(&out);
    super::indexable(name, &storages)?;
    let layouts: Vec<&Layout> = operands.iter().map(|(_, l)| *l).collect();
    let m = constants(gpu, bytemuck::cast_slice(&meta(name, &layouts)?));
    let uses_params = expr.contains("p[");
    // a parameter buffer only for the formulas that read one
    let p = uses_params.then(|| constants(gpu, bytemuck::cast_slice(&params)));
    let narrow = if dtype == DType::F16 { "f32_to_f16" } else { "f32_to_bf16" };
    let mut decls = String::from("@group(0) @binding(0) var<storage, read> lay: array<u32>;\n");
    for k in 0..operands.len() {
        let array = if k == 0 { "xs".to_string() } else { format!("x{k}") };
        decls.push_str(&format!("@group(0) @binding({}) var<storage, read> {array}: array<u32>;\n", 1 + k));
    }
    let y = 1 + operands.len();
    decls.push_str(&format!("@group(0) @binding({y}) var<storage, read_write> ys: array<u32>;\n"));
    if uses_params {
        decls.push_str(&format!("@group(0) @binding({}) var<storage, read> p: array<f32>;\n", y + 1));
    }
    let source = format!(
        "{decls}{STRIDED}\n{FLOAT}\n{CONVERSIONS}\n\
         @compute @workgroup_size({GROUP})\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {{\n\
             let w = gid.x + gid.y * nw.x * {GROUP}u;\n\
             if (w > (lay[0] - 1u) / 2u) {{ return; }}\n\
             var word = 0u;\n\
             for (var t = 0u; t < 2u; t = t + 1u) {{\n\
                 let e = 2u * w + t;\n\
                 if (e >= lay[0]) {{ break; }}\n\
                 {read}\n\
                 word = word | ({narrow}({expr}) << (16u * t));\n\
             }}\n\
             ys[w] = word;\n\
         }}\n"
    );
    let mut bufs: Vec<&wgpu::Buffer> = vec![&m];
    for (s, _) in operands {
        bufs.push(buf(s, name)?);
    }
    bufs.push(buf(&out, name)?);
    if let Some(p) = &p {
        bufs.push(p);
    }
    let words = u32::try_from(n.div_ceil(2)).map_err(|_| Error::msg(format!("{name}: {n} elements are past the GPU grid")))?;
    launch(gpu, name, &source, &bufs, grid(gpu, name, words.div_ceil(GROUP))?)?;
    Ok(out)
}
