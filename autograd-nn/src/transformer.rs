//! `TransformerEncoderLayer` and `TransformerEncoder` with PyTorch's names.

use crate::config_check::ConfigCheck;
use crate::layers::apply_activation;
use crate::{
    Activation, Dropout, LayerNorm, LayerNormConfig, Linear, LinearConfig, MhaOptions, Module, MultiheadAttention, MultiheadAttentionConfig,
};
use autograd_core::ResultExt;
use autograd_core::{Backend, DType, Result};
use autograd_tensor::Tensor;
use std::panic::Location;

/// One Transformer encoder block as `nn.TransformerEncoderLayer(...,
/// batch_first=True)`: self-attention and a feed-forward network
/// (`linear1`, activation, `dropout`, `linear2`), each with a residual
/// connection and a layer norm, before (`norm_first`, the "pre-norm" of
/// GPT-style models) or after (PyTorch's default) the sub-block. Parameter
/// names are PyTorch's (`self_attn.in_proj_weight`, `linear1.weight`,
/// `norm1.weight`, ...).
///
/// ```
/// use autograd_nn::{Activation, TransformerEncoderLayerConfig, ModuleExt, Module};
/// use autograd_core::RefBackend;
/// use autograd_tensor::Tensor;
/// let layer = TransformerEncoderLayerConfig::new(8, 2).with_dim_feedforward(16).with_activation(Activation::GELU).init::<RefBackend>();
/// assert_eq!(layer.named_parameters().len(), 12);
/// assert_eq!(layer.forward(&Tensor::randn([2, 5, 8])).dims(), &[2, 5, 8]);
/// ```
#[derive(Module)]
pub struct TransformerEncoderLayer<B: Backend> {
    /// Self-attention.
    pub self_attn: MultiheadAttention<B>,
    /// `d_model -> dim_feedforward`.
    pub linear1: Linear<B>,
    /// Dropout inside the feed-forward network.
    pub dropout: Dropout,
    /// `dim_feedforward -> d_model`.
    pub linear2: Linear<B>,
    /// Layer norms before the sub-blocks (true) or after the residual sums.
    pub norm_first: bool,
    /// The attention block's norm.
    pub norm1: LayerNorm<B>,
    /// The feed-forward block's norm.
    pub norm2: LayerNorm<B>,
    /// Dropout on the attention block's output.
    pub dropout1: Dropout,
    /// Dropout on the feed-forward block's output.
    pub dropout2: Dropout,
    /// The feed-forward activation (a function in PyTorch: no parameters).
    #[module(skip)]
    pub activation: Activation,
}

