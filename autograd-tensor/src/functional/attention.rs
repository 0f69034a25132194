//! Attention as a function: `scaled_dot_product_attention` and the masks it
//! takes (boolean, additive, causal), as PyTorch's math path computes them.

use super::try_dropout;
use crate::grad_mode::is_grad_enabled;
use crate::node::{BackwardCtx, BackwardOp, SavedTensor};
use crate::{GradOptions, Tensor, autograd};
use autograd_core::attention::AttentionSpec;
use autograd_core::{Backend, DType, Error, Layout, Result, Shape};
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
    /// The fused node derives its mask from one draw of the generator
    /// ([`autograd_core::attention::Dropout`]), the math path draws one
    /// number per weight: after one `manual_seed` the two drop different
    /// weights (as PyTorch's flash and math kernels do).
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
    sdpa(q, k, v, options, true, Location::caller())
}

/// [`try_scaled_dot_product_attention`] always on the math path (PyTorch's
/// `_scaled_dot_product_attention_math`, or `sdpa_kernel(SDPBackend.MATH)`):
/// products, the mask, a softmax and a product, each its own graph node,
/// the attention matrix held for backward. The fused path is checked
/// against it; use it to compare, or to differentiate through a step
/// the fused node does not keep.
///
/// ```
/// use autograd_tensor::{Tensor, functional::{try_scaled_dot_product_attention, try_scaled_dot_product_attention_math, SdpaOptions}};
/// use autograd_core::RefBackend;
/// let q = Tensor::<RefBackend>::from_vec(vec![0.5f64, -1.0, 2.0, 0.25, 1.0, 0.0], [3, 2]);
/// let o = SdpaOptions { is_causal: true, ..Default::default() };
/// let (a, b) = (try_scaled_dot_product_attention(&q, &q, &q, o).unwrap(), try_scaled_dot_product_attention_math(&q, &q, &q, o).unwrap());
/// assert!(a.to_vec::<f64>().iter().zip(b.to_vec::<f64>()).all(|(x, y)| (x - y).abs() < 1e-15));
/// ```
#[track_caller]
pub fn try_scaled_dot_product_attention_math<B: Backend>(
    q: &Tensor<B>,
    k: &Tensor<B>,
    v: &Tensor<B>,
    options: SdpaOptions<'_, B>,
) -> Result<Tensor<B>> {
    sdpa(q, k, v, options, false, Location::caller())
}

/// The checks, then the fused node where it applies ([`fusable`]) and
/// `may_fuse` allows, else the math path.
fn sdpa<B: Backend>(
    q: &Tensor<B>,
    k: &Tensor<B>,
    v: &Tensor<B>,
    options: SdpaOptions<'_, B>,
    may_fuse: bool,
    loc: &'static Location<'static>,
) -> Result<Tensor<B>> {
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
    if may_fuse && fusable(q, k, v, options) {
        let scale = options.scale.unwrap_or(1.0 / (q.dims()[rq - 1] as f64).sqrt());
        return fused(q, k, v, options, scale).map_err(|e| e.renamed("scaled_dot_product_attention", loc));
    }
    math_path(q, k, v, options, None, loc)
}

