//! Softmax in one pass per row: the maximum, the exponentials and their sum,
//! then the quotients, while the row is in cache, with one output buffer
//! (the backend's default composes five kernels and three temporaries);
//! its backward the same way.

use crate::PAR_MIN_ELEMS_HEAVY;
use crate::elementwise::{copy_strided, dense};
use crate::simd::{lane_dot, lane_max, lane_sum, multiversion};
use autograd_core::memory::scratch;
use autograd_core::scalar::FloatElem;
use autograd_core::{Layout, Result};
use rayon::prelude::*;

/// Softmax of `v` viewed by `layout` along `dim`, as a contiguous buffer of
/// the layout's shape. The formula per element is the reference's
/// (`exp(x - max) / sum`, a NaN anywhere in a row makes the row NaN, an all
/// `-inf` row is NaN); only the loop differs.
pub(crate) fn softmax<T: FloatElem>(v: &[T], layout: &Layout, dim: usize) -> Result<Vec<T>> {
    let last = layout.rank() - 1;
    if dim == last {
        let mut out = copy_strided(v, layout);
        softmax_rows(&mut out, layout.dims()[last]);
        return Ok(out);
    }
    // Bring `dim` last, run the rows, and put it back.
    let moved = layout.transpose(dim, last)?;
    let mut rows = copy_strided(v, &moved);
    softmax_rows(&mut rows, layout.dims()[dim]);
    let back = Layout::contiguous(moved.shape().clone()).transpose(dim, last)?;
    Ok(copy_strided(&rows, &back))
}

/// Softmax in place over consecutive rows of `n` elements.
fn softmax_rows<T: FloatElem>(data: &mut [T], n: usize) {
    if n == 0 || data.is_empty() {
        return;
    }
    if data.len() >= PAR_MIN_ELEMS_HEAVY {
        // rows in groups of about PAR_MIN_ELEMS_HEAVY / 4 elements per task
        let per = (PAR_MIN_ELEMS_HEAVY / 4 / n).max(1) * n;
        data.par_chunks_mut(per).for_each(|c| rows_in_place(c, n));
    } else {
        rows_in_place(data, n);
    }
}

multiversion! {
    /// The rows of one task (`n > 0`), compiled for the CPU's widest vectors.
    fn rows_in_place<T>(data: &mut [T], n: usize) where [T: FloatElem] {
        for r in data.chunks_mut(n) {
            // NaN-propagating, as the reference's Max reduction
            let m = lane_max(r);
            // the exponentials first (a loop that vectorises), then their sum
            for x in r.iter_mut() {
                *x = (*x - m).vexp();
            }
            let sum = lane_sum(r, |x| x);
            for x in r.iter_mut() {
                *x = *x / sum;
            }
        }
    }
}

/// The input gradient of a softmax along `dim` from its output `y` and the
/// output's gradient `g` (`y (g - sum(g y))`), or with `log` of a
/// log-softmax (`g - exp(y) sum(g)`), evaluated in the default's order, the
/// sums [`lane_sum`]s; a contiguous buffer of the shape. The caller has
/// validated the layouts (`validate::softmax_backward`).
pub(crate) fn softmax_backward<T: FloatElem>(y: &[T], ly: &Layout, g: &[T], lg: &Layout, dim: usize, log: bool) -> Result<Vec<T>> {
    let last = ly.rank() - 1;
    if dim == last {
        return Ok(backward_rows(&dense(y, ly), &dense(g, lg), ly.dims()[last], log));
    }
    // Bring `dim` last in both, run the rows, and put it back.
    let (my, mg) = (ly.transpose(dim, last)?, lg.transpose(dim, last)?);
    let dx = backward_rows(&copy_strided(y, &my), &copy_strided(g, &mg), ly.dims()[dim], log);
    let back = Layout::contiguous(my.shape().clone()).transpose(dim, last)?;
    Ok(copy_strided(&dx, &back))
}

/// [`softmax_backward`] over consecutive rows of `n` elements of `y` and
/// `g`, into a new buffer.
fn backward_rows<T: FloatElem>(y: &[T], g: &[T], n: usize, log: bool) -> Vec<T> {
    // every element is written below (rows of n cover the buffer; n = 0
    // leaves nothing to write)
    let mut dx = scratch(g.len(), T::zero());
    if n == 0 || dx.is_empty() {
        return dx;
    }
    if dx.len() >= PAR_MIN_ELEMS_HEAVY {
        let per = (PAR_MIN_ELEMS_HEAVY / 4 / n).max(1) * n;
        dx.par_chunks_mut(per).zip(y.par_chunks(per)).zip(g.par_chunks(per)).for_each(|((d, y), g)| grad_rows(d, y, g, n, log));
    } else {
        grad_rows(&mut dx, y, g, n, log);
    }
    dx
}

multiversion! {
    /// The rows of one task (`n > 0`), compiled for the CPU's widest vectors.
    fn grad_rows<T>(dx: &mut [T], y: &[T], g: &[T], n: usize, log: bool) where [T: FloatElem] {
        for ((d, y), g) in dx.chunks_mut(n).zip(y.chunks(n)).zip(g.chunks(n)) {
            if log {
                let sum = lane_sum(g, |v| v);
                for ((d, &y), &g) in d.iter_mut().zip(y).zip(g) {
                    *d = g - y.vexp() * sum;
                }
            } else {
                let dot = lane_dot(g, y);
                for ((d, &y), &g) in d.iter_mut().zip(y).zip(g) {
                    *d = y * (g - dot);
                }
            }
        }
    }
}
