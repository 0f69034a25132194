//! `TransformerDecoderLayer`, `TransformerDecoder` and `Transformer` with
//! PyTorch's names (`batch_first=True` layouts).

use crate::config_check::ConfigCheck;
use crate::layers::apply_activation;
use crate::transformer::layer_config;
use crate::{
    Activation, Dropout, EncoderOptions, LayerNorm, LayerNormConfig, Linear, LinearConfig, MhaOptions, Module, MultiheadAttention,
    MultiheadAttentionConfig, TransformerEncoder, TransformerEncoderConfig, TransformerEncoderLayerConfig,
};
use autograd_core::{Backend, DType, Result, ResultExt};
use autograd_tensor::Tensor;
use std::panic::Location;

/// One Transformer decoder block as `nn.TransformerDecoderLayer(...,
/// batch_first=True)`: self-attention over the target (causal with a
/// target mask or `tgt_is_causal`), cross-attention to the encoder's
/// `memory`, and a feed-forward network, each with a residual connection
/// and a layer norm before (`norm_first`) or after the sub-block. Parameter
/// names are PyTorch's (`self_attn.*`, `multihead_attn.*`, `linear1.*`,
/// `norm1.*` to `norm3.*`).
///
/// ```
/// use autograd_nn::{DecoderOptions, ModuleExt, TransformerDecoderLayerConfig};
/// use autograd_core::RefBackend;
/// use autograd_tensor::Tensor;
/// let layer = TransformerDecoderLayerConfig::new(8, 2).with_dim_feedforward(16).init::<RefBackend>();
/// assert_eq!(layer.named_parameters().len(), 18);
/// let (tgt, memory) = (Tensor::randn([2, 5, 8]), Tensor::randn([2, 7, 8]));
/// let y = layer.forward_with(&tgt, &memory, DecoderOptions { tgt_is_causal: true, ..Default::default() });
/// assert_eq!(y.dims(), &[2, 5, 8]);
/// ```
#[derive(Module)]
pub struct TransformerDecoderLayer<B: Backend> {
    /// Self-attention over the target.
    pub self_attn: MultiheadAttention<B>,
    /// Attention from the target to the memory.
    pub multihead_attn: MultiheadAttention<B>,
    /// `d_model -> dim_feedforward`.
    pub linear1: Linear<B>,
    /// Dropout inside the feed-forward network.
    pub dropout: Dropout,
    /// `dim_feedforward -> d_model`.
    pub linear2: Linear<B>,
    /// Layer norms before the sub-blocks (true) or after the residual sums.
    pub norm_first: bool,
    /// The self-attention block's norm.
    pub norm1: LayerNorm<B>,
    /// The cross-attention block's norm.
    pub norm2: LayerNorm<B>,
    /// The feed-forward block's norm.
    pub norm3: LayerNorm<B>,
    /// Dropout on the self-attention block's output.
    pub dropout1: Dropout,
    /// Dropout on the cross-attention block's output.
    pub dropout2: Dropout,
    /// Dropout on the feed-forward block's output.
    pub dropout3: Dropout,
    /// The feed-forward activation.
    #[module(skip)]
    pub activation: Activation,
}

layer_config! {
    /// Configuration of a [`TransformerDecoderLayer`]: width and heads, and
    /// PyTorch's defaults for the rest (`dim_feedforward` 2048, dropout 0.1,
    /// ReLU, `layer_norm_eps` 1e-5, post-norm, biases, float32).
    ///
    /// ```
    /// use autograd_nn::TransformerDecoderLayerConfig;
    /// use autograd_core::RefBackend;
    /// assert!(TransformerDecoderLayerConfig::new(16, 3).try_init::<RefBackend>().is_err());
    /// ```
    TransformerDecoderLayerConfig
}

impl TransformerDecoderLayerConfig {
    /// Builds the block (panics where [`TransformerDecoderLayerConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> TransformerDecoderLayer<B> {
        self.try_init().or_panic()
    }
    /// Builds the block with PyTorch's initialisation of each part; `Err`
    /// naming the field as [`TransformerEncoderLayerConfig::try_init`].
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<TransformerDecoderLayer<B>> {
        let c = *self;
        c.check("TransformerDecoderLayerConfig")?;
        Ok(TransformerDecoderLayer {
            self_attn: c.attention()?,
            multihead_attn: c.attention()?,
            linear1: c.linear(c.d_model, c.dim_feedforward)?,
            dropout: Dropout::try_new(c.dropout)?,
            linear2: c.linear(c.dim_feedforward, c.d_model)?,
            norm_first: c.norm_first,
            norm1: c.norm()?,
            norm2: c.norm()?,
            norm3: c.norm()?,
            dropout1: Dropout::try_new(c.dropout)?,
            dropout2: Dropout::try_new(c.dropout)?,
            dropout3: Dropout::try_new(c.dropout)?,
            activation: c.activation,
        })
    }
}

