//! Saved-tensor hooks (PyTorch's `torch.autograd.graph.saved_tensors_hooks`):
//! while a hook is installed on this thread, every tensor an op saves for
//! its backward is handed to `pack`, and the graph keeps only what `pack`
//! returns; backward asks `unpack` for the tensor again. Activation
//! checkpointing is built on this: pack drops the tensor, unpack recomputes it.

use crate::Tensor;
use autograd_core::{Backend, Result};
use std::any::Any;
use std::cell::RefCell;
use std::sync::Arc;

/// What a graph keeps instead of a saved tensor.
pub type PackedTensor = Box<dyn Any + Send + Sync>;

/// A pair of pack/unpack hooks for saved tensors.
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_tensor::{with_saved_tensor_hooks, PackedTensor, SavedTensorHooks, Tensor};
/// use std::sync::{atomic::{AtomicUsize, Ordering}, Arc};
/// // Counts what the graph saves, keeps it unchanged.
/// struct Count(AtomicUsize);
/// impl SavedTensorHooks<RefBackend> for Count {
///     fn pack(&self, t: &Tensor<RefBackend>) -> PackedTensor { self.0.fetch_add(1, Ordering::Relaxed); Box::new(t.clone()) }
///     fn unpack(&self, p: &PackedTensor) -> autograd_core::Result<Tensor<RefBackend>> { Ok(p.downcast_ref::<Tensor<RefBackend>>().unwrap().clone()) }
/// }
/// let hooks = Arc::new(Count(AtomicUsize::new(0)));
/// let x = Tensor::<RefBackend>::scalar(2.0f64).requires_grad_(true);
/// let y = with_saved_tensor_hooks(hooks.clone(), || &x * &x); // mul saves both operands
/// y.backward().unwrap();
/// assert_eq!(hooks.0.load(Ordering::Relaxed), 2);
/// assert_eq!(x.grad().unwrap().item(), 4.0);
/// ```
pub trait SavedTensorHooks<B: Backend>: Send + Sync {
    /// Called when an op saves `t` for backward; the graph keeps the result.
    fn pack(&self, t: &Tensor<B>) -> PackedTensor;
    /// Called when backward needs the tensor back.
    fn unpack(&self, packed: &PackedTensor) -> Result<Tensor<B>>;
}

thread_local! {
    // Each entry is an `Arc<dyn SavedTensorHooks<B>>` for some backend `B`, boxed as `Any`.
    static STACK: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

struct Pop;
impl Drop for Pop {
    fn drop(&mut self) {
        STACK.with(|s| s.borrow_mut().pop());
    }
}

/// Runs `f` with `hooks` installed on this thread (innermost wins; nesting
/// is allowed). Tensors saved by ops recorded inside `f` go through them.
pub fn with_saved_tensor_hooks<B: Backend, R>(hooks: Arc<dyn SavedTensorHooks<B>>, f: impl FnOnce() -> R) -> R {
    STACK.with(|s| s.borrow_mut().push(Box::new(hooks)));
    let _pop = Pop;
    f()
}

/// Runs `f` with saved-tensor hooks disabled (ops save normally), e.g. to
/// keep a tensor inside a region whose hooks would drop it.
pub fn without_saved_tensor_hooks<R>(f: impl FnOnce() -> R) -> R {
    let saved = STACK.with(|s| std::mem::take(&mut *s.borrow_mut()));
    struct Restore(Option<Vec<Box<dyn Any>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let v = self.0.take().unwrap_or_default();
            STACK.with(|s| *s.borrow_mut() = v);
        }
    }
    let _r = Restore(Some(saved));
    f()
}

/// The innermost hooks for backend `B` on this thread, if any.
pub(crate) fn current<B: Backend>() -> Option<Arc<dyn SavedTensorHooks<B>>> {
    STACK.with(|s| s.borrow().last().and_then(|h| h.downcast_ref::<Arc<dyn SavedTensorHooks<B>>>().cloned()))
}
