//! Measuring activation memory with the storage counters.

use autograd_core::{Backend, Result, memory};
use autograd_tensor::Tensor;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What [`activation_peak`] measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// Peak of live storage bytes during the run above what was live before,
    /// not counting the parameters' gradients: the activations kept for
    /// backward plus the temporaries of forward and backward.
    pub peak_bytes: usize,
    /// Bytes of parameter gradients the run created (the same for every
    /// checkpointing policy).
    pub grad_bytes: usize,
}

/// Runs `run` (a forward and backward) and measures its peak memory with
/// the parameters' gradients left out: each gradient is excluded from the
/// count once it is stored (PyTorch's activation-memory view). Gradients
/// of `params` are cleared first and kept after.
///
/// The counters are process-wide: measure while no other thread allocates.
///
/// ```
/// use autograd_checkpoint::activation_peak;
/// use autograd_core::{DType, RefBackend};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::ones_dtype([1000], DType::F64).requires_grad_(true);
/// let r = activation_peak(&[w.clone()], || (&w * &w).sum().backward()).unwrap();
/// assert_eq!(r.grad_bytes, 8000);
/// assert!(r.peak_bytes >= 8000); // w*w's output and the incoming gradient
/// ```
pub fn activation_peak<B: Backend>(params: &[Tensor<B>], run: impl FnOnce() -> Result<()>) -> Result<MemoryReport> {
    let excluded = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::with_capacity(params.len());
    for p in params {
        p.set_grad(None);
        let (seen, excluded) = (Arc::new(AtomicBool::new(false)), excluded.clone());
        handles.push(p.register_post_accumulate_grad_hook(move |t: &Tensor<B>| {
            if !seen.swap(true, Ordering::Relaxed) {
                let bytes = t.grad().map_or(0, |g| g.numel() * g.dtype().size_in_bytes());
                memory::exclude(bytes);
                excluded.fetch_add(bytes, Ordering::Relaxed);
            }
        })?);
    }
    memory::reset_peak();
    let base = memory::peak_net_bytes();
    let result = run();
    let peak = memory::peak_net_bytes().saturating_sub(base);
    for h in handles {
        h.remove();
    }
    let grad_bytes = excluded.load(Ordering::Relaxed);
    memory::unexclude(grad_bytes);
    result?;
    Ok(MemoryReport { peak_bytes: peak, grad_bytes })
}
