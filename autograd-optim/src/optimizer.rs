//! The [`Optimizer`] trait and the parameter-group machinery shared by every
//! optimizer: an optimizer is a list of groups (parameters + hyper-parameters)
//! and per-parameter state; only the per-tensor update rule differs.

use crate::UpdateRule;
use autograd_core::{Backend, Error, Result};
use autograd_tensor::{Tensor, no_grad};
use rayon::prelude::*;
use serde::{Serialize, de::DeserializeOwned};
use std::fmt::Debug;

use crate::param_state::{ParamState, scalars_tensor};
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
    /// A snapshot of hyper-parameters and state (tensors are copies; the
    /// step counts are read from the device, an `Err` while a step is
    /// being captured).
    fn try_state_dict(&self) -> Result<OptimizerState<B>>;
    /// [`Optimizer::try_state_dict`], panicking at the caller's line on `Err`.
    #[track_caller]
    fn state_dict(&self) -> OptimizerState<B> {
        self.try_state_dict().unwrap_or_else(|e| panic!("state_dict: {e}"))
    }
    /// Restores a snapshot taken from an optimizer of the same kind over
    /// parameters of the same shapes. Validates everything first: on `Err`
    /// nothing changed.
    fn load_state_dict(&mut self, state: &OptimizerState<B>) -> Result<()>;
    /// This optimizer's identity, assigned at construction: it survives a
    /// move (into a `Box`, a struct, another thread), unlike an address, so
    /// per-optimizer bookkeeping kept elsewhere (a [`crate::GradScaler`]'s,
    /// PyTorch's `id(optimizer)`) follows the optimizer.
    fn id(&self) -> OptimizerId;
}

/// The identity of an optimizer ([`Optimizer::id`]): unique in the process,
/// assigned when the optimizer is built, kept when it moves.
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_optim::{Optimizer, Sgd, SgdConfig};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::zeros([1]).requires_grad_(true);
/// let a = Sgd::new(vec![w.clone()], SgdConfig::default()).unwrap();
/// let b = Sgd::new(vec![w], SgdConfig::default()).unwrap();
/// let id = a.id();
/// let boxed: Box<dyn Optimizer<RefBackend>> = Box::new(a);
/// assert_eq!(boxed.id(), id);
/// assert_ne!(b.id(), id);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OptimizerId(u64);

impl OptimizerId {
    /// A fresh identity.
    pub fn fresh() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        OptimizerId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
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

/// An optimizer: parameter groups of one config kind plus per-parameter
/// state. [`crate::Sgd`], [`crate::Adam`] and the others are this type with
/// their config.
pub struct Optim<B: Backend, C: OptimizerConfig> {
    pub(crate) groups: Vec<ParamGroup<B, C>>,
    /// `state[g][i]` for parameter `i` of group `g`; `None` before its first update.
    pub(crate) state: Vec<Vec<Option<ParamState<B>>>>,
    /// See [`Optimizer::id`].
    id: OptimizerId,
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
        Ok(Optim { groups, state, id: OptimizerId::fresh() })
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

    /// Hyper-parameters of group `group`, to change them between steps
    /// (written to the device scalars its updates read when the guard
    /// drops: eager steps and a compiled step's replays see the change).
    ///
    /// ```
    /// use autograd_core::RefBackend;
    /// use autograd_optim::{HyperParams, Sgd, SgdConfig};
    /// use autograd_tensor::Tensor;
    /// let w = Tensor::<RefBackend>::ones([2]).requires_grad_(true);
    /// let mut opt = Sgd::new(vec![w], SgdConfig::default()).unwrap();
    /// opt.config_mut(0).lr = 0.25;
    /// assert_eq!(opt.lr(), 0.25);
    /// ```
    pub fn config_mut(&mut self, group: usize) -> ConfigMut<'_, B, C> {
        assert!(group < self.groups.len(), "config_mut: no parameter group {group} (the optimizer has {})", self.groups.len());
        ConfigMut { opt: self, group }
    }

