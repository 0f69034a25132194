//! Loss functions with PyTorch's reductions.

use crate::Tensor;
use autograd_core::{Backend, DType, Error, HostData, Result, Shape};
use std::panic::Location;

use crate::recording::pointwise_composite;
pub use crate::reduction::Reduction;

fn same_shape<B: Backend>(op: &'static str, a: &Tensor<B>, b: &Tensor<B>, loc: &'static Location<'static>) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(Error::shape_mismatch(op, a.shape(), b.shape(), Some(loc)));
    }
    Ok(())
}

/// Mean squared error `(input - target)^2`.
///
/// ```
/// use autograd_tensor::{Tensor, functional::{try_mse_loss, Reduction}};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 3.0], [2]);
/// let y = Tensor::<RefBackend>::from_vec(vec![0.0f64, 1.0], [2]);
/// assert_eq!(try_mse_loss(&x, &y, Reduction::Mean).unwrap().item(), 2.5);
/// ```
#[track_caller]
pub fn try_mse_loss<B: Backend>(input: &Tensor<B>, target: &Tensor<B>, reduction: Reduction) -> Result<Tensor<B>> {
    let (input, target) = (&crate::autocast::cast("mse_loss", input)?, &crate::autocast::cast("mse_loss", target)?);
    same_shape("mse_loss", input, target, Location::caller())?;
    let d = crate::no_grad(|| input.try_sub(target))?;
    let per_elem = crate::no_grad(|| d.try_mul(&d))?;
    // one MseLossBackward0 node: d/dinput = 2 (input - target) = -d/dtarget
    pointwise_composite("MseLossBackward0", &[input, target], per_elem, reduction, |xs, need| {
        let d2 = xs[0].try_sub(&xs[1])?.try_mul_scalar(2.0)?;
        Ok(vec![need[0].then(|| d2.clone()), if need[1] { Some(d2.try_neg()?) } else { None }])
    })
}

/// Mean absolute error `|input - target|` (gradient 0 where they are equal).
#[track_caller]
pub fn try_l1_loss<B: Backend>(input: &Tensor<B>, target: &Tensor<B>, reduction: Reduction) -> Result<Tensor<B>> {
    let (input, target) = (&crate::autocast::cast("l1_loss", input)?, &crate::autocast::cast("l1_loss", target)?);
    same_shape("l1_loss", input, target, Location::caller())?;
    reduction.apply(input.try_sub(target)?.try_abs()?)
}

/// Smooth L1: `0.5 d^2 / beta` where `|d| < beta`, else `|d| - 0.5 beta`
/// (one `SmoothL1LossBackward0` node; `beta = 0` is the L1 loss).
///
/// ```
/// use autograd_tensor::{Tensor, functional::{try_smooth_l1_loss, Reduction}};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![0.5f64, 3.0], [2]).requires_grad_(true);
/// let y = Tensor::<RefBackend>::zeros_dtype([2], autograd_core::DType::F64);
/// let l = try_smooth_l1_loss(&x, &y, 1.0, Reduction::Sum).unwrap();
/// assert_eq!(l.item(), 0.125 + 2.5);
/// l.backward().unwrap();
/// assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![0.5, 1.0]);
/// ```
#[track_caller]
pub fn try_smooth_l1_loss<B: Backend>(input: &Tensor<B>, target: &Tensor<B>, beta: f64, reduction: Reduction) -> Result<Tensor<B>> {
    let (input, target) = (&crate::autocast::cast("smooth_l1_loss", input)?, &crate::autocast::cast("smooth_l1_loss", target)?);
    let loc = Location::caller();
    same_shape("smooth_l1_loss", input, target, loc)?;
    if beta < 0.0 || beta.is_nan() {
        return Err(Error::InvalidShape { op: "smooth_l1_loss", msg: format!("beta must be >= 0, got {beta}"), location: Some(loc) });
    }
    let (input, target) = input.promote_pair(target)?;
    let per = crate::no_grad(|| -> Result<Tensor<B>> {
        let d = input.detach().try_sub(&target.detach())?;
        let a = d.try_abs()?;
        if beta == 0.0 {
            return Ok(a);
        }
        let quad = d.try_mul(&d)?.try_mul_scalar(0.5 / beta)?;
        Tensor::try_where_cond(&a.lt_mask(&a.scalar_like(beta))?, &quad, &a.try_sub_scalar(0.5 * beta)?)
    })?;
    pointwise_composite("SmoothL1LossBackward0", &[&input, &target], per, reduction, move |xs, need| {
        let d = xs[0].try_sub(&xs[1])?;
        // d/dd: d / beta inside the quadratic zone, sign(d) outside (and everywhere for beta = 0)
        let slope = if beta == 0.0 { d.try_sign()? } else { d.try_div_scalar(beta)?.try_clamp(Some(-1.0), Some(1.0))? };
        Ok(vec![need[0].then(|| slope.clone()), if need[1] { Some(slope.try_neg()?) } else { None }])
    })
}