/// Defines a Transformer block's configuration type: the fields, `new` with
/// PyTorch's defaults and the `with_*` setters (the encoder's and the
/// decoder's blocks take the same arguments in PyTorch).
macro_rules! layer_config {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name {
            /// `d_model`, the width.
            pub d_model: usize,
            /// Attention heads.
            pub nhead: usize,
            /// The feed-forward network's hidden width (PyTorch's default: 2048).
            pub dim_feedforward: usize,
            /// Dropout probability everywhere in the block (PyTorch's default: 0.1).
            pub dropout: f64,
            /// The feed-forward activation (PyTorch's default: ReLU).
            pub activation: Activation,
            /// The layer norms' `eps` (PyTorch's default: 1e-5).
            pub layer_norm_eps: f64,
            /// Pre-norm (PyTorch's default: post-norm, false).
            pub norm_first: bool,
            /// Biases in the linear layers and norms (PyTorch's default: yes).
            pub bias: bool,
            /// The parameters' dtype (PyTorch's default: float32).
            pub dtype: DType,
        }

        impl $name {
            /// A `d_model`-wide block with `nhead` heads and PyTorch's defaults.
            pub fn new(d_model: usize, nhead: usize) -> Self {
                $name {
                    d_model,
                    nhead,
                    dim_feedforward: 2048,
                    dropout: 0.1,
                    activation: Activation::ReLU,
                    layer_norm_eps: 1e-5,
                    norm_first: false,
                    bias: true,
                    dtype: DType::F32,
                }
            }
            /// With this feed-forward width.
            pub fn with_dim_feedforward(self, dim_feedforward: usize) -> Self {
                $name { dim_feedforward, ..self }
            }
            /// With this dropout probability.
            pub fn with_dropout(self, dropout: f64) -> Self {
                $name { dropout, ..self }
            }
            /// With this activation.
            pub fn with_activation(self, activation: Activation) -> Self {
                $name { activation, ..self }
            }
            /// With this `eps` in the layer norms.
            pub fn with_layer_norm_eps(self, layer_norm_eps: f64) -> Self {
                $name { layer_norm_eps, ..self }
            }
            /// Pre-norm (`true`) or post-norm.
            pub fn with_norm_first(self, norm_first: bool) -> Self {
                $name { norm_first, ..self }
            }
            /// With or without biases.
            pub fn with_bias(self, bias: bool) -> Self {
                $name { bias, ..self }
            }
            /// With parameters of `dtype`.
            pub fn with_dtype(self, dtype: DType) -> Self {
                $name { dtype, ..self }
            }
            /// Checks the configuration as every block's `try_init` does
            /// (errors at the caller's line).
            #[track_caller]
            fn check(&self, what: &'static str) -> Result<()> {
                let check = ConfigCheck::new(what);
                check.positive("d_model", self.d_model)?;
                check.divisible("d_model", self.d_model, "nhead", self.nhead)?;
                check.probability("dropout", self.dropout)?;
                check.epsilon("layer_norm_eps", self.layer_norm_eps)
            }
            /// A layer norm over `d_model` (without bias when the block has none).
            fn norm<B: Backend>(&self) -> Result<LayerNorm<B>> {
                let mut n = LayerNormConfig::new(&[self.d_model]).with_eps(self.layer_norm_eps).with_dtype(self.dtype).try_init::<B>()?;
                if !self.bias {
                    n.bias = None;
                }
                Ok(n)
            }
            /// Attention over `d_model` with `nhead` heads.
            fn attention<B: Backend>(&self) -> Result<MultiheadAttention<B>> {
                MultiheadAttentionConfig::new(self.d_model, self.nhead).with_dropout(self.dropout).with_bias(self.bias).with_dtype(self.dtype).try_init()
            }
            /// A linear layer of the feed-forward network.
            fn linear<B: Backend>(&self, i: usize, o: usize) -> Result<Linear<B>> {
                LinearConfig::new(i, o).with_bias(self.bias).with_dtype(self.dtype).try_init()
            }
        }
    };
}
pub(crate) use layer_config;

layer_config! {
    /// Configuration of a [`TransformerEncoderLayer`]: width and heads, and
    /// PyTorch's defaults for the rest (`dim_feedforward` 2048, dropout 0.1,
    /// ReLU, `layer_norm_eps` 1e-5, post-norm, biases, float32).
    ///
    /// ```
    /// use autograd_nn::TransformerEncoderLayerConfig;
    /// use autograd_core::RefBackend;
    /// let c = TransformerEncoderLayerConfig::new(16, 4).with_norm_first(true).with_dropout(0.0);
    /// assert_eq!(c.dim_feedforward, 2048);
    /// assert!(TransformerEncoderLayerConfig::new(16, 3).try_init::<RefBackend>().is_err());
    /// ```
    TransformerEncoderLayerConfig
}

impl TransformerEncoderLayerConfig {
    /// Builds the block (panics where [`TransformerEncoderLayerConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> TransformerEncoderLayer<B> {
        self.try_init().or_panic()
    }
    /// Builds the block with PyTorch's initialisation of each part; `Err`
    /// naming the field where `d_model` or `nhead` is zero, `nhead` does not
    /// divide `d_model`, the dropout probability is outside `[0, 1]` or
    /// `layer_norm_eps` is negative or not finite; `Err` when the weights
    /// cannot be allocated.
    ///
    /// ```
    /// use autograd_nn::TransformerEncoderLayerConfig;
    /// use autograd_core::RefBackend;
    /// let e = TransformerEncoderLayerConfig::new(0, 1).try_init::<RefBackend>().err().unwrap().to_string();
    /// assert!(e.contains("TransformerEncoderLayerConfig") && e.contains("d_model must be greater than 0"), "{e}");
    /// let e = TransformerEncoderLayerConfig::new(8, 0).try_init::<RefBackend>().err().unwrap().to_string();
    /// assert!(e.contains("nhead must be greater than 0"), "{e}");
    /// assert!(TransformerEncoderLayerConfig::new(8, 2).with_layer_norm_eps(-1.0).try_init::<RefBackend>().is_err());
    /// ```
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<TransformerEncoderLayer<B>> {
        let c = *self;
        c.check("TransformerEncoderLayerConfig")?;
        Ok(TransformerEncoderLayer {
            self_attn: c.attention()?,
            linear1: c.linear(c.d_model, c.dim_feedforward)?,
            dropout: Dropout::try_new(c.dropout)?,
            linear2: c.linear(c.dim_feedforward, c.d_model)?,
            norm_first: c.norm_first,
            norm1: c.norm()?,
            norm2: c.norm()?,
            dropout1: Dropout::try_new(c.dropout)?,
            dropout2: Dropout::try_new(c.dropout)?,
            activation: c.activation,
        })
    }
}

