//! # autograd-nn
//!
//! Modules like a mini PyTorch: a [`Module`] trait whose parameters carry
//! PyTorch's dotted names (`0.weight`, `layers.2.bias`), layers
//! ([`Linear`] with PyTorch's `(out, in)` weight layout, [`Sequential`],
//! activations, [`Dropout`], [`LayerNorm`], [`BatchNorm1d`], [`Embedding`],
//! [`MultiheadAttention`], [`TransformerEncoderLayer`]), an [`MlpConfig`]
//! builder, initialisers, state dicts whose loading validates everything
//! before touching the model, and safetensors files that PyTorch's
//! `safetensors.torch` reads and writes.

// The derive names this crate `::autograd_nn`, also from inside it.
extern crate self as autograd_nn;

#[doc(hidden)]
/// Paths the derive's generated code uses.
pub mod __derive {
    pub use autograd_core::Backend;
    pub use autograd_tensor::Tensor;
}

mod attention;
mod batchnorm;
mod config_check;
mod conv;
mod decoder;
mod heads;
pub mod init;
mod layers;
mod loss;
mod module;
mod norm;
mod parameter;
mod pool;
mod recurrent;
mod training;
mod transformer;
pub use autograd_tensor::safetensors_io;

pub use attention::{MhaOptions, MultiheadAttention, MultiheadAttentionConfig};
pub use autograd_tensor::functional::Reduction;
pub use autograd_tensor::safetensors_io::{NamedTensors, load_safetensors, load_safetensors_bytes, save_safetensors};
pub use batchnorm::{
    BatchNorm, BatchNorm1d, BatchNorm1dConfig, BatchNorm2d, BatchNorm2dConfig, BatchNorm3d, BatchNorm3dConfig, BatchNormConfig,
};
pub use conv::{
    Conv, Conv1d, Conv1dConfig, Conv2d, Conv2dConfig, ConvConfig, ConvPadding, ConvTranspose, ConvTranspose1d, ConvTranspose1dConfig,
    ConvTranspose2d, ConvTranspose2dConfig, ConvTransposeConfig, PaddingMode,
};
pub use decoder::{
    DecoderOptions, Transformer, TransformerConfig, TransformerDecoder, TransformerDecoderConfig, TransformerDecoderLayer,
    TransformerDecoderLayerConfig,
};
pub use heads::{ClassificationHead, RegressionHead, RegressionLoss};
pub use layers::{
    Activation, Dropout, Embedding, EmbeddingConfig, Flatten, GELU, Identity, LayerNorm, LayerNormConfig, LeakyReLU, Linear, LinearConfig,
    LogSoftmax, MlpConfig, ReLU, Sequential, SiLU, Sigmoid, Softmax, Tanh,
};
pub use loss::{BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss};
pub use module::{LoadOptions, LoadReport, Module, ModuleExt, ModuleFields};
pub use norm::{
    Dropout2d, GroupNorm, InstanceNorm, InstanceNorm1d, InstanceNorm1dConfig, InstanceNorm2d, InstanceNorm2dConfig, InstanceNormConfig,
    RMSNorm,
};
pub use parameter::Parameter;
pub use pool::{
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool, AvgPool1d, AvgPool2d, MaxPool, MaxPool1d, MaxPool2d, Unflatten,
    Upsample,
};
pub use recurrent::{GRU, GRUCell, LSTM, LSTMCell, RNN, RNNCell, Recurrent, RecurrentCell, RecurrentConfig, RecurrentKind, RecurrentState};
pub use training::TrainingFlag;
pub use transformer::{
    EncoderOptions, TransformerEncoder, TransformerEncoderConfig, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
