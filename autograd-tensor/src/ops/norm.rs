//! Vector norms with `torch.linalg.vector_norm`'s semantics: one
//! `LinalgVectorNormBackward0` node with PyTorch's closed-form gradient,
//! which is 0 (not NaN) at the zero vector.

use crate::node::SavedTensor;
use crate::recording::saving;
use crate::{Tensor, no_grad};
use autograd_core::{Backend, Error, Result, Shape, normalize_dim};
use std::panic::Location;

impl<B: Backend> Tensor<B> {
    /// The `p`-norm over `dims` (every dim when empty), as
    /// `torch.linalg.vector_norm(x, ord=p, dim=dims, keepdim=keepdim)`:
    /// `p = 2` Euclidean, `1` sum of |x|, `inf`/`-inf` max/min |x|, `0` the
    /// count of nonzeros, any other `p` `(sum |x|^p)^(1/p)`.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![3.0f64, -4.0], [2]).requires_grad_(true);
    /// let n = x.norm(2.0, &[], false);
    /// assert_eq!(n.item(), 5.0);
    /// n.backward().unwrap();
    /// assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![0.6, -0.8]);
    ///
    /// let z = Tensor::<RefBackend>::zeros_dtype([3], autograd_core::DType::F64).requires_grad_(true);
    /// z.norm(2.0, &[], false).backward().unwrap();
    /// assert_eq!(z.grad().unwrap().to_vec::<f64>(), vec![0.0; 3]); // 0 at the zero vector, as PyTorch
    /// ```
    #[track_caller]
    pub fn try_norm(&self, p: f64, dims: &[isize], keepdim: bool) -> Result<Tensor<B>> {
        let loc = Location::caller();
        if p.is_nan() {
            return Err(Error::InvalidShape { op: "norm", msg: "the order p must not be NaN".into(), location: Some(loc) });
        }
        let mut d: Vec<usize> = if dims.is_empty() {
            (0..self.rank()).collect()
        } else {
            dims.iter().map(|&x| normalize_dim(x, self.rank(), "norm")).collect::<Result<_>>().map_err(|e| e.at(loc))?
        };
        d.sort_unstable();
        if d.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::InvalidShape { op: "norm", msg: format!("dim appears more than once in {dims:?}"), location: Some(loc) });
        }
        if p.is_infinite() && self.rank() > 0 && d.iter().any(|&i| self.dims()[i] == 0) {
            return Err(Error::InvalidShape {
                op: "norm",
                msg: format!("cannot compute the {p} norm over a dim of size 0 (shape {:?})", self.shape()),
                location: Some(loc),
            });
        }
        let di: Vec<isize> = d.iter().map(|&x| x as isize).collect();
        let red = |t: Tensor<B>| -> Result<Tensor<B>> { if self.rank() == 0 { Ok(t) } else { t.try_sum_dims(&di, true) } };
        let kd = no_grad(|| -> Result<Tensor<B>> {
            let x = self.detach();
            let a = x.try_abs()?;
            if self.rank() == 0 {
                return Ok(if p == 0.0 { x.ne_mask(&x.scalar_like(0.0))? } else { a });
            }
            if p == 2.0 {
                red(x.try_mul(&x)?)?.try_sqrt()
            } else if p == 1.0 {
                red(a)
            } else if p == f64::INFINITY {
                a.try_amax(&di, true)
            } else if p == f64::NEG_INFINITY {
                a.try_amin(&di, true)
            } else if p == 0.0 {
                red(x.ne_mask(&x.scalar_like(0.0))?)
            } else {
                red(a.try_powf(p)?)?.try_powf(1.0 / p)
            }
        })?;
        let kd_shape = kd.shape().clone();
        let out_shape: Shape = if keepdim || self.rank() == 0 {
            kd_shape.clone()
        } else {
            (0..self.rank()).filter(|i| !d.contains(i)).map(|i| self.dims()[i]).collect()
        };
        let out = kd.try_reshape_to(&out_shape)?;
        let di2 = di.clone();
        let kd2 = kd_shape.clone();
        let node =
            Tensor::record(out.inner.storage.clone(), out.layout().clone(), out.dtype(), "LinalgVectorNormBackward0", &[self], || {
                let (x, y) = (SavedTensor::new(self), SavedTensor::new(&out));
                let in_shape = self.shape().clone();
                saving(move |ctx, g: &Tensor<B>| {
                    let x = &x.get(ctx.name())?;
                    let norm = ctx.output(&y.get(ctx.name())?).try_reshape_to(&kd_shape)?;
                    let g = g.try_reshape_to(&kd_shape)?;
                    Ok(vec![Some(norm_backward(p, x, &norm, &g, &di)?.try_expand_to(&in_shape)?)])
                })
            });
        // Forward mode: the tangent times the same derivative, summed over the reduced dims.
        let (x, norm) = (self.detach(), out.detach().try_reshape_to(&kd2)?);
        crate::recording::with_tangent(node, &[self], |t| {
            let d = norm_backward(p, &x, &norm, &Tensor::try_ones_dtype(kd2.clone(), x.dtype())?, &di2)?;
            let prod = t[0].as_ref().expect("tangent").try_mul(&d)?;
            let summed = if x.rank() == 0 { prod } else { prod.try_sum_dims(&di2, true)? };
            summed.try_reshape_to(&out_shape)
        })
    }
}

/// PyTorch's `norm_backward` (derivatives of `linalg_vector_norm`), with
/// `norm` and `g` kept as size-1 dims over the reduced `dims`.
fn norm_backward<B: Backend>(p: f64, x: &Tensor<B>, norm: &Tensor<B>, g: &Tensor<B>, dims: &[isize]) -> Result<Tensor<B>> {
    let zero_norm = norm.eq_scalar(0.0);
    if p == 0.0 {
        return Tensor::try_zeros_dtype(x.shape().clone(), x.dtype());
    }
    if p == 1.0 {
        return x.try_sign()?.try_mul(g);
    }
    if p.is_infinite() {
        // spread evenly over the elements where |x| attains the norm, with x's sign
        let mask = x.try_abs()?.eq_mask(norm)?;
        let count = if x.rank() == 0 { mask.clone() } else { mask.try_sum_dims(dims, true)? };
        return x.try_sign()?.try_mul(&mask)?.try_mul(&g.try_div(&count)?);
    }
    if p == 2.0 {
        // x g / norm in this order (as PyTorch rounds it: 3 / 5 is 0.6, 3 * (1 / 5) is not), 0 at the zero vector
        return x.try_mul(g)?.try_div(norm)?.try_masked_fill(&zero_norm, 0.0);
    }
    let a = x.try_abs()?;
    if p < 1.0 {
        let scaled = x.try_sign()?.try_mul(&a.try_powf(p - 1.0)?.try_masked_fill(&x.eq_scalar(0.0), 0.0)?)?;
        return scaled.try_mul(g)?.try_mul(&norm.try_powf(1.0 - p)?);
    }
    let scaled = if p < 2.0 { x.try_sign()?.try_mul(&a.try_powf(p - 1.0)?)? } else { x.try_mul(&a.try_powf(p - 2.0)?)? };
    scaled.try_mul(&g.try_div(&norm.try_powf(p - 1.0)?)?.try_masked_fill(&zero_norm, 0.0)?)
}

panicking_twins! {
    norm(p: f64, dims: &[isize], keepdim: bool) -> Tensor<B> = try_norm, "Panicking [`Tensor::try_norm`].";
}
