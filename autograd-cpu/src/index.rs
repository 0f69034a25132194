//! Gather, scatter-add and concatenation.

use crate::elementwise::{assign, copy_strided, dense};
use crate::strided::for_each_index;
use autograd_core::memory::{filled, scratch};
use autograd_core::scalar::FloatElem;
use autograd_core::{Element, Error, HostStorage, Layout, Result, Shape};

fn check(i: i64, size: usize, dim: usize, op: &'static str) -> Result<usize> {
    if i < 0 || i as usize >= size {
        return Err(Error::IndexOutOfRange { op, index: i, dim, size, location: None });
    }
    Ok(i as usize)
}

/// The values of an index that picks whole slices along `dim`: one value
/// per position along `dim`, repeated (stride 0) along every other dim, as
/// `index_select` and `embedding` expand a 1-D index. `None` for any other
/// index (and for an empty one): the element-wise paths take those.
///
/// The caller has checked that every offset of `lidx` lies inside `idx`.
pub(crate) fn slice_index(idx: &HostStorage, lidx: &Layout, dim: usize) -> Option<Vec<i64>> {
    let v = i64::buffer(idx)?;
    let (dims, strides) = (lidx.dims(), lidx.strides());
    let repeated = (0..lidx.rank()).all(|d| d == dim || strides[d] == 0 || dims[d] == 1);
    if lidx.numel() == 0 || !repeated {
        return None;
    }
    Some((0..dims[dim]).map(|j| v[lidx.offset() + j * strides[dim]]).collect())
}

/// Offsets (from each slice's start) of the elements of the dims after
/// `dim` of `shape`, walked with `strides`, in row-major order; `None`
/// when they are one run (offsets `0..n`), which is copied as a slice.
fn inner_offsets(shape: &[usize], strides: &[usize], dim: usize) -> Option<Vec<usize>> {
    let (dims, st) = (&shape[dim + 1..], &strides[dim + 1..]);
    let mut expect = 1;
    let run = dims.iter().zip(st).rev().all(|(&n, &s)| {
        let ok = n == 1 || s == expect;
        expect *= n;
        ok
    });
    if run {
        return None;
    }
    let mut offs = Vec::with_capacity(dims.iter().product());
    for_each_index(dims, |i| offs.push(i.iter().zip(st).map(|(&i, &s)| i * s).sum()));
    Some(offs)
}

/// The offsets of the dims before `dim` of `shape`, walked with `strides`.
fn outer_offsets(shape: &[usize], strides: &[usize], dim: usize) -> Vec<usize> {
    let mut offs = Vec::with_capacity(shape[..dim].iter().product());
    for_each_index(&shape[..dim], |i| offs.push(i.iter().zip(strides).map(|(&i, &s)| i * s).sum()));
    offs
}

/// [`gather`] with an index from [`slice_index`] (`rows`, one per position
/// of `ishape`'s `dim`): whole slices copied, each index checked once.
/// Same values and the same first error as the element-wise walk (which
/// meets the indices in this order too).
pub(crate) fn gather_slices<T: Copy + Send + Default + 'static>(
    v: &[T],
    l: &Layout,
    dim: usize,
    rows: &[i64],
    ishape: &Shape,
) -> Result<Vec<T>> {
    let size = l.dims()[dim];
    let rows = rows.iter().map(|&i| check(i, size, dim, "gather")).collect::<Result<Vec<usize>>>()?;
    let (dims, st) = (ishape.dims(), l.strides());
    let inner_n: usize = dims[dim + 1..].iter().product();
    let inner = inner_offsets(dims, st, dim);
    // every element is written below: one slice per (outer, row) in order
    let mut out = scratch(ishape.numel(), T::default());
    let mut chunks = out.chunks_exact_mut(inner_n.max(1));
    for o in outer_offsets(dims, st, dim) {
        for &j in &rows {
            let (start, dst) = (l.offset() + o + j * st[dim], chunks.next().expect("one chunk per slice"));
            match &inner {
                None => dst.copy_from_slice(&v[start..start + inner_n]),
                Some(offs) => dst.iter_mut().zip(offs).for_each(|(d, &k)| *d = v[start + k]),
            }
        }
    }
    Ok(out)
}

