//! Capture: what the tensor layer knows of a step being recorded by a
//! tracing backend (`autograd-jit`'s `compile`).
//!
//! A recorder sees backend primitives only; what happens above them and
//! would not happen again when the recorded program is replayed must be
//! refused while capturing, or recorded. This module is that boundary:
//!
//! - a read of tensor values on the host ([`crate::Tensor::try_to_host`] and
//!   everything built on it: `item`, `to_vec`) is an `Err` naming the
//!   caller's line, because the replay would not read again and a decision
//!   taken on the value would be baked in;
//! - tensor hooks (`register_hook`, post-accumulate hooks) are an `Err` when
//!   the engine would run one: their side effects are not recorded;
//! - nothing host-side is replayed: what must change from one step to the
//!   next (an optimizer's step count and learning rate) lives in device
//!   buffers the recorded primitives read and write.
//!
//! Capture is per thread: the thread that runs the step. Library code that
//! has a host-side shortcut (`safe_softmax`'s check for masked rows,
//! `nll_loss`'s host targets) takes its device path while [`is_capturing`].
//!
//! ```
//! use autograd_tensor::{Tensor, capture};
//! use autograd_core::RefBackend;
//! let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [2]);
//! let err = {
//!     let _capture = capture::begin_capture();
//!     x.try_to_vec::<f64>().unwrap_err()
//! };
//! assert!(err.to_string().contains("host read"));
//! assert_eq!(x.to_vec::<f64>(), vec![1.0, 2.0]); // capture ended with the guard
//! ```

use crate::Tensor;
use autograd_core::{Backend, Error, Result};
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::Location;
use std::rc::Rc;
use std::sync::Arc;

/// What a tracing backend is told of the tensors a captured step touches
/// above its primitives: the facts its program depends on, which a replay
/// must find unchanged (see [`begin_capture_observed`]).
pub trait CaptureObserver<B: Backend>: 'static {
    /// A leaf tensor was an input of a recorded op with grad mode on: its
    /// `requires_grad` decided whether a graph node was recorded, so the
    /// backward the program holds depends on it.
    fn leaf_read(&self, leaf: &Tensor<B>);
    /// Backward accumulated into `leaf`'s existing gradient `grad` in place:
    /// the program reads and writes that gradient's storage. Called with
    /// the leaf's gradient slot locked: read `grad`, not `leaf.grad()`.
    fn grad_accumulated(&self, leaf: &Tensor<B>, grad: &Tensor<B>);
}

/// A host-side fact a step read while it was captured and baked into the
/// recorded program (a module's training flag): a replay checks that it
/// still holds, and records the step afresh when it does not.
pub trait ReplayGuard: Send + Sync {
    /// Whether the fact is as it was when the step was captured.
    fn holds(&self) -> bool;
    /// What the fact is, for messages (`"Dropout.training == true"`).
    fn describe(&self) -> String;
}

struct State {
    /// An `Rc<dyn CaptureObserver<B>>` for the capture's backend `B`.
    observer: Option<Box<dyn Any>>,
    guards: Vec<Arc<dyn ReplayGuard>>,
}

thread_local! {
    static CAPTURE: RefCell<Vec<State>> = const { RefCell::new(Vec::new()) };
    /// Whether the innermost capture of this thread has an observer: the
    /// one check the tensor layer's hot paths make.
    static OBSERVING: Cell<bool> = const { Cell::new(false) };
}

fn refresh_observing(states: &[State]) {
    OBSERVING.with(|o| o.set(states.last().is_some_and(|s| s.observer.is_some())));
}

/// Ends the capture begun by [`begin_capture`] when dropped.
#[must_use = "the capture ends when the guard is dropped"]
pub struct CaptureGuard {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|c| {
            let mut c = c.borrow_mut();
            c.pop();
            refresh_observing(&c);
        });
    }
}

impl CaptureGuard {
    /// The [`ReplayGuard`]s the step registered so far (with
    /// [`guard_replay`]), taken out of the capture.
    pub fn take_guards(&self) -> Vec<Arc<dyn ReplayGuard>> {
        CAPTURE.with(|c| c.borrow_mut().last_mut().map(|s| std::mem::take(&mut s.guards)).unwrap_or_default())
    }
}

/// Starts capturing on this thread until the guard drops: host reads and
/// hooks become `Err`s. Captures nest; the innermost rules.
pub fn begin_capture() -> CaptureGuard {
    push(State { observer: None, guards: Vec::new() })
}

