//! Data-parallel training of the digits MLP, and the checks that it is the
//! same training as one process on the whole batches. Written once over a
//! [`Communicator`]: the tests run it on an in-process [`ThreadGroup`], CI
//! runs it under `mpirun` (`ddp_digits --check`).
//!
//! [`ThreadGroup`]: autograd::dist::ThreadGroup

use crate::digits::{Digits, Recipe, predict};
use autograd::dist::{Communicator, DdpConfig, DistributedDataParallel, DistributedSampler, ZeroRedundancyOptimizer, on_rank0};
use autograd::prelude::*;
use autograd::tensor::fork_rng;
use autograd::tensor::functional::try_cross_entropy;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Rows `rank * n / world ..` of `t` (this rank's part of a batch of `n`).
pub fn shard<B: Backend>(t: &Tensor<B>, rank: usize, world: usize) -> Result<Tensor<B>> {
    let n = t.dims()[0];
    if !n.is_multiple_of(world) {
        return Err(Error::msg(format!("shard: a batch of {n} does not split into {world} equal parts")));
    }
    t.try_narrow(0, rank * (n / world), n / world)
}

/// The optimizer of a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opt {
    /// SGD, lr 0.05, momentum 0.9.
    SgdMomentum,
    /// Adam, lr 1e-3.
    Adam,
}

/// What a check trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Plain DDP, one backward per step.
    Plain,
    /// Two micro-batches per step, the first under `no_sync`.
    NoSync,
    /// DDP with ZeRO-1: also compared with plain DDP on the same rank.
    Zero1,
    /// A model whose extra branch runs only on even steps (`find_unused_parameters`).
    UnusedBranch,
}

/// One equivalence check.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    /// The optimizer.
    pub opt: Opt,
    /// F32 or F64.
    pub dtype: DType,
    /// What is trained.
    pub mode: Mode,
    /// Steps (the issue: 20).
    pub steps: usize,
    /// Whole batch (split across ranks).
    pub batch: usize,
}

impl Check {
    /// The issue's tolerance: 1e-12 for f64, 1e-5 for f32.
    pub fn tolerance(&self) -> f64 {
        if self.dtype == DType::F64 { 1e-12 } else { 1e-5 }
    }
}

/// The digits MLP with an optional branch: `head(relu(fc(x)))`, plus
/// `extra(relu(fc(x)))` when `use_extra` is set.
struct Branchy<B: Backend> {
    fc: Linear<B>,
    head: Linear<B>,
    extra: Linear<B>,
    use_extra: AtomicBool,
}

impl<B: Backend> ModuleFields<B> for Branchy<B> {
    fn children(&self) -> Vec<(String, &dyn Module<B>)> {
        vec![("fc".into(), &self.fc as &dyn Module<B>), ("head".into(), &self.head), ("extra".into(), &self.extra)]
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module<B>)> {
        vec![("fc".into(), &mut self.fc as &mut dyn Module<B>), ("head".into(), &mut self.head), ("extra".into(), &mut self.extra)]
    }
}

impl<B: Backend> Module<B> for Branchy<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let h = self.fc.try_forward(x)?.relu();
        let out = self.head.try_forward(&h)?;
        if self.use_extra.load(Ordering::Relaxed) { out.try_add(&self.extra.try_forward(&h)?) } else { Ok(out) }
    }
}

fn model<B: Backend>(seed: u64, dtype: DType) -> Branchy<B> {
    let mut m = fork_rng(seed, || Branchy {
        fc: Linear::new(64, 128),
        head: Linear::new(128, 10),
        extra: Linear::new(128, 10),
        use_extra: AtomicBool::new(true),
    });
    m.to_dtype(dtype);
    m
}

fn optimizer<B: Backend>(opt: Opt, params: Vec<Tensor<B>>) -> Result<Box<dyn Optimizer<B>>> {
    Ok(match opt {
        Opt::SgdMomentum => Box::new(Sgd::new(params, SgdConfig { lr: 0.05, momentum: 0.9, ..Default::default() })?),
        Opt::Adam => Box::new(Adam::new(params, AdamConfig { lr: 1e-3, ..Default::default() })?),
    })
}

fn loss<B: Backend>(m: &dyn Module<B>, x: &Tensor<B>, y: &Tensor<B>, scale: f64) -> Result<Tensor<B>> {
    Ok(try_cross_entropy(&m.try_forward(x)?, y, Reduction::Mean, &Default::default())? * scale)
}

