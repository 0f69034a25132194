//! ZeRO stage 3, fully sharded data parallelism (PyTorch's FSDP, with
//! FSDP2's per-parameter sharding on dim 0): each rank keeps a slice of
//! rows of every parameter of a wrapped module, and the whole parameters
//! exist only while the module computes.
//!
//! How a step goes for one unit (a wrapped module; units nest, and a unit
//! owns the parameters of its module that no inner unit owns):
//! - forward: the whole parameters are all-gathered into the module's own
//!   parameter tensors (their storage, freed in between, is filled again:
//!   `Tensor::try_refill_storage`), the module computes, the storage is
//!   freed again; a hook is put on the output's gradient.
//! - backward: that hook gathers again before the module's backward runs
//!   (the graph saved the parameter tensors, whose storage is now filled);
//!   when the last of the unit's gradients has been accumulated, they are
//!   reduce-scattered (averaged, each rank keeping its rows) without
//!   waiting, the whole gradients and parameters are freed, and an engine
//!   callback at the end of backward waits and adds each rank's rows to
//!   its shards' gradients.
//! - the optimizer updates the shards (the module's `parameters()`).
//!
//! Each forward pass records the order in which units began and ended;
//! from the next pass on, a unit launches the gather of the unit that comes
//! after it (in forward: the next to begin; in backward: the one that
//! ended before it) right after its own, so that communication overlaps
//! its compute (FSDP2's prefetching). A gather launched ahead for a unit
//! that does not run is waited for and dropped at the end of the pass.
//!
//! Gathers say whether any rank's shard changed since the last gather, so
//! a parameter's version counter moves exactly when its values do: a graph
//! saved before an optimizer step refuses the new values, a gather before
//! backward keeps the version the forward saved.

use crate::communicator::{CollectiveOp, Communicator, Work};
use crate::ddp::{broadcast_tensor, check_same_everywhere, join};
use crate::host;
use autograd_core::{Backend, DistError, Error, HostData, Result, Shape};
use autograd_nn::{Module, ModuleExt, Parameter};
use autograd_tensor::{Refill, RemovableHandle, Tensor, is_backward_running, no_grad, queue_callback};
use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The name [`FullyShardedDataParallel`] reports as its `type_name`; an
/// outer unit leaves a module of this type to itself.
const UNIT: &str = "FullyShardedDataParallel";

/// Options of [`FullyShardedDataParallel`].
///
/// ```
/// use autograd_dist::FsdpConfig;
/// assert!(FsdpConfig::default().reshard_after_forward);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsdpConfig {
    /// Free the whole parameters after forward and gather them again for
    /// backward (PyTorch's default, ZeRO-3); `false` keeps them from the
    /// forward to the end of backward (less communication, ZeRO-2's memory
    /// for parameters during a step).
    pub reshard_after_forward: bool,
}

impl Default for FsdpConfig {
    fn default() -> Self {
        FsdpConfig { reshard_after_forward: true }
    }
}

/// How a parameter is cut into rows: rank `r` holds rows
/// `r * chunk .. min((r + 1) * chunk, rows)` (a scalar is one row).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rows {
    rows: usize,
    pub(crate) row_len: usize,
    chunk: usize,
}

impl Rows {
    pub(crate) fn of(shape: &Shape, world: usize) -> Rows {
        let dims = shape.dims();
        let (rows, row_len) = match dims.split_first() {
            Some((&rows, rest)) => (rows, rest.iter().product()),
            None => (1, 1),
        };
        Rows { rows, row_len, chunk: rows.div_ceil(world) }
    }
    /// The first row and the number of rows of rank `r`.
    pub(crate) fn of_rank(&self, r: usize) -> (usize, usize) {
        let start = (r * self.chunk).min(self.rows);
        (start, (start + self.chunk).min(self.rows) - start)
    }
    /// The shape of rank `r`'s shard.
    /// (A scalar's shard is 0-d on the rank that holds it, `[0]` elsewhere.)
    pub(crate) fn shard_shape(&self, full: &Shape, r: usize) -> Shape {
        let mut dims = full.dims().to_vec();
        let n = self.of_rank(r).1;
        match dims.first_mut() {
            Some(d) => *d = n,
            None if n == 0 => dims.push(0),
            None => {}
        }
        Shape::from(dims)
    }
    /// Each rank's rows of `data` (a whole parameter's values) padded to
    /// `chunk` rows, in rank order: a reduce-scatter's input.
    fn blocks(&self, data: &HostData, world: usize) -> HostData {
        let mut out = host::zeros(data.dtype(), 0);
        for r in 0..world {
            let (start, n) = self.of_rank(r);
            let mut block = host::slice(data, start * self.row_len, n * self.row_len);
            host::pad(&mut block, self.chunk * self.row_len);
            out = host::concat(&[&out, &block]).expect("one dtype");
        }
        out
    }
}

