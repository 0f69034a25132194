//! RMSprop (PyTorch's `torch.optim.RMSprop`).

use crate::UpdateRule;
use autograd_core::Result;
use serde::{Deserialize, Serialize};

use crate::optimizer::{Optim, OptimizerConfig};

/// RMSprop hyper-parameters; `Default` is PyTorch's (lr 1e-2, alpha 0.99, eps 1e-8).
///
/// `s = alpha s + (1 - alpha) g^2`; the step is `g / (sqrt(s) + eps)`
/// (centered: `sqrt(s - mean(g)^2)`), through a momentum buffer if `momentum > 0`.
///
/// ```
/// use autograd_optim::RmsPropConfig;
/// assert_eq!(RmsPropConfig::default().alpha, 0.99);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RmsPropConfig {
    /// Learning rate.
    pub lr: f64,
    /// Smoothing constant.
    pub alpha: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// L2 penalty.
    pub weight_decay: f64,
    /// Momentum factor.
    pub momentum: f64,
    /// Normalise by the variance estimate.
    pub centered: bool,
    /// Maximize the objective.
    pub maximize: bool,
}

impl Default for RmsPropConfig {
    fn default() -> Self {
        RmsPropConfig { lr: 1e-2, alpha: 0.99, eps: 1e-8, weight_decay: 0.0, momentum: 0.0, centered: false, maximize: false }
    }
}

/// RMSprop over parameter groups.
pub type RmsProp<B> = Optim<B, RmsPropConfig>;

impl OptimizerConfig for RmsPropConfig {
    fn name(&self) -> &'static str {
        "RMSprop"
    }
    crate::optimizer::lr_field!();
    crate::optimizer::momentum_field!();
    fn validate(&self) -> Result<()> {
        crate::check::non_negative("lr", self.lr)?;
        crate::check::non_negative("alpha", self.alpha)?;
        crate::check::non_negative("eps", self.eps)?;
        crate::check::non_negative("momentum", self.momentum)?;
        crate::check::non_negative("weight_decay", self.weight_decay)
    }
    fn rule(&self, _step: u64, _fresh_state: bool) -> UpdateRule {
        UpdateRule::RmsProp {
            lr: self.lr,
            alpha: self.alpha,
            eps: self.eps,
            weight_decay: self.weight_decay,
            momentum: self.momentum,
            centered: self.centered,
            maximize: self.maximize,
        }
    }
}
