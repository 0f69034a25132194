//! char_gpt trained data-parallel: every rank takes its rows of each batch
//! (the same windows as one process draws), under plain DDP or a ZeRO
//! stage, and reports the bytes of parameters, gradients and optimizer
//! state it holds, from the memory counters. Written once over a
//! [`Communicator`]: `char_gpt --ranks N --zero S` runs it on threads, and
//! the same binary under `mpirun` (`--features mpi`) on processes.

use crate::char_gpt::{CausalBlock, CharGpt, Corpus, GptConfig, Rng, TrainConfig, adamw_config, lr_schedule, policy, windows};
use crate::ddp::shard;
use autograd::dist::{
    Communicator, DdpConfig, DistributedDataParallel, FsdpConfig, FullyShardedDataParallel, ShardedDataParallel, ZeroRedundancyOptimizer,
    clip_sharded_grad_norm,
};
use autograd::optim::{HyperParams, LrScheduler};
use autograd::prelude::*;
use autograd::tensor::functional as F;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// How the ranks share the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zero {
    /// Plain DDP: every rank holds everything (`--zero 0`).
    Ddp,
    /// ZeRO-1: optimizer state sharded.
    One,
    /// ZeRO-2: gradients too, in flat ranges of each bucket.
    Two,
    /// ZeRO-3: parameters too, each block a unit inside a root unit.
    Three,
}

/// `DDP`, `ZeRO-1`, `ZeRO-2` or `ZeRO-3`.
///
/// ```
/// assert_eq!(examples::char_gpt_dist::Zero::Three.to_string(), "ZeRO-3");
/// ```
impl std::fmt::Display for Zero {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Zero::Ddp => "DDP",
            Zero::One => "ZeRO-1",
            Zero::Two => "ZeRO-2",
            Zero::Three => "ZeRO-3",
        })
    }
}

impl Zero {
    /// `0`, `1`, `2` or `3`.
    pub fn parse(s: &str) -> Result<Zero> {
        match s {
            "0" => Ok(Zero::Ddp),
            "1" => Ok(Zero::One),
            "2" => Ok(Zero::Two),
            "3" => Ok(Zero::Three),
            _ => Err(Error::msg(format!("--zero: expected 0, 1, 2 or 3, got {s}"))),
        }
    }
}

/// How a data-parallel run shares and trains the model.
#[derive(Clone, Debug, PartialEq)]
pub struct DataParallel {
    /// The stage.
    pub zero: Zero,
    /// The blocks' checkpointing policy (`none`, `sqrt`, `every-K`).
    pub policy: String,
    /// The parameters' dtype.
    pub dtype: DType,
}

/// Bytes one rank holds, from the memory counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RankBytes {
    /// Parameters (ZeRO-3: the shards; the whole ones exist only while a block computes).
    pub params: usize,
    /// Gradients after a step (ZeRO-2 and 3: this rank's ranges or rows).
    pub grads: usize,
    /// Optimizer state after the first step.
    pub optimizer: usize,
}

/// What a rank's run measured.
#[derive(Clone, Debug)]
pub struct DistReport<B: Backend> {
    /// The training loss of every step, over the whole batch (averaged over ranks).
    pub losses: Vec<f64>,
    /// This rank's bytes.
    pub bytes: RankBytes,
    /// Median seconds per step.
    pub step_seconds: f64,
    /// The whole parameters at the end, under the unwrapped model's names
    /// (ZeRO-3 gathers them: every rank gets them).
    pub params: BTreeMap<String, Tensor<B>>,
}

/// A model wrapped for its stage and the optimizer that trains it.
enum Wrapped<B: Backend> {
    Ddp(DistributedDataParallel<B, CharGpt<B>>, AdamW<B>),
    One(DistributedDataParallel<B, CharGpt<B>>, ZeroRedundancyOptimizer<B, AdamW<B>>),
    Two(ShardedDataParallel<B, CharGpt<B>>, autograd::dist::ShardedOptimizer<B, AdamW<B>>),
    Three(FullyShardedDataParallel<B, CharGpt<B>>, AdamW<B>),
}

