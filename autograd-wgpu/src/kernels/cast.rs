//! Casts between f32, f16, bf16, int64 and bool on the device, through any
//! strides, each conversion the CPU's bit for bit (`autograd_core`'s dtype
//! table): floats to int64 truncate toward zero and saturate (NaN gives
//! 0), int64 to f32 rounds once to nearest even (int64 to f16/bf16 goes
//! through f32, as the table's `from_i64`), f32 to f16/bf16 rounds to
//! nearest even (overflow to infinity, NaN kept quiet), anything nonzero
//! (NaN included) is `true`, and `true` is 1.
//!
//! WGSL's `pack2x16float` leaves overflow undefined and its rounding to the
//! implementation, so the half conversions work on the bits; f64 has no
//! WGSL type, so casts from or to it take the host path.
//!
//! One invocation writes one 32-bit word of the output: four bools, two
//! halves, one f32, or the two words of one int64. A cast of f16, bf16 or
//! bool to its own dtype is their strided copy: the elements' bits moved
//! as they are (the index kernels move whole words only).

use super::{GROUP, STRIDED, buf, constants, grid, launch, meta};
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::{DType, Error, Layout, Result, validate};

/// The conversions between the bits of the dtypes (`f16_to_f32` and
/// `bf16_to_f32` exact, f16's NaNs quieted; `f32_to_f16`, `f32_to_bf16` and `i64_to_f32` round to
/// nearest even; `f32_to_i64` truncates and saturates). An int64 is its
/// little-endian words `(low, high)`.
pub(crate) const CONVERSIONS: &str = r#"
fn f16_to_f32(h: u32) -> f32 {
    let s = (h >> 15u) << 31u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    // a subnormal is m * 2^-24, exact in f32
    if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * bitcast<f32>(0x33800000u))); }
    // a NaN comes out quiet, as F16C's and half's widening make it
    if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u) | select(0u, 0x400000u, m != 0u)); }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
fn bf16_to_f32(h: u32) -> f32 { return bitcast<f32>(h << 16u); }
fn f32_to_bf16(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return (b >> 16u) | 0x40u; }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
fn f32_to_f16(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    let sign = (x >> 16u) & 0x8000u;
    let e = x & 0x7f800000u;
    let m = x & 0x007fffffu;
    if (e == 0x7f800000u) { return sign | 0x7c00u | select(0u, 0x200u | (m >> 13u), m != 0u); }
    let he = i32(e >> 23u) - 112;
    if (he >= 31) { return sign | 0x7c00u; }
    if (he <= 0) {
        if (he < -10) { return sign; }
        let mm = m | 0x00800000u;
        let shift = u32(14 - he);
        let r = 1u << (shift - 1u);
        // round to nearest: the dropped half and any sticky bit or an odd result
        let up = (mm & r) != 0u && (mm & (3u * r - 1u)) != 0u;
        return sign | ((mm >> shift) + select(0u, 1u, up));
    }
    let up = (m & 0x1000u) != 0u && (m & 0x2fffu) != 0u;
    // a carry out of the mantissa steps the exponent, to infinity at most
    return (sign | (u32(he) << 10u) | (m >> 13u)) + select(0u, 1u, up);
}
fn i64_to_f32(lo: u32, hi: u32) -> f32 {
    let neg = (hi >> 31u) == 1u;
    var l = lo;
    var h = hi;
    if (neg) { l = ~lo + 1u; h = ~hi + select(0u, 1u, l == 0u); }
    if (h == 0u && l == 0u) { return 0.0; }
    let lz = select(countLeadingZeros(h), 32u + countLeadingZeros(l), h == 0u);
    // the magnitude shifted up to bit 63: 24 bits kept, then the round bit, then sticky bits
    var nh = h;
    var nl = l;
    if (lz >= 32u) { nh = l << (lz - 32u); nl = 0u; } else if (lz > 0u) { nh = (h << lz) | (l >> (32u - lz)); nl = l << lz; }
    var mant = nh >> 8u;
    var e = 190u - lz;
    let up = ((nh >> 7u) & 1u) == 1u && (((nh & 0x7fu) | nl) != 0u || (mant & 1u) == 1u);
    if (up) {
        mant = mant + 1u;
        if (mant == 0x1000000u) { mant = 0x800000u; e = e + 1u; }
    }
    return bitcast<f32>(select(0u, 0x80000000u, neg) | (e << 23u) | (mant & 0x7fffffu));
}
fn f32_to_i64(v: f32) -> vec2<u32> {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return vec2<u32>(0u, 0u); }
    let neg = (b >> 31u) == 1u;
    let e = i32((b >> 23u) & 0xffu) - 127;
    if (e < 0) { return vec2<u32>(0u, 0u); }
    if (e >= 63) { return select(vec2<u32>(0xffffffffu, 0x7fffffffu), vec2<u32>(0u, 0x80000000u), neg); }
    let m = (b & 0x7fffffu) | 0x800000u;
    var lo = 0u;
    var hi = 0u;
    if (e <= 23) { lo = m >> u32(23 - e); } else if (e < 55) { lo = m << u32(e - 23); hi = m >> u32(55 - e); } else { hi = m << u32(e - 55); }
    if (neg) { lo = ~lo + 1u; hi = ~hi + select(0u, 1u, lo == 0u); }
    return vec2<u32>(lo, hi);
}
"#;

