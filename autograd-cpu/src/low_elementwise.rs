//! f16 and bf16 elementwise ops without widened copies of whole buffers.
//!
//! The rule stays the one of `autograd_core::low_precision`: a
//! low-precision op is its f32 op on the widened inputs, rounded once to
//! the inputs' dtype. `through_f32` applies it by widening every input
//! whole and rounding the whole f32 result: three extra buffers (two the
//! size of the output in f32) and as many passes over memory. Here the
//! same arithmetic runs in chunks of [`CHUNK`] elements: each chunk is
//! widened into a stack buffer, the f32 slice kernel of the op runs on
//! it, and the result is rounded straight into the output, so an op
//! allocates only its low-precision output. Every element goes through
//! the same f32 kernel and the same rounding as before: the bits do not
//! change (`tests/proptest_vs_reference.rs` checks it against the
//! whole-buffer path).

use crate::elementwise::{binary_slice, dense, unary_slice};
use autograd_core::memory::scratch;
use autograd_core::{BinaryOp, DType, HostStorage, Layout, UnaryOp};
use half::{bf16, f16};
use rayon::prelude::*;

/// Elements per chunk: 2 KiB of f32 per operand, in L1 with the output.
const CHUNK: usize = 512;

/// Outputs from this many elements are split over the rayon pool (a
/// chunk's work is a few hundred nanoseconds).
const PAR_MIN: usize = 1 << 16;

/// The two low-precision element types, widened and rounded in slices
/// (here and by the packed products of `matmul::widening`).
pub(crate) trait Low: Copy + Default + Send + Sync + 'static {
    /// The dtype of its storage.
    const DTYPE: DType;
    /// One value, widened exactly.
    fn to_f32(self) -> f32;
    fn widen(src: &[Self], dst: &mut [f32]);
    fn round(src: &[f32], dst: &mut [Self]);
    /// [`Low::round`] inlined into a caller compiled for a wider
    /// instruction set (a multiversioned kernel): bf16's loop without the
    /// ISA dispatch; f16's F16C path behind its cached feature check.
    fn round_inline(src: &[f32], dst: &mut [Self]);
    /// Eight f32 lanes rounded as [`Low::round`] rounds them, stored at
    /// `dst`: a micro-kernel's epilogue without leaving the registers.
    ///
    /// # Safety
    /// The CPU has AVX2 and F16C (every CPU at the `Avx2` level or above:
    /// `simd::detected_isa` checks both); `dst` is valid for 8 writes.
    #[cfg(target_arch = "x86_64")]
    unsafe fn round_store_8(v: std::arch::x86_64::__m256, dst: *mut Self);
    /// Sixteen lanes, as [`Low::round_store_8`].
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `dst` is valid for 16 writes.
    #[cfg(target_arch = "x86_64")]
    unsafe fn round_store_16(v: std::arch::x86_64::__m512, dst: *mut Self);
    /// Eight f32 lanes rounded as [`Low::round_store_8`] rounds them and
    /// widened back: the f32 values of the rounded elements, bit for bit
    /// (a product rounded for a cast to f32 without leaving the registers).
    ///
    /// # Safety
    /// As [`Low::round_store_8`]'s, without the pointer.
    #[cfg(target_arch = "x86_64")]
    unsafe fn rounded_8(v: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256;
    /// Sixteen lanes, as [`Low::rounded_8`].
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[cfg(target_arch = "x86_64")]
    unsafe fn rounded_16(v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512;
    /// Eight elements at `src` widened exactly into f32 lanes, as
    /// [`Low::widen`] widens them (a packing's loads, widened in the
    /// registers they are transposed in).
    ///
    /// # Safety
    /// The CPU has AVX2 and F16C; `src` is valid for 8 reads.
    #[cfg(target_arch = "x86_64")]
    unsafe fn widened_8(src: *const Self) -> std::arch::x86_64::__m256;
}

impl Low for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    // inlined, so that it vectorises with the caller's instruction set
    #[inline(always)]
    fn widen(src: &[bf16], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = f32::from_bits((s.to_bits() as u32) << 16);
        }
    }
    fn round(src: &[f32], dst: &mut [bf16]) {
        round_bf16(src, dst)
    }
    #[inline(always)]
    fn round_inline(src: &[f32], dst: &mut [bf16]) {
        round_bf16_lanes(src, dst)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn round_store_8(v: std::arch::x86_64::__m256, dst: *mut bf16) {
        use std::arch::x86_64::*;
        let bits = bf16_lanes::bits_8(v);
        // every lane below 2^16: the saturating pack is exact
        let packed = _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256::<1>(bits));
        // SAFETY: the caller gives 8 writable elements (16 bytes).
        unsafe { _mm_storeu_si128(dst.cast(), packed) }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn round_store_16(v: std::arch::x86_64::__m512, dst: *mut bf16) {
        use std::arch::x86_64::*;
        // SAFETY: the caller gives 16 writable elements (32 bytes); every
        // lane is below 2^16, so the truncating narrowing is exact.
        unsafe { _mm256_storeu_si256(dst.cast(), _mm512_cvtepi32_epi16(bf16_lanes::bits_16(v))) }
    }
    // a bf16's f32 value is its bits in the high half
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn rounded_8(v: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(bf16_lanes::bits_8(v)))
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn rounded_16(v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(bf16_lanes::bits_16(v)))
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn widened_8(src: *const bf16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller gives 8 readable elements (16 bytes).
        let bits = unsafe { _mm_loadu_si128(src.cast()) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits)))
    }
}

