//! Binary ops on int64, strided and broadcast, as the CPU's
//! (`autograd_core::scalar::binary_i64`): `+ - *` wrap, comparisons give 1
//! or 0, `maximum`, `minimum` and `threshold_backward`. WGSL has no 64-bit
//! integer, so an element is its little-endian words `(low, high)` and the
//! arithmetic carries between them. Division and `pow` take the host path
//! (division is not an integer op here; `pow` squares up to 63 times).

use super::elementwise::strided_binary;
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::{BinaryOp, DType, Layout, Result};

/// Two's-complement arithmetic and signed comparison on `vec2<u32>`
/// `(low, high)` pairs.
const INT64: &str = r#"
fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}
// the whole 64-bit product of two words, from 16-bit halves
fn wide32(a: u32, b: u32) -> vec2<u32> {
    let al = a & 0xffffu; let ah = a >> 16u; let bl = b & 0xffffu; let bh = b >> 16u;
    let ll = al * bl; let lh = al * bh; let hl = ah * bl;
    let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
    return vec2<u32>((ll & 0xffffu) | (mid << 16u), ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u));
}
fn mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let p = wide32(a.x, b.x);
    return vec2<u32>(p.x, p.y + a.x * b.y + a.y * b.x);
}
fn lt64(a: vec2<u32>, b: vec2<u32>) -> bool {
    if (a.y != b.y) { return bitcast<i32>(a.y) < bitcast<i32>(b.y); }
    return a.x < b.x;
}
fn eq64(a: vec2<u32>, b: vec2<u32>) -> bool { return a.x == b.x && a.y == b.y; }
fn flag(c: bool) -> vec2<u32> { return vec2<u32>(select(0u, 1u, c), 0u); }
"#;

/// The WGSL of `op` on int64 `a` and `b`, or `None` where the host path serves it.
fn expr(op: BinaryOp) -> Option<&'static str> {
    Some(match op {
        BinaryOp::Add => "add64(a, b)",
        BinaryOp::Sub => "sub64(a, b)",
        BinaryOp::Mul => "mul64(a, b)",
        BinaryOp::Maximum => "select(a, b, lt64(a, b))",
        BinaryOp::Minimum => "select(a, b, lt64(b, a))",
        // `a` where `b > 0`, else 0
        BinaryOp::ThresholdBackward => "select(vec2<u32>(0u, 0u), a, lt64(vec2<u32>(0u, 0u), b))",
        BinaryOp::Eq => "flag(eq64(a, b))",
        BinaryOp::Ne => "flag(!eq64(a, b))",
        BinaryOp::Lt => "flag(lt64(a, b))",
        BinaryOp::Le => "flag(!lt64(b, a))",
        BinaryOp::Gt => "flag(lt64(b, a))",
        BinaryOp::Ge => "flag(!lt64(a, b))",
        BinaryOp::Div | BinaryOp::Pow | BinaryOp::GeluBackward => return None,
    })
}

/// Whether `op` on int64 has a kernel.
pub(crate) fn on_device(op: BinaryOp) -> bool {
    expr(op).is_some()
}

/// `op` on int64 `a` and `b` through their layouts (one shape: broadcast
/// dims carry stride 0), an op [`on_device`] accepts.
pub(crate) fn binary(gpu: &Gpu, op: BinaryOp, a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
    let Some(formula) = expr(op) else {
        return Err(autograd_core::Error::msg(format!("binary op: no int64 kernel for {op:?}")));
    };
    let body = format!(
        "let ka = at(i, 0u);\n\
         let kb = at(i, 1u);\n\
         let a = vec2<u32>(xs[2u * ka], xs[2u * ka + 1u]);\n\
         let b = vec2<u32>(zs[2u * kb], zs[2u * kb + 1u]);\n\
         let v = {formula};\n\
         ys[2u * i] = v.x;\n\
         ys[2u * i + 1u] = v.y;\n"
    );
    strided_binary(gpu, DType::I64, "u32", INT64, &body, (a, la), (b, lb))
}
