//! Attention as a function: `scaled_dot_product_attention` and the masks it
//! takes (boolean, additive, causal), as PyTorch's math path computes them.

use super::try_dropout;
use crate::Tensor;
use autograd_core::{Backend, DType, Error, Result, Shape};
use std::panic::Location;

/// The optional arguments of [`try_scaled_dot_product_attention`], with
/// PyTorch's defaults (no mask, no dropout, not causal, `1/sqrt(E)`).
///
/// ```
/// use autograd_tensor::functional::SdpaOptions;
/// use autograd_core::RefBackend;
/// let o = SdpaOptions::<RefBackend> { is_causal: true, ..Default::default() };
/// assert!(o.attn_mask.is_none() && o.dropout_p == 0.0 && o.scale.is_none());
/// ```
pub struct SdpaOptions<'a, B: Backend> {
    /// Broadcastable to `(..., L, S)`: a `Bool` mask where `true` means
    /// "may attend" (as in PyTorch's SDPA; `nn.MultiheadAttention` uses the
    /// opposite convention), or a float mask of the query's dtype added to
    /// the scores (`-inf` masks).
    pub attn_mask: Option<&'a Tensor<B>>,
    /// Dropout probability on the attention weights, applied whenever it is
    /// positive (pass 0 in evaluation, as with PyTorch's functional form).
    pub dropout_p: f64,
    /// Query `i` attends to keys `0..=i` only (the mask is built here; giving
    /// an `attn_mask` as well is an error, as in PyTorch).
    pub is_causal: bool,
    /// The factor on `q k^T`; `1/sqrt(E)` when `None`.
    pub scale: Option<f64>,
}

impl<B: Backend> Default for SdpaOptions<'_, B> {
    fn default() -> Self {
        SdpaOptions { attn_mask: None, dropout_p: 0.0, is_causal: false, scale: None }
    }
}

impl<B: Backend> Clone for SdpaOptions<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for SdpaOptions<'_, B> {}

/// `softmax(q k^T * scale + mask) v` over the last two dims, batch dims
/// broadcast; `q: (..., L, E)`, `k: (..., S, E)`, `v: (..., S, Ev)` give
/// `(..., L, Ev)`. A query whose keys are all masked gets zeros (and zero
/// gradients), as PyTorch's `scaled_dot_product_attention` gives them
/// ([`Tensor::try_safe_softmax`]). Differentiable in `q`, `k`, `v` and a
/// float mask.
///
/// ```
/// use autograd_tensor::{Tensor, functional::{try_scaled_dot_product_attention, SdpaOptions}};
/// use autograd_core::RefBackend;
/// let q = Tensor::<RefBackend>::from_vec(vec![1.0f64, 0.0, 0.0, 1.0], [2, 2]);
/// let v = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
/// let causal = SdpaOptions { is_causal: true, ..Default::default() };
/// let y = try_scaled_dot_product_attention(&q, &q, &v, causal).unwrap();
/// assert_eq!(&y.to_vec::<f64>()[..2], &[1.0, 2.0]); // the first query sees the first key only
/// let k3 = Tensor::<RefBackend>::from_vec(vec![0.0f64; 6], [2, 3]); // E = 3, not 2
/// assert!(try_scaled_dot_product_attention(&q, &k3, &v, causal).is_err());
/// ```
#[track_caller]
pub fn try_scaled_dot_product_attention<B: Backend>(
    q: &Tensor<B>,
    k: &Tensor<B>,
    v: &Tensor<B>,
    options: SdpaOptions<'_, B>,
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let err = |msg: String| Error::InvalidShape { op: "scaled_dot_product_attention", msg, location: Some(loc) };
    let cast = |t: &Tensor<B>| crate::autocast::cast("scaled_dot_product_attention", t);
    let (q, k, v) = (&cast(q)?, &cast(k)?, &cast(v)?);
    let cast_mask = options.attn_mask.filter(|m| m.dtype().is_float()).map(cast).transpose()?;
    let options = SdpaOptions { attn_mask: cast_mask.as_ref().or(options.attn_mask), ..options };
    let (rq, rk, rv) = (q.rank(), k.rank(), v.rank());
    if rq < 2 || rk < 2 || rv < 2 || q.dims()[rq - 1] != k.dims()[rk - 1] || k.dims()[rk - 2] != v.dims()[rv - 2] {
        return Err(err(format!(
            "expected query (..., L, E), key (..., S, E) and value (..., S, Ev), got {:?}, {:?} and {:?}",
            q.shape(),
            k.shape(),
            v.shape()
        )));
    }
    if !q.dtype().is_float() || k.dtype() != q.dtype() || v.dtype() != q.dtype() {
        return Err(err(format!(
            "expected query, key and value of one floating dtype, got {:?}, {:?} and {:?}",
            q.dtype(),
            k.dtype(),
            v.dtype()
        )));
    }
    if !(0.0..=1.0).contains(&options.dropout_p) {
        return Err(err(format!("dropout probability has to be between 0 and 1, but got {}", options.dropout_p)));
    }
    if options.is_causal && options.attn_mask.is_some() {
        return Err(err("explicit attn_mask should not be set when is_causal=True".into()));
    }
    let (l, s) = (q.dims()[rq - 2], k.dims()[rk - 2]);
    let bias = match options.attn_mask {
        Some(m) => Some(try_additive_mask(m, q.dtype(), true).map_err(|e| e.renamed("scaled_dot_product_attention", loc))?),
        None if options.is_causal => Some(try_causal_mask::<B>(l, s, q.dtype())?),
        None => None,
    };
    let scale = options.scale.unwrap_or(1.0 / (q.dims()[rq - 1] as f64).sqrt());
    // Scaling q (L x E) rather than the scores (L x S): the smaller tensor.
    let mut scores =
        q.try_mul_scalar(scale)?.try_matmul(&k.try_transpose(-2, -1)?).map_err(|e| e.renamed("scaled_dot_product_attention", loc))?;
    if let Some(b) = &bias {
        scores = scores.try_add(b).map_err(|e| e.renamed("scaled_dot_product_attention", loc))?;
    }
    // Only a given mask can mask a query's every key: the causal mask always
    // leaves key 0 (top-left aligned), so a plain softmax saves the check.
    let probs = if options.attn_mask.is_some() { scores.try_safe_softmax(-1)? } else { scores.try_softmax(-1)? };
    let weights = try_dropout(&probs, options.dropout_p, options.dropout_p > 0.0)?;
    weights.try_matmul(v)
}

