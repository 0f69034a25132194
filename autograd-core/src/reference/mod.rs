//! The reference backend: plain loops over strided offsets, one thread.
//!
//! It is the executable specification: every other backend is checked
//! against it. It favours obviousness over speed everywhere.

mod window;

use crate::Backend;
use crate::dispatch::index_values;
use crate::low_precision::through_f32;
use crate::ops::{ArgReduceOp, BinaryOp, ReduceOp, UnaryOp};
use crate::scalar::{FloatElem, binary, unary};
use crate::validate;
use crate::{DType, Element, Error, HostData, HostStorage, Layout, Result, Shape};

/// The reference backend.
///
/// ```
/// use autograd_core::{Backend, RefBackend, Shape, DType, Layout};
/// let s = RefBackend::full(&Shape::from([2]), 1.5, DType::F32).unwrap();
/// assert_eq!(RefBackend::to_host(&s, &Layout::contiguous(Shape::from([2]))).unwrap().to_f64_vec(), vec![1.5, 1.5]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RefBackend;

fn for_each_index(shape: &Shape, f: impl FnMut(&[usize])) {
    crate::layout::for_each_index(shape.dims(), f)
}

fn offset_of(layout: &Layout, idx: &[usize]) -> usize {
    layout.offset() + idx.iter().zip(layout.strides()).map(|(i, s)| i * s).sum::<usize>()
}

fn gather_strided<T: Copy>(v: &[T], l: &Layout) -> Vec<T> {
    l.offsets().map(|o| v[o]).collect()
}

/// Folds every element of `v` (through `l`) into its slot of the output
/// reduced over `dims`, starting from `init`: the one reduction loop, whose
/// element rule (`f`) each dtype gives.
fn fold<T: Copy, A: Copy>(v: &[T], l: &Layout, dims: &[usize], init: A, mut f: impl FnMut(A, T) -> A) -> Vec<A> {
    let mut out_dims = l.dims().to_vec();
    for &d in dims {
        out_dims[d] = 1;
    }
    let out_shape = Shape::new(out_dims);
    let out_strides = out_shape.contiguous_strides();
    let mut out = vec![init; out_shape.numel()];
    for_each_index(l.shape(), |idx| {
        let o: usize = idx.iter().enumerate().map(|(d, &i)| if dims.contains(&d) { 0 } else { i * out_strides[d] }).sum();
        out[o] = f(out[o], v[offset_of(l, idx)]);
    });
    out
}

fn reduce_t<T: FloatElem>(op: ReduceOp, v: &[T], l: &Layout, dims: &[usize]) -> Vec<T> {
    // NaN propagates through max and min.
    let pick = |better: fn(T, T) -> bool| {
        move |acc: T, x: T| {
            if x.is_nan() || acc.is_nan() {
                T::nan()
            } else if better(x, acc) {
                x
            } else {
                acc
            }
        }
    };
    match op {
        // Sums accumulate in f64 whatever the dtype: the obvious loop, and
        // exact enough for an f32 result (20M f32 ones sum to 20M, not 2^24).
        ReduceOp::Sum => fold(v, l, dims, 0f64, |acc, x| acc + x.to_f64()).into_iter().map(T::from_f64).collect(),
        ReduceOp::Max => fold(v, l, dims, T::neg_infinity(), pick(|x, acc| x > acc)),
        ReduceOp::Min => fold(v, l, dims, T::infinity(), pick(|x, acc| x < acc)),
    }
}

/// An I64 reduction in integers, as PyTorch's: sums wrap on overflow
/// (never through f64, which would round above 2^53), max/min are exact.
fn reduce_i64(op: ReduceOp, v: &[i64], l: &Layout, dims: &[usize]) -> Vec<i64> {
    match op {
        ReduceOp::Sum => fold(v, l, dims, 0, i64::wrapping_add),
        ReduceOp::Max => fold(v, l, dims, i64::MIN, i64::max),
        ReduceOp::Min => fold(v, l, dims, i64::MAX, i64::min),
    }
}

