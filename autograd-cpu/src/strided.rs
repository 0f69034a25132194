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

pub(crate) use autograd_core::layout::for_each_index;

/// Tiles used when an operand walks memory across the output's rows (a
/// transposed view): TILE_C columns touch TILE_C lines of the strided
/// operand, which for power-of-two row lengths all fall in one L1 set, so
/// TILE_C must stay within the cache's 8 ways; TILE_R = 16 rows then use
/// every f32 of those lines. Measured on a 1024 x 1024 transposed add
/// (best of 5, noisy VM): 32 x 32 tiles 2.9 ms, 16 x 16 4.0 ms, 8 x 8 1.9 ms,
/// 16 x 8 1.2 ms (untiled 2.9 ms; contiguous add 0.19 ms).
pub(crate) const TILE_R: usize = 16;
/// See [`TILE_R`].
pub(crate) const TILE_C: usize = 8;
/// Minimum size of the last two dims for tiling to be worth it.
pub(crate) const TILE: usize = 16;

/// Whether some operand's innermost stride jumps through memory (not 0 or 1),
/// so that a row-by-row walk would touch a new cache line per element.
pub(crate) fn needs_tiling(dims: &[usize], strides: &[&[usize]]) -> bool {
    dims.len() >= 2 && dims[dims.len() - 1] >= TILE && dims[dims.len() - 2] >= TILE && strides.iter().any(|s| s[s.len() - 1] > 1)
}

/// Fills `out` (contiguous, row-major over `dims`) with `f(offsets)` where
/// `offsets` are the operands' element offsets, visiting the last two dims
/// in TILE x TILE tiles. Parallel over row tiles when `par`.
pub(crate) fn fill_tiled<T: Send, const N: usize>(
    out: &mut [T],
    dims: &[usize],
    strides: &[Vec<usize>; N],
    base: [usize; N],
    par: bool,
    f: impl Fn([usize; N]) -> T + Sync,
) {
    use rayon::prelude::*;
    let r = dims.len();
    let (rows, cols) = (dims[r - 2], dims[r - 1]);
    let outer_dims = &dims[..r - 2];
    let tile_rows = |o: usize, ti: usize, chunk: &mut [T]| {
        let mut ob = base;
        for k in 0..N {
            ob[k] += linear_offset(o, outer_dims, &strides[k][..r - 2]);
        }
        let i0 = ti * TILE_R;
        let n_rows = chunk.len() / cols;
        for j0 in (0..cols).step_by(TILE_C) {
            for i in 0..n_rows {
                for j in j0..(j0 + TILE_C).min(cols) {
                    let mut off = ob;
                    for k in 0..N {
                        off[k] += (i0 + i) * strides[k][r - 2] + j * strides[k][r - 1];
                    }
                    chunk[i * cols + j] = f(off);
                }
            }
        }
    };
    for (o, block) in out.chunks_mut(rows * cols).enumerate() {
        if par {
            block.par_chunks_mut(TILE_R * cols).enumerate().for_each(|(ti, c)| tile_rows(o, ti, c));
        } else {
            block.chunks_mut(TILE_R * cols).enumerate().for_each(|(ti, c)| tile_rows(o, ti, c));
        }
    }
}