impl<B: Backend> Wrapped<B> {
    fn new(zero: Zero, comm: &Arc<dyn Communicator>, gc: &GptConfig, tc: &TrainConfig, policy_name: &str, dtype: DType) -> Result<Self> {
        let plain = || -> Result<CharGpt<B>> {
            let mut m = CharGpt::new(gc, policy(policy_name)?, tc.seed)?;
            m.to_dtype(dtype);
            Ok(m)
        };
        let cfg = adamw_config(tc);
        Ok(match zero {
            Zero::Ddp => {
                let m = DistributedDataParallel::new(plain()?, comm.clone(), DdpConfig::default())?;
                let o = AdamW::new(m.parameters(), cfg)?;
                Wrapped::Ddp(m, o)
            }
            Zero::One => {
                let m = DistributedDataParallel::new(plain()?, comm.clone(), DdpConfig::default())?;
                let o = ZeroRedundancyOptimizer::new(m.parameters(), comm.clone(), |p| AdamW::new(p, cfg))?;
                Wrapped::One(m, o)
            }
            Zero::Two => {
                let m = ShardedDataParallel::new(plain()?, comm.clone(), DdpConfig::default())?;
                let o = m.optimizer(|p| AdamW::new(p, cfg))?;
                Wrapped::Two(m, o)
            }
            Zero::Three => {
                let unit = |mut b: CausalBlock<B>| -> Result<Box<dyn Module<B>>> {
                    b.to_dtype(dtype);
                    Ok(Box::new(FullyShardedDataParallel::new(b, comm.clone(), FsdpConfig::default())?))
                };
                let mut gpt = CharGpt::with_blocks(gc, policy(policy_name)?, tc.seed, &unit)?;
                gpt.to_dtype(dtype); // the root's own parameters (the blocks' are shards already in `dtype`)
                let m = FullyShardedDataParallel::new(gpt, comm.clone(), FsdpConfig::default())?;
                let o = AdamW::new(m.parameters(), cfg)?;
                Wrapped::Three(m, o)
            }
        })
    }
    fn model(&self) -> &dyn Module<B> {
        match self {
            Wrapped::Ddp(m, _) | Wrapped::One(m, _) => m,
            Wrapped::Two(m, _) => m,
            Wrapped::Three(m, _) => m,
        }
    }
    fn optimizer(&mut self) -> &mut dyn Optimizer<B> {
        match self {
            Wrapped::Ddp(_, o) | Wrapped::Three(_, o) => o,
            Wrapped::One(_, o) => o,
            Wrapped::Two(_, o) => o,
        }
    }
    fn set_lr(&mut self, lr: f64) {
        let h: &mut dyn HyperParams = match self {
            Wrapped::Ddp(_, o) | Wrapped::Three(_, o) => o,
            Wrapped::One(_, o) => o,
            Wrapped::Two(_, o) => o,
        };
        for g in 0..h.num_groups() {
            h.set_group_lr(g, lr);
        }
    }
    /// Clips the gradient of the whole model (sharded stages: over every rank's part).
    fn clip(&self, comm: &dyn Communicator, max_norm: f64) -> Result<()> {
        match self {
            Wrapped::Ddp(m, _) | Wrapped::One(m, _) => clip_grad_norm_(&m.parameters(), max_norm, NormType::P(2.0), false).map(|_| ()),
            Wrapped::Two(_, o) => o.clip_grad_norm(max_norm).map(|_| ()),
            Wrapped::Three(m, _) => clip_sharded_grad_norm(comm, &m.parameters(), max_norm).map(|_| ()),
        }
    }
    fn whole_params(&self) -> Result<BTreeMap<String, Tensor<B>>> {
        Ok(match self {
            Wrapped::Ddp(m, _) | Wrapped::One(m, _) => m.module().named_parameters().into_iter().collect(),
            Wrapped::Two(m, _) => m.module().named_parameters().into_iter().collect(),
            Wrapped::Three(m, _) => {
                let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
                let mut all = m.full_state_dict()?;
                all.retain(|k, _| names.contains(k));
                all
            }
        })
    }
}

