//! `random` on the device where it can give the CPU's bits: uniform f32
//! draws from the library's one xoshiro256++ stream.
//!
//! The host jumps a copy of the generator ahead to each thread's first
//! draw ([`Generator::advance`]: a few matrix-vector products over GF(2)
//! per thread) and uploads those states, 32 bytes a thread; each thread
//! then draws its run of consecutive values as the CPU does: the top 53
//! bits times 2^-53, rounded once to f32 (the int64 conversion of the cast
//! kernel, then an exact scaling). So a seeded model initialises on `Wgpu`
//! as on `Cpu`, and a dropout mask costs no transfer of its size. Normal
//! draws (an f64 logarithm and cosine, which WGSL cannot do) and the
//! other dtypes take the host path.

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

/// `shape`'s elements drawn uniform in `[0, 1)` as f32, in row-major
/// order from `generator`, which moves one draw per element (as the CPU's
/// `random` leaves it).
pub(crate) fn uniform_f32(gpu: &Gpu, shape: &Shape, generator: &mut Generator) -> Result<WgpuStorage> {
    let name = "random";
    let n = validate::output(name, shape, DType::F32)?;
    let out = WgpuStorage::uninit(gpu, name, DType::F32, n)?;
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
    let source = format!(
        "@group(0) @binding(0) var<storage, read> lay: array<u32>;\n\
         @group(0) @binding(1) var<storage, read> starts: array<u32>;\n\
         @group(0) @binding(2) var<storage, read_write> ys: array<f32>;\n\
         {INT64}\n{CONVERSIONS}\n{ROTL}\n\
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
                 ys[e] = i64_to_f32(top.x, top.y) * bitcast<f32>(0x25000000u);\n\
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