/// [`begin_capture`] that also tells `observer` which leaf tensors the
/// step's recorded ops read and which gradients backward accumulated into
/// in place (tensors of backend `B` only), and keeps the [`ReplayGuard`]s
/// the step registers for [`CaptureGuard::take_guards`].
///
/// ```
/// use autograd_tensor::{Tensor, capture::{self, CaptureObserver}};
/// use autograd_core::RefBackend;
/// use std::{cell::Cell, rc::Rc};
/// struct Count(Cell<usize>);
/// impl CaptureObserver<RefBackend> for Count {
///     fn leaf_read(&self, _: &Tensor<RefBackend>) { self.0.set(self.0.get() + 1) }
///     fn grad_accumulated(&self, _: &Tensor<RefBackend>, _: &Tensor<RefBackend>) {}
/// }
/// let seen = Rc::new(Count(Cell::new(0)));
/// let w = Tensor::<RefBackend>::ones([2]).requires_grad_(true);
/// {
///     let _c = capture::begin_capture_observed::<RefBackend>(seen.clone());
///     let _ = (&w * &w).sum(); // w read by `mul` (twice); the sum's input is not a leaf
/// }
/// assert_eq!(seen.0.get(), 2);
/// ```
pub fn begin_capture_observed<B: Backend>(observer: Rc<dyn CaptureObserver<B>>) -> CaptureGuard {
    push(State { observer: Some(Box::new(observer)), guards: Vec::new() })
}

fn push(state: State) -> CaptureGuard {
    CAPTURE.with(|c| {
        let mut c = c.borrow_mut();
        c.push(state);
        refresh_observing(&c);
    });
    CaptureGuard { _not_send: std::marker::PhantomData }
}

/// Whether this thread's innermost capture observes tensors (cheap: a
/// thread-local flag).
#[inline]
pub(crate) fn observing() -> bool {
    OBSERVING.with(Cell::get)
}

fn with_observer<B: Backend>(f: impl FnOnce(&dyn CaptureObserver<B>)) {
    let observer = CAPTURE.with(|c| {
        c.borrow().last().and_then(|s| s.observer.as_ref()).and_then(|o| o.downcast_ref::<Rc<dyn CaptureObserver<B>>>()).cloned()
    });
    // called outside the borrow: the observer may look at the tensors freely
    if let Some(o) = observer {
        f(&*o)
    }
}

/// Tells the observer (if any) that the leaves among `inputs` were read by
/// a recorded op.
pub(crate) fn leaves_read<B: Backend>(inputs: &[&Tensor<B>]) {
    if inputs.iter().any(|t| t.is_leaf()) {
        with_observer::<B>(|o| inputs.iter().filter(|t| t.is_leaf()).for_each(|t| o.leaf_read(t)));
    }
}

/// Tells the observer (if any) that backward accumulated into `leaf`'s gradient `grad` in place.
pub(crate) fn grad_accumulated<B: Backend>(leaf: &Tensor<B>, grad: &Tensor<B>) {
    if observing() {
        with_observer::<B>(|o| o.grad_accumulated(leaf, grad));
    }
}

/// Registers `guard` with the innermost capture (a no-op outside one):
/// the step read a host-side fact that its recorded program bakes in.
///
/// ```
/// use autograd_tensor::capture::{self, ReplayGuard};
/// use std::sync::Arc;
/// struct Never;
/// impl ReplayGuard for Never {
///     fn holds(&self) -> bool { false }
///     fn describe(&self) -> String { "never".into() }
/// }
/// capture::guard_replay(Arc::new(Never)); // not capturing: nothing kept
/// let c = capture::begin_capture();
/// capture::guard_replay(Arc::new(Never));
/// assert_eq!(c.take_guards().len(), 1);
/// ```
pub fn guard_replay(guard: Arc<dyn ReplayGuard>) {
    CAPTURE.with(|c| {
        if let Some(s) = c.borrow_mut().last_mut() {
            s.guards.push(guard);
        }
    });
}

/// Whether this thread is capturing a step.
///
/// ```
/// use autograd_tensor::capture;
/// assert!(!capture::is_capturing());
/// let g = capture::begin_capture();
/// assert!(capture::is_capturing());
/// drop(g);
/// assert!(!capture::is_capturing());
/// ```
pub fn is_capturing() -> bool {
    CAPTURE.with(|c| !c.borrow().is_empty())
}

/// `Err` for `what` (a side effect a replay would skip) while capturing,
/// naming the caller's line.
pub(crate) fn refuse(what: &str, hint: &str, loc: Option<&'static Location<'static>>) -> Result<()> {
    if is_capturing() {
        let at = loc.map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        return Err(Error::msg(format!(
            "{what}{at} while a step is being captured for compile: the replayed program would skip it ({hint})"
        )));
    }
    Ok(())
}

/// `Err` while a step is captured, naming `what` (a side effect a replay
/// would skip: a scheduler step, a loss scaler's check), the caller's line
/// and `hint` (what to do instead); `Ok` otherwise.
///
/// ```
/// use autograd_tensor::capture;
/// assert!(capture::refuse_side_effect("a log line", "log after the step").is_ok());
/// let _g = capture::begin_capture();
/// assert!(capture::refuse_side_effect("a log line", "log after the step").is_err());
/// ```
#[track_caller]
pub fn refuse_side_effect(what: &str, hint: &str) -> Result<()> {
    refuse(what, hint, Some(Location::caller()))
}
