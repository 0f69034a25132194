//! Softmax in one pass per row: the maximum, the exponentials and their sum,
//! then the quotients, while the row is in cache, with one output buffer
//! (the backend's default composes five kernels and three temporaries).

use crate::PAR_MIN_ELEMS_HEAVY;
use crate::elementwise::copy_strided;
use crate::simd::{lane_max, lane_sum, multiversion};
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
