//! Gradient hooks: functions that see (and may replace) a gradient as the
//! engine passes it along.

use crate::Tensor;
use autograd_core::Backend;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

static NEXT_HOOK: AtomicU64 = AtomicU64::new(0);

/// A hook on a gradient: returns `Some(new)` to replace it, `None` to keep it.
pub type GradHook<B> = Box<dyn Fn(&Tensor<B>) -> Option<Tensor<B>> + Send + Sync>;
/// A hook run on a leaf after its `.grad` was updated.
pub type PostAccumulateHook<B> = Box<dyn Fn(&Tensor<B>) + Send + Sync>;

/// Hooks of one tensor (leaf) or one node (non-leaf), in registration order.
pub(crate) struct HookList<H> {
    pub(crate) hooks: Mutex<Vec<(u64, H)>>,
}

impl<H> Default for HookList<H> {
    fn default() -> Self {
        HookList { hooks: Mutex::new(Vec::new()) }
    }
}

impl<H: Send + 'static> HookList<H> {
    pub(crate) fn add(self: &Arc<Self>, h: H) -> RemovableHandle {
        let id = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
        self.hooks.lock().unwrap_or_else(|e| e.into_inner()).push((id, h));
        let weak: Weak<Self> = Arc::downgrade(self);
        RemovableHandle {
            remove: Box::new(move || {
                if let Some(list) = weak.upgrade() {
                    list.hooks.lock().unwrap_or_else(|e| e.into_inner()).retain(|(i, _)| *i != id);
                }
            }),
        }
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.hooks.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }
}

impl<B: Backend> HookList<GradHook<B>> {
    /// Runs every hook in order, each seeing the previous one's result.
    pub(crate) fn apply(&self, mut g: Tensor<B>) -> Tensor<B> {
        for (_, h) in self.hooks.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if let Some(new) = h(&g) {
                g = new;
            }
        }
        g
    }
}

/// Removes its hook when `remove()` is called (dropping it keeps the hook, as in PyTorch).
///
/// ```
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::scalar(1.0f64).requires_grad_(true);
/// let h = x.register_hook(|g| Some(g * 10.0));
/// (&x * 2.0).backward().unwrap();
/// assert_eq!(x.grad().unwrap().item(), 20.0);
/// h.remove();
/// (&x * 2.0).backward().unwrap();
/// assert_eq!(x.grad().unwrap().item(), 22.0);
/// ```
pub struct RemovableHandle {
    remove: Box<dyn Fn() + Send + Sync>,
}

impl RemovableHandle {
    /// Unregisters the hook.
    pub fn remove(self) {
        (self.remove)()
    }
}

impl std::fmt::Debug for RemovableHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RemovableHandle")
    }
}
