//! In-place ops. They write through the storage shared by all views and
//! bump its version counter, so a node that saved the old values refuses
//! to run backward instead of silently using the new ones.

use crate::Tensor;
use crate::grad_mode::is_grad_enabled;
use autograd_core::ResultExt;
use autograd_core::fused_update::FusedUpdate;
use autograd_core::{Backend, BinaryOp, DType, Error, Layout, Result, Shape, UnaryOp};
use std::panic::Location;
use std::sync::atomic::Ordering;

impl<B: Backend> Tensor<B> {
    fn check_inplace(&self, others_require_grad: bool, op: &'static str) -> Result<()> {
        if !is_grad_enabled() {
            return Ok(());
        }
        if self.is_leaf() && self.requires_grad() {
            return Err(Error::Autograd(format!(
                "{op}: a leaf tensor that requires grad is being used in an in-place operation; wrap parameter updates in no_grad"
            )));
        }
        if self.requires_grad() || others_require_grad {
            return Err(Error::Autograd(format!(
                "{op}: in-place operations on tensors that are part of a recorded graph are not supported; use the out-of-place op, or no_grad"
            )));
        }
        Ok(())
    }

    /// Overwrites the elements of this view with `src` (broadcast to this shape, converted to this dtype).
    #[track_caller]
    pub fn try_copy_(&self, src: &Tensor<B>) -> Result<()> {
        self.check_inplace(src.requires_grad(), "copy_")?;
        let ls = src
            .layout()
            .broadcast_as(self.shape())
            .map_err(|_| Error::shape_mismatch("copy_", self.shape(), src.shape(), Some(Location::caller())))?;
        if self.shares_storage(src) {
            // Read before writing: the views may overlap.
            let tmp = B::copy_strided(&src.storage(), &ls)?;
            return self.write(&tmp, &Layout::contiguous(self.shape().clone()));
        }
        let guard = src.storage();
        self.write(&guard, &ls)
    }