    /// Writes group `group`'s hyper-parameters into the scalars of every
    /// parameter of it that has state (the step counts stay).
    pub(crate) fn sync_scalars(&self, group: usize) -> Result<()> {
        let hyper: Vec<f64> = self.groups[group].config.rule(1, false).scalars().split_off(2);
        let n = hyper.len();
        let src = scalars_tensor::<B>(hyper);
        for st in self.state[group].iter().flatten() {
            no_grad(|| st.scalars.try_narrow(0, 2, n)?.try_copy_(&src))?;
        }
        Ok(())
    }

    /// The state buffer `name` (e.g. `"exp_avg"`) of parameter `index` in
    /// group `group`, if it has been created.
    pub fn state_buffer(&self, group: usize, index: usize, name: &str) -> Option<Tensor<B>> {
        let st = self.state.get(group)?.get(index)?.as_ref()?;
        let rule = self.groups[group].config.rule(1, false);
        let pos = rule.state_names().iter().position(|n| *n == name)?;
        st.buffers.get(pos).cloned()
    }

    /// Number of updates parameter `index` of group `group` received (read
    /// from the device: an `Err` while a step is being captured).
    pub fn try_param_steps(&self, group: usize, index: usize) -> Result<u64> {
        match self.state.get(group).and_then(|g| g.get(index)).and_then(|s| s.as_ref()) {
            Some(st) => st.steps(),
            None => Ok(0),
        }
    }

    /// [`Optim::try_param_steps`], panicking at the caller's line on `Err`.
    #[track_caller]
    pub fn param_steps(&self, group: usize, index: usize) -> u64 {
        self.try_param_steps(group, index).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Write access to one group's config ([`Optim::config_mut`]); the
/// device scalars its updates read are written when it drops.
pub struct ConfigMut<'a, B: Backend, C: OptimizerConfig> {
    opt: &'a mut Optim<B, C>,
    group: usize,
}

impl<B: Backend, C: OptimizerConfig> std::ops::Deref for ConfigMut<'_, B, C> {
    type Target = C;
    fn deref(&self) -> &C {
        &self.opt.groups[self.group].config
    }
}

impl<B: Backend, C: OptimizerConfig> std::ops::DerefMut for ConfigMut<'_, B, C> {
    fn deref_mut(&mut self) -> &mut C {
        &mut self.opt.groups[self.group].config
    }
}

impl<B: Backend, C: OptimizerConfig> Drop for ConfigMut<'_, B, C> {
    fn drop(&mut self) {
        // A drop cannot return an `Err`; writing a few scalars into buffers
        // this optimizer made only fails inside a captured step's host read
        // rules, which a write does not hit.
        if let Err(e) = self.opt.sync_scalars(self.group) {
            tracing::error!(%e, "config_mut: the new hyper-parameters did not reach the device");
        }
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
        self.config_mut(group).set_lr(lr);
    }
    fn group_momentum(&self, group: usize) -> Option<f64> {
        self.groups[group].config.momentum()
    }
    fn set_group_momentum(&mut self, group: usize, momentum: f64) {
        self.config_mut(group).set_momentum(momentum);
    }
}

/// One parameter's update, prepared on the calling thread and run on any.
struct Job<'a, B: Backend> {
    param: &'a Tensor<B>,
    grad: Tensor<B>,
    rule: UpdateRule,
    state: &'a ParamState<B>,
}

impl<B: Backend> Job<'_, B> {
    fn run(self) -> Result<()> {
        let refs: Vec<&Tensor<B>> = self.state.buffers.iter().collect();
        self.param.fused_update_(&self.grad, &refs, Some(&self.state.scalars), &self.rule)
    }
}

/// The gradient an optimizer or a clipping function acts on: none for a
/// frozen parameter (`requires_grad` off), even if a gradient from before it
/// was frozen is still attached (PyTorch would still apply that one).
pub(crate) fn trainable_grad<B: Backend>(p: &Tensor<B>) -> Option<Tensor<B>> {
    if p.requires_grad() { p.grad() } else { None }
}