/// The optional arguments of the decoder's `try_forward_with` (PyTorch's
/// `tgt_mask`, `memory_mask`, `tgt_key_padding_mask`,
/// `memory_key_padding_mask`, `tgt_is_causal`, `memory_is_causal`), in
/// `nn.MultiheadAttention`'s convention (`true` masks out).
pub struct DecoderOptions<'a, B: Backend> {
    /// `(T, T)` or `(N * nhead, T, T)`: target positions a query may not attend to.
    pub tgt_mask: Option<&'a Tensor<B>>,
    /// `(T, S)` or `(N * nhead, T, S)`: memory positions a query may not attend to.
    pub memory_mask: Option<&'a Tensor<B>>,
    /// `(N, T)`: target padding.
    pub tgt_key_padding_mask: Option<&'a Tensor<B>>,
    /// `(N, S)`: memory padding.
    pub memory_key_padding_mask: Option<&'a Tensor<B>>,
    /// Causal self-attention (built when `tgt_mask` is absent).
    pub tgt_is_causal: bool,
    /// Causal cross-attention (built when `memory_mask` is absent).
    pub memory_is_causal: bool,
}

impl<B: Backend> Default for DecoderOptions<'_, B> {
    fn default() -> Self {
        DecoderOptions {
            tgt_mask: None,
            memory_mask: None,
            tgt_key_padding_mask: None,
            memory_key_padding_mask: None,
            tgt_is_causal: false,
            memory_is_causal: false,
        }
    }
}

impl<B: Backend> Clone for DecoderOptions<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for DecoderOptions<'_, B> {}

impl<B: Backend> TransformerDecoderLayer<B> {
    /// Panicking [`TransformerDecoderLayer::try_forward_with`].
    #[track_caller]
    pub fn forward_with(&self, tgt: &Tensor<B>, memory: &Tensor<B>, options: DecoderOptions<'_, B>) -> Tensor<B> {
        self.try_forward_with(tgt, memory, options).or_panic()
    }

    /// The block on `tgt` `(N, T, d_model)` attending to `memory` `(N, S, d_model)`.
    #[track_caller]
    pub fn try_forward_with(&self, tgt: &Tensor<B>, memory: &Tensor<B>, o: DecoderOptions<'_, B>) -> Result<Tensor<B>> {
        let self_opts = MhaOptions {
            key_padding_mask: o.tgt_key_padding_mask,
            need_weights: false,
            attn_mask: o.tgt_mask,
            average_attn_weights: true,
            is_causal: o.tgt_is_causal,
        };
        let cross_opts = MhaOptions {
            key_padding_mask: o.memory_key_padding_mask,
            need_weights: false,
            attn_mask: o.memory_mask,
            average_attn_weights: true,
            is_causal: o.memory_is_causal,
        };
        let sa = |x: &Tensor<B>| self.dropout1.try_forward(&self.self_attn.try_forward_qkv(x, x, x, self_opts)?.0);
        let ca = |x: &Tensor<B>| self.dropout2.try_forward(&self.multihead_attn.try_forward_qkv(x, memory, memory, cross_opts)?.0);
        let ff = |x: &Tensor<B>| {
            let hidden = self.dropout.try_forward(&apply_activation(self.activation, &self.linear1.try_forward(x)?)?)?;
            self.dropout3.try_forward(&self.linear2.try_forward(&hidden)?)
        };
        if self.norm_first {
            let x = tgt.try_add(&sa(&self.norm1.try_forward(tgt)?)?)?;
            let x = x.try_add(&ca(&self.norm2.try_forward(&x)?)?)?;
            x.try_add(&ff(&self.norm3.try_forward(&x)?)?)
        } else {
            let x = self.norm1.try_forward(&tgt.try_add(&sa(tgt)?)?)?;
            let x = self.norm2.try_forward(&x.try_add(&ca(&x)?)?)?;
            self.norm3.try_forward(&x.try_add(&ff(&x)?)?)
        }
    }
}