/// The optional arguments of [`TransformerEncoderLayer::try_forward_with`]
/// and [`TransformerEncoder::try_forward_with`] (PyTorch's `src_mask`,
/// `src_key_padding_mask`, `is_causal`), in `nn.MultiheadAttention`'s mask
/// convention (`true` masks out).
///
/// ```
/// use autograd_nn::EncoderOptions;
/// use autograd_core::RefBackend;
/// let causal = EncoderOptions::<RefBackend> { is_causal: true, ..Default::default() };
/// assert!(causal.src_mask.is_none());
/// ```
pub struct EncoderOptions<'a, B: Backend> {
    /// `(L, L)` or `(N * nhead, L, L)`: positions a query may not attend to.
    pub src_mask: Option<&'a Tensor<B>>,
    /// `(N, L)`: padding positions to ignore as keys.
    pub src_key_padding_mask: Option<&'a Tensor<B>>,
    /// Causal self-attention (the mask is built when `src_mask` is absent).
    pub is_causal: bool,
}

impl<B: Backend> Default for EncoderOptions<'_, B> {
    fn default() -> Self {
        EncoderOptions { src_mask: None, src_key_padding_mask: None, is_causal: false }
    }
}

impl<B: Backend> Clone for EncoderOptions<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for EncoderOptions<'_, B> {}

impl<B: Backend> TransformerEncoderLayer<B> {
    /// Panicking [`TransformerEncoderLayer::try_forward_with`].
    #[track_caller]
    pub fn forward_with(&self, src: &Tensor<B>, options: EncoderOptions<'_, B>) -> Tensor<B> {
        self.try_forward_with(src, options).or_panic()
    }

    /// The block on `src` `(N, L, d_model)` with masks. Self-attention runs
    /// without returning weights, so a query whose keys are all masked
    /// attends to nothing (zeros), as in PyTorch.
    ///
    /// ```
    /// use autograd_nn::{EncoderOptions, TransformerEncoderLayerConfig};
    /// use autograd_core::RefBackend;
    /// use autograd_tensor::Tensor;
    /// let layer = TransformerEncoderLayerConfig::new(4, 2).with_dim_feedforward(8).with_dropout(0.0).init::<RefBackend>();
    /// let x = Tensor::<RefBackend>::randn([1, 3, 4]);
    /// let causal = layer.forward_with(&x, EncoderOptions { is_causal: true, ..Default::default() });
    /// // the first position sees only itself, whatever follows it
    /// let alone = layer.forward_with(&x.narrow(1, 0, 1), EncoderOptions::default());
    /// assert!((causal.narrow(1, 0, 1) - alone).abs().max().item() < 1e-6);
    /// ```
    #[track_caller]
    pub fn try_forward_with(&self, src: &Tensor<B>, options: EncoderOptions<'_, B>) -> Result<Tensor<B>> {
        let attn = MhaOptions {
            key_padding_mask: options.src_key_padding_mask,
            need_weights: false,
            attn_mask: options.src_mask,
            average_attn_weights: true,
            is_causal: options.is_causal,
        };
        let sa = |x: &Tensor<B>| self.dropout1.try_forward(&self.self_attn.try_forward_qkv(x, x, x, attn)?.0);
        let ff = |x: &Tensor<B>| {
            let hidden = self.dropout.try_forward(&apply_activation(self.activation, &self.linear1.try_forward(x)?)?)?;
            self.dropout2.try_forward(&self.linear2.try_forward(&hidden)?)
        };
        if self.norm_first {
            let x = src.try_add(&sa(&self.norm1.try_forward(src)?)?)?;
            x.try_add(&ff(&self.norm2.try_forward(&x)?)?)
        } else {
            let x = self.norm1.try_forward(&src.try_add(&sa(src)?)?)?;
            self.norm2.try_forward(&x.try_add(&ff(&x)?)?)
        }
    }
}

