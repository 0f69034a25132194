//! The recording: which primitives a traced step ran, on which buffers.
//!
//! One recording at a time in the process (tracing takes a lock). An op is
//! recorded when it runs on the tracing thread, or on another thread (a
//! rayon worker) with an input the recording already knows; ops elsewhere
//! (another test, another model) are not. A buffer first seen as an input
//! is *external*: the recording keeps a handle on it (a parameter, a
//! gradient kept from before, optimizer state, the batch). A buffer made
//! by a recorded op is *produced*: the recording keeps only a weak handle,
//! so that what is still alive when the step returns (a gradient the
//! parameter holds) can be told from temporaries.

use crate::buffer::Buf;
use autograd_core::{Backend, DType, Error, Primitive, Result};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::ThreadId;

/// A value of the program: one buffer's contents.
pub type ValueId = usize;

/// One recorded op: a primitive call that reads `ins`, reads and writes
/// `mutated` in place, and makes `outs`.
#[derive(Clone)]
pub(crate) struct Op<B: Backend> {
    pub(crate) prim: Primitive<B>,
    pub(crate) ins: Vec<ValueId>,
    pub(crate) mutated: Vec<ValueId>,
    pub(crate) outs: Vec<ValueId>,
}

impl<B: Backend> Op<B> {
    /// Every value the op reads (inputs, then the buffers it updates).
    pub(crate) fn reads(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.ins.iter().chain(&self.mutated).copied()
    }
}

pub(crate) enum Origin<B: Backend> {
    External(Arc<Buf<B>>),
    Produced(Weak<Buf<B>>),
}

pub(crate) struct ValueInfo<B: Backend> {
    pub(crate) dtype: DType,
    pub(crate) len: usize,
    pub(crate) origin: Origin<B>,
}

pub(crate) struct Recording<B: Backend> {
    thread: ThreadId,
    known: FxHashMap<u64, ValueId>,
    pub(crate) values: Vec<ValueInfo<B>>,
    pub(crate) ops: Vec<Op<B>>,
    /// The first reason the recording cannot be replayed faithfully.
    pub(crate) poisoned: Option<String>,
}

impl<B: Backend> Recording<B> {
    /// The value of buffer `s`, made external if the recording has not seen it.
    pub(crate) fn value(&mut self, s: &Arc<Buf<B>>) -> ValueId {
        if let Some(&v) = self.known.get(&s.id) {
            return v;
        }
        self.new_value(s, Origin::External(s.clone()))
    }
    /// The value of buffer `s` if a recorded op made it (not if it came from outside).
    pub(crate) fn produced(&self, s: &Arc<Buf<B>>) -> Option<ValueId> {
        let &v = self.known.get(&s.id)?;
        matches!(self.values[v].origin, Origin::Produced(_)).then_some(v)
    }
    fn new_value(&mut self, s: &Arc<Buf<B>>, origin: Origin<B>) -> ValueId {
        let v = self.values.len();
        self.values.push(ValueInfo { dtype: s.dtype(), len: s.len(), origin });
        self.known.insert(s.id, v);
        v
    }
}

static ACTIVE: AtomicBool = AtomicBool::new(false);
static RECORDING: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);
/// Held for a whole trace: one trace at a time in the process.
pub(crate) static TRACE_LOCK: Mutex<()> = Mutex::new(());

fn recording() -> MutexGuard<'static, Option<Box<dyn Any + Send>>> {
    RECORDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether some thread is tracing (a cheap check before any work).
pub(crate) fn is_active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Starts recording backend `B` on this thread (the caller holds [`TRACE_LOCK`]).
pub(crate) fn start<B: Backend>() {
    let rec = Recording::<B> {
        thread: std::thread::current().id(),
        known: FxHashMap::default(),
        values: Vec::new(),
        ops: Vec::new(),
        poisoned: None,
    };
    *recording() = Some(Box::new(rec));
    ACTIVE.store(true, Ordering::Release);
}

/// Stops recording and hands the recording over.
pub(crate) fn finish<B: Backend>() -> Option<Recording<B>> {
    ACTIVE.store(false, Ordering::Release);
    let taken = recording().take()?;
    taken.downcast::<Recording<B>>().ok().map(|b| *b)
}

/// Runs `f` on the recording of backend `B` if this thread's op belongs to it.
fn with_recording<B: Backend>(ids: &[&Arc<Buf<B>>], f: impl FnOnce(&mut Recording<B>)) {
    if !is_active() {
        return;
    }
    let mut guard = recording();
    let Some(rec) = guard.as_mut().and_then(|r| r.downcast_mut::<Recording<B>>()) else { return };
    if rec.thread != std::thread::current().id() && !ids.iter().any(|b| rec.known.contains_key(&b.id)) {
        return;
    }
    f(rec)
}

/// Records an op that read `ins`, updated `mutated` in place and made `outs`.
pub(crate) fn record<B: Backend>(ins: &[&Arc<Buf<B>>], mutated: &[&Arc<Buf<B>>], outs: &[&Arc<Buf<B>>], prim: Primitive<B>) {
    if !is_active() {
        return;
    }
    let all: SmallVec<[&Arc<Buf<B>>; 8]> = ins.iter().chain(mutated).copied().collect();
    with_recording::<B>(&all, |rec| {
        if let Primitive::Random { .. } = prim
            && autograd_tensor::is_rng_forked()
            && rec.poisoned.is_none()
        {
            rec.poisoned = Some(
                "a random draw from a forked generator (fork_rng, or dropout recomputed by checkpoint): a replay would draw from the global one".into(),
            );
        }
        let ins = ins.iter().map(|s| rec.value(s)).collect();
        let mutated = mutated.iter().map(|s| rec.value(s)).collect();
        let outs = outs.iter().map(|s| rec.new_value(s, Origin::Produced(Arc::downgrade(s)))).collect();
        rec.ops.push(Op { prim, ins, mutated, outs });
    });
}

/// A host read on the tracing thread is an `Err`: the replay would not
/// read again. (The tensor layer refuses first, naming the caller's line;
/// this catches reads that go to the backend directly.)
pub(crate) fn refuse_host_read() -> Result<()> {
    if is_active() && autograd_tensor::capture::is_capturing() {
        return Err(Error::msg(
            "to_host while a step is being traced for compile: the replayed program would not read the value again (read the step's returned outputs instead)",
        ));
    }
    Ok(())
}
