//! The argument checks every backend runs before it touches a storage.
//!
//! [`crate::Backend`] methods are safe functions that anybody may call with
//! any layout. Each backend calls these checks at the top of every
//! primitive, so that everything a kernel indexes (and every pointer the
//! CPU backend's `unsafe` GEMM call forms) was proven in range here, with
//! checked arithmetic, once. Checks are O(rank) and never touch the data.

use crate::memory::check_alloc;
use crate::{DType, Error, Layout, Result, Shape};

/// A layout read from a storage of `len` elements: see [`Layout::check_storage`].
///
/// ```
/// use autograd_core::{validate, Layout, Shape};
/// assert!(validate::input("add", 4, &Layout::contiguous(Shape::from([2, 2]))).is_ok());
/// assert!(validate::input("add", 3, &Layout::contiguous(Shape::from([2, 2]))).is_err());
/// ```
pub fn input(op: &'static str, len: usize, layout: &Layout) -> Result<()> {
    layout.check_storage(len, op)
}

/// An output of `shape` in `dtype` can be allocated (see [`check_alloc`]).
///
/// ```
/// use autograd_core::{validate, DType, Shape};
/// assert!(validate::output("exp", &Shape::from([1 << 20, 1 << 20]), DType::F32).is_err());
/// ```
pub fn output(op: &'static str, shape: &Shape, dtype: DType) -> Result<usize> {
    let n = shape.try_numel(op)?;
    check_alloc(op, n, dtype.size_in_bytes())?;
    Ok(n)
}

/// Two layouts with one shape (elementwise operands, assignment).
pub fn same_shape(op: &'static str, a: &Layout, b: &Layout) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(Error::shape_mismatch(op, a.shape(), b.shape(), None));
    }
    Ok(())
}

/// One dim index of a tensor of `rank` (already normalised: `0..rank`).
pub fn dim(op: &'static str, rank: usize, dim: usize) -> Result<()> {
    if dim >= rank {
        return Err(Error::DimOutOfRange { op, dim: dim as isize, rank, location: None });
    }
    Ok(())
}

/// Reduction dims: each in `0..rank`, strictly increasing.
///
/// ```
/// use autograd_core::validate;
/// assert!(validate::reduce_dims("sum", 2, &[0, 1]).is_ok());
/// assert!(validate::reduce_dims("sum", 2, &[1, 1]).is_err());
/// assert!(validate::reduce_dims("sum", 2, &[2]).is_err());
/// ```
pub fn reduce_dims(op: &'static str, rank: usize, dims: &[usize]) -> Result<()> {
    for (i, &d) in dims.iter().enumerate() {
        dim(op, rank, d)?;
        if i > 0 && dims[i - 1] >= d {
            return Err(Error::invalid_shape(op, format!("reduction dims {dims:?} must be sorted and unique")));
        }
    }
    Ok(())
}

/// The sizes of a batched product `[batch.., m, k] x [batch.., k, n]`:
/// `(batch count, m, k, n)`, after checking ranks, batch dims and the inner
/// size, and that the output can be allocated.
///
/// ```
/// use autograd_core::{validate, DType, Layout, Shape};
/// let a = Layout::contiguous(Shape::from([2, 3]));
/// let b = Layout::contiguous(Shape::from([3, 4]));
/// assert_eq!(validate::matmul(&a, &b, DType::F32).unwrap(), (1, 2, 3, 4));
/// assert!(validate::matmul(&b, &b, DType::F32).is_err());
/// ```
pub fn matmul(la: &Layout, lb: &Layout, dtype: DType) -> Result<(usize, usize, usize, usize)> {
    let r = la.rank();
    if r < 2 || lb.rank() != r || la.dims()[..r - 2] != lb.dims()[..r - 2] || la.dims()[r - 1] != lb.dims()[r - 2] {
        return Err(Error::shape_mismatch("matmul", la.shape(), lb.shape(), None));
    }
    let (m, k, n) = (la.dims()[r - 2], la.dims()[r - 1], lb.dims()[r - 1]);
    let mut out = la.dims().to_vec();
    out[r - 1] = n;
    let out = Shape::new(out);
    output("matmul", &out, dtype)?;
    let nb = Shape::new(la.dims()[..r - 2].to_vec()).numel();
    Ok((nb, m, k, n))
}