/// The value and index of the first element along `dim` that no later one
/// beats (`beats(x, current)`): the one arg-reduction loop.
fn arg_fold<T: Copy>(v: &[T], l: &Layout, dim: usize, beats: impl Fn(T, T) -> bool) -> (Vec<Option<T>>, Vec<i64>) {
    let mut out_dims = l.dims().to_vec();
    out_dims[dim] = 1;
    let out_shape = Shape::new(out_dims);
    let mut vals: Vec<Option<T>> = vec![None; out_shape.numel()];
    let mut idxs = vec![0i64; out_shape.numel()];
    let out_strides = out_shape.contiguous_strides();
    for_each_index(l.shape(), |idx| {
        let x = v[offset_of(l, idx)];
        let o: usize = idx.iter().enumerate().map(|(d, &i)| if d == dim { 0 } else { i * out_strides[d] }).sum();
        if vals[o].is_none_or(|cur| beats(x, cur)) {
            vals[o] = Some(x);
            idxs[o] = idx[dim] as i64;
        }
    });
    (vals, idxs)
}

fn arg_reduce_t<T: FloatElem>(op: ArgReduceOp, v: &[T], l: &Layout, dim: usize) -> (Vec<T>, Vec<i64>) {
    // A NaN is the extreme: the first one wins and nothing beats it.
    let (vals, idxs) = arg_fold(v, l, dim, |x, cur| {
        !cur.is_nan()
            && (x.is_nan()
                || match op {
                    ArgReduceOp::Max => x > cur,
                    ArgReduceOp::Min => x < cur,
                })
    });
    (vals.into_iter().map(|v| v.unwrap_or_else(T::nan)).collect(), idxs)
}

/// [`arg_reduce_t`] for I64: exact comparisons, the first extreme wins.
fn arg_reduce_i64(op: ArgReduceOp, v: &[i64], l: &Layout, dim: usize) -> (Vec<i64>, Vec<i64>) {
    let (vals, idxs) = arg_fold(v, l, dim, |x, cur| match op {
        ArgReduceOp::Max => x > cur,
        ArgReduceOp::Min => x < cur,
    });
    (vals.into_iter().map(|v| v.unwrap_or(0)).collect(), idxs)
}

fn matmul_t<T: FloatElem>(a: &[T], la: &Layout, b: &[T], lb: &Layout) -> Vec<T> {
    let r = la.rank();
    let (m, k, n) = (la.dims()[r - 2], la.dims()[r - 1], lb.dims()[r - 1]);
    let batch = Shape::new(la.dims()[..r - 2].to_vec());
    let total = batch.numel() * m * n; // validated: the output fits in memory
    if total == 0 {
        // no output: do not walk a (possibly huge) batch of empty matrices
        return Vec::new();
    }
    if k == 0 {
        // Empty operands (any strides are valid on them, so offsets would
        // overflow): the product is zeros.
        return vec![T::zero(); total];
    }
    let mut out = Vec::with_capacity(total);
    let (sa, sb) = (la.strides(), lb.strides());
    let zero_tail = [0usize, 0];
    for_each_index(&batch, |bi| {
        let idx_a: Vec<usize> = bi.iter().copied().chain(zero_tail).collect();
        let oa = offset_of(la, &idx_a);
        let ob = offset_of(lb, &idx_a);
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::zero();
                for p in 0..k {
                    acc = acc + a[oa + i * sa[r - 2] + p * sa[r - 1]] * b[ob + p * sb[r - 2] + j * sb[r - 1]];
                }
                out.push(acc);
            }
        }
    });
    out
}

fn check_index(i: i64, size: usize, dim: usize, op: &'static str) -> Result<usize> {
    if i < 0 || i as usize >= size {
        return Err(Error::IndexOutOfRange { op, index: i, dim, size, location: None });
    }
    Ok(i as usize)
}

fn gather_t<T: Copy>(v: &[T], l: &Layout, dim: usize, idx: &[i64], lidx: &Layout) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(idx.len());
    let mut err = None;
    let mut n = 0;
    for_each_index(lidx.shape(), |oi| {
        if err.is_some() {
            return;
        }
        match check_index(idx[n], l.dims()[dim], dim, "gather") {
            Ok(j) => {
                let mut src = oi.to_vec();
                src[dim] = j;
                out.push(v[offset_of(l, &src)]);
            }
            Err(e) => err = Some(e),
        }
        n += 1;
    });
    err.map_or(Ok(out), Err)
}

