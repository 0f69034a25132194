//! Unary and binary elementwise ops on f32, strided and broadcast: one WGSL
//! template per family, the op's formula spliced in from [`unary_expr`] and
//! [`binary_expr`] (an exhaustive match, so a new `UnaryOp`/`BinaryOp` row
//! does not compile until it has its GPU formula too).
//!
//! The formulas follow `autograd_core::scalar` (the CPU backend's): NaN
//! tested on the bits (WGSL lets a compiler assume floats are never NaN),
//! `pow` with PyTorch's signs for negative bases and integer exponents (WGSL
//! leaves `pow` of a negative base undefined), `erf` and `tanh` by the
//! same approximations as the CPU's f32, `log1p` without cancellation,
//! `sin` and `cos` with an exact argument reduction (Payne and Hanek's, on
//! 256 bits of 2/pi) before their polynomials.

use super::{ENTRY, GROUP, STRIDED, buf, constants, grid, launch, meta};
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::{BinaryOp, DType, Layout, Result, UnaryOp, validate};

/// Float helpers every formula may call.
pub(crate) const FLOAT: &str = concat!(
    wide32_wgsl!(),
    r#"
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn nan() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn neg_inf() -> f32 { return bitcast<f32>(0xff800000u); }
// the reductions' max and min: NaN propagates, a tie keeps the first operand
fn max_nan(a: f32, b: f32) -> f32 { return select(select(a, b, b > a), nan(), is_nan(a) || is_nan(b)); }
fn min_nan(a: f32, b: f32) -> f32 { return select(select(a, b, b < a), nan(), is_nan(a) || is_nan(b)); }
fn sigmoid_f(x: f32) -> f32 { let e = exp(-abs(x)); let d = 1.0 + e; return select(e / d, 1.0 / d, x >= 0.0); }
fn erf_f(v: f32) -> f32 {
    if (is_nan(v)) { return v; }
    let x = clamp(v, -4.0, 4.0);
    let x2 = x * x;
    var p = -2.7261423e-10;
    p = p * x2 + 2.7706814e-8; p = p * x2 - 2.101024e-6; p = p * x2 - 5.6925064e-5;
    p = p * x2 - 7.3499063e-4; p = p * x2 - 2.9546e-3; p = p * x2 - 1.6096033e-2;
    var q = -1.4566072e-5;
    q = q * x2 - 2.1337406e-4; q = q * x2 - 1.682827e-3; q = q * x2 - 7.3733292e-3; q = q * x2 - 1.426474e-2;
    return select(p * x / q, sign(v), abs(v) >= 3.9);
}
// devices may flush subnormal inputs to zero: scale them into the normal range first
fn is_subnormal(x: f32) -> bool { let b = bitcast<u32>(x) & 0x7fffffffu; return b != 0u && b < 0x00800000u; }
fn log_f(x: f32) -> f32 {
    if (x < 0.0 || is_nan(x)) { return nan(); }
    if (is_subnormal(x)) { return log(x * 16777216.0) - 16.635532; }
    if (x == 0.0) { return neg_inf(); }
    return log(x);
}
fn sqrt_f(x: f32) -> f32 {
    if (x < 0.0 || is_nan(x)) { return nan(); }
    if (is_subnormal(x)) { return sqrt(x * 16777216.0) / 4096.0; }
    return sqrt(x);
}
fn log1p_f(x: f32) -> f32 {
    if (is_nan(x) || x < -1.0) { return nan(); }
    let u = 1.0 + x;
    if (u == 1.0) { return x; }
    if (u == 0.0) { return neg_inf(); }
    if (x > 1e30) { return log(x); }
    return log(u) * (x / (u - 1.0));
}
fn powi_f(x: f32, n: i32) -> f32 {
    var b = x; var e = abs(n); var r = 1.0;
    loop { if (e == 0) { break; } if ((e & 1) == 1) { r = r * b; } b = b * b; e = e >> 1u; }
    return select(r, 1.0 / r, n < 0);
}
fn pow_f(x: f32, p: f32) -> f32 {
    if (p == 0.0 || x == 1.0) { return 1.0; }
    if (is_nan(x) || is_nan(p)) { return nan(); }
    let integer = floor(p) == p && abs(p) < 16777216.0;
    let odd = integer && abs(p) % 2.0 == 1.0;
    var m: f32;
    if (x == 0.0) { m = select(0.0, bitcast<f32>(0x7f800000u), p < 0.0); }
    else { m = exp2(p * log2(abs(x))); }
    if (x < 0.0 || (x == 0.0 && (bitcast<u32>(x) >> 31u) == 1u)) {
        // IEEE: (-inf)^p is +inf or 0 for a non-integer p, a negative finite base NaN
        if (!integer) { return select(select(nan(), select(0.0, bitcast<f32>(0x7f800000u), p > 0.0), x == neg_inf()), m, x == 0.0); }
        return select(m, -m, odd);
    }
    return m;
}
fn powf_f(x: f32, p: f32) -> f32 {
    if (p == 2.0) { return x * x; }
    if (p == 1.0) { return x; }
    if (p == 0.0) { return 1.0; }
    if (p == 3.0) { return x * x * x; }
    if (p == 0.5) { return sqrt_f(x); }
    if (p == -1.0) { return 1.0 / x; }
    if (floor(p) == p && abs(p) < 64.0) { return powi_f(x, i32(p)); }
    return pow_f(x, p);
}
fn copysign_f(m: f32, s: f32) -> f32 { return bitcast<f32>((bitcast<u32>(m) & 0x7fffffffu) | (bitcast<u32>(s) & 0x80000000u)); }
// the CPU's f32 tanh (Cephes): an odd polynomial below 0.625, where
// 1 - 2 / (e^2|x| + 1) would cancel, that form above (accurate near +-1,
// where a device's own tanh may be off by more than GELU's 1 + tanh can take)
fn tanh_f(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = abs(x);
    if (a < 0.625) {
        let z = x * x;
        let p = ((((-5.7049887e-3 * z + 2.063909e-2) * z - 5.3739716e-2) * z + 1.3331442e-1) * z - 3.333328e-1) * z * x + x;
        return copysign_f(p, x);
    }
    if (a > 44.0) { return sign(x); }
    return copysign_f(1.0 - 2.0 / (exp(2.0 * a) + 1.0), x);
}
// sin and cos: the argument reduced to r in [-pi/4, pi/4] and a quadrant,
// then Cephes' f32 polynomials (WGSL's own sin and cos reduce large
// arguments poorly: sin(3e38) was -1 on llvmpipe)
fn sin_poly(r: f32) -> f32 { let z = r * r; return ((-1.9515296e-4 * z + 8.3321609e-3) * z - 1.6666655e-1) * z * r + r; }
fn cos_poly(r: f32) -> f32 { let z = r * r; return ((2.4433157e-5 * z - 1.3887316e-3) * z + 4.1666646e-2) * z * z - 0.5 * z + 1.0; }
// bits 1..256 of 2/pi after the binary point, most significant first
var<private> TWO_OVER_PI: array<u32, 8> = array<u32, 8>(
    0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u, 0xdb629599u, 0x3c439041u, 0xfe5163abu, 0xdebbc561u);
// the 32 bits b(p+1) .. b(p+32) of 2/pi = sum b(k) 2^-k (b(k) = 0 for k < 1)
fn two_over_pi_bits(p: i32) -> u32 {
    if (p <= -32) { return 0u; }
    if (p < 0) { return TWO_OVER_PI[0] >> u32(-p); }
    let i = u32(p) / 32u;
    let o = u32(p) % 32u;
    if (o == 0u) { return TWO_OVER_PI[i]; }
    return (TWO_OVER_PI[i] << o) | (TWO_OVER_PI[i + 1u] >> (32u - o));
}
// Payne and Hanek's reduction of a finite a > pi/4: a = m 2^s (m of 24 bits)
// times 2/pi, exactly on the 96 bits of 2/pi that reach the last two bits
// of the integer part and 64 below the point (the bits before weigh a
// multiple of 4, those after less than 2^-70); returns (r, q) with
// a = (4n + q) pi/2 + r
fn reduce_pio2(a: f32) -> vec2<f32> {
    let b = bitcast<u32>(a);
    let m = (b & 0x7fffffu) | 0x800000u;
    let k0 = i32(b >> 23u) - 127 - 24;
    let c = wide32(m, two_over_pi_bits(k0 + 63));
    let w = wide32(m, two_over_pi_bits(k0 + 31));
    let t = wide32(m, two_over_pi_bits(k0 - 1));
    // the product's words 0..2; bits 94, 95 are the quadrant
    let p0 = c.x;
    let p1 = c.y + w.x;
    let p2 = w.y + t.x + select(0u, 1u, p1 < c.y);
    var q = p2 >> 30u;
    var hi = (p2 << 2u) | (p1 >> 30u);
    var lo = (p1 << 2u) | (p0 >> 30u);
    // a fraction of one half or more rounds to the next quadrant
    let neg = hi >= 0x80000000u;
    if (neg) {
        q = q + 1u;
        lo = ~lo + 1u;
        hi = ~hi + select(0u, 1u, lo == 0u);
    }
    if (hi == 0u && lo == 0u) { return vec2<f32>(0.0, f32(q & 3u)); }
    let lz = select(countLeadingZeros(hi), 32u + countLeadingZeros(lo), hi == 0u);
    var nh = hi;
    var nl = lo;
    if (lz >= 32u) { nh = lo << (lz - 32u); nl = 0u; } else if (lz > 0u) { nh = (hi << lz) | (lo >> (32u - lz)); nl = lo << lz; }
    // the fraction's first 48 bits as two exact f32s, times pi/2 in two parts
    let vh = f32(nh >> 8u) * bitcast<f32>(0x33800000u);
    let vl = f32(((nh & 0xffu) << 16u) | (nl >> 16u)) * bitcast<f32>(0x27800000u);
    let pio2_hi = bitcast<f32>(0x3fc90fdbu);
    let pio2_lo = bitcast<f32>(0xb33bbd2eu);
    let r = ldexp(vh * pio2_hi + (vh * pio2_lo + vl * pio2_hi), -i32(lz));
    return vec2<f32>(select(r, -r, neg), f32(q & 3u));
}
fn sin_f(x: f32) -> f32 {
    if ((bitcast<u32>(x) & 0x7fffffffu) >= 0x7f800000u) { return nan(); }
    // the sign of x, -0 included (the polynomial's sum would round -0 to +0)
    if (abs(x) <= 0.7853982) { return copysign_f(sin_poly(x), x); }
    let t = reduce_pio2(abs(x));
    let q = u32(t.y);
    let y = select(sin_poly(t.x), cos_poly(t.x), (q & 1u) == 1u);
    return select(y, -y, ((q & 2u) == 2u) != (x < 0.0));
}
fn cos_f(x: f32) -> f32 {
    if ((bitcast<u32>(x) & 0x7fffffffu) >= 0x7f800000u) { return nan(); }
    if (abs(x) <= 0.7853982) { return cos_poly(x); }
    let t = reduce_pio2(abs(x));
    let q = u32(t.y);
    let y = select(cos_poly(t.x), sin_poly(t.x), (q & 1u) == 1u);
    return select(y, -y, ((q + 1u) & 2u) == 2u);
}
fn gelu_f(x: f32) -> f32 { return x * 0.5 * (1.0 + erf_f(x * 0.70710678)); }
fn gelu_bw(g: f32, x: f32) -> f32 {
    let cdf = 0.5 * (1.0 + erf_f(x * 0.70710678));
    let pdf = exp(-0.5 * x * x) * 0.39894228;
    return g * (cdf + x * pdf);
}
fn softplus_f(x: f32, beta: f32, threshold: f32) -> f32 {
    let bx = x * beta;
    if (bx > threshold) { return x; }
    return (max(bx, 0.0) + log1p_f(exp(-abs(bx)))) / beta;
}
"#
);

