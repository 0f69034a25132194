//! Thread-local grad mode: whether ops record a graph.

use std::cell::Cell;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    static INFERENCE: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is in inference mode.
pub fn is_inference_mode() -> bool {
    INFERENCE.with(|g| g.get())
}

/// Inference mode until dropped: no graph is recorded, and tensors created
/// meanwhile are marked so that they can never enter autograd later
/// (PyTorch's `torch.inference_mode()`).
///
/// ```
/// use autograd_tensor::{InferenceModeGuard, Tensor};
/// use autograd_core::RefBackend;
/// let w = Tensor::<RefBackend>::scalar(2.0f64).requires_grad_(true);
/// let y = {
///     let _g = InferenceModeGuard::new();
///     &w * 3.0
/// };
/// assert!(y.is_inference() && !y.requires_grad());
/// assert!(y.try_requires_grad_(true).is_err());
/// ```
#[must_use = "inference mode ends when the guard is dropped"]
pub struct InferenceModeGuard {
    prev_grad: bool,
    prev_inf: bool,
}

impl InferenceModeGuard {
    /// Enters inference mode.
    pub fn new() -> Self {
        InferenceModeGuard { prev_grad: set_grad_enabled(false), prev_inf: INFERENCE.with(|g| g.replace(true)) }
    }
}

impl Default for InferenceModeGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for InferenceModeGuard {
    fn drop(&mut self) {
        set_grad_enabled(self.prev_grad);
        INFERENCE.with(|g| g.set(self.prev_inf));
    }
}

/// Runs `f` in inference mode.
pub fn inference_mode<R>(f: impl FnOnce() -> R) -> R {
    let _g = InferenceModeGuard::new();
    f()
}

/// Whether ops on this thread record the autograd graph.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Sets grad mode on this thread; returns the previous value.
pub fn set_grad_enabled(on: bool) -> bool {
    GRAD_ENABLED.with(|g| g.replace(on))
}

/// Restores the previous grad mode when dropped.
///
/// ```
/// use autograd_tensor::{is_grad_enabled, NoGradGuard};
/// {
///     let _g = NoGradGuard::new();
///     assert!(!is_grad_enabled());
/// }
/// assert!(is_grad_enabled());
/// ```
#[must_use = "grad mode is restored when the guard is dropped"]
pub struct NoGradGuard {
    prev: bool,
}

impl NoGradGuard {
    /// Disables recording until the guard is dropped.
    pub fn new() -> Self {
        NoGradGuard { prev: set_grad_enabled(false) }
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        set_grad_enabled(self.prev);
    }
}

/// Enables recording until dropped (inside a `no_grad` region, for example).
#[must_use = "grad mode is restored when the guard is dropped"]
pub struct EnableGradGuard {
    prev: bool,
}

impl EnableGradGuard {
    /// Enables recording until the guard is dropped.
    pub fn new() -> Self {
        EnableGradGuard { prev: set_grad_enabled(true) }
    }
}

impl Default for EnableGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for EnableGradGuard {
    fn drop(&mut self) {
        set_grad_enabled(self.prev);
    }
}

/// Runs `f` without recording a graph (PyTorch's `with torch.no_grad():`).
///
/// ```
/// use autograd_tensor::{no_grad, is_grad_enabled};
/// assert!(!no_grad(is_grad_enabled));
/// ```
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = NoGradGuard::new();
    f()
}

/// Runs `f` with recording enabled.
pub fn enable_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = EnableGradGuard::new();
    f()
}