/// Trains char_gpt for `tc.steps` steps on this rank's rows of each batch
/// of `tc.batch_size` windows (which must split evenly), shared and
/// trained as `dp` says. Every rank
/// draws the same windows as one process would. `on_step(step, loss)`
/// reports the whole batch's loss.
pub fn train_data_parallel<B: Backend>(
    comm: Arc<dyn Communicator>,
    corpus: &Corpus,
    gc: &GptConfig,
    tc: &TrainConfig,
    dp: &DataParallel,
    mut on_step: impl FnMut(usize, f64),
) -> Result<DistReport<B>> {
    let dtype = dp.dtype;
    let (rank, world) = (comm.rank(), comm.world_size());
    let ctx = gc.context;
    if corpus.train.len() <= ctx + 1 {
        return Err(Error::msg(format!("char_gpt: the corpus is shorter than the context {ctx}")));
    }
    let start_bytes = autograd::core::memory::live_bytes();
    let mut w = Wrapped::<B>::new(dp.zero, &comm, gc, tc, &dp.policy, dtype)?;
    let mut bytes = RankBytes { params: autograd::core::memory::live_bytes().saturating_sub(start_bytes), ..Default::default() };
    let schedule = lr_schedule(tc)?;
    let mut rng = Rng::new(tc.seed ^ 0x5EED);
    let mut losses = Vec::with_capacity(tc.steps);
    let mut times = Vec::with_capacity(tc.steps);
    w.model().train();
    for step in 0..tc.steps {
        let starts: Vec<usize> = (0..tc.batch_size).map(|_| rng.below(corpus.train.len() - ctx - 1)).collect();
        let (x, y) = windows::<B>(&corpus.train, &starts, ctx)?;
        let (x, y) = (shard(&x, rank, world)?, shard(&y, rank, world)?);
        let began = Instant::now();
        w.set_lr(schedule.lr_at(tc.lr, step));
        w.optimizer().zero_grad(true);
        let local = {
            // The graph, the logits and the loss end with this block: the
            // bytes measured below are parameters, gradients and state.
            let logits = w.model().try_forward(&x)?;
            let (n, v) = (y.numel(), logits.dims()[2]);
            let loss = F::try_cross_entropy(
                &logits.try_reshape(&[n as isize, v as isize])?.try_to_dtype(dtype)?,
                &y.try_reshape(&[n as isize])?,
                Reduction::Mean,
                &Default::default(),
            )?;
            loss.backward()?;
            loss.try_item()?
        };
        w.clip(comm.as_ref(), tc.clip)?;
        w.optimizer().step()?;
        times.push(began.elapsed().as_secs_f64());
        let mut total = autograd::core::HostData::F64(vec![local]);
        comm.all_reduce(&mut total, autograd::dist::CollectiveOp::Avg)?;
        let whole = total.to_f64_vec()[0];
        if step == 0 {
            let with_grads = autograd::core::memory::live_bytes();
            w.optimizer().zero_grad(true);
            let without = autograd::core::memory::live_bytes();
            bytes.grads = with_grads.saturating_sub(without);
            bytes.optimizer = without.saturating_sub(start_bytes + bytes.params);
        }
        losses.push(whole);
        on_step(step, whole);
    }
    times.sort_by(f64::total_cmp);
    let params = w.whole_params()?.into_iter().map(|(k, t)| (k, t.detach())).collect();
    Ok(DistReport { losses, bytes, step_seconds: times.get(times.len() / 2).copied().unwrap_or(0.0), params })
}
