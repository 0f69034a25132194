//! Adam and AdamW (PyTorch's `torch.optim.Adam` / `torch.optim.AdamW`).

use crate::UpdateRule;
use autograd_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::optimizer::{Optim, OptimizerConfig};

/// Adam hyper-parameters; `Default` is PyTorch's Adam defaults
/// (lr 1e-3, betas (0.9, 0.999), eps 1e-8), [`AdamConfig::adamw`] AdamW's.
///
/// `m = lerp(m, g, 1 - beta1)`, `v = beta2 v + (1 - beta2) g^2`,
/// `p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)`;
/// with `amsgrad` the running maximum of `v` is used. Weight decay is added
/// to the gradient (Adam) or shrinks the parameter by `lr * weight_decay`
/// before the update (`decoupled_weight_decay`, AdamW).
///
/// ```
/// use autograd_optim::AdamConfig;
/// let c = AdamConfig::adamw();
/// assert!(c.decoupled_weight_decay && c.weight_decay == 0.01);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moments.
    pub betas: (f64, f64),
    /// Added to the denominator for stability.
    pub eps: f64,
    /// Weight decay (L2 for Adam, decoupled for AdamW).
    pub weight_decay: f64,
    /// Use the maximum of past second moments (AMSGrad).
    pub amsgrad: bool,
    /// Maximize the objective.
    pub maximize: bool,
    /// AdamW's decoupled weight decay.
    pub decoupled_weight_decay: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
            maximize: false,
            decoupled_weight_decay: false,
        }
    }
}

impl AdamConfig {
    /// PyTorch's AdamW defaults: Adam's, with decoupled weight decay 1e-2.
    pub fn adamw() -> Self {
        AdamConfig { weight_decay: 1e-2, decoupled_weight_decay: true, ..Default::default() }
    }
}

/// Adam (or AdamW, with [`AdamConfig::adamw`]) over parameter groups.
pub type Adam<B> = Optim<B, AdamConfig>;

/// AdamW: [`Adam`] whose config has `decoupled_weight_decay` set.
pub type AdamW<B> = Optim<B, AdamConfig>;

impl OptimizerConfig for AdamConfig {
    fn name(&self) -> &'static str {
        if self.decoupled_weight_decay {
            "AdamW"
        } else {
            "Adam"
        }
    }
    crate::optimizer::lr_field!();
    fn momentum(&self) -> Option<f64> {
        Some(self.betas.0)
    }
    fn set_momentum(&mut self, m: f64) {
        self.betas.0 = m;
    }
    fn validate(&self) -> Result<()> {
        crate::check::non_negative("lr", self.lr)?;
        crate::check::non_negative("eps", self.eps)?;
        crate::check::non_negative("weight_decay", self.weight_decay)?;
        for (i, b) in [self.betas.0, self.betas.1].into_iter().enumerate() {
            if !(0.0..1.0).contains(&b) {
                return Err(Error::msg(format!("{}: invalid beta parameter at index {i}: {b} (must be in [0, 1))", self.name())));
            }
        }
        Ok(())
    }
    fn rule(&self, step: u64, _fresh_state: bool) -> UpdateRule {
        UpdateRule::Adam {
            lr: self.lr,
            beta1: self.betas.0,
            beta2: self.betas.1,
            eps: self.eps,
            weight_decay: self.weight_decay,
            decoupled_weight_decay: self.decoupled_weight_decay,
            amsgrad: self.amsgrad,
            maximize: self.maximize,
            step,
        }
    }
}
