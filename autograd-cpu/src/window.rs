//! `unfold` (im2col) and `fold` (col2im): one task per (batch, channel)
//! plane, each writing its own `K x L` block of columns (or its own image
//! plane), so planes run in parallel without synchronisation. The last
//! spatial dim is the inner loop, over a precomputed table of source
//! indices, so a row of taps is a gather from one image row.

use crate::PAR_MIN_ELEMS;
use crate::elementwise::copy_strided;
use autograd_core::layout::for_each_index;
use autograd_core::scalar::FloatElem;
use autograd_core::validate::WindowSizes;
use autograd_core::window::Window;
use autograd_core::{Element, Layout};
use rayon::prelude::*;

/// Marks a tap in the padding in the last dim's source table.
const PAD: usize = usize::MAX;

/// The image as a dense row-major slice (a copy when the view is strided).
fn dense<'a, T: Element>(v: &'a [T], layout: &Layout) -> std::borrow::Cow<'a, [T]> {
    if layout.is_contiguous() {
        std::borrow::Cow::Borrowed(&v[layout.offset()..layout.offset() + layout.numel()])
    } else {
        std::borrow::Cow::Owned(copy_strided(v, layout))
    }
}

/// Visits the rows of one plane's `K x L` block in order: for each row, the
/// image offset of the outer (all but last) spatial dims, or `None` when an
/// outer tap is in the padding, and the last dim's source table for it.
fn for_each_row(window: &Window, sizes: &WindowSizes, last_taps: &[usize], mut f: impl FnMut(usize, Option<usize>, &[usize])) {
    let last = window.rank() - 1;
    let (kl, ll) = (window.kernel()[last], sizes.positions[last]);
    let spatial = &sizes.spatial;
    // row-major strides of the image's spatial dims
    let mut strides = vec![1usize; spatial.len()];
    for i in (0..last).rev() {
        strides[i] = strides[i + 1] * spatial[i + 1];
    }
    let mut row = 0;
    for_each_index(&window.kernel()[..last], |ko| {
        for kk in 0..kl {
            let taps = &last_taps[kk * ll..(kk + 1) * ll];
            for_each_index(&sizes.positions[..last], |po| {
                let base = (0..last).try_fold(0usize, |acc, i| window.source(i, po[i], ko[i], spatial[i]).map(|x| acc + x * strides[i]));
                f(row, base, taps);
                row += 1;
            });
        }
    });
}

/// The last spatial dim's source index per (kernel offset, position), or [`PAD`].
fn last_dim_taps(window: &Window, sizes: &WindowSizes) -> Vec<usize> {
    let last = window.rank() - 1;
    let (kl, ll, sl) = (window.kernel()[last], sizes.positions[last], sizes.spatial[last]);
    (0..kl).flat_map(|kk| (0..ll).map(move |o| window.source(last, o, kk, sl).unwrap_or(PAD))).collect()
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
    let mut out = vec![pad; sizes.batch * sizes.channels * block];
    per_plane(&mut out, block, |p, o| {
        let src = &img[p * plane..(p + 1) * plane];
        for_each_row(window, sizes, &taps, |row, base, taps| {
            if let Some(b) = base {
                let dst = &mut o[row * ll..(row + 1) * ll];
                for (d, &x) in dst.iter_mut().zip(taps) {
                    if x != PAD {
                        *d = src[b + x];
                    }
                }
            }
        });
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
    let mut out = vec![T::zero(); sizes.batch * sizes.channels * plane];
    per_plane(&mut out, plane, |p, img| {
        let src = &cols[p * block..(p + 1) * block];
        for_each_row(window, sizes, &taps, |row, base, taps| {
            if let Some(b) = base {
                for (&x, &t) in src[row * ll..(row + 1) * ll].iter().zip(taps) {
                    if t != PAD {
                        img[b + t] = img[b + t] + x;
                    }
                }
            }
        });
    });
    out
}
