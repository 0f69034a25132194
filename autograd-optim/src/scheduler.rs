//! Learning-rate schedules (PyTorch's `torch.optim.lr_scheduler`).
//!
//! A schedule is a closed form: the learning rate at `epoch` given the
//! group's starting rate ([`LrScheduler::lr_at`]). [`Scheduler`] drives an
//! optimizer with one: it records the starting rates, sets the rate for
//! epoch 0 on creation and the next one on every [`Scheduler::step`] (call it
//! after `optimizer.step()`, as in PyTorch). Closed forms make resuming
//! (set the epoch) and composition ([`SequentialLR`]) exact.

use autograd_core::{Error, Result};
use std::f64::consts::PI;

use crate::optimizer::HyperParams;

/// A learning-rate schedule.
pub trait LrScheduler: Send + Sync {
    /// The learning rate at `epoch` (0-based) for a group that started at `base_lr`.
    fn lr_at(&self, base_lr: f64, epoch: usize) -> f64;
    /// The momentum (or Adam's beta1) at `epoch`, for schedules that cycle it.
    fn momentum_at(&self, _epoch: usize) -> Option<f64> {
        None
    }
    /// The number of epochs the schedule is defined for, if bounded.
    fn total_steps(&self) -> Option<usize> {
        None
    }
}

/// A boxed schedule is a schedule (to pick one at run time).
impl LrScheduler for Box<dyn LrScheduler> {
    fn lr_at(&self, base_lr: f64, epoch: usize) -> f64 {
        (**self).lr_at(base_lr, epoch)
    }
    fn momentum_at(&self, epoch: usize) -> Option<f64> {
        (**self).momentum_at(epoch)
    }
    fn total_steps(&self) -> Option<usize> {
        (**self).total_steps()
    }
}

/// Multiply by `gamma` every `step_size` epochs.
///
/// ```
/// use autograd_optim::{LrScheduler, StepLR};
/// let s = StepLR { step_size: 3, gamma: 0.5 };
/// assert_eq!(s.lr_at(0.1, 2), 0.1);
/// assert_eq!(s.lr_at(0.1, 3), 0.05);
/// ```
#[derive(Clone, Debug)]
pub struct StepLR {
    /// Epochs between decays.
    pub step_size: usize,
    /// Decay factor.
    pub gamma: f64,
}

impl LrScheduler for StepLR {
    fn lr_at(&self, base_lr: f64, epoch: usize) -> f64 {
        base_lr * self.gamma.powi((epoch / self.step_size.max(1)) as i32)
    }
}

/// Multiply by `gamma` at each milestone epoch.
///
/// ```
/// use autograd_optim::{LrScheduler, MultiStepLR};
/// let s = MultiStepLR { milestones: vec![2, 5], gamma: 0.1 };
/// assert_eq!(s.lr_at(1.0, 1), 1.0);
/// assert!((s.lr_at(1.0, 5) - 0.01).abs() < 1e-15);
/// ```
#[derive(Clone, Debug)]
pub struct MultiStepLR {
    /// Epochs at which the rate decays.
    pub milestones: Vec<usize>,
    /// Decay factor.
    pub gamma: f64,
}

impl LrScheduler for MultiStepLR {
    fn lr_at(&self, base_lr: f64, epoch: usize) -> f64 {
        let passed = self.milestones.iter().filter(|&&m| m <= epoch).count();
        base_lr * self.gamma.powi(passed as i32)
    }
}

/// Multiply by `gamma` every epoch.
///
/// ```
/// use autograd_optim::{ExponentialLR, LrScheduler};
/// assert!((ExponentialLR { gamma: 0.9 }.lr_at(0.1, 2) - 0.081).abs() < 1e-15);
/// ```
#[derive(Clone, Debug)]
pub struct ExponentialLR {
    /// Decay factor.
    pub gamma: f64,
}