/// A mask as scores to add: a float mask as it is (its dtype must be
/// `dtype`), a `Bool` one as `0` / `-inf`. `true_attends` picks the
/// convention: SDPA's (`true` may attend) or `nn.MultiheadAttention`'s
/// (`true` is masked out).
///
/// ```
/// use autograd_tensor::{Tensor, functional::try_additive_mask};
/// use autograd_core::{RefBackend, DType};
/// let m = Tensor::<RefBackend>::from_vec(vec![1.0f64, 0.0], [2]).gt_scalar(0.5);
/// assert_eq!(try_additive_mask(&m, DType::F64, true).unwrap().to_vec::<f64>(), vec![0.0, f64::NEG_INFINITY]);
/// assert_eq!(try_additive_mask(&m, DType::F64, false).unwrap().to_vec::<f64>(), vec![f64::NEG_INFINITY, 0.0]);
/// ```
#[track_caller]
pub fn try_additive_mask<B: Backend>(mask: &Tensor<B>, dtype: DType, true_attends: bool) -> Result<Tensor<B>> {
    match mask.dtype() {
        DType::Bool => {
            let zero = Tensor::<B>::try_full_dtype(Shape::scalar(), 0.0, dtype)?;
            let ninf = Tensor::<B>::try_full_dtype(Shape::scalar(), f64::NEG_INFINITY, dtype)?;
            if true_attends { Tensor::try_where_cond(mask, &zero, &ninf) } else { Tensor::try_where_cond(mask, &ninf, &zero) }
        }
        d if d == dtype => Ok(mask.clone()),
        d => Err(Error::InvalidShape {
            op: "attention mask",
            msg: format!("expected a Bool mask or a float mask of the query's dtype {dtype:?}, got {d:?}"),
            location: Some(Location::caller()),
        }),
    }
}

/// The additive causal mask `(l, s)`: `0` where key `j <= i`, `-inf` above
/// the diagonal (PyTorch's top-left aligned `tril`).
///
/// ```
/// use autograd_tensor::functional::try_causal_mask;
/// use autograd_core::{RefBackend, DType};
/// let m = try_causal_mask::<RefBackend>(2, 3, DType::F32).unwrap();
/// let ninf = f32::NEG_INFINITY;
/// assert_eq!(m.to_vec::<f32>(), vec![0.0, ninf, ninf, 0.0, 0.0, ninf]);
/// ```
#[track_caller]
pub fn try_causal_mask<B: Backend>(l: usize, s: usize, dtype: DType) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let rows =
        Tensor::<B>::try_arange_dtype(0.0, l as f64, 1.0, DType::F64).map_err(|e| e.at(loc))?.try_reshape_to(&Shape::from([l, 1]))?;
    let cols =
        Tensor::<B>::try_arange_dtype(0.0, s as f64, 1.0, DType::F64).map_err(|e| e.at(loc))?.try_reshape_to(&Shape::from([1, s]))?;
    try_additive_mask(&cols.try_le(&rows).map_err(|e| e.at(loc))?, dtype, true)
}

/// PyTorch's `nn.Transformer.generate_square_subsequent_mask(sz)`: the
/// square causal mask `(sz, sz)`, `0` on and below the diagonal, `-inf`
/// above ([`try_causal_mask`] with `l = s = sz`).
///
/// ```
/// use autograd_tensor::functional::try_generate_square_subsequent_mask;
/// use autograd_core::{RefBackend, DType};
/// let m = try_generate_square_subsequent_mask::<RefBackend>(2, DType::F32).unwrap();
/// assert_eq!(m.to_vec::<f32>(), vec![0.0, f32::NEG_INFINITY, 0.0, 0.0]);
/// ```
#[track_caller]
pub fn try_generate_square_subsequent_mask<B: Backend>(sz: usize, dtype: DType) -> Result<Tensor<B>> {
    try_causal_mask(sz, sz, dtype)
}
