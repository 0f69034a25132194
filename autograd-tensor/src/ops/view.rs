//! Views: reshape, transpose, permute, (un)squeeze, expand, narrow/slice/select.
//! They share storage with their input; only the layout changes.

use crate::Tensor;
use crate::recording::stateless;
use autograd_core::{Backend, DType, Error, Result, Shape, normalize_dim};
use std::panic::Location;

impl<B: Backend> Tensor<B> {
    /// Reshape to an exact shape: a view when the layout allows, else a copy.
    #[track_caller]
    pub(crate) fn try_reshape_to(&self, shape: &Shape) -> Result<Tensor<B>> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        if shape.numel() != self.numel() {
            return Err(Error::InvalidShape {
                op: "reshape",
                msg: format!("shape {shape:?} is invalid for input of size {} (shape {:?})", self.numel(), self.shape()),
                location: Some(Location::caller()),
            });
        }
        match self.layout().reshape(shape) {
            Some(l) => {
                let in_shape = self.shape().clone();
                let out = self
                    .record_view(l, "ViewBackward0", || stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_reshape_to(&in_shape)?)])));
                crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_reshape_to(shape))
            }
            None => self.try_contiguous()?.try_reshape_to(shape),
        }
    }

    /// Reshape (one dim may be -1); a view when possible, otherwise a copy.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// let x = Tensor::<RefBackend>::zeros([2, 3, 4]);
    /// assert_eq!(x.reshape(&[4, -1]).dims(), &[4, 6]);
    /// assert!(x.try_reshape(&[5, -1]).is_err());
    /// ```
    #[track_caller]
    pub fn try_reshape(&self, shape: &[isize]) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let s = self.shape().infer_reshape(shape, "reshape").map_err(|e| e.at(loc))?;
        self.try_reshape_to(&s)
    }

    /// A view with a new shape; `Err` if the layout does not allow one without a copy (use `reshape`).
    #[track_caller]
    pub fn try_view(&self, shape: &[isize]) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let s = self.shape().infer_reshape(shape, "view").map_err(|e| e.at(loc))?;
        if self.layout().reshape(&s).is_none() {
            return Err(Error::InvalidShape {
                op: "view",
                msg: format!(
                    "view size {s:?} is not compatible with the input's size {:?} and strides {:?} (at least one dimension spans across two contiguous subspaces); use reshape() instead",
                    self.shape(),
                    self.layout().strides()
                ),
                location: Some(loc),
            });
        }
        self.try_reshape_to(&s)
    }

    /// Flattens dims `start..=end` into one.
    #[track_caller]
    pub fn try_flatten(&self, start: isize, end: isize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        if self.rank() == 0 {
            return self.try_reshape_to(&Shape::from([1]));
        }
        let (s, e) = (
            normalize_dim(start, self.rank(), "flatten").map_err(|x| x.at(loc))?,
            normalize_dim(end, self.rank(), "flatten").map_err(|x| x.at(loc))?,
        );
        if s > e {
            return Err(Error::InvalidShape {
                op: "flatten",
                msg: format!("start_dim {s} cannot come after end_dim {e}"),
                location: Some(loc),
            });
        }
        let d = self.dims();
        let mut nd: Vec<usize> = d[..s].to_vec();
        nd.push(d[s..=e].iter().product());
        nd.extend_from_slice(&d[e + 1..]);
        self.try_reshape_to(&Shape::new(nd))
    }

    /// Swaps two dims (a view).
    #[track_caller]
    pub fn try_transpose(&self, d0: isize, d1: isize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let (a, b) = (
            normalize_dim(d0, self.rank(), "transpose").map_err(|e| e.at(loc))?,
            normalize_dim(d1, self.rank(), "transpose").map_err(|e| e.at(loc))?,
        );
        let l = self.layout().transpose(a, b)?;
        let out = self.record_view(l, "TransposeBackward0", || {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_transpose(a as isize, b as isize)?)]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_transpose(d0, d1))
    }

    /// Transpose of a tensor with at most 2 dims (`x.t()`).
    #[track_caller]
    pub fn try_t(&self) -> Result<Tensor<B>> {
        if self.rank() > 2 {
            return Err(Error::InvalidShape {
                op: "t",
                msg: format!("t() expects a tensor with <= 2 dimensions, but got shape {:?}; use transpose() or permute()", self.shape()),
                location: Some(Location::caller()),
            });
        }
        if self.rank() < 2 {
            return Ok(self.clone());
        }
        let l = self.layout().transpose(0, 1)?;
        let out = self.record_view(l, "TBackward0", || stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_t()?)])));
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_t())
    }

    /// Reorders dims (a view): output dim `i` is input dim `dims[i]`.
    #[track_caller]
    pub fn try_permute(&self, dims: &[isize]) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let perm: Vec<usize> =
            dims.iter().map(|&d| normalize_dim(d, self.rank(), "permute")).collect::<Result<_>>().map_err(|e| e.at(loc))?;
        let l = self.layout().permute(&perm).map_err(|e| e.at(loc))?;
        let mut inv = vec![0isize; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i as isize;
        }
        let out = self.record_view(l, "PermuteBackward0", || stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_permute(&inv)?)])));
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_permute(dims))
    }

    /// Inserts a size-1 dim at `dim` (`-1` appends).
    #[track_caller]
    pub fn try_unsqueeze(&self, dim: isize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank() + 1, "unsqueeze").map_err(|e| e.at(loc))?;
        let l = self.layout().unsqueeze(d)?;
        let out =
            self.record_view(l, "UnsqueezeBackward0", || stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_squeeze_dim(d as isize)?)])));
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_unsqueeze(dim))
    }

    /// Removes dim `dim` if it has size 1 (otherwise returns an unchanged view, like PyTorch).
    #[track_caller]
    pub fn try_squeeze_dim(&self, dim: isize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "squeeze").map_err(|e| e.at(loc))?;
        let l = self.layout().squeeze(d)?;
        let in_shape = self.shape().clone();
        let out =
            self.record_view(l, "SqueezeBackward1", || stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_reshape_to(&in_shape)?)])));
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_squeeze_dim(dim))
    }

    /// Removes every size-1 dim.
    #[track_caller]
    pub fn try_squeeze(&self) -> Result<Tensor<B>> {
        let mut l = self.layout().clone();
        for d in (0..self.rank()).rev() {
            l = l.squeeze(d)?;
        }
        let in_shape = self.shape().clone();
        let out =
            self.record_view(l, "SqueezeBackward0", || stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_reshape_to(&in_shape)?)])));
        let out_shape = out.shape().clone();
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_reshape_to(&out_shape))
    }

    /// Broadcasts to `shape` without copying (stride-0 view); `-1` keeps a dim.
    #[track_caller]
    pub fn try_expand(&self, shape: &[isize]) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let lead = shape.len().checked_sub(self.rank()).ok_or_else(|| Error::InvalidShape {
            op: "expand",
            msg: format!(
                "the number of sizes provided ({}) must be at least the number of dims of the tensor {:?}",
                shape.len(),
                self.shape()
            ),
            location: Some(loc),
        })?;
        let mut dims = Vec::with_capacity(shape.len());
        for (i, &s) in shape.iter().enumerate() {
            dims.push(match s {
                -1 if i >= lead => self.dims()[i - lead],
                s if s >= 0 => s as usize,
                _ => {
                    return Err(Error::InvalidShape {
                        op: "expand",
                        msg: format!(
                            "invalid size {s} at dim {i} of {shape:?} (-1 keeps an existing dim; it is not allowed in a new leading dim)"
                        ),
                        location: Some(loc),
                    });
                }
            });
        }
        self.try_expand_to(&Shape::new(dims)).map_err(|e| e.at(loc))
    }

    #[track_caller]
    pub(crate) fn try_expand_to(&self, shape: &Shape) -> Result<Tensor<B>> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let l = self.layout().broadcast_as(shape).map_err(|e| e.at(Location::caller()))?;
        let in_shape = self.shape().clone();
        let out = self.record_view(l, "ExpandBackward0", || stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_sum_to(&in_shape)?)])));
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_expand_to(shape))
    }

    /// Elements `start..start+length` of `dim` (a view).
    #[track_caller]
    pub fn try_narrow(&self, dim: isize, start: usize, length: usize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "narrow").map_err(|e| e.at(loc))?;
        self.slice_impl(d, start, length, 1, loc)
    }

    /// Python-style slice `start:end:step` of `dim`; negative `start`/`end` count from the end, `end = None` means to the end.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::arange_dtype(0.0, 6.0, 1.0, autograd_core::DType::F64);
    /// assert_eq!(x.slice(0, -2, None, 1).to_vec::<f64>(), vec![4.0, 5.0]);
    /// assert_eq!(x.slice(0, 0, None, 2).to_vec::<f64>(), vec![0.0, 2.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn try_slice(&self, dim: isize, start: isize, end: Option<isize>, step: usize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "slice").map_err(|e| e.at(loc))?;
        let n = self.dim_size(d, "slice", loc)? as isize;
        let clamp = |v: isize| if v < 0 { (v + n).max(0) } else { v.min(n) };
        let (s, e) = (clamp(start), clamp(end.unwrap_or(n)));
        if step == 0 {
            return Err(Error::InvalidShape { op: "slice", msg: "slice step must be positive".into(), location: Some(loc) });
        }
        let len = if e > s { ((e - s) as usize).div_ceil(step) } else { 0 };
        self.slice_impl(d, s as usize, len, step, loc)
    }

    /// The size of dim `d` (already normalised); `Err` for a 0-d tensor,
    /// which has no dim to index (`normalize_dim` accepts 0 and -1 there).
    pub(crate) fn dim_size(&self, d: usize, op: &'static str, loc: &'static Location<'static>) -> Result<usize> {
        self.dims().get(d).copied().ok_or_else(|| Error::InvalidShape {
            op,
            msg: format!("{op}() cannot be applied to a 0-d tensor"),
            location: Some(loc),
        })
    }

    /// A narrow of dim `d` whose errors carry `loc` (for split and chunk).
    pub(crate) fn slice_impl_at(&self, d: usize, start: usize, len: usize, loc: &'static Location<'static>) -> Result<Tensor<B>> {
        self.slice_impl(d, start, len, 1, loc)
    }

    fn slice_impl(&self, d: usize, start: usize, len: usize, step: usize, loc: &'static Location<'static>) -> Result<Tensor<B>> {
        let l = self.layout().slice(d, start, len, step).map_err(|e| e.at(loc))?;
        let in_shape = self.shape().clone();
        let out = self.record_view(l, "SliceBackward0", || {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_slice_backward(&in_shape, d, start, step)?)]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").slice_impl(d, start, len, step, loc))
    }

    /// Places `self` (a slice's gradient) into zeros of `shape` at `start::step` along `dim`.
    fn try_slice_backward(&self, shape: &Shape, d: usize, start: usize, step: usize) -> Result<Tensor<B>> {
        let len = self.dims()[d];
        if !crate::is_grad_enabled() {
            // nothing records: the gradient written into zeros in one copy
            // (a cat would copy every part, the zeros too)
            let out = Tensor::<B>::zeros_dtype(shape.clone(), self.dtype());
            out.slice_impl(d, start, len, step, Location::caller())?.try_copy_(self)?;
            return Ok(out);
        }
        if step == 1 {
            let mut parts = Vec::with_capacity(3);
            let zeros = |n: usize| {
                let mut z = shape.dims().to_vec();
                z[d] = n;
                Tensor::<B>::zeros_dtype(Shape::new(z), self.dtype())
            };
            if start > 0 {
                parts.push(zeros(start));
            }
            parts.push(self.clone());
            let after = shape.dims()[d] - start - len;
            if after > 0 {
                parts.push(zeros(after));
            }
            return Tensor::try_cat(&parts, d as isize);
        }
        let idx = Tensor::<B>::arange_dtype(start as f64, (start + step * len) as f64, step as f64, DType::I64);
        let mut vd = vec![1usize; self.rank()];
        vd[d] = len;
        let idx = idx.try_reshape_to(&Shape::new(vd))?.try_expand_to(self.shape())?.try_contiguous()?;
        Tensor::try_scatter_add_new(shape, d, &idx, self)
    }

    /// Picks index `index` of `dim`, removing the dim (a view; `x[i]` in Python). Negative indices count from the end.
    #[track_caller]
    pub fn try_select(&self, dim: isize, index: isize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "select").map_err(|e| e.at(loc))?;
        let n = self.dim_size(d, "select", loc)? as isize;
        let i = if index < 0 { index + n } else { index };
        if i < 0 || i >= n {
            return Err(Error::IndexOutOfRange { op: "select", index: index as i64, dim: d, size: n as usize, location: Some(loc) });
        }
        let l = self.layout().select(d, i as usize)?;
        let in_shape = self.shape().clone();
        let out = self.record_view(l, "SelectBackward0", || {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_unsqueeze(d as isize)?.try_slice_backward(&in_shape, d, i as usize, 1)?)]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_select(dim, index))
    }
}

