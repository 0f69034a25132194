//! ZeRO stage 1 (PyTorch's `ZeroRedundancyOptimizer`): optimizer state
//! sharded across ranks. Each parameter belongs to one rank, which alone
//! keeps its optimizer state (Adam's two moments) and updates it; after the
//! step every rank gathers the updated parameters from their owners. With
//! DDP's averaged gradients the result equals every rank running the whole
//! optimizer, with 1/world of the state per rank.

use crate::communicator::{Communicator, rank_failed};
use crate::host;
use autograd_core::{Backend, DType, HostData, Result};
use autograd_optim::{HyperParams, Optimizer, OptimizerState};
use autograd_tensor::{Tensor, no_grad};
use std::sync::Arc;

/// An optimizer whose state is split across ranks (ZeRO stage 1): each
/// rank keeps and updates the state of the parameters it owns, then every
/// rank gathers the updated parameters from their owners.
///
/// ```
/// use autograd_dist::{DdpConfig, DistributedDataParallel, ThreadGroup, ZeroRedundancyOptimizer};
/// use autograd_nn::{Linear, Module, ModuleExt};
/// use autograd_optim::{Adam, AdamConfig, Optimizer};
/// use autograd_tensor::Tensor;
/// use autograd_cpu::Cpu;
/// let weights = ThreadGroup::new(2).run(|comm| {
///     let ddp = DistributedDataParallel::new(Linear::<Cpu>::new(3, 2), comm.clone(), DdpConfig::default())?;
///     let mut opt = ZeroRedundancyOptimizer::new(ddp.parameters(), comm.clone(), |p| Adam::new(p, AdamConfig::default()))?;
///     ddp.forward(&Tensor::ones([4, 3])).sum().backward()?;
///     opt.step()?;
///     assert_eq!(opt.owned().len(), 1); // weight (6 values) on one rank, bias (2) on the other
///     Ok(ddp.module().weight.to_vec::<f32>())
/// }).unwrap();
/// assert_eq!(weights[0], weights[1]);
/// ```
pub struct ZeroRedundancyOptimizer<B: Backend, O: Optimizer<B>> {
    comm: Arc<dyn Communicator>,
    params: Vec<Tensor<B>>,
    /// The rank that owns each parameter.
    owner: Vec<usize>,
    local: O,
}

/// Owners for parameters of these sizes: largest first, each to the rank
/// holding the fewest elements so far (PyTorch's greedy partition), the
/// same on every rank.
fn partition(numels: &[usize], world: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..numels.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(numels[i]));
    let mut load = vec![0usize; world];
    let mut owner = vec![0; numels.len()];
    for i in order {
        let r = (0..world).min_by_key(|&r| load[r]).expect("world >= 1");
        owner[i] = r;
        load[r] += numels[i];
    }
    owner
}

impl<B: Backend, O: Optimizer<B>> ZeroRedundancyOptimizer<B, O> {
    /// Splits `params` across the ranks and builds this rank's optimizer
    /// over its share with `make` (called with an empty list on a rank
    /// that owns nothing). Every rank must pass the same parameters.
    pub fn new(params: Vec<Tensor<B>>, comm: Arc<dyn Communicator>, make: impl FnOnce(Vec<Tensor<B>>) -> Result<O>) -> Result<Self> {
        let owner = partition(&params.iter().map(Tensor::numel).collect::<Vec<_>>(), comm.world_size());
        let mine = params.iter().zip(&owner).filter(|(_, o)| **o == comm.rank()).map(|(p, _)| p.clone()).collect();
        let local = make(mine)?;
        Ok(ZeroRedundancyOptimizer { comm, params, owner, local })
    }
    /// The parameters this rank updates.
    pub fn owned(&self) -> Vec<Tensor<B>> {
        self.local.params()
    }
    /// The rank that owns each parameter, in the order given.
    pub fn owners(&self) -> &[usize] {
        &self.owner
    }
    /// The optimizer over this rank's share.
    pub fn local(&self) -> &O {
        &self.local
    }
    /// Bytes of optimizer state this rank holds (its shard only).
    pub fn local_state_bytes(&self) -> usize {
        self.local.state_dict().tensors.values().map(|t| t.numel() * t.dtype().size_in_bytes()).sum()
    }

    /// Every rank gets every parameter's value from its owner: one
    /// all-gather per dtype, each rank's share padded to the largest.
    fn gather_params(&self) -> Result<()> {
        let world = self.comm.world_size();
        // each dtype once, in order of first appearance (the same on every rank)
        let mut dtypes: Vec<DType> = Vec::new();
        for p in &self.params {
            if !dtypes.contains(&p.dtype()) {
                dtypes.push(p.dtype());
            }
        }
        for dtype in dtypes {
            let of_rank = |r: usize| -> Vec<&Tensor<B>> {
                self.params.iter().zip(&self.owner).filter(|(p, o)| **o == r && p.dtype() == dtype).map(|(p, _)| p).collect()
            };
            let totals: Vec<usize> = (0..world).map(|r| of_rank(r).iter().map(|p| p.numel()).sum()).collect();
            let longest = totals.iter().copied().max().unwrap_or(0);
            if longest == 0 {
                continue;
            }
            let _s = tracing::debug_span!("zero_all_gather", dtype = ?dtype, bytes = longest * world * dtype.size_in_bytes()).entered();
            let mine: Vec<HostData> = of_rank(self.comm.rank()).iter().map(|p| p.try_to_host()).collect::<Result<_>>()?;
            let mut flat = if mine.is_empty() { host::zeros(dtype, 0) } else { host::concat(&mine.iter().collect::<Vec<_>>())? };
            host::pad(&mut flat, longest);
            let all = self.comm.all_gather(&flat)?;
            for r in (0..world).filter(|&r| r != self.comm.rank()) {
                let mut offset = r * longest;
                for p in of_rank(r) {
                    let theirs = Tensor::<B>::try_from_host(host::slice(&all, offset, p.numel()), p.shape().clone())?;
                    no_grad(|| p.try_copy_(&theirs))?;
                    offset += p.numel();
                }
            }
        }
        Ok(())
    }
}

impl<B: Backend, O: Optimizer<B>> HyperParams for ZeroRedundancyOptimizer<B, O> {
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

impl<B: Backend, O: Optimizer<B>> Optimizer<B> for ZeroRedundancyOptimizer<B, O> {
    /// This rank's share of the update, then every parameter from its owner.
    fn step(&mut self) -> Result<()> {
        self.local.step()?;
        self.gather_params()
    }
    fn zero_grad(&self, set_to_none: bool) {
        for p in &self.params {
            p.clear_grad(set_to_none);
        }
    }
    fn params(&self) -> Vec<Tensor<B>> {
        self.params.clone()
    }
    /// This rank's shard of the state (PyTorch gathers it on one rank with
    /// `consolidate_state_dict`; here each rank saves its own).
    fn try_state_dict(&self) -> Result<OptimizerState<B>> {
        self.local.try_state_dict()
    }
    fn load_state_dict(&mut self, state: &OptimizerState<B>) -> Result<()> {
        self.local.load_state_dict(state).map_err(|e| rank_failed(&*self.comm, e))
    }
    /// The local optimizer's: it is owned by this one alone.
    fn id(&self) -> autograd_optim::OptimizerId {
        self.local.id()
    }
}
