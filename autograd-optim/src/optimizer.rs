//! The [`Optimizer`] trait and the parameter-group machinery shared by every
//! optimizer: an optimizer is a list of groups (parameters + hyper-parameters)
//! and per-parameter state; only the per-tensor update rule differs.

use crate::UpdateRule;
use autograd_core::{Backend, Error, Result};
use autograd_tensor::{Tensor, no_grad};
use rayon::prelude::*;
use serde::{Serialize, de::DeserializeOwned};
use std::fmt::Debug;

use crate::state::OptimizerState;

/// Learning-rate (and momentum) access, the part of an optimizer that
/// schedulers drive. Object safe and backend independent.
pub trait HyperParams {
    /// Number of parameter groups.
    fn num_groups(&self) -> usize;
    /// Learning rate of group `group`.
    fn group_lr(&self, group: usize) -> f64;
    /// Sets the learning rate of group `group`.
    fn set_group_lr(&mut self, group: usize, lr: f64);
    /// Momentum of group `group` (SGD and RMSprop: `momentum`; Adam: `beta1`),
    /// `None` for optimizers without one (Adagrad).
    fn group_momentum(&self, group: usize) -> Option<f64>;
    /// Sets the momentum (or `beta1`) of group `group`; ignored without one.
    fn set_group_momentum(&mut self, group: usize, momentum: f64);
    /// Learning rate of the first group (PyTorch: `param_groups[0]["lr"]`).
    fn lr(&self) -> f64 {
        self.group_lr(0)
    }
    /// Sets the learning rate of every group.
    fn set_lr(&mut self, lr: f64) {
        for g in 0..self.num_groups() {
            self.set_group_lr(g, lr);
        }
    }
}

/// What every optimizer does (PyTorch's `torch.optim.Optimizer`).
///
/// ```
/// use autograd_core::{DType, RefBackend};
/// use autograd_optim::{Optimizer, Sgd, SgdConfig};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::from_vec(vec![1.0f64, -2.0], [2]).requires_grad_(true);
/// let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.5, ..Default::default() }).unwrap();
/// (&w * &w).sum().backward().unwrap(); // grad = 2w
/// opt.step().unwrap();
/// opt.zero_grad(true);
/// assert_eq!(w.to_vec_f64(), vec![0.0, 0.0]);
/// assert!(w.grad().is_none());
/// ```
pub trait Optimizer<B: Backend>: HyperParams {
    /// One update of every parameter that has a gradient (parameters whose
    /// gradient is `None` are skipped, as in PyTorch).
    fn step(&mut self) -> Result<()>;
    /// Clears gradients: `set_to_none` drops them (the next backward
    /// allocates); otherwise they are zeroed in place.
    fn zero_grad(&self, set_to_none: bool);
    /// All parameters, group by group.
    fn params(&self) -> Vec<Tensor<B>>;
    /// A snapshot of hyper-parameters and state (tensors are copies).
    fn state_dict(&self) -> OptimizerState<B>;
    /// Restores a snapshot taken from an optimizer of the same kind over
    /// parameters of the same shapes. Validates everything first: on `Err`
    /// nothing changed.
    fn load_state_dict(&mut self, state: &OptimizerState<B>) -> Result<()>;
}

/// The hyper-parameters of one optimizer kind, per parameter group.
pub trait OptimizerConfig: Clone + Debug + Send + Sync + Serialize + DeserializeOwned + 'static {
    /// PyTorch's class name (`"SGD"`, `"Adam"`...), recorded in state dicts.
    fn name(&self) -> &'static str;
    /// Learning rate.
    fn lr(&self) -> f64;
    /// Sets the learning rate.
    fn set_lr(&mut self, lr: f64);
    /// Momentum or beta1, if this kind has one.
    fn momentum(&self) -> Option<f64>;
    /// Sets momentum or beta1 (no-op without one).
    fn set_momentum(&mut self, m: f64);
    /// Rejects invalid values (negative learning rate, betas outside [0, 1)...).
    fn validate(&self) -> Result<()>;
    /// The update for a parameter on its `step`-th update (1-based);
    /// `fresh_state` is true when its state buffers were just created.
    fn rule(&self, step: u64, fresh_state: bool) -> UpdateRule;
}

/// `lr()`/`set_lr()` of an [`OptimizerConfig`] whose learning rate is its `lr` field.
macro_rules! lr_field {
    () => {
        fn lr(&self) -> f64 {
            self.lr
        }
        fn set_lr(&mut self, lr: f64) {
            self.lr = lr;
        }
    };
}
pub(crate) use lr_field;

