//! `random` on the device where it can give the CPU's bits: uniform f32
//! and f64 draws from the library's one xoshiro256++ stream.
//!
//! The host jumps a copy of the generator ahead to each thread's first
//! draw ([`Generator::advance`]: a few matrix-vector products over GF(2)
//! per thread) and uploads those states, 32 bytes a thread; each thread
//! then draws its run of consecutive values as the CPU does: the top 53
//! bits times 2^-53, rounded once to f32 (the int64 conversion of the cast
//! kernel, then an exact scaling), or for f64 that value exactly (its bits
//! built from the integer's leading one: WGSL has no f64 arithmetic, but an
//! f64 is only two words to write). So a seeded model initialises on
//! `Wgpu` as on `Cpu`, a dropout mask costs no transfer of its size, and
//! fused attention's dropout seed (two f64 draws) is drawn where its
//! kernels read it. Normal draws (an f64 logarithm and cosine, which WGSL
//! cannot do) and the other dtypes take the host path.

use super::cast::CONVERSIONS;
use super::integer::INT64;
use super::{ENTRY, GROUP, buf, constants, grid, launch};
use crate::WgpuStorage;
use crate::device::Gpu;
use autograd_core::rng::Generator;
use autograd_core::{DType, Error, Result, Shape, validate};

/// At most this many threads share a call (each jump costs the host a
/// matrix-vector product)...
const MAX_THREADS: usize = 1024;
/// ...and each draws at least this many values.
const MIN_RUN: usize = 256;

/// Whether [`uniform`] draws `dtype`.
pub(crate) fn served(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64)
}

/// `shape`'s elements drawn uniform in `[0, 1)` as f32 or f64, in
/// row-major order from `generator`, which moves one draw per element (as
/// the CPU's `random` leaves it).
pub(crate) fn uniform(gpu: &Gpu, shape: &Shape, dtype: DType, generator: &mut Generator) -> Result<WgpuStorage> {
    let name = "random";
    if !served(dtype) {
        return Err(Error::msg(format!("{name}: no uniform kernel for {dtype:?}")));
    }
    let n = validate::output(name, shape, dtype)?;
    let out = WgpuStorage::uninit(gpu, name, dtype, n)?;
    if n == 0 {
        return Ok(out);
    }
    super::indexable(name, &[&out])?;
    // a power of two, so that each thread's jump is one cached square
    let run = n.div_ceil(MAX_THREADS).next_power_of_two().max(MIN_RUN);
    let threads = n.div_ceil(run);
    let mut starts: Vec<u32> = Vec::with_capacity(threads * 8);
    let mut g = generator.clone();
    for t in 0..threads {
        starts.extend(g.state().iter().flat_map(|&w| [w as u32, (w >> 32) as u32]));
        if t + 1 < threads {
            g.advance(run as u64);
        }
    }
    let fits = |v: usize| u32::try_from(v).map_err(|_| Error::msg(format!("{name}: {v} is past the GPU kernels' 32-bit indices")));
    let m = constants(gpu, bytemuck::cast_slice(&[fits(threads)?, fits(n)?, fits(run)?]));
    let s = constants(gpu, bytemuck::cast_slice(&starts));
    let (word, write) = if dtype == DType::F32 {
        ("f32", "ys[e] = i64_to_f32(top.x, top.y) * bitcast<f32>(0x25000000u);")
    } else {
        ("u32", "let d = u53_to_f64(top); ys[2u * e] = d.x; ys[2u * e + 1u] = d.y;")
    };
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> starts: array<u32>;\n\
         @group(0) @binding(2) var<storage, read_write> ys: array<{word}>;\n\
         {INT64}\n{CONVERSIONS}\n{ROTL}\n{TO_F64}\n\
         {ENTRY}\
             let b = 8u * i;\n\
             var s0 = vec2<u32>(starts[b], starts[b + 1u]);\n\
             var s1 = vec2<u32>(starts[b + 2u], starts[b + 3u]);\n\
             var s2 = vec2<u32>(starts[b + 4u], starts[b + 5u]);\n\
             var s3 = vec2<u32>(starts[b + 6u], starts[b + 7u]);\n\
             for (var t = 0u; t < lay[2]; t = t + 1u) {{\n\
                 let e = i * lay[2] + t;\n\
                 if (e >= lay[1]) {{ break; }}\n\
                 // xoshiro256++: the output, then the state's move\n\
                 let x = add64(rotl64(add64(s0, s3), 23u), s0);\n\
                 let top = vec2<u32>((x.x >> 11u) | (x.y << 21u), x.y >> 11u);\n\
                 {write}\n\
                 let t17 = vec2<u32>(s1.x << 17u, (s1.y << 17u) | (s1.x >> 15u));\n\
                 s2 = s2 ^ s0;\n\
                 s3 = s3 ^ s1;\n\
                 s1 = s1 ^ s2;\n\
                 s0 = s0 ^ s3;\n\
                 s2 = s2 ^ t17;\n\
                 s3 = rotl64(s3, 45u);\n\
             }}\n\
         }}\n"
    );
    launch(gpu, name, &source, &[&m, &s, buf(&out, name)?], grid(gpu, name, fits(threads)?.div_ceil(GROUP))?)?;
    // only a draw that was made moves the generator (an Err leaves it)
    generator.advance(n as u64);
    Ok(out)
}

/// `top * 2^-53` for a 53-bit `top` (`(low, high)` words) as the words
/// of an f64, exactly: the leading one moved to bit 52 (the implicit bit),
/// the exponent from its position (0 stays +0).
const TO_F64: &str = r#"
fn u53_to_f64(t: vec2<u32>) -> vec2<u32> {
    if (t.x == 0u && t.y == 0u) { return vec2<u32>(0u, 0u); }
    var lead = firstLeadingBit(t.x);
    if (t.y != 0u) { lead = 32u + firstLeadingBit(t.y); }
    let r = 52u - lead;
    var m = t;
    if (r >= 32u) {
        m = vec2<u32>(0u, t.x << (r - 32u));
    } else if (r > 0u) {
        m = vec2<u32>(t.x << r, (t.y << r) | (t.x >> (32u - r)));
    }
    return vec2<u32>(m.x, (m.y & 0xfffffu) | ((lead + 970u) << 20u));
}
"#;

/// A 64-bit rotation left by `r` (below 64) of `(low, high)` words.
const ROTL: &str = r#"
fn rotl64(v: vec2<u32>, r: u32) -> vec2<u32> {
    var x = v;
    var k = r;
    if (k >= 32u) { x = vec2<u32>(v.y, v.x); k = k - 32u; }
    if (k == 0u) { return x; }
    return vec2<u32>((x.x << k) | (x.y >> (32u - k)), (x.y << k) | (x.x >> (32u - k)));
}
"#;
