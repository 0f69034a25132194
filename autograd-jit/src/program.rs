//! A compiled step: the recorded primitives after the passes, where each
//! value lives, and the replay that runs them on `B` directly (no `Tensor`,
//! no graph nodes).

use crate::passes;
use crate::recorder::{Kind, Op, Origin, Recording, ValueId};
use crate::traced::{Buf, Traced, TracedStorage};
use autograd_core::{Backend, DType, Error, Layout, Result};
use autograd_tensor::Tensor;
use rayon::prelude::*;
use smallvec::{SmallVec, smallvec};
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, RwLockReadGuard, RwLockWriteGuard};

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

/// A traced and compiled step over backend `B` (see [`crate::compile`]).
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

/// The state of one replay.
pub(crate) struct Env<'a, B: Backend> {
    pub(crate) slots: Vec<Option<B::Storage>>,
    pub(crate) inputs: &'a [Arc<Buf<B>>],
}

enum Val<'a, B: Backend> {
    Ref(&'a B::Storage),
    Guard(RwLockReadGuard<'a, B::Storage>),
}

impl<B: Backend> Deref for Val<'_, B> {
    type Target = B::Storage;
    fn deref(&self) -> &B::Storage {
        match self {
            Val::Ref(s) => s,
            Val::Guard(g) => g,
        }
    }
}

/// A buffer an op updates in place: taken out of its slot, or locked.
enum Mut<'a, B: Backend> {
    Owned(ValueId, B::Storage),
    Guard(RwLockWriteGuard<'a, B::Storage>),
}

impl<B: Backend> Mut<'_, B> {
    fn get(&mut self) -> &mut B::Storage {
        match self {
            Mut::Owned(_, s) => s,
            Mut::Guard(g) => g,
        }
    }
}

fn internal(msg: &str) -> Error {
    Error::msg(format!("compiled step: internal error: {msg}"))
}

impl<B: Backend> Program<B> {
    /// Builds the program from a recording: places every value, then runs
    /// the passes (dead code, constants, fusion, memory plan).
    pub(crate) fn build(
        rec: Recording<B>,
        inputs: &[Arc<Buf<B>>],
        outputs: Vec<(ValueId, Layout)>,
        fresh: &[ValueId],
        eager_peak_bytes: usize,
    ) -> Result<Self> {
        let traced_ops = rec.ops.len();
        let mut meta = Vec::with_capacity(rec.values.len());
        let mut locs = Vec::with_capacity(rec.values.len());
        for (id, v) in rec.values.into_iter().enumerate() {
            meta.push(Meta { dtype: v.dtype, len: v.len });
            locs.push(match v.origin {
                Origin::External(b) => match inputs.iter().position(|i| i.id == b.id) {
                    Some(k) => Loc::Input(k),
                    None => Loc::Persistent(b),
                },
                // Made anew by every replay and returned (an input's gradient).
                Origin::Produced(_) if fresh.contains(&id) => Loc::Slot,
                // Still alive after the step: someone (a parameter's .grad) holds it.
                Origin::Produced(w) => match w.upgrade() {
                    Some(b) => Loc::Persistent(b),
                    None => Loc::Slot,
                },
            });
        }
        let mut p = Program {
            ops: rec.ops,
            meta,
            locs,
            outputs,
            frees: Vec::new(),
            released: Vec::new(),
            parallel: Vec::new(),
            pool: Default::default(),
            persistent_ids: Vec::new(),
            report: Report::default(),
        };
        p.report.traced_ops = traced_ops;
        p.report.eager_peak_bytes = eager_peak_bytes;
        passes::eliminate_dead(&mut p);
        passes::fold_constants(&mut p)?;
        passes::fuse_elementwise(&mut p)?;
        passes::plan_memory(&mut p);
        p.persistent_ids = p.locs.iter().filter_map(|l| if let Loc::Persistent(b) = l { Some(b.id) } else { None }).collect();
        p.persistent_ids.sort_unstable();
        Ok(p)
    }

    /// What the compiler did and the memory plan's numbers.
    pub fn report(&self) -> &Report {
        &self.report
    }

