//! Batched matrix multiplication through the `gemm` crate.
//!
//! `gemm` takes row and column strides for every operand, so transposed
//! views (the `A^T B` and `A B^T` products of every backward pass) are
//! multiplied without a copy. It packs into cache-blocked panels and picks
//! AVX-512/AVX2/scalar micro-kernels at run time. The choice against the
//! alternatives was made by measurement; see `benches/README.md`.

use crate::elementwise::copy_strided;
use crate::strided::linear_offset;
use autograd_core::Layout;
use autograd_core::element::Elem;
use gemm::Parallelism;
use rayon::prelude::*;

/// A raw pointer that may cross to another rayon worker; the blocks each
/// worker touches are disjoint.
struct SendPtr<T>(*mut T);
// SAFETY: a SendPtr lives only inside one `matmul` call, which outlives the
// parallel loop using it (`for_each` joins before returning); through it
// workers read the operands (shared, never written during the call) and
// write disjoint row (or column) blocks of the output, as computed in
// `matmul` below.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as for Send: shared reads of the operands and disjoint writes.
unsafe impl<T> Sync for SendPtr<T> {}

/// Below this many multiply-adds per matrix, one thread does the product:
/// the pool hop and the split of the packed panels cost more than they save.
pub const GEMM_PAR_MIN_FLOPS: usize = 96 * 96 * 96;

