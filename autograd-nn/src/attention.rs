//! `MultiheadAttention` with PyTorch's packed parameters and masks.

use crate::config_check::ConfigCheck;
use crate::training::TrainingFlag;
use crate::{Linear, LinearConfig, Module, Parameter, init};
use autograd_core::ResultExt;
use autograd_core::{Backend, DType, Error, Result};
use autograd_tensor::Tensor;
use autograd_tensor::functional::{self as F, SdpaOptions, try_additive_mask, try_causal_mask};
use std::panic::Location;

/// Multi-head attention as `nn.MultiheadAttention(embed_dim, num_heads,
/// batch_first=True)`: the query, key and value projections packed in one
/// `in_proj_weight` `(3 E, E)` and `in_proj_bias` `(3 E,)`, then `out_proj`,
/// under PyTorch's names, so its state dicts load both ways. Inputs are
/// `(N, L, E)` (or unbatched `(L, E)`).
///
/// ```
/// use autograd_nn::{MhaOptions, MultiheadAttentionConfig, ModuleExt};
/// use autograd_core::RefBackend;
/// use autograd_tensor::Tensor;
/// let mha = MultiheadAttentionConfig::new(8, 2).init::<RefBackend>();
/// let names: Vec<String> = mha.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]);
/// let x = Tensor::<RefBackend>::randn([3, 5, 8]);
/// let (y, w) = mha.forward_qkv(&x, &x, &x, MhaOptions::default());
/// assert_eq!((y.dims(), w.unwrap().dims()), (&[3, 5, 8][..], &[3, 5, 5][..]));
/// ```
#[derive(Module)]
pub struct MultiheadAttention<B: Backend> {
    /// `E`, the model's width (query, key and value alike).
    pub embed_dim: usize,
    /// Heads; each attends over `E / num_heads` features.
    pub num_heads: usize,
    /// Dropout probability on the attention weights in training.
    pub dropout: f64,
    /// `(3 E, E)`: the query, key and value projections stacked.
    pub in_proj_weight: Parameter<B>,
    /// `(3 E,)`, if the layer has biases.
    pub in_proj_bias: Option<Parameter<B>>,
    /// The output projection `E -> E`.
    pub out_proj: Linear<B>,
    training: TrainingFlag,
}

/// Configuration of a [`MultiheadAttention`]: width and heads, PyTorch's
/// defaults for the rest (no dropout, biases, float32).
///
/// ```
/// use autograd_nn::MultiheadAttentionConfig;
/// use autograd_core::RefBackend;
/// assert!(MultiheadAttentionConfig::new(10, 3).try_init::<RefBackend>().is_err()); // 10 % 3 != 0
/// let m = MultiheadAttentionConfig::new(4, 2).with_bias(false).try_init::<RefBackend>().unwrap();
/// assert!(m.in_proj_bias.is_none() && m.out_proj.bias.is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MultiheadAttentionConfig {
    /// `E`.
    pub embed_dim: usize,
    /// Heads (must divide `embed_dim`).
    pub num_heads: usize,
    /// Dropout on the attention weights in training (PyTorch's default: 0).
    pub dropout: f64,
    /// Biases on the projections (PyTorch's default: yes).
    pub bias: bool,
    /// The parameters' dtype (PyTorch's default: float32).
    pub dtype: DType,
}