/// The formula of a unary op on `x` (`p[0]`, `p[1]` its parameters), and
/// the parameters.
pub(crate) fn unary_expr(op: UnaryOp) -> (&'static str, [f32; 2]) {
    match op {
        UnaryOp::Neg => ("-x", [0.0; 2]),
        UnaryOp::Exp => ("exp(x)", [0.0; 2]),
        UnaryOp::Log => ("log_f(x)", [0.0; 2]),
        UnaryOp::Sqrt => ("sqrt_f(x)", [0.0; 2]),
        UnaryOp::Abs => ("abs(x)", [0.0; 2]),
        UnaryOp::Tanh => ("tanh_f(x)", [0.0; 2]),
        UnaryOp::Sigmoid => ("sigmoid_f(x)", [0.0; 2]),
        // `x < 0` is false for NaN and -0.0, which pass through
        UnaryOp::Relu => ("select(x, 0.0, x < 0.0)", [0.0; 2]),
        UnaryOp::Sign => ("select(select(0.0, -1.0, x < 0.0), 1.0, x > 0.0)", [0.0; 2]),
        UnaryOp::Recip => ("1.0 / x", [0.0; 2]),
        UnaryOp::Square => ("x * x", [0.0; 2]),
        UnaryOp::Powf(p) => ("powf_f(x, p[0])", [p as f32, 0.0]),
        UnaryOp::LeakyRelu(s) => ("select(x * p[0], x, x > 0.0)", [s as f32, 0.0]),
        UnaryOp::Gelu => ("gelu_f(x)", [0.0; 2]),
        UnaryOp::GeluTanh => ("0.5 * x * (1.0 + tanh_f(0.7978845608 * (x + 0.044715 * x * x * x)))", [0.0; 2]),
        UnaryOp::Silu => ("x * sigmoid_f(x)", [0.0; 2]),
        UnaryOp::Softplus { beta, threshold } => ("softplus_f(x, p[0], p[1])", [beta as f32, threshold as f32]),
        UnaryOp::Clamp { min, max } => ("select(min(max(x, p[0]), p[1]), x, is_nan(x))", [min as f32, max as f32]),
        UnaryOp::Erf => ("erf_f(x)", [0.0; 2]),
        UnaryOp::Log1p => ("log1p_f(x)", [0.0; 2]),
        UnaryOp::Sin => ("sin_f(x)", [0.0; 2]),
        UnaryOp::Cos => ("cos_f(x)", [0.0; 2]),
    }
}

