//! Softmax in one pass per row: the maximum, the exponentials and their sum,
//! then the quotients, while the row is in cache, with one output buffer
//! (the backend's default composes five kernels and three temporaries).

use crate::PAR_MIN_ELEMS_HEAVY;
use crate::elementwise::copy_strided;
use autograd_core::element::Elem;
use autograd_core::{Layout, Result};
use rayon::prelude::*;

/// Softmax of `v` viewed by `layout` along `dim`, as a contiguous buffer of
/// the layout's shape. The formula per element is the reference's
/// (`exp(x - max) / sum`, a NaN anywhere in a row makes the row NaN, an all
/// `-inf` row is NaN); only the loop differs.
pub(crate) fn softmax<T: Elem>(v: &[T], layout: &Layout, dim: usize) -> Result<Vec<T>> {
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
fn softmax_rows<T: Elem>(data: &mut [T], n: usize) {
    if n == 0 || data.is_empty() {
        return;
    }
    let row = |r: &mut [T]| {
        // NaN-propagating maximum, as the reference's Max reduction
        let m = r.iter().fold(T::neg_infinity(), |m, &x| {
            if m.is_nan() || x.is_nan() {
                T::nan()
            } else if x > m {
                x
            } else {
                m
            }
        });
        // the exponentials first (a loop that vectorises), then their sum
        for x in r.iter_mut() {
            *x = (*x - m).vexp();
        }
        let sum = r.iter().fold(T::zero(), |s, &x| s + x);
        for x in r.iter_mut() {
            *x = *x / sum;
        }
    };
    if data.len() >= PAR_MIN_ELEMS_HEAVY {
        // rows in groups of about PAR_MIN_ELEMS_HEAVY / 4 elements per task
        let per = (PAR_MIN_ELEMS_HEAVY / 4 / n).max(1) * n;
        data.par_chunks_mut(per).for_each(|c| c.chunks_mut(n).for_each(row));
    } else {
        data.chunks_mut(n).for_each(row);
    }
}