/// Huber: `0.5 d^2` where `|d| < delta`, else `delta (|d| - 0.5 delta)`
/// (one `HuberLossBackward0` node).
///
/// ```
/// use autograd_tensor::{Tensor, functional::{try_huber_loss, Reduction}};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![0.5f64, -3.0], [2]).requires_grad_(true);
/// let y = Tensor::<RefBackend>::zeros_dtype([2], autograd_core::DType::F64);
/// try_huber_loss(&x, &y, 2.0, Reduction::Sum).unwrap().backward().unwrap();
/// assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![0.5, -2.0]);
/// ```
#[track_caller]
pub fn try_huber_loss<B: Backend>(input: &Tensor<B>, target: &Tensor<B>, delta: f64, reduction: Reduction) -> Result<Tensor<B>> {
    let (input, target) = (&crate::autocast::cast("huber_loss", input)?, &crate::autocast::cast("huber_loss", target)?);
    let loc = Location::caller();
    same_shape("huber_loss", input, target, loc)?;
    if delta <= 0.0 || delta.is_nan() {
        return Err(Error::InvalidShape { op: "huber_loss", msg: format!("delta must be > 0, got {delta}"), location: Some(loc) });
    }
    let (input, target) = input.promote_pair(target)?;
    let per = crate::no_grad(|| -> Result<Tensor<B>> {
        let d = input.detach().try_sub(&target.detach())?;
        let a = d.try_abs()?;
        let quad = d.try_mul(&d)?.try_mul_scalar(0.5)?;
        let lin = a.try_sub_scalar(0.5 * delta)?.try_mul_scalar(delta)?;
        Tensor::try_where_cond(&a.lt_mask(&a.scalar_like(delta))?, &quad, &lin)
    })?;
    pointwise_composite("HuberLossBackward0", &[&input, &target], per, reduction, move |xs, need| {
        let slope = xs[0].try_sub(&xs[1])?.try_clamp(Some(-delta), Some(delta))?;
        Ok(vec![need[0].then(|| slope.clone()), if need[1] { Some(slope.try_neg()?) } else { None }])
    })
}

/// `-log(sigmoid(x)) = log(1 + exp(-|x|)) + max(-x, 0)`, without overflow.
fn neg_log_sig<B: Backend>(x: &Tensor<B>) -> Result<Tensor<B>> {
    x.try_abs()?.try_neg()?.try_exp()?.try_log1p()?.try_add(&x.try_neg()?.try_relu()?)
}

/// The per-element weight of the log term: `1 + (pos_weight - 1) t`.
fn weight_of<B: Backend>(t: &Tensor<B>, pw: &Tensor<B>) -> Result<Tensor<B>> {
    pw.try_sub_scalar(1.0)?.try_mul(t)?.try_add_scalar(1.0)
}