panicking_twins! {
    reshape(shape: &[isize]) -> Tensor<B> = try_reshape, "Reshape (one dim may be -1); a view when possible.";
    view(shape: &[isize]) -> Tensor<B> = try_view, "A view with a new shape (panics where `reshape` would need a copy).";
    flatten(start: isize, end: isize) -> Tensor<B> = try_flatten, "Flattens dims `start..=end` (PyTorch's `flatten(start_dim, end_dim)`).";
    transpose(d0: isize, d1: isize) -> Tensor<B> = try_transpose, "Swaps two dims (a view).";
    t() -> Tensor<B> = try_t, "Transpose of a matrix (a view).";
    permute(dims: &[isize]) -> Tensor<B> = try_permute, "Reorders dims (a view).";
    unsqueeze(dim: isize) -> Tensor<B> = try_unsqueeze, "Inserts a size-1 dim.";
    squeeze_dim(dim: isize) -> Tensor<B> = try_squeeze_dim, "Removes `dim` if it has size 1.";
    squeeze() -> Tensor<B> = try_squeeze, "Removes every size-1 dim.";
    expand(shape: &[isize]) -> Tensor<B> = try_expand, "Broadcasts to `shape` (a view; -1 keeps a dim).";
    narrow(dim: isize, start: usize, length: usize) -> Tensor<B> = try_narrow, "Elements `start..start+length` of `dim` (a view).";
    slice(dim: isize, start: isize, end: Option<isize>, step: usize) -> Tensor<B> = try_slice, "Python-style `start:end:step` slice of `dim`.";
    select(dim: isize, index: isize) -> Tensor<B> = try_select, "Picks one index of `dim`, removing it.";
}
