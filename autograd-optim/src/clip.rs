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

fn tensor_norm<B: Backend>(g: &Tensor<B>, norm: NormType) -> Result<f64> {
    let g = g.detach();
    if let NormType::P(2.0) = norm {
        // g * g needs no |g| first: one temporary instead of two.
        return Ok(g.try_mul(&g)?.try_sum()?.try_item()?.sqrt());
    }
    let a = g.try_abs()?;
    Ok(match norm {
        NormType::Inf => {
            if a.numel() == 0 {
                0.0
            } else {
                a.try_max()?.try_item()?
            }
        }
        NormType::P(1.0) => a.try_sum()?.try_item()?,
        NormType::P(p) => a.try_powf(p)?.try_sum()?.try_item()?.powf(1.0 / p),
    })
}

/// Multiplies every existing gradient by `factor` in place.
pub(crate) fn scale_grads_<B: Backend>(params: &[Tensor<B>], factor: f64) -> Result<()> {
    for p in params {
        if let Some(g) = trainable_grad(p) {
            let c = Tensor::<B>::full_dtype([], factor, g.dtype());
            no_grad(|| g.try_mul_(&c))?;
        }
    }
    Ok(())
}

fn combine(norms: &[f64], norm: NormType) -> f64 {
    match norm {
        NormType::Inf => norms.iter().copied().fold(0.0, f64::max),
        NormType::P(2.0) => norms.iter().map(|n| n * n).sum::<f64>().sqrt(),
        NormType::P(p) => norms.iter().map(|n| n.powf(p)).sum::<f64>().powf(1.0 / p),
    }
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
    if let NormType::P(p) = norm
        && (p.is_nan() || p <= 0.0)
    {
        return Err(Error::msg(format!("grad_norm: norm type must be positive or Inf, got {p}")));
    }
    let norms = params.iter().filter_map(trainable_grad).map(|g| tensor_norm(&g, norm)).collect::<Result<Vec<f64>>>()?;
    Ok(combine(&norms, norm))
}

/// Scales all gradients so their total norm is at most `max_norm`; returns
/// the total norm before clipping. The scale is `max_norm / (total + 1e-6)`
/// capped at 1, as in PyTorch. With `error_if_nonfinite`, a NaN or infinite
/// total norm is an `Err` and no gradient is touched; otherwise the
/// gradients are scaled by the (NaN) factor, as PyTorch does.
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_optim::{clip_grad_norm_, NormType};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::from_vec(vec![0.0f64; 2], [2]).requires_grad_(true);
/// w.set_grad(Some(Tensor::from_vec(vec![3.0f64, 4.0], [2])));
/// let total = clip_grad_norm_(&[w.clone()], 1.0, NormType::P(2.0), false).unwrap();
/// assert_eq!(total, 5.0);
/// let g = w.grad().unwrap().to_vec_f64();
/// assert!((g[0] - 0.6).abs() < 1e-6 && (g[1] - 0.8).abs() < 1e-6);
/// ```
pub fn clip_grad_norm_<B: Backend>(params: &[Tensor<B>], max_norm: f64, norm: NormType, error_if_nonfinite: bool) -> Result<f64> {
    let total = grad_norm(params, norm)?;
    if error_if_nonfinite && !total.is_finite() {
        return Err(Error::msg(format!(
            "clip_grad_norm_: the total norm of the gradients is {total}; gradients were left unchanged (pass error_if_nonfinite = false to scale anyway)"
        )));
    }
    scale_grads_(params, (max_norm / (total + 1e-6)).min(1.0))?;
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
