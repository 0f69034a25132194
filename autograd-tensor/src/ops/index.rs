//! Indexing: gather, scatter-add, index_select, cat, stack.

use crate::Tensor;
use crate::node::SavedTensor;
use crate::recording::{saving, stateless};
use autograd_core::ResultExt;
use autograd_core::{Backend, DType, Error, Result, Shape, normalize_dim};
use std::panic::Location;

impl<B: Backend> Tensor<B> {
    /// `out[i][j] = self[i][index[i][j]]` along `dim` (PyTorch's `gather`; `index` is I64).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
    /// let i = Tensor::<RefBackend>::from_vec(vec![1i64, 0], [2, 1]);
    /// assert_eq!(x.gather(1, &i).to_vec::<f64>(), vec![2.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn try_gather(&self, dim: isize, index: &Tensor<B>) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "gather").map_err(|e| e.at(loc))?;
        if self.rank() == 0 {
            return Err(Error::InvalidShape {
                op: "gather",
                msg: "gather needs a tensor with at least one dim (got a 0-d tensor)".into(),
                location: Some(loc),
            });
        }
        if index.rank() != self.rank() || index.dims().iter().zip(self.dims()).enumerate().any(|(i, (a, b))| i != d && a > b) {
            return Err(Error::shape_mismatch("gather", self.shape(), index.shape(), Some(loc)));
        }
        let s = B::gather(&self.storage(), self.layout(), d, &index.storage(), index.layout()).map_err(|e| e.at(loc))?;
        let in_shape = self.shape().clone();
        let out = Tensor::record_new(s, index.shape().clone(), "GatherBackward0", &[self], |_| {
            // saved like every saved tensor: version-checked, seen by saved-tensor hooks
            let idx = SavedTensor::new(index);
            saving(move |ctx, g: &Tensor<B>| Ok(vec![Some(Tensor::try_scatter_add_new(&in_shape, d, &idx.get(ctx.name())?, g)?)]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_gather(dim, index))
    }

    /// Zeros of `shape` with `src` added at `index` along `dim`; differentiable in `src`.
    pub(crate) fn try_scatter_add_new(shape: &Shape, dim: usize, index: &Tensor<B>, src: &Tensor<B>) -> Result<Tensor<B>> {
        let s = B::scatter_add(shape, dim, &index.storage(), index.layout(), &src.storage(), src.layout())?;
        let out = Tensor::record_new(s, shape.clone(), "ScatterAddBackward0", &[src], |_| {
            let idx = SavedTensor::new(index);
            saving(move |ctx, g: &Tensor<B>| Ok(vec![Some(g.try_gather(dim as isize, &idx.get(ctx.name())?)?)]))
        });
        crate::recording::with_tangent(out, &[src], |t| Tensor::try_scatter_add_new(shape, dim, index, t[0].as_ref().expect("tangent")))
    }

    /// `self` plus `src` added at `index` along `dim` (PyTorch's out-of-place
    /// `scatter_add`); differentiable in both `self` and `src`.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// let base = Tensor::<RefBackend>::zeros_dtype([3], DType::F64);
    /// let idx = Tensor::<RefBackend>::from_vec(vec![0i64, 2, 0], [3]);
    /// let src = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
    /// assert_eq!(base.scatter_add(0, &idx, &src).to_vec::<f64>(), vec![4.0, 0.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn try_scatter_add(&self, dim: isize, index: &Tensor<B>, src: &Tensor<B>) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "scatter_add").map_err(|e| e.at(loc))?;
        if self.rank() == 0 {
            return Err(Error::InvalidShape {
                op: "scatter_add",
                msg: "scatter_add needs a tensor with at least one dim (got a 0-d tensor)".into(),
                location: Some(loc),
            });
        }
        if index.shape() != src.shape() || index.rank() != self.rank() {
            return Err(Error::shape_mismatch("scatter_add", index.shape(), src.shape(), Some(loc)));
        }
        let (base, src) = self.promote_pair(src)?;
        base.try_add(&Tensor::try_scatter_add_new(base.shape(), d, index, &src)?)
    }

    /// Rows (or columns, ...) of `dim` picked by a 1-D I64 `index`, repeats allowed.
    #[track_caller]
    pub fn try_index_select(&self, dim: isize, index: &Tensor<B>) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let d = normalize_dim(dim, self.rank(), "index_select").map_err(|e| e.at(loc))?;
        if self.rank() == 0 {
            return Err(Error::InvalidShape {
                op: "index_select",
                msg: "index_select needs a tensor with at least one dim (got a 0-d tensor)".into(),
                location: Some(loc),
            });
        }
        if index.rank() > 1 || index.dtype() != DType::I64 {
            return Err(Error::InvalidShape {
                op: "index_select",
                msg: format!("index must be a 1-D I64 tensor, got shape {:?} of {:?}", index.shape(), index.dtype()),
                location: Some(loc),
            });
        }
        let n = index.numel();
        let mut vd = vec![1usize; self.rank()];
        vd[d] = n;
        let mut od = self.dims().to_vec();
        od[d] = n;
        let out_shape = Shape::new(od);
        let idx = index.detach().try_reshape_to(&Shape::new(vd))?.try_expand_to(&out_shape)?;
        let s = B::gather(&self.storage(), self.layout(), d, &idx.storage(), idx.layout()).map_err(|e| e.renamed("index_select", loc))?;
        let in_shape = self.shape().clone();
        let out = Tensor::record_new(s, out_shape, "IndexSelectBackward0", &[self], |_| {
            saving(move |_, g: &Tensor<B>| Ok(vec![Some(Tensor::try_scatter_add_new(&in_shape, d, &idx.try_contiguous()?, g)?)]))
        });
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_index_select(dim, index))
    }

    /// Concatenates along `dim`; all other dims must agree.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// let a = Tensor::<RefBackend>::zeros([2, 1]);
    /// let b = Tensor::<RefBackend>::ones([2, 3]);
    /// assert_eq!(Tensor::cat(&[a, b], 1).dims(), &[2, 4]);
    /// ```
    #[track_caller]
    pub fn try_cat(tensors: &[Tensor<B>], dim: isize) -> Result<Tensor<B>> {
        Self::cat_named(tensors, dim, "CatBackward0", Location::caller())
    }

    fn cat_named(tensors: &[Tensor<B>], dim: isize, name: &'static str, loc: &'static Location<'static>) -> Result<Tensor<B>> {
        let first = tensors.first().ok_or_else(|| Error::InvalidShape {
            op: "cat",
            msg: "expected a non-empty list of tensors".into(),
            location: Some(loc),
        })?;
        let d = normalize_dim(dim, first.rank(), "cat").map_err(|e| e.at(loc))?;
        let dtype = tensors.iter().map(|t| t.dtype()).reduce(DType::promote).unwrap_or(first.dtype());
        let ts: Vec<Tensor<B>> = tensors.iter().map(|t| t.try_to_dtype(dtype)).collect::<Result<_>>()?;
        for t in &ts[1..] {
            let ok = t.rank() == first.rank() && t.dims().iter().zip(first.dims()).enumerate().all(|(i, (a, b))| i == d || a == b);
            if !ok {
                return Err(Error::shape_mismatch("cat", first.shape(), t.shape(), Some(loc)));
            }
        }
        let guards: Vec<_> = ts.iter().map(|t| t.storage()).collect();
        let parts: Vec<_> = guards.iter().zip(&ts).map(|(g, t)| (&**g, t.layout())).collect();
        let s = B::cat(&parts, d).map_err(|e| e.at(loc))?;
        drop(parts);
        drop(guards);
        let mut od = first.dims().to_vec();
        od[d] = ts.iter().map(|t| t.dims()[d]).sum();
        let sizes: Vec<usize> = ts.iter().map(|t| t.dims()[d]).collect();
        let refs: Vec<&Tensor<B>> = ts.iter().collect();
        let out = Tensor::record(
            crate::tensor::StorageCell::new(s),
            autograd_core::Layout::contiguous(Shape::new(od)),
            dtype,
            name,
            &refs,
            || {
                stateless(move |_, g: &Tensor<B>| {
                    let mut start = 0;
                    let mut out = Vec::with_capacity(sizes.len());
                    for &n in &sizes {
                        out.push(Some(g.try_narrow(d as isize, start, n)?));
                        start += n;
                    }
                    Ok(out)
                })
            },
        );
        crate::recording::with_tangent(out, &refs, |t| {
            let parts: Vec<Tensor<B>> = t.iter().zip(&ts).map(|(x, p)| crate::recording::tan_or_zero(x, p)).collect();
            Tensor::cat_named(&parts, dim, name, loc)
        })
    }

    /// Stacks equal-shaped tensors along a new dim.
    #[track_caller]
    pub fn try_stack(tensors: &[Tensor<B>], dim: isize) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let first = tensors.first().ok_or_else(|| Error::InvalidShape {
            op: "stack",
            msg: "expected a non-empty list of tensors".into(),
            location: Some(loc),
        })?;
        let d = normalize_dim(dim, first.rank() + 1, "stack").map_err(|e| e.at(loc))?;
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(Error::shape_mismatch("stack", first.shape(), t.shape(), Some(loc)));
            }
        }
        let us: Vec<Tensor<B>> = tensors.iter().map(|t| t.detach_keep_graph_unsqueeze(d)).collect::<Result<_>>()?;
        Self::cat_named(&us, d as isize, "StackBackward0", loc)
    }

    fn detach_keep_graph_unsqueeze(&self, d: usize) -> Result<Tensor<B>> {
        self.try_unsqueeze(d as isize)
    }

    /// Panicking [`Tensor::try_cat`].
    #[track_caller]
    pub fn cat(tensors: &[Tensor<B>], dim: isize) -> Tensor<B> {
        Self::cat_named(tensors, dim, "CatBackward0", Location::caller()).or_panic()
    }
    /// Panicking [`Tensor::try_stack`].
    #[track_caller]
    pub fn stack(tensors: &[Tensor<B>], dim: isize) -> Tensor<B> {
        Self::try_stack(tensors, dim).or_panic()
    }
}

panicking_twins! {
    scatter_add(dim: isize, index: &Tensor<B>, src: &Tensor<B>) -> Tensor<B> = try_scatter_add, "Panicking [`Tensor::try_scatter_add`].";
    gather(dim: isize, index: &Tensor<B>) -> Tensor<B> = try_gather, "Panicking [`Tensor::try_gather`].";
    index_select(dim: isize, index: &Tensor<B>) -> Tensor<B> = try_index_select, "Panicking [`Tensor::try_index_select`].";
}