    fn write(&self, src: &B::Storage, ls: &Layout) -> Result<()> {
        let mut dst = self.inner.storage.data.write().unwrap_or_else(|e| e.into_inner());
        B::assign(&mut dst, self.layout(), src, ls)?;
        self.inner.storage.version.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    #[track_caller]
    fn binary_(&self, other: &Tensor<B>, op: BinaryOp, name: &'static str) -> Result<()> {
        self.check_inplace(other.requires_grad(), name)?;
        let loc = Location::caller();
        let other = other.detach().try_to_dtype(self.dtype())?;
        let lo =
            other.layout().broadcast_as(self.shape()).map_err(|_| Error::shape_mismatch(name, self.shape(), other.shape(), Some(loc)))?;
        let result = B::binary(op, &self.storage(), self.layout(), &other.storage(), &lo)?;
        self.write(&result, &Layout::contiguous(self.shape().clone()))
    }

    /// `self += other` in place.
    #[track_caller]
    pub fn try_add_(&self, other: &Tensor<B>) -> Result<()> {
        self.binary_(other, BinaryOp::Add, "add_")
    }
    /// `self -= other` in place.
    #[track_caller]
    pub fn try_sub_(&self, other: &Tensor<B>) -> Result<()> {
        self.binary_(other, BinaryOp::Sub, "sub_")
    }
    /// `self *= other` in place.
    #[track_caller]
    pub fn try_mul_(&self, other: &Tensor<B>) -> Result<()> {
        self.binary_(other, BinaryOp::Mul, "mul_")
    }
    /// `self /= other` in place.
    #[track_caller]
    pub fn try_div_(&self, other: &Tensor<B>) -> Result<()> {
        self.binary_(other, BinaryOp::Div, "div_")
    }
    /// Sets every element to `value`.
    pub fn try_fill_(&self, value: f64) -> Result<()> {
        self.check_inplace(false, "fill_")?;
        let s = B::full(&Shape::scalar(), value, self.dtype())?;
        self.write(&s, &Layout::contiguous(Shape::scalar()).broadcast_as(self.shape())?)
    }

    /// Clamps in place into `[min, max]` (either bound optional).
    pub fn try_clamp_(&self, min: Option<f64>, max: Option<f64>) -> Result<()> {
        self.check_inplace(false, "clamp_")?;
        let op = UnaryOp::Clamp { min: min.unwrap_or(f64::NEG_INFINITY), max: max.unwrap_or(f64::INFINITY) };
        let r = B::unary(op, &self.storage(), self.layout())?;
        self.write(&r, &Layout::contiguous(self.shape().clone()))
    }

    /// Panicking [`Tensor::try_clamp_`].
    #[track_caller]
    pub fn clamp_(&self, min: Option<f64>, max: Option<f64>) {
        self.try_clamp_(min, max).or_panic()
    }

    /// Panicking [`Tensor::try_add_`].
    #[track_caller]
    pub fn add_(&self, other: &Tensor<B>) {
        self.try_add_(other).or_panic()
    }
    /// Panicking [`Tensor::try_sub_`].
    ///
    /// ```
    /// use autograd_tensor::{no_grad, Tensor};
    /// use autograd_core::RefBackend;
    /// let w = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [2]).requires_grad_(true);
    /// (&w * &w).sum().backward().unwrap();
    /// no_grad(|| w.sub_(&(w.grad().unwrap() * 0.5)));
    /// assert_eq!(w.to_vec::<f64>(), vec![0.0, 0.0]);
    /// assert_eq!(w.version(), 1);
    /// ```
    #[track_caller]
    pub fn sub_(&self, other: &Tensor<B>) {
        self.try_sub_(other).or_panic()
    }
    /// Panicking [`Tensor::try_mul_`].
    #[track_caller]
    pub fn mul_(&self, other: &Tensor<B>) {
        self.try_mul_(other).or_panic()
    }
    /// Panicking [`Tensor::try_div_`].
    #[track_caller]
    pub fn div_(&self, other: &Tensor<B>) {
        self.try_div_(other).or_panic()
    }
    /// Panicking [`Tensor::try_fill_`].
    #[track_caller]
    pub fn fill_(&self, value: f64) {
        self.try_fill_(value).or_panic()
    }
    /// Sets every element to zero.
    #[track_caller]
    pub fn zero_(&self) {
        self.try_fill_(0.0).or_panic()
    }
    /// Panicking [`Tensor::try_copy_`].
    #[track_caller]
    pub fn copy_(&self, src: &Tensor<B>) {
        self.try_copy_(src).or_panic()
    }
}

impl<B: Backend> Tensor<B> {
    fn owns_whole_storage(&self) -> bool {
        let l = self.layout();
        l.is_contiguous() && l.offset() == 0 && B::len(&self.storage()) == self.numel()
    }