/// `momentum()`/`set_momentum()` of an [`OptimizerConfig`] with a `momentum` field.
macro_rules! momentum_field {
    () => {
        fn momentum(&self) -> Option<f64> {
            Some(self.momentum)
        }
        fn set_momentum(&mut self, m: f64) {
            self.momentum = m;
        }
    };
}
pub(crate) use momentum_field;

/// A set of parameters sharing hyper-parameters (PyTorch's param group).
#[derive(Clone, Debug)]
pub struct ParamGroup<B: Backend, C> {
    /// The parameters (handles sharing data and gradient with the model's).
    pub params: Vec<Tensor<B>>,
    /// The group's hyper-parameters.
    pub config: C,
}

impl<B: Backend, C> ParamGroup<B, C> {
    /// A group of `params` with `config`.
    pub fn new(params: Vec<Tensor<B>>, config: C) -> Self {
        ParamGroup { params, config }
    }
}

/// Per-parameter state: how many updates it received and its buffers (in
/// the rule's [`UpdateRule::state_names`] order).
#[derive(Clone, Debug)]
pub(crate) struct ParamState<B: Backend> {
    pub(crate) step: u64,
    pub(crate) buffers: Vec<Tensor<B>>,
}

/// An optimizer: parameter groups of one config kind plus per-parameter
/// state. [`crate::Sgd`], [`crate::Adam`] and the others are this type with
/// their config.
pub struct Optim<B: Backend, C: OptimizerConfig> {
    pub(crate) groups: Vec<ParamGroup<B, C>>,
    /// `state[g][i]` for parameter `i` of group `g`; `None` before its first update.
    pub(crate) state: Vec<Vec<Option<ParamState<B>>>>,
}

/// Total elements from which one step updates tensors on several threads.
/// Below it the pool's wake-up costs more than the update itself.
const PAR_MIN_TOTAL: usize = 1 << 16;

impl<B: Backend, C: OptimizerConfig> Optim<B, C> {
    /// An optimizer over one group of `params`.
    pub fn new(params: Vec<Tensor<B>>, config: C) -> Result<Self> {
        Self::with_groups(vec![ParamGroup::new(params, config)])
    }

    /// An optimizer over several groups, each with its own hyper-parameters.
    ///
    /// ```
    /// use autograd_core::RefBackend;
    /// use autograd_optim::{Adam, AdamConfig, HyperParams, ParamGroup};
    /// use autograd_tensor::Tensor;
    /// let w = Tensor::<RefBackend>::ones([3]).requires_grad_(true);
    /// let b = Tensor::<RefBackend>::zeros([1]).requires_grad_(true);
    /// let opt = Adam::with_groups(vec![
    ///     ParamGroup::new(vec![w], AdamConfig { lr: 1e-3, weight_decay: 1e-2, ..Default::default() }),
    ///     ParamGroup::new(vec![b], AdamConfig { lr: 1e-2, ..Default::default() }),
    /// ]).unwrap();
    /// assert_eq!((opt.group_lr(0), opt.group_lr(1)), (1e-3, 1e-2));
    /// ```
    pub fn with_groups(groups: Vec<ParamGroup<B, C>>) -> Result<Self> {
        let mut seen = std::collections::HashSet::new();
        for (gi, g) in groups.iter().enumerate() {
            g.config.validate().map_err(|e| Error::msg(format!("parameter group {gi}: {e}")))?;
            for (pi, p) in g.params.iter().enumerate() {
                if !p.is_leaf() {
                    return Err(Error::msg(format!(
                        "parameter group {gi}, parameter {pi}: can't optimize a non-leaf tensor (it has grad_fn {}); pass the leaf or a detached copy",
                        p.grad_fn().map(|f| f.name()).unwrap_or_default()
                    )));
                }
                if !p.dtype().is_float() {
                    return Err(Error::msg(format!("parameter group {gi}, parameter {pi}: dtype {:?} can't be optimized", p.dtype())));
                }
                if !seen.insert(p.id()) {
                    return Err(Error::msg(format!("parameter group {gi}, parameter {pi}: appears in more than one place")));
                }
            }
        }
        let state = groups.iter().map(|g| vec![None; g.params.len()]).collect();
        Ok(Optim { groups, state })
    }

    /// Adds a parameter group (PyTorch's `add_param_group`).
    pub fn add_param_group(&mut self, group: ParamGroup<B, C>) -> Result<()> {
        let mut all: Vec<ParamGroup<B, C>> = self.groups.clone();
        all.push(group);
        let fresh = Self::with_groups(all)?;
        self.state.push(vec![None; fresh.groups.last().map_or(0, |g| g.params.len())]);
        self.groups = fresh.groups;
        Ok(())
    }

