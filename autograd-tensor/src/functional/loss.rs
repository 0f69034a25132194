//! Loss functions with PyTorch's reductions.

use crate::Tensor;
use autograd_core::{Backend, DType, Error, Result, Shape};
use std::panic::Location;

/// How a loss combines per-element values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The mean over elements (PyTorch's default).
    #[default]
    Mean,
    /// The sum.
    Sum,
    /// No reduction: one value per element (or per sample).
    None,
}

fn reduce<B: Backend>(l: Tensor<B>, r: Reduction) -> Result<Tensor<B>> {
    match r {
        Reduction::Mean => l.try_mean(),
        Reduction::Sum => l.try_sum(),
        Reduction::None => Ok(l),
    }
}

fn same_shape<B: Backend>(op: &'static str, a: &Tensor<B>, b: &Tensor<B>, loc: &'static Location<'static>) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(Error::shape_mismatch(op, a.shape(), b.shape(), Some(loc)));
    }
    Ok(())
}

/// Mean squared error `(input - target)^2`.
///
/// ```
/// use autograd_tensor::{Tensor, functional::{mse_loss, Reduction}};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 3.0], [2]);
/// let y = Tensor::<RefBackend>::from_vec(vec![0.0f64, 1.0], [2]);
/// assert_eq!(mse_loss(&x, &y, Reduction::Mean).unwrap().item(), 2.5);
/// ```
#[track_caller]
pub fn mse_loss<B: Backend>(input: &Tensor<B>, target: &Tensor<B>, reduction: Reduction) -> Result<Tensor<B>> {
    same_shape("mse_loss", input, target, Location::caller())?;
    let d = input.try_sub(target)?;
    reduce(d.try_mul(&d)?, reduction)
}

/// Mean absolute error `|input - target|` (gradient 0 where they are equal).
#[track_caller]
pub fn l1_loss<B: Backend>(input: &Tensor<B>, target: &Tensor<B>, reduction: Reduction) -> Result<Tensor<B>> {
    same_shape("l1_loss", input, target, Location::caller())?;
    reduce(input.try_sub(target)?.try_abs()?, reduction)
}

/// Smooth L1: `0.5 d^2 / beta` where `|d| < beta`, else `|d| - 0.5 beta`.
#[track_caller]
pub fn smooth_l1_loss<B: Backend>(input: &Tensor<B>, target: &Tensor<B>, beta: f64, reduction: Reduction) -> Result<Tensor<B>> {
    same_shape("smooth_l1_loss", input, target, Location::caller())?;
    let d = input.try_sub(target)?;
    let a = d.try_abs()?;
    if beta == 0.0 {
        return reduce(a, reduction);
    }
    let quad = d.try_mul(&d)?.try_mul_scalar(0.5 / beta)?;
    let lin = a.try_sub_scalar(0.5 * beta)?;
    reduce(Tensor::try_where_cond(&a.lt_scalar(beta), &quad, &lin)?, reduction)
}

/// Huber: `0.5 d^2` where `|d| < delta`, else `delta (|d| - 0.5 delta)`.
#[track_caller]
pub fn huber_loss<B: Backend>(input: &Tensor<B>, target: &Tensor<B>, delta: f64, reduction: Reduction) -> Result<Tensor<B>> {
    same_shape("huber_loss", input, target, Location::caller())?;
    let d = input.try_sub(target)?;
    let a = d.try_abs()?;
    let quad = d.try_mul(&d)?.try_mul_scalar(0.5)?;
    let lin = a.try_sub_scalar(0.5 * delta)?.try_mul_scalar(delta)?;
    reduce(Tensor::try_where_cond(&a.lt_scalar(delta), &quad, &lin)?, reduction)
}