/// A parameter of a unit: the module's own tensor (its storage freed
/// between uses) and how it is cut.
struct Sharded<B: Backend> {
    name: String,
    full: Tensor<B>,
    rows: Rows,
    /// The version of this rank's shard at the last gather (`None`: never gathered).
    gathered_at: Option<u64>,
}

/// The state one unit's hooks share.
struct Unit<B: Backend> {
    comm: Arc<dyn Communicator>,
    params: Vec<Sharded<B>>,
    /// The shards, in `params`' order (refreshed from the module's
    /// parameters at each forward).
    shards: Vec<Tensor<B>>,
    reshard_after_forward: bool,
    /// A backward pass has reached this unit (its end callback is queued).
    in_backward: bool,
    ready: Vec<bool>,
    /// The reduce-scatters launched in this pass, one per trained parameter.
    works: Vec<(usize, Work)>,
    /// All-gathers on their way (a prefetch launches them early), by parameter.
    gathering: Vec<(usize, Work)>,
    /// The unit whose forward began after this one's in the last forward
    /// pass: gathered ahead while this one computes.
    next_forward: Option<Weak<dyn Prefetch>>,
    /// The unit whose backward comes after this one's (the one whose
    /// forward ended before this one's): gathered ahead in backward.
    next_backward: Option<Weak<dyn Prefetch>>,
    /// The first error met by a hook (they cannot return one).
    error: Option<Error>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<B: Backend> Unit<B> {
    /// Launches the all-gather of every freed parameter not already on its
    /// way: one per parameter, without waiting. Each rank's buffer is its
    /// rows padded to `chunk` rows, then a flag saying whether its shard
    /// changed since the last gather.
    fn launch_gather(&mut self) -> Result<()> {
        for (i, p) in self.params.iter().enumerate() {
            if !p.full.is_storage_released() || p.full.numel() == 0 || self.gathering.iter().any(|(j, _)| *j == i) {
                continue;
            }
            let shard = &self.shards[i];
            if shard.dtype() != p.full.dtype() {
                return Err(DistError::InvalidArgument {
                    op: "FullyShardedDataParallel",
                    detail: format!(
                        "the shard of {} is {:?} and the parameter {:?}: convert the model's dtype before wrapping it",
                        p.name,
                        shard.dtype(),
                        p.full.dtype()
                    ),
                }
                .into());
            }
            let mut data = shard.try_to_host()?;
            host::pad(&mut data, p.rows.chunk * p.rows.row_len);
            let changed = p.gathered_at != Some(shard.version());
            data = host::concat(&[&data, &HostData::from_f64(&[changed as u8 as f64], data.dtype())])?;
            self.gathering.push((i, self.comm.all_gather_async(data)?));
        }
        Ok(())
    }

    /// Fills every freed parameter with every rank's rows (the gathers a
    /// prefetch launched, and the rest launched now).
    fn gather(&mut self) -> Result<()> {
        self.launch_gather()?;
        let world = self.comm.world_size();
        let _s = tracing::debug_span!("fsdp_gather", params = self.gathering.len()).entered();
        for (i, work) in std::mem::take(&mut self.gathering) {
            let all = work.wait()?.pop().ok_or_else(|| DistError::Transport { what: "all_gather".into(), detail: "no result".into() })?;
            let p = &mut self.params[i];
            let block = p.rows.chunk * p.rows.row_len + 1;
            let flags = (0..world).map(|r| host::slice(&all, r * block + block - 1, 1).to_f64_vec()[0]);
            let refill = if flags.into_iter().any(|f| f != 0.0) { Refill::Changed } else { Refill::Same };
            let mut values = host::zeros(all.dtype(), 0);
            for r in 0..world {
                let n = p.rows.of_rank(r).1 * p.rows.row_len;
                values = host::concat(&[&values, &host::slice(&all, r * block, n)])?;
            }
            p.full.try_refill_storage(values, refill)?;
            p.gathered_at = Some(self.shards[i].version());
        }
        Ok(())
    }

    /// Waits for gathers a prefetch launched that this pass did not use
    /// (the unit did not run), and drops them.
    fn drop_prefetched(&mut self) -> Result<()> {
        for (_, work) in std::mem::take(&mut self.gathering) {
            work.wait()?;
        }
        Ok(())
    }

    /// Frees every parameter's storage (`trained_only`: those whose
    /// gradients have been sent).
    fn release(&self, trained_only: bool) -> Result<()> {
        for p in &self.params {
            if !trained_only || p.full.requires_grad() {
                p.full.try_release_storage()?;
            }
        }
        Ok(())
    }

    /// Queues the end-of-backward callback once per pass.
    fn begin(&mut self, this: &Weak<Mutex<Unit<B>>>) -> Result<()> {
        if self.in_backward {
            return Ok(());
        }
        self.in_backward = true;
        let weak = this.clone();
        queue_callback(move || match weak.upgrade() {
            Some(u) => lock(&u).finish(),
            None => Ok(()),
        })
    }

    /// Launches the reduce-scatter of every trained parameter's gradient
    /// (zeros for one without), frees the gradients and the parameters.
    fn launch(&mut self) -> Result<()> {
        if !self.works.is_empty() {
            return Ok(());
        }
        let world = self.comm.world_size();
        for (i, p) in self.params.iter().enumerate().filter(|(_, p)| p.full.requires_grad()) {
            let data = match p.full.grad() {
                Some(g) => g.try_to_host()?,
                None => host::zeros(p.full.dtype(), p.full.numel()),
            };
            self.works.push((i, self.comm.reduce_scatter_async(p.rows.blocks(&data, world), CollectiveOp::Avg)?));
            p.full.set_grad(None);
        }
        self.release(true)
    }

    /// The end of backward: launches what is left, adds this rank's rows
    /// to the shards' gradients, frees every parameter.
    fn finish(&mut self) -> Result<()> {
        let result = self.finish_inner();
        self.in_backward = false;
        self.works.clear();
        self.ready.iter_mut().for_each(|r| *r = false);
        let hook_error = self.error.take();
        result.and(hook_error.map_or(Ok(()), Err))
    }

    fn finish_inner(&mut self) -> Result<()> {
        // Parameters without a gradient on this rank send zeros: the
        // collectives stay matched.
        self.launch()?;
        let rank = self.comm.rank();
        for (i, work) in std::mem::take(&mut self.works) {
            let mine =
                work.wait()?.pop().ok_or_else(|| DistError::Transport { what: "reduce_scatter".into(), detail: "no result".into() })?;
            let p = &self.params[i];
            let n = p.rows.of_rank(rank).1 * p.rows.row_len;
            let g = Tensor::<B>::try_from_host(host::slice(&mine, 0, n), p.rows.shard_shape(p.full.shape(), rank))?;
            let shard = &self.shards[i];
            let g = match shard.grad() {
                Some(old) => no_grad(|| old.try_add(&g))?,
                None => g,
            };
            shard.set_grad(Some(g));
        }
        self.release(false)
    }

    fn mark_ready(&mut self, i: usize) -> Result<()> {
        if std::mem::replace(&mut self.ready[i], true) {
            return Err(DistError::Gradients {
                detail: format!("parameter '{}' received a gradient twice in one backward pass", self.params[i].name),
            }
            .into());
        }
        let all = self.params.iter().zip(&self.ready).all(|(p, &r)| r || !p.full.requires_grad());
        if all { self.launch() } else { Ok(()) }
    }
}

/// What a unit lets another ask of it: gather ahead, or drop what it
/// gathered ahead and did not use.
trait Prefetch: Send + Sync {
    /// Launches the gathers of the parameters it will need (no wait).
    fn prefetch(&self) -> Result<()>;
    /// Waits for and drops prefetched gathers it did not use.
    fn drop_prefetched(&self) -> Result<()>;
    /// Sets the units to prefetch from this one's forward and backward.
    fn link(&self, next_forward: Option<Weak<dyn Prefetch>>, next_backward: Option<Weak<dyn Prefetch>>);
}

impl<B: Backend> Prefetch for Mutex<Unit<B>> {
    fn prefetch(&self) -> Result<()> {
        lock(self).launch_gather()
    }
    fn drop_prefetched(&self) -> Result<()> {
        lock(self).drop_prefetched()
    }
    fn link(&self, next_forward: Option<Weak<dyn Prefetch>>, next_backward: Option<Weak<dyn Prefetch>>) {
        let mut unit = lock(self);
        unit.next_forward = next_forward;
        unit.next_backward = next_backward;
    }
}

/// The order in which units began and ended their forwards in the forward
/// pass running on this thread (units nest; the outermost one's forward is
/// the pass). When it ends, each unit learns which unit's forward began
/// next (to prefetch in the next forward) and which one's ended just
/// before (its backward comes next), as PyTorch's FSDP2 does.
#[derive(Default)]
struct Recorded {
    depth: usize,
    began: Vec<Weak<dyn Prefetch>>,
    ended: Vec<Weak<dyn Prefetch>>,
    /// Units gathered ahead in this pass.
    prefetched: Vec<Weak<dyn Prefetch>>,
}

thread_local! {
    static ORDER: RefCell<Recorded> = RefCell::new(Recorded::default());
}

/// A unit's forward, recorded while it lives.
struct Order(Weak<dyn Prefetch>);

impl Order {
    fn enter(unit: Weak<dyn Prefetch>) -> Order {
        ORDER.with(|o| {
            let mut o = o.borrow_mut();
            if o.depth == 0 {
                *o = Recorded::default();
            }
            o.depth += 1;
            o.began.push(unit.clone());
        });
        Order(unit)
    }

