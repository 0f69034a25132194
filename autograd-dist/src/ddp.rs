//! `DistributedDataParallel`: every rank holds the whole model, trains on
//! its own part of each batch, and averages gradients across ranks during
//! backward, so that every rank takes the same optimizer step (PyTorch's
//! `torch.nn.parallel.DistributedDataParallel`).
//!
//! How a step goes: each parameter's post-accumulate hook marks it ready;
//! when every parameter of a bucket is ready (and the buckets before it
//! have been launched) the bucket's gradients are flattened into one
//! buffer and all-reduced without waiting, on the communicator's thread,
//! while backward goes on with earlier layers. The last hook of a pass
//! queues an engine callback that launches what is left, waits for every
//! bucket in order and writes the averaged gradients back, so when
//! `backward()` returns the gradients are the global averages.

use crate::bucket::{BucketPlan, assign};
use crate::communicator::{CollectiveOp, Communicator, Work, all_gather_varying, host_to_text, text_to_host};
use crate::flat_shard::FlatShard;
use crate::host;
use autograd_core::{Backend, DistError, Error, HostData, Result};
use autograd_nn::{Module, ModuleExt, ModuleFields};
use autograd_tensor::{RemovableHandle, Tensor, no_grad, queue_callback};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Options of [`DistributedDataParallel`] (PyTorch's keyword arguments).
///
/// ```
/// use autograd_dist::DdpConfig;
/// let c = DdpConfig { find_unused_parameters: true, ..Default::default() };
/// assert_eq!(c.bucket_cap_mb, 25.0);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct DdpConfig {
    /// Bytes of gradients per bucket, in MiB (PyTorch: 25).
    pub bucket_cap_mb: f64,
    /// The first bucket's cap in MiB, small so communication starts early (PyTorch: 1).
    pub first_bucket_cap_mb: f64,
    /// Allow parameters that get no gradient in a step (a branch not taken):
    /// they count as zeros in the average, and a parameter no rank used
    /// keeps its gradient as it was. Costs one more small all-reduce per
    /// step. Without it such a parameter is an `Err` from `backward()`.
    pub find_unused_parameters: bool,
    /// Copy rank 0's buffers (running statistics) to every rank before each
    /// forward pass (PyTorch's default).
    pub broadcast_buffers: bool,
}

impl Default for DdpConfig {
    fn default() -> Self {
        DdpConfig { bucket_cap_mb: 25.0, first_bucket_cap_mb: 1.0, find_unused_parameters: false, broadcast_buffers: true }
    }
}

/// A parameter that takes part in the all-reduce.
struct Slot<B: Backend> {
    name: String,
    param: Tensor<B>,
    bucket: usize,
}

struct Bucket {
    plan: BucketPlan,
    /// Parameters of this bucket not yet ready in this pass.
    pending: usize,
    work: Option<Work>,
}

/// The bookkeeping of one backward pass (PyTorch's `Reducer`).
struct Reducer<B: Backend> {
    comm: Arc<dyn Communicator>,
    slots: Vec<Slot<B>>,
    buckets: Vec<Bucket>,
    ready: Vec<bool>,
    /// The next bucket to launch (buckets launch in order on every rank).
    next_launch: usize,
    /// A pass is under way (its final callback is queued).
    active: bool,
    /// The first error met by a hook (they cannot return one).
    error: Option<Error>,
    find_unused: bool,
    /// What each bucket's collective leaves on this rank.
    gradients: Gradients<B>,
}

/// What a bucket's collective leaves on this rank.
pub(crate) enum Gradients<B: Backend> {
    /// Every rank gets the average of the whole gradients (DDP's all-reduce).
    Replicated,
    /// Each rank gets the average of its flat range of each bucket's
    /// gradients (ZeRO-2's reduce-scatter), in `shards[b]`'s gradient; the
    /// whole gradients are freed as soon as they are sent.
    Sharded(Arc<Vec<FlatShard<B>>>),
}

impl<B: Backend> Reducer<B> {
    fn begin(&mut self, this: &Weak<Mutex<Reducer<B>>>) -> Result<()> {
        self.active = true;
        let weak = this.clone();
        queue_callback(move || match weak.upgrade() {
            Some(r) => lock(&r).finish(),
            None => Ok(()),
        })
    }

