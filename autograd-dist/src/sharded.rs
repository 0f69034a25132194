//! ZeRO stage 2 (FairScale's `ShardedDataParallel` with a sharded
//! optimizer, DeepSpeed's stage 2): every rank holds the whole model, but
//! each bucket of gradients is reduce-scattered during backward, so a rank
//! keeps (and averages) only its flat range of every bucket; the optimizer
//! state and the update cover that range alone, and after the step every
//! rank gathers the updated ranges back into the whole parameters.
//!
//! Ranges are flat slices of a bucket's parameters taken in bucket order
//! (a parameter may straddle two ranks), the bucket padded with zeros to a
//! multiple of the world, so every rank holds the same number of values.
//! With Adam's two moments in the parameters' dtype a rank holds one whole
//! copy of the parameters plus `3 / world` copies (gradient, moments).

use crate::communicator::{CollectiveOp, Communicator, Work, rank_failed};
use crate::ddp::{DdpConfig, DistributedDataParallel, NoSync};
use crate::flat_shard::FlatShard;
use autograd_core::{HostData, Result};
use autograd_nn::{Module, ModuleExt, ModuleFields};
use autograd_optim::{HyperParams, NormType, Optimizer, OptimizerState, clip_grads_with_norm_, get_total_norm};
use autograd_tensor::Tensor;
use std::sync::Arc;

/// Wraps a module for ZeRO-2 training: [`DistributedDataParallel`] whose
/// buckets are reduce-scattered instead of all-reduced, so after backward
/// each rank holds the average of its flat range of every bucket (in
/// [`ShardedDataParallel::shards`]' gradients) and no whole gradient.
/// Train it with the optimizer [`ShardedDataParallel::optimizer`] builds:
/// it updates the ranges and gathers them back into the parameters (an
/// optimizer over `parameters()` would see no gradients and change
/// nothing).
///
/// A parameter no rank used in a pass counts as zeros in its range (there
/// is no "no gradient" for part of a flat range).
///
/// ```
/// use autograd_dist::{Communicator, DdpConfig, ShardedDataParallel, ThreadGroup};
/// use autograd_nn::{Linear, Module, ModuleExt};
/// use autograd_optim::{Optimizer, Sgd, SgdConfig};
/// use autograd_tensor::Tensor;
/// use autograd_cpu::Cpu;
/// let finals = ThreadGroup::new(2).run(|comm| {
///     let model = ShardedDataParallel::new(Linear::<Cpu>::new(4, 1), comm.clone(), DdpConfig::default())?;
///     let mut opt = model.optimizer(|shards| Sgd::new(shards, SgdConfig { lr: 0.1, ..Default::default() }))?;
///     assert_eq!(model.shards()[0].numel(), 3); // 5 values, padded to 6, in 2 ranges
///     for _ in 0..3 {
///         let x = Tensor::<Cpu>::full([8, 4], comm.rank() as f64);
///         opt.zero_grad(true);
///         model.forward(&x).powf(2.0).mean().backward()?; // this rank's averaged range only
///         assert!(model.module().weight.grad().is_none());
///         opt.step()?; // updates the range, gathers the parameters
///     }
///     Ok(model.module().weight.to_vec::<f32>())
/// }).unwrap();
/// assert_eq!(finals[0], finals[1]);
/// ```
pub struct ShardedDataParallel<B: autograd_core::Backend, M: Module<B>> {
    ddp: DistributedDataParallel<B, M>,
    shards: Arc<Vec<FlatShard<B>>>,
}

impl<B: autograd_core::Backend, M: Module<B>> ShardedDataParallel<B, M> {
    /// Wraps `module` as [`DistributedDataParallel::new`] does (same
    /// checks, rank 0's values, the same buckets) and takes this rank's
    /// range of each bucket.
    pub fn new(module: M, comm: Arc<dyn Communicator>, config: DdpConfig) -> Result<Self> {
        let ddp = DistributedDataParallel::build(module, comm, config, true)?;
        let shards = ddp.flat_shards();
        Ok(ShardedDataParallel { ddp, shards })
    }
    /// The wrapped model (save this one; every rank holds all of it).
    pub fn module(&self) -> &M {
        self.ddp.module()
    }
    /// The communicator.
    pub fn comm(&self) -> &Arc<dyn Communicator> {
        self.ddp.comm()
    }
    /// This rank's range of each bucket (1-D leaves, bucket order): what its optimizer updates.
    pub fn shards(&self) -> Vec<Tensor<B>> {
        self.shards.iter().map(|s| s.shard().clone()).collect()
    }
    /// The bucket plan: for each bucket, its parameters' names.
    pub fn buckets(&self) -> Vec<Vec<String>> {
        self.ddp.buckets()
    }
    /// Gradients accumulate in the whole parameters while the guard lives
    /// ([`DistributedDataParallel::no_sync`]); the first backward after it
    /// reduce-scatters the sum and frees them.
    pub fn no_sync(&self) -> NoSync {
        self.ddp.no_sync()
    }
    /// The optimizer of this rank's ranges: `make` builds it over
    /// [`ShardedDataParallel::shards`].
    pub fn optimizer<O: Optimizer<B>>(&self, make: impl FnOnce(Vec<Tensor<B>>) -> Result<O>) -> Result<ShardedOptimizer<B, O>> {
        Ok(ShardedOptimizer { comm: self.comm().clone(), shards: self.shards.clone(), local: make(self.shards())? })
    }
}