    /// One fused in-place update of this parameter (an optimizer step):
    /// reads `grad`, updates this tensor and the `states` buffers (contiguous
    /// tensors of this shape and dtype, each with its own storage, in the
    /// order the update expects) and its `scalars` (a contiguous f64 tensor
    /// of `update.num_scalars()` values with its own storage, or `None` for
    /// an update without scalars; see [`FusedUpdate::resolve`]). The
    /// optimizers of `autograd-optim` are built on it; it bypasses autograd
    /// (like an update under `no_grad`) and bumps the version counters of
    /// everything it writes.
    ///
    /// ```
    /// use autograd_core::{fused_update::FusedUpdate, RefBackend};
    /// use autograd_tensor::Tensor;
    /// /// `p -= lr * g`
    /// #[derive(Clone, Debug)]
    /// struct Step(f64);
    /// impl FusedUpdate for Step {
    ///     fn num_states(&self) -> usize { 0 }
    ///     fn apply_f32(&self, p: &mut [f32], g: &[f32], _: &mut [&mut [f32]]) { p.iter_mut().zip(g).for_each(|(p, g)| *p -= self.0 as f32 * g) }
    ///     fn apply_f64(&self, p: &mut [f64], g: &[f64], _: &mut [&mut [f64]]) { p.iter_mut().zip(g).for_each(|(p, g)| *p -= self.0 * g) }
    /// }
    /// let p = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [2]).requires_grad_(true);
    /// let g = Tensor::<RefBackend>::from_vec(vec![0.5f64, -1.0], [2]);
    /// p.fused_update_(&g, &[], None, &Step(0.1)).unwrap();
    /// assert_eq!(p.to_vec_f64(), vec![0.95, 2.1]);
    /// ```
    #[track_caller]
    pub fn fused_update_<U: FusedUpdate>(
        &self,
        grad: &Tensor<B>,
        states: &[&Tensor<B>],
        scalars: Option<&Tensor<B>>,
        update: &U,
    ) -> Result<()> {
        let loc = Location::caller();
        if let Some(sc) = scalars
            && (sc.dtype() != DType::F64
                || !sc.owns_whole_storage()
                || sc.shares_storage(self)
                || sc.shares_storage(grad)
                || states.iter().any(|s| sc.shares_storage(s)))
        {
            return Err(Error::msg(format!("fused update: the scalars must be a contiguous F64 tensor with its own storage (at {loc})")));
        }
        if grad.shape() != self.shape() {
            return Err(Error::shape_mismatch("fused update (param vs grad)", self.shape(), grad.shape(), Some(loc)));
        }
        if states.len() != update.num_states() {
            return Err(Error::msg(format!(
                "fused update: {update:?} needs {} state buffers, {} given",
                update.num_states(),
                states.len()
            )));
        }
        for (i, s) in states.iter().enumerate() {
            if s.shape() != self.shape() {
                return Err(Error::shape_mismatch("fused update (param vs state)", self.shape(), s.shape(), Some(loc)));
            }
            if s.dtype() != self.dtype() || !s.owns_whole_storage() || s.shares_storage(self) || s.shares_storage(grad) {
                return Err(Error::msg(format!(
                    "fused update: state buffer {i} must be a contiguous {:?} tensor with its own storage",
                    self.dtype()
                )));
            }
        }
        let grad = if grad.dtype() != self.dtype() || grad.shares_storage(self) {
            grad.detach().try_to_dtype(self.dtype())?.contiguous()
        } else {
            grad.clone()
        };
        let mut guards: Vec<_> = states.iter().map(|s| s.inner.storage.data.write().unwrap_or_else(|e| e.into_inner())).collect();
        let mut refs: Vec<&mut B::Storage> = guards.iter_mut().map(|g| &mut **g).collect();
        let mut no_scalars = match scalars {
            Some(_) => None,
            None => Some(B::full(&Shape::from([0]), 0.0, DType::F64)?),
        };
        let mut scalar_guard = scalars.map(|sc| sc.inner.storage.data.write().unwrap_or_else(|e| e.into_inner()));
        let sc: &mut B::Storage = match (&mut scalar_guard, &mut no_scalars) {
            (Some(g), _) => g,
            (None, Some(empty)) => empty,
            (None, None) => return Err(Error::msg("fused update: no scalars buffer")),
        };
        let gs = grad.storage();
        if self.owns_whole_storage() {
            let mut dst = self.inner.storage.data.write().unwrap_or_else(|e| e.into_inner());
            B::fused_update(update, &mut dst, &gs, grad.layout(), &mut refs, sc)?;
        } else {
            // A strided parameter view: update a contiguous copy, write it back.
            let mut tmp = B::copy_strided(&self.storage(), self.layout())?;
            B::fused_update(update, &mut tmp, &gs, grad.layout(), &mut refs, sc)?;
            let mut dst = self.inner.storage.data.write().unwrap_or_else(|e| e.into_inner());
            B::assign(&mut dst, self.layout(), &tmp, &Layout::contiguous(self.shape().clone()))?;
        }
        self.inner.storage.version.fetch_add(1, Ordering::Relaxed);
        for s in states.iter().copied().chain(scalars) {
            s.inner.storage.version.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}
