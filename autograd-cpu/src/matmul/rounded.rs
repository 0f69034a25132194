//! Where an f16/bf16 product's rounded outputs are stored: as the
//! product's own dtype (`matmul`, `addmm`), or as f32 holding the rounded
//! values (`Backend::matmul_cast` to f32: a weight gradient under
//! autocast, which the f32 parameter takes). The kernels round each f32
//! sum once, to `T`'s precision, in both cases; only the store differs,
//! so the f32 output is the bits of the product followed by the cast
//! without a low-precision product or a second pass over the output.

use crate::low_elementwise::Low;

/// An element type the rounded outputs of a `T` product are stored as:
/// `T` itself, or `f32` (each value rounded to `T`, then widened exactly).
pub(crate) trait Rounded<T: Low>: Copy + Default + Send + Sync + 'static {
    /// `src` rounded to `T`, stored into `dst` (one length), inlined into
    /// a caller compiled for a wider instruction set.
    fn round_inline(src: &[f32], dst: &mut [Self]);
    /// Eight lanes rounded and stored, as [`Low::round_store_8`].
    ///
    /// # Safety
    /// As [`Low::round_store_8`]'s.
    #[cfg(target_arch = "x86_64")]
    unsafe fn round_store_8(v: std::arch::x86_64::__m256, dst: *mut Self);
    /// Sixteen lanes, as [`Low::round_store_16`].
    ///
    /// # Safety
    /// As [`Low::round_store_16`]'s.
    #[cfg(target_arch = "x86_64")]
    unsafe fn round_store_16(v: std::arch::x86_64::__m512, dst: *mut Self);
}

impl<T: Low> Rounded<T> for T {
    #[inline(always)]
    fn round_inline(src: &[f32], dst: &mut [T]) {
        T::round_inline(src, dst)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn round_store_8(v: std::arch::x86_64::__m256, dst: *mut T) {
        // SAFETY: the caller's guarantees are T::round_store_8's.
        unsafe { T::round_store_8(v, dst) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn round_store_16(v: std::arch::x86_64::__m512, dst: *mut T) {
        // SAFETY: the caller's guarantees are T::round_store_16's.
        unsafe { T::round_store_16(v, dst) }
    }
}

/// Values rounded through `T` a run at a time on the stack (a row of a
/// tile is at most 32; longer slices take several runs).
const RUN: usize = 64;

impl<T: Low> Rounded<T> for f32 {
    #[inline(always)]
    fn round_inline(src: &[f32], dst: &mut [f32]) {
        through::<T>(src, dst, T::round_inline)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    unsafe fn round_store_8(v: std::arch::x86_64::__m256, dst: *mut f32) {
        // SAFETY: the caller has AVX2 and F16C (what `rounded_8` needs)
        // and gives 8 writable f32.
        unsafe { std::arch::x86_64::_mm256_storeu_ps(dst, T::rounded_8(v)) }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn round_store_16(v: std::arch::x86_64::__m512, dst: *mut f32) {
        // SAFETY: the caller has AVX-512 F and gives 16 writable f32.
        unsafe { std::arch::x86_64::_mm512_storeu_ps(dst, T::rounded_16(v)) }
    }
}

/// `dst = widen(round(src))`, by `round` and `T::widen` on runs of
/// [`RUN`]: the very conversions of the cast that follows a product.
#[inline(always)]
fn through<T: Low>(src: &[f32], dst: &mut [f32], round: impl Fn(&[f32], &mut [T])) {
    assert_eq!(src.len(), dst.len(), "rounding a run: slices of one length");
    let mut run = [T::default(); RUN];
    for (s, d) in src.chunks(RUN).zip(dst.chunks_mut(RUN)) {
        let run = &mut run[..s.len()];
        round(s, run);
        T::widen(run, d);
    }
}
