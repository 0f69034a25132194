//! The scales of fused attention's dropout on the device
//! ([`Backend::attention_dropout`](autograd_core::Backend::attention_dropout)):
//! weight `e` of a call is kept when splitmix64's finaliser over the seed
//! stepped `e` times clears `p`, as `autograd_core::attention::Dropout`
//! decides on the host, here in 32-bit word pairs. The seed is read where
//! it lies (two f64 draws in a device buffer), so an attention call with
//! dropout neither waits for the device to read its seed back nor uploads
//! a mask the size of its weights.

use super::integer::INT64;
use super::{ENTRY, GROUP, buf, constants, grid, launch};
use crate::WgpuStorage;
use crate::device::Gpu;
use crate::storage::host_bytes;
use autograd_core::{DType, Error, HostData, Layout, Result, Shape, validate};

/// Whether the kernel writes `dtype`: f32 one element per word, f16 and
/// bf16 two (f64 takes the default path, as f64 arithmetic does).
pub(crate) fn served(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// The scales (`0` or `1 / (1 - p)`, rounded to `dtype` as the host
/// rounds them) of a call of `shape` `[batch.., L, S]` with dropout `p`
/// and the `F64` `[2]` `seed`. The checks are the default's, but the
/// seed's values: the device cannot return an `Err` without the read-back
/// this kernel exists to avoid, so a seed that is not two draws in
/// `[0, 1)` (which the library's own seeds always are) makes every scale
/// NaN rather than a plausible mask.
pub(crate) fn scales(gpu: &Gpu, seed: &WgpuStorage, lseed: &Layout, shape: &Shape, p: f64, dtype: DType) -> Result<WgpuStorage> {
    let name = "attention_dropout";
    let bad = |msg: String| Error::invalid_shape(name, msg);
    if seed.dtype != DType::F64 || lseed.dims() != [2] {
        return Err(bad(format!("the dropout seed must be an F64 tensor of shape [2], got {:?} of shape {:?}", seed.dtype, lseed.dims())));
    }
    validate::input(name, seed.len(), lseed)?;
    if shape.rank() < 2 || !served(dtype) {
        return Err(bad(format!("expected f32, f16 or bf16 and a shape [batch.., L, S], got {dtype:?} and {:?}", shape.dims())));
    }
    if !(p > 0.0 && p < 1.0) {
        return Err(bad(format!("the dropout probability must be in (0, 1), got {p}")));
    }
    let n = validate::output(name, shape, dtype)?;
    let out = WgpuStorage::uninit(gpu, name, dtype, n)?;
    if n == 0 {
        return Ok(out);
    }
    super::indexable(name, &[seed, &out])?;
    let fits = |v: usize| u32::try_from(v).map_err(|_| Error::msg(format!("{name}: {v} is past the GPU kernels' 32-bit indices")));
    let per_word = if dtype == DType::F32 { 1 } else { 2 };
    let words = fits(n.div_ceil(per_word))?;
    // kept when (z >> 11) 2^-53 >= p, i.e. z >> 11 >= ceil(p 2^53) (exact in f64)
    let threshold = (p * 2f64.powi(53)).ceil() as u64;
    // a value's bits in dtype, rounded from f64 by the host's own conversion
    let bits = |v: f64| {
        let b = host_bytes(&HostData::from_f64(&[v], dtype));
        b.iter().rev().fold(0u32, |w, &byte| (w << 8) | u32::from(byte))
    };
    // each seed element's low word (validated in bounds above)
    let word_of = |j: usize| fits(2 * (lseed.offset() + j * lseed.strides()[0]));
    let lay = [
        words,
        fits(n)?,
        per_word as u32,
        threshold as u32,
        (threshold >> 32) as u32,
        bits(1.0 / (1.0 - p)),
        bits(f64::NAN),
        word_of(0)?,
        word_of(1)?,
    ];
    let m = constants(gpu, bytemuck::cast_slice(&lay));
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> seed: array<u32>;\n\
         @group(0) @binding(2) var<storage, read_write> ys: array<u32>;\n\
         {INT64}\n{DRAWS}\n\
         {ENTRY}\
             let u0 = vec2<u32>(seed[lay[7]], seed[lay[7] + 1u]);\n\
             let u1 = vec2<u32>(seed[lay[8]], seed[lay[8] + 1u]);\n\
             let valid = is_draw(u0) && is_draw(u1);\n\
             // the host's (bits(u0) << 11) ^ bits(u1)\n\
             let b0 = draw_bits(u0);\n\
             let s = vec2<u32>(b0.x << 11u, (b0.y << 11u) | (b0.x >> 21u)) ^ draw_bits(u1);\n\
             var word = 0u;\n\
             for (var t = 0u; t < lay[2]; t = t + 1u) {{\n\
                 let e = i * lay[2] + t;\n\
                 if (e >= lay[1]) {{ break; }}\n\
                 var z = add64(s, mul64(vec2<u32>(e, 0u), vec2<u32>(0x7F4A7C15u, 0x9E3779B9u)));\n\
                 z = mul64(z ^ shr64(z, 30u), vec2<u32>(0x1CE4E5B9u, 0xBF58476Du));\n\
                 z = mul64(z ^ shr64(z, 27u), vec2<u32>(0x133111EBu, 0x94D049BBu));\n\
                 z = z ^ shr64(z, 31u);\n\
                 // both below 2^53: lt64's signed high words compare as unsigned\n\
                 let keep = !lt64(shr64(z, 11u), vec2<u32>(lay[3], lay[4]));\n\
                 let bits = select(lay[6], select(0u, lay[5], keep), valid);\n\
                 word = word | (bits << (16u * t));\n\
             }}\n\
             ys[i] = word;\n\
         }}\n"
    );
    launch(gpu, name, &source, &[&m, buf(seed, name)?, buf(&out, name)?], grid(gpu, name, words.div_ceil(GROUP))?)?;
    Ok(out)
}

/// A 64-bit shift right, and an f64 draw's bits as the host reads them:
/// `(u * 2^53) as u64` for `u` in `[0, 1)` is its 53-bit significand
/// shifted right by `1022 - exponent` (0 for zero and subnormals).
const DRAWS: &str = r#"
fn shr64(v: vec2<u32>, r: u32) -> vec2<u32> {
    if (r == 0u) { return v; }
    if (r >= 64u) { return vec2<u32>(0u, 0u); }
    if (r >= 32u) { return vec2<u32>(v.y >> (r - 32u), 0u); }
    return vec2<u32>((v.x >> r) | (v.y << (32u - r)), v.y >> r);
}
fn is_draw(w: vec2<u32>) -> bool {
    let negative_zero = w.x == 0u && w.y == 0x80000000u;
    return negative_zero || ((w.y >> 31u) == 0u && ((w.y >> 20u) & 0x7ffu) < 1023u);
}
fn draw_bits(w: vec2<u32>) -> vec2<u32> {
    let e = (w.y >> 20u) & 0x7ffu;
    if (e == 0u || e >= 1023u) { return vec2<u32>(0u, 0u); }
    return shr64(vec2<u32>(w.x, (w.y & 0xfffffu) | 0x100000u), 1022u - e);
}
"#;