    /// `unit`'s gathers were launched ahead in this pass.
    fn prefetched(unit: &Arc<dyn Prefetch>) {
        ORDER.with(|o| o.borrow_mut().prefetched.push(Arc::downgrade(unit)));
    }
}

impl Drop for Order {
    fn drop(&mut self) {
        let done = ORDER.with(|o| {
            let mut o = o.borrow_mut();
            o.ended.push(self.0.clone());
            o.depth -= 1;
            (o.depth == 0).then(|| std::mem::take(&mut *o))
        });
        let Some(Recorded { began, ended, prefetched, .. }) = done else { return };
        let after = |list: &[Weak<dyn Prefetch>], u: &Weak<dyn Prefetch>, step: isize| {
            let i = list.iter().position(|v| Weak::ptr_eq(v, u))?;
            list.get(i.checked_add_signed(step)?).cloned()
        };
        for u in &began {
            if let Some(unit) = u.upgrade() {
                unit.link(after(&began, u, 1), after(&ended, u, -1));
            }
        }
        // A unit gathered ahead whose forward did not come after all.
        for unit in prefetched.iter().filter_map(Weak::upgrade) {
            if let Err(e) = unit.drop_prefetched() {
                tracing::debug!(error = %e, "fsdp: a prefetched gather failed");
            }
        }
    }
}

/// Tensors by name.
type Named<B> = Vec<(String, Tensor<B>)>;

/// The parts of a module tree a unit owns: the parameters and buffers
/// outside inner units (with their dotted names), the inner units, and the
/// modules to tell about training mode.
struct Local<'a, B: Backend> {
    params: Vec<(String, &'a Parameter<B>)>,
    buffers: Vec<(String, &'a Tensor<B>)>,
    units: Vec<(String, &'a dyn Module<B>)>,
    modules: Vec<&'a dyn Module<B>>,
    /// A buffer below the top module (it could not be handed out mutably).
    nested_buffer: Option<String>,
}

fn local<'a, B: Backend>(m: &'a dyn Module<B>, prefix: &str, out: &mut Local<'a, B>) {
    out.modules.push(m);
    for (n, p) in m.params() {
        out.params.push((join(prefix, &n), p));
    }
    for (n, b) in m.buffers() {
        if !prefix.is_empty() && out.nested_buffer.is_none() {
            out.nested_buffer = Some(join(prefix, &n));
        }
        out.buffers.push((join(prefix, &n), b));
    }
    for (n, c) in m.children() {
        if c.type_name() == UNIT {
            out.units.push((join(prefix, &n), c));
        } else {
            local(c, &join(prefix, &n), out);
        }
    }
}

fn of<'a, B: Backend>(m: &'a dyn Module<B>) -> Local<'a, B> {
    let mut out = Local { params: Vec::new(), buffers: Vec::new(), units: Vec::new(), modules: Vec::new(), nested_buffer: None };
    local(m, "", &mut out);
    out
}

