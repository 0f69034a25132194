//! `unfold` (im2col) and `fold` (col2im): one task per (batch, channel)
//! plane, each writing its own `K x L` block of columns (or its own image
//! plane), so planes run in parallel without synchronisation. The rows of
//! a block and the last spatial dim's source indices are tables computed
//! once per call; a row's taps inside the image are one run, a copy from
//! one image row at stride 1.

use crate::PAR_MIN_ELEMS;
use crate::elementwise::dense;
use autograd_core::layout::for_each_index;
use autograd_core::scalar::FloatElem;
use autograd_core::validate::WindowSizes;
use autograd_core::window::Window;
use autograd_core::{Element, Layout};
use rayon::prelude::*;

/// Marks a tap in the padding in the last dim's source table.
const PAD: usize = usize::MAX;

/// The rows of one plane's `K x L` block, in order: for each row, the
/// image offset of its outer (all but last) spatial dims, or `None` when an
/// outer tap is in the padding, and its kernel offset in the last dim. The
/// same for every plane: computed once per call.
fn rows(window: &Window, sizes: &WindowSizes) -> Vec<(Option<usize>, usize)> {
    let last = window.rank() - 1;
    let spatial = &sizes.spatial;
    // row-major strides of the image's spatial dims
    let mut strides = vec![1usize; spatial.len()];
    for i in (0..last).rev() {
        strides[i] = strides[i + 1] * spatial[i + 1];
    }
    let mut out = Vec::new();
    for_each_index(&window.kernel()[..last], |ko| {
        for kk in 0..window.kernel()[last] {
            for_each_index(&sizes.positions[..last], |po| {
                let base = (0..last).try_fold(0usize, |acc, i| window.source(i, po[i], ko[i], spatial[i]).map(|x| acc + x * strides[i]));
                out.push((base, kk));
            });
        }
    });
    out
}

/// The last spatial dim's source index per (kernel offset, position), or [`PAD`].
fn last_dim_taps(window: &Window, sizes: &WindowSizes) -> Vec<usize> {
    let last = window.rank() - 1;
    let (kl, ll, sl) = (window.kernel()[last], sizes.positions[last], sizes.spatial[last]);
    (0..kl).flat_map(|kk| (0..ll).map(move |o| window.source(last, o, kk, sl).unwrap_or(PAD))).collect()
}

/// The positions `lo..hi` of a row whose taps are inside the image (taps
/// of one kernel offset are increasing in the position, so the inside ones
/// are one run).
fn inside(taps: &[usize]) -> (usize, usize) {
    let lo = taps.iter().position(|&x| x != PAD).unwrap_or(taps.len());
    let hi = taps.iter().rposition(|&x| x != PAD).map_or(lo, |i| i + 1);
    (lo, hi)
}

/// Runs `f` on each plane's chunk of `out` (with its plane index), in
/// parallel when the output is large enough to pay for waking the pool.
fn per_plane<T: Send>(out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if chunk == 0 {
        return;
    }
    if out.len() >= PAR_MIN_ELEMS {
        out.par_chunks_mut(chunk).enumerate().for_each(|(p, o)| f(p, o));
    } else {
        out.chunks_mut(chunk).enumerate().for_each(|(p, o)| f(p, o));
    }
}

/// Columns `[N, C * K, L]` of the image `v` read through `layout`.
pub(crate) fn unfold<T: Element>(v: &[T], layout: &Layout, window: &Window, sizes: &WindowSizes, pad: T) -> Vec<T> {
    let img = dense(v, layout);
    let plane = sizes.image_numel();
    let ll = sizes.positions[window.rank() - 1];
    let block = window.kernel_numel() * sizes.num_positions();
    let taps = last_dim_taps(window, sizes);
    let rows = rows(window, sizes);
    let mut out = vec![pad; sizes.batch * sizes.channels * block];
    let unit_stride = window.stride()[window.rank() - 1] == 1;
    per_plane(&mut out, block, |p, o| {
        let src = &img[p * plane..(p + 1) * plane];
        for (row, &(base, kk)) in rows.iter().enumerate() {
            let taps = &taps[kk * ll..(kk + 1) * ll];
            let Some(b) = base else { continue };
            let (lo, hi) = inside(taps);
            if lo == hi {
                continue;
            }
            let dst = &mut o[row * ll + lo..row * ll + hi];
            if unit_stride {
                // consecutive positions read consecutive elements: one copy
                let start = b + taps[lo];
                dst.copy_from_slice(&src[start..start + (hi - lo)]);
            } else {
                for (d, &x) in dst.iter_mut().zip(&taps[lo..hi]) {
                    *d = src[b + x];
                }
            }
        }
    });
    out
}

/// The contiguous `[N, C, *spatial]` image summing the taps of the columns
/// `cols` read through `lcols` (padding taps dropped).
pub(crate) fn fold<T: FloatElem>(cols: &[T], lcols: &Layout, window: &Window, sizes: &WindowSizes) -> Vec<T> {
    let cols = dense(cols, lcols);
    let plane = sizes.image_numel();
    let ll = sizes.positions[window.rank() - 1];
    let block = window.kernel_numel() * sizes.num_positions();
    let taps = last_dim_taps(window, sizes);
    let rows = rows(window, sizes);
    let unit_stride = window.stride()[window.rank() - 1] == 1;
    let mut out = vec![T::zero(); sizes.batch * sizes.channels * plane];
    per_plane(&mut out, plane, |p, img| {
        let src = &cols[p * block..(p + 1) * block];
        for (row, &(base, kk)) in rows.iter().enumerate() {
            let taps = &taps[kk * ll..(kk + 1) * ll];
            let Some(b) = base else { continue };
            let (lo, hi) = inside(taps);
            if lo == hi {
                continue;
            }
            let cols = &src[row * ll + lo..row * ll + hi];
            if unit_stride {
                let start = b + taps[lo];
                for (d, &x) in img[start..start + (hi - lo)].iter_mut().zip(cols) {
                    *d = *d + x;
                }
            } else {
                for (&x, &t) in cols.iter().zip(&taps[lo..hi]) {
                    img[b + t] = img[b + t] + x;
                }
            }
        }
    });
    out
}
