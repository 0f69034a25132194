//! Casts of whole buffers between f32 and the two low-precision dtypes:
//! autocast's casts of the weights to bf16 or f16 on every step, and the
//! widening of their gradients back to the f32 parameters.
//!
//! The bits are those of `autograd_core::low_precision` (the reference
//! backend's casts): widening is exact, rounding is to nearest with ties
//! to even and keeps NaN a quiet NaN, in the same integer arithmetic
//! ([`Low::round`]). What differs is the work's shape: a buffer of
//! [`PAR_MIN`] elements or more is cut into runs of [`RUN`] elements
//! converted by the rayon pool's workers, where the core's conversion
//! runs on the calling thread only. At two threads the weight casts of an
//! autocast MLP step were a tenth of the step; they do not grow with the
//! threads that shorten the products.

use crate::low_elementwise::Low;
use autograd_core::memory::scratch;
use rayon::prelude::*;

/// Buffers from this many elements are split over the pool (a run's
/// conversion, about 5 us, is worth waking a worker for).
const PAR_MIN: usize = 1 << 16;
/// Elements per run of a split conversion: 64 KiB of f32, in L2.
const RUN: usize = 1 << 14;

crate::simd::multiversion! {
    /// `dst = src` rounded, compiled per instruction set so that bf16's
    /// integer rounding vectorises (f16 calls F16C's conversion).
    fn round_run<T>(src: &[f32], dst: &mut [T]) where [T: Low] {
        T::round_inline(src, dst)
    }
}

crate::simd::multiversion! {
    /// `dst = src` widened, compiled per instruction set as [`round_run`].
    fn widen_run<T>(src: &[T], dst: &mut [f32]) where [T: Low] {
        T::widen(src, dst)
    }
}

/// `f(src run, dst run)` over matching runs of two slices of one length,
/// on the pool when they are long.
fn by_runs<S: Sync, D: Send>(src: &[S], dst: &mut [D], f: impl Fn(&[S], &mut [D]) + Sync) {
    assert_eq!(src.len(), dst.len(), "a cast writes one element per element");
    if src.len() >= PAR_MIN && rayon::current_num_threads() > 1 {
        dst.par_chunks_mut(RUN).zip(src.par_chunks(RUN)).for_each(|(d, s)| f(s, d));
    } else {
        f(src, dst)
    }
}

/// `src` rounded to `T` (bf16 or f16).
pub(crate) fn rounded<T: Low>(src: &[f32]) -> Vec<T> {
    // every element is written below
    let mut out = scratch(src.len(), T::default());
    by_runs(src, &mut out, round_run::<T>);
    out
}

/// `src` widened to f32.
pub(crate) fn widened<T: Low>(src: &[T]) -> Vec<f32> {
    // every element is written below
    let mut out = scratch(src.len(), 0f32);
    by_runs(src, &mut out, widen_run::<T>);
    out
}