fn units_mut<'a, B: Backend>(m: &'a mut dyn Module<B>, prefix: &str, out: &mut Vec<(String, &'a mut dyn Module<B>)>) {
    for (n, c) in m.children_mut() {
        let path = join(prefix, &n);
        if c.type_name() == UNIT {
            out.push((path, c));
        } else {
            units_mut(c, &path, out);
        }
    }
}

/// Wraps a module for fully sharded data parallelism (ZeRO-3, PyTorch's
/// `FullyShardedDataParallel` / `fully_shard`): every parameter of the
/// module outside inner units is cut on dim 0 into one slice of rows per
/// rank (`ceil(rows / world)` rows each, the last ranks' slices shorter or
/// empty). The whole parameter is gathered just before the module's
/// forward and again before its backward, and freed after each; its
/// gradient is reduce-scattered as soon as the module's backward has
/// produced it, each rank keeping (the average of) its rows.
///
/// The wrapper's parameters are the shards, under the wrapped module's
/// names (`parameters()` is what the optimizer gets; inner units appear as
/// children, so the outermost unit lists every shard with the names the
/// unwrapped model would have). At construction every rank checks that all
/// ranks hold the same parameters and takes rank 0's values. Every rank
/// must run the same units in each pass; a module's buffers must be its
/// own (a buffer in a submodule that is not a unit is an `Err`: wrap that
/// submodule).
///
/// Works with activation checkpointing (a recomputed forward finds its
/// parameters gathered) and autocast (parameters are gathered in their own
/// dtype and cast where used).
///
/// ```
/// use autograd_dist::{Communicator, FsdpConfig, FullyShardedDataParallel, ThreadGroup};
/// use autograd_nn::{Linear, Module, ModuleExt};
/// use autograd_optim::{Optimizer, Sgd, SgdConfig};
/// use autograd_tensor::Tensor;
/// use autograd_cpu::Cpu;
/// let finals = ThreadGroup::new(2).run(|comm| {
///     let model = FullyShardedDataParallel::new(Linear::<Cpu>::new(4, 3), comm.clone(), FsdpConfig::default())?;
///     let shapes: Vec<Vec<usize>> = model.parameters().iter().map(|p| p.dims().to_vec()).collect();
///     assert_eq!(shapes, if comm.rank() == 0 { vec![vec![2, 4], vec![2]] } else { vec![vec![1, 4], vec![1]] });
///     let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.1, ..Default::default() })?;
///     for _ in 0..3 {
///         let x = Tensor::<Cpu>::full([8, 4], comm.rank() as f64);
///         opt.zero_grad(true);
///         model.forward(&x).powf(2.0).mean().backward()?;
///         opt.step()?;
///     }
///     Ok(model.full_state_dict()?["weight"].to_vec::<f32>())
/// }).unwrap();
/// assert_eq!(finals[0], finals[1]);
/// ```
pub struct FullyShardedDataParallel<B: Backend, M: Module<B>> {
    module: M,
    comm: Arc<dyn Communicator>,
    unit: Arc<Mutex<Unit<B>>>,
    /// The shards, with the wrapped module's names.
    shards: Vec<(String, Parameter<B>)>,
    hooks: Vec<RemovableHandle>,
}