/// [`round_bf16_lanes`]' arithmetic in vector registers: each f32 lane's
/// bf16 bits, in the low half of its 32-bit lane (the stores narrow
/// them, the widened results shift them up).
#[cfg(target_arch = "x86_64")]
mod bf16_lanes {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn bits_8(v: __m256) -> __m256i {
        let b = _mm256_castps_si256(v);
        let high = _mm256_srli_epi32::<16>(b);
        let bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(high, _mm256_set1_epi32(1)));
        let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(b, bias));
        let quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
        // both sides below 2^31: the signed compare is the unsigned one
        let nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7fff_ffff)), _mm256_set1_epi32(0x7f80_0000));
        _mm256_blendv_epi8(rounded, quiet, nan)
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) fn bits_16(v: __m512) -> __m512i {
        let b = _mm512_castps_si512(v);
        let high = _mm512_srli_epi32::<16>(b);
        let bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(high, _mm512_set1_epi32(1)));
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(b, bias));
        let quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
        let nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fff_ffff)), _mm512_set1_epi32(0x7f80_0000));
        _mm512_mask_blend_epi32(nan, rounded, quiet)
    }
}

impl Low for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn widen(src: &[f16], dst: &mut [f32]) {
        assert_eq!(src.len(), dst.len(), "f16 widening: slices of one length");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("f16c") {
            // SAFETY: F16C (which implies AVX) was detected; the lengths are equal.
            return unsafe { f16c::widen(src, dst) };
        }
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst)
    }
    fn round(src: &[f32], dst: &mut [f16]) {
        assert_eq!(src.len(), dst.len(), "f16 rounding: slices of one length");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("f16c") {
            // SAFETY: as for widen.
            return unsafe { f16c::round(src, dst) };
        }
        use half::slice::HalfFloatSliceExt;
        dst.convert_from_f32_slice(src)
    }
    #[inline(always)]
    fn round_inline(src: &[f32], dst: &mut [f16]) {
        Self::round(src, dst)
    }
    // the instruction `f16c::round` uses, to nearest even
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn round_store_8(v: std::arch::x86_64::__m256, dst: *mut f16) {
        use std::arch::x86_64::*;
        // SAFETY: the caller gives 8 writable elements (16 bytes).
        unsafe { _mm_storeu_si128(dst.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)) }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn round_store_16(v: std::arch::x86_64::__m512, dst: *mut f16) {
        use std::arch::x86_64::*;
        // SAFETY: the caller gives 16 writable elements (32 bytes).
        unsafe { _mm256_storeu_si256(dst.cast(), _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)) }
    }
    // the stores' rounding, then F16C's exact widening
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn rounded_8(v: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn rounded_16(v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn widened_8(src: *const f16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller gives 8 readable elements (16 bytes).
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(src.cast()) })
    }
}

/// f16 conversions with F16C's `vcvtph2ps`/`vcvtps2ph` inline: the
/// instructions `half` itself picks at run time, without its per-call
/// dispatch, which dominates on the short runs (a packed panel's 16 or 32
/// values, one row of a tile) the packed products convert.
#[cfg(target_arch = "x86_64")]
mod f16c {
    use half::f16;
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU has F16C; `src` and `dst` have one length.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn widen(src: &[f16], dst: &mut [f32]) {
        let mut s = src.chunks_exact(8);
        let mut d = dst.chunks_exact_mut(8);
        for (s, d) in (&mut s).zip(&mut d) {
            // SAFETY: both chunks hold 8 elements: a 16-byte load, a 32-byte store.
            unsafe { _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast()))) };
        }
        for (s, d) in s.remainder().iter().zip(d.into_remainder()) {
            *d = s.to_f32();
        }
    }

    /// # Safety
    /// The CPU has F16C; `src` and `dst` have one length.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn round(src: &[f32], dst: &mut [f16]) {
        let mut s = src.chunks_exact(8);
        let mut d = dst.chunks_exact_mut(8);
        for (s, d) in (&mut s).zip(&mut d) {
            // SAFETY: both chunks hold 8 elements: a 32-byte load, a 16-byte store.
            unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(s.as_ptr()));
                _mm_storeu_si128(d.as_mut_ptr().cast(), h);
            }
        }
        for (s, d) in s.remainder().iter().zip(d.into_remainder()) {
            *d = f16::from_f32(*s);
        }
    }
}

crate::simd::multiversion! {
    /// f32 values rounded to bf16 (to nearest, ties to even; NaN stays a
    /// quiet NaN): the bits of `half::bf16::from_f32`, in integer
    /// arithmetic that vectorises.
    pub(crate) fn round_bf16<>(src: &[f32], dst: &mut [bf16]) where [] {
        round_bf16_lanes(src, dst)
    }
}

