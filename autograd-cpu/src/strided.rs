//! Iteration over strided layouts in long contiguous-ish runs.
//!
//! Kernels coalesce the dims of all operands (merging neighbours that are
//! laid out back to back in every operand) so that the inner loop is as long
//! as possible and, for contiguous or broadcast rows, vectorisable.

/// Dims and per-operand strides after dropping size-1 dims and merging
/// neighbours that are contiguous in every operand. Always at least 1 dim.
pub(crate) fn coalesce<const N: usize>(dims: &[usize], strides: [&[usize]; N]) -> (Vec<usize>, [Vec<usize>; N]) {
    let mut out_dims: Vec<usize> = Vec::with_capacity(dims.len());
    let mut out_strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::with_capacity(dims.len()));
    for (i, &d) in dims.iter().enumerate() {
        if d == 1 {
            continue;
        }
        if let Some(&last) = out_dims.last() {
            let mergeable = (0..N).all(|k| *out_strides[k].last().unwrap() == strides[k][i] * d);
            if mergeable {
                *out_dims.last_mut().unwrap() = last * d;
                for k in 0..N {
                    *out_strides[k].last_mut().unwrap() = strides[k][i];
                }
                continue;
            }
        }
        out_dims.push(d);
        for k in 0..N {
            out_strides[k].push(strides[k][i]);
        }
    }
    if out_dims.is_empty() {
        out_dims.push(1);
        for s in out_strides.iter_mut() {
            s.push(1);
        }
    }
    (out_dims, out_strides)
}

/// Offsets of row `row` (a linear index over all dims but the last) for each operand.
#[inline]
pub(crate) fn row_offsets<const N: usize>(row: usize, dims: &[usize], strides: &[Vec<usize>; N], base: [usize; N]) -> [usize; N] {
    let mut off = base;
    let mut r = row;
    for d in (0..dims.len() - 1).rev() {
        let i = r % dims[d];
        r /= dims[d];
        for k in 0..N {
            off[k] += i * strides[k][d];
        }
    }
    off
}

/// Storage offset (relative) of linear row-major index `i` over `dims` with `strides`.
#[inline]
pub(crate) fn linear_offset(mut i: usize, dims: &[usize], strides: &[usize]) -> usize {
    let mut off = 0;
    for d in (0..dims.len()).rev() {
        off += (i % dims[d]) * strides[d];
        i /= dims[d];
    }
    off
}

/// Calls `f` with every multi-index of `dims` in row-major order.
pub(crate) fn for_each_index(dims: &[usize], mut f: impl FnMut(&[usize])) {
    if dims.iter().product::<usize>() == 0 {
        return;
    }
    let mut idx = vec![0usize; dims.len()];
    loop {
        f(&idx);
        let mut d = dims.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}