/// Whether a cast between these dtypes has a kernel (f64 has none). A
/// "cast" to the same dtype is a strided copy, served here for the dtypes
/// narrower than a 32-bit word (f16, bf16, bool: moved as bits, several per
/// output word); the wider ones have the index kernels' copy.
pub(crate) fn on_device(from: DType, to: DType) -> bool {
    let served = |d: DType| matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::I64 | DType::Bool);
    served(from) && served(to) && (from != to || to.size_in_bytes() < 4)
}

/// The WGSL expression of the bits of element `index` (a storage index) of
/// the `u32` array `array` of a dtype narrower than a word, as a `u32`.
fn bits(from: DType, array: &str, index: &str) -> Option<String> {
    let (per, bits, mask) = match from.size_in_bytes() {
        2 => (2, 16, "0xffffu"),
        1 => (4, 8, "0xffu"),
        _ => return None,
    };
    Some(format!("({array}[({index}) / {per}u] >> ({bits}u * (({index}) % {per}u))) & {mask}"))
}

/// Read-only bindings from 1 on for a kernel's operands (`(name,
/// dtype)` each: f32, or f16/bf16 bound as words), each with its load
/// `{name}_at(i)`, element `i` as f32 (exact), and the conversions those
/// loads call; an `Err` names `op` for a dtype no kernel reads this way.
pub(crate) fn operands(op: &str, operands: &[(&str, DType)]) -> Result<String> {
    let mut out = String::new();
    if operands.iter().any(|(_, d)| *d != DType::F32) {
        out.push_str(CONVERSIONS);
    }
    for (k, (name, dtype)) in operands.iter().enumerate() {
        let (array, load) = match dtype {
            DType::F32 => ("f32", format!("{name}[i]")),
            DType::F16 | DType::BF16 => ("u32", load(*dtype, name, "i").unwrap_or_default()),
            other => return Err(Error::msg(format!("{op}: no kernel reads {other:?} operands"))),
        };
        out.push_str(&format!(
            "@group(0) @binding({}) var<storage, read> {name}: array<{array}>;\nfn {name}_at(i: u32) -> f32 {{ return {load}; }}\n",
            k + 1
        ));
    }
    Ok(out)
}

/// The WGSL expression of element `index` (a storage index) of the `u32`
/// array `array` of dtype `from` as f32 (exact), or `None` for int64 (read
/// as its two words).
pub(crate) fn load(from: DType, array: &str, index: &str) -> Option<String> {
    let bits = bits(from, array, index).unwrap_or_default();
    Some(match from {
        DType::F32 => format!("bitcast<f32>({array}[{index}])"),
        DType::F16 => format!("f16_to_f32({bits})"),
        DType::BF16 => format!("bf16_to_f32({bits})"),
        DType::Bool => format!("select(0.0, 1.0, ({bits}) != 0u)"),
        _ => return None,
    })
}

/// The output bits of element `e` converted to `to`: a WGSL statement that
/// sets `v` (a `u32`, or a `vec2<u32>` for int64), from `x` (an f32) or
/// from `lo`, `hi` (an int64).
fn convert(from: DType, to: DType) -> &'static str {
    match (from == DType::I64, to) {
        (false, DType::F32) => "let v = bitcast<u32>(x);",
        (false, DType::F16) => "let v = f32_to_f16(x);",
        (false, DType::BF16) => "let v = f32_to_bf16(x);",
        (false, DType::Bool) => "let v = select(0u, 1u, (bitcast<u32>(x) & 0x7fffffffu) != 0u);",
        (false, _) => "let v = f32_to_i64(x);",
        (true, DType::F32) => "let v = bitcast<u32>(i64_to_f32(lo, hi));",
        (true, DType::F16) => "let v = f32_to_f16(i64_to_f32(lo, hi));",
        (true, DType::BF16) => "let v = f32_to_bf16(i64_to_f32(lo, hi));",
        (true, _) => "let v = select(0u, 1u, (lo | hi) != 0u);",
    }
}

