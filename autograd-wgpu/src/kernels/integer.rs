//! Binary ops on int64, strided and broadcast, as the CPU's
//! (`autograd_core::scalar::binary_i64`): `+ - *` wrap, comparisons give 1
//! or 0, `maximum`, `minimum`, `threshold_backward` and `pow` (square and
//! multiply over the whole exponent). WGSL has no 64-bit integer, so an
//! element is its little-endian words `(low, high)` and the arithmetic
//! carries between them. Division takes the host path, whose `Err` says
//! that integer tensors divide as floats.

use super::elementwise::strided_binary;
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::{BinaryOp, DType, Layout, Result};

/// Two's-complement arithmetic and signed comparison on `vec2<u32>`
/// `(low, high)` pairs.
pub(crate) const INT64: &str = concat!(
    wide32_wgsl!(),
    r#"
fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
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
// square and multiply over the whole exponent, wrapping; a negative
// exponent gives the exact power truncated toward zero (PyTorch's): 1 for
// a base of 1, +-1 for -1 by the exponent's parity, 0 otherwise
fn pow64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let one = vec2<u32>(1u, 0u);
    if ((b.y >> 31u) == 1u) {
        if (eq64(a, one)) { return one; }
        if (eq64(a, vec2<u32>(0xffffffffu, 0xffffffffu))) { return select(one, a, (b.x & 1u) == 1u); }
        return vec2<u32>(0u, 0u);
    }
    var base = a;
    var acc = one;
    var e = b;
    loop {
        if (e.x == 0u && e.y == 0u) { break; }
        if ((e.x & 1u) == 1u) { acc = mul64(acc, base); }
        base = mul64(base, base);
        e = vec2<u32>((e.x >> 1u) | (e.y << 31u), e.y >> 1u);
    }
    return acc;
}
"#
);

/// The WGSL of `op` on int64 `a` and `b`, or `None` where the host path serves it.
fn expr(op: BinaryOp) -> Option<&'static str> {
    Some(match op {
        BinaryOp::Add => "add64(a, b)",
        BinaryOp::Sub => "sub64(a, b)",
        BinaryOp::Mul => "mul64(a, b)",
        BinaryOp::Pow => "pow64(a, b)",
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
        BinaryOp::Div | BinaryOp::GeluBackward => return None,
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