impl<B: Backend, C: OptimizerConfig> Optimizer<B> for Optim<B, C> {
    fn id(&self) -> OptimizerId {
        self.id
    }
    fn step(&mut self) -> Result<()> {
        let name = self.groups.first().map_or("", |g| g.config.name());
        let _span = tracing::debug_span!("optimizer_step", optimizer = name).entered();
        let capturing = autograd_tensor::capture::is_capturing();
        let mut jobs = Vec::new();
        for (group, states) in self.groups.iter().zip(self.state.iter_mut()) {
            // The kind of update and its flags; its numbers and step count
            // come from each parameter's scalars when it runs.
            let rule = group.config.rule(1, false);
            for (param, slot) in group.params.iter().zip(states.iter_mut()) {
                let Some(grad) = trainable_grad(param) else { continue };
                if slot.is_none() && capturing {
                    autograd_tensor::capture::refuse_side_effect(
                        &format!("{name}'s first step creates its state"),
                        "a replay would create it afresh every step: trace a later call (compile's warmup_calls >= 1)",
                    )?;
                }
                let st = slot.get_or_insert_with(|| ParamState::new(param, &group.config.rule(1, true)));
                jobs.push(Job { param, grad, rule: rule.clone(), state: st });
            }
        }
        let total: usize = jobs.iter().map(|j| j.param.numel()).sum();
        no_grad(|| {
            // While a step is captured the updates run in order on this
            // thread: the program is recorded in a fixed order.
            if total >= PAR_MIN_TOTAL && jobs.len() > 1 && !capturing {
                // Many tensors: one task per tensor; large ones split again inside the kernel.
                jobs.into_par_iter().map(Job::run).collect::<Result<Vec<()>>>().map(|_| ())
            } else {
                jobs.into_iter().try_for_each(Job::run)
            }
        })
    }

    fn zero_grad(&self, set_to_none: bool) {
        for p in self.groups.iter().flat_map(|g| &g.params) {
            p.clear_grad(set_to_none);
        }
    }

    fn params(&self) -> Vec<Tensor<B>> {
        self.groups.iter().flat_map(|g| g.params.iter().cloned()).collect()
    }

    fn try_state_dict(&self) -> Result<OptimizerState<B>> {
        self.snapshot()
    }

    fn load_state_dict(&mut self, state: &OptimizerState<B>) -> Result<()> {
        self.restore(state)
    }
}

/// A boxed optimizer is an optimizer, so that code choosing the kind at
/// run time (`Box<dyn Optimizer<B>>`) can hand it to what takes any
/// optimizer (a scheduler, ZeRO's sharded optimizer).
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_optim::{Adam, AdamConfig, HyperParams, Optimizer};
/// use autograd_tensor::Tensor;
/// fn lr_of(o: &impl HyperParams) -> f64 { o.lr() }
/// let w = Tensor::<RefBackend>::ones([2]).requires_grad_(true);
/// let boxed: Box<dyn Optimizer<RefBackend>> = Box::new(Adam::new(vec![w], AdamConfig::default()).unwrap());
/// assert_eq!(lr_of(&boxed), 1e-3);
/// ```
impl<O: HyperParams + ?Sized> HyperParams for Box<O> {
    fn num_groups(&self) -> usize {
        (**self).num_groups()
    }
    fn group_lr(&self, group: usize) -> f64 {
        (**self).group_lr(group)
    }
    fn set_group_lr(&mut self, group: usize, lr: f64) {
        (**self).set_group_lr(group, lr)
    }
    fn group_momentum(&self, group: usize) -> Option<f64> {
        (**self).group_momentum(group)
    }
    fn set_group_momentum(&mut self, group: usize, momentum: f64) {
        (**self).set_group_momentum(group, momentum)
    }
}

impl<B: Backend, O: Optimizer<B> + ?Sized> Optimizer<B> for Box<O> {
    fn step(&mut self) -> Result<()> {
        (**self).step()
    }
    fn zero_grad(&self, set_to_none: bool) {
        (**self).zero_grad(set_to_none)
    }
    fn params(&self) -> Vec<Tensor<B>> {
        (**self).params()
    }
    fn try_state_dict(&self) -> Result<OptimizerState<B>> {
        (**self).try_state_dict()
    }
    fn load_state_dict(&mut self, state: &OptimizerState<B>) -> Result<()> {
        (**self).load_state_dict(state)
    }
    fn id(&self) -> OptimizerId {
        (**self).id()
    }
}
