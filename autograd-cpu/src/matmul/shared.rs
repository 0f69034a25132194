//! What the f32 and bf16 GEMMs share: the pointer their workers write
//! through and the size from which a product is split over threads.

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