/// Binary cross-entropy on logits, computed stably:
/// `(1 - t) x + w log(1 + exp(-x))` with `w = 1 + (pos_weight - 1) t`
/// (`pos_weight` broadcast over the last dim), as one
/// `BinaryCrossEntropyWithLogitsBackward0` node whose gradient is the closed
/// form `w sigmoid(x) - pos_weight t` (`sigmoid(x) - t` without weights).
///
/// ```
/// use autograd_tensor::{Tensor, functional::{try_binary_cross_entropy_with_logits, Reduction}};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![0.0f64], [1]).requires_grad_(true);
/// let t = Tensor::<RefBackend>::from_vec(vec![1.0f64], [1]);
/// let l = try_binary_cross_entropy_with_logits(&x, &t, None, Reduction::Mean).unwrap();
/// assert_eq!(l.grad_fn().unwrap().name(), "BinaryCrossEntropyWithLogitsBackward0");
/// l.backward().unwrap();
/// assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![-0.5]); // sigmoid(0) - 1, as PyTorch
/// ```
#[track_caller]
pub fn try_binary_cross_entropy_with_logits<B: Backend>(
    input: &Tensor<B>,
    target: &Tensor<B>,
    pos_weight: Option<&Tensor<B>>,
    reduction: Reduction,
) -> Result<Tensor<B>> {
    let (input, target) = (
        &crate::autocast::cast("binary_cross_entropy_with_logits", input)?,
        &crate::autocast::cast("binary_cross_entropy_with_logits", target)?,
    );
    let pos_weight = pos_weight.map(|w| crate::autocast::cast("binary_cross_entropy_with_logits", w)).transpose()?;
    let pos_weight = pos_weight.as_ref();
    let loc = Location::caller();
    same_shape("binary_cross_entropy_with_logits", input, target, loc)?;
    let (input, target) = input.promote_pair(target)?;
    let pw = match pos_weight {
        Some(pw) => {
            // pos_weight broadcasts onto the input, never the input onto something larger
            if &pw.shape().broadcast(input.shape(), "binary_cross_entropy_with_logits").map_err(|e| e.at(loc))? != input.shape() {
                return Err(Error::shape_mismatch("binary_cross_entropy_with_logits", pw.shape(), input.shape(), Some(loc)));
            }
            Some(pw.try_to_dtype(input.dtype())?)
        }
        None => None,
    };
    let per = crate::no_grad(|| -> Result<Tensor<B>> {
        let (x, t) = (input.detach(), target.detach());
        let lin = x.try_mul(&t.try_rsub_scalar(1.0)?)?;
        match &pw {
            None => lin.try_add(&neg_log_sig(&x)?),
            Some(pw) => lin.try_add(&weight_of(&t, &pw.detach())?.try_mul(&neg_log_sig(&x)?)?),
        }
    })?;
    let mut inputs = vec![&input, &target];
    if let Some(p) = &pw {
        inputs.push(p);
    }
    pointwise_composite("BinaryCrossEntropyWithLogitsBackward0", &inputs, per, reduction, move |xs, need| {
        let (x, t, pw) = (&xs[0], &xs[1], xs.get(2));
        let mut out = Vec::with_capacity(3);
        out.push(if need[0] {
            let sig = x.try_sigmoid()?;
            Some(match pw {
                None => sig.try_sub(t)?,
                Some(pw) => weight_of(t, pw)?.try_mul(&sig)?.try_sub(&pw.try_mul(t)?)?,
            })
        } else {
            None
        });
        out.push(if need[1] {
            // d/dt = -x + (pos_weight - 1) (-log sigmoid(x))
            Some(match pw {
                None => x.try_neg()?,
                Some(pw) => x.try_neg()?.try_add(&pw.try_sub_scalar(1.0)?.try_mul(&neg_log_sig(x)?)?)?,
            })
        } else {
            None
        });
        if pw.is_some() {
            out.push(if need[2] { Some(t.try_mul(&neg_log_sig(x)?)?) } else { None });
        }
        Ok(out)
    })
}

fn check_class_input<B: Backend>(op: &'static str, input: &Tensor<B>, target: &Tensor<B>, loc: &'static Location<'static>) -> Result<()> {
    if input.rank() != 2 || target.rank() != 1 || target.dims()[0] != input.dims()[0] || target.dtype() != DType::I64 {
        return Err(Error::InvalidShape {
            op,
            msg: format!(
                "expected input [N, C] and I64 class indices [N], got input {:?} and target {:?} of {:?}",
                input.shape(),
                target.shape(),
                target.dtype()
            ),
            location: Some(loc),
        });
    }
    Ok(())
}

/// Options of [`try_cross_entropy`] beyond the reduction.
#[derive(Clone, Debug, Default)]
pub struct CrossEntropyOptions<B: Backend> {
    /// Per-class weights `[C]`.
    pub weight: Option<Tensor<B>>,
    /// Targets equal to this class contribute nothing (and are not counted by the mean).
    pub ignore_index: Option<i64>,
    /// Mixes the one-hot target with the uniform distribution.
    pub label_smoothing: f64,
}