/// `s` through `layout` converted to `to` (a dtype pair [`on_device`]
/// accepts), contiguous.
pub(crate) fn cast(gpu: &Gpu, s: &WgpuStorage, layout: &Layout, to: DType) -> Result<WgpuStorage> {
    let from = s.dtype;
    if !on_device(from, to) {
        return Err(Error::msg(format!("to_dtype: no kernel casts {from:?} to {to:?}")));
    }
    let (read, conv) = match (bits(from, "xs", "k"), load(from, "xs", "k")) {
        // a move: the element's bits as they are
        (Some(bits), _) if from == to => (format!("let v = {bits};"), ""),
        (_, Some(expr)) => (format!("let x = {expr};"), convert(from, to)),
        _ => ("let lo = xs[2u * k];\n let hi = xs[2u * k + 1u];".to_string(), convert(from, to)),
    };
    per_word(gpu, s, layout, to, &read, conv)
}

/// `s` through `layout` with each element's bits moved to `to`, not
/// converted: f16, bf16 or bool elements spread one per 32-bit word (zero
/// above; `to` a 4-byte dtype labelling the words, a carrier for the
/// kernels that move whole words) or such words packed back (their low
/// bits) into `to`. `spread` then `pack` gives the bits back whatever
/// they are, NaN payloads included.
pub(crate) fn move_bits(gpu: &Gpu, s: &WgpuStorage, layout: &Layout, to: DType) -> Result<WgpuStorage> {
    let read = match (bits(s.dtype, "xs", "k"), to.size_in_bytes()) {
        (Some(bits), 4) => format!("let v = {bits};"),
        (None, size @ (1 | 2)) if s.dtype.size_in_bytes() == 4 => format!("let v = xs[k] & {}u;", (1u32 << (8 * size)) - 1),
        _ => return Err(Error::msg(format!("to_dtype: no bit move from {:?} to {to:?}", s.dtype))),
    };
    per_word(gpu, s, layout, to, &read, "")
}

/// The kernel of one invocation per output word shared by [`cast`] and
/// [`move_bits`]: for each element `e` of the output (source index `k`),
/// `read` then `conv` set `v`, the element's bits in `to`.
fn per_word(gpu: &Gpu, s: &WgpuStorage, layout: &Layout, to: DType, read: &str, conv: &str) -> Result<WgpuStorage> {
    let op = "to_dtype";
    validate::input(op, s.len(), layout)?;
    let n = validate::output(op, layout.shape(), to)?;
    let out = WgpuStorage::uninit(gpu, op, to, n)?;
    if n == 0 {
        return Ok(out);
    }
    // an int64 output has two words per element
    super::indexable(op, &[s, &out])?;
    // elements per output word (int64: one element, two words)
    let per = (4 / to.size_in_bytes()).max(1) as u32;
    let write = match to.size_in_bytes() {
        8 => "ys[2u * e] = v.x;\n ys[2u * e + 1u] = v.y;\n".to_string(),
        4 => "ys[e] = v;\n".to_string(),
        size => format!("word = word | (v << ({bits}u * t));\n", bits = 8 * size),
    };
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> xs: array<u32>;\n\
         @group(0) @binding(2) var<storage, read_write> ys: array<u32>;\n\
         {STRIDED}\n{CONVERSIONS}\n\
         @compute @workgroup_size({GROUP})\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {{\n\
             let w = gid.x + gid.y * nw.x * {GROUP}u;\n\
             if (w > (lay[0] - 1u) / {per}u) {{ return; }}\n\
             var word = 0u;\n\
             for (var t = 0u; t < {per}u; t = t + 1u) {{\n\
                 let e = w * {per}u + t;\n\
                 if (e >= lay[0]) {{ break; }}\n\
                 let k = at(e, 0u);\n\
                 {read}\n\
                 {conv}\n\
                 {write}\
             }}\n\
             {flush}\
         }}\n",
        flush = if to.size_in_bytes() < 4 { "ys[w] = word;\n" } else { "" },
    );
    let words = u32::try_from(n.div_ceil(per as usize)).map_err(|_| Error::msg(format!("{op}: {n} elements are past the GPU grid")))?;
    let m = constants(gpu, bytemuck::cast_slice(&meta(op, &[layout])?));
    launch(gpu, op, &source, &[&m, buf(s, op)?, buf(&out, op)?], grid(gpu, op, words.div_ceil(GROUP))?)?;
    Ok(out)
}
