//! The reference `unfold` (im2col) and `fold` (col2im): one loop over every
//! tap (batch, channel, kernel offset, window position) in the columns'
//! row-major order, with the image element it reads.

use super::for_each_index;
use crate::scalar::FloatElem;
use crate::validate::WindowSizes;
use crate::window::Window;
use crate::{Element, Layout, Shape};

/// Calls `f` with the image offset (through `image`) of every tap, in the
/// columns' order `[N, C, K, L]`; `None` where the tap falls in the padding.
fn for_each_tap(image: &Layout, window: &Window, sizes: &WindowSizes, mut f: impl FnMut(Option<usize>)) {
    let kernel = Shape::from(window.kernel());
    let positions = Shape::from(&sizes.positions[..]);
    let rank = window.rank();
    let mut idx = vec![0usize; rank + 2];
    for n in 0..sizes.batch {
        for c in 0..sizes.channels {
            for_each_index(&kernel, |k| {
                for_each_index(&positions, |o| {
                    idx[0] = n;
                    idx[1] = c;
                    let inside = (0..rank).all(|i| match window.source(i, o[i], k[i], sizes.spatial[i]) {
                        Some(x) => {
                            idx[i + 2] = x;
                            true
                        }
                        None => false,
                    });
                    f(inside.then(|| super::offset_of(image, &idx)));
                });
            });
        }
    }
}

/// Columns `[N, C * K, L]` of the image `v` read through `layout`.
pub(super) fn unfold<T: Element>(v: &[T], layout: &Layout, window: &Window, sizes: &WindowSizes, pad: T) -> Vec<T> {
    let mut out = Vec::new();
    for_each_tap(layout, window, sizes, |o| out.push(o.map_or(pad, |o| v[o])));
    out
}

/// The contiguous `[N, C, *spatial]` image whose elements are the sums of
/// the columns' taps that read them (padding taps dropped).
pub(super) fn fold<T: FloatElem>(cols: &[T], lcols: &Layout, window: &Window, sizes: &WindowSizes) -> Vec<T> {
    let mut dims = vec![sizes.batch, sizes.channels];
    dims.extend_from_slice(&sizes.spatial);
    let image = Layout::contiguous(Shape::from(dims));
    let mut out = vec![T::zero(); image.numel()];
    let mut col = lcols.offsets();
    for_each_tap(&image, window, sizes, |o| {
        let x = cols[col.next().expect("one column element per tap")];
        if let Some(o) = o {
            out[o] = out[o] + x;
        }
    });
    out
}
