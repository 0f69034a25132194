//! Thread-local grad mode: whether ops record a graph.

use std::cell::Cell;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
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