/// Negative log-likelihood of class indices, `input` holding log-probabilities `[N, C]`.
/// The mean divides by the summed weights of the counted targets, as PyTorch does.
#[track_caller]
pub fn try_nll_loss<B: Backend>(
    input: &Tensor<B>,
    target: &Tensor<B>,
    weight: Option<&Tensor<B>>,
    ignore_index: Option<i64>,
    reduction: Reduction,
) -> Result<Tensor<B>> {
    let (input, target) = (&crate::autocast::cast("nll_loss", input)?, &crate::autocast::cast("nll_loss", target)?);
    let weight = weight.map(|w| crate::autocast::cast("nll_loss", w)).transpose()?;
    let weight = weight.as_ref();
    let loc = Location::caller();
    check_class_input("nll_loss", input, target, loc)?;
    let c = input.dims()[1];
    if let Some(w) = weight
        && w.dims() != [c]
    {
        return Err(Error::InvalidShape {
            op: "nll_loss",
            msg: format!("weight must have shape [{c}] (one per class), got {:?}", w.shape()),
            location: Some(loc),
        });
    }
    let n = target.numel();
    let targets = Targets { dtype: input.dtype(), target, weight, ignore_index, reduction, classes: c };
    // One path, captured or not: the targets stay on the device (a bad one
    // is the gather's `Err`). Anomaly mode reads them first, for an `Err`
    // naming the loss and the caller's line.
    if crate::is_anomaly_enabled() && !crate::capture::is_capturing() {
        check_targets(&targets, loc)?;
    }
    // The gathered indices, each sample's weight (0 where ignored), the
    // mean's divisor, and the gradient's per-sample coefficients.
    let Weighted { idx, wt, wsum, coef } = weighted(&targets)?;
    let out = crate::no_grad(|| -> Result<Tensor<B>> {
        let picked = if c == 0 { Tensor::try_zeros_dtype([n, 1], input.dtype())? } else { input.detach().try_gather(1, &idx)? };
        let l = picked.try_reshape_to(&Shape::from([n]))?.try_neg()?.try_mul(&wt)?;
        match reduction {
            Reduction::None => Ok(l),
            Reduction::Sum => l.try_sum(),
            // PyTorch divides by the summed weights of the counted targets (NaN when none counts)
            Reduction::Mean => l.try_sum()?.try_div(&wsum),
        }
    })?;
    let in_shape = input.shape().clone();
    let (coef2, idx2) = (coef.clone(), idx.clone());
    let out = Tensor::record(out.inner.storage.clone(), out.layout().clone(), out.dtype(), "NllLossBackward0", &[input], || {
        crate::recording::saving(move |_, g: &Tensor<B>| {
            let g = if reduction == Reduction::None { g.try_reshape_to(&Shape::from([n, 1]))? } else { g.clone() };
            let src = coef.try_mul(&g)?.try_expand_to(&Shape::from([n, 1]))?;
            if c == 0 {
                return Ok(vec![Some(Tensor::try_zeros_dtype(in_shape.clone(), src.dtype())?)]);
            }
            Ok(vec![Some(Tensor::try_scatter_add_new(&in_shape, 1, &idx, &src)?)])
        })
    });
    // Forward mode: the same linear map, transposed: sum_i coef_i * tangent[i, target_i].
    crate::recording::with_tangent(out, &[input], |t| {
        let tan = t[0].as_ref().expect("tangent");
        let picked = if c == 0 { Tensor::try_zeros_dtype([n, 1], tan.dtype())? } else { tan.try_gather(1, &idx2)? };
        let per = picked.try_mul(&coef2)?.try_reshape_to(&Shape::from([n]))?;
        if reduction == Reduction::None { Ok(per) } else { per.try_sum() }
    })
}

/// What `nll_loss` derives from the targets.
struct Weighted<B: Backend> {
    /// `[N, 1]` class indices to gather (ignored targets gather class 0).
    idx: Tensor<B>,
    /// `[N]` per-sample weights, 0 where ignored.
    wt: Tensor<B>,
    /// The mean's divisor.
    wsum: Tensor<B>,
    /// `[N, 1]` gradient coefficients: `-w_i` (over `wsum` for a mean), 0 where ignored.
    coef: Tensor<B>,
}

/// What `nll_loss` reads its per-sample weights from.
struct Targets<'a, B: Backend> {
    /// The loss's dtype.
    dtype: DType,
    /// `[N]` class indices.
    target: &'a Tensor<B>,
    /// `[C]` class weights.
    weight: Option<&'a Tensor<B>>,
    ignore_index: Option<i64>,
    reduction: Reduction,
    /// `C`.
    classes: usize,
}

/// Reads the targets on the host and refuses one out of range with the
/// loss's own message (anomaly mode's check).
fn check_targets<B: Backend>(t: &Targets<'_, B>, loc: &'static Location<'static>) -> Result<()> {
    let c = t.classes;
    let tv = t.target.try_to_vec::<i64>()?;
    if let Some(bad) = tv.iter().find(|&&x| (x < 0 || x >= c as i64) && Some(x) != t.ignore_index) {
        return Err(Error::IndexOutOfRange { op: "nll_loss", index: *bad, dim: 1, size: c, location: Some(loc) });
    }
    Ok(())
}

