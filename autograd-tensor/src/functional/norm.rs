//! Normalisations over groups, instances and root mean squares (PyTorch's
//! `F.group_norm`, `F.instance_norm` without running statistics,
//! `F.rms_norm`), written with `layer_norm` over a reshaped view and
//! per-channel affine terms, so every order of derivative comes with them.

use crate::Tensor;
use autograd_core::{Backend, Error, Result};
use std::panic::Location;

/// `x * weight + bias` with the per-channel terms along dim 1.
fn channel_affine<B: Backend>(y: Tensor<B>, weight: Option<&Tensor<B>>, bias: Option<&Tensor<B>>) -> Result<Tensor<B>> {
    let mut dims = vec![1isize; y.rank()];
    dims[1] = -1;
    let y = match weight {
        Some(w) => y.try_mul(&w.try_reshape(&dims)?)?,
        None => y,
    };
    match bias {
        Some(b) => y.try_add(&b.try_reshape(&dims)?),
        None => Ok(y),
    }
}

fn check_channels<B: Backend>(
    op: &'static str,
    x: &Tensor<B>,
    weight: Option<&Tensor<B>>,
    bias: Option<&Tensor<B>>,
    loc: &'static Location<'static>,
) -> Result<usize> {
    let bad = |msg: String| Error::InvalidShape { op, msg, location: Some(loc) };
    if x.rank() < 2 {
        return Err(bad(format!("expected an input (N, C, ...) of at least 2 dims, got {:?}", x.dims())));
    }
    let c = x.dims()[1];
    for t in [weight, bias].into_iter().flatten() {
        if t.dims() != [c] {
            return Err(bad(format!("weight and bias must have one entry per channel ({c}), got {:?}", t.dims())));
        }
    }
    Ok(c)
}

/// PyTorch's `F.group_norm`: the channels of an `(N, C, ...)` input split
/// into `num_groups` groups, each normalised over its channels and the
/// spatial dims (biased variance), then the per-channel affine terms.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 3.0, 10.0, 30.0], [1, 4]);
/// let y = F::try_group_norm(&x, 2, None, None, 0.0).unwrap();
/// assert_eq!(y.to_vec::<f64>(), vec![-1.0, 1.0, -1.0, 1.0]);
/// assert!(F::try_group_norm(&x, 3, None, None, 1e-5).is_err());
/// ```
#[track_caller]
pub fn try_group_norm<B: Backend>(
    x: &Tensor<B>,
    num_groups: usize,
    weight: Option<&Tensor<B>>,
    bias: Option<&Tensor<B>>,
    eps: f64,
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let c = check_channels("group_norm", x, weight, bias, loc)?;
    if num_groups == 0 || !c.is_multiple_of(num_groups) {
        return Err(Error::InvalidShape {
            op: "group_norm",
            msg: format!("expected the number of channels ({c}) to be divisible by num_groups ({num_groups})"),
            location: Some(loc),
        });
    }
    let n = x.dims()[0];
    // explicit sizes: an empty batch leaves no size to infer
    let per_group = c / num_groups * x.dims()[2..].iter().product::<usize>();
    let grouped = x.try_reshape(&[n as isize, num_groups as isize, per_group as isize])?;
    let y = super::try_layer_norm(&grouped, &[per_group], None, None, eps)?
        .try_reshape(&x.dims().iter().map(|&d| d as isize).collect::<Vec<_>>())?;
    channel_affine(y, weight, bias)
}

/// PyTorch's `F.instance_norm` without running statistics: each channel of
/// each sample of an `(N, C, ...)` input normalised over its spatial dims
/// (biased variance), then the per-channel affine terms. One spatial
/// element is an `Err`, as in PyTorch (its statistics would be a constant
/// zero output and, unbiased, a division by zero).
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 3.0, 10.0, 30.0], [1, 2, 2]);
/// assert_eq!(F::try_instance_norm(&x, None, None, 0.0).unwrap().to_vec::<f64>(), vec![-1.0, 1.0, -1.0, 1.0]);
/// assert!(F::try_instance_norm(&Tensor::<RefBackend>::ones([2, 3, 1, 1]), None, None, 1e-5).is_err());
/// ```
#[track_caller]
pub fn try_instance_norm<B: Backend>(x: &Tensor<B>, weight: Option<&Tensor<B>>, bias: Option<&Tensor<B>>, eps: f64) -> Result<Tensor<B>> {
    let loc = Location::caller();
    check_channels("instance_norm", x, weight, bias, loc)?;
    if x.rank() < 3 {
        return Err(Error::InvalidShape {
            op: "instance_norm",
            msg: format!("expected an input (N, C, *spatial) with spatial dims, got {:?}", x.dims()),
            location: Some(loc),
        });
    }
    let spatial: Vec<usize> = x.dims()[2..].to_vec();
    if spatial.iter().product::<usize>() == 1 {
        return Err(Error::InvalidShape {
            op: "instance_norm",
            msg: format!("expected more than 1 spatial element when training, got input size {:?}", x.dims()),
            location: Some(loc),
        });
    }
    let y = super::try_layer_norm(x, &spatial, None, None, eps)?;
    channel_affine(y, weight, bias)
}

/// PyTorch's `F.rms_norm`: `x / sqrt(mean(x^2) + eps) * weight` over the
/// trailing `normalized_shape` dims; `eps` `None` is the dtype's machine
/// epsilon, as PyTorch.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![3.0f64, 4.0], [1, 2]);
/// let y = F::try_rms_norm(&x, &[2], None, Some(0.0)).unwrap().to_vec::<f64>();
/// let rms = (12.5f64).sqrt();
/// assert_eq!(y, vec![3.0 / rms, 4.0 / rms]);
/// ```
#[track_caller]
pub fn try_rms_norm<B: Backend>(
    x: &Tensor<B>,
    normalized_shape: &[usize],
    weight: Option<&Tensor<B>>,
    eps: Option<f64>,
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let k = normalized_shape.len();
    if k == 0 || k > x.rank() || x.dims()[x.rank() - k..] != *normalized_shape {
        return Err(Error::InvalidShape {
            op: "rms_norm",
            msg: format!("normalized_shape {normalized_shape:?} must be the trailing dims of the input {:?}", x.dims()),
            location: Some(loc),
        });
    }
    if let Some(w) = weight
        && w.dims() != normalized_shape
    {
        return Err(Error::InvalidShape {
            op: "rms_norm",
            msg: format!("weight {:?} must have the normalized shape {normalized_shape:?}", w.dims()),
            location: Some(loc),
        });
    }
    let eps = eps.unwrap_or(match x.dtype() {
        autograd_core::DType::F64 => f64::EPSILON,
        autograd_core::DType::F16 => 9.765625e-4,
        autograd_core::DType::BF16 => 7.8125e-3,
        _ => f32::EPSILON as f64,
    });
    let dims: Vec<isize> = (x.rank() - k..x.rank()).map(|d| d as isize).collect();
    let ms = x.try_square()?.try_mean_dims(&dims, true)?;
    let y = x.try_div(&ms.try_add_scalar(eps)?.try_sqrt()?)?;
    match weight {
        Some(w) => y.try_mul(w),
        None => Ok(y),
    }
}