impl<B: Backend> Module<B> for TransformerDecoderLayer<B> {
    /// The block attending to its own input as memory, without masks (a
    /// decoder needs the encoder's output: [`TransformerDecoderLayer::try_forward_with`]).
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.try_forward_with(x, x, DecoderOptions::default())
    }
}

/// A stack of [`TransformerDecoderLayer`]s and an optional final norm, as
/// `nn.TransformerDecoder(layer, num_layers, norm)`: names `layers.0....`,
/// `norm.weight`.
#[derive(Module)]
pub struct TransformerDecoder<B: Backend> {
    /// The blocks, in order.
    pub layers: Vec<TransformerDecoderLayer<B>>,
    /// A final layer norm, if any.
    pub norm: Option<LayerNorm<B>>,
}

/// Configuration of a [`TransformerDecoder`]: the block, how many, and
/// whether a final layer norm follows (PyTorch's default: none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransformerDecoderConfig {
    /// Each block's configuration.
    pub layer: TransformerDecoderLayerConfig,
    /// The number of blocks.
    pub num_layers: usize,
    /// A final layer norm over `d_model`.
    pub norm: bool,
}

impl TransformerDecoderConfig {
    /// `num_layers` blocks of `layer`, no final norm.
    pub fn new(layer: TransformerDecoderLayerConfig, num_layers: usize) -> Self {
        TransformerDecoderConfig { layer, num_layers, norm: false }
    }
    /// With or without a final layer norm.
    pub fn with_norm(self, norm: bool) -> Self {
        TransformerDecoderConfig { norm, ..self }
    }
    /// Builds the stack (panics where [`TransformerDecoderConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> TransformerDecoder<B> {
        self.try_init().or_panic()
    }
    /// Builds the stack, each block initialised afresh.
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<TransformerDecoder<B>> {
        let l = &self.layer;
        Ok(TransformerDecoder {
            layers: (0..self.num_layers).map(|_| l.try_init()).collect::<Result<_>>()?,
            norm: if self.norm { Some(l.norm()?) } else { None },
        })
    }
}

impl<B: Backend> TransformerDecoder<B> {
    /// Panicking [`TransformerDecoder::try_forward_with`].
    #[track_caller]
    pub fn forward_with(&self, tgt: &Tensor<B>, memory: &Tensor<B>, options: DecoderOptions<'_, B>) -> Tensor<B> {
        self.try_forward_with(tgt, memory, options).or_panic()
    }
    /// Every block with the same memory and masks, then the final norm.
    #[track_caller]
    pub fn try_forward_with(&self, tgt: &Tensor<B>, memory: &Tensor<B>, options: DecoderOptions<'_, B>) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let mut x = tgt.clone();
        for layer in &self.layers {
            x = layer.try_forward_with(&x, memory, options).map_err(|e| e.at(loc))?;
        }
        match &self.norm {
            Some(n) => n.try_forward(&x),
            None => Ok(x),
        }
    }
}

impl<B: Backend> Module<B> for TransformerDecoder<B> {
    /// The stack attending to its own input as memory, without masks.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.try_forward_with(x, x, DecoderOptions::default())
    }
}

/// PyTorch's `nn.Transformer(batch_first=True)`: an encoder stack and a
/// decoder stack, each ending in a layer norm; names `encoder.layers.0....`,
/// `encoder.norm.*`, `decoder.layers.0....`, `decoder.norm.*`.
///
/// ```
/// use autograd_nn::{DecoderOptions, EncoderOptions, ModuleExt, Transformer, TransformerConfig};
/// use autograd_core::{DType, RefBackend};
/// use autograd_tensor::Tensor;
/// let t = TransformerConfig::new(8, 2).with_layers(1, 2).with_dim_feedforward(16).init::<RefBackend>();
/// let (src, tgt) = (Tensor::randn([2, 6, 8]), Tensor::randn([2, 4, 8]));
/// let mask = Transformer::<RefBackend>::generate_square_subsequent_mask(4, DType::F32);
/// let dec = DecoderOptions { tgt_mask: Some(&mask), tgt_is_causal: true, ..Default::default() };
/// assert_eq!(t.forward_with(&src, &tgt, EncoderOptions::default(), dec).dims(), &[2, 4, 8]);
/// ```
#[derive(Module)]
pub struct Transformer<B: Backend> {
    /// The encoder stack (with its final norm).
    pub encoder: TransformerEncoder<B>,
    /// The decoder stack (with its final norm).
    pub decoder: TransformerDecoder<B>,
}