/// `addmm`'s operands: [`matmul`]'s checks, and `lc` (the added term, a
/// broadcast bias) of the product's output shape. Returns the sizes as
/// [`matmul`] does.
///
/// ```
/// use autograd_core::{validate, DType, Layout, Shape};
/// let (a, b) = (Layout::contiguous(Shape::from([2, 3])), Layout::contiguous(Shape::from([3, 4])));
/// let bias = Layout::contiguous(Shape::from([4])).broadcast_as(&Shape::from([2, 4])).unwrap();
/// assert_eq!(validate::addmm(&bias, &a, &b, DType::F32).unwrap(), (1, 2, 3, 4));
/// assert!(validate::addmm(&a, &a, &b, DType::F32).is_err());
/// ```
pub fn addmm(lc: &Layout, la: &Layout, lb: &Layout, dtype: DType) -> Result<(usize, usize, usize, usize)> {
    let sizes = matmul(la, lb, dtype)?;
    let r = la.rank();
    let out: Vec<usize> = la.dims()[..r - 1].iter().copied().chain([lb.dims()[r - 1]]).collect();
    if lc.dims() != out.as_slice() {
        return Err(Error::shape_mismatch("addmm", lc.shape(), &Shape::new(out), None));
    }
    Ok(sizes)
}

/// `gather` along `dim`: same rank, and the index no larger than the input
/// in every other dim (so every non-indexed coordinate is in range).
pub fn gather(layout: &Layout, dim_: usize, lidx: &Layout, dtype: DType) -> Result<()> {
    let r = layout.rank();
    dim("gather", r, dim_)?;
    let fits = lidx.rank() == r && (0..r).all(|d| d == dim_ || lidx.dims()[d] <= layout.dims()[d]);
    if !fits {
        return Err(Error::invalid_shape(
            "gather",
            format!(
                "index of shape {:?} does not fit input of shape {:?} along dim {dim_} (same rank, and no larger in the other dims)",
                lidx.shape(),
                layout.shape()
            ),
        ));
    }
    output("gather", lidx.shape(), dtype)?;
    Ok(())
}

/// `scatter_add` into zeros of `shape` along `dim`: index and source of one
/// shape, of the output's rank, no larger than it in the other dims.
pub fn scatter_add(shape: &Shape, dim_: usize, lidx: &Layout, lsrc: &Layout, dtype: DType) -> Result<()> {
    let r = shape.rank();
    dim("scatter_add", r, dim_)?;
    same_shape("scatter_add", lidx, lsrc)?;
    let fits = lidx.rank() == r && (0..r).all(|d| d == dim_ || lidx.dims()[d] <= shape.dims()[d]);
    if !fits {
        return Err(Error::invalid_shape(
            "scatter_add",
            format!("index of shape {:?} does not fit an output of shape {shape:?} along dim {dim_}", lidx.shape()),
        ));
    }
    output("scatter_add", shape, dtype)?;
    Ok(())
}

/// `cat` along `dim`: at least one part, one rank, equal sizes outside
/// `dim`; returns the output shape (its size checked).
pub fn cat(shapes: &[&Shape], dim_: usize, dtype: DType) -> Result<Shape> {
    let Some(first) = shapes.first() else {
        return Err(Error::invalid_shape("cat", "expected a non-empty list of tensors"));
    };
    let r = first.rank();
    dim("cat", r, dim_)?;
    let mut total = 0usize;
    for s in shapes {
        if s.rank() != r || (0..r).any(|d| d != dim_ && s.dims()[d] != first.dims()[d]) {
            return Err(Error::shape_mismatch("cat", first, s, None));
        }
        total = total.checked_add(s.dims()[dim_]).ok_or_else(|| Error::invalid_shape("cat", "the concatenated size overflows"))?;
    }
    let mut dims = first.dims().to_vec();
    dims[dim_] = total;
    let out = Shape::new(dims);
    output("cat", &out, dtype)?;
    Ok(out)
}

/// The output of reducing `layout` over `dims` (kept as size 1) can be allocated.
pub fn reduce_output(op: &'static str, layout: &Layout, dims: &[usize], dtype: DType) -> Result<()> {
    let mut out = layout.dims().to_vec();
    for &d in dims {
        out[d] = 1;
    }
    output(op, &Shape::new(out), dtype).map(|_| ())
}

