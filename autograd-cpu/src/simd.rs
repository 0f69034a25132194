//! Run-time choice of vector instructions for the elementwise, softmax and
//! normalisation loops.
//!
//! The crate is compiled for baseline x86-64 (SSE2), so that one binary runs
//! on every machine; a loop compiled that way handles 4 floats at a time
//! even on a CPU with AVX-512. The crate-private `multiversion!` compiles a kernel three
//! times (baseline, AVX2+FMA, AVX-512) and calls the widest copy this CPU
//! supports, detected once. Rust never fuses a multiply and an add on its
//! own, and the kernels fix their summation order (a fixed number of
//! lanes, whatever the vector width), so every copy returns the same bits:
//! the choice changes the speed, never a result (`tests/kernels/simd_dispatch.rs`
//! checks it op by op).
//!
//! ```
//! use autograd_cpu::simd::{Isa, active_isa, detected_isa, limit_isa};
//! let widest = detected_isa();
//! limit_isa(Isa::Baseline); // e.g. to compare the SSE2 loops with the wide ones
//! assert_eq!(active_isa(), Isa::Baseline);
//! limit_isa(widest);
//! assert_eq!(active_isa(), widest);
//! ```

use std::sync::atomic::{AtomicU8, Ordering};

/// The instruction sets the CPU kernels are compiled for, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// The target's baseline (SSE2 on x86-64; everything on other targets).
    Baseline,
    /// AVX2 with FMA, BMI1/2 and F16C (Haswell, Zen 1 and later).
    Avx2,
    /// AVX-512 F/BW/DQ/VL on top of AVX2 (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4).
    Avx512,
    /// AVX-512 plus AMX tiles with bf16 products (Sapphire Rapids and later
    /// Xeons), where Linux grants the process the tile data state: the bf16
    /// GEMM runs on tiles (`matmul::amx`); every other kernel runs
    /// its AVX-512 copy.
    Amx,
}

impl Isa {
    fn from_u8(v: u8) -> Isa {
        match v {
            3 => Isa::Amx,
            2 => Isa::Avx512,
            1 => Isa::Avx2,
            _ => Isa::Baseline,
        }
    }

    /// The name `AUTOGRAD_CPU_ISA` accepts for it: `baseline`, `avx2`, `avx512` or `amx`.
    ///
    /// ```
    /// assert_eq!(autograd_cpu::simd::Isa::Avx2.name(), "avx2");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Isa::Baseline => "baseline",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Amx => "amx",
        }
    }
}

/// The widest instruction set this CPU supports (and the kernels use).
///
/// ```
/// use autograd_cpu::simd::{Isa, detected_isa};
/// assert!(detected_isa() >= Isa::Baseline);
/// ```
pub fn detected_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("bmi1")
            && is_x86_feature_detected!("bmi2")
            && is_x86_feature_detected!("lzcnt")
            && is_x86_feature_detected!("popcnt")
            // every AVX2 CPU has it; the low-precision kernels' epilogues
            // round with it
            && is_x86_feature_detected!("f16c");
        let avx512 = avx2
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl");
        if avx512 && amx_granted() {
            return Isa::Amx;
        }
        if avx512 {
            return Isa::Avx512;
        }
        if avx2 {
            return Isa::Avx2;
        }
    }
    Isa::Baseline
}

/// Whether the CPU has AMX-TILE and AMX-BF16 and Linux granted this process
/// the tile data state, asked once with `arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)` (Linux 5.16 and later; without the grant the first
/// tile instruction would fault).
pub(crate) fn amx_granted() -> bool {
    static GRANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *GRANTED.get_or_init(|| {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            // CPUID leaf 7 (present: AVX-512 was detected from it): EDX bit
            // 22 is AMX-BF16, bit 24 AMX-TILE.
            let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
            if leaf7.edx & (1 << 22) == 0 || leaf7.edx & (1 << 24) == 0 {
                return false;
            }
            const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
            const XFEATURE_XTILEDATA: libc::c_long = 18;
            // SAFETY: arch_prctl with these arguments only changes the
            // process's permitted extended states; it reads no memory.
            let granted = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) };
            granted == 0
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        false
    })
}

/// `u8::MAX` until the first kernel call decides.
static ACTIVE: AtomicU8 = AtomicU8::new(u8::MAX);

/// The instruction set the kernels use now: the detected one, capped by
/// the `AUTOGRAD_CPU_ISA` environment variable (read on the first call:
/// `baseline` (or `sse2`), `avx2`, `avx512` or `amx`, in any case; another
/// value caps nothing) and by [`limit_isa`].
///
/// ```
/// use autograd_cpu::simd::{active_isa, detected_isa};
/// assert!(active_isa() <= detected_isa());
/// ```
#[inline]
pub fn active_isa() -> Isa {
    match ACTIVE.load(Ordering::Relaxed) {
        u8::MAX => {
            // any other value (or none) leaves the detected set uncapped
            let cap = match std::env::var("AUTOGRAD_CPU_ISA").map(|v| v.to_ascii_lowercase()) {
                Ok(v) if v == "sse2" => Isa::Baseline,
                Ok(v) => [Isa::Baseline, Isa::Avx2, Isa::Avx512].into_iter().find(|i| i.name() == v).unwrap_or(Isa::Amx),
                Err(_) => Isa::Amx,
            };
            let isa = detected_isa().min(cap);
            ACTIVE.store(isa as u8, Ordering::Relaxed);
            isa
        }
        v => Isa::from_u8(v),
    }
}

