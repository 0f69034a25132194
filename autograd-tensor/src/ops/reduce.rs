//! Reductions: sum, mean, max/min (over all, over dims, with indices),
//! amax/amin, var/std, and `sum_to` (the inverse of broadcasting).

use crate::Tensor;
use crate::node::SavedTensor;
use crate::recording::{saving, stateless};
use autograd_core::{ArgReduceOp, Backend, DType, Error, ReduceOp, Result, Shape, normalize_dim};
use std::panic::Location;

fn norm_dims(dims: &[isize], rank: usize, op: &'static str, loc: &'static Location<'static>) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let d = normalize_dim(d, rank, op).map_err(|e| e.at(loc))?;
        if out.contains(&d) {
            return Err(Error::InvalidShape { op, msg: format!("dim {d} appears more than once in {dims:?}"), location: Some(loc) });
        }
        out.push(d);
    }
    out.sort_unstable();
    Ok(out)
}

fn reduced_shape(shape: &Shape, dims: &[usize], keepdim: bool) -> Shape {
    let d: Vec<usize> =
        shape.dims().iter().enumerate().filter_map(|(i, &s)| if dims.contains(&i) { keepdim.then_some(1) } else { Some(s) }).collect();
    Shape::new(d)
}

fn keepdim_shape(shape: &Shape, dims: &[usize]) -> Shape {
    reduced_shape(shape, dims, true)
}

/// Where `x` attains the extreme `y` (broadcast): `x == y`, or both NaN, so
/// that the gradient of a NaN maximum flows to the NaN (PyTorch's
/// `evenly_distribute_backward`).
fn extreme_mask<B: Backend>(x: &Tensor<B>, y: &Tensor<B>) -> Result<Tensor<B>> {
    let both_nan = x.ne_mask(x)?.try_mul(&y.ne_mask(y)?)?;
    x.eq_mask(y)?.try_add(&both_nan)
}

impl<B: Backend> Tensor<B> {
    fn reduce_kernel(&self, op: ReduceOp, dims: &[usize]) -> Result<B::Storage> {
        if self.rank() == 0 {
            return B::copy_strided(&self.storage(), self.layout());
        }
        B::reduce(op, &self.storage(), self.layout(), dims)
    }

