//! What the f32 and low-precision GEMMs share: the pointer their workers
//! write through, the size from which a product is split over threads, the
//! view of one matrix of a batched operand, and the walk of a batch.

use crate::strided::linear_offset;
use autograd_core::Layout;

/// A raw pointer that may cross to another rayon worker; the blocks each
/// worker touches are disjoint.
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
// SAFETY: a SendPtr lives only inside one `product` call, which outlives the
// parallel loop using it (`for_each` joins before returning); through it
// workers read the operands (shared, never written during the call) and
// write disjoint row (or column) blocks of the output, as computed in
// `product` below.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as for Send: shared reads of the operands and disjoint writes.
unsafe impl<T> Sync for SendPtr<T> {}

/// Multiply-adds a thread must get before a product is split: below it the
/// wake-up and the split of the packed panels cost more than they save.
/// Measured on the MLP's shapes (`benches/README.md`, "Performance issue").
pub(crate) const GEMM_PAR_MIN_FLOPS_PER_THREAD: usize = 2_000_000;

/// One matrix of a batched operand: element offset of `[0, 0]`, row and
/// column strides (the f32 GEMM's with size-1 dims' strides set to 1).
#[derive(Clone, Copy, Debug)]
pub(crate) struct View {
    pub(crate) off: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

impl View {
    /// The transpose: the same elements with the strides swapped.
    pub(crate) fn t(self) -> View {
        View { off: self.off, rs: self.cs, cs: self.rs }
    }

    /// Matrix `bi` (counted row-major over `batch_dims`) of an operand laid
    /// out as `l`, `[batch.., rows, cols]` (rank 2 or more, as validated).
    pub(crate) fn of(l: &Layout, bi: usize, batch_dims: &[usize]) -> View {
        let r = l.rank();
        View { off: l.offset() + linear_offset(bi, batch_dims, &l.strides()[..r - 2]), rs: l.strides()[r - 2], cs: l.strides()[r - 1] }
    }
}

/// The output of a validated `[batch.., m, k] x [batch.., k, n]` product
/// (`nb * m * n` elements, each left for the product to write).
pub(crate) fn output<T: Copy + Default + Send + 'static>(la: &Layout, lb: &Layout) -> Vec<T> {
    let r = la.rank();
    let nb: usize = la.dims()[..r - 2].iter().product();
    autograd_core::memory::scratch(nb * la.dims()[r - 2] * lb.dims()[r - 1], T::default())
}

/// A batched product `[batch.., m, k] x [batch.., k, n]` (+ an init of
/// the output's shape) as single products into `out` ([`output`]'s
/// length, every element left for `product` to write):
/// `product(dst, (m, k, n), a, b, init, threads)` for each `m x n` matrix
/// of the output, with the views of that matrix of each operand. Large
/// products get the pool's threads; many small ones (a batch of attention
/// heads) one worker each.
pub(crate) fn batched<T: Copy + Default + Send + Sync + 'static>(
    la: &Layout,
    lb: &Layout,
    init: Option<&Layout>,
    out: &mut [T],
    product: impl Fn(&mut [T], (usize, usize, usize), View, View, Option<View>, usize) + Sync,
) {
    use rayon::prelude::*;
    let r = la.rank();
    let (m, k, n) = (la.dims()[r - 2], la.dims()[r - 1], lb.dims()[r - 1]);
    let batch_dims = &la.dims()[..r - 2];
    let nb: usize = batch_dims.iter().product();
    assert_eq!(out.len(), nb * m * n, "a product's output is nb m n elements");
    if out.is_empty() {
        return;
    }
    let one = |bi: usize, dst: &mut [T], threads: usize| {
        let view = |l: &Layout| View::of(l, bi, batch_dims);
        product(dst, (m, k, n), view(la), view(lb), init.map(view), threads);
    };
    let work = m.saturating_mul(n).saturating_mul(k);
    let threads = rayon::current_num_threads().min(work / GEMM_PAR_MIN_FLOPS_PER_THREAD).max(1);
    if threads == 1 && nb > 1 && work.saturating_mul(nb) >= 2 * GEMM_PAR_MIN_FLOPS_PER_THREAD {
        out.par_chunks_mut(m * n).enumerate().for_each(|(bi, dst)| one(bi, dst, 1));
    } else {
        for (bi, dst) in out.chunks_mut(m * n).enumerate() {
            one(bi, dst, threads);
        }
    }
}

/// Validates a bf16 product's slices and layouts as the backend does
/// (`a @ b`, or `init + a @ b` with `init`'s layout checked as `addmm`'s),
/// for the kernels' own entry points used by tests and benchmarks.
pub(crate) fn validate_bf16_product(
    a: &[half::bf16],
    la: &Layout,
    b: &[half::bf16],
    lb: &Layout,
    init: Option<(&[half::bf16], &Layout)>,
) -> autograd_core::Result<()> {
    validate_low_product(autograd_core::DType::BF16, a.len(), la, b.len(), lb, init.map(|(c, lc)| (c.len(), lc)))
}

/// [`validate_bf16_product`] for slices of `dtype` given by their lengths.
pub(crate) fn validate_low_product(
    dtype: autograd_core::DType,
    a: usize,
    la: &Layout,
    b: usize,
    lb: &Layout,
    init: Option<(usize, &Layout)>,
) -> autograd_core::Result<()> {
    use autograd_core::validate;
    validate::input("matmul", a, la)?;
    validate::input("matmul", b, lb)?;
    match init {
        Some((c, lc)) => {
            validate::input("addmm", c, lc)?;
            validate::addmm(lc, la, lb, dtype)?;
        }
        None => {
            validate::matmul(la, lb, dtype)?;
        }
    }
    Ok(())
}
