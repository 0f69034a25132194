//! Reductions: sum/max/min over axes, and max/min with indices.
//!
//! Three shapes of work are handled without a general gather: reducing
//! trailing contiguous runs (one output per row), reducing leading axes of a
//! contiguous tensor (column accumulation, the bias-gradient case), and
//! everything else after one strided copy that moves the reduced axes last.

use crate::PAR_MIN_ELEMS;
use crate::elementwise::copy_strided;
use crate::strided::{coalesce, linear_offset};
use autograd_core::memory::filled;
use autograd_core::scalar::FloatElem;
use autograd_core::{ArgReduceOp, Layout, ReduceOp, Shape};
use rayon::prelude::*;

fn init<T: FloatElem>(op: ReduceOp) -> T {
    match op {
        ReduceOp::Sum => T::zero(),
        ReduceOp::Max => T::neg_infinity(),
        ReduceOp::Min => T::infinity(),
    }
}

#[inline]
fn combine<T: FloatElem>(op: ReduceOp, acc: T, x: T) -> T {
    match op {
        ReduceOp::Sum => acc + x,
        // NaN must win, as in PyTorch; `x != x` catches it without a branch per op.
        ReduceOp::Max => {
            if x > acc || x.is_nan() {
                x
            } else {
                acc
            }
        }
        ReduceOp::Min => {
            if x < acc || x.is_nan() {
                x
            } else {
                acc
            }
        }
    }
}

/// Leaves of the pairwise sum: [`crate::simd::lane_sum`]'s independent
/// accumulators (which vectorise) over at most this many elements.
const SUM_LEAF: usize = 128;

/// Sum of a short slice in lanes (the one lane sum of the crate).
#[inline]
fn sum_leaf<T: FloatElem>(x: &[T]) -> T {
    crate::simd::lane_sum(x, |v| v)
}

/// Cascade (pairwise) summation, as NumPy and PyTorch do: the rounding
/// error grows with log2(n) instead of n (10M copies of 0.1f32 sum within
/// 1e-7 of the exact value instead of 1% off). Halves are split at
/// multiples of the leaf so leaves stay full and vectorised.
fn sum_pairwise<T: FloatElem>(x: &[T]) -> T {
    if x.len() <= SUM_LEAF {
        return sum_leaf(x);
    }
    let half = (x.len() / 2).div_ceil(SUM_LEAF) * SUM_LEAF;
    let (a, b) = x.split_at(half.min(x.len()));
    // The split points do not depend on the thread count, so the result is
    // the same bits whether the halves run in parallel or not.
    if x.len() >= PAR_MIN_ELEMS {
        let (sa, sb) = rayon::join(|| sum_pairwise(a), || sum_pairwise(b));
        return sa + sb;
    }
    sum_pairwise(a) + sum_pairwise(b)
}

/// Reduces a contiguous slice.
#[inline]
fn reduce_slice<T: FloatElem>(op: ReduceOp, x: &[T]) -> T {
    if op == ReduceOp::Sum {
        return sum_pairwise(x);
    }
    let mut acc = init::<T>(op);
    for &v in x {
        acc = combine(op, acc, v);
        if acc.is_nan() {
            return acc;
        }
    }
    acc
}

/// Column sums of rows `rows` of a row-major block of width `width`
/// (starting at column `j0` of rows of length `stride`) into `out`,
/// pairwise over the rows like [`sum_pairwise`]; each element goes
/// through `widen` as it is read (the identity, or f16/bf16 to f32).
fn sum_columns<S: Copy, T: FloatElem>(
    x: &[S],
    widen: impl Fn(S) -> T + Copy,
    stride: usize,
    j0: usize,
    rows: std::ops::Range<usize>,
    out: &mut [T],
) {
    const ROW_LEAF: usize = 32;
    if rows.len() <= ROW_LEAF {
        out.iter_mut().for_each(|o| *o = T::zero());
        for i in rows {
            let row = &x[i * stride + j0..i * stride + j0 + out.len()];
            for (o, &r) in out.iter_mut().zip(row) {
                *o = *o + widen(r);
            }
        }
        return;
    }
    let mid = rows.start + rows.len() / 2;
    sum_columns(x, widen, stride, j0, rows.start..mid, out);
    let mut right = vec![T::zero(); out.len()];
    sum_columns(x, widen, stride, j0, mid..rows.end, &mut right);
    for (o, r) in out.iter_mut().zip(right) {
        *o = *o + r;
    }
}

