//! Adam and AdamW (PyTorch's `torch.optim.Adam` / `torch.optim.AdamW`).

use crate::UpdateRule;
use autograd_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::optimizer::{Optim, OptimizerConfig};

/// Adam hyper-parameters; `Default` is PyTorch's `torch.optim.Adam` defaults
/// (lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay).
///
/// `m = lerp(m, g, 1 - beta1)`, `v = beta2 v + (1 - beta2) g^2`,
/// `p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)`;
/// with `amsgrad` the running maximum of `v` is used. Weight decay is an L2
/// penalty added to the gradient; for decoupled weight decay use [`AdamW`]
/// (its own type and config, so the two cannot be confused).
///
/// ```
/// use autograd_optim::AdamConfig;
/// let c = AdamConfig { lr: 1e-2, ..Default::default() };
/// assert_eq!(c.betas, (0.9, 0.999));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moments.
    pub betas: (f64, f64),
    /// Added to the denominator for stability.
    pub eps: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Use the maximum of past second moments (AMSGrad).
    pub amsgrad: bool,
    /// Maximize the objective.
    pub maximize: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.0, amsgrad: false, maximize: false }
    }
}

/// AdamW hyper-parameters; `Default` is PyTorch's `torch.optim.AdamW`
/// defaults (Adam's, with weight decay 1e-2). The decay is decoupled by
/// construction: the parameter shrinks by `lr * weight_decay` before Adam's
/// update, whatever the value.
///
/// ```
/// use autograd_optim::{AdamW, AdamWConfig};
/// use autograd_core::RefBackend;
/// use autograd_tensor::Tensor;
/// let c = AdamWConfig { weight_decay: 0.05, ..Default::default() };
/// let p = Tensor::<RefBackend>::ones([2]).requires_grad_(true);
/// let opt = AdamW::new(vec![p], c).unwrap();
/// # let _ = opt;
/// assert_eq!(AdamWConfig::default().weight_decay, 1e-2);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamWConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moments.
    pub betas: (f64, f64),
    /// Added to the denominator for stability.
    pub eps: f64,
    /// Decoupled weight decay: `p -= lr * weight_decay * p` before the update.
    pub weight_decay: f64,
    /// Use the maximum of past second moments (AMSGrad).
    pub amsgrad: bool,
    /// Maximize the objective.
    pub maximize: bool,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 1e-2, amsgrad: false, maximize: false }
    }
}

/// Adam over parameter groups (PyTorch's `torch.optim.Adam`).
pub type Adam<B> = Optim<B, AdamConfig>;

/// AdamW over parameter groups (PyTorch's `torch.optim.AdamW`): Adam with
/// decoupled weight decay, a distinct type from [`Adam`].
pub type AdamW<B> = Optim<B, AdamWConfig>;

/// The two configs differ only in how weight decay applies: one
/// implementation, the flag fixed by the type.
macro_rules! adam_config {
    ($Config:ident, $name:literal, $decoupled:literal) => {
        impl OptimizerConfig for $Config {
            fn name(&self) -> &'static str {
                $name
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
                    decoupled_weight_decay: $decoupled,
                    amsgrad: self.amsgrad,
                    maximize: self.maximize,
                    step,
                }
            }
        }
    };
}

adam_config!(AdamConfig, "Adam", false);
adam_config!(AdamWConfig, "AdamW", true);