    fn mark_ready(&mut self, i: usize) -> Result<()> {
        if std::mem::replace(&mut self.ready[i], true) {
            return Err(DistError::Gradients {
                detail: format!("parameter '{}' received a gradient twice in one backward pass", self.slots[i].name),
            }
            .into());
        }
        let b = self.slots[i].bucket;
        self.buckets[b].pending -= 1;
        while self.next_launch < self.buckets.len() && self.buckets[self.next_launch].pending == 0 {
            self.launch(self.next_launch)?;
            self.next_launch += 1;
        }
        Ok(())
    }

    /// Starts the all-reduce of bucket `b`'s gradients (zeros for a
    /// parameter without one), as one coalesced launch of one buffer per
    /// gradient: no copy into a flat buffer and back.
    fn launch(&mut self, b: usize) -> Result<()> {
        let plan = &self.buckets[b].plan;
        let _s = tracing::debug_span!(
            "ddp_bucket_launch",
            bucket = b,
            params = plan.params.len(),
            bytes = plan.numel * plan.dtype.size_in_bytes()
        )
        .entered();
        let mut parts: Vec<HostData> = Vec::with_capacity(plan.params.len());
        for &i in &plan.params {
            let p = &self.slots[i].param;
            parts.push(match p.grad() {
                Some(g) => g.try_to_host()?,
                None => host::zeros(plan.dtype, p.numel()),
            });
        }
        self.buckets[b].work = Some(match &self.gradients {
            Gradients::Replicated => self.comm.all_reduce_async(parts, CollectiveOp::Avg)?,
            Gradients::Sharded(shards) => {
                let work = shards[b].reduce_scatter(self.comm.as_ref(), &parts)?;
                // Sent: this rank keeps only its shard of them.
                for &i in &plan.params {
                    self.slots[i].param.set_grad(None);
                }
                work
            }
        });
        Ok(())
    }

    /// The engine callback: launch the rest, wait for every bucket, write
    /// the averages back, reset for the next pass.
    fn finish(&mut self) -> Result<()> {
        let result = self.finish_inner();
        self.active = false;
        self.next_launch = 0;
        self.ready.iter_mut().for_each(|r| *r = false);
        for b in &mut self.buckets {
            b.pending = b.plan.params.len();
            b.work = None;
        }
        let hook_error = self.error.take();
        result.and(hook_error.map_or(Ok(()), Err))
    }

