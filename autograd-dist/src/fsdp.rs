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
//! Gathers say whether any rank's shard changed since the last gather, so
//! a parameter's version counter moves exactly when its values do: a graph
//! saved before an optimizer step refuses the new values, a gather before
//! backward keeps the version the forward saved.

use crate::communicator::{CollectiveOp, Communicator, Work};
use crate::ddp::{broadcast_tensor, check_same_everywhere, join};
use crate::host;
use autograd_core::{Backend, DistError, Error, HostData, Result, Shape};
use autograd_nn::{Module, ModuleExt, Parameter};
use autograd_tensor::{Refill, RemovableHandle, Tensor, no_grad, queue_callback};
use std::collections::BTreeMap;
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
struct Rows {
    rows: usize,
    row_len: usize,
    chunk: usize,
}

impl Rows {
    fn of(shape: &Shape, world: usize) -> Rows {
        let dims = shape.dims();
        let (rows, row_len) = match dims.split_first() {
            Some((&rows, rest)) => (rows, rest.iter().product()),
            None => (1, 1),
        };
        Rows { rows, row_len, chunk: rows.div_ceil(world) }
    }
    /// The first row and the number of rows of rank `r`.
    fn of_rank(&self, r: usize) -> (usize, usize) {
        let start = (r * self.chunk).min(self.rows);
        (start, (start + self.chunk).min(self.rows) - start)
    }
    /// The shape of rank `r`'s shard.
    /// (A scalar's shard is 0-d on the rank that holds it, `[0]` elsewhere.)
    fn shard_shape(&self, full: &Shape, r: usize) -> Shape {
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
    /// The first error met by a hook (they cannot return one).
    error: Option<Error>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<B: Backend> Unit<B> {
    /// Fills every freed parameter with every rank's rows: one all-gather
    /// per parameter, all launched before the first wait. Each rank's
    /// buffer ends with a flag saying whether its shard changed since the
    /// last gather.
    fn gather(&mut self) -> Result<()> {
        let world = self.comm.world_size();
        let mut works = Vec::new();
        for (i, p) in self.params.iter().enumerate() {
            if !p.full.is_storage_released() || p.full.numel() == 0 {
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
            works.push((i, self.comm.all_gather_async(data)?));
        }
        let _s = tracing::debug_span!("fsdp_gather", params = works.len()).entered();
        for (i, work) in works {
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

    /// Every parameter and buffer of the whole model (this unit and the
    /// units inside it), whole, under the unwrapped model's names: each
    /// parameter all-gathered from its shards. A collective: every rank
    /// calls it and gets the same tensors (save them on one rank).
    pub fn full_state_dict(&self) -> Result<BTreeMap<String, Tensor<B>>> {
        let mut out = BTreeMap::new();
        for (name, shard) in self.named_shards() {
            out.insert(name, gather_rows(self.comm.as_ref(), &shard)?);
        }
        for (name, b) in self.named_buffers() {
            out.insert(name, b.detach());
        }
        Ok(out)
    }

    /// Loads whole parameters and buffers (a [`FullyShardedDataParallel::full_state_dict`],
    /// or the unwrapped model's `state_dict`, saved on any number of
    /// ranks): each rank copies its rows into its shards. `Err` naming the
    /// tensor when a name is missing or unknown or a shape or dtype
    /// differs; nothing is changed then.
    pub fn load_full_state_dict(&self, state: &BTreeMap<String, Tensor<B>>) -> Result<()> {
        let (world, rank) = (self.comm.world_size(), self.comm.rank());
        let shards = self.named_shards();
        let buffers = self.named_buffers();
        let mismatch = |detail: String| -> Error { DistError::Mismatch { op: "load_full_state_dict", detail }.into() };
        let known: Vec<&String> = shards.iter().chain(&buffers).map(|(n, _)| n).collect();
        if let Some(extra) = state.keys().find(|k| !known.contains(k)) {
            return Err(mismatch(format!("the state has {extra}, which the model does not")));
        }
        let mut copies: Vec<(&Tensor<B>, Tensor<B>)> = Vec::new();
        for (name, shard) in &shards {
            let t = state.get(name).ok_or_else(|| mismatch(format!("the state has no {name}")))?;
            let rows = Rows::of(t.shape(), world);
            let want = rows.shard_shape(t.shape(), rank);
            if t.dtype() != shard.dtype() || &want != shard.shape() {
                return Err(mismatch(format!(
                    "{name}: a whole {:?} tensor of shape {:?} does not cut into this rank's {:?} shard of shape {:?}",
                    t.dtype(),
                    t.dims(),
                    shard.dtype(),
                    shard.dims()
                )));
            }
            let (start, n) = rows.of_rank(rank);
            let values = host::slice(&t.try_to_host()?, start * rows.row_len, n * rows.row_len);
            copies.push((shard, Tensor::try_from_host(values, want)?));
        }
        for (name, b) in &buffers {
            let t = state.get(name).ok_or_else(|| mismatch(format!("the state has no {name}")))?;
            if t.dtype() != b.dtype() || t.shape() != b.shape() {
                return Err(mismatch(format!("{name}: {:?} {:?} for a buffer {:?} {:?}", t.dtype(), t.dims(), b.dtype(), b.dims())));
            }
            copies.push((b, t.clone()));
        }
        for (dst, values) in copies {
            no_grad(|| dst.try_copy_(&values))?;
        }
        Ok(())
    }

    /// Saves this rank's shards and the module's buffers to `path` (one
    /// file per rank), with the layout in the safetensors header: the
    /// format, the world size, this rank and each parameter's whole shape
    /// (`shape.NAME`, e.g. `[128,64]`). A collective (the whole shapes are
    /// gathered): every rank calls it with its own path.
    pub fn save_sharded(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let shards = self.named_shards();
        let buffers = self.named_buffers();
        let mut metadata = std::collections::HashMap::new();
        metadata.insert("format".to_string(), SHARD_FORMAT.to_string());
        metadata.insert("world".to_string(), self.comm.world_size().to_string());
        metadata.insert("rank".to_string(), self.comm.rank().to_string());
        for (name, shard) in &shards {
            metadata.insert(format!("shape.{name}"), format!("{:?}", whole_shape(self.comm.as_ref(), shard)?).replace(' ', ""));
        }
        let named: Vec<(&str, &Tensor<B>)> = shards.iter().chain(&buffers).map(|(n, t)| (n.as_str(), t)).collect();
        autograd_tensor::save_safetensors(&named, &metadata, path)
    }

    /// Loads what [`FullyShardedDataParallel::save_sharded`] wrote for this
    /// rank of a group of the same size. `Err` (and nothing changed) when
    /// the file was written by another rank or world size (to change the
    /// number of ranks, go through [`FullyShardedDataParallel::full_state_dict`]),
    /// or a name, shape or dtype differs from this rank's shards.
    pub fn load_sharded(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let path = path.as_ref();
        let file = autograd_tensor::load_safetensors::<B>(path)?;
        let bad = |detail: String| -> Error {
            DistError::Mismatch { op: "load_sharded", detail: format!("{}: {detail}", path.display()) }.into()
        };
        let meta = |key: &str| file.metadata.get(key).cloned().unwrap_or_default();
        if meta("format") != SHARD_FORMAT {
            return Err(bad(format!("not a shard file (format {:?})", meta("format"))));
        }
        let (world, rank) = (self.comm.world_size().to_string(), self.comm.rank().to_string());
        if meta("world") != world || meta("rank") != rank {
            return Err(bad(format!(
                "written by rank {} of {}, read by rank {rank} of {world}: load the whole state dict to change the number of ranks",
                meta("rank"),
                meta("world")
            )));
        }
        let saved: BTreeMap<String, Tensor<B>> = file.tensors.into_iter().collect();
        let mine: Vec<(String, Tensor<B>)> = self.named_shards().into_iter().chain(self.named_buffers()).collect();
        if saved.len() != mine.len() {
            return Err(bad(format!("{} tensors for a model with {}", saved.len(), mine.len())));
        }
        for (name, t) in &mine {
            let s = saved.get(name).ok_or_else(|| bad(format!("no {name}")))?;
            if s.dtype() != t.dtype() || s.shape() != t.shape() {
                return Err(bad(format!("{name} is {:?} {:?}, this rank's is {:?} {:?}", s.dtype(), s.dims(), t.dtype(), t.dims())));
            }
        }
        for (name, t) in &mine {
            no_grad(|| t.try_copy_(&saved[name]))?;
        }
        Ok(())
    }

    /// The shards of the whole model (this unit and the units inside it), by name.
    fn named_shards(&self) -> Vec<(String, Tensor<B>)> {
        self.named_parameters()
    }
}

/// The `format` a shard file's header names.
const SHARD_FORMAT: &str = "autograd-fsdp-shard/1";

/// The shape of a whole parameter from every rank's shard (a scalar's
/// shard is 0-d on rank 0 and `[0]` elsewhere; any other's is its rows).
/// A collective.
fn whole_shape<B: Backend>(comm: &dyn Communicator, shard: &Tensor<B>) -> Result<Vec<usize>> {
    let dims = crate::communicator::all_gather_varying(comm, &HostData::I64(shard.dims().iter().map(|&d| d as i64).collect()))?;
    let first: Vec<usize> = dims[0].to_f64_vec().iter().map(|&d| d as usize).collect();
    Ok(match first.split_first() {
        None => Vec::new(),
        Some((_, rest)) => {
            let rows = dims.iter().map(|d| d.to_f64_vec().first().copied().unwrap_or(0.0) as usize).sum();
            std::iter::once(rows).chain(rest.iter().copied()).collect()
        }
    })
}

/// A whole parameter from every rank's shard. A collective.
fn gather_rows<B: Backend>(comm: &dyn Communicator, shard: &Tensor<B>) -> Result<Tensor<B>> {
    let shape = whole_shape(comm, shard)?;
    let values = crate::communicator::all_gather_varying(comm, &shard.try_to_host()?)?;
    Tensor::try_from_host(host::concat(&values.iter().collect::<Vec<_>>())?, shape)
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
        {
            let mut unit = lock(&self.unit);
            unit.shards = self.shards.iter().map(|(_, s)| s.tensor().clone()).collect();
            unit.gather()?;
        }
        let out = self.module.try_forward(x);
        {
            let unit = lock(&self.unit);
            if unit.reshard_after_forward && !unit.in_backward {
                unit.release(false)?;
            }
        }
        let out = out?;
        if out.requires_grad() {
            let weak = Arc::downgrade(&self.unit);
            // The hook lives as long as the output's node.
            let _handle = out.try_register_hook(move |_| {
                if let Some(u) = weak.upgrade() {
                    let mut unit = lock(&u);
                    if let Err(e) = unit.begin(&weak).and_then(|()| unit.gather()) {
                        unit.error.get_or_insert(e);
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