impl LrScheduler for ExponentialLR {
    fn lr_at(&self, base_lr: f64, epoch: usize) -> f64 {
        base_lr * self.gamma.powi(epoch as i32)
    }
}

/// Cosine from the base rate down to `eta_min` over `t_max` epochs (and
/// back up after, following the same cosine, as PyTorch's closed form does).
///
/// ```
/// use autograd_optim::{CosineAnnealingLR, LrScheduler};
/// let s = CosineAnnealingLR { t_max: 10, eta_min: 0.0 };
/// assert!((s.lr_at(1.0, 5) - 0.5).abs() < 1e-15);
/// assert!(s.lr_at(1.0, 10).abs() < 1e-15);
/// ```
#[derive(Clone, Debug)]
pub struct CosineAnnealingLR {
    /// Epochs of the half cosine.
    pub t_max: usize,
    /// Lowest rate.
    pub eta_min: f64,
}

impl LrScheduler for CosineAnnealingLR {
    fn lr_at(&self, base_lr: f64, epoch: usize) -> f64 {
        let t = self.t_max.max(1) as f64;
        self.eta_min + (base_lr - self.eta_min) * (1.0 + (PI * epoch as f64 / t).cos()) / 2.0
    }
}

/// Linear change of the factor from `start_factor` to `end_factor` over
/// `total_iters` epochs (a warm-up when `start_factor < 1`).
///
/// ```
/// use autograd_optim::{LinearLR, LrScheduler};
/// let s = LinearLR { start_factor: 0.25, end_factor: 1.0, total_iters: 4 };
/// assert_eq!(s.lr_at(0.1, 0), 0.025);
/// assert!((s.lr_at(0.1, 9) - 0.1).abs() < 1e-15);
/// ```
#[derive(Clone, Debug)]
pub struct LinearLR {
    /// Factor at epoch 0.
    pub start_factor: f64,
    /// Factor from `total_iters` on.
    pub end_factor: f64,
    /// Epochs of the ramp.
    pub total_iters: usize,
}

impl LrScheduler for LinearLR {
    fn lr_at(&self, base_lr: f64, epoch: usize) -> f64 {
        let total = self.total_iters.max(1);
        let t = epoch.min(total) as f64 / total as f64;
        base_lr * (self.start_factor + (self.end_factor - self.start_factor) * t)
    }
}

/// The 1cycle policy: from `max_lr / div_factor` up to `max_lr` over the
/// first `pct_start` of `total_steps` (cosine), then down to
/// `initial / final_div_factor`; momentum moves the opposite way between
/// `max_momentum` and `base_momentum` when `cycle_momentum` is set. Rates
/// don't depend on the optimizer's own lr, as in PyTorch.
///
/// ```
/// use autograd_optim::{LrScheduler, OneCycleLR};
/// let s = OneCycleLR::new(1.0, 12);
/// assert!((s.lr_at(0.1, 0) - 0.04).abs() < 1e-15);
/// assert!((s.lr_at(0.1, 11) - 4e-6).abs() < 1e-15);
/// ```
#[derive(Clone, Debug)]
pub struct OneCycleLR {
    /// Peak learning rate.
    pub max_lr: f64,
    /// Length of the cycle in steps.
    pub total_steps: usize,
    /// Fraction of the cycle spent increasing.
    pub pct_start: f64,
    /// `initial_lr = max_lr / div_factor`.
    pub div_factor: f64,
    /// `min_lr = initial_lr / final_div_factor`.
    pub final_div_factor: f64,
    /// Cycle momentum (or beta1) inversely to the rate.
    pub cycle_momentum: bool,
    /// Momentum at the peak rate.
    pub base_momentum: f64,
    /// Momentum at the start and end.
    pub max_momentum: f64,
}