    fn finish_inner(&mut self) -> Result<()> {
        // Every rank launches every bucket, in order, whatever it used: the
        // collectives stay matched even when this rank is about to fail.
        while self.next_launch < self.buckets.len() {
            self.launch(self.next_launch)?;
            self.next_launch += 1;
        }
        let used_somewhere = if self.find_unused {
            let local = HostData::I64(self.ready.iter().map(|&r| r as i64).collect());
            let mut used = local;
            self.comm.all_reduce(&mut used, CollectiveOp::Sum)?;
            match used {
                HostData::I64(v) => v.into_iter().map(|n| n > 0).collect(),
                _ => unreachable!("i64 in, i64 out"),
            }
        } else {
            self.ready.clone()
        };
        for b in 0..self.buckets.len() {
            let work = self.buckets[b].work.take().expect("launched above");
            let _s = tracing::debug_span!("ddp_bucket_wait", bucket = b).entered();
            let averaged = work.wait()?;
            if let Gradients::Sharded(shards) = &self.gradients {
                // Unused parameters count as zeros in a flat shard.
                shards[b].accumulate_grad(averaged)?;
                continue;
            }
            for (&i, avg) in self.buckets[b].plan.params.iter().zip(averaged) {
                if used_somewhere[i] {
                    let p = &self.slots[i].param;
                    p.set_grad(Some(Tensor::try_from_host(avg, p.shape().clone())?));
                }
            }
        }
        if !self.find_unused {
            let missing: Vec<&str> =
                self.slots.iter().zip(&self.ready).filter(|(s, r)| !**r && s.param.requires_grad()).map(|(s, _)| s.name.as_str()).collect();
            if !missing.is_empty() {
                return Err(DistError::Gradients {
                    detail: format!(
                        "parameters {missing:?} received no gradient in this backward pass on rank {}; \
                         if the model has branches not taken in every step, pass DdpConfig {{ find_unused_parameters: true, .. }}",
                        self.comm.rank()
                    ),
                }
                .into());
            }
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wraps a module for data-parallel training (PyTorch's
/// `DistributedDataParallel`). In backward, each parameter's
/// post-accumulate hook marks it ready; a bucket whose parameters are all
/// ready (and whose predecessors have launched) is flattened and
/// all-reduced without waiting, while backward goes on; an engine callback
/// at the end of the pass launches the rest, waits for every bucket and
/// writes the averaged gradients back, so they are the global averages
/// when `backward()` returns. At construction every rank checks that all ranks hold parameters
/// and buffers of the same names, shapes and dtypes (`Err` listing the
/// differences, on every rank) and takes rank 0's values. Frozen
/// parameters (no `requires_grad`) are not all-reduced.
///
/// The wrapper is a [`Module`] whose only child is `module` (state-dict keys
/// start with `module.`, as PyTorch's); [`DistributedDataParallel::module`]
/// is the model itself, for saving.
///
/// ```
/// use autograd_dist::{Communicator, DdpConfig, DistributedDataParallel, ThreadGroup};
/// use autograd_nn::{Linear, Module, ModuleExt};
/// use autograd_tensor::{manual_seed, Tensor};
/// use autograd_cpu::Cpu;
/// let grads = ThreadGroup::new(2).run(|comm| {
///     manual_seed(comm.rank() as u64); // different initial weights: rank 0's win
///     let ddp = DistributedDataParallel::new(Linear::<Cpu>::new(2, 1), comm.clone(), DdpConfig::default())?;
///     let x = Tensor::<Cpu>::from_vec(vec![comm.rank() as f32 + 1.0, 0.0], [1, 2]);
///     ddp.forward(&x).sum().backward()?; // d/dw of w.x: x, averaged over ranks
///     Ok(ddp.module().weight.grad().unwrap().to_vec::<f32>())
/// }).unwrap();
/// assert_eq!(grads, vec![vec![1.5, 0.0]; 2]);
/// ```
pub struct DistributedDataParallel<B: Backend, M: Module<B>> {
    module: M,
    comm: Arc<dyn Communicator>,
    reducer: Arc<Mutex<Reducer<B>>>,
    no_sync: Arc<AtomicBool>,
    hooks: Vec<RemovableHandle>,
    config: DdpConfig,
}

impl<B: Backend, M: Module<B>> DistributedDataParallel<B, M> {
    /// Wraps `module`: checks it against every rank's, broadcasts rank 0's
    /// parameters and buffers, plans the buckets and registers the hooks.
    pub fn new(module: M, comm: Arc<dyn Communicator>, config: DdpConfig) -> Result<Self> {
        Self::build(module, comm, config, false)
    }

    /// [`DistributedDataParallel::new`], with each bucket's gradients
    /// reduce-scattered into flat shards when `sharded` (ZeRO-2).
    pub(crate) fn build(mut module: M, comm: Arc<dyn Communicator>, config: DdpConfig, sharded: bool) -> Result<Self> {
        if !(config.bucket_cap_mb > 0.0 && config.first_bucket_cap_mb > 0.0) {
            return Err(DistError::InvalidArgument {
                op: "DistributedDataParallel",
                detail: format!(
                    "bucket caps must be positive (bucket_cap_mb {}, first_bucket_cap_mb {})",
                    config.bucket_cap_mb, config.first_bucket_cap_mb
                ),
            }
            .into());
        }
        let params = module.named_parameters();
        let buffers = module.named_buffers();
        check_same_everywhere(comm.as_ref(), &params, &buffers, "DistributedDataParallel")?;
        if comm.world_size() > 1 {
            for (_, t) in params.iter().chain(&buffers) {
                broadcast_tensor(comm.as_ref(), t)?;
            }
        }
        let trained: Vec<(String, Tensor<B>)> = params.into_iter().filter(|(_, p)| p.requires_grad()).collect();
        let mib = |m: f64| (m * (1u64 << 20) as f64) as usize;
        let plans = assign(
            &trained.iter().map(|(_, p)| (p.numel(), p.dtype())).collect::<Vec<_>>(),
            mib(config.first_bucket_cap_mb),
            mib(config.bucket_cap_mb),
        );
        let mut trained = trained;
        let gradients = if sharded {
            // Each bucket's parameters become views of one flat buffer,
            // this rank's range of which is the shard: no second copy.
            let mut shards = Vec::with_capacity(plans.len());
            let mut views = HashMap::new();
            for plan in &plans {
                let (shard, params) = FlatShard::new(plan.params.iter().map(|&i| trained[i].1.clone()).collect(), comm.as_ref())?;
                for (&i, view) in plan.params.iter().zip(params) {
                    views.insert(trained[i].0.clone(), view);
                }
                shards.push(shard);
            }
            replace_parameters(module.as_dyn_mut(), "", &views);
            // The module's parameters now (detached views of the flat buffers).
            let now: HashMap<String, Tensor<B>> = module.named_parameters().into_iter().collect();
            for (name, p) in &mut trained {
                *p = now[name.as_str()].clone();
            }
            Gradients::Sharded(Arc::new(shards))
        } else {
            Gradients::Replicated
        };
        let mut slots: Vec<Slot<B>> = trained.into_iter().map(|(name, param)| Slot { name, param, bucket: 0 }).collect();
        for (b, plan) in plans.iter().enumerate() {
            for &i in &plan.params {
                slots[i].bucket = b;
            }
        }
        tracing::debug!(buckets = plans.len(), params = slots.len(), "ddp buckets planned");
        let buckets = plans.into_iter().map(|plan| Bucket { pending: plan.params.len(), plan, work: None }).collect();
        let n = slots.len();
        let reducer = Arc::new(Mutex::new(Reducer {
            comm: comm.clone(),
            slots,
            buckets,
            ready: vec![false; n],
            next_launch: 0,
            active: false,
            error: None,
            find_unused: config.find_unused_parameters,
            gradients,
        }));
        let no_sync = Arc::new(AtomicBool::new(false));
        let params: Vec<Tensor<B>> = lock(&reducer).slots.iter().map(|s| s.param.clone()).collect();
        let mut hooks = Vec::with_capacity(n);
        for (i, p) in params.iter().enumerate() {
            let (weak, skip) = (Arc::downgrade(&reducer), no_sync.clone());
            hooks.push(p.register_post_accumulate_grad_hook(move |_| {
                if skip.load(Ordering::Relaxed) {
                    return;
                }
                let Some(r) = weak.upgrade() else { return };
                let mut red = lock(&r);
                let started = if red.active { Ok(()) } else { red.begin(&weak) };
                if let Err(e) = started.and_then(|()| red.mark_ready(i)) {
                    red.error.get_or_insert(e);
                }
            })?);
        }
        Ok(DistributedDataParallel { module, comm, reducer, no_sync, hooks, config })
    }

    /// The wrapped model (PyTorch's `ddp.module`): save this one.
    pub fn module(&self) -> &M {
        &self.module
    }
    /// The wrapped model, mutably.
    pub fn module_mut(&mut self) -> &mut M {
        &mut self.module
    }
    /// The communicator.
    pub fn comm(&self) -> &Arc<dyn Communicator> {
        &self.comm
    }
    /// The flat shards of a sharded wrapper (ZeRO-2), in bucket order.
    pub(crate) fn flat_shards(&self) -> Arc<Vec<FlatShard<B>>> {
        match &lock(&self.reducer).gradients {
            Gradients::Sharded(shards) => shards.clone(),
            Gradients::Replicated => Arc::new(Vec::new()),
        }
    }
    /// The bucket plan: for each bucket in launch order, its parameters' names.
    pub fn buckets(&self) -> Vec<Vec<String>> {
        let r = lock(&self.reducer);
        r.buckets.iter().map(|b| b.plan.params.iter().map(|&i| r.slots[i].name.clone()).collect()).collect()
    }
    /// Skips the all-reduce while the guard lives (PyTorch's `no_sync()`):
    /// gradients accumulate locally over micro-batches, and the first
    /// backward after the guard is dropped all-reduces the accumulated sum.
    ///
    /// ```
    /// use autograd_dist::{Communicator, DdpConfig, DistributedDataParallel, ThreadGroup};
    /// use autograd_nn::{Linear, Module, ModuleExt};
    /// use autograd_tensor::Tensor;
    /// use autograd_cpu::Cpu;
    /// ThreadGroup::new(2).run(|comm| {
    ///     let ddp = DistributedDataParallel::new(Linear::<Cpu>::new(1, 1), comm.clone(), DdpConfig::default())?;
    ///     let x = Tensor::<Cpu>::from_vec(vec![comm.rank() as f32], [1, 1]);
    ///     {
    ///         let _local = ddp.no_sync();
    ///         ddp.forward(&x).sum().backward()?; // no communication
    ///     }
    ///     ddp.forward(&x).sum().backward()?; // all-reduces both micro-batches' sum
    ///     assert_eq!(ddp.module().weight.grad().unwrap().to_vec::<f32>(), vec![1.0]); // (0+0 + 1+1) / 2
    ///     Ok(())
    /// }).unwrap();
    /// ```
    pub fn no_sync(&self) -> NoSync {
        NoSync { flag: self.no_sync.clone(), before: self.no_sync.swap(true, Ordering::Relaxed) }
    }
    fn sync_buffers(&self) -> Result<()> {
        if self.config.broadcast_buffers && self.comm.world_size() > 1 {
            for (_, b) in self.module.named_buffers() {
                broadcast_tensor(self.comm.as_ref(), &b)?;
            }
        }
        Ok(())
    }
}

impl<B: Backend, M: Module<B>> Drop for DistributedDataParallel<B, M> {
    fn drop(&mut self) {
        for h in self.hooks.drain(..) {
            h.remove();
        }
    }
}

/// While it lives, [`DistributedDataParallel`] does not all-reduce.
#[derive(Debug)]
pub struct NoSync {
    flag: Arc<AtomicBool>,
    before: bool,
}

impl Drop for NoSync {
    fn drop(&mut self) {
        self.flag.store(self.before, Ordering::Relaxed);
    }
}

impl<B: Backend, M: Module<B>> ModuleFields<B> for DistributedDataParallel<B, M> {
    fn children(&self) -> Vec<(String, &dyn Module<B>)> {
        vec![("module".into(), self.module.as_dyn())]
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module<B>)> {
        vec![("module".into(), self.module.as_dyn_mut())]
    }
    fn type_name(&self) -> &'static str {
        "DistributedDataParallel"
    }
}

impl<B: Backend, M: Module<B>> Module<B> for DistributedDataParallel<B, M> {
    /// Rank 0's buffers first (when [`DdpConfig::broadcast_buffers`]), then
    /// the model's forward.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.sync_buffers()?;
        self.module.try_forward(x)
    }
}

/// `prefix.name`, or `name` at the top.
pub(crate) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") }
}

/// Puts `with[name]` in place of each parameter so named (keeping whether it is trained).
fn replace_parameters<B: Backend>(m: &mut dyn Module<B>, prefix: &str, with: &HashMap<String, Tensor<B>>) {
    for (n, p) in m.params_mut() {
        if let Some(t) = with.get(&join(prefix, &n)) {
            p.set(t.clone());
        }
    }
    for (n, c) in m.children_mut() {
        replace_parameters(c, &join(prefix, &n), with);
    }
}

/// Overwrites `t` with rank 0's values.
pub(crate) fn broadcast_tensor<B: Backend>(comm: &dyn Communicator, t: &Tensor<B>) -> Result<()> {
    let mut data = t.try_to_host()?;
    comm.broadcast(&mut data, 0)?;
    let theirs = Tensor::<B>::try_from_host(data, t.shape().clone())?;
    no_grad(|| t.try_copy_(&theirs))
}

/// `Err` on every rank unless all ranks hold the same parameter and buffer
/// names, shapes, dtypes and trainability.
pub(crate) fn check_same_everywhere<B: Backend>(
    comm: &dyn Communicator,
    params: &[(String, Tensor<B>)],
    buffers: &[(String, Tensor<B>)],
    op: &'static str,
) -> Result<()> {
    let describe = |kind: &str, (name, t): &(String, Tensor<B>)| {
        format!(
            "{kind} {name}: shape {:?}, {:?}{}",
            t.dims(),
            t.dtype(),
            if kind == "parameter" && !t.requires_grad() { ", frozen" } else { "" }
        )
    };
    let mine: Vec<String> = params.iter().map(|p| describe("parameter", p)).chain(buffers.iter().map(|b| describe("buffer", b))).collect();
    let all = all_gather_varying(comm, &text_to_host(&mine.join("\n")))?;
    let texts: Vec<String> = all.iter().map(host_to_text).collect();
    let reference: Vec<&str> = texts[0].lines().collect();
    let mut diffs = Vec::new();
    for (r, t) in texts.iter().enumerate().skip(1) {
        let lines: Vec<&str> = t.lines().collect();
        for l in &lines {
            if !reference.contains(l) {
                diffs.push(format!("rank {r} has {l}"));
            }
        }
        for l in &reference {
            if !lines.contains(l) {
                diffs.push(format!("rank {r} lacks rank 0's {l}"));
            }
        }
        if diffs.is_empty() && lines != reference {
            diffs.push(format!("rank {r} holds the same tensors in another order (the buckets would differ)"));
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(DistError::Mismatch { op, detail: format!("the ranks' models differ:\n  {}", diffs.join("\n  ")) }.into())
    }
}
