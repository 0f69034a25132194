//! Gather, scatter-add and concatenation.

use crate::elementwise::copy_strided;
use crate::strided::for_each_index;
use autograd_core::memory::filled;
use autograd_core::scalar::FloatElem;
use autograd_core::{Error, Layout, Result, Shape};

fn check(i: i64, size: usize, dim: usize, op: &'static str) -> Result<usize> {
    if i < 0 || i as usize >= size {
        return Err(Error::IndexOutOfRange { op, index: i, dim, size, location: None });
    }
    Ok(i as usize)
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

/// Concatenation along `dim` of strided parts with equal other dims.
pub(crate) fn cat<T: Copy + Send + Sync + Default + 'static>(parts: &[(&[T], &Layout)], dim: usize) -> Vec<T> {
    let first = parts[0].1;
    let outer: usize = first.dims()[..dim].iter().product();
    let inner: usize = first.dims()[dim + 1..].iter().product();
    let total_dim: usize = parts.iter().map(|(_, l)| l.dims()[dim]).sum();
    let row = total_dim * inner;
    if outer == 0 || row == 0 {
        // nothing to copy: do not walk a (possibly huge) outer extent of empty rows
        return Vec::new();
    }
    let mut out = filled(outer * row, T::default());
    let mut start = 0;
    for (v, l) in parts {
        let block = l.dims()[dim] * inner;
        let c = copy_strided(v, l);
        for o in 0..outer {
            out[o * row + start..o * row + start + block].copy_from_slice(&c[o * block..(o + 1) * block]);
        }
        start += block;
    }
    out
}
