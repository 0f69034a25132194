//! Gradient clipping (PyTorch's `torch.nn.utils.clip_grad_norm_` and
//! `clip_grad_value_`), in place on the parameters' gradients.

use crate::optimizer::trainable_grad;
use autograd_core::{Backend, Error, Result};
use autograd_tensor::{Tensor, no_grad};

/// Which norm [`clip_grad_norm_`] measures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NormType {
    /// The p-norm `(sum |g|^p)^(1/p)`; 2.0 is the usual choice.
    P(f64),
    /// The largest absolute value.
    Inf,
}

/// One gradient's norm as a 0-d tensor, computed on the device.
fn tensor_norm<B: Backend>(g: &Tensor<B>, norm: NormType) -> Result<Tensor<B>> {
    let g = g.detach();
    if let NormType::P(2.0) = norm {
        // g * g needs no |g| first: one temporary instead of two.
        return g.try_mul(&g)?.try_sum()?.try_sqrt();
    }
    let a = g.try_abs()?;
    match norm {
        NormType::Inf if a.numel() == 0 => Tensor::try_zeros_dtype([], g.dtype()),
        NormType::Inf => a.try_max(),
        NormType::P(1.0) => a.try_sum(),
        NormType::P(p) => a.try_powf(p)?.try_sum()?.try_powf(1.0 / p),
    }
}

pub(crate) fn scale_grads_<B: Backend>(params: &[Tensor<B>], factor: f64) -> Result<()> {
    for p in params {
        if let Some(g) = trainable_grad(p) {
            let c = Tensor::<B>::full_dtype([], factor, g.dtype());
            no_grad(|| g.try_mul_(&c))?;
        }
    }
    Ok(())
}

/// The norm of the per-tensor norms (PyTorch's `get_total_norm`).
fn combine<B: Backend>(norms: &[Tensor<B>], norm: NormType) -> Result<Tensor<B>> {
    let dtype = norms[0].dtype();
    let mut total: Option<Tensor<B>> = None;
    for n in norms {
        let n = n.try_to_dtype(dtype)?;
        let term = match norm {
            NormType::Inf | NormType::P(1.0) => n,
            NormType::P(2.0) => n.try_mul(&n)?,
            NormType::P(p) => n.try_powf(p)?,
        };
        total = Some(match (total, norm) {
            (None, _) => term,
            (Some(t), NormType::Inf) => t.try_maximum(&term)?,
            (Some(t), _) => t.try_add(&term)?,
        });
    }
    let total = total.expect("at least one norm");
    match norm {
        NormType::Inf | NormType::P(1.0) => Ok(total),
        NormType::P(2.0) => total.try_sqrt(),
        NormType::P(p) => total.try_powf(1.0 / p),
    }
}

fn check_norm_type(norm: NormType, op: &str) -> Result<()> {
    if let NormType::P(p) = norm
        && (p.is_nan() || p <= 0.0)
    {
        return Err(Error::msg(format!("{op}: norm type must be positive or Inf, got {p}")));
    }
    Ok(())
}

/// The norm of all gradients taken together, as a 0-d tensor computed on
/// the device without reading anything back (PyTorch's
/// `torch.nn.utils.get_total_norm`), in the first gradient's dtype; 0 when
/// no parameter has a gradient.
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_optim::{get_total_norm, NormType};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::from_vec(vec![0.0f64; 2], [2]).requires_grad_(true);
/// w.set_grad(Some(Tensor::from_vec(vec![3.0f64, 4.0], [2])));
/// assert_eq!(get_total_norm(&[w], NormType::P(2.0)).unwrap().item(), 5.0);
/// ```
pub fn get_total_norm<B: Backend>(params: &[Tensor<B>], norm: NormType) -> Result<Tensor<B>> {
    check_norm_type(norm, "get_total_norm")?;
    let norms = params.iter().filter_map(trainable_grad).map(|g| tensor_norm(&g, norm)).collect::<Result<Vec<_>>>()?;
    if norms.is_empty() {
        return Tensor::try_zeros_dtype([], autograd_core::DType::F32);
    }
    no_grad(|| combine(&norms, norm))
}

