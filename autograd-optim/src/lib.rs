//! # autograd-optim
//!
//! Optimizers (SGD, Adam, AdamW, RMSprop, Adagrad) that follow PyTorch's
//! update rules operation by operation, parameter groups, state dicts saved
//! as safetensors, gradient accumulation, gradient clipping, learning-rate
//! schedules. (Data loading lives in `autograd-data`.)
//!
//! Each optimizer is [`Optim`] with its hyper-parameter type; a step turns
//! every parameter with a gradient into one [`UpdateRule`], plain data that
//! core's optimizer-agnostic [`autograd_core::fused_update::FusedUpdate`]
//! hook lets the backend run in a single pass; many tensors are updated in
//! parallel. The arithmetic and PyTorch's state key names live here, in
//! `rule.rs`, and nowhere else.
//!
//! ```
//! use autograd_core::{DType, RefBackend};
//! use autograd_optim::{Adam, AdamConfig, Optimizer};
//! use autograd_tensor::Tensor;
//! // minimise (w - 3)^2
//! let w = Tensor::<RefBackend>::zeros_dtype([1], DType::F64).requires_grad_(true);
//! let mut opt = Adam::new(vec![w.clone()], AdamConfig { lr: 0.1, ..Default::default() }).unwrap();
//! for _ in 0..300 {
//!     opt.zero_grad(true);
//!     let d = &w - 3.0;
//!     (&d * &d).sum().backward().unwrap();
//!     opt.step().unwrap();
//! }
//! assert!((w.to_vec_f64()[0] - 3.0).abs() < 1e-3);
//! ```

mod accumulate;
mod adagrad;
mod adam;
mod check;
mod clip;
mod grad_scaler;
mod optimizer;
mod param_state;
mod rmsprop;
mod rule;
mod rule_hook;
mod scheduler;
mod sgd;
mod snapshot;
mod state;

pub use accumulate::GradAccumulator;
pub use adagrad::{Adagrad, AdagradConfig};
pub use adam::{Adam, AdamConfig, AdamW, AdamWConfig};
pub use clip::{NormType, clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm, grad_norm};
pub use grad_scaler::{GradScaler, GradScalerConfig, GradScalerState};
pub use optimizer::{ConfigMut, HyperParams, Optim, Optimizer, OptimizerConfig, OptimizerId, ParamGroup};
pub use rmsprop::{RmsProp, RmsPropConfig};
pub use rule::UpdateRule;
pub use scheduler::{CosineAnnealingLR, ExponentialLR, LinearLR, LrScheduler, MultiStepLR, OneCycleLR, Scheduler, SequentialLR, StepLR};
pub use sgd::{Sgd, SgdConfig};
pub use state::{GroupRecord, OptimizerState};