impl<B: autograd_core::Backend, M: Module<B>> ModuleFields<B> for ShardedDataParallel<B, M> {
    fn children(&self) -> Vec<(String, &dyn Module<B>)> {
        vec![("module".into(), self.ddp.module().as_dyn())]
    }
    fn type_name(&self) -> &'static str {
        "ShardedDataParallel"
    }
}

impl<B: autograd_core::Backend, M: Module<B>> Module<B> for ShardedDataParallel<B, M> {
    /// [`DistributedDataParallel`]'s forward.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.ddp.try_forward(x)
    }
}

/// The optimizer of a [`ShardedDataParallel`] model's ranges (ZeRO-2):
/// `step` updates this rank's ranges with the local optimizer, then every
/// rank gathers every range back into the whole parameters (one
/// all-gather per bucket, all launched before the first wait).
pub struct ShardedOptimizer<B: autograd_core::Backend, O: Optimizer<B>> {
    comm: Arc<dyn Communicator>,
    shards: Arc<Vec<FlatShard<B>>>,
    local: O,
}

impl<B: autograd_core::Backend, O: Optimizer<B>> ShardedOptimizer<B, O> {
    /// The optimizer over this rank's ranges.
    pub fn local(&self) -> &O {
        &self.local
    }
    /// Scales the ranges' gradients so that the norm of the whole
    /// gradient (over every rank's ranges) is at most `max_norm`, as
    /// `clip_grad_norm_` on one process would; returns that norm. A
    /// collective: every rank calls it.
    pub fn clip_grad_norm(&self, max_norm: f64) -> Result<f64> {
        clip_sharded_grad_norm(self.comm.as_ref(), &self.local.params(), max_norm)
    }
}

/// The 2-norm of a gradient split across ranks (each rank passes its
/// shards; padding and other ranks' values are counted once), and the
/// shards' gradients scaled as `clip_grad_norm_` scales whole ones so that
/// it is at most `max_norm`. A collective: every rank calls it.
///
/// ```
/// use autograd_dist::{clip_sharded_grad_norm, Communicator, ThreadGroup};
/// use autograd_tensor::Tensor;
/// use autograd_cpu::Cpu;
/// let norms = ThreadGroup::new(2).run(|comm| {
///     let w = Tensor::<Cpu>::zeros([1]).requires_grad_(true);
///     w.set_grad(Some(Tensor::full([1], if comm.rank() == 0 { 3.0 } else { 4.0 })));
///     let norm = clip_sharded_grad_norm(comm.as_ref(), &[w.clone()], 1.0)?;
///     Ok((norm, w.grad().unwrap().item()))
/// }).unwrap();
/// assert_eq!(norms[0].0, 5.0);
/// assert!((norms[1].1 - 0.8).abs() < 1e-6);
/// ```
pub fn clip_sharded_grad_norm<B: autograd_core::Backend>(comm: &dyn Communicator, shards: &[Tensor<B>], max_norm: f64) -> Result<f64> {
    let local = get_total_norm(shards, NormType::P(2.0))?;
    let local_value = local.try_item()?;
    let mut squares = HostData::F64(vec![local_value * local_value]);
    comm.all_reduce(&mut squares, CollectiveOp::Sum)?;
    let total = squares.to_f64_vec()[0].sqrt();
    // In the gradients' dtype, as the one-process clip computes it.
    clip_grads_with_norm_(shards, max_norm, &Tensor::<B>::try_full_dtype([], total, local.dtype())?)?;
    Ok(total)
}

impl<B: autograd_core::Backend, O: Optimizer<B>> HyperParams for ShardedOptimizer<B, O> {
    fn num_groups(&self) -> usize {
        self.local.num_groups()
    }
    fn group_lr(&self, group: usize) -> f64 {
        self.local.group_lr(group)
    }
    fn set_group_lr(&mut self, group: usize, lr: f64) {
        self.local.set_group_lr(group, lr)
    }
    fn group_momentum(&self, group: usize) -> Option<f64> {
        self.local.group_momentum(group)
    }
    fn set_group_momentum(&mut self, group: usize, momentum: f64) {
        self.local.set_group_momentum(group, momentum)
    }
}

impl<B: autograd_core::Backend, O: Optimizer<B>> Optimizer<B> for ShardedOptimizer<B, O> {
    /// This rank's ranges, then every range gathered into the parameters.
    fn step(&mut self) -> Result<()> {
        self.local.step()?;
        let _s = tracing::debug_span!("zero2_gather", buckets = self.shards.len()).entered();
        let works: Vec<Work> = self.shards.iter().map(|s| s.gather(self.comm.as_ref())).collect::<Result<_>>()?;
        for (s, w) in self.shards.iter().zip(works) {
            s.write_back(w.wait()?)?;
        }
        Ok(())
    }
    /// The ranges' gradients, and any whole gradient kept under `no_sync`.
    fn zero_grad(&self, set_to_none: bool) {
        for t in self.shards.iter().map(|s| s.shard()).chain(self.shards.iter().flat_map(|s| s.params())) {
            t.clear_grad(set_to_none);
        }
    }
    /// This rank's ranges.
    fn params(&self) -> Vec<Tensor<B>> {
        self.local.params()
    }
    /// This rank's share of the state.
    fn try_state_dict(&self) -> Result<OptimizerState<B>> {
        self.local.try_state_dict()
    }
    fn load_state_dict(&mut self, state: &OptimizerState<B>) -> Result<()> {
        self.local.load_state_dict(state).map_err(|e| rank_failed(&*self.comm, e))
    }
    fn id(&self) -> autograd_optim::OptimizerId {
        self.local.id()
    }
}