fn max_diff<B: Backend>(a: &impl ModuleExt<B>, b: &impl ModuleExt<B>) -> f64 {
    let (pa, pb) = (a.state_dict(), b.state_dict());
    pa.iter()
        .map(|(k, t)| {
            let u = pb.get(k).or_else(|| pb.get(&format!("module.{k}"))).expect("same names").to_vec_f64();
            t.to_vec_f64().iter().zip(u).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
        })
        .fold(0.0, f64::max)
}

/// Bytes of the optimizer state tensors (for ZeRO-1: this rank's shard).
fn state_bytes<B: Backend>(o: &dyn Optimizer<B>) -> usize {
    o.state_dict().tensors.values().map(|t| t.numel() * t.dtype().size_in_bytes()).sum()
}

/// What a check measured on one rank.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// Largest |parameter difference| from one process on the whole batches.
    pub vs_single: f64,
    /// ZeRO-1 only: largest difference from plain DDP.
    pub vs_ddp: Option<f64>,
    /// ZeRO-1 only: optimizer state bytes on this rank (sharded) and of the whole optimizer.
    pub state_bytes: Option<(usize, usize)>,
}

/// Trains `check` for `check.steps` steps on the digits training set: one
/// process on whole batches (computed on every rank, no communication) and
/// the ranks with DDP on their part of each batch (each rank starts from a
/// different initialisation: DDP must take rank 0's). Returns this rank's
/// report; `Err` when a difference exceeds [`Check::tolerance`].
pub fn check_against_single<B: Backend>(comm: Arc<dyn Communicator>, data: &Digits<B>, check: Check) -> Result<CheckReport> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let x = data.train.0.to_dtype(check.dtype);
    let y = data.train.1.clone();
    let micro = if check.mode == Mode::NoSync { 2 } else { 1 };
    let batch = |step: usize, part: usize| -> Result<(Tensor<B>, Tensor<B>)> {
        let per = check.batch / micro;
        let start = (step * check.batch + part * per) % (x.dims()[0] - check.batch);
        Ok((x.try_narrow(0, start, per)?, y.try_narrow(0, start, per)?))
    };
    let single = model::<B>(0, check.dtype);
    let find_unused = check.mode == Mode::UnusedBranch;
    single.use_extra.store(find_unused, Ordering::Relaxed);
    let ddp = DistributedDataParallel::new(
        model::<B>(rank as u64, check.dtype),
        comm.clone(),
        DdpConfig { find_unused_parameters: find_unused, ..Default::default() },
    )?;
    let plain = (check.mode == Mode::Zero1)
        .then(|| {
            DistributedDataParallel::new(
                model::<B>(if rank == 0 { 0 } else { rank as u64 + 100 }, check.dtype),
                comm.clone(),
                DdpConfig::default(),
            )
        })
        .transpose()?;
    let mut opt_single = optimizer(check.opt, single.parameters())?;
    let mut opt_ddp: Box<dyn Optimizer<B>> = match check.mode {
        Mode::Zero1 => Box::new(ZeroRedundancyOptimizer::new(ddp.parameters(), comm.clone(), |p| optimizer(check.opt, p))?),
        _ => optimizer(check.opt, ddp.parameters())?,
    };
    let mut opt_plain = plain.as_ref().map(|p| optimizer(check.opt, p.parameters())).transpose()?;
    for step in 0..check.steps {
        let extra = find_unused && step % 2 == 0;
        single.use_extra.store(extra || !find_unused, Ordering::Relaxed);
        ddp.module().use_extra.store(extra || !find_unused, Ordering::Relaxed);
        opt_single.zero_grad(true);
        opt_ddp.zero_grad(true);
        for part in 0..micro {
            let (xb, yb) = batch(step, part)?;
            loss(&single, &xb, &yb, 1.0 / micro as f64)?.backward()?;
            let (xr, yr) = (shard(&xb, rank, world)?, shard(&yb, rank, world)?);
            if part + 1 < micro {
                let _local = ddp.no_sync();
                loss(&ddp, &xr, &yr, 1.0 / micro as f64)?.backward()?;
            } else {
                loss(&ddp, &xr, &yr, 1.0 / micro as f64)?.backward()?;
            }
            if let (Some(p), Some(o)) = (&plain, &mut opt_plain) {
                o.zero_grad(true);
                loss(p, &xr, &yr, 1.0)?.backward()?;
                o.step()?;
            }
        }
        opt_single.step()?;
        opt_ddp.step()?;
    }
    let report = CheckReport {
        vs_single: max_diff(&single, ddp.module()),
        vs_ddp: plain.as_ref().map(|p| max_diff(ddp.module(), p.module())),
        state_bytes: opt_plain.as_ref().map(|o| (state_bytes(opt_ddp.as_ref()), state_bytes(o.as_ref()))),
    };
    let tol = check.tolerance();
    if report.vs_single > tol || report.vs_ddp.is_some_and(|d| d > tol) {
        return Err(Error::msg(format!("{check:?} on rank {rank}: parameters differ by {report:?}, more than {tol:e}")));
    }
    Ok(report)
}