fn scatter_add_t<T: FloatElem>(shape: &Shape, dim: usize, idx: &[i64], lidx: &Layout, src: &[T], lsrc: &Layout) -> Result<Vec<T>> {
    let mut out = vec![T::zero(); shape.numel()];
    let strides = shape.contiguous_strides();
    let mut err = None;
    let mut n = 0;
    for_each_index(lidx.shape(), |si| {
        if err.is_some() {
            return;
        }
        match check_index(idx[n], shape.dims()[dim], dim, "scatter_add") {
            Ok(j) => {
                let o: usize = si.iter().enumerate().map(|(d, &i)| if d == dim { j } else { i } * strides[d]).sum();
                out[o] = out[o] + src[offset_of(lsrc, si)];
            }
            Err(e) => err = Some(e),
        }
        n += 1;
    });
    err.map_or(Ok(out), Err)
}

impl Backend for RefBackend {
    type Storage = HostStorage;
    const NAME: &'static str = "reference";

    fn dtype(s: &HostStorage) -> DType {
        s.dtype()
    }
    fn len(s: &HostStorage) -> usize {
        s.len()
    }
    fn from_host(data: HostData) -> HostStorage {
        data.into()
    }
    fn to_host(s: &HostStorage, layout: &Layout) -> Result<HostData> {
        validate::input("to_host", s.len(), layout)?;
        validate::output("to_host", layout.shape(), s.dtype())?;
        Ok(with_any!(HostStorage: s, |v: T| gather_strided(v, layout).into()))
    }
    fn full(shape: &Shape, value: f64, dtype: DType) -> Result<HostStorage> {
        let n = validate::output("full", shape, dtype)?;
        Ok(HostData::from_f64(&crate::memory::try_filled("full", n, value)?, dtype).into())
    }
    fn cast(s: &HostStorage, layout: &Layout, dtype: DType) -> Result<HostStorage> {
        validate::output("to_dtype", layout.shape(), DType::F64)?;
        Ok(Self::to_host(s, layout)?.convert(dtype).into())
    }
    fn copy_strided(s: &HostStorage, layout: &Layout) -> Result<HostStorage> {
        validate::input("contiguous", s.len(), layout)?;
        validate::output("contiguous", layout.shape(), s.dtype())?;
        Ok(with_any!(HostStorage: s, |v: T| gather_strided(v, layout).into()))
    }
    fn unary(op: UnaryOp, s: &HostStorage, layout: &Layout) -> Result<HostStorage> {
        validate::input("unary", s.len(), layout)?;
        validate::output("unary", layout.shape(), s.dtype())?;
        if let Some(r) = through_f32(&[s], |w| Self::unary(op, w[0], layout)) {
            return r;
        }
        with_float!(s, "unary", |v: T| Ok(layout.offsets().map(|o| unary::<T>(op, v[o])).collect::<Vec<T>>().into()))
    }
    fn binary(op: BinaryOp, a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout) -> Result<HostStorage> {
        validate::same_shape("binary", la, lb)?;
        validate::input("binary", a.len(), la)?;
        validate::input("binary", b.len(), lb)?;
        validate::output("binary", la.shape(), a.dtype())?;
        if let Some(r) = through_f32(&[a, b], |w| Self::binary(op, w[0], la, w[1], lb)) {
            return r;
        }
        match (a, b) {
            (HostStorage::F32(x), HostStorage::F32(y)) => {
                Ok(la.offsets().zip(lb.offsets()).map(|(i, j)| binary(op, x[i], y[j])).collect::<Vec<f32>>().into())
            }
            (HostStorage::F64(x), HostStorage::F64(y)) => {
                Ok(la.offsets().zip(lb.offsets()).map(|(i, j)| binary(op, x[i], y[j])).collect::<Vec<f64>>().into())
            }
            (HostStorage::I64(x), HostStorage::I64(y)) => {
                let v = la
                    .offsets()
                    .zip(lb.offsets())
                    .map(|(i, j)| crate::scalar::binary_i64(op, x[i], y[j]))
                    .collect::<std::result::Result<Vec<i64>, _>>();
                Ok(v.map_err(|hint| Error::UnsupportedDType { op: "binary op", dtype: DType::I64, hint })?.into())
            }
            _ => Err(binary_dtype_error(a.dtype(), b.dtype())),
        }
    }
    fn where_select(c: &HostStorage, lc: &Layout, a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout) -> Result<HostStorage> {
        validate::same_shape("where", lc, la)?;
        validate::same_shape("where", lc, lb)?;
        validate::output("where", la.shape(), DType::F64)?;
        let cond: Vec<bool> = Self::to_host(c, lc)?.to_f64_vec().into_iter().map(|x| x != 0.0).collect();
        let (ha, hb) = (Self::to_host(a, la)?, Self::to_host(b, lb)?);
        // values are picked in their own type (an int64 above 2^53 is not an f64)
        with_pair!(HostData: &ha, HostData: &hb, |va, vb: T| {
            Ok(cond.iter().zip(va.iter().zip(vb)).map(|(&c, (&x, &y))| if c { x } else { y }).collect::<Vec<T>>().into())
        }, else Err(Error::DTypeMismatch { op: "where", lhs: ha.dtype(), rhs: hb.dtype() }))
    }
    fn reduce(op: ReduceOp, s: &HostStorage, layout: &Layout, dims: &[usize]) -> Result<HostStorage> {
        validate::input("reduce", s.len(), layout)?;
        validate::reduce_dims("reduce", layout.rank(), dims)?;
        validate::reduce_output("reduce", layout, dims, s.dtype())?;
        if let Some(r) = through_f32(&[s], |w| Self::reduce(op, w[0], layout, dims)) {
            return r;
        }
        if let HostStorage::I64(v) = s {
            return Ok(reduce_i64(op, v, layout, dims).into());
        }
        with_float!(s, "reduce", |v: T| Ok(reduce_t::<T>(op, v, layout, dims).into()))
    }
    fn arg_reduce(op: ArgReduceOp, s: &HostStorage, layout: &Layout, dim: usize) -> Result<(HostStorage, HostStorage)> {
        validate::input("max/min", s.len(), layout)?;
        validate::arg_reduce("max/min", layout, dim)?;
        if let Some(r) = through_f32(&[s], |w| Self::arg_reduce(op, w[0], layout, dim)) {
            return r;
        }
        if let HostStorage::I64(v) = s {
            let (vals, idx) = arg_reduce_i64(op, v, layout, dim);
            return Ok((vals.into(), idx.into()));
        }
        with_float!(s, "max/min", |v: T| {
            let (vals, idx) = arg_reduce_t::<T>(op, v, layout, dim);
            Ok((vals.into(), idx.into()))
        })
    }
    fn matmul(a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout) -> Result<HostStorage> {
        validate::input("matmul", a.len(), la)?;
        validate::input("matmul", b.len(), lb)?;
        validate::matmul(la, lb, a.dtype())?;
        if let Some(r) = through_f32(&[a, b], |w| Self::matmul(w[0], la, w[1], lb)) {
            return r;
        }
        match (a, b) {
            (HostStorage::F32(x), HostStorage::F32(y)) => Ok(matmul_t(x, la, y, lb).into()),
            (HostStorage::F64(x), HostStorage::F64(y)) => Ok(matmul_t(x, la, y, lb).into()),
            _ => Err(binary_dtype_error(a.dtype(), b.dtype())),
        }
    }
    /// f16/bf16: the f32 product plus the bias, rounded once (the default
    /// would round the product before adding).
    fn addmm(c: &HostStorage, lc: &Layout, a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout) -> Result<HostStorage> {
        validate::addmm(lc, la, lb, a.dtype())?;
        let f32_addmm = |w: &[&HostStorage]| {
            let y = Self::matmul(w[0], la, w[1], lb)?;
            Self::binary(BinaryOp::Add, w[2], lc, &y, &Layout::contiguous(lc.shape().clone()))
        };
        if let Some(r) = through_f32(&[a, b, c], f32_addmm) {
            return r;
        }
        let y = Self::matmul(a, la, b, lb)?;
        Self::binary(BinaryOp::Add, c, lc, &y, &Layout::contiguous(lc.shape().clone()))
    }
    fn layer_norm(s: &HostStorage, layout: &Layout, k: usize, eps: f64) -> Result<(HostStorage, HostStorage)> {
        validate::input("layer_norm", s.len(), layout)?;
        if let Some(r) = through_f32(&[s], |w| crate::backend::composite::layer_norm::<Self>(w[0], layout, k, eps)) {
            return r;
        }
        crate::backend::composite::layer_norm::<Self>(s, layout, k, eps)
    }
    fn softmax(s: &HostStorage, layout: &Layout, dim: usize) -> Result<HostStorage> {
        validate::input("softmax", s.len(), layout)?;
        if let Some(r) = through_f32(&[s], |w| crate::backend::composite::softmax::<Self>(w[0], layout, dim)) {
            return r;
        }
        crate::backend::composite::softmax::<Self>(s, layout, dim)
    }
    fn gather(s: &HostStorage, layout: &Layout, dim: usize, idx: &HostStorage, lidx: &Layout) -> Result<HostStorage> {
        validate::input("gather", s.len(), layout)?;
        validate::input("gather", idx.len(), lidx)?;
        validate::gather(layout, dim, lidx, s.dtype())?;
        let idx = index_values(idx, lidx, "gather")?;
        Ok(with_any!(HostStorage: s, |v: T| gather_t(v, layout, dim, &idx, lidx)?.into()))
    }
    fn scatter_add(shape: &Shape, dim: usize, idx: &HostStorage, lidx: &Layout, src: &HostStorage, lsrc: &Layout) -> Result<HostStorage> {
        validate::input("scatter_add", idx.len(), lidx)?;
        validate::input("scatter_add", src.len(), lsrc)?;
        validate::scatter_add(shape, dim, lidx, lsrc, src.dtype())?;
        let idx_values = index_values(idx, lidx, "scatter_add")?;
        if let Some(r) = through_f32(&[src], |w| Self::scatter_add(shape, dim, idx, lidx, w[0], lsrc)) {
            return r;
        }
        let idx = idx_values;
        with_float!(src, "scatter_add", |v: T| Ok(scatter_add_t::<T>(shape, dim, &idx, lidx, v, lsrc)?.into()))
    }
    fn assign(dst: &mut HostStorage, ld: &Layout, src: &HostStorage, ls: &Layout) -> Result<()> {
        validate::same_shape("assign", ld, ls)?;
        validate::input("assign", dst.len(), ld)?;
        let vals = Self::to_host(src, ls)?.convert(dst.dtype());
        // `vals` was converted to the destination's dtype: the pair matches
        with_pair!(HostStorage: dst, HostData: vals, |d, v: T| ld.offsets().zip(v).for_each(|(o, x)| d[o] = x), else ());
        Ok(())
    }
    fn cat(parts: &[(&HostStorage, &Layout)], dim: usize) -> Result<HostStorage> {
        let shapes: Vec<&Shape> = parts.iter().map(|(_, l)| l.shape()).collect();
        let dtype = parts.first().map_or(DType::F32, |p| p.0.dtype());
        let out_shape = validate::cat(&shapes, dim, dtype)?;
        let strides = out_shape.contiguous_strides();
        // in the parts' own type (an int64 above 2^53 is not an f64)
        with_dtype!(dtype, |T| {
            let mut out = vec![T::ZERO; out_shape.numel()];
            let mut start = 0;
            for (s, l) in parts {
                let host = Self::to_host(s, l)?;
                let Some(vals) = T::values(&host) else {
                    return Err(Error::DTypeMismatch { op: "cat", lhs: dtype, rhs: s.dtype() });
                };
                let mut n = 0;
                for_each_index(l.shape(), |idx| {
                    let o: usize = idx.iter().enumerate().map(|(d, &i)| if d == dim { i + start } else { i } * strides[d]).sum();
                    out[o] = vals[n];
                    n += 1;
                });
                start += l.dims()[dim];
            }
            Ok(out.into())
        })
    }
    fn unfold(s: &HostStorage, layout: &Layout, window: &crate::window::Window, pad_value: f64) -> Result<HostStorage> {
        validate::input("unfold", s.len(), layout)?;
        let sizes = validate::unfold("unfold", layout, window, s.dtype())?;
        Ok(with_any!(HostStorage: s, |v: T| window::unfold(v, layout, window, &sizes, <T as Element>::from_f64(pad_value)).into()))
    }
    fn fold(s: &HostStorage, layout: &Layout, window: &crate::window::Window, spatial: &[usize]) -> Result<HostStorage> {
        validate::input("fold", s.len(), layout)?;
        let sizes = validate::fold(layout, window, spatial, s.dtype())?;
        if let Some(r) = through_f32(&[s], |w| Self::fold(w[0], layout, window, spatial)) {
            return r;
        }
        with_float!(s, "fold", |v: T| Ok(window::fold::<T>(v, layout, window, &sizes).into()))
    }
}

/// The error for a binary kernel given operands it cannot combine.
pub fn binary_dtype_error(a: DType, b: DType) -> Error {
    if a == b {
        Error::UnsupportedDType { op: "binary op", dtype: a, hint: "compute in F32 or F64: convert with to_dtype()" }
    } else {
        Error::DTypeMismatch { op: "binary op", lhs: a, rhs: b }
    }
}