/// The loop of [`round_bf16`], inlined into its per-ISA copies and into
/// other multiversioned kernels.
#[inline(always)]
fn round_bf16_lanes(src: &[f32], dst: &mut [bf16]) {
    for (d, &x) in dst.iter_mut().zip(src) {
        let b = x.to_bits();
        let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
        let quiet = (b >> 16) | 0x0040;
        let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
        *d = bf16::from_bits(if nan { quiet } else { rounded } as u16);
    }
}

/// `out = f(inputs)` chunk by chunk: `f` gets the widened chunk of each
/// input and an f32 buffer to fill.
fn chunked<T: Low>(inputs: &[&[T]], n: usize, f: impl Fn(&[&[f32]], &mut [f32]) + Sync) -> Vec<T> {
    // every element is written below
    let mut out = scratch(n, T::default());
    // the widened inputs and the f32 result of one chunk: made once per
    // worker, not per chunk (zeroing 6 KiB of stack for every 512
    // elements was 0.7% of an autocast char_gpt step, in memset)
    let buffers = || ([[0f32; CHUNK]; 2], [0f32; CHUNK]);
    let run = |(wide, result): &mut ([[f32; CHUNK]; 2], [f32; CHUNK]), (c, dst): (usize, &mut [T])| {
        let start = c * CHUNK;
        let len = dst.len();
        for (w, x) in wide.iter_mut().zip(inputs) {
            T::widen(&x[start..start + len], &mut w[..len]);
        }
        let [w0, w1] = &*wide;
        let refs: [&[f32]; 2] = [&w0[..len], &w1[..len]];
        f(&refs[..inputs.len()], &mut result[..len]);
        T::round(&result[..len], dst);
    };
    if n >= PAR_MIN {
        out.par_chunks_mut(CHUNK).enumerate().for_each_init(buffers, |b, item| run(b, item));
    } else {
        let mut b = buffers();
        out.chunks_mut(CHUNK).enumerate().for_each(|item| run(&mut b, item));
    }
    out
}

/// `op` over a bf16 or f16 buffer, chunk by chunk; `None` for other dtypes.
pub(crate) fn unary(op: UnaryOp, s: &HostStorage, layout: &Layout) -> Option<HostStorage> {
    let n = layout.numel();
    Some(match s {
        HostStorage::BF16(v) => chunked::<bf16>(&[&dense(v, layout)], n, |x, out| unary_slice(op, x[0], out)).into(),
        HostStorage::F16(v) => chunked::<f16>(&[&dense(v, layout)], n, |x, out| unary_slice(op, x[0], out)).into(),
        _ => return None,
    })
}

/// `op` over two bf16 or two f16 buffers of one shape (the caller
/// validated it), chunk by chunk; `None` for other dtypes or a mix.
pub(crate) fn binary(op: BinaryOp, a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout) -> Option<HostStorage> {
    let n = la.numel();
    Some(match (a, b) {
        (HostStorage::BF16(x), HostStorage::BF16(y)) => {
            chunked::<bf16>(&[&dense(x, la), &dense(y, lb)], n, |w, out| binary_slice(op, w[0], w[1], out)).into()
        }
        (HostStorage::F16(x), HostStorage::F16(y)) => {
            chunked::<f16>(&[&dense(x, la), &dense(y, lb)], n, |w, out| binary_slice(op, w[0], w[1], out)).into()
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::Low;
    use half::f16;

    /// The F16C conversions against `half`'s software ones (its `const`
    /// functions never take the hardware path): every f16 widened, and
    /// f32 values at the edges of rounding (ties to even, the subnormal
    /// and overflow boundaries, infinities, NaN) plus a sweep of bit
    /// patterns rounded. Bit-equal, NaN for NaN.
    #[test]
    fn f16_conversions_match_the_software_rule() {
        let same = |x: f32, y: f32| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut wide = vec![0f32; all.len()];
        f16::widen(&all, &mut wide);
        for (h, w) in all.iter().zip(&wide) {
            assert!(same(*w, h.to_f32_const()), "{:#06x}: {w} vs {}", h.to_bits(), h.to_f32_const());
        }
        let mut edges: Vec<f32> = vec![
            0.0,
            -0.0,
            1.0,
            65504.0,
            65519.99,
            65520.0,
            1e6,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            5.96e-8,
            2.98e-8,
            2.99e-8,
            1.0 + f32::EPSILON,
            1.000_488_3,
            1.000_976_6,
            2049.0,
            2051.0,
        ];
        edges.extend(edges.clone().iter().map(|x| -x));
        edges.extend((0..2_000_000u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))));
        let mut rounded = vec![f16::ZERO; edges.len()];
        f16::round(&edges, &mut rounded);
        for (x, r) in edges.iter().zip(&rounded) {
            let want = f16::from_f32_const(*x);
            assert!(
                same(r.to_f32_const(), want.to_f32_const()),
                "{x:e} ({:#010x}): {:#06x} vs {:#06x}",
                x.to_bits(),
                r.to_bits(),
                want.to_bits()
            );
        }
    }
}