/// The formula of a binary op on `a` and `b` (comparisons give 1 or 0).
pub(crate) fn binary_expr(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "a + b",
        BinaryOp::Sub => "a - b",
        BinaryOp::Mul => "a * b",
        BinaryOp::Div => "a / b",
        BinaryOp::Pow => "pow_f(a, b)",
        BinaryOp::Maximum => "select(select(b, a, a >= b), nan(), is_nan(a) || is_nan(b))",
        BinaryOp::Minimum => "select(select(b, a, a <= b), nan(), is_nan(a) || is_nan(b))",
        // `!(b <= 0)`: a NaN input passes the gradient, as PyTorch
        BinaryOp::ThresholdBackward => "select(a, 0.0, b <= 0.0)",
        BinaryOp::GeluBackward => "gelu_bw(a, b)",
        BinaryOp::Eq => "select(0.0, 1.0, a == b && !is_nan(a))",
        BinaryOp::Ne => "select(0.0, 1.0, a != b || is_nan(a) || is_nan(b))",
        BinaryOp::Lt => "select(0.0, 1.0, a < b)",
        BinaryOp::Le => "select(0.0, 1.0, a <= b)",
        BinaryOp::Gt => "select(0.0, 1.0, a > b)",
        BinaryOp::Ge => "select(0.0, 1.0, a >= b)",
    }
}