impl OneCycleLR {
    /// PyTorch's defaults (pct_start 0.3, div_factor 25, final_div_factor 1e4, momentum 0.85-0.95).
    pub fn new(max_lr: f64, total_steps: usize) -> Self {
        OneCycleLR {
            max_lr,
            total_steps,
            pct_start: 0.3,
            div_factor: 25.0,
            final_div_factor: 1e4,
            cycle_momentum: true,
            base_momentum: 0.85,
            max_momentum: 0.95,
        }
    }

    /// (phase start value, phase end value, pct) of the cosine anneal at `step`.
    fn phase(&self, step: usize, up: (f64, f64), down: (f64, f64)) -> f64 {
        let end_up = self.pct_start * self.total_steps as f64 - 1.0;
        let end_down = self.total_steps as f64 - 1.0;
        let s = step as f64;
        let ((a, b), pct) = if s <= end_up { (up, s / end_up) } else { (down, (s - end_up) / (end_down - end_up)) };
        b + (a - b) / 2.0 * ((PI * pct).cos() + 1.0)
    }
}

impl LrScheduler for OneCycleLR {
    fn lr_at(&self, _base_lr: f64, epoch: usize) -> f64 {
        let initial = self.max_lr / self.div_factor;
        let min = initial / self.final_div_factor;
        self.phase(epoch, (initial, self.max_lr), (self.max_lr, min))
    }
    fn momentum_at(&self, epoch: usize) -> Option<f64> {
        self.cycle_momentum.then(|| self.phase(epoch, (self.max_momentum, self.base_momentum), (self.base_momentum, self.max_momentum)))
    }
    fn total_steps(&self) -> Option<usize> {
        Some(self.total_steps)
    }
}

/// Schedules one after another: `schedulers[i]` runs from `milestones[i-1]`
/// (its epoch counting from 0 there) until `milestones[i]`. The usual use is
/// a warm-up followed by a decay.
///
/// ```
/// use autograd_optim::{CosineAnnealingLR, LinearLR, LrScheduler, SequentialLR};
/// let s = SequentialLR::new(
///     vec![Box::new(LinearLR { start_factor: 0.1, end_factor: 1.0, total_iters: 2 }), Box::new(CosineAnnealingLR { t_max: 4, eta_min: 0.0 })],
///     vec![2],
/// ).unwrap();
/// assert!((s.lr_at(1.0, 0) - 0.1).abs() < 1e-15);
/// assert_eq!(s.lr_at(1.0, 2), 1.0); // the cosine starts at the base rate
/// ```
pub struct SequentialLR {
    schedulers: Vec<Box<dyn LrScheduler>>,
    milestones: Vec<usize>,
}

impl SequentialLR {
    /// `milestones` has one fewer entry than `schedulers` and is increasing.
    pub fn new(schedulers: Vec<Box<dyn LrScheduler>>, milestones: Vec<usize>) -> Result<Self> {
        if schedulers.is_empty() || milestones.len() + 1 != schedulers.len() {
            return Err(Error::msg(format!(
                "SequentialLR: {} schedulers need {} milestones, got {}",
                schedulers.len(),
                schedulers.len().saturating_sub(1),
                milestones.len()
            )));
        }
        if milestones.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::msg(format!("SequentialLR: milestones {milestones:?} must increase")));
        }
        Ok(SequentialLR { schedulers, milestones })
    }
    fn locate(&self, epoch: usize) -> (usize, usize) {
        let i = self.milestones.iter().filter(|&&m| m <= epoch).count();
        (i, if i == 0 { epoch } else { epoch - self.milestones[i - 1] })
    }
}

impl LrScheduler for SequentialLR {
    fn lr_at(&self, base_lr: f64, epoch: usize) -> f64 {
        let (i, local) = self.locate(epoch);
        self.schedulers[i].lr_at(base_lr, local)
    }
    fn momentum_at(&self, epoch: usize) -> Option<f64> {
        let (i, local) = self.locate(epoch);
        self.schedulers[i].momentum_at(local)
    }
    fn total_steps(&self) -> Option<usize> {
        let last = self.schedulers.last()?.total_steps()?;
        Some(self.milestones.last().copied().unwrap_or(0) + last)
    }
}