/// What the loss derives from the targets, as tensor ops (no host read: a
/// captured step's targets are a program input, and reading them would bake
/// one batch in). An out-of-range target is the gather's `Err`.
fn weighted<B: Backend>(t: &Targets<'_, B>) -> Result<Weighted<B>> {
    let Targets { dtype, target, weight, ignore_index, reduction, classes: c } = *t;
    crate::no_grad(|| {
        let n = target.numel();
        // The targets stay int64: compared exactly (through f64 an index
        // above 2^53 would round), and with no float arithmetic a device
        // without f64 keeps them.
        let t = target.detach();
        let int = |v: i64| Tensor::try_from_host(HostData::I64(vec![v]), Shape::scalar());
        let (idx, keep) = match ignore_index {
            Some(i) => {
                let kept = t.try_ne(&int(i)?)?;
                // an ignored target gathers class 0 (its weight is 0)
                (Tensor::try_where_cond(&kept, &t, &int(0)?)?, kept.try_to_dtype(dtype)?)
            }
            None => (t.clone(), Tensor::full_dtype(Shape::scalar(), 1.0, dtype).try_expand_to(t.shape())?),
        };
        let idx = idx.try_reshape_to(&Shape::from([n, 1]))?;
        let wt = match weight {
            Some(w) if c > 0 => {
                w.detach().try_to_dtype(dtype)?.try_index_select(0, &idx.try_reshape_to(&Shape::from([n]))?)?.try_mul(&keep)?
            }
            _ => keep,
        };
        let wsum = wt.try_sum()?;
        let coef = match reduction {
            Reduction::Mean => {
                let zero = wt.scalar_like(0.0);
                let q = wt.try_neg()?.try_div(&wsum)?;
                Tensor::try_where_cond(&wt.try_eq(&zero)?, &zero, &q)?
            }
            _ => wt.try_neg()?,
        }
        .try_reshape_to(&Shape::from([n, 1]))?;
        Ok(Weighted { idx, wt, wsum, coef })
    })
}

/// Cross-entropy of logits `[N, C]` against class indices `[N]`:
/// `try_nll_loss(log_softmax(input, 1), target)`, with optional class weights,
/// `ignore_index` and label smoothing.
///
/// ```
/// use autograd_tensor::{Tensor, functional::{try_cross_entropy, Reduction}};
/// use autograd_core::RefBackend;
/// let logits = Tensor::<RefBackend>::from_vec(vec![0.0f64, 0.0], [1, 2]);
/// let t = Tensor::<RefBackend>::from_vec(vec![1i64], [1]);
/// let l = try_cross_entropy(&logits, &t, Reduction::Mean, &Default::default()).unwrap();
/// assert!((l.item() - 2f64.ln()).abs() < 1e-15);
/// ```
#[track_caller]
pub fn try_cross_entropy<B: Backend>(
    input: &Tensor<B>,
    target: &Tensor<B>,
    reduction: Reduction,
    opts: &CrossEntropyOptions<B>,
) -> Result<Tensor<B>> {
    let (input, target) = (&crate::autocast::cast("cross_entropy", input)?, &crate::autocast::cast("cross_entropy", target)?);
    let loc = Location::caller();
    check_class_input("cross_entropy", input, target, loc)?;
    let logp = input.try_log_softmax(1)?;
    let nll = try_nll_loss(&logp, target, opts.weight.as_ref(), opts.ignore_index, reduction)?;
    if opts.label_smoothing == 0.0 {
        return Ok(nll);
    }
    // PyTorch: (1 - eps) * nll + eps * (mean over classes of -w_c logp_c), same reduction.
    let eps = opts.label_smoothing;
    let c = input.dims()[1] as f64;
    let lp = match &opts.weight {
        Some(w) => logp.try_mul(w)?,
        None => logp,
    };
    // Which samples count (not ignored), and the mean's divisor: the
    // summed class weights of the counted targets.
    let dtype = input.dtype();
    let classes = input.dims()[1];
    let unweighted =
        weighted(&Targets { dtype, target, weight: None, ignore_index: opts.ignore_index, reduction: Reduction::Sum, classes })?;
    let denom = match (&opts.weight, reduction) {
        (Some(_), Reduction::Mean) => {
            weighted(&Targets { dtype, target, weight: opts.weight.as_ref(), ignore_index: opts.ignore_index, reduction, classes })?.wsum
        }
        _ => unweighted.wsum,
    };
    let keep_t = unweighted.wt;
    let smooth = lp.try_sum_dims(&[1], false)?.try_neg()?.try_div_scalar(c)?.try_mul(&keep_t)?;
    let smooth = match reduction {
        Reduction::None => smooth,
        Reduction::Sum => smooth.try_sum()?,
        Reduction::Mean => smooth.try_sum()?.try_div(&denom)?,
    };
    nll.try_mul_scalar(1.0 - eps)?.try_add(&smooth.try_mul_scalar(eps)?)
}