impl MultiheadAttentionConfig {
    /// `embed_dim` split over `num_heads`, with PyTorch's defaults.
    pub fn new(embed_dim: usize, num_heads: usize) -> Self {
        MultiheadAttentionConfig { embed_dim, num_heads, dropout: 0.0, bias: true, dtype: DType::F32 }
    }
    /// With dropout `p` on the attention weights.
    pub fn with_dropout(self, dropout: f64) -> Self {
        MultiheadAttentionConfig { dropout, ..self }
    }
    /// With or without biases.
    pub fn with_bias(self, bias: bool) -> Self {
        MultiheadAttentionConfig { bias, ..self }
    }
    /// With parameters of `dtype`.
    pub fn with_dtype(self, dtype: DType) -> Self {
        MultiheadAttentionConfig { dtype, ..self }
    }
    /// Builds the layer (panics where [`MultiheadAttentionConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> MultiheadAttention<B> {
        self.try_init().or_panic()
    }
    /// Builds the layer initialised as PyTorch does: `in_proj_weight` Xavier
    /// uniform, `out_proj.weight` as a `Linear`'s, biases zero. `Err` naming
    /// the field when `embed_dim` or `num_heads` is zero, `num_heads` does
    /// not divide `embed_dim`, or the dropout probability is outside
    /// `[0, 1]`; `Err` when the weights cannot be allocated.
    ///
    /// ```
    /// use autograd_nn::MultiheadAttentionConfig;
    /// use autograd_core::RefBackend;
    /// let e = MultiheadAttentionConfig::new(0, 1).try_init::<RefBackend>().err().unwrap().to_string();
    /// assert!(e.contains("embed_dim must be greater than 0"), "{e}");
    /// assert!(MultiheadAttentionConfig::new(8, 3).try_init::<RefBackend>().is_err());
    /// assert!(MultiheadAttentionConfig::new(8, 2).with_dropout(f64::NAN).try_init::<RefBackend>().is_err());
    /// ```
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<MultiheadAttention<B>> {
        let MultiheadAttentionConfig { embed_dim: e, num_heads, dropout, bias, dtype } = *self;
        let check = ConfigCheck::new("MultiheadAttentionConfig");
        check.positive("embed_dim", e)?;
        check.divisible("embed_dim", e, "num_heads", num_heads)?;
        check.probability("dropout", dropout)?;
        let three_e = e.checked_mul(3).ok_or_else(|| Error::msg(format!("MultiheadAttention: embed_dim {e} overflows")))?;
        // Xavier uniform on (3E, E): fan_in E, fan_out 3E
        let a = if e > 0 { (6.0 / (4 * e) as f64).sqrt() } else { 0.0 };
        let mut out_proj = LinearConfig::new(e, e).with_bias(bias).with_dtype(dtype).try_init::<B>()?;
        if let Some(b) = &mut out_proj.bias {
            b.set(Tensor::try_zeros_dtype([e], dtype)?);
        }
        Ok(MultiheadAttention {
            embed_dim: e,
            num_heads,
            dropout,
            in_proj_weight: Parameter::new(init::try_uniform::<B>([three_e, e], -a, a, dtype)?),
            in_proj_bias: if bias { Some(Parameter::new(Tensor::try_zeros_dtype([three_e], dtype)?)) } else { None },
            out_proj,
            training: TrainingFlag::default(),
        })
    }
}

/// The optional arguments of [`MultiheadAttention::try_forward_qkv`], with
/// PyTorch's defaults (`need_weights` and `average_attn_weights` on).
///
/// Masks follow `nn.MultiheadAttention`'s convention: in a `Bool` mask
/// `true` means *masked out*; a float mask is added to the scores.
///
/// ```
/// use autograd_nn::MhaOptions;
/// use autograd_core::RefBackend;
/// let o = MhaOptions::<RefBackend> { need_weights: false, is_causal: true, ..Default::default() };
/// assert!(o.average_attn_weights && o.key_padding_mask.is_none());
/// ```
pub struct MhaOptions<'a, B: Backend> {
    /// `(N, S)` (or `(S,)` unbatched): keys to ignore (padding).
    pub key_padding_mask: Option<&'a Tensor<B>>,
    /// Also return the attention weights. PyTorch computes them with a
    /// plain softmax, so a query whose keys are all masked gets NaN; without
    /// weights it goes through `scaled_dot_product_attention`, which gives
    /// such a query zeros. Both behaviours are kept.
    pub need_weights: bool,
    /// `(L, S)` or `(N * num_heads, L, S)`: positions each query may not
    /// attend to.
    pub attn_mask: Option<&'a Tensor<B>>,
    /// Average the returned weights over heads (`(N, L, S)`) rather than
    /// returning each head's (`(N, num_heads, L, S)`).
    pub average_attn_weights: bool,
    /// Causal attention: with `attn_mask` given it is a hint that the mask is
    /// causal (as in PyTorch); without one the causal mask is built here
    /// (where PyTorch asks for the mask).
    pub is_causal: bool,
}

impl<B: Backend> Default for MhaOptions<'_, B> {
    fn default() -> Self {
        MhaOptions { key_padding_mask: None, need_weights: true, attn_mask: None, average_attn_weights: true, is_causal: false }
    }
}

impl<B: Backend> Clone for MhaOptions<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for MhaOptions<'_, B> {}

impl<B: Backend> MultiheadAttention<B> {
    /// `nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)`;
    /// [`MultiheadAttentionConfig`] for the other choices.
    #[track_caller]
    pub fn new(embed_dim: usize, num_heads: usize) -> Self {
        MultiheadAttentionConfig::new(embed_dim, num_heads).init()
    }

    /// Panicking [`MultiheadAttention::try_forward_qkv`].
    #[track_caller]
    pub fn forward_qkv(
        &self,
        query: &Tensor<B>,
        key: &Tensor<B>,
        value: &Tensor<B>,
        options: MhaOptions<'_, B>,
    ) -> (Tensor<B>, Option<Tensor<B>>) {
        self.try_forward_qkv(query, key, value, options).or_panic()
    }