/// Caps the instruction set of every later kernel call at `max` (never above
/// what the CPU has) and returns the one now in use. Results do not depend
/// on it; benches and tests use it to compare the loops.
///
/// ```
/// use autograd_cpu::simd::{Isa, detected_isa, limit_isa};
/// assert_eq!(limit_isa(Isa::Amx), detected_isa());
/// ```
pub fn limit_isa(max: Isa) -> Isa {
    let isa = detected_isa().min(max);
    ACTIVE.store(isa as u8, Ordering::Relaxed);
    isa
}

/// Defines `fn $name` whose body is compiled once per [`Isa`] and runs in
/// the widest copy [`active_isa`] allows. Generic parameters are listed
/// bare, their bounds in a `where [...]` clause.
macro_rules! multiversion {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident<$($g:ident),*>($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?
        where [$($bounds:tt)*]
        $body:block
    ) => {
        $(#[$meta])*
        #[inline]
        $vis fn $name<$($g),*>($($arg: $ty),*) $(-> $ret)? where $($bounds)* {
            // The body, inlined into each copy below so that it is compiled
            // with that copy's instruction set.
            #[inline(always)]
            fn body<$($g),*>($($arg: $ty),*) $(-> $ret)? where $($bounds)* $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,avx,fma,bmi1,bmi2,lzcnt,popcnt")]
                unsafe fn avx512<$($g),*>($($arg: $ty),*) $(-> $ret)? where $($bounds)* {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,avx,fma,bmi1,bmi2,lzcnt,popcnt")]
                unsafe fn avx2<$($g),*>($($arg: $ty),*) $(-> $ret)? where $($bounds)* {
                    body($($arg),*)
                }
                match $crate::simd::active_isa() {
                    // SAFETY: `active_isa` never exceeds `detected_isa`, which
                    // checked each of these features on this CPU.
                    $crate::simd::Isa::Avx512 | $crate::simd::Isa::Amx => return unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    $crate::simd::Isa::Avx2 => return unsafe { avx2($($arg),*) },
                    $crate::simd::Isa::Baseline => {}
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use multiversion;

/// Lanes of the reductions inside the kernels: 16 independent accumulators
/// (one AVX-512 register of f32, two of AVX2, four of SSE2), so the order of
/// additions, and the result, is the same on every instruction set.
pub(crate) const LANES: usize = 16;

/// Sum of `f(x)` over a slice, in [`LANES`] interleaved partial sums
/// combined pairwise, then the tail in order. Inlined into multiversioned
/// kernels.
#[inline(always)]
pub(crate) fn lane_sum<T: autograd_core::scalar::FloatElem>(x: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::zero(); LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..LANES {
            acc[k] = acc[k] + f(c[k]);
        }
    }
    rest.iter().fold(combine_lanes(acc), |s, &r| s + f(r))
}

/// The [`LANES`] partial sums combined pairwise (the order every lane
/// reduction here shares, so the bits do not depend on the ISA).
#[inline(always)]
fn combine_lanes<T: autograd_core::scalar::FloatElem>(mut acc: [T; LANES]) -> T {
    let mut width = LANES / 2;
    while width > 0 {
        for k in 0..width {
            acc[k] = acc[k] + acc[k + width];
        }
        width /= 2;
    }
    acc[0]
}

/// Sum of `x[i] y[i]` over two slices of one length, in the lanes and order
/// of [`lane_sum`]. Inlined into multiversioned kernels.
#[inline(always)]
pub(crate) fn lane_dot<T: autograd_core::scalar::FloatElem>(x: &[T], y: &[T]) -> T {
    debug_assert_eq!(x.len(), y.len());
    let mut acc = [T::zero(); LANES];
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for k in 0..LANES {
            acc[k] = acc[k] + a[k] * b[k];
        }
    }
    xr.iter().zip(yr).fold(combine_lanes(acc), |s, (&a, &b)| s + a * b)
}

/// Maximum of a slice, NaN-propagating (a NaN anywhere gives NaN, as the
/// reference's `Max` reduction), `-inf` for an empty slice. Lane-wise so
/// that it vectorises.
#[inline(always)]
pub(crate) fn lane_max<T: autograd_core::scalar::FloatElem>(x: &[T]) -> T {
    // a lane keeps a NaN once it has seen one: `x > NaN` is false
    let pick = |m: T, v: T| if v > m || v.is_nan() { v } else { m };
    let mut acc = [T::neg_infinity(); LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..LANES {
            acc[k] = pick(acc[k], c[k]);
        }
    }
    let m = acc.iter().fold(T::neg_infinity(), |m, &v| pick(m, v));
    rest.iter().fold(m, |m, &v| pick(m, v))
}