/// Configuration of a [`Transformer`]: PyTorch's defaults (`d_model` 512,
/// 8 heads, 6 + 6 layers, `dim_feedforward` 2048, dropout 0.1, ReLU,
/// post-norm) unless changed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransformerConfig {
    /// The blocks' configuration (both stacks).
    pub layer: TransformerEncoderLayerConfig,
    /// Encoder blocks.
    pub num_encoder_layers: usize,
    /// Decoder blocks.
    pub num_decoder_layers: usize,
}

impl TransformerConfig {
    /// `d_model` wide with `nhead` heads, PyTorch's defaults for the rest.
    pub fn new(d_model: usize, nhead: usize) -> Self {
        TransformerConfig { layer: TransformerEncoderLayerConfig::new(d_model, nhead), num_encoder_layers: 6, num_decoder_layers: 6 }
    }
    /// With `encoder` and `decoder` blocks.
    pub fn with_layers(self, encoder: usize, decoder: usize) -> Self {
        TransformerConfig { num_encoder_layers: encoder, num_decoder_layers: decoder, ..self }
    }
    /// With this feed-forward width.
    pub fn with_dim_feedforward(self, d: usize) -> Self {
        TransformerConfig { layer: self.layer.with_dim_feedforward(d), ..self }
    }
    /// With the blocks configured by `f` (dropout, activation, norm_first, ...).
    pub fn with_layer(self, f: impl FnOnce(TransformerEncoderLayerConfig) -> TransformerEncoderLayerConfig) -> Self {
        TransformerConfig { layer: f(self.layer), ..self }
    }
    /// Builds the model (panics where [`TransformerConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> Transformer<B> {
        self.try_init().or_panic()
    }
    /// Builds both stacks, each with a final layer norm.
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<Transformer<B>> {
        let l = self.layer;
        let d = TransformerDecoderLayerConfig {
            d_model: l.d_model,
            nhead: l.nhead,
            dim_feedforward: l.dim_feedforward,
            dropout: l.dropout,
            activation: l.activation,
            layer_norm_eps: l.layer_norm_eps,
            norm_first: l.norm_first,
            bias: l.bias,
            dtype: l.dtype,
        };
        Ok(Transformer {
            encoder: TransformerEncoderConfig::new(l, self.num_encoder_layers).with_norm(true).try_init()?,
            decoder: TransformerDecoderConfig::new(d, self.num_decoder_layers).with_norm(true).try_init()?,
        })
    }
}

impl<B: Backend> Module<B> for Transformer<B> {
    /// An `Err`: a Transformer needs a source and a target
    /// ([`Transformer::try_forward_with`]).
    fn try_forward(&self, _x: &Tensor<B>) -> Result<Tensor<B>> {
        Err(autograd_core::Error::msg("Transformer: forward needs a source and a target; call try_forward_with(src, tgt, ...)"))
    }
}

impl<B: Backend> Transformer<B> {
    /// PyTorch's `nn.Transformer.generate_square_subsequent_mask`: `(sz,
    /// sz)` with `-inf` above the diagonal, 0 elsewhere.
    pub fn generate_square_subsequent_mask(sz: usize, dtype: DType) -> Tensor<B> {
        autograd_tensor::functional::generate_square_subsequent_mask(sz, dtype)
    }
    /// Panicking [`Transformer::try_forward_with`].
    #[track_caller]
    pub fn forward_with(&self, src: &Tensor<B>, tgt: &Tensor<B>, enc: EncoderOptions<'_, B>, dec: DecoderOptions<'_, B>) -> Tensor<B> {
        self.try_forward_with(src, tgt, enc, dec).or_panic()
    }
    /// The encoder on `src` `(N, S, d_model)`, then the decoder on `tgt`
    /// `(N, T, d_model)` attending to its output; `dec`'s memory masks
    /// apply to the encoder's output (PyTorch's `memory_mask`,
    /// `memory_key_padding_mask`).
    #[track_caller]
    pub fn try_forward_with(
        &self,
        src: &Tensor<B>,
        tgt: &Tensor<B>,
        enc: EncoderOptions<'_, B>,
        dec: DecoderOptions<'_, B>,
    ) -> Result<Tensor<B>> {
        let memory = self.encoder.try_forward_with(src, enc)?;
        self.decoder.try_forward_with(tgt, &memory, dec)
    }
}