/// The column case: a contiguous `x` of `red_n` rows of `out_n` reduced
/// over its rows (a leading block of axes: the bias-gradient case), each
/// element through `widen` as it is read.
fn columns<S: Copy + Sync, T: FloatElem>(
    op: ReduceOp,
    x: &[S],
    widen: impl Fn(S) -> T + Copy + Sync,
    out_n: usize,
    red_n: usize,
) -> Vec<T> {
    let col = |j0: usize, out: &mut [T]| {
        if op == ReduceOp::Sum {
            sum_columns(x, widen, out_n, j0, 0..red_n, out);
            return;
        }
        out.iter_mut().for_each(|o| *o = init::<T>(op));
        for i in 0..red_n {
            let row = &x[i * out_n + j0..i * out_n + j0 + out.len()];
            for (o, &r) in out.iter_mut().zip(row) {
                *o = combine(op, *o, widen(r));
            }
        }
    };
    let mut out = filled(out_n, T::zero());
    const COLS: usize = 512;
    if out_n * red_n >= PAR_MIN_ELEMS && out_n > COLS {
        out.par_chunks_mut(COLS).enumerate().for_each(|(c, o)| col(c * COLS, o));
    } else {
        col(0, &mut out);
    }
    out
}

/// `(outputs, reduced)` element counts of reducing `l` over `dims` (0 for
/// a zero dim, whatever the others: an empty tensor's may be huge; without
/// one, both divide the validated numel), and whether it is the column
/// case ([`columns`]: contiguous, a leading block of axes, several outputs).
fn counts(l: &Layout, dims: &[usize]) -> (usize, usize, bool) {
    let kept: Vec<usize> = (0..l.rank()).filter(|d| !dims.contains(d)).collect();
    let count = |ds: &[usize]| if ds.iter().any(|&d| l.dims()[d] == 0) { 0 } else { ds.iter().map(|&d| l.dims()[d]).product::<usize>() };
    let (out_n, red_n) = (count(&kept), count(dims));
    let column = l.is_contiguous() && dims.iter().enumerate().all(|(i, &d)| i == d) && !dims.is_empty() && out_n > 1;
    (out_n, red_n, column)
}

/// An f16/bf16 reduction of the column case, in f32 before its one
/// rounding: each element widened as it is read, so the same f32
/// operations in the same order as reducing a widened copy
/// (`through_f32`), without the copy (a bf16 bias gradient widened the
/// whole incoming gradient). `None` for another shape, an empty input or
/// an empty reduction (the caller's general path).
pub(crate) fn low_columns<S: Copy + Sync>(
    op: ReduceOp,
    v: &[S],
    l: &Layout,
    dims: &[usize],
    widen: impl Fn(S) -> f32 + Copy + Sync,
) -> Option<Vec<f32>> {
    let (out_n, red_n, column) = counts(l, dims);
    if !column || out_n == 0 || red_n == 0 {
        return None;
    }
    Some(columns(op, &v[l.offset()..l.offset() + out_n * red_n], widen, out_n, red_n))
}

