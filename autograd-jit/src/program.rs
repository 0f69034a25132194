//! A compiled step as data: the recorded ops after the passes, where each
//! value lives, the memory plan's numbers, and how it prints. Building one
//! is `build.rs`'s, running one `run.rs`'s.

use crate::buffer::Buf;
use crate::recorder::{Op, ValueId};
use autograd_core::{Backend, DType, Error, Layout};
use std::fmt;
use std::sync::Arc;

/// Where a value lives while the program runs.
pub(crate) enum Loc<B: Backend> {
    /// A temporary of one replay, freed after its last reader.
    Slot,
    /// The step's `k`-th input (the batch), given anew to every replay.
    Input(usize),
    /// A buffer that outlives the step: a parameter, an optimizer state, a
    /// gradient the parameter keeps. Read and written where it is.
    Persistent(Arc<Buf<B>>),
    /// Computed once, when the program was compiled.
    Const(Arc<B::Storage>),
}

/// Element type and count of a value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meta {
    pub(crate) dtype: DType,
    pub(crate) len: usize,
}

impl Meta {
    pub(crate) fn bytes(&self) -> usize {
        self.len.saturating_mul(self.dtype.size_in_bytes())
    }
}

/// What the compiler did to a step, and the memory plan's numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Primitives recorded while tracing.
    pub traced_ops: usize,
    /// Removed as dead (their results unused, no side effect).
    pub dead_ops: usize,
    /// Evaluated once at compile time (constants and what only reads them).
    pub folded_ops: usize,
    /// Fused groups, and the elementwise ops they hold.
    pub fused_groups: usize,
    /// Elementwise ops inside fused groups.
    pub fused_ops: usize,
    /// Ops a replay runs.
    pub replay_ops: usize,
    /// Peak bytes a replay allocates and holds at once, above what was live
    /// when it started, by the memory plan (temporaries freed after their
    /// last reader; overwritten gradients released at the start).
    pub planned_peak_bytes: usize,
    /// The same measure for the traced (eager) call, from the storage
    /// counters (`autograd_core::memory`): its peak above what was live
    /// when it started.
    pub eager_peak_bytes: usize,
    /// Bytes of constants the program keeps.
    pub const_bytes: usize,
}

/// A traced and compiled step over backend `B` (made by `compile`, see the crate docs).
/// Prints as its ops, fused groups and memory plan.
pub struct Program<B: Backend> {
    pub(crate) ops: Vec<Op<B>>,
    pub(crate) meta: Vec<Meta>,
    pub(crate) locs: Vec<Loc<B>>,
    pub(crate) outputs: Vec<(ValueId, Layout)>,
    /// `frees[i]`: the temporaries whose last reader is op `i`.
    pub(crate) frees: Vec<Vec<ValueId>>,
    /// Lasting buffers the program overwrites before reading: their old
    /// contents are released when a replay starts.
    pub(crate) released: Vec<ValueId>,
    /// `parallel[i] = Some(end)`: ops `i..end` are parameter updates of
    /// distinct buffers that run side by side on the thread pool (as an
    /// eager optimizer step runs its tensors).
    pub(crate) parallel: Vec<Option<usize>>,
    /// Buffers freed by one replay, handed out again to the next (installed
    /// on the replaying thread): once warm, a replay allocates only what it
    /// returns and what kernels use inside themselves.
    pub(crate) pool: std::sync::Mutex<autograd_core::memory::Pool>,
    /// Ids of the lasting buffers, sorted (an input must not be one).
    pub(crate) persistent_ids: Vec<u64>,
    pub(crate) report: Report,
}

pub(crate) fn internal(msg: &str) -> Error {
    Error::msg(format!("compiled step: internal error: {msg}"))
}

impl<B: Backend> Program<B> {
    /// What the compiler did and the memory plan's numbers.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Bytes the replay pool holds between replays (buffers kept for reuse,
    /// not counted as live storage), and its hits and misses so far.
    pub fn pool_stats(&self) -> (usize, usize, usize) {
        let p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        (p.held_bytes(), p.hits(), p.misses())
    }
}

impl<B: Backend> fmt::Display for Program<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.report;
        writeln!(
            f,
            "program: {} ops traced, {} dead, {} folded, {} elementwise ops in {} fused groups; {} ops per replay",
            r.traced_ops, r.dead_ops, r.folded_ops, r.fused_ops, r.fused_groups, r.replay_ops
        )?;
        let name = |v: ValueId| -> String {
            match &self.locs[v] {
                Loc::Slot => format!("%{v}"),
                Loc::Input(k) => format!("in{k}"),
                Loc::Persistent(_) => format!("@{v}"),
                Loc::Const(_) => format!("c{v}"),
            }
        };
        for (i, op) in self.ops.iter().enumerate() {
            let outs: Vec<String> = op.outs.iter().map(|&v| name(v)).collect();
            let ins: Vec<String> = op.ins.iter().map(|&v| name(v)).collect();
            let muts: Vec<String> = op.mutated.iter().map(|&v| name(v)).collect();
            let lhs = if outs.is_empty() { String::new() } else { format!("{} = ", outs.join(", ")) };
            let what = if muts.is_empty() { op.prim.to_string() } else { format!("{} of {}", op.prim, muts.join(", ")) };
            let args = if ins.is_empty() { String::new() } else { format!(" ({})", ins.join(", ")) };
            let freed: Vec<String> = self.frees[i].iter().map(|&v| name(v)).collect();
            let freed = if freed.is_empty() { String::new() } else { format!("   ; free {}", freed.join(" ")) };
            writeln!(f, "{i:4}: {lhs}{what}{args}{freed}")?;
        }
        writeln!(
            f,
            "memory plan: peak {} bytes above the start (eager call: {} bytes), {} buffers released at the start, {} bytes of constants",
            r.planned_peak_bytes,
            r.eager_peak_bytes,
            self.released.len(),
            r.const_bytes
        )
    }
}