    fn read<'a>(&'a self, env: &'a Env<'a, B>, v: ValueId) -> Result<Val<'a, B>> {
        Ok(match &self.locs[v] {
            Loc::Slot => Val::Ref(env.slots[v].as_ref().ok_or_else(|| internal(&format!("%{v} read before it was written")))?),
            Loc::Input(k) => Val::Guard(env.inputs.get(*k).ok_or_else(|| internal("missing input"))?.read()),
            Loc::Persistent(b) => Val::Guard(b.read()),
            Loc::Const(s) => Val::Ref(s.as_ref()),
        })
    }

    fn take_mut<'a>(&'a self, slots: &mut [Option<B::Storage>], inputs: &'a [Arc<Buf<B>>], v: ValueId) -> Result<Mut<'a, B>> {
        Ok(match &self.locs[v] {
            Loc::Slot => Mut::Owned(v, slots[v].take().ok_or_else(|| internal(&format!("%{v} updated before it was written")))?),
            Loc::Input(k) => Mut::Guard(inputs.get(*k).ok_or_else(|| internal("missing input"))?.write()),
            Loc::Persistent(b) => Mut::Guard(b.write()),
            Loc::Const(_) => return Err(internal("a constant is updated in place")),
        })
    }

    fn put_back(slots: &mut [Option<B::Storage>], m: Mut<'_, B>) {
        if let Mut::Owned(v, s) = m {
            slots[v] = Some(s);
        }
    }

    pub(crate) fn store(&self, env: &mut Env<'_, B>, v: ValueId, s: B::Storage) -> Result<()> {
        match &self.locs[v] {
            Loc::Slot => env.slots[v] = Some(s),
            Loc::Persistent(b) => b.replace(s)?,
            Loc::Input(_) | Loc::Const(_) => return Err(internal("an op writes an input or a constant")),
        }
        Ok(())
    }

    /// Runs one op.
    pub(crate) fn exec(&self, op: &Op<B>, env: &mut Env<'_, B>) -> Result<()> {
        // Most ops make one or two buffers: no heap allocation for the list.
        let outs: SmallVec<[B::Storage; 2]> = match &op.kind {
            Kind::FromHost(d) => smallvec![B::from_host(d.clone())],
            Kind::Full { shape, value, dtype } => smallvec![B::full(shape, *value, *dtype)?],
            Kind::Random { shape, dtype, dist } => smallvec![autograd_tensor::with_rng(|g| B::random(shape, *dtype, *dist, g))?],
            Kind::Cast { layout, dtype } => smallvec![B::cast(&*self.read(env, op.ins[0])?, layout, *dtype)?],
            Kind::CopyStrided { layout } => smallvec![B::copy_strided(&*self.read(env, op.ins[0])?, layout)?],
            Kind::Unary { op: u, layout } => smallvec![B::unary(*u, &*self.read(env, op.ins[0])?, layout)?],
            Kind::Binary { op: b, la, lb } => smallvec![B::binary(*b, &*self.read(env, op.ins[0])?, la, &*self.read(env, op.ins[1])?, lb)?],
            Kind::Where { lc, la, lb } => {
                let (c, a, b) = (self.read(env, op.ins[0])?, self.read(env, op.ins[1])?, self.read(env, op.ins[2])?);
                smallvec![B::where_select(&c, lc, &a, la, &b, lb)?]
            }
            Kind::Reduce { op: r, layout, dims } => smallvec![B::reduce(*r, &*self.read(env, op.ins[0])?, layout, dims)?],
            Kind::ArgReduce { op: r, layout, dim } => {
                let (v, i) = B::arg_reduce(*r, &*self.read(env, op.ins[0])?, layout, *dim)?;
                smallvec![v, i]
            }
            Kind::Matmul { la, lb } => smallvec![B::matmul(&*self.read(env, op.ins[0])?, la, &*self.read(env, op.ins[1])?, lb)?],
            Kind::Addmm { lc, la, lb } => {
                let (c, a, b) = (self.read(env, op.ins[0])?, self.read(env, op.ins[1])?, self.read(env, op.ins[2])?);
                smallvec![B::addmm(&c, lc, &a, la, &b, lb)?]
            }
            Kind::Gather { layout, dim, lidx } => {
                smallvec![B::gather(&*self.read(env, op.ins[0])?, layout, *dim, &*self.read(env, op.ins[1])?, lidx)?]
            }
            Kind::ScatterAdd { shape, dim, lidx, lsrc } => {
                smallvec![B::scatter_add(shape, *dim, &*self.read(env, op.ins[0])?, lidx, &*self.read(env, op.ins[1])?, lsrc)?]
            }
            Kind::Cat { layouts, dim } => {
                let vals = op.ins.iter().map(|&v| self.read(env, v)).collect::<Result<SmallVec<[_; 8]>>>()?;
                let parts: SmallVec<[(&B::Storage, &Layout); 8]> = vals.iter().map(|v| &**v).zip(layouts).collect();
                smallvec![B::cat(&parts, *dim)?]
            }
            Kind::Fused { program, layouts } => {
                let vals = op.ins.iter().map(|&v| self.read(env, v)).collect::<Result<SmallVec<[_; 8]>>>()?;
                let parts: SmallVec<[(&B::Storage, &Layout); 8]> = vals.iter().map(|v| &**v).zip(layouts).collect();
                B::fused_elementwise(program, &parts)?.into_iter().collect()
            }
            Kind::LayerNorm { layout, k, eps } => {
                let (x, r) = B::layer_norm(&*self.read(env, op.ins[0])?, layout, *k, *eps)?;
                smallvec![x, r]
            }
            Kind::Softmax { layout, dim } => smallvec![B::softmax(&*self.read(env, op.ins[0])?, layout, *dim)?],
            Kind::Assign { ld, ls } => {
                let (src, dst) = (op.ins[0], op.mutated[0]);
                // A buffer copied onto itself (through other views) goes through a copy.
                let copied = if src == dst { Some(B::copy_strided(&*self.read(env, src)?, ls)?) } else { None };
                let mut d = self.take_mut(&mut env.slots, env.inputs, dst)?;
                let r = match &copied {
                    Some(c) => B::assign(d.get(), ld, c, &Layout::contiguous(ls.shape().clone())),
                    None => B::assign(d.get(), ld, &*self.read(env, src)?, ls),
                };
                Self::put_back(&mut env.slots, d);
                r?;
                smallvec![]
            }
            Kind::FusedUpdate { update, lg } => {
                let mut taken = op.mutated.iter().map(|&v| self.take_mut(&mut env.slots, env.inputs, v)).collect::<Result<Vec<_>>>()?;
                let r = {
                    let grad = self.read(env, op.ins[0])?;
                    let (param, states) = taken.split_first_mut().ok_or_else(|| internal("an update without a parameter"))?;
                    let mut refs: Vec<&mut B::Storage> = states.iter_mut().map(|m| m.get()).collect();
                    update.run(param.get(), &grad, lg, &mut refs)
                };
                for m in taken {
                    Self::put_back(&mut env.slots, m);
                }
                r?;
                smallvec![]
            }
            Kind::Host(h) => {
                h.run()?;
                smallvec![]
            }
        };
        if outs.len() != op.outs.len() {
            return Err(internal("an op returned another number of outputs than recorded"));
        }
        for (v, s) in op.outs.iter().zip(outs) {
            self.store(env, *v, s)?;
        }
        Ok(())
    }

    /// A parameter update whose buffers all outlive the step, from any thread
    /// (see [`Program::parallel`]).
    fn exec_update(&self, op: &Op<B>, env: &Env<'_, B>) -> Result<()> {
        let Kind::FusedUpdate { update, lg } = &op.kind else { return Err(internal("a parallel run holds another op")) };
        let mut guards = op
            .mutated
            .iter()
            .map(|&v| match &self.locs[v] {
                Loc::Persistent(b) => Ok(b.write()),
                Loc::Input(k) => Ok(env.inputs.get(*k).ok_or_else(|| internal("missing input"))?.write()),
                _ => Err(internal("a parallel update of a temporary")),
            })
            .collect::<Result<Vec<_>>>()?;
        let grad = self.read(env, op.ins[0])?;
        let (param, states) = guards.split_first_mut().ok_or_else(|| internal("an update without a parameter"))?;
        let mut refs: Vec<&mut B::Storage> = states.iter_mut().map(|g| &mut **g).collect();
        update.run(param, &grad, lg, &mut refs)
    }

    /// One replay: runs every op on `B` with `inputs` (the batch's buffers),
    /// frees temporaries after their last reader, and returns the outputs as
    /// fresh tensors.
    pub(crate) fn replay(&self, inputs: &[Arc<Buf<B>>]) -> Result<Vec<Tensor<Traced<B>>>> {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        autograd_core::memory::with_pool(&mut pool, || self.replay_pooled(inputs))
    }

    /// Bytes the replay pool holds between replays (buffers kept for reuse,
    /// not counted as live storage), and its hits and misses so far.
    pub fn pool_stats(&self) -> (usize, usize, usize) {
        let p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        (p.held_bytes(), p.hits(), p.misses())
    }

    fn replay_pooled(&self, inputs: &[Arc<Buf<B>>]) -> Result<Vec<Tensor<Traced<B>>>> {
        // An input that is one of the program's lasting buffers would be read
        // and written under one lock: refused before anything runs.
        if let Some(k) = inputs.iter().position(|i| self.persistent_ids.binary_search(&i.id).is_ok()) {
            return Err(Error::msg(format!(
                "compiled step: input {k} shares storage with a buffer the step keeps or updates (a parameter, a gradient, optimizer state); pass a copy"
            )));
        }
        let mut env = Env { slots: (0..self.locs.len()).map(|_| None).collect(), inputs };
        for &v in &self.released {
            if let Loc::Persistent(b) = &self.locs[v] {
                b.release()?;
            }
        }
        let mut i = 0;
        while i < self.ops.len() {
            let end = match self.parallel.get(i).copied().flatten() {
                Some(end) => {
                    let shared = &env;
                    self.ops[i..end].par_iter().map(|op| self.exec_update(op, shared)).collect::<Result<Vec<()>>>()?;
                    end
                }
                None => {
                    self.exec(&self.ops[i], &mut env)?;
                    i + 1
                }
            };
            for frees in &self.frees[i..end] {
                for &v in frees {
                    env.slots[v] = None;
                }
            }
            i = end;
        }
        let mut out = Vec::with_capacity(self.outputs.len());
        for (i, (v, layout)) in self.outputs.iter().enumerate() {
            // A temporary is handed over as it is, unless it is returned again later.
            let last = !self.outputs[i + 1..].iter().any(|(w, _)| w == v);
            let (s, l) = match &self.locs[*v] {
                Loc::Slot if last => (env.slots[*v].take().ok_or_else(|| internal("an output was never written"))?, layout.clone()),
                _ => (B::copy_strided(&*self.read(&env, *v)?, layout)?, Layout::contiguous(layout.shape().clone())),
            };
            out.push(Tensor::try_from_storage(TracedStorage::new(s), l)?);
        }
        Ok(out)
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
            let what = match &op.kind {
                Kind::FromHost(d) => format!("from_host {:?} x {}", d.dtype(), d.len()),
                Kind::Full { shape, value, dtype } => format!("full {value} {:?} {dtype:?}", shape.dims()),
                Kind::Random { shape, dtype, dist } => format!("random {dist:?} {:?} {dtype:?}", shape.dims()),
                Kind::Cast { layout, dtype } => format!("cast {dtype:?} {:?}", layout.shape().dims()),
                Kind::CopyStrided { layout } => format!("copy_strided {:?}", layout.shape().dims()),
                Kind::Unary { op, layout } => format!("{op:?} {:?}", layout.shape().dims()),
                Kind::Binary { op, la, .. } => format!("{op:?} {:?}", la.shape().dims()),
                Kind::Where { lc, .. } => format!("where {:?}", lc.shape().dims()),
                Kind::Reduce { op, layout, dims } => format!("reduce {op:?} {:?} over {dims:?}", layout.shape().dims()),
                Kind::ArgReduce { op, layout, dim } => format!("arg_reduce {op:?} {:?} dim {dim}", layout.shape().dims()),
                Kind::Matmul { la, lb } => format!("matmul {:?} x {:?}", la.shape().dims(), lb.shape().dims()),
                Kind::Addmm { lc, la, lb } => format!("addmm {:?} + {:?} x {:?}", lc.shape().dims(), la.shape().dims(), lb.shape().dims()),
                Kind::Gather { layout, dim, .. } => format!("gather {:?} dim {dim}", layout.shape().dims()),
                Kind::ScatterAdd { shape, dim, .. } => format!("scatter_add {:?} dim {dim}", shape.dims()),
                Kind::Assign { ld, .. } => format!("assign {:?} into {}", ld.shape().dims(), muts.join(", ")),
                Kind::Cat { dim, .. } => format!("cat dim {dim}"),
                Kind::FusedUpdate { update, .. } => format!("fused_update {} of {}", update.describe(), muts.join(", ")),
                Kind::Fused { program, layouts } => {
                    let steps: Vec<String> = program
                        .instrs()
                        .iter()
                        .map(|s| match s {
                            autograd_core::fusion::Instr::Unary(u, a) => format!("{u:?}(r{a})"),
                            autograd_core::fusion::Instr::Binary(b, x, y) => format!("{b:?}(r{x}, r{y})"),
                        })
                        .collect();
                    format!("fused {:?} [{} steps: {}]", layouts[0].shape().dims(), steps.len(), steps.join(" "))
                }
                Kind::LayerNorm { layout, k, .. } => format!("layer_norm {:?} last {k}", layout.shape().dims()),
                Kind::Softmax { layout, dim } => format!("softmax {:?} dim {dim}", layout.shape().dims()),
                Kind::Host(h) => format!("host {}", h.name()),
            };
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