/// `[batch.., m, k] x [batch.., k, n]`, batch dims identical (stride 0 where broadcast).
///
/// The caller ([`crate::Cpu`]'s `Backend::matmul`) has run
/// `validate::input` on both layouts (every offset they produce, computed
/// with checked arithmetic, is below the slice's length, and their element
/// counts are at most `MAX_NUMEL`, so every offset fits in `isize`) and
/// `validate::matmul` (ranks >= 2, equal batch dims, `la`'s k equal to `lb`'s,
/// an output of `nb * m * n` elements that can be allocated). The `unsafe`
/// GEMM calls below rely on exactly these facts.
pub(crate) fn matmul<T: Elem>(a: &[T], la: &Layout, b: &[T], lb: &Layout) -> Vec<T> {
    let r = la.rank();
    let (m, k, n) = (la.dims()[r - 2], la.dims()[r - 1], lb.dims()[r - 1]);
    let batch_dims = &la.dims()[..r - 2];
    let nb: usize = batch_dims.iter().product();
    let mut out = vec![T::zero(); nb * m * n];
    if out.is_empty() || k == 0 {
        return out;
    }
    // A zero stride inside one matrix (an expanded row or column) is outside
    // what the packed kernels expect; such operands are rare, so copy them.
    let inner_zero = |l: &Layout| {
        let (s, d) = (l.strides(), l.dims());
        (s[r - 2] == 0 && d[r - 2] > 1) || (s[r - 1] == 0 && d[r - 1] > 1)
    };
    let packable = |v: &[T], l: &Layout| inner_zero(l).then(|| (copy_strided(v, l), Layout::contiguous(l.shape().clone())));
    let (ca, cb) = (packable(a, la), packable(b, lb));
    let (a, la) = ca.as_ref().map_or((a, la), |(v, l)| (&v[..], l));
    let (b, lb) = cb.as_ref().map_or((b, lb), |(v, l)| (&v[..], l));
    // A dim of size 1 may carry any stride (it is never multiplied by more
    // than 0), even one that does not fit in `isize`: give gemm 1 there, so
    // every stride it receives is a real distance inside the operand.
    let unit = |l: &Layout| -> Vec<usize> { l.strides().iter().zip(l.dims()).map(|(&s, &d)| if d == 1 { 1 } else { s }).collect() };
    let (sa, sb) = (unit(la), unit(lb));
    let flops = m * n * k;
    let threads = rayon::current_num_threads();
    let one = |bi: usize, dst: &mut [T], par: Parallelism| {
        let oa = la.offset() + linear_offset(bi, batch_dims, &sa[..r - 2]);
        let ob = lb.offset() + linear_offset(bi, batch_dims, &sb[..r - 2]);
        // SAFETY: `dst` is one m*n chunk of `out`, written with row stride n
        // and column stride 1. gemm reads lhs at `oa + i*sa[r-2] + p*sa[r-1]`
        // for i < m, p < k: that is the offset of element (bi, i, p) of `la`
        // (or of its contiguous copy), which `validate::input` proved below
        // `a.len()` (resp. `b.len()` for rhs at `ob + p*sb[r-2] + j*sb[r-1]`);
        // both pointers are formed inside their slices. gemm only reads lhs
        // and rhs and writes dst (read_dst = false, alpha unused).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr().add(oa),
                sa[r - 1] as isize,
                sa[r - 2] as isize,
                b.as_ptr().add(ob),
                sb[r - 1] as isize,
                sb[r - 2] as isize,
                T::zero(),
                T::one(),
                false,
                false,
                false,
                par,
            );
        }
    };
    if flops >= GEMM_PAR_MIN_FLOPS && threads > 1 {
        // Split each product into one block of rows (or columns) per thread,
        // each a single-threaded GEMM: measured faster on 2 cores than the
        // crate's own rayon split (see benches/README.md).
        let split_rows = m >= n;
        let parts = threads.min(if split_rows { m } else { n }.div_ceil(16)).max(1);
        for (bi, dst) in out.chunks_mut(m * n).enumerate() {
            let oa = la.offset() + linear_offset(bi, batch_dims, &sa[..r - 2]);
            let ob = lb.offset() + linear_offset(bi, batch_dims, &sb[..r - 2]);
            let dst_ptr = SendPtr(dst.as_mut_ptr());
            let (a_ptr, b_ptr) = (SendPtr(a.as_ptr() as *mut T), SendPtr(b.as_ptr() as *mut T));
            (0..parts).into_par_iter().for_each(|p| {
                let (dst_ptr, a_ptr, b_ptr) = (&dst_ptr, &a_ptr, &b_ptr);
                let total = if split_rows { m } else { n };
                // Blocks of a multiple of 16 rows/cols keep the micro-kernels full.
                let chunk = total.div_ceil(parts).div_ceil(16) * 16;
                let start = (p * chunk).min(total);
                let len = chunk.min(total - start);
                if len == 0 {
                    return;
                }
                // SAFETY: block p covers rows (or columns) start..start+len of
                // `dst`, with start + len <= m (or n) by the min() above, so
                // the blocks write disjoint parts of this m*n chunk of `out`.
                // Its lhs (rhs) pointer is the element (bi, start, 0) ((bi, 0, start))
                // of the operand, and every element gemm reads from it is an
                // element of `la` (`lb`) inside the validated bounds, as in `one`.
                unsafe {
                    let (mm, nn, d, lhs, rhs) = if split_rows {
                        (len, n, dst_ptr.0.add(start * n), a_ptr.0.add(oa + start * sa[r - 2]) as *const T, b_ptr.0.add(ob) as *const T)
                    } else {
                        (m, len, dst_ptr.0.add(start), a_ptr.0.add(oa) as *const T, b_ptr.0.add(ob + start * sb[r - 1]) as *const T)
                    };
                    gemm::gemm(
                        mm,
                        nn,
                        k,
                        d,
                        1,
                        n as isize,
                        false,
                        lhs,
                        sa[r - 1] as isize,
                        sa[r - 2] as isize,
                        rhs,
                        sb[r - 1] as isize,
                        sb[r - 2] as isize,
                        T::zero(),
                        T::one(),
                        false,
                        false,
                        false,
                        Parallelism::None,
                    );
                }
            });
        }
    } else if nb > 1 && flops * nb >= GEMM_PAR_MIN_FLOPS {
        out.par_chunks_mut(m * n).enumerate().for_each(|(bi, dst)| one(bi, dst, Parallelism::None));
    } else {
        for (bi, dst) in out.chunks_mut(m * n).enumerate() {
            one(bi, dst, Parallelism::None);
        }
    }
    out
}
