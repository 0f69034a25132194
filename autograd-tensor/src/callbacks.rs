//! Callbacks queued during a backward pass (PyTorch's
//! `queue_callback`), run when the pass has delivered every gradient: the
//! engine opens a frame per pass and runs it before `backward()` returns.

use autograd_core::{Error, Result};

/// A function run once the backward pass that queued it has finished.
type Callback = Box<dyn FnOnce() -> Result<()>>;

thread_local! {
    /// Callbacks queued by the backward passes running on this thread,
    /// one list per pass (a hook may start a nested pass).
    static CALLBACKS: std::cell::RefCell<Vec<Vec<Callback>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Queues `f` to run when the backward pass now running on this thread has
/// delivered every gradient, before `backward()` returns (PyTorch's
/// `Variable._execution_engine.queue_callback`). Callbacks run in the order
/// queued; the first `Err` becomes the pass's `Err`. A pass that fails
/// runs none. `Err` outside a backward pass.
///
/// Distributed data parallelism uses it to wait for its last all-reduce,
/// so that gradients are averaged when `backward()` returns.
///
/// ```
/// use autograd_tensor::{queue_callback, Tensor};
/// use autograd_core::RefBackend;
/// use std::sync::{Arc, Mutex};
/// let x = Tensor::<RefBackend>::scalar(2.0f64).requires_grad_(true);
/// let seen = Arc::new(Mutex::new(None));
/// let s = seen.clone();
/// let h = x.register_post_accumulate_grad_hook(move |t| {
///     let (s, t) = (s.clone(), t.clone());
///     queue_callback(move || { *s.lock().unwrap() = Some(t.grad().unwrap().item()); Ok(()) }).unwrap();
/// }).unwrap();
/// (&x * 3.0).backward().unwrap();
/// assert_eq!(*seen.lock().unwrap(), Some(3.0));
/// assert!(queue_callback(|| Ok(())).is_err()); // not inside backward
/// h.remove();
/// ```
pub fn queue_callback(f: impl FnOnce() -> Result<()> + 'static) -> Result<()> {
    CALLBACKS.with(|c| match c.borrow_mut().last_mut() {
        Some(list) => {
            list.push(Box::new(f));
            Ok(())
        }
        None => Err(Error::Autograd("queue_callback: no backward pass is running on this thread".into())),
    })
}

/// Whether a backward pass is running on this thread (its nodes, hooks or
/// end-of-pass callbacks): a forward run now is a recomputation inside it
/// (activation checkpointing), not a new step.
///
/// ```
/// use autograd_tensor::{is_backward_running, Tensor};
/// use autograd_core::RefBackend;
/// use std::sync::{atomic::{AtomicBool, Ordering}, Arc};
/// let x = Tensor::<RefBackend>::scalar(2.0f64).requires_grad_(true);
/// let seen = Arc::new(AtomicBool::new(false));
/// let s = seen.clone();
/// let h = x.register_hook(move |_| { s.store(is_backward_running(), Ordering::Relaxed); None });
/// (&x * 3.0).backward().unwrap();
/// assert!(seen.load(Ordering::Relaxed) && !is_backward_running());
/// h.remove();
/// ```
pub fn is_backward_running() -> bool {
    CALLBACKS.with(|c| !c.borrow().is_empty())
}

/// Opens this pass's callback list; dropping it discards what was queued.
pub(crate) struct CallbackFrame;
impl CallbackFrame {
    pub(crate) fn open() -> Self {
        CALLBACKS.with(|c| c.borrow_mut().push(Vec::new()));
        CallbackFrame
    }
    /// Runs the queued callbacks (and any they queue) in order.
    pub(crate) fn run(self) -> Result<()> {
        loop {
            let batch = CALLBACKS.with(|c| c.borrow_mut().last_mut().map(std::mem::take).unwrap_or_default());
            if batch.is_empty() {
                return Ok(());
            }
            for f in batch {
                f()?;
            }
        }
    }
}
impl Drop for CallbackFrame {
    fn drop(&mut self) {
        let _ = CALLBACKS.try_with(|c| c.borrow_mut().pop());
    }
}