    /// Attends `query` `(N, L, E)` over `key` and `value` `(N, S, E)` (or
    /// all unbatched): the output `(N, L, E)` and, with `need_weights`, the
    /// attention weights (after dropout, as PyTorch returns them). When the
    /// three inputs are one tensor (self-attention) the projection is one
    /// product with the packed weight.
    ///
    /// ```
    /// use autograd_nn::{MhaOptions, MultiheadAttention};
    /// use autograd_core::RefBackend;
    /// use autograd_tensor::Tensor;
    /// let mha = MultiheadAttention::<RefBackend>::new(4, 2);
    /// let x = Tensor::<RefBackend>::randn([2, 3, 4]);
    /// // every key of the second sequence masked: NaN with weights, zeros + bias without
    /// let pad = Tensor::<RefBackend>::from_vec(vec![0.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], [2, 3]).gt_scalar(0.5);
    /// let opts = MhaOptions { key_padding_mask: Some(&pad), ..Default::default() };
    /// let (y, _) = mha.forward_qkv(&x, &x, &x, opts);
    /// assert!(y.to_vec::<f32>()[12..].iter().all(|v| v.is_nan()));
    /// let (y, w) = mha.forward_qkv(&x, &x, &x, MhaOptions { need_weights: false, ..opts });
    /// assert!(w.is_none() && y.to_vec::<f32>()[12..].iter().all(|v| *v == 0.0)); // out_proj.bias is zero
    /// assert!(mha.try_forward_qkv(&x, &x.narrow(2, 0, 2), &x, opts).is_err());
    /// ```
    #[track_caller]
    pub fn try_forward_qkv(
        &self,
        query: &Tensor<B>,
        key: &Tensor<B>,
        value: &Tensor<B>,
        options: MhaOptions<'_, B>,
    ) -> Result<(Tensor<B>, Option<Tensor<B>>)> {
        let loc = Location::caller();
        let err = |msg: String| Error::InvalidShape { op: "MultiheadAttention", msg, location: Some(loc) };
        let (e, h) = (self.embed_dim, self.num_heads);
        let batched = query.rank() == 3;
        let shapes_ok = (query.rank() == 2 || batched)
            && key.rank() == query.rank()
            && value.rank() == query.rank()
            && [query, key, value].iter().all(|t| t.dims()[t.rank() - 1] == e)
            && key.dims()[..key.rank() - 1] == value.dims()[..value.rank() - 1]
            && (!batched || query.dims()[0] == key.dims()[0]);
        if !shapes_ok {
            return Err(err(format!(
                "expected query (N, L, {e}), key and value (N, S, {e}) (or all without N), got {:?}, {:?} and {:?}",
                query.shape(),
                key.shape(),
                value.shape()
            )));
        }
        let batch = |t: &Tensor<B>| if batched { Ok(t.clone()) } else { t.try_unsqueeze(0) };
        let (q, k, v) = (batch(query)?, batch(key)?, batch(value)?);
        let (n, l, s, d) = (q.dims()[0], q.dims()[1], k.dims()[1], e / h);
        let dtype = self.in_proj_weight.tensor().dtype();
        // causal alone and no weights: SDPA builds the mask and knows no
        // query is fully masked (as PyTorch passes is_causal on and drops the mask)
        let sdpa_causal = causal_only_mask(&options) && !options.need_weights;
        let bias = if sdpa_causal { None } else { self.merged_mask(n, l, s, dtype, &options, batched).map_err(|e| e.at(loc))? };
        let (qp, kp, vp) = self.project_in(query, key, value, &q, &k, &v)?;
        // (N, len, E) -> (N, H, len, D)
        let heads = |t: Tensor<B>, len: usize| t.try_reshape(&[n as isize, len as isize, h as isize, d as isize])?.try_transpose(1, 2);
        let (qh, kh, vh) = (heads(qp, l)?, heads(kp, s)?, heads(vp, s)?);
        let training = self.training.get("MultiheadAttention");
        let p = if training { self.dropout } else { 0.0 };
        let (out, weights) = if options.need_weights {
            // PyTorch's explicit path: a plain softmax (NaN for a query with
            // every key masked) and the weights kept for the caller
            let mut scores = qh.try_mul_scalar(1.0 / (d as f64).sqrt())?.try_matmul(&kh.try_transpose(-2, -1)?)?;
            if let Some(b) = &bias {
                scores = scores.try_add(b)?;
            }
            let w = F::try_dropout(&scores.try_softmax(-1)?, p, training)?;
            let out = w.try_matmul(&vh)?;
            let w = if options.average_attn_weights { w.try_mean_dims(&[1], false)? } else { w };
            (out, Some(w))
        } else {
            let sdpa = SdpaOptions { attn_mask: bias.as_ref(), dropout_p: p, is_causal: sdpa_causal, scale: None };
            (F::try_scaled_dot_product_attention(&qh, &kh, &vh, sdpa)?, None)
        };
        let out = out.try_transpose(1, 2)?.try_reshape(&[n as isize, l as isize, e as isize])?;
        let out = self.out_proj.try_forward(&out)?;
        if batched { Ok((out, weights)) } else { Ok((out.try_squeeze_dim(0)?, weights.map(|w| w.try_squeeze_dim(0)).transpose()?)) }
    }