    /// Sum of all elements (0-d result).
    #[track_caller]
    pub fn try_sum(&self) -> Result<Tensor<B>> {
        let all: Vec<usize> = (0..self.rank()).collect();
        if !self.dtype().is_float() {
            // PyTorch sums integers and booleans into int64, in integers (wrapping).
            let x = self.try_to_dtype(DType::I64)?;
            return Ok(Tensor::from_storage(x.reduce_kernel(ReduceOp::Sum, &all)?, Shape::scalar()));
        }
        let s = self.reduce_kernel(ReduceOp::Sum, &all)?;
        let shape = self.shape().clone();
        let out = Tensor::record_new(s, Shape::scalar(), "SumBackward0", &[self], |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_expand_to(&shape)?)]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_sum())
    }

    /// Sum over `dims` (negative dims count from the end).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
    /// assert_eq!(x.sum_dims(&[-1], false).to_vec::<f64>(), vec![3.0, 7.0]);
    /// assert_eq!(x.sum_dims(&[0], true).dims(), &[1, 2]);
    /// ```
    #[track_caller]
    pub fn try_sum_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor<B>> {
        let d = norm_dims(dims, self.rank(), "sum", Location::caller())?;
        if !self.dtype().is_float() {
            let x = self.try_to_dtype(DType::I64)?;
            return Ok(Tensor::from_storage(x.reduce_kernel(ReduceOp::Sum, &d)?, reduced_shape(self.shape(), &d, keepdim)));
        }
        let s = self.reduce_kernel(ReduceOp::Sum, &d)?;
        let in_shape = self.shape().clone();
        let kd = keepdim_shape(&in_shape, &d);
        let out = Tensor::record_new(s, reduced_shape(&in_shape, &d, keepdim), "SumBackward1", &[self], |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_reshape_to(&kd)?.try_expand_to(&in_shape)?)]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_sum_dims(dims, keepdim))
    }

    /// Mean of all elements (0-d result).
    #[track_caller]
    pub fn try_mean(&self) -> Result<Tensor<B>> {
        let n = self.numel() as f64;
        let all: Vec<usize> = (0..self.rank()).collect();
        let s = self.reduce_kernel(ReduceOp::Sum, &all)?;
        let sum = Tensor::<B>::from_storage(s, Shape::scalar());
        let s = B::binary(autograd_core::BinaryOp::Div, &sum.storage(), sum.layout(), &sum.scalar_like(n).storage(), sum.layout())?;
        let shape = self.shape().clone();
        let out = Tensor::record_new(s, Shape::scalar(), "MeanBackward0", &[self], |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_div_scalar(n)?.try_expand_to(&shape)?)]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_mean())
    }

    /// Mean over `dims`.
    #[track_caller]
    pub fn try_mean_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor<B>> {
        let d = norm_dims(dims, self.rank(), "mean", Location::caller())?;
        let n: usize = d.iter().map(|&i| self.dims()[i]).product();
        let s = self.reduce_kernel(ReduceOp::Sum, &d)?;
        let in_shape = self.shape().clone();
        let kd = keepdim_shape(&in_shape, &d);
        let out_shape = reduced_shape(&in_shape, &d, keepdim);
        let sum = Tensor::<B>::from_storage(s, out_shape.clone());
        let s = B::binary(
            autograd_core::BinaryOp::Div,
            &sum.storage(),
            sum.layout(),
            &sum.scalar_like(n as f64).storage(),
            &autograd_core::Layout::contiguous(Shape::scalar()).broadcast_as(&out_shape)?,
        )?;
        let out = Tensor::record_new(s, out_shape, "MeanBackward1", &[self], |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_div_scalar(n as f64)?.try_reshape_to(&kd)?.try_expand_to(&in_shape)?)]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_mean_dims(dims, keepdim))
    }

    /// Sums a broadcast gradient back to `shape` (the inverse of broadcasting).
    pub fn try_sum_to(&self, shape: &Shape) -> Result<Tensor<B>> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let axes: Vec<isize> = self.shape().unbroadcast_axes(shape).iter().map(|&a| a as isize).collect();
        let summed = if axes.is_empty() { self.clone() } else { self.try_sum_dims(&axes, true)? };
        summed.try_reshape_to(shape)
    }

    /// Max (or min) along `dim` with the indices of the chosen elements (I64).
    #[track_caller]
    fn arg_reduce_op(&self, op: ArgReduceOp, dim: isize, keepdim: bool) -> Result<(Tensor<B>, Tensor<B>)> {
        let opname = if op == ArgReduceOp::Max { "max" } else { "min" };
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), opname).map_err(|e| e.at(loc))?;
        if self.rank() > 0 && self.dims()[d] == 0 {
            return Err(Error::InvalidShape {
                op: opname,
                msg: format!("cannot reduce over dimension {d} of size 0 (shape {:?})", self.shape()),
                location: Some(loc),
            });
        }
        let (x, l) = if self.rank() == 0 { (self.try_reshape(&[1])?, 0) } else { (self.clone(), d) };
        let (vs, is) = B::arg_reduce(op, &x.storage(), x.layout(), l)?;
        let kd = keepdim_shape(x.shape(), &[l]);
        let out_shape = if self.rank() == 0 { Shape::scalar() } else { reduced_shape(self.shape(), &[d], keepdim) };
        let idx_kd = Tensor::<B>::from_storage(is, kd.clone());
        let indices = idx_kd.try_reshape_to(&out_shape)?;
        let in_shape = self.shape().clone();
        let name = if op == ArgReduceOp::Max { "MaxBackward0" } else { "MinBackward0" };
        let values = Tensor::record_new(vs, out_shape, name, &[self], |_| {
            let idx = idx_kd.clone();
            let xs = x.shape().clone();
            saving(move |_, g: &Tensor<B>| {
                let src = g.try_reshape_to(&kd)?;
                let full = Tensor::try_scatter_add_new(&xs, l, &idx, &src)?;
                Ok(vec![Some(full.try_reshape_to(&in_shape)?)])
            })
        });
        let (xs2, idx2, os2) = (x.shape().clone(), idx_kd.clone(), indices.shape().clone());
        let values = crate::recording::with_tangent(values, &[self], |t| {
            t[0].as_ref().expect("tangent").try_reshape_to(&xs2)?.try_gather(l as isize, &idx2)?.try_reshape_to(&os2)
        })?;
        Ok((values, indices))
    }

    /// Maximum along `dim` and its index (first occurrence), like `torch.max(x, dim)`.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 5.0, 3.0, 2.0], [2, 2]);
    /// let (v, i) = x.max_dim(1, false);
    /// assert_eq!(v.to_vec::<f64>(), vec![5.0, 3.0]);
    /// assert_eq!(i.to_vec::<i64>(), vec![1, 0]);
    /// ```
    #[track_caller]
    pub fn try_max_dim(&self, dim: isize, keepdim: bool) -> Result<(Tensor<B>, Tensor<B>)> {
        self.arg_reduce_op(ArgReduceOp::Max, dim, keepdim)
    }

    /// Minimum along `dim` and its index.
    #[track_caller]
    pub fn try_min_dim(&self, dim: isize, keepdim: bool) -> Result<(Tensor<B>, Tensor<B>)> {
        self.arg_reduce_op(ArgReduceOp::Min, dim, keepdim)
    }

    /// Max (or min) over `dims`; the gradient is spread evenly over ties (amax/amin, and max()/min() over everything).
    #[track_caller]
    fn extreme(&self, op: ReduceOp, dims: &[usize], keepdim: bool, opname: &'static str, name: &'static str) -> Result<Tensor<B>> {
        // PyTorch: reducing over a dim of size 0 has no identity; a batch of 0 rows reduced along the other dims is fine.
        let empty_dim = if self.rank() == 0 { None } else { dims.iter().find(|&&d| self.dims()[d] == 0) };
        if let Some(&d) = empty_dim {
            return Err(Error::InvalidShape {
                op: opname,
                msg: format!("expected reduction dim {d} to have non-zero size (input shape {:?})", self.shape()),
                location: Some(Location::caller()),
            });
        }
        let s = self.reduce_kernel(op, dims)?;
        let kd = if self.rank() == 0 { Shape::scalar() } else { keepdim_shape(self.shape(), dims) };
        let out_shape = if self.rank() == 0 { Shape::scalar() } else { reduced_shape(self.shape(), dims, keepdim) };
        let in_shape = self.shape().clone();
        let dims_i: Vec<isize> = dims.iter().map(|&d| d as isize).collect();
        let (kd2, out_shape2) = (kd.clone(), out_shape.clone());
        let out = Tensor::record_new(s, out_shape, name, &[self], |out| {
            let (x, y) = (SavedTensor::new(self), SavedTensor::new(&out.get()));
            saving(move |ctx, g: &Tensor<B>| {
                let x = &x.get(ctx.name())?;
                let y = y.get(ctx.name())?.try_reshape_to(&kd)?;
                let mask = extreme_mask(x, &y)?;
                let count = if dims_i.is_empty() { mask.clone() } else { mask.try_sum_dims(&dims_i, true)? };
                let share = g.try_reshape_to(&kd)?.try_div(&count)?;
                Ok(vec![Some(share.try_expand_to(&in_shape)?.try_mul(&mask)?)])
            })
        });
        let y_det = out.detach();
        crate::recording::with_tangent(out, &[self], |t| {
            let x = self.detach();
            let y = y_det.try_reshape_to(&kd2)?;
            let mask = extreme_mask(&x, &y)?;
            let dims_i: Vec<isize> = dims.iter().map(|&d| d as isize).collect();
            let tm = t[0].as_ref().expect("tangent").try_mul(&mask)?;
            let (num, cnt) =
                if dims_i.is_empty() { (tm, mask) } else { (tm.try_sum_dims(&dims_i, true)?, mask.try_sum_dims(&dims_i, true)?) };
            num.try_div(&cnt)?.try_reshape_to(&out_shape2)
        })
    }

    /// Index of the maximum (first occurrence; a NaN counts as the maximum),
    /// along `dim`, or of the flattened tensor when `dim` is `None`, as
    /// `torch.argmax`. An I64 tensor, not differentiable.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 5.0, 7.0, 2.0], [2, 2]);
    /// assert_eq!(x.argmax(None, false).to_vec::<i64>(), vec![2]);
    /// assert_eq!(x.argmax(Some(1), false).to_vec::<i64>(), vec![1, 0]);
    /// ```
    #[track_caller]
    pub fn try_argmax(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor<B>> {
        self.arg_index(ArgReduceOp::Max, dim, keepdim, "argmax", Location::caller())
    }

    /// Index of the minimum (see [`Tensor::try_argmax`]), as `torch.argmin`.
    #[track_caller]
    pub fn try_argmin(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor<B>> {
        self.arg_index(ArgReduceOp::Min, dim, keepdim, "argmin", Location::caller())
    }

    fn arg_index(
        &self,
        op: ArgReduceOp,
        dim: Option<isize>,
        keepdim: bool,
        opname: &'static str,
        loc: &'static Location<'static>,
    ) -> Result<Tensor<B>> {
        let empty = |what: String| Error::InvalidShape { op: opname, msg: what, location: Some(loc) };
        let x = self.detach();
        match dim {
            None => {
                if self.numel() == 0 {
                    return Err(empty(format!("expected a non-empty tensor (shape {:?})", self.shape())));
                }
                let flat = x.try_reshape_to(&Shape::from([self.numel()]))?;
                let (_, i) = B::arg_reduce(op, &flat.storage(), flat.layout(), 0).map_err(|e| e.at(loc))?;
                let shape = if keepdim { Shape::new(vec![1; self.rank()]) } else { Shape::scalar() };
                Ok(Tensor::from_storage(i, shape))
            }
            Some(dim) => {
                let d = normalize_dim(dim, self.rank(), opname).map_err(|e| e.at(loc))?;
                if self.rank() > 0 && self.dims()[d] == 0 {
                    return Err(empty(format!("expected reduction dim {d} to have non-zero size (shape {:?})", self.shape())));
                }
                let (x, l) = if self.rank() == 0 { (x.try_reshape(&[1])?, 0) } else { (x, d) };
                let (_, i) = B::arg_reduce(op, &x.storage(), x.layout(), l).map_err(|e| e.at(loc))?;
                let out_shape = if self.rank() == 0 { Shape::scalar() } else { reduced_shape(self.shape(), &[d], keepdim) };
                Ok(Tensor::from_storage(i, out_shape))
            }
        }
    }

    /// Maximum of all elements (0-d); ties share the gradient evenly.
    #[track_caller]
    pub fn try_max(&self) -> Result<Tensor<B>> {
        let all: Vec<usize> = (0..self.rank()).collect();
        self.extreme(ReduceOp::Max, &all, false, "max", "MaxBackward1")
    }

    /// Minimum of all elements (0-d); ties share the gradient evenly.
    #[track_caller]
    pub fn try_min(&self) -> Result<Tensor<B>> {
        let all: Vec<usize> = (0..self.rank()).collect();
        self.extreme(ReduceOp::Min, &all, false, "min", "MinBackward1")
    }

    /// Maximum over `dims` (PyTorch's `amax`); ties share the gradient evenly.
    #[track_caller]
    pub fn try_amax(&self, dims: &[isize], keepdim: bool) -> Result<Tensor<B>> {
        let d = norm_dims(dims, self.rank(), "amax", Location::caller())?;
        self.extreme(ReduceOp::Max, &d, keepdim, "amax", "AmaxBackward0")
    }

    /// Minimum over `dims` (PyTorch's `amin`).
    #[track_caller]
    pub fn try_amin(&self, dims: &[isize], keepdim: bool) -> Result<Tensor<B>> {
        let d = norm_dims(dims, self.rank(), "amin", Location::caller())?;
        self.extreme(ReduceOp::Min, &d, keepdim, "amin", "AminBackward0")
    }

    /// Variance over `dims` (all dims when empty) dividing by `N - correction`.
    #[track_caller]
    pub fn try_var_dims(&self, dims: &[isize], correction: usize, keepdim: bool) -> Result<Tensor<B>> {
        self.var_std(dims, correction, keepdim, false)
    }

    /// Standard deviation: `sqrt(var)`, one `StdBackward0` node.
    #[track_caller]
    pub fn try_std_dims(&self, dims: &[isize], correction: usize, keepdim: bool) -> Result<Tensor<B>> {
        self.var_std(dims, correction, keepdim, true)
    }

    /// `var` (VarBackward0) or `std` (StdBackward0) as one node:
    /// d var / dx = 2 (x - mean) / (N - correction), d std = d var / (2 std).
    #[track_caller]
    fn var_std(&self, dims: &[isize], correction: usize, keepdim: bool, std: bool) -> Result<Tensor<B>> {
        let all: Vec<isize> = (0..self.rank() as isize).collect();
        let dims: Vec<isize> = if dims.is_empty() { all } else { dims.to_vec() };
        let d = norm_dims(&dims, self.rank(), if std { "std" } else { "var" }, Location::caller())?;
        let n: usize = d.iter().map(|&i| self.dims()[i]).product();
        let denom = n as f64 - correction as f64;
        let keep_shape = Shape::new(self.dims().iter().enumerate().map(|(i, &s)| if d.contains(&i) { 1 } else { s }).collect());
        let out_shape = if keepdim {
            keep_shape.clone()
        } else {
            Shape::new(self.dims().iter().enumerate().filter(|(i, _)| !d.contains(i)).map(|(_, &s)| s).collect())
        };
        // (x - mean, var or std) with the reduced dims kept
        let moments = move |x: &Tensor<B>| -> Result<(Tensor<B>, Tensor<B>)> {
            let dev = x.try_sub(&x.try_mean_dims(&dims, true)?)?;
            let v = dev.try_mul(&dev)?.try_sum_dims(&dims, true)?.try_div_scalar(denom)?;
            Ok((dev, if std { v.try_sqrt()? } else { v }))
        };
        let m2 = moments.clone();
        crate::recording::composite(
            if std { "StdBackward0" } else { "VarBackward0" },
            &[self],
            || moments(self)?.1.try_reshape_to(&out_shape),
            move |xs, _, g| {
                let (dev, v) = m2(&xs[0])?;
                let mut scale = g.try_reshape_to(&keep_shape)?.try_mul_scalar(2.0 / denom)?;
                if std {
                    // PyTorch's std_backward: zero where the std is 0 (a constant
                    // row), where the formula would be 0/0 and poison every
                    // upstream gradient with NaN.
                    let zero = v.try_eq(&v.scalar_like(0.0))?;
                    scale = scale.try_div(&v.try_mul_scalar(2.0)?)?.try_masked_fill(&zero, 0.0)?;
                }
                Ok(vec![Some(dev.try_mul(&scale)?)])
            },
        )
    }
}

panicking_twins! {
    sum() -> Tensor<B> = try_sum, "Sum of all elements (0-d).";
    sum_dims(dims: &[isize], keepdim: bool) -> Tensor<B> = try_sum_dims, "Sum over `dims`.";
    mean() -> Tensor<B> = try_mean, "Mean of all elements (0-d).";
    mean_dims(dims: &[isize], keepdim: bool) -> Tensor<B> = try_mean_dims, "Mean over `dims`.";
    max_dim(dim: isize, keepdim: bool) -> (Tensor<B>, Tensor<B>) = try_max_dim, "Maximum along `dim` with indices.";
    min_dim(dim: isize, keepdim: bool) -> (Tensor<B>, Tensor<B>) = try_min_dim, "Minimum along `dim` with indices.";
    max() -> Tensor<B> = try_max, "Maximum of all elements (0-d).";
    min() -> Tensor<B> = try_min, "Minimum of all elements (0-d).";
    amax(dims: &[isize], keepdim: bool) -> Tensor<B> = try_amax, "Maximum over `dims`.";
    amin(dims: &[isize], keepdim: bool) -> Tensor<B> = try_amin, "Minimum over `dims`.";
    argmax(dim: Option<isize>, keepdim: bool) -> Tensor<B> = try_argmax, "Index of the maximum (I64), along `dim` or of the flattened tensor.";
    argmin(dim: Option<isize>, keepdim: bool) -> Tensor<B> = try_argmin, "Index of the minimum (I64), along `dim` or of the flattened tensor.";
    var_dims(dims: &[isize], correction: usize, keepdim: bool) -> Tensor<B> = try_var_dims, "Variance over `dims` (all when empty).";
    std_dims(dims: &[isize], correction: usize, keepdim: bool) -> Tensor<B> = try_std_dims, "Standard deviation over `dims` (all when empty).";
}
