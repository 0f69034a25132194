//! Adagrad (PyTorch's `torch.optim.Adagrad`).

use crate::UpdateRule;
use autograd_core::Result;
use serde::{Deserialize, Serialize};

use crate::optimizer::{Optim, OptimizerConfig};

/// Adagrad hyper-parameters; `Default` is PyTorch's (lr 1e-2, eps 1e-10).
///
/// `s += g^2`, `p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps)`.
///
/// ```
/// use autograd_optim::AdagradConfig;
/// assert_eq!(AdagradConfig::default().eps, 1e-10);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdagradConfig {
    /// Learning rate.
    pub lr: f64,
    /// Learning-rate decay per step.
    pub lr_decay: f64,
    /// L2 penalty.
    pub weight_decay: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Maximize the objective.
    pub maximize: bool,
}

impl Default for AdagradConfig {
    fn default() -> Self {
        AdagradConfig { lr: 1e-2, lr_decay: 0.0, weight_decay: 0.0, eps: 1e-10, maximize: false }
    }
}

/// Adagrad over parameter groups.
pub type Adagrad<B> = Optim<B, AdagradConfig>;

impl OptimizerConfig for AdagradConfig {
    fn name(&self) -> &'static str {
        "Adagrad"
    }
    crate::optimizer::lr_field!();
    fn momentum(&self) -> Option<f64> {
        None
    }
    fn set_momentum(&mut self, _m: f64) {}
    fn validate(&self) -> Result<()> {
        crate::check::non_negative("lr", self.lr)?;
        crate::check::non_negative("lr_decay", self.lr_decay)?;
        crate::check::non_negative("eps", self.eps)?;
        crate::check::non_negative("weight_decay", self.weight_decay)
    }
    fn rule(&self, step: u64, _fresh_state: bool) -> UpdateRule {
        UpdateRule::Adagrad {
            lr: self.lr,
            lr_decay: self.lr_decay,
            eps: self.eps,
            weight_decay: self.weight_decay,
            maximize: self.maximize,
            step,
        }
    }
}
