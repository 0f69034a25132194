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
//! - host bookkeeping that must run on every step (an optimizer's step
//!   count and learning rate) is handed to the recorder as a [`HostOp`],
//!   which the replay runs at the same point of the program.
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
//!     let _capture = capture::begin_capture(None);
//!     x.try_to_vec::<f64>().unwrap_err()
//! };
//! assert!(err.to_string().contains("host read"));
//! assert_eq!(x.to_vec::<f64>(), vec![1.0, 2.0]); // capture ended with the guard
//! ```

use autograd_core::{Error, Result};
use std::cell::RefCell;
use std::panic::Location;
use std::sync::Arc;

/// Host-side work a replay must repeat at its place in the program: the
/// per-step bookkeeping of an optimizer (step counts, the learning rate in
/// force, the update rules they make). It must not read tensor values.
pub trait HostOp: Send + Sync {
    /// A short name for printed programs (`"Adam.step"`).
    fn name(&self) -> String;
    /// Runs the bookkeeping once.
    fn run(&self) -> Result<()>;
}

/// Where a capture sends [`HostOp`]s: the recorder, in program order.
pub type HostOpSink = Box<dyn Fn(Arc<dyn HostOp>)>;

struct State {
    sink: Option<HostOpSink>,
}

thread_local! {
    static CAPTURE: RefCell<Vec<State>> = const { RefCell::new(Vec::new()) };
}

/// Ends the capture begun by [`begin_capture`] when dropped.
#[must_use = "the capture ends when the guard is dropped"]
pub struct CaptureGuard {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|c| c.borrow_mut().pop());
    }
}

/// Starts capturing on this thread until the guard drops: host reads and
/// hooks become `Err`s, and [`record_host_op`] hands its op to `sink`
/// (none: host ops are refused too). Captures nest; the innermost rules.
pub fn begin_capture(sink: Option<HostOpSink>) -> CaptureGuard {
    CAPTURE.with(|c| c.borrow_mut().push(State { sink }));
    CaptureGuard { _not_send: std::marker::PhantomData }
}

/// Whether this thread is capturing a step.
///
/// ```
/// use autograd_tensor::capture;
/// assert!(!capture::is_capturing());
/// let g = capture::begin_capture(None);
/// assert!(capture::is_capturing());
/// drop(g);
/// assert!(!capture::is_capturing());
/// ```
pub fn is_capturing() -> bool {
    CAPTURE.with(|c| !c.borrow().is_empty())
}

/// Hands `op` to the recorder when capturing (and returns true), so that
/// every replay runs it; outside a capture it does nothing (false). `Err`
/// when the capture has no place for host ops.
pub fn record_host_op(op: Arc<dyn HostOp>) -> Result<bool> {
    CAPTURE.with(|c| {
        let c = c.borrow();
        match c.last() {
            None => Ok(false),
            Some(State { sink: Some(sink) }) => {
                sink(op);
                Ok(true)
            }
            Some(State { sink: None }) => {
                Err(Error::msg(format!("{}: this capture does not record host-side bookkeeping, which a replay would skip", op.name())))
            }
        }
    })
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
/// let _g = capture::begin_capture(None);
/// assert!(capture::refuse_side_effect("a log line", "log after the step").is_err());
/// ```
#[track_caller]
pub fn refuse_side_effect(what: &str, hint: &str) -> Result<()> {
    refuse(what, hint, Some(Location::caller()))
}
