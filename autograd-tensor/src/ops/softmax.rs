//! softmax, log_softmax and logsumexp, stable for inputs of any magnitude
//! (the maximum is subtracted before exponentiating).

use crate::node::SavedTensor;
use crate::recording::saving;
use crate::{Tensor, no_grad};
use autograd_core::{Backend, Error, Result, Shape, normalize_dim};
use std::panic::Location;

impl<B: Backend> Tensor<B> {
    /// Softmax along `dim`.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![1000.0f64, 1000.0], [2]);
    /// assert_eq!(x.softmax(0).to_vec::<f64>(), vec![0.5, 0.5]);
    /// ```
    #[track_caller]
    pub fn try_softmax(&self, dim: isize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "softmax").map_err(|e| e.at(loc))?;
        let x = if self.rank() == 0 { self.try_reshape_to(&Shape::from([1]))? } else { self.clone() };
        let s = B::softmax(&x.storage(), x.layout(), d)?;
        self.record_softmax(s, d, "SoftmaxBackward0")
    }

    /// Softmax along `dim` that gives zeros, not NaN, for a slice whose
    /// elements are all `-inf` (a fully masked row of attention scores):
    /// PyTorch's `_safe_softmax`, which `scaled_dot_product_attention` uses.
    /// Elsewhere it equals [`Tensor::try_softmax`], NaN inputs included; its
    /// gradient (`SafeSoftmaxBackward0`) is zero on the fully masked slices.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![0.0f64, f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY], [2, 2]);
    /// assert_eq!(x.safe_softmax(1).to_vec::<f64>(), vec![1.0, 0.0, 0.0, 0.0]);
    /// assert!(x.softmax(1).to_vec::<f64>()[2].is_nan());
    /// ```
    #[track_caller]
    pub fn try_safe_softmax(&self, dim: isize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "safe_softmax").map_err(|e| e.at(loc))?;
        let x = if self.rank() == 0 { self.try_reshape_to(&Shape::from([1]))? } else { self.clone() };
        let s = B::softmax(&x.storage(), x.layout(), d)?;
        let s = no_grad(|| -> Result<_> {
            if x.numel() == 0 {
                return Ok(s);
            }
            // A row is fully masked when its maximum is -inf (a NaN makes the
            // maximum NaN, so NaN rows stay NaN as in PyTorch).
            // One path, captured or not: no host read to skip the select
            // when no row is masked (a select of nothing changes no bit).
            let masked = x.detach().try_amax(&[d as isize], true)?.eq_mask(&x.scalar_like(f64::NEG_INFINITY))?;
            let y = Tensor::<B>::from_storage(s, x.shape().clone());
            let fixed = Tensor::try_where_cond(&masked.try_to_dtype(autograd_core::DType::Bool)?, &y.scalar_like(0.0), &y)?;
            B::copy_strided(&fixed.storage(), fixed.layout())
        })?;
        // zero where y is zero: the fully masked rows get no gradient
        self.record_softmax(s, d, "SafeSoftmaxBackward0")
    }

    /// Records a softmax output `s` along `d`: backward `dx = y * (g - sum(g * y))`
    /// from the saved output, and the same rule for a forward-mode tangent.
    fn record_softmax(&self, s: B::Storage, d: usize, name: &'static str) -> Result<Tensor<B>> {
        let out = Tensor::record_new(s, self.shape().clone(), name, &[self], |out| {
            let y = SavedTensor::new(&out.get());
            saving(move |ctx, g: &Tensor<B>| {
                let y = ctx.output(&y.get(ctx.name())?);
                if let Some(dx) = fused_backward(&y, g, d, false)? {
                    return Ok(vec![Some(dx)]);
                }
                let dot = g.try_mul(&y)?.try_sum_dims(&[d as isize], true)?;
                Ok(vec![Some(y.try_mul(&g.try_sub(&dot)?)?)])
            })
        });
        let out_y = out.detach();
        crate::recording::with_tangent(out, &[self], |t| {
            let y = out_y.clone();
            let tg = t[0].as_ref().expect("tangent");
            y.try_mul(&tg.try_sub(&tg.try_mul(&y)?.try_sum_dims(&[d as isize], true)?)?)
        })
    }

    /// `log(softmax(x))` along `dim`, computed as `x - logsumexp(x)`.
    #[track_caller]
    pub fn try_log_softmax(&self, dim: isize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "log_softmax").map_err(|e| e.at(loc))?;
        // PyTorch's kernel: (x - max) - log(sum(exp(x - max))), the max not masked, so a row
        // holding +inf gives NaN everywhere (as [inf, 1] -> [nan, nan]) and an all -inf row NaN.
        let out = no_grad(|| -> Result<Tensor<B>> {
            let x = self.detach();
            if x.numel() == 0 {
                return x.try_contiguous();
            }
            let shifted = x.try_sub(&x.try_amax(&[d as isize], true)?)?;
            shifted.try_sub(&shifted.try_exp()?.try_sum_dims(&[d as isize], true)?.try_log()?)
        })?;
        let s = B::copy_strided(&out.storage(), out.layout())?;
        let out = Tensor::record_new(s, self.shape().clone(), "LogSoftmaxBackward0", &[self], |out| {
            let y = SavedTensor::new(&out.get());
            saving(move |ctx, g: &Tensor<B>| {
                // dx = g - softmax(x) * sum(g)
                let y = ctx.output(&y.get(ctx.name())?);
                if let Some(dx) = fused_backward(&y, g, d, true)? {
                    return Ok(vec![Some(dx)]);
                }
                let sum = g.try_sum_dims(&[d as isize], true)?;
                Ok(vec![Some(g.try_sub(&y.try_exp()?.try_mul(&sum)?)?)])
            })
        });
        let out_y = out.detach();
        crate::recording::with_tangent(out, &[self], |t| {
            let p = out_y.try_exp()?;
            let tg = t[0].as_ref().expect("tangent");
            tg.try_sub(&tg.try_mul(&p)?.try_sum_dims(&[d as isize], true)?)
        })
    }

    /// `log(sum(exp(x)))` over `dims`, without overflow.
    #[track_caller]
    pub fn try_logsumexp(&self, dims: &[isize], keepdim: bool) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let nd: Vec<usize> =
            dims.iter().map(|&d| normalize_dim(d, self.rank(), "logsumexp")).collect::<Result<_>>().map_err(|e| e.at(loc))?;
        let out = no_grad(|| -> Result<Tensor<B>> {
            let x = self.detach();
            let m = x.try_amax(dims, true)?;
            // An all -inf slice has max -inf: shift by 0 there instead of producing NaN.
            let m = m.try_masked_fill(&m.try_abs()?.eq_mask(&m.scalar_like(f64::INFINITY))?, 0.0)?;
            let lse = x.try_sub(&m)?.try_exp()?.try_sum_dims(dims, true)?.try_log()?.try_add(&m)?;
            if keepdim {
                Ok(lse)
            } else {
                let kept: Vec<usize> = (0..self.rank()).filter(|i| !nd.contains(i)).map(|i| self.dims()[i]).collect();
                lse.try_reshape_to(&Shape::new(kept))
            }
        })?;
        let s = B::copy_strided(&out.storage(), out.layout())?;
        let mut kd = self.dims().to_vec();
        for &d in &nd {
            kd[d] = 1;
        }
        let kd = Shape::new(kd);
        let in_shape = self.shape().clone();
        let kd2 = kd.clone();
        let out = Tensor::record_new(s, out.shape().clone(), "LogsumexpBackward0", &[self], |out| {
            let (x, y) = (SavedTensor::new(self), SavedTensor::new(&out.get()));
            saving(move |ctx, g: &Tensor<B>| {
                // dx = g * exp(x - lse) = g * softmax over the reduced dims
                let x = &x.get(ctx.name())?;
                let y = ctx.output(&y.get(ctx.name())?).try_reshape_to(&kd)?;
                let p = x.try_sub(&y)?.try_exp()?;
                Ok(vec![Some(g.try_reshape_to(&kd)?.try_expand_to(&in_shape)?.try_mul(&p)?)])
            })
        });
        let out_y = out.detach();
        crate::recording::with_tangent(out, &[self], |t| {
            let p = self.detach().try_sub(&out_y.try_reshape_to(&kd2)?)?.try_exp()?;
            t[0].as_ref().expect("tangent").try_mul(&p)?.try_sum_dims(dims, keepdim)
        })
    }

    /// Splits into pieces of `size` along `dim` (the last may be smaller);
    /// views. `Err` for a zero size or a bad dim.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// let x = Tensor::<RefBackend>::zeros([5]);
    /// let dims: Vec<usize> = x.try_split(2, 0).unwrap().iter().map(|t| t.dims()[0]).collect();
    /// assert_eq!(dims, vec![2, 2, 1]);
    /// assert!(x.try_split(0, 0).is_err());
    /// ```
    #[track_caller]
    pub fn try_split(&self, size: usize, dim: isize) -> Result<Vec<Tensor<B>>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "split").map_err(|e| e.at(loc))?;
        if self.rank() == 0 {
            return Err(Error::InvalidShape { op: "split", msg: "a 0-d tensor cannot be split".into(), location: Some(loc) });
        }
        let n = self.dims()[d];
        if size == 0 && n > 0 {
            return Err(Error::InvalidShape {
                op: "split",
                msg: format!("split_size can only be 0 if dimension {d} has size 0, but got size {n}"),
                location: Some(loc),
            });
        }
        if n == 0 {
            return Ok(vec![self.clone()]);
        }
        // One handle per piece: a huge expanded dim split in ones could ask for more than memory.
        let pieces = n.div_ceil(size);
        let per_piece = std::mem::size_of::<Tensor<B>>() + std::mem::size_of::<crate::tensor::TensorImpl<B>>();
        autograd_core::memory::check_alloc("split", pieces, per_piece).map_err(|e| e.at(loc))?;
        (0..n).step_by(size).map(|s| self.slice_impl_at(d, s, size.min(n - s), loc)).collect()
    }

    /// Splits into at most `chunks` pieces along `dim` (as PyTorch: pieces of
    /// `ceil(n / chunks)`); `Err` for zero chunks or a bad dim.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// let x = Tensor::<RefBackend>::zeros([5]);
    /// assert_eq!(x.try_chunk(2, 0).unwrap().len(), 2);
    /// assert!(x.try_chunk(0, 0).is_err());
    /// ```
    #[track_caller]
    pub fn try_chunk(&self, chunks: usize, dim: isize) -> Result<Vec<Tensor<B>>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "chunk").map_err(|e| e.at(loc))?;
        if chunks == 0 {
            return Err(Error::InvalidShape {
                op: "chunk",
                msg: "chunk expects `chunks` to be greater than 0, got: 0".into(),
                location: Some(loc),
            });
        }
        if self.rank() == 0 {
            return Err(Error::InvalidShape { op: "chunk", msg: "a 0-d tensor cannot be chunked".into(), location: Some(loc) });
        }
        let n = self.dims()[d];
        self.try_split(n.div_ceil(chunks).max(1), d as isize)
    }
}