    /// The three input projections: one product and a split for
    /// self-attention, three products with row blocks of the packed weight otherwise.
    fn project_in(
        &self,
        query: &Tensor<B>,
        key: &Tensor<B>,
        value: &Tensor<B>,
        q: &Tensor<B>,
        k: &Tensor<B>,
        v: &Tensor<B>,
    ) -> Result<(Tensor<B>, Tensor<B>, Tensor<B>)> {
        let (w, b) = (self.in_proj_weight.tensor(), self.in_proj_bias.as_ref().map(|b| b.tensor()));
        if query.id() == key.id() && key.id() == value.id() {
            let mut parts = F::try_linear(q, w, b)?.try_chunk(3, -1)?.into_iter();
            let mut next = || parts.next().ok_or_else(|| Error::msg("MultiheadAttention: the packed projection did not split in three"));
            return Ok((next()?, next()?, next()?));
        }
        let e = self.embed_dim;
        let block = |x: &Tensor<B>, i: usize| -> Result<Tensor<B>> {
            let bi = b.map(|b| b.try_narrow(0, i * e, e)).transpose()?;
            F::try_linear(x, &w.try_narrow(0, i * e, e)?, bi.as_ref())
        };
        Ok((block(q, 0)?, block(k, 1)?, block(v, 2)?))
    }

    /// `attn_mask` (or the causal mask) and `key_padding_mask` as one
    /// additive mask broadcasting against the scores `(N, H, L, S)`.
    fn merged_mask(&self, n: usize, l: usize, s: usize, dtype: DType, o: &MhaOptions<'_, B>, batched: bool) -> Result<Option<Tensor<B>>> {
        let h = self.num_heads;
        let bad = |what: &str, got: &Tensor<B>, want: String| Error::InvalidShape {
            op: "MultiheadAttention",
            msg: format!("the shape of the {what} is {:?}, but should be {want}", got.shape()),
            location: None,
        };
        let mut bias = match o.attn_mask {
            Some(m) if m.rank() == 2 && m.dims() == [l, s] => Some(try_additive_mask(m, dtype, false)?),
            Some(m) if m.rank() == 3 && m.dims() == [n * h, l, s] => {
                Some(try_additive_mask(m, dtype, false)?.try_reshape(&[n as isize, h as isize, l as isize, s as isize])?)
            }
            Some(m) => return Err(bad("attn_mask", m, format!("({l}, {s}) or ({}, {l}, {s})", n * h))),
            None if o.is_causal => Some(try_causal_mask(l, s, dtype)?),
            None => None,
        };
        if let Some(m) = o.key_padding_mask {
            let want: &[usize] = if batched { &[n, s] } else { &[s] };
            if m.dims() != want {
                return Err(bad("key_padding_mask", m, format!("{want:?}")));
            }
            let kp = try_additive_mask(m, dtype, false)?.try_reshape(&[n as isize, 1, 1, s as isize])?;
            bias = Some(match bias {
                Some(b) => b.try_add(&kp)?,
                None => kp,
            });
        }
        Ok(bias)
    }
}

/// Whether the only mask is the causal one that `is_causal` asks for.
fn causal_only_mask<B: Backend>(o: &MhaOptions<'_, B>) -> bool {
    o.is_causal && o.attn_mask.is_none() && o.key_padding_mask.is_none()
}

impl<B: Backend> Module<B> for MultiheadAttention<B> {
    /// Self-attention of `x` without masks or weights.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        Ok(self.try_forward_qkv(x, x, x, MhaOptions { need_weights: false, ..Default::default() })?.0)
    }
    fn set_training(&self, on: bool) {
        self.training.set(on);
    }
    fn is_training(&self) -> bool {
        self.training.peek()
    }
}
