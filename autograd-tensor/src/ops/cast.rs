//! Dtype conversion and contiguous copies.

use crate::Tensor;
use crate::recording::stateless;
use autograd_core::ResultExt;
use autograd_core::{Backend, DType, Result};
use std::panic::Location;

impl<B: Backend> Tensor<B> {
    /// Converts to `dtype` (differentiable between float dtypes; a no-op if already of that dtype).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// let x = Tensor::<RefBackend>::from_vec(vec![1.5f64], [1]);
    /// assert_eq!(x.to_dtype(DType::F32).dtype(), DType::F32);
    /// ```
    #[track_caller]
    pub fn try_to_dtype(&self, dtype: DType) -> Result<Tensor<B>> {
        if self.dtype() == dtype {
            return Ok(self.clone());
        }
        let s = B::cast(&self.storage(), self.layout(), dtype).map_err(|e| e.at(Location::caller()))?;
        let from = self.dtype();
        let inputs: &[&Tensor<B>] = if dtype.is_float() { &[self] } else { &[] };
        let out = Tensor::record_new(s, self.shape().clone(), "ToCopyBackward0", inputs, |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_to_dtype(from)?)]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_to_dtype(dtype))
    }

    /// Panicking [`Tensor::try_to_dtype`].
    pub fn to_dtype(&self, dtype: DType) -> Tensor<B> {
        self.try_to_dtype(dtype).or_panic()
    }

    /// Row-major data: `self` if already contiguous, else a copy (CloneBackward0).
    #[track_caller]
    pub fn try_contiguous(&self) -> Result<Tensor<B>> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        self.try_deep_clone()
    }

    /// Panicking [`Tensor::try_contiguous`].
    pub fn contiguous(&self) -> Tensor<B> {
        self.try_contiguous().or_panic()
    }

    /// Always a fresh contiguous copy (PyTorch's `clone()`; Rust's `Clone`
    /// shares the tensor instead), differentiable (`CloneBackward0`).
    #[track_caller]
    pub fn try_deep_clone(&self) -> Result<Tensor<B>> {
        let s = B::copy_strided(&self.storage(), self.layout()).map_err(|e| e.at(Location::caller()))?;
        let out = Tensor::record_new(s, self.shape().clone(), "CloneBackward0", &[self], |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.clone())]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_deep_clone())
    }

    /// Panicking [`Tensor::try_deep_clone`].
    #[track_caller]
    pub fn deep_clone(&self) -> Tensor<B> {
        self.try_deep_clone().or_panic()
    }
}