/// Max/min with indices along `dim`: a valid dim, and not an empty dim
/// when there are outputs to fill (there is no index to return).
pub fn arg_reduce(op: &'static str, layout: &Layout, dim_: usize) -> Result<()> {
    dim(op, layout.rank(), dim_)?;
    if layout.dims()[dim_] == 0 && layout.dims().iter().enumerate().all(|(d, &n)| d == dim_ || n > 0) {
        return Err(Error::invalid_shape(op, format!("cannot reduce over dimension {dim_} of size 0 (shape {:?})", layout.shape())));
    }
    reduce_output(op, layout, &[dim_], DType::I64)
}

/// The sizes of an `unfold` (im2col) or `fold` (col2im): batch, channels,
/// the spatial sizes and the window positions per spatial dim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowSizes {
    /// Batch size `N`.
    pub batch: usize,
    /// Channels `C`.
    pub channels: usize,
    /// The image's spatial sizes.
    pub spatial: crate::window::Dims,
    /// Window positions per spatial dim (their product is `L`).
    pub positions: crate::window::Dims,
}

impl WindowSizes {
    /// `L`: the number of window positions.
    pub fn num_positions(&self) -> usize {
        self.positions.iter().product()
    }
    /// The image's elements per channel.
    pub fn image_numel(&self) -> usize {
        self.spatial.iter().product()
    }
}

/// `unfold` of an `[N, C, *spatial]` input into `[N, C * K, L]` columns
/// (`K` the window's elements, `L` its positions): the ranks agree, the
/// window fits, and the output can be allocated.
///
/// ```
/// use autograd_core::{validate, window::Window, DType, Layout, Shape};
/// let w = Window::new("unfold", &[2, 2], &[1, 1], &[(0, 0), (0, 0)], &[1, 1]).unwrap();
/// let s = validate::unfold("unfold", &Layout::contiguous(Shape::from([1, 3, 4, 5])), &w, DType::F32).unwrap();
/// assert_eq!((s.channels, s.num_positions()), (3, 12));
/// assert!(validate::unfold("unfold", &Layout::contiguous(Shape::from([3, 4, 5])), &w, DType::F32).is_err());
/// ```
pub fn unfold(op: &'static str, layout: &Layout, window: &crate::window::Window, dtype: DType) -> Result<WindowSizes> {
    let dims = layout.dims();
    if dims.len() != window.rank() + 2 {
        return Err(Error::invalid_shape(
            op,
            format!("a {}-d window needs an [N, C, {} spatial dims] input (got {dims:?})", window.rank(), window.rank()),
        ));
    }
    let spatial: crate::window::Dims = dims[2..].into();
    let positions = window.out_dims(op, &spatial)?;
    // every product below is of dims of a shape whose numel was checked here
    let mut out: Vec<usize> = vec![dims[0], dims[1]];
    out.extend_from_slice(window.kernel());
    out.extend_from_slice(&positions);
    output(op, &Shape::from(out), dtype)?;
    let mut image: Vec<usize> = vec![1];
    image.extend_from_slice(&spatial);
    Shape::from(image).try_numel(op)?;
    Ok(WindowSizes { batch: dims[0], channels: dims[1], spatial, positions })
}

/// `fold` of `[N, C * K, L]` columns into an `[N, C, *spatial]` image: `K`
/// divides the second dim, `L` is the number of window positions over
/// `spatial`, and the output can be allocated.
///
/// ```
/// use autograd_core::{validate, window::Window, DType, Layout, Shape};
/// let w = Window::new("fold", &[2, 2], &[1, 1], &[(0, 0), (0, 0)], &[1, 1]).unwrap();
/// assert!(validate::fold(&Layout::contiguous(Shape::from([1, 12, 12])), &w, &[4, 5], DType::F32).is_ok());
/// assert!(validate::fold(&Layout::contiguous(Shape::from([1, 12, 11])), &w, &[4, 5], DType::F32).is_err());
/// ```
pub fn fold(layout: &Layout, window: &crate::window::Window, spatial: &[usize], dtype: DType) -> Result<WindowSizes> {
    let dims = layout.dims();
    let k = window.kernel_numel();
    let positions = window.out_dims("fold", spatial)?;
    let l = Shape::from(&positions[..]).try_numel("fold")?;
    if dims.len() != 3 || !dims[1].is_multiple_of(k) || dims[2] != l {
        return Err(Error::invalid_shape(
            "fold",
            format!("expected [N, C * {k}, {l}] columns for a {:?} window over {spatial:?} (got {dims:?})", window.kernel()),
        ));
    }
    let mut out = vec![dims[0], dims[1] / k];
    out.extend_from_slice(spatial);
    output("fold", &Shape::from(out), dtype)?;
    Ok(WindowSizes { batch: dims[0], channels: dims[1] / k, spatial: spatial.into(), positions })
}