impl<B: Backend, M: Module<B>> FullyShardedDataParallel<B, M> {
    /// Wraps `module`: checks it against every rank's, takes rank 0's
    /// values, keeps this rank's rows of each parameter outside inner
    /// units and frees the whole parameters.
    pub fn new(module: M, comm: Arc<dyn Communicator>, config: FsdpConfig) -> Result<Self> {
        let (world, rank) = (comm.world_size(), comm.rank());
        let (params, buffers): (Named<B>, Named<B>) = {
            let l = of(module.as_dyn());
            if let Some(name) = l.nested_buffer {
                return Err(DistError::InvalidArgument {
                    op: "FullyShardedDataParallel",
                    detail: format!("the buffer {name} belongs to a submodule: wrap that submodule in its own FullyShardedDataParallel"),
                }
                .into());
            }
            (
                l.params.iter().map(|(n, p)| (n.clone(), p.tensor().clone())).collect(),
                l.buffers.iter().map(|(n, b)| (n.clone(), (*b).clone())).collect(),
            )
        };
        check_same_everywhere(comm.as_ref(), &params, &buffers, UNIT)?;
        let mut sharded = Vec::with_capacity(params.len());
        let mut shards = Vec::with_capacity(params.len());
        for (name, full) in &params {
            if world > 1 {
                broadcast_tensor(comm.as_ref(), full)?;
            }
            let rows = Rows::of(full.shape(), world);
            let (start, n) = rows.of_rank(rank);
            let data = host::slice(&full.try_to_host()?, start * rows.row_len, n * rows.row_len);
            let shard = Parameter::new(Tensor::try_from_host(data, rows.shard_shape(full.shape(), rank))?);
            if !full.requires_grad() {
                let _ = shard.tensor().clone().requires_grad_(false);
            }
            full.try_release_storage().map_err(|e| DistError::InvalidArgument {
                op: "FullyShardedDataParallel",
                detail: format!("the parameter {name} is not the whole of its storage and cannot be freed: {e}"),
            })?;
            sharded.push(Sharded { name: name.clone(), full: full.clone(), rows, gathered_at: None });
            shards.push((name.clone(), shard));
        }
        for (_, b) in &buffers {
            if world > 1 {
                broadcast_tensor(comm.as_ref(), b)?;
            }
        }
        let n = sharded.len();
        let unit = Arc::new(Mutex::new(Unit {
            comm: comm.clone(),
            params: sharded,
            shards: shards.iter().map(|(_, s)| s.tensor().clone()).collect(),
            reshard_after_forward: config.reshard_after_forward,
            in_backward: false,
            ready: vec![false; n],
            works: Vec::new(),
            gathering: Vec::new(),
            next_forward: None,
            next_backward: None,
            error: None,
        }));
        let mut hooks = Vec::new();
        for (i, (_, full)) in params.iter().enumerate().filter(|(_, (_, p))| p.requires_grad()) {
            let weak = Arc::downgrade(&unit);
            hooks.push(full.register_post_accumulate_grad_hook(move |_| {
                let Some(u) = weak.upgrade() else { return };
                let mut unit = lock(&u);
                if let Err(e) = unit.begin(&weak).and_then(|()| unit.mark_ready(i)) {
                    unit.error.get_or_insert(e);
                }
            })?);
        }
        tracing::debug!(params = n, world, "fsdp unit wrapped");
        Ok(FullyShardedDataParallel { module, comm, unit, shards, hooks })
    }

