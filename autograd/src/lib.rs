//! The whole stack behind one dependency, as `torch` is one import:
//! [`prelude`] brings what a training loop needs, the crates are re-exported
//! as modules (`autograd::nn`, `autograd::optim`...), and [`TrainState`]
//! saves and resumes a run bit for bit.
//!
//! ```
//! use autograd::prelude::*;
//!
//! manual_seed(0);
//! let model = MlpConfig::new(&[2, 16, 1]).with_activation(Activation::Tanh).init::<Cpu>();
//! let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-2, ..Default::default() })?;
//! let x = Tensor::<Cpu>::randn([64, 2]);
//! let y = (&x.select(1, 0) * &x.select(1, 1)).unsqueeze(1);
//! let first = F::try_mse_loss(&model.try_forward(&x)?, &y, Reduction::Mean)?.item();
//! for _ in 0..100 {
//!     opt.zero_grad(true);
//!     let loss = F::try_mse_loss(&model.try_forward(&x)?, &y, Reduction::Mean)?;
//!     loss.backward()?;
//!     opt.step()?;
//! }
//! let last = F::try_mse_loss(&model.try_forward(&x)?, &y, Reduction::Mean)?.item();
//! assert!(last < first);
//! # Ok::<(), autograd::prelude::Error>(())
//! ```

mod train_state;

pub use autograd_checkpoint as checkpoint;
pub use autograd_core as core;
pub use autograd_cpu as cpu;
pub use autograd_data as data;
pub use autograd_dist as dist;
pub use autograd_jit as jit;
pub use autograd_nn as nn;
pub use autograd_optim as optim;
pub use autograd_tensor as tensor;
/// The GPU backend (feature `wgpu`): `Tensor::<autograd::wgpu::Wgpu>`.
#[cfg(feature = "wgpu")]
pub use autograd_wgpu as wgpu;
pub use train_state::TrainState;

/// `torch.autograd`'s functions at the crate root: `autograd::grad(...)`,
/// `autograd::gradcheck(...)`, `autograd::jacobian(...)`.
pub use autograd_tensor::autograd::*;

/// What a training loop needs, in one import: `use autograd::prelude::*;`.
///
/// The traits (`Module`, `ModuleExt`, `Optimizer`, `HyperParams`) come with
/// the types, so `model.parameters()` and `opt.step()` resolve.
pub mod prelude {
    pub use crate::TrainState;
    pub use autograd_core::{Backend, DType, Error, RefBackend, Result};
    pub use autograd_cpu::Cpu;
    pub use autograd_data::{DataLoader, TensorDataset};
    pub use autograd_jit::{Traced, compile};
    pub use autograd_nn::{
        Activation, AdaptiveAvgPool2d, AvgPool2d, BCEWithLogitsLoss, BatchNorm1d, BatchNorm1dConfig, Conv1d, Conv1dConfig, Conv2d,
        Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig, CrossEntropyLoss, Dropout, Embedding, EmbeddingConfig, EncoderOptions,
        Flatten, GELU, LayerNorm, LayerNormConfig, Linear, LinearConfig, LoadOptions, MSELoss, MaxPool2d, MhaOptions, MlpConfig, Module,
        ModuleExt, ModuleFields, MultiheadAttention, MultiheadAttentionConfig, Parameter, ReLU, Sequential, Tanh, TransformerEncoder,
        TransformerEncoderConfig, TransformerEncoderLayer, TransformerEncoderLayerConfig, Unflatten,
    };
    pub use autograd_optim::{
        Adam, AdamConfig, AdamW, AdamWConfig, GradScaler, GradScalerConfig, HyperParams, NormType, Optimizer, Scheduler, Sgd, SgdConfig,
        clip_grad_norm_,
    };
    pub use autograd_tensor::autocast::autocast;
    pub use autograd_tensor::functional::{self as F, Reduction, SdpaOptions};
    pub use autograd_tensor::{BackwardOptions, Ellipsis, GradOptions, NewAxis, Tensor, TensorIndex, idx, manual_seed, no_grad};
}