/// PyTorch's math path (`_scaled_dot_product_attention_math`) on checked
/// inputs: products, the mask added, a (safe) softmax, dropout, a product.
/// The definition the fused node matches, and what its `create_graph`
/// backward differentiates. `keep`: the dropout scales of a fused call to
/// apply instead of a new draw (its `create_graph` backward recomputes
/// the same function).
fn math_path<B: Backend>(
    q: &Tensor<B>,
    k: &Tensor<B>,
    v: &Tensor<B>,
    options: SdpaOptions<'_, B>,
    keep: Option<&Tensor<B>>,
    loc: &'static Location<'static>,
) -> Result<Tensor<B>> {
    let (rq, rk) = (q.rank(), k.rank());
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
    let weights = match keep {
        Some(m) => probs.try_mul(m)?,
        None => try_dropout(&probs, options.dropout_p, options.dropout_p > 0.0)?,
    };
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

/// Whether a call runs as one fused node ([`Backend::attention`]): a
/// dropout probability below 1 (the kernel draws its mask from a seed, see
/// [`autograd_core::attention::Dropout`]; `p = 1` drops everything), no forward-mode tangent, and a
/// mask that needs no gradient (a mask's gradient is the whole `L x S`
/// score gradient the fused node never forms). Everything else takes the
/// math path, which is also the definition the fused node must match
/// (with dropout, for the same mask: [`dropout_scales`]).
fn fusable<B: Backend>(q: &Tensor<B>, k: &Tensor<B>, v: &Tensor<B>, o: SdpaOptions<'_, B>) -> bool {
    o.dropout_p < 1.0
        && [q, k, v].iter().all(|t| t.tangent().is_none())
        && o.attn_mask.is_none_or(|m| m.tangent().is_none() && !(m.requires_grad() && is_grad_enabled()))
}

/// The batch dims of q, k, v (and the mask) broadcast together: the
/// layouts the primitive reads (stride 0 where broadcast) and the batch shape.
fn broadcast_layouts<B: Backend>(ts: &[&Tensor<B>]) -> Result<(Vec<Layout>, Vec<usize>)> {
    let mut batch = Shape::scalar();
    for t in ts {
        let r = t.rank();
        batch = batch.broadcast(&Shape::new(t.dims()[..r - 2].to_vec()), "scaled_dot_product_attention")?;
    }
    let layouts = ts
        .iter()
        .map(|t| {
            let r = t.rank();
            let full = Shape::new(batch.dims().iter().chain(&t.dims()[r - 2..]).copied().collect::<Vec<_>>());
            t.layout().broadcast_as(&full)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((layouts, batch.dims().to_vec()))
}

/// The fused forward as one node, `ScaledDotProductFlashAttentionBackward0`,
/// saving q, k, v, the output and each query's log-sum-exp (not the
/// attention matrix).
fn fused<B: Backend>(q: &Tensor<B>, k: &Tensor<B>, v: &Tensor<B>, o: SdpaOptions<'_, B>, scale: f64) -> Result<Tensor<B>> {
    let spec = AttentionSpec { scale, causal: o.is_causal, dropout: o.dropout_p };
    // dropout's seed: two draws of the library's generator (a `random`
    // call, so a compiled step draws a new one per replay)
    let seed = if o.dropout_p > 0.0 { Some(Tensor::<B>::try_rand_dtype([2], DType::F64)?) } else { None };
    let (rq, rv) = (q.rank(), v.rank());
    // a mask of fewer dims than the scores broadcasts from the right
    let mask = o.attn_mask.map(|m| m.detach());
    let mask_full = match &mask {
        Some(m) => {
            let scores = Shape::new(q.dims()[..rq - 1].iter().copied().chain([k.dims()[k.rank() - 2]]).collect::<Vec<_>>());
            let shape = m.shape().broadcast(&scores, "scaled_dot_product_attention")?;
            Some(m.try_expand_to(&shape)?)
        }
        None => None,
    };
    let all: Vec<&Tensor<B>> = [q, k, v].into_iter().chain(mask_full.as_ref()).collect();
    let (layouts, batch) = broadcast_layouts(&all)?;
    let mut layouts = layouts;
    layouts.extend(seed.as_ref().map(|s| s.layout().clone()));
    let storages: Vec<_> = all.iter().copied().chain(seed.as_ref()).map(|t| t.storage()).collect();
    let ins: Vec<(&B::Storage, &Layout)> = storages.iter().map(|s| &**s).zip(&layouts).collect();
    let (out, lse) = B::attention(&ins, spec)?;
    drop(storages);
    let (l, ev) = (q.dims()[rq - 2], v.dims()[rv - 1]);
    let out_shape = Shape::new(batch.iter().copied().chain([l, ev]).collect::<Vec<_>>());
    let lse = Tensor::from_storage(lse, Shape::new(batch.iter().copied().chain([l]).collect::<Vec<_>>()));
    Ok(Tensor::record_new(out, out_shape, "ScaledDotProductFlashAttentionBackward0", &[q, k, v], |out| FlashBackward {
        saved: [q, k, v].map(SavedTensor::new),
        needs: [q, k, v].map(|t| t.requires_grad()),
        out: SavedTensor::new(&out.get()),
        lse: SavedTensor::new(&lse),
        mask: mask.as_ref().map(SavedTensor::new),
        seed,
        spec,
    }))
}

/// The scales a fused call's dropout applied to its weights, `(..batch,
/// L, S)` in `dtype` (0 or `1 / (1 - p)`), from its seed: the mask the
/// kernels recompute, as a tensor for the math path
/// ([`Backend::attention_dropout`]: a primitive, so a compiled step
/// recomputes it from each replay's seed; no host read here).
fn dropout_scales<B: Backend>(seed: &Tensor<B>, p: f64, batch: &[usize], (l, s): (usize, usize), dtype: DType) -> Result<Tensor<B>> {
    let shape = Shape::new(batch.iter().copied().chain([l, s]).collect::<Vec<_>>());
    let scales = B::attention_dropout(&seed.storage(), seed.layout(), &shape, p, dtype)?;
    Ok(Tensor::from_storage(scales, shape))
}

/// The backward of the fused node: [`Backend::attention_backward`] from
/// the saved log-sum-exp, the gradients summed over broadcast batch dims.
/// Under `create_graph` the math path is recomputed and differentiated, so
/// every order of derivative holds.
struct FlashBackward<B: Backend> {
    saved: [SavedTensor<B>; 3],
    needs: [bool; 3],
    out: SavedTensor<B>,
    lse: SavedTensor<B>,
    /// Saved as the inputs are: modified in place before backward is an `Err`.
    mask: Option<SavedTensor<B>>,
    /// Dropout's seed (its own tensor: nothing else holds it).
    seed: Option<Tensor<B>>,
    spec: AttentionSpec,
}

impl<B: Backend> BackwardOp<B> for FlashBackward<B> {
    fn backward(&self, ctx: &BackwardCtx<'_, B>, g: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
        let [q, k, v] = [0, 1, 2].map(|i| self.saved[i].get(ctx.name()));
        let (q, k, v) = (q?, k?, v?);
        let mask = self.mask.as_ref().map(|m| m.get(ctx.name())).transpose()?;
        if is_grad_enabled() {
            let options =
                SdpaOptions { attn_mask: mask.as_ref(), dropout_p: 0.0, is_causal: self.spec.causal, scale: Some(self.spec.scale) };
            let keep = match &self.seed {
                Some(seed) => {
                    // the forward's batch (q, k, v and the mask broadcast): the output's, g's
                    let batch = &g.dims()[..g.rank() - 2];
                    let (l, s) = (q.dims()[q.rank() - 2], k.dims()[k.rank() - 2]);
                    Some(dropout_scales(seed, self.spec.dropout, batch, (l, s), q.dtype())?)
                }
                None => None,
            };
            let y = math_path(&q, &k, &v, options, keep.as_ref(), Location::caller())?;
            let wrt: Vec<Tensor<B>> = [&q, &k, &v].into_iter().zip(self.needs).filter(|(_, n)| *n).map(|(t, _)| t.clone()).collect();
            let opts = GradOptions { retain_graph: true, create_graph: true, allow_unused: true };
            let mut got = autograd::grad(&[y], &wrt, Some(std::slice::from_ref(g)), opts)?.into_iter();
            return Ok(self.needs.iter().map(|&n| if n { got.next().flatten() } else { None }).collect());
        }
        let (out, lse) = (self.out.get(ctx.name())?, self.lse.get(ctx.name())?);
        let mask_full = match &mask {
            Some(m) => {
                let scores = Shape::new(lse.dims().iter().copied().chain([k.dims()[k.rank() - 2]]).collect::<Vec<_>>());
                Some(m.try_expand_to(&m.shape().broadcast(&scores, "scaled_dot_product_attention")?)?)
            }
            None => None,
        };
        let all: Vec<&Tensor<B>> = [&q, &k, &v].into_iter().chain(mask_full.as_ref()).collect();
        let (mut layouts, _) = broadcast_layouts(&all)?;
        let mask_layout = if mask_full.is_some() { layouts.pop() } else { None };
        let tensors: Vec<&Tensor<B>> = [&q, &k, &v, &out, &lse, g].into_iter().chain(mask_full.as_ref()).collect();
        layouts.extend([out.layout().clone(), lse.layout().clone(), g.layout().clone()]);
        layouts.extend(mask_layout);
        layouts.extend(self.seed.as_ref().map(|s| s.layout().clone()));
        let tensors: Vec<&Tensor<B>> = tensors.into_iter().chain(self.seed.as_ref()).collect();
        let storages: Vec<_> = tensors.iter().map(|t| t.storage()).collect();
        let ins: Vec<(&B::Storage, &Layout)> = storages.iter().map(|s| &**s).zip(&layouts).collect();
        let grads = B::attention_backward(&ins, self.spec)?;
        drop(storages);
        let mut out = Vec::with_capacity(3);
        for ((d, t), (lay, need)) in grads.into_iter().zip([&q, &k, &v]).zip(layouts.iter().zip(self.needs)) {
            out.push(if need { Some(Tensor::from_storage(d, lay.shape().clone()).try_sum_to(t.shape())?) } else { None });
        }
        Ok(out)
    }
}