/// [`crate::Backend::layer_norm`]'s `k`: at most the input's rank (the
/// trailing `k` dims are normalised together). The one home of the
/// message every backend gives.
///
/// ```
/// use autograd_core::{validate, Layout, Shape};
/// let l = Layout::contiguous(Shape::from([2, 3]));
/// assert!(validate::layer_norm("layer_norm", &l, 2).is_ok());
/// assert!(validate::layer_norm("layer_norm", &l, 3).is_err());
/// ```
pub fn layer_norm(op: &'static str, layout: &Layout, k: usize) -> Result<()> {
    let r = layout.rank();
    if k > r {
        return Err(Error::invalid_shape(op, format!("cannot normalise the last {k} dims of a rank-{r} input {:?}", layout.shape())));
    }
    Ok(())
}

/// The operands of [`crate::Backend::layer_norm_backward`]: `g` and `xhat`
/// of one shape, `rstd` of that shape with the trailing `k` dims 1, one
/// dtype, and an output of `g`'s shape that can be allocated.
///
/// ```
/// use autograd_core::{validate, DType, Layout, Shape};
/// let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
/// assert!(validate::layer_norm_backward(&l(&[2, 3]), &l(&[2, 3]), &l(&[2, 1]), 1, DType::F32).is_ok());
/// assert!(validate::layer_norm_backward(&l(&[2, 3]), &l(&[2, 3]), &l(&[2, 3]), 1, DType::F32).is_err());
/// assert!(validate::layer_norm_backward(&l(&[2, 3]), &l(&[3, 2]), &l(&[2, 1]), 1, DType::F32).is_err());
/// assert!(validate::layer_norm_backward(&l(&[2, 3]), &l(&[2, 3]), &l(&[1, 1]), 3, DType::F32).is_err());
/// ```
pub fn layer_norm_backward(lg: &Layout, lx: &Layout, lr: &Layout, k: usize, dtype: DType) -> Result<()> {
    const OP: &str = "layer_norm_backward";
    same_shape(OP, lg, lx)?;
    layer_norm(OP, lg, k)?;
    let r = lg.rank();
    let mut kd = lg.dims().to_vec();
    kd[r - k..].iter_mut().for_each(|d| *d = 1);
    if lr.dims() != kd.as_slice() {
        return Err(Error::invalid_shape(
            OP,
            format!("rstd has shape {:?}; the gradient {:?} over its last {k} dims needs {kd:?}", lr.shape(), lg.shape()),
        ));
    }
    output(OP, lg.shape(), dtype)?;
    Ok(())
}

/// The operands of [`crate::Backend::softmax_backward`]: the output and its
/// gradient of one shape, `dim` inside it, and an output that can be
/// allocated.
///
/// ```
/// use autograd_core::{validate, DType, Layout, Shape};
/// let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
/// assert!(validate::softmax_backward(&l(&[2, 3]), &l(&[2, 3]), 1, DType::F64).is_ok());
/// assert!(validate::softmax_backward(&l(&[2, 3]), &l(&[2, 3]), 2, DType::F64).is_err());
/// assert!(validate::softmax_backward(&l(&[2, 3]), &l(&[3]), 0, DType::F64).is_err());
/// ```
pub fn softmax_backward(ly: &Layout, lg: &Layout, dim_: usize, dtype: DType) -> Result<()> {
    const OP: &str = "softmax_backward";
    same_shape(OP, ly, lg)?;
    dim(OP, ly.rank(), dim_)?;
    output(OP, ly.shape(), dtype)?;
    Ok(())
}
