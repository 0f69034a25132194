//! Anomaly detection: a backward node that produces NaN or Inf becomes an
//! error naming the node and the source line of the forward op.

use std::cell::Cell;

thread_local! {
    static ANOMALY: Cell<bool> = const { Cell::new(false) };
}

/// Whether anomaly detection is on for this thread.
pub fn is_anomaly_enabled() -> bool {
    ANOMALY.with(|a| a.get())
}

/// Turns anomaly detection on until dropped (PyTorch's `detect_anomaly()`).
/// Every gradient a node returns is scanned, which costs a pass over it.
///
/// ```
/// use autograd_tensor::{Tensor, DetectAnomaly};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::scalar(0.0f64).requires_grad_(true);
/// let _guard = DetectAnomaly::new();
/// let e = x.sqrt().backward().unwrap_err().to_string();
/// assert!(e.contains("SqrtBackward0"));
/// ```
#[must_use = "anomaly detection stops when the guard is dropped"]
pub struct DetectAnomaly {
    prev: bool,
}

impl DetectAnomaly {
    /// Enables detection.
    pub fn new() -> Self {
        DetectAnomaly { prev: ANOMALY.with(|a| a.replace(true)) }
    }
}

impl Default for DetectAnomaly {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for DetectAnomaly {
    fn drop(&mut self) {
        ANOMALY.with(|a| a.set(self.prev));
    }
}