/// Reduces over `dims`; output in row-major order of the kept-dims shape.
pub(crate) fn reduce<T: FloatElem>(op: ReduceOp, v: &[T], l: &Layout, dims: &[usize]) -> Vec<T> {
    let rank = l.rank();
    let (out_n, red_n, column) = counts(l, dims);
    if out_n == 0 {
        return Vec::new();
    }
    if red_n == 0 {
        return filled(out_n, init::<T>(op));
    }
    let total = out_n * red_n;
    let kept: Vec<usize> = (0..rank).filter(|d| !dims.contains(d)).collect();
    // no zero dim past the checks above: plain products
    let count = |ds: &[usize]| ds.iter().map(|&d| l.dims()[d]).product::<usize>();
    if column {
        return columns(op, &v[l.offset()..l.offset() + total], |x| x, out_n, red_n);
    }
    // Middle case: contiguous input reduced over a leading and a trailing
    // block of axes, keeping the ones between (batch norm's per-channel
    // statistics over N and H W, a convolution's bias gradient): each kept
    // element reduces its rows where they lie, no copy. A sum adds its rows'
    // pairwise sums pairwise.
    let lead = dims.iter().enumerate().take_while(|&(i, &d)| i == d).count();
    let trail = &dims[lead..];
    if l.is_contiguous() && lead > 0 && !trail.is_empty() && trail.iter().enumerate().all(|(i, &d)| d == rank - trail.len() + i) {
        let x = &v[l.offset()..l.offset() + total];
        let (outer, row) = (count(&dims[..lead]), count(trail));
        let one = |k: usize| -> T {
            let rows = (0..outer).map(|a| reduce_slice(op, &x[(a * out_n + k) * row..(a * out_n + k + 1) * row]));
            if op == ReduceOp::Sum {
                sum_pairwise(&rows.collect::<Vec<T>>())
            } else {
                rows.fold(init::<T>(op), |acc, r| if acc.is_nan() { acc } else { combine(op, acc, r) })
            }
        };
        let mut out = Vec::with_capacity(out_n);
        if total >= PAR_MIN_ELEMS && out_n > 1 {
            (0..out_n).into_par_iter().map(one).collect_into_vec(&mut out);
        } else {
            out.extend((0..out_n).map(one));
        }
        return out;
    }
    // Row case: move reduced axes last; copy once if they are not one contiguous run.
    let perm: Vec<usize> = kept.iter().chain(dims.iter()).copied().collect();
    let lp = l.permute(&perm).expect("reduce: valid permutation");
    let red_layout = Layout::new(Shape::new(lp.dims()[kept.len()..].to_vec()), lp.strides()[kept.len()..].to_vec(), 0);
    let (owned, lp) =
        if red_layout.is_contiguous() { (None, lp) } else { (Some(copy_strided(v, &lp)), Layout::contiguous(lp.shape().clone())) };
    let src: &[T] = owned.as_deref().unwrap_or(v);
    let (cd, [cs]) = coalesce(&lp.dims()[..kept.len()], [&lp.strides()[..kept.len()]]);
    let base = lp.offset();
    let one = |o: usize| -> T {
        let off = base + linear_offset(o, &cd, &cs);
        reduce_slice(op, &src[off..off + red_n])
    };
    let mut out = Vec::with_capacity(out_n);
    if total >= PAR_MIN_ELEMS && out_n > 1 {
        (0..out_n).into_par_iter().map(one).collect_into_vec(&mut out);
    } else {
        out.extend((0..out_n).map(one));
    }
    out
}

/// Max/min along `dim` with the index of the first extreme (NaN counts as extreme).
pub(crate) fn arg_reduce<T: FloatElem>(op: ArgReduceOp, v: &[T], l: &Layout, dim: usize) -> (Vec<T>, Vec<i64>) {
    let rank = l.rank();
    let mut perm: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
    perm.push(dim);
    let lp = l.permute(&perm).expect("arg_reduce: valid permutation");
    let owned = copy_strided(v, &lp);
    let n = l.dims()[dim];
    if n == 0 {
        return (Vec::new(), Vec::new());
    }
    let rows = owned.len() / n;
    let mut vals = Vec::with_capacity(rows);
    let mut idxs = Vec::with_capacity(rows);
    for row in owned.chunks_exact(n) {
        let mut best = 0;
        for (i, &x) in row.iter().enumerate().skip(1) {
            let b = row[best];
            if b.is_nan() {
                break;
            }
            let better = x.is_nan()
                || match op {
                    ArgReduceOp::Max => x > b,
                    ArgReduceOp::Min => x < b,
                };
            if better {
                best = i;
            }
        }
        vals.push(row[best]);
        idxs.push(best as i64);
    }
    (vals, idxs)
}