/// The checks of the issue, in order: SGD+momentum and Adam in f64 and
/// f32, `no_sync`, ZeRO-1 against plain DDP, the unused branch.
pub fn issue_checks() -> Vec<Check> {
    let c = |opt, dtype, mode| Check { opt, dtype, mode, steps: 20, batch: 64 };
    vec![
        c(Opt::SgdMomentum, DType::F64, Mode::Plain),
        c(Opt::Adam, DType::F64, Mode::Plain),
        c(Opt::SgdMomentum, DType::F32, Mode::Plain),
        c(Opt::Adam, DType::F32, Mode::Plain),
        c(Opt::Adam, DType::F64, Mode::NoSync),
        c(Opt::Adam, DType::F64, Mode::Zero1),
        c(Opt::SgdMomentum, DType::F64, Mode::UnusedBranch),
    ]
}

/// What [`train_ddp`] did on one rank.
#[derive(Clone, Debug)]
pub struct DdpRun {
    /// Mean training loss of each epoch on this rank's shard.
    pub epoch_losses: Vec<f64>,
    /// Test accuracy of the final model (the same on every rank).
    pub test_accuracy: f64,
    /// Steps taken.
    pub steps: usize,
}

/// Trains the digits MLP (64-128-10, Adam) with DDP: each rank reads its
/// [`DistributedSampler`] shard in batches of `recipe.batch_size`, so a
/// step sees `world * batch_size` examples. `on_epoch(epoch, mean loss)`
/// after each epoch (its `Err` stops training); with `save`, rank 0 writes the model there at the end.
pub fn train_ddp<B: Backend>(
    comm: Arc<dyn Communicator>,
    data: &Digits<B>,
    recipe: &Recipe,
    save: Option<&std::path::Path>,
    mut on_epoch: impl FnMut(usize, f64) -> Result<()>,
) -> Result<DdpRun> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let net = fork_rng(recipe.seed, || MlpConfig::new(&[64, 128, 10]).init::<B>());
    let ddp = DistributedDataParallel::new(net, comm.clone(), DdpConfig::default())?;
    let mut opt = Adam::new(ddp.parameters(), AdamConfig { lr: recipe.lr, ..Default::default() })?;
    let sampler = DistributedSampler::new(world, rank)?.seed(recipe.seed);
    let mut loader =
        DataLoader::new(TensorDataset::new(vec![data.train.0.clone(), data.train.1.clone()])?, recipe.batch_size).sampler(sampler);
    let mut epoch_losses = Vec::with_capacity(recipe.epochs);
    let mut steps = 0;
    for epoch in 0..recipe.epochs {
        let mut total = 0.0;
        let batches = loader.num_batches();
        for b in loader.epoch() {
            opt.zero_grad(true);
            let loss = try_cross_entropy(&ddp.try_forward(&b[0])?, &b[1], Reduction::Mean, &Default::default())?;
            loss.backward()?;
            opt.step()?;
            total += loss.item();
            steps += 1;
        }
        let mean = total / batches as f64;
        on_epoch(epoch, mean)?;
        epoch_losses.push(mean);
    }
    if let Some(path) = save {
        on_rank0(comm.as_ref(), || ddp.module().save_safetensors(path))?;
    }
    let pred = predict(ddp.module(), &data.test.0);
    let truth = data.test.1.to_vec::<i64>();
    let correct = pred.iter().zip(&truth).filter(|(p, t)| p == t).count();
    Ok(DdpRun { epoch_losses, test_accuracy: correct as f64 / truth.len() as f64, steps })
}
