//! Layers as functions: linear, layer_norm, embedding, dropout.

use crate::Tensor;
use autograd_core::{Backend, DType, Error, Result, Shape};
use std::panic::Location;

/// `x @ weight^T + bias` with PyTorch's weight layout `[out_features, in_features]`.
///
/// ```
/// use autograd_tensor::{Tensor, functional::linear};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [1, 2]);
/// let w = Tensor::<RefBackend>::from_vec(vec![1.0f64, 0.0, 0.0, 1.0, 1.0, 1.0], [3, 2]);
/// assert_eq!(linear(&x, &w, None).unwrap().to_vec::<f64>(), vec![1.0, 2.0, 3.0]);
/// ```
#[track_caller]
pub fn linear<B: Backend>(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>) -> Result<Tensor<B>> {
    let loc = Location::caller();
    if weight.rank() != 2 || x.rank() == 0 || x.dims()[x.rank() - 1] != weight.dims()[1] {
        return Err(Error::InvalidShape {
            op: "linear",
            msg: format!(
                "input {:?} cannot be multiplied by a weight of shape {:?} ([out_features, in_features])",
                x.shape(),
                weight.shape()
            ),
            location: Some(loc),
        });
    }
    let y = x.try_matmul(&weight.try_t()?)?;
    match bias {
        Some(b) => y.try_add(b),
        None => Ok(y),
    }
}

/// Layer normalisation over the trailing `normalized_shape` dims, with the
/// biased variance and `eps` inside the square root, optional affine weight and bias.
#[track_caller]
pub fn layer_norm<B: Backend>(
    x: &Tensor<B>,
    normalized_shape: &[usize],
    weight: Option<&Tensor<B>>,
    bias: Option<&Tensor<B>>,
    eps: f64,
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let k = normalized_shape.len();
    if k > x.rank() || x.dims()[x.rank() - k..] != *normalized_shape {
        return Err(Error::InvalidShape {
            op: "layer_norm",
            msg: format!("normalized_shape {normalized_shape:?} does not match the trailing dims of the input {:?}", x.shape()),
            location: Some(loc),
        });
    }
    let dims: Vec<isize> = (x.rank() - k..x.rank()).map(|d| d as isize).collect();
    let mean = x.try_mean_dims(&dims, true)?;
    let xc = x.try_sub(&mean)?;
    let var = xc.try_mul(&xc)?.try_mean_dims(&dims, true)?;
    let mut y = xc.try_mul(&var.try_add_scalar(eps)?.try_sqrt()?.try_reciprocal()?)?;
    if let Some(w) = weight {
        y = y.try_mul(w)?;
    }
    if let Some(b) = bias {
        y = y.try_add(b)?;
    }
    Ok(y)
}

/// Rows of `weight` `[num_embeddings, dim]` picked by I64 `indices` of any shape;
/// the result has shape `indices.shape + [dim]`. Gradients add up over repeated indices.
#[track_caller]
pub fn embedding<B: Backend>(indices: &Tensor<B>, weight: &Tensor<B>) -> Result<Tensor<B>> {
    let loc = Location::caller();
    if indices.dtype() != DType::I64 || weight.rank() != 2 {
        return Err(Error::InvalidShape {
            op: "embedding",
            msg: format!("expected I64 indices and a 2-D weight, got {:?} indices and weight {:?}", indices.dtype(), weight.shape()),
            location: Some(loc),
        });
    }
    let flat = indices.try_reshape_to(&Shape::from([indices.numel()]))?;
    let rows = weight.try_index_select(0, &flat).map_err(|e| e.renamed("embedding", loc))?;
    let mut out = indices.dims().to_vec();
    out.push(weight.dims()[1]);
    rows.try_reshape_to(&Shape::new(out))
}

/// Zeroes each element with probability `p` and scales the rest by
/// `1 / (1 - p)` when `training`; the identity otherwise. Uses the global
/// generator ([`crate::manual_seed`]), so runs are reproducible.
pub fn dropout<B: Backend>(x: &Tensor<B>, p: f64, training: bool) -> Result<Tensor<B>> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::msg(format!("dropout probability has to be between 0 and 1, but got {p}")));
    }
    if !training || p == 0.0 {
        return Ok(x.clone());
    }
    if p == 1.0 {
        return x.try_mul_scalar(0.0);
    }
    let dtype = if x.dtype().is_compute() { x.dtype() } else { DType::F32 };
    let keep = Tensor::<B>::rand(x.shape().clone(), dtype).ge_scalar(p).try_mul_scalar(1.0 / (1.0 - p))?;
    x.try_mul(&keep)
}