/// Drives an optimizer's learning rates with a schedule.
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_optim::{HyperParams, Scheduler, Sgd, SgdConfig, StepLR};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::zeros_dtype([1], autograd_core::DType::F64).requires_grad_(true);
/// let mut opt = Sgd::new(vec![w], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
/// let mut sched = Scheduler::new(&mut opt, StepLR { step_size: 2, gamma: 0.5 }).unwrap();
/// let mut lrs = vec![opt.lr()];
/// for _ in 0..4 {
///     // opt.step() would go here
///     sched.step(&mut opt).unwrap();
///     lrs.push(opt.lr());
/// }
/// assert_eq!(lrs, vec![0.1, 0.1, 0.05, 0.05, 0.025]);
/// ```
pub struct Scheduler {
    schedule: Box<dyn LrScheduler>,
    base_lrs: Vec<f64>,
    epoch: usize,
}

impl Scheduler {
    /// Records the optimizer's current rates as the base rates and applies epoch 0.
    /// A schedule that cycles momentum needs an optimizer with one.
    pub fn new(opt: &mut dyn HyperParams, schedule: impl LrScheduler + 'static) -> Result<Self> {
        if schedule.momentum_at(0).is_some() && (0..opt.num_groups()).any(|g| opt.group_momentum(g).is_none()) {
            return Err(Error::msg("this schedule cycles momentum but the optimizer has none; disable cycle_momentum"));
        }
        let base_lrs = (0..opt.num_groups()).map(|g| opt.group_lr(g)).collect();
        let s = Scheduler { schedule: Box::new(schedule), base_lrs, epoch: 0 };
        s.apply(opt);
        Ok(s)
    }

    fn apply(&self, opt: &mut dyn HyperParams) {
        for (g, &base) in self.base_lrs.iter().enumerate().take(opt.num_groups()) {
            opt.set_group_lr(g, self.schedule.lr_at(base, self.epoch));
            if let Some(m) = self.schedule.momentum_at(self.epoch) {
                opt.set_group_momentum(g, m);
            }
        }
    }

    /// Advances one epoch and sets the new rates. A bounded schedule takes
    /// `total_steps` steps, as PyTorch's `OneCycleLR` (its check is
    /// `step_num > total_steps`, so the rates go one step past the cycle's
    /// last point); one more is an `Err`, as PyTorch raises, and nothing changes.
    pub fn step(&mut self, opt: &mut dyn HyperParams) -> Result<()> {
        autograd_tensor::capture::refuse_side_effect(
            "a learning-rate scheduler step",
            "call the scheduler between compiled steps: the learning rate it sets reaches every replay",
        )?;
        if let Some(total) = self.schedule.total_steps()
            && self.epoch >= total
        {
            return Err(Error::msg(format!(
                "scheduler: tried to step {} times; the specified number of total steps is {total}",
                self.epoch.saturating_add(1)
            )));
        }
        self.epoch += 1;
        self.apply(opt);
        Ok(())
    }

    /// The current epoch (0 after creation).
    pub fn epoch(&self) -> usize {
        self.epoch
    }

    /// Jumps to `epoch` (to resume a run) and sets the rates for it.
    pub fn set_epoch(&mut self, opt: &mut dyn HyperParams, epoch: usize) {
        self.epoch = epoch;
        self.apply(opt);
    }

    /// The rates the schedule gives for the current epoch, per group.
    pub fn last_lr(&self) -> Vec<f64> {
        self.base_lrs.iter().map(|&b| self.schedule.lr_at(b, self.epoch)).collect()
    }

    /// The base rates recorded at creation.
    pub fn base_lrs(&self) -> &[f64] {
        &self.base_lrs
    }
}