/// The input gradient of a softmax (`log`: a log-softmax) along `d` from
/// its output `y` by the backend's one-pass kernel, when nothing
/// differentiates through it (a backward without `create_graph`, no
/// forward-mode tangent) and `y` and `g` share a shape and a dtype; `None`
/// asks for the tensor-op formula.
fn fused_backward<B: Backend>(y: &Tensor<B>, g: &Tensor<B>, d: usize, log: bool) -> Result<Option<Tensor<B>>> {
    let plain = y.rank() > 0 && y.shape() == g.shape() && y.dtype() == g.dtype();
    if !plain || crate::is_grad_enabled() || y.tangent().is_some() || g.tangent().is_some() {
        return Ok(None);
    }
    let dx = B::softmax_backward(&y.storage(), y.layout(), &g.storage(), g.layout(), d, log)?;
    Ok(Some(Tensor::from_storage(dx, y.shape().clone())))
}

panicking_twins! {
    softmax(dim: isize) -> Tensor<B> = try_softmax, "Panicking [`Tensor::try_softmax`].";
    safe_softmax(dim: isize) -> Tensor<B> = try_safe_softmax, "Panicking [`Tensor::try_safe_softmax`].";
    log_softmax(dim: isize) -> Tensor<B> = try_log_softmax, "Panicking [`Tensor::try_log_softmax`].";
    logsumexp(dims: &[isize], keepdim: bool) -> Tensor<B> = try_logsumexp, "Panicking [`Tensor::try_logsumexp`].";
    split(size: usize, dim: isize) -> Vec<Tensor<B>> = try_split, "Panicking [`Tensor::try_split`].";
    chunk(chunks: usize, dim: isize) -> Vec<Tensor<B>> = try_chunk, "Panicking [`Tensor::try_chunk`].";
}