/// `op` on f32 `x` through `layout`.
pub(crate) fn unary(gpu: &Gpu, op: UnaryOp, s: &WgpuStorage, layout: &Layout) -> Result<WgpuStorage> {
    let (expr, params) = unary_expr(op);
    map(gpu, "unary op", expr, params, s, layout)
}

fn map(gpu: &Gpu, name: &'static str, expr: &str, params: [f32; 2], s: &WgpuStorage, layout: &Layout) -> Result<WgpuStorage> {
    validate::input(name, s.len(), layout)?;
    super::indexable(name, &[s])?;
    let n = validate::output(name, layout.shape(), DType::F32)?;
    let out = WgpuStorage::uninit(gpu, name, DType::F32, n)?;
    if n == 0 {
        return Ok(out);
    }
    let m = constants(gpu, bytemuck::cast_slice(&meta(name, &[layout])?));
    let p = constants(gpu, bytemuck::cast_slice(&params));
    let uses_params = expr.contains("p[");
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> xs: array<f32>;\n\
         @group(0) @binding(2) var<storage, read_write> ys: array<f32>;\n\
         {params_decl}\n{STRIDED}\n{FLOAT}\n\
         {ENTRY}\
             let x = xs[at(i, 0u)];\n\
             ys[i] = {expr};\n\
         }}\n",
        params_decl = if uses_params { "@group(0) @binding(3) var<storage, read> p: array<f32>;" } else { "" },
    );
    let (x, y) = (buf(s, name)?, buf(&out, name)?);
    let mut bufs = vec![&m, x, y];
    if uses_params {
        bufs.push(&p);
    }
    launch(gpu, name, &source, &bufs, grid(gpu, name, (n as u32).div_ceil(GROUP))?)?;
    Ok(out)
}

