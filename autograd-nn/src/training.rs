//! A module's training mode, as a flag a compiled step can guard on.

use autograd_tensor::capture::{self, ReplayGuard};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// A module's training flag (PyTorch's `self.training`). Reading it in a
/// forward with [`TrainingFlag::get`] while a step is being traced for
/// `compile` registers a guard, so that `model.eval()` (or `train()`)
/// between replays traces the step afresh instead of replaying the other
/// mode's program (dropout still drawn, batch statistics still used).
///
/// `#[derive(Module)]` treats it as configuration, like a number; a module
/// of your own whose forward depends on the mode keeps one and answers
/// `set_training`/`is_training` from it.
///
/// ```
/// use autograd_nn::TrainingFlag;
/// let f = TrainingFlag::default();
/// assert!(f.get("MyLayer")); // modules start in training mode
/// f.set(false);
/// assert!(!f.peek());
/// let copy = f.clone(); // a cloned module gets its own flag
/// copy.set(true);
/// assert!(!f.peek());
/// ```
#[derive(Debug)]
pub struct TrainingFlag(Arc<AtomicBool>);

impl Default for TrainingFlag {
    /// In training mode, as every PyTorch module starts.
    fn default() -> Self {
        TrainingFlag::new(true)
    }
}

impl Clone for TrainingFlag {
    fn clone(&self) -> Self {
        TrainingFlag::new(self.peek())
    }
}

impl TrainingFlag {
    /// A flag set to `on`.
    pub fn new(on: bool) -> Self {
        TrainingFlag(Arc::new(AtomicBool::new(on)))
    }
    /// Sets the mode.
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }
    /// The mode, as a forward reads it: while a step is traced, a replay
    /// of it is guarded on this value (`module` names it in messages).
    pub fn get(&self, module: &'static str) -> bool {
        let on = self.peek();
        if capture::is_capturing() {
            capture::guard_replay(Arc::new(FlagGuard { flag: Arc::downgrade(&self.0), on, module }));
        }
        on
    }
    /// The mode, without guarding anything (`is_training`, printing).
    pub fn peek(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

struct FlagGuard {
    flag: Weak<AtomicBool>,
    on: bool,
    module: &'static str,
}

impl ReplayGuard for FlagGuard {
    /// A module dropped since cannot change mode: its forward no longer runs.
    fn holds(&self) -> bool {
        self.flag.upgrade().is_none_or(|f| f.load(Ordering::Relaxed) == self.on)
    }
    fn describe(&self) -> String {
        format!("{}.training == {}", self.module, self.on)
    }
}