    /// The parameter groups.
    pub fn param_groups(&self) -> &[ParamGroup<B, C>] {
        &self.groups
    }

    /// Hyper-parameters of group `group`, to change them between steps.
    pub fn config_mut(&mut self, group: usize) -> &mut C {
        &mut self.groups[group].config
    }

    /// The state buffer `name` (e.g. `"exp_avg"`) of parameter `index` in
    /// group `group`, if it has been created.
    pub fn state_buffer(&self, group: usize, index: usize, name: &str) -> Option<Tensor<B>> {
        let st = self.state.get(group)?.get(index)?.as_ref()?;
        let rule = self.groups[group].config.rule(st.step.max(1), false);
        let pos = rule.state_names().iter().position(|n| *n == name)?;
        st.buffers.get(pos).cloned()
    }

    /// Number of updates parameter `index` of group `group` received.
    pub fn param_steps(&self, group: usize, index: usize) -> u64 {
        self.state.get(group).and_then(|g| g.get(index)).and_then(|s| s.as_ref()).map_or(0, |s| s.step)
    }
}

impl<B: Backend, C: OptimizerConfig> HyperParams for Optim<B, C> {
    fn num_groups(&self) -> usize {
        self.groups.len()
    }
    fn group_lr(&self, group: usize) -> f64 {
        self.groups[group].config.lr()
    }
    fn set_group_lr(&mut self, group: usize, lr: f64) {
        self.groups[group].config.set_lr(lr)
    }
    fn group_momentum(&self, group: usize) -> Option<f64> {
        self.groups[group].config.momentum()
    }
    fn set_group_momentum(&mut self, group: usize, momentum: f64) {
        self.groups[group].config.set_momentum(momentum)
    }
}

/// One parameter's update, prepared on the calling thread and run on any.
struct Job<'a, B: Backend> {
    param: &'a Tensor<B>,
    grad: Tensor<B>,
    rule: UpdateRule,
    state: &'a mut ParamState<B>,
}

impl<B: Backend> Job<'_, B> {
    fn run(self) -> Result<()> {
        let refs: Vec<&Tensor<B>> = self.state.buffers.iter().collect();
        self.param.fused_update_(&self.grad, &refs, &self.rule)
    }
}

/// The gradient an optimizer or a clipping function acts on: none for a
/// frozen parameter (`requires_grad` off), even if a gradient from before it
/// was frozen is still attached (PyTorch would still apply that one).
pub(crate) fn trainable_grad<B: Backend>(p: &Tensor<B>) -> Option<Tensor<B>> {
    if p.requires_grad() { p.grad() } else { None }
}

impl<B: Backend, C: OptimizerConfig> Optimizer<B> for Optim<B, C> {
    fn step(&mut self) -> Result<()> {
        let _span = tracing::debug_span!("optimizer_step", optimizer = self.groups.first().map_or("", |g| g.config.name())).entered();
        let mut jobs = Vec::new();
        for (group, states) in self.groups.iter().zip(self.state.iter_mut()) {
            for (param, slot) in group.params.iter().zip(states.iter_mut()) {
                let Some(grad) = trainable_grad(param) else { continue };
                let fresh = slot.is_none();
                let st = slot.get_or_insert_with(|| {
                    let n = group.config.rule(1, true).state_names().len();
                    ParamState { step: 0, buffers: (0..n).map(|_| Tensor::zeros_dtype(param.shape().clone(), param.dtype())).collect() }
                });
                st.step += 1;
                let rule = group.config.rule(st.step, fresh);
                jobs.push(Job { param, grad, rule, state: st });
            }
        }
        let total: usize = jobs.iter().map(|j| j.param.numel()).sum();
        no_grad(|| {
            if total >= PAR_MIN_TOTAL && jobs.len() > 1 {
                // Many tensors: one task per tensor; large ones split again inside the kernel.
                jobs.into_par_iter().map(Job::run).collect::<Result<Vec<()>>>().map(|_| ())
            } else {
                jobs.into_iter().try_for_each(Job::run)
            }
        })
    }

    fn zero_grad(&self, set_to_none: bool) {
        for p in self.groups.iter().flat_map(|g| &g.params) {
            match p.grad() {
                Some(g) if !set_to_none => no_grad(|| g.zero_()),
                _ => p.set_grad(None),
            }
        }
    }

    fn params(&self) -> Vec<Tensor<B>> {
        self.groups.iter().flat_map(|g| g.params.iter().cloned()).collect()
    }

    fn state_dict(&self) -> OptimizerState<B> {
        crate::state::capture(self)
    }

    fn load_state_dict(&mut self, state: &OptimizerState<B>) -> Result<()> {
        crate::state::restore(self, state)
    }
}