/// `op` on f32 `a` and `b` through their layouts (one shape: broadcast dims
/// carry stride 0).
pub(crate) fn binary(gpu: &Gpu, op: BinaryOp, a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
    let body = format!("let a = xs[at(i, 0u)];\n let b = zs[at(i, 1u)];\n ys[i] = {};\n", binary_expr(op));
    strided_binary(gpu, DType::F32, "f32", FLOAT, &body, (a, la), (b, lb))
}

/// The launch every strided binary kernel shares: `a` and `b` of one shape
/// (broadcast dims carry stride 0) read as arrays of `word` (`xs`, `zs`),
/// a contiguous output of `dtype` (`ys`), and `body`, run for each output
/// element `i` with `helpers` and [`STRIDED`]'s `at` in scope.
pub(crate) fn strided_binary(
    gpu: &Gpu,
    dtype: DType,
    word: &str,
    helpers: &str,
    body: &str,
    (a, la): (&WgpuStorage, &Layout),
    (b, lb): (&WgpuStorage, &Layout),
) -> Result<WgpuStorage> {
    let name = "binary op";
    validate::same_shape(name, la, lb)?;
    validate::input(name, a.len(), la)?;
    validate::input(name, b.len(), lb)?;
    let n = validate::output(name, la.shape(), dtype)?;
    let out = WgpuStorage::uninit(gpu, name, dtype, n)?;
    if n == 0 {
        return Ok(out);
    }
    // the output too: broadcast operands may be far smaller than it
    super::indexable(name, &[a, b, &out])?;
    let m = constants(gpu, bytemuck::cast_slice(&meta(name, &[la, lb])?));
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> xs: array<{word}>;\n\
         @group(0) @binding(2) var<storage, read> zs: array<{word}>;\n\
         @group(0) @binding(3) var<storage, read_write> ys: array<{word}>;\n\
         {STRIDED}\n{helpers}\n\
         {ENTRY}\
             {body}\
         }}\n"
    );
    launch(gpu, name, &source, &[&m, buf(a, name)?, buf(b, name)?, buf(&out, name)?], grid(gpu, name, (n as u32).div_ceil(GROUP))?)?;
    Ok(out)
}

/// Sets every element of an f32 storage to `value`.
pub(crate) fn fill(gpu: &Gpu, out: &WgpuStorage, value: f32) -> Result<WgpuStorage> {
    fill_bytes(gpu, out, &value.to_le_bytes())
}

/// Sets every element of `out` to the element whose little-endian bytes
/// are `element` (1, 2, 4 or 8 bytes): the buffer is written as 32-bit
/// words repeating the element (a period of two words for 8-byte ones).
pub(crate) fn fill_bytes(gpu: &Gpu, out: &WgpuStorage, element: &[u8]) -> Result<WgpuStorage> {
    let name = "full";
    let n = out.len();
    if n == 0 {
        return Ok(out.clone());
    }
    let mut pattern = [0u8; 8];
    match element.len() {
        1 | 2 | 4 => pattern.chunks_mut(element.len()).for_each(|c| c.copy_from_slice(element)),
        8 => pattern.copy_from_slice(element),
        w => return Err(autograd_core::Error::msg(format!("{name}: no fill for {w}-byte elements"))),
    }
    let words = (n * element.len()).div_ceil(4);
    let count = u32::try_from(words)
        .map_err(|_| autograd_core::Error::msg(format!("{name}: {n} elements are past the GPU kernels' 32-bit indices")))?;
    let lo = u32::from_le_bytes([pattern[0], pattern[1], pattern[2], pattern[3]]);
    let hi = u32::from_le_bytes([pattern[4], pattern[5], pattern[6], pattern[7]]);
    let m = constants(gpu, bytemuck::cast_slice(&[count, lo, hi]));
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read_write> ys: array<u32>;\n\
         {ENTRY}\
             ys[i] = lay[1u + (i & 1u)];\n\
         }}\n"
    );
    launch(gpu, name, &source, &[&m, buf(out, name)?], grid(gpu, name, count.div_ceil(GROUP))?)?;
    Ok(out.clone())
}