/// Scales every gradient by `min(max_norm / (total_norm + 1e-6), 1)` in
/// place, the factor computed on the device (PyTorch's
/// `torch.nn.utils.clip_grads_with_norm_`): nothing is read back, so a
/// compiled step can clip.
pub fn clip_grads_with_norm_<B: Backend>(params: &[Tensor<B>], max_norm: f64, total_norm: &Tensor<B>) -> Result<()> {
    let scale = no_grad(|| {
        let t = total_norm.detach();
        Tensor::try_full_dtype([], max_norm, t.dtype())?.try_div(&t.try_add_scalar(1e-6)?)?.try_clamp(None, Some(1.0))
    })?;
    for p in params {
        if let Some(g) = trainable_grad(p) {
            no_grad(|| g.try_mul_(&scale.try_to_dtype(g.dtype())?))?;
        }
    }
    Ok(())
}

/// The norm of all gradients taken together, as if concatenated into one
/// vector (parameters without a gradient, or frozen, are ignored).
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_optim::{grad_norm, NormType};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::from_vec(vec![0.0f64; 2], [2]).requires_grad_(true);
/// w.set_grad(Some(Tensor::from_vec(vec![3.0f64, 4.0], [2])));
/// assert_eq!(grad_norm(&[w], NormType::P(2.0)).unwrap(), 5.0);
/// ```
pub fn grad_norm<B: Backend>(params: &[Tensor<B>], norm: NormType) -> Result<f64> {
    check_norm_type(norm, "grad_norm")?;
    get_total_norm(params, norm)?.try_item()
}

/// Scales all gradients so their total norm is at most `max_norm`; returns
/// the total norm before clipping as a 0-d tensor, as PyTorch does. The
/// scale is `max_norm / (total + 1e-6)` capped at 1, computed on the
/// device. With `error_if_nonfinite`, a NaN or infinite total norm is an
/// `Err` and no gradient is touched (this reads the norm on the host, so a
/// compiled step must pass false); otherwise the gradients are scaled by the
/// (NaN) factor, as PyTorch does.
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_optim::{clip_grad_norm_, NormType};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::from_vec(vec![0.0f64; 2], [2]).requires_grad_(true);
/// w.set_grad(Some(Tensor::from_vec(vec![3.0f64, 4.0], [2])));
/// let total = clip_grad_norm_(&[w.clone()], 1.0, NormType::P(2.0), false).unwrap();
/// assert_eq!(total.item(), 5.0);
/// let g = w.grad().unwrap().to_vec_f64();
/// assert!((g[0] - 0.6).abs() < 1e-6 && (g[1] - 0.8).abs() < 1e-6);
/// ```
pub fn clip_grad_norm_<B: Backend>(params: &[Tensor<B>], max_norm: f64, norm: NormType, error_if_nonfinite: bool) -> Result<Tensor<B>> {
    check_norm_type(norm, "clip_grad_norm_")?;
    let total = get_total_norm(params, norm)?;
    if error_if_nonfinite {
        let t = total.try_item()?;
        if !t.is_finite() {
            return Err(Error::msg(format!(
                "clip_grad_norm_: the total norm of the gradients is {t}; gradients were left unchanged (pass error_if_nonfinite = false to scale anyway)"
            )));
        }
    }
    clip_grads_with_norm_(params, max_norm, &total)?;
    Ok(total)
}

/// Clamps every gradient element to `[-clip_value, clip_value]` in place.
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_optim::clip_grad_value_;
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::from_vec(vec![0.0f64; 3], [3]).requires_grad_(true);
/// w.set_grad(Some(Tensor::from_vec(vec![-2.0f64, 0.05, 3.0], [3])));
/// clip_grad_value_(&[w.clone()], 0.1).unwrap();
/// assert_eq!(w.grad().unwrap().to_vec_f64(), vec![-0.1, 0.05, 0.1]);
/// ```
pub fn clip_grad_value_<B: Backend>(params: &[Tensor<B>], clip_value: f64) -> Result<()> {
    if clip_value.is_nan() || clip_value < 0.0 {
        return Err(Error::msg(format!("clip_grad_value_: clip value must be >= 0, got {clip_value}")));
    }
    for p in params {
        if let Some(g) = trainable_grad(p) {
            no_grad(|| g.try_clamp_(Some(-clip_value), Some(clip_value)))?;
        }
    }
    Ok(())
}
