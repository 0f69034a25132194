//! Dtype conversion, contiguous copies and copies to another backend.

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

    /// `copy` (this tensor's values already cast, contiguous, no graph:
    /// autocast's cached copy of a parameter) recorded as
    /// [`Tensor::try_to_dtype`] of `self` would record it: one
    /// `ToCopyBackward0` node per use, all sharing the copy's storage.
    #[track_caller]
    pub(crate) fn record_cast(&self, copy: &Tensor<B>) -> Tensor<B> {
        let from = self.dtype();
        Tensor::record(copy.inner.storage.clone(), copy.layout().clone(), copy.dtype(), "ToCopyBackward0", &[self], || {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_to_dtype(from)?)]))
        })
    }

    /// A copy of the values on backend `B2` (its dtype and shape kept), as
    /// PyTorch's `tensor.to(device)`: read back here, uploaded there. Each
    /// backend has its own graph, so the copy is a new leaf that requires
    /// grad when `self` does; gradients do not flow back across backends.
    /// A module moves by its state dict: copy each entry with this and load
    /// them into the same model built on `B2`.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![1.0f32, 2.0], [2]).requires_grad_(true);
    /// let y = x.try_to_backend::<autograd_cpu::Cpu>().unwrap();
    /// assert_eq!(y.to_vec::<f32>(), vec![1.0, 2.0]);
    /// assert!(y.requires_grad() && y.is_leaf());
    /// ```
    #[track_caller]
    pub fn try_to_backend<B2: Backend>(&self) -> Result<Tensor<B2>> {
        let loc = Location::caller();
        let moved = Tensor::<B2>::try_from_host(self.try_to_host()?, self.shape().clone()).map_err(|e| e.at(loc))?;
        moved.try_requires_grad_(self.requires_grad() && self.dtype().is_float())
    }

    /// Panicking [`Tensor::try_to_backend`].
    #[track_caller]
    pub fn to_backend<B2: Backend>(&self) -> Tensor<B2> {
        self.try_to_backend().or_panic()
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