/// [`scatter_add`] with an index from [`slice_index`]: each slice of `src`
/// added into its row of zeros of `shape`, in the element-wise walk's
/// order (so the same sums, bit for bit).
pub(crate) fn scatter_add_slices<T: FloatElem>(shape: &Shape, dim: usize, rows: &[i64], src: &[T], lsrc: &Layout) -> Result<Vec<T>> {
    let size = shape.dims()[dim];
    let rows = rows.iter().map(|&i| check(i, size, dim, "scatter_add")).collect::<Result<Vec<usize>>>()?;
    let src = dense(src, lsrc);
    let ostr = shape.contiguous_strides();
    let sdims = lsrc.dims();
    let inner_n: usize = sdims[dim + 1..].iter().product();
    let inner = inner_offsets(sdims, &ostr, dim);
    let mut out = filled(shape.numel(), T::zero());
    let mut chunks = src.chunks_exact(inner_n.max(1));
    for o in outer_offsets(sdims, &ostr, dim) {
        for &j in &rows {
            let (start, s) = (o + j * ostr[dim], chunks.next().expect("one chunk per slice"));
            match &inner {
                None => out[start..start + inner_n].iter_mut().zip(s).for_each(|(y, &x)| *y = *y + x),
                Some(offs) => offs.iter().zip(s).for_each(|(&k, &x)| out[start + k] = out[start + k] + x),
            }
        }
    }
    Ok(out)
}

/// `out[.., j, ..] = x[.., idx[.., j, ..], ..]` along `dim`.
pub(crate) fn gather<T: Copy>(v: &[T], l: &Layout, dim: usize, idx: &[i64], ishape: &Shape) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(idx.len());
    let (st, size) = (l.strides(), l.dims()[dim]);
    let mut n = 0;
    let mut err = None;
    for_each_index(ishape.dims(), |oi| {
        if err.is_some() {
            return;
        }
        match check(idx[n], size, dim, "gather") {
            Ok(j) => {
                let off: usize = l.offset() + oi.iter().enumerate().map(|(d, &i)| if d == dim { j } else { i } * st[d]).sum::<usize>();
                out.push(v[off]);
            }
            Err(e) => err = Some(e),
        }
        n += 1;
    });
    err.map_or(Ok(out), Err)
}

/// Zeros of `shape`, plus `src` added at `idx` along `dim`.
pub(crate) fn scatter_add<T: FloatElem>(
    shape: &Shape,
    dim: usize,
    idx: &[i64],
    ishape: &Shape,
    src: &[T],
    lsrc: &Layout,
) -> Result<Vec<T>> {
    let src = copy_strided(src, lsrc);
    let mut out = filled(shape.numel(), T::zero());
    let strides = shape.contiguous_strides();
    let mut n = 0;
    let mut err = None;
    for_each_index(ishape.dims(), |si| {
        if err.is_some() {
            return;
        }
        match check(idx[n], shape.dims()[dim], dim, "scatter_add") {
            Ok(j) => {
                let o: usize = si.iter().enumerate().map(|(d, &i)| if d == dim { j } else { i } * strides[d]).sum();
                out[o] = out[o] + src[n];
            }
            Err(e) => err = Some(e),
        }
        n += 1;
    });
    err.map_or(Ok(out), Err)
}

/// Concatenation along `dim` of strided parts with equal other dims: each
/// part written straight into its slice of the output.
pub(crate) fn cat<T: Copy + Send + Sync + Default + 'static>(parts: &[(&[T], &Layout)], dim: usize) -> Vec<T> {
    let first = parts[0].1;
    let mut dims = first.dims().to_vec();
    dims[dim] = parts.iter().map(|(_, l)| l.dims()[dim]).sum();
    let full = Layout::contiguous(Shape::new(dims));
    if full.numel() == 0 {
        // nothing to copy: do not walk a (possibly huge) outer extent of empty rows
        return Vec::new();
    }
    // `scratch`: the parts' slices tile the output along `dim`
    let mut out = scratch(full.numel(), T::default());
    let mut start = 0;
    for (v, l) in parts {
        let len = l.dims()[dim];
        let dst = full.slice(dim, start, len, 1).expect("the parts' sizes add up to the output's");
        assign(&mut out, &dst, v, l);
        start += len;
    }
    out
}
