//! What a compiled step (`autograd-jit`) needs from an optimizer: its
//! per-step host scalars as program inputs, not constants.
//!
//! An update rule holds host numbers that change every step (Adam's bias
//! corrections from the step count, the learning rate a scheduler set).
//! When `Optim::step` runs under capture it gives each parameter's update a
//! [`Rule::Live`] cell instead of a fixed rule, and hands the recorder a
//! [`Bookkeeping`] host op; every replay runs it before the updates: it
//! advances each parameter's step count and writes the rule for the new
//! count and the configs in force into the cells.

use crate::UpdateRule;
use crate::optimizer::OptimizerConfig;
use autograd_core::Result;
use autograd_core::fused_update::FusedUpdate;
use autograd_tensor::capture::HostOp;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// The rule a parameter update applies: fixed (eager steps), or read from a
/// cell that replays of a compiled step refresh.
#[derive(Clone)]
pub(crate) enum Rule {
    Plain(UpdateRule),
    Live(Arc<RwLock<UpdateRule>>),
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::Plain(r) => r.fmt(f),
            Rule::Live(_) => self.with(|r| write!(f, "(refreshed each step) {r:?}")),
        }
    }
}

impl Rule {
    fn with<R>(&self, f: impl FnOnce(&UpdateRule) -> R) -> R {
        match self {
            Rule::Plain(r) => f(r),
            Rule::Live(c) => f(&c.read().unwrap_or_else(|e| e.into_inner())),
        }
    }
}

impl FusedUpdate for Rule {
    fn num_states(&self) -> usize {
        self.with(|r| r.num_states())
    }
    fn apply_f32(&self, p: &mut [f32], g: &[f32], states: &mut [&mut [f32]]) {
        self.with(|r| r.apply_f32(p, g, states))
    }
    fn apply_f64(&self, p: &mut [f64], g: &[f64], states: &mut [&mut [f64]]) {
        self.with(|r| r.apply_f64(p, g, states))
    }
}

/// One parameter's part of the bookkeeping.
struct Tracked {
    group: usize,
    step: Arc<AtomicU64>,
    cell: Arc<RwLock<UpdateRule>>,
}

/// The host side of one `Optimizer::step`, replayed by a compiled step.
pub(crate) struct Bookkeeping<C: OptimizerConfig> {
    name: &'static str,
    configs: Arc<RwLock<Vec<C>>>,
    params: Vec<Tracked>,
}

impl<C: OptimizerConfig> Bookkeeping<C> {
    pub(crate) fn new(name: &'static str, configs: Arc<RwLock<Vec<C>>>) -> Self {
        Bookkeeping { name, configs, params: Vec::new() }
    }
    /// Tracks a parameter of `group` whose count is `step`, updated by
    /// `rule` this time; returns the rule to apply, as a live cell.
    pub(crate) fn track(&mut self, group: usize, step: Arc<AtomicU64>, rule: UpdateRule) -> Rule {
        let cell = Arc::new(RwLock::new(rule));
        self.params.push(Tracked { group, step, cell: cell.clone() });
        Rule::Live(cell)
    }
}

impl<C: OptimizerConfig> HostOp for Bookkeeping<C> {
    fn name(&self) -> String {
        format!("{}.step bookkeeping ({} parameters)", self.name, self.params.len())
    }
    fn run(&self) -> Result<()> {
        let configs = self.configs.read().unwrap_or_else(|e| e.into_inner());
        for p in &self.params {
            let step = p.step.fetch_add(1, Ordering::Relaxed) + 1;
            let rule = configs
                .get(p.group)
                .ok_or_else(|| autograd_core::Error::msg(format!("{}: parameter group {} is gone", self.name, p.group)))?
                .rule(step, false);
            *p.cell.write().unwrap_or_else(|e| e.into_inner()) = rule;
        }
        Ok(())
    }
}
