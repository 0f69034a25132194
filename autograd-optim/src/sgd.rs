//! Stochastic gradient descent (PyTorch's `torch.optim.SGD`).

use crate::UpdateRule;
use autograd_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::optimizer::{Optim, OptimizerConfig};

/// SGD hyper-parameters; `Default` is PyTorch's defaults with lr 1e-3.
///
/// `p -= lr * d`, where `d` is the gradient (plus `weight_decay * p`), or with
/// momentum the buffer `b = momentum * b + (1 - dampening) * d` (the first
/// step sets `b = d`), or with Nesterov `d + momentum * b`.
///
/// ```
/// use autograd_optim::SgdConfig;
/// let c = SgdConfig { lr: 0.05, momentum: 0.9, nesterov: true, ..Default::default() };
/// assert_eq!(c.dampening, 0.0);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0 disables the buffer).
    pub momentum: f64,
    /// Dampening for momentum.
    pub dampening: f64,
    /// L2 penalty.
    pub weight_decay: f64,
    /// Nesterov momentum (needs momentum > 0 and dampening 0).
    pub nesterov: bool,
    /// Maximize the objective.
    pub maximize: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig { lr: 1e-3, momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false, maximize: false }
    }
}

/// SGD over parameter groups.
pub type Sgd<B> = Optim<B, SgdConfig>;

impl OptimizerConfig for SgdConfig {
    fn name(&self) -> &'static str {
        "SGD"
    }
    crate::optimizer::lr_field!();
    crate::optimizer::momentum_field!();
    fn validate(&self) -> Result<()> {
        crate::check::non_negative("lr", self.lr)?;
        crate::check::non_negative("momentum", self.momentum)?;
        crate::check::non_negative("weight_decay", self.weight_decay)?;
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::msg("SGD: Nesterov momentum requires a momentum and zero dampening"));
        }
        Ok(())
    }
    fn rule(&self, _step: u64, fresh_state: bool) -> UpdateRule {
        UpdateRule::Sgd {
            lr: self.lr,
            momentum: self.momentum,
            dampening: self.dampening,
            nesterov: self.nesterov,
            weight_decay: self.weight_decay,
            maximize: self.maximize,
            init_buffer: fresh_state,
        }
    }
}