impl<B: Backend> Module<B> for TransformerEncoderLayer<B> {
    /// The block without masks.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.try_forward_with(x, EncoderOptions::default())
    }
}

/// A stack of [`TransformerEncoderLayer`]s and an optional final norm, as
/// `nn.TransformerEncoder(layer, num_layers, norm)`: names `layers.0....`,
/// `norm.weight`.
///
/// ```
/// use autograd_nn::{TransformerEncoderConfig, TransformerEncoderLayerConfig, ModuleExt};
/// use autograd_core::RefBackend;
/// let enc = TransformerEncoderConfig::new(TransformerEncoderLayerConfig::new(8, 2).with_dim_feedforward(16), 2)
///     .with_norm(true)
///     .init::<RefBackend>();
/// let names: Vec<String> = enc.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!((names[0].as_str(), names.last().unwrap().as_str()), ("layers.0.self_attn.in_proj_weight", "norm.bias"));
/// ```
#[derive(Module)]
pub struct TransformerEncoder<B: Backend> {
    /// The blocks, in order.
    pub layers: Vec<TransformerEncoderLayer<B>>,
    /// A final layer norm, if any (pre-norm stacks need one).
    pub norm: Option<LayerNorm<B>>,
}

/// Configuration of a [`TransformerEncoder`]: the block, how many, and
/// whether a final layer norm follows (PyTorch's default: none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransformerEncoderConfig {
    /// Each block's configuration.
    pub layer: TransformerEncoderLayerConfig,
    /// The number of blocks.
    pub num_layers: usize,
    /// A final layer norm over `d_model`.
    pub norm: bool,
}

impl TransformerEncoderConfig {
    /// `num_layers` blocks of `layer`, no final norm.
    pub fn new(layer: TransformerEncoderLayerConfig, num_layers: usize) -> Self {
        TransformerEncoderConfig { layer, num_layers, norm: false }
    }
    /// With or without a final layer norm.
    pub fn with_norm(self, norm: bool) -> Self {
        TransformerEncoderConfig { norm, ..self }
    }
    /// Builds the stack (panics where [`TransformerEncoderConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> TransformerEncoder<B> {
        self.try_init().or_panic()
    }
    /// Builds the stack, each block initialised afresh (PyTorch deep-copies
    /// one block, so its blocks start equal; load PyTorch's weights to
    /// reproduce a PyTorch run).
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<TransformerEncoder<B>> {
        let l = &self.layer;
        Ok(TransformerEncoder {
            layers: (0..self.num_layers).map(|_| l.try_init()).collect::<Result<_>>()?,
            norm: if self.norm { Some(l.norm()?) } else { None },
        })
    }
}

impl<B: Backend> TransformerEncoder<B> {
    /// Panicking [`TransformerEncoder::try_forward_with`].
    #[track_caller]
    pub fn forward_with(&self, src: &Tensor<B>, options: EncoderOptions<'_, B>) -> Tensor<B> {
        self.try_forward_with(src, options).or_panic()
    }
    /// Every block with the same masks, then the final norm.
    #[track_caller]
    pub fn try_forward_with(&self, src: &Tensor<B>, options: EncoderOptions<'_, B>) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let mut x = src.clone();
        for layer in &self.layers {
            x = layer.try_forward_with(&x, options).map_err(|e| e.at(loc))?;
        }
        match &self.norm {
            Some(n) => n.try_forward(&x),
            None => Ok(x),
        }
    }
}

impl<B: Backend> Module<B> for TransformerEncoder<B> {
    /// The stack without masks.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.try_forward_with(x, EncoderOptions::default())
    }
}
