//! # autograd-tensor
//!
//! `Tensor<B>`: a cheap handle to data on backend `B`, plus the tape that
//! define-by-run reverse-mode autograd walks backwards. PyTorch semantics:
//! `grad_fn` names and `next_functions`, gradients that accumulate into
//! leaves, `retain_graph` and the error on a second backward, `create_graph`
//! for higher-order gradients, `detach`, `no_grad`.
//!
//! ```
//! use autograd_tensor::Tensor;
//! use autograd_core::RefBackend;
//! type T = Tensor<RefBackend>;
//! let a = T::scalar(2.0f64).requires_grad_(true);
//! let b = T::scalar(-1.0f64).requires_grad_(true);
//! let c = T::scalar(1.5f64).requires_grad_(true);
//! let l = (&a * &b + &c).tanh();
//! assert_eq!(l.grad_fn().unwrap().name(), "TanhBackward0");
//! l.backward().unwrap();
//! assert!((a.grad().unwrap().item() - -0.7864).abs() < 1e-4);
//! ```

mod anomaly;
pub mod autocast;
mod autograd_meta;
mod callbacks;
pub mod capture;
mod deferred_drop;
mod display;
mod engine;
mod function;
pub mod functional;
mod functional_ad;
mod grad_mode;
mod gradcheck;
mod graphviz;
mod hooks;
#[cfg(feature = "ndarray")]
mod ndarray_io;
mod node;
mod ops;
mod random;
mod recording;
mod reduction;
mod release;
pub mod safetensors_io;
mod saved_hooks;
mod tensor;

pub use anomaly::{DetectAnomaly, is_anomaly_enabled};
pub use autograd_core::Element;
pub use callbacks::{is_backward_running, queue_callback};
pub use engine::{BackwardOptions, GradOptions};
pub use function::{Function, FunctionCtx};
pub use grad_mode::{
    EnableGradGuard, InferenceModeGuard, NoGradGuard, enable_grad, inference_mode, is_grad_enabled, is_inference_mode, no_grad,
    set_grad_enabled,
};
pub use graphviz::to_dot;
pub use hooks::{GradHook, PostAccumulateHook, RemovableHandle};
pub use node::{BackwardCtx, BackwardOp, GradFn, SavedTensor, live_nodes};
pub use ops::binary::Scalar;
pub use ops::subscript::{Ellipsis, NewAxis, TensorIndex};
pub use random::{fork_rng, fork_rng_from, is_rng_forked, manual_seed, rng_state, set_rng_state, with_own_generator, with_rng};
pub use release::Refill;
pub use safetensors_io::{NamedTensors, load_safetensors, load_safetensors_bytes, save_safetensors};
pub use saved_hooks::{PackedTensor, SavedTensorHooks, with_saved_tensor_hooks, without_saved_tensor_hooks};
pub use tensor::{Tensor, WeakTensor};

/// Functional autograd API (PyTorch's `torch.autograd`).
pub mod autograd {
    pub use crate::engine::{GradOptions, grad};
    pub use crate::functional_ad::{hessian, hvp, jacobian, jvp, vjp};
    pub use crate::gradcheck::{GradcheckReport, gradcheck, gradgradcheck};
}