    /// The wrapped module; its own parameter tensors hold no values
    /// outside this unit's forward and backward (read them with
    /// [`FullyShardedDataParallel::full_state_dict`]).
    pub fn module(&self) -> &M {
        &self.module
    }
    /// The communicator.
    pub fn comm(&self) -> &Arc<dyn Communicator> {
        &self.comm
    }

    /// The shards of the whole model (this unit and the units inside it), by name.
    pub(crate) fn named_shards(&self) -> Vec<(String, Tensor<B>)> {
        self.named_parameters()
    }
}

impl<B: Backend, M: Module<B>> Drop for FullyShardedDataParallel<B, M> {
    fn drop(&mut self) {
        for h in self.hooks.drain(..) {
            h.remove();
        }
    }
}

impl<B: Backend, M: Module<B>> autograd_nn::ModuleFields<B> for FullyShardedDataParallel<B, M> {
    /// The shards of this unit's parameters, under the module's names.
    fn params(&self) -> Vec<(String, &Parameter<B>)> {
        self.shards.iter().map(|(n, p)| (n.clone(), p)).collect()
    }
    fn params_mut(&mut self) -> Vec<(String, &mut Parameter<B>)> {
        self.shards.iter_mut().map(|(n, p)| (n.clone(), p)).collect()
    }
    /// The wrapped module's own buffers (not sharded).
    fn buffers(&self) -> Vec<(String, &Tensor<B>)> {
        of(self.module.as_dyn()).buffers
    }
    fn buffers_mut(&mut self) -> Vec<(String, &mut Tensor<B>)> {
        // `new` refused buffers below the top module: these are all of them.
        self.module.buffers_mut()
    }
    /// The units inside this one, under their paths in the module.
    fn children(&self) -> Vec<(String, &dyn Module<B>)> {
        of(self.module.as_dyn()).units
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module<B>)> {
        let mut out = Vec::new();
        units_mut(self.module.as_dyn_mut(), "", &mut out);
        out
    }
    fn type_name(&self) -> &'static str {
        UNIT
    }
}