/// Binary cross-entropy on logits, computed stably:
/// `max(x, 0) - x t + log(1 + exp(-|x|))`, with an optional `pos_weight`
/// multiplying the positive term (broadcast over the last dim).
#[track_caller]
pub fn binary_cross_entropy_with_logits<B: Backend>(
    input: &Tensor<B>,
    target: &Tensor<B>,
    pos_weight: Option<&Tensor<B>>,
    reduction: Reduction,
) -> Result<Tensor<B>> {
    same_shape("binary_cross_entropy_with_logits", input, target, Location::caller())?;
    // log(1 + exp(-|x|)) + max(-x, 0) = -log(sigmoid(x)), without overflow
    let log_sig_neg = input.try_abs()?.try_neg()?.try_exp()?.try_log1p()?.try_add(&input.try_neg()?.try_relu()?)?;
    let l = match pos_weight {
        None => input.try_mul(&target.try_rsub_scalar(1.0)?)?.try_add(&log_sig_neg)?,
        Some(pw) => {
            let w = pw.try_sub_scalar(1.0)?.try_mul(target)?.try_add_scalar(1.0)?;
            input.try_mul(&target.try_rsub_scalar(1.0)?)?.try_add(&w.try_mul(&log_sig_neg)?)?
        }
    };
    reduce(l, reduction)
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

/// Options of [`cross_entropy`] beyond the reduction.
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
pub fn nll_loss<B: Backend>(
    input: &Tensor<B>,
    target: &Tensor<B>,
    weight: Option<&Tensor<B>>,
    ignore_index: Option<i64>,
    reduction: Reduction,
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    check_class_input("nll_loss", input, target, loc)?;
    let c = input.dims()[1] as i64;
    let tv = target.to_vec::<i64>();
    if let Some(bad) = tv.iter().find(|&&t| (t < 0 || t >= c) && Some(t) != ignore_index) {
        return Err(Error::IndexOutOfRange { op: "nll_loss", index: *bad, dim: 1, size: c as usize });
    }
    // Ignored targets gather class 0 and get weight 0.
    let safe: Vec<i64> = tv.iter().map(|&t| if Some(t) == ignore_index { 0 } else { t }).collect();
    let n = tv.len();
    let idx = Tensor::<B>::try_from_vec(safe.clone(), Shape::from([n, 1]))?;
    let picked = input.try_gather(1, &idx)?.try_reshape_to(&Shape::from([n]))?.try_neg()?;
    let w: Vec<f64> = match weight {
        Some(w) => {
            let wv = w.to_vec_f64();
            safe.iter().zip(&tv).map(|(&s, &t)| if Some(t) == ignore_index { 0.0 } else { wv[s as usize] }).collect()
        }
        None => tv.iter().map(|&t| if Some(t) == ignore_index { 0.0 } else { 1.0 }).collect(),
    };
    let wsum: f64 = w.iter().sum();
    let wt = Tensor::<B>::try_from_host(autograd_core::HostData::from_f64(&w, input.dtype()), Shape::from([n]))?;
    let l = picked.try_mul(&wt)?;
    match reduction {
        Reduction::None => Ok(l),
        Reduction::Sum => l.try_sum(),
        Reduction::Mean => l.try_sum()?.try_div_scalar(wsum),
    }
}

/// Cross-entropy of logits `[N, C]` against class indices `[N]`:
/// `nll_loss(log_softmax(input, 1), target)`, with optional class weights,
/// `ignore_index` and label smoothing.
///
/// ```
/// use autograd_tensor::{Tensor, functional::{cross_entropy, Reduction}};
/// use autograd_core::RefBackend;
/// let logits = Tensor::<RefBackend>::from_vec(vec![0.0f64, 0.0], [1, 2]);
/// let t = Tensor::<RefBackend>::from_vec(vec![1i64], [1]);
/// let l = cross_entropy(&logits, &t, Reduction::Mean, &Default::default()).unwrap();
/// assert!((l.item() - 2f64.ln()).abs() < 1e-15);
/// ```
#[track_caller]
pub fn cross_entropy<B: Backend>(
    input: &Tensor<B>,
    target: &Tensor<B>,
    reduction: Reduction,
    opts: &CrossEntropyOptions<B>,
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    check_class_input("cross_entropy", input, target, loc)?;
    let logp = input.try_log_softmax(1)?;
    let nll = nll_loss(&logp, target, opts.weight.as_ref(), opts.ignore_index, reduction)?;
    if opts.label_smoothing == 0.0 {
        return Ok(nll);
    }
    // PyTorch: (1 - eps) * nll + eps * (mean over classes of -w_c logp_c), same reduction.
    let eps = opts.label_smoothing;
    let c = input.dims()[1] as f64;
    let tv = target.to_vec::<i64>();
    let keep: Vec<f64> = tv.iter().map(|&t| if Some(t) == opts.ignore_index { 0.0 } else { 1.0 }).collect();
    let keep_t = Tensor::<B>::try_from_host(autograd_core::HostData::from_f64(&keep, input.dtype()), Shape::from([tv.len()]))?;
    let lp = match &opts.weight {
        Some(w) => logp.try_mul(w)?,
        None => logp,
    };
    let smooth = lp.try_sum_dims(&[1], false)?.try_neg()?.try_div_scalar(c)?.try_mul(&keep_t)?;
    let smooth = match reduction {
        Reduction::None => smooth,
        Reduction::Sum => smooth.try_sum()?,
        Reduction::Mean => {
            let denom = match &opts.weight {
                Some(w) => {
                    let wv = w.to_vec_f64();
                    tv.iter().zip(&keep).map(|(&t, &k)| if k > 0.0 { wv[t as usize] } else { 0.0 }).sum::<f64>()
                }
                None => keep.iter().sum(),
            };
            smooth.try_sum()?.try_div_scalar(denom)?
        }
    };
    nll.try_mul_scalar(1.0 - eps)?.try_add(&smooth.try_mul_scalar(eps)?)
}