impl<B: Backend, M: Module<B>> Module<B> for FullyShardedDataParallel<B, M> {
    /// Gathers the parameters, runs the module, frees them (unless a
    /// backward pass is recomputing this forward, or
    /// [`FsdpConfig::reshard_after_forward`] is off) and hooks the
    /// output's gradient to gather them again before the module's backward.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        // A forward run inside backward recomputes (checkpointing): its
        // parameters stay until the unit's backward ends, and it neither
        // records the order of units nor prefetches.
        let recomputing = is_backward_running();
        let me: Weak<dyn Prefetch> = Arc::downgrade(&self.unit) as Weak<Mutex<Unit<B>>>;
        let _order = (!recomputing).then(|| Order::enter(me));
        let next = {
            let mut unit = lock(&self.unit);
            unit.shards = self.shards.iter().map(|(_, s)| s.tensor().clone()).collect();
            unit.gather()?;
            unit.next_forward.clone()
        };
        if !recomputing && let Some(next) = next.and_then(|n| n.upgrade()) {
            next.prefetch()?;
            Order::prefetched(&next);
        }
        let out = self.module.try_forward(x);
        {
            let unit = lock(&self.unit);
            if unit.reshard_after_forward && !recomputing && !unit.in_backward {
                unit.release(false)?;
            }
        }
        let out = out?;
        if out.requires_grad() {
            let weak = Arc::downgrade(&self.unit);
            // The hook lives as long as the output's node.
            let _handle = out.try_register_hook(move |_| {
                if let Some(u) = weak.upgrade() {
                    let next = {
                        let mut unit = lock(&u);
                        if let Err(e) = unit.begin(&weak).and_then(|()| unit.gather()) {
                            unit.error.get_or_insert(e);
                        }
                        unit.next_backward.clone()
                    };
                    if let Some(next) = next.and_then(|n| n.upgrade())
                        && let Err(e) = next.prefetch().and_then(|()| {
                            // Dropped at the end of the pass if that unit's backward never came.
                            let later = Arc::downgrade(&next);
                            queue_callback(move || later.upgrade().map_or(Ok(()), |n| n.drop_prefetched()))
                        })
                    {
                        lock(&u).error.get_or_insert(e);
                    }
                }
                None
            })?;
        }
        Ok(out)
    }
    fn set_training(&self, on: bool) {
        for m in of(self.module.as_dyn()).modules {
            m.set_training(on);
        }
    }
    fn is_training(&self) -> bool {
        of(self.module.as_dyn()).modules.iter().all(|m| m.is_training())
    }
}
