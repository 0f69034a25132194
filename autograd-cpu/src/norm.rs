//! Layer normalisation in one pass per row: the row's mean, its biased
//! variance and the normalised values while the row is in cache (the
//! backend's default composes nine kernels and their temporaries); its
//! input gradient the same way (the default composes eight).

use crate::PAR_MIN_ELEMS;
use crate::elementwise::dense;
use crate::simd::{lane_dot, lane_sum, multiversion};
use autograd_core::memory::{filled, scratch};
use autograd_core::scalar::FloatElem;
use autograd_core::{Layout, Result};
use rayon::prelude::*;

/// `(xhat, rstd)` over the trailing `k` dims of `v` viewed by `layout`, by
/// the default's formula (`mean = sum / n`, `var = sum((x - mean)^2) / n`,
/// `rstd = 1 / sqrt(var + eps)`, `xhat = (x - mean) rstd`), each sum in
/// [`crate::simd::LANES`] interleaved lanes.
pub(crate) fn layer_norm<T: FloatElem>(v: &[T], layout: &Layout, k: usize, eps: f64) -> Result<(Vec<T>, Vec<T>)> {
    autograd_core::validate::layer_norm("layer_norm", layout, k)?;
    let r = layout.rank();
    let n: usize = layout.dims()[r - k..].iter().product();
    // read where it lies (a copy only for a strided view), written once:
    // every row of `xhat` is written below
    let x = dense(v, layout);
    let mut xhat = scratch(x.len(), T::zero());
    let rows: usize = layout.dims()[..r - k].iter().product();
    let mut rstd = filled(rows, T::zero());
    if n == 0 {
        // no elements to average: NaN statistics, as 0 / 0 in the default
        let nan = T::one() / (T::zero() / T::zero() + T::from_f64(eps)).sqrt();
        rstd.iter_mut().for_each(|r| *r = nan);
        return Ok((xhat, rstd));
    }
    let eps = T::from_f64(eps);
    if xhat.len() >= PAR_MIN_ELEMS / 4 && rows > 1 {
        let per = (PAR_MIN_ELEMS / 16 / n).max(1);
        xhat.par_chunks_mut(per * n)
            .zip(x.par_chunks(per * n))
            .zip(rstd.par_chunks_mut(per))
            .for_each(|((out, x), rs)| normalise_rows(x, out, rs, n, eps));
    } else {
        normalise_rows(&x, &mut xhat, &mut rstd, n, eps);
    }
    Ok((xhat, rstd))
}

multiversion! {
    /// Normalises consecutive rows of `n > 0` elements of `x` into `out`,
    /// writing each row's `rstd`; compiled for the CPU's widest vectors.
    fn normalise_rows<T>(x: &[T], out: &mut [T], rstd: &mut [T], n: usize, eps: T) where [T: FloatElem] {
        let count = T::from_f64(n as f64);
        for ((row, dst), rs) in x.chunks(n).zip(out.chunks_mut(n)).zip(rstd.iter_mut()) {
            let mean = lane_sum(row, |v| v) / count;
            let var = lane_sum(row, |v| (v - mean) * (v - mean)) / count;
            let r = T::one() / (var + eps).sqrt();
            for (d, &v) in dst.iter_mut().zip(row) {
                *d = (v - mean) * r;
            }
            *rs = r;
        }
    }
}

/// The input gradient of [`layer_norm`] given the gradient `g` of `xhat`:
/// `rstd (g - mean(g) - xhat mean(g xhat))` over rows of the trailing `k`
/// dims, evaluated in the default's order (`((g - m1) - xhat m2) rstd`),
/// each mean a [`lane_sum`]. The caller has validated the layouts
/// (`validate::layer_norm_backward`).
pub(crate) fn layer_norm_backward<T: FloatElem>(
    g: &[T],
    lg: &Layout,
    xhat: &[T],
    lx: &Layout,
    rstd: &[T],
    lr: &Layout,
    k: usize,
) -> Vec<T> {
    let r = lg.rank();
    let n: usize = lg.dims()[r - k..].iter().product();
    let (g, xhat, rstd) = (dense(g, lg), dense(xhat, lx), dense(rstd, lr));
    if n == 0 || g.is_empty() {
        return g.into_owned();
    }
    // every element is written below: the rows of n cover the buffer
    let mut dx = scratch(g.len(), T::zero());
    if dx.len() >= PAR_MIN_ELEMS / 4 && rstd.len() > 1 {
        let per = (PAR_MIN_ELEMS / 16 / n).max(1);
        dx.par_chunks_mut(per * n)
            .zip(g.par_chunks(per * n))
            .zip(xhat.par_chunks(per * n))
            .zip(rstd.par_chunks(per))
            .for_each(|(((d, g), x), rs)| backward_rows(d, g, x, rs, n));
    } else {
        backward_rows(&mut dx, &g, &xhat, &rstd, n);
    }
    dx
}

multiversion! {
    /// The input's gradients of consecutive rows of `n > 0` gradients `g`
    /// of `xhat`; compiled for the CPU's widest vectors.
    fn backward_rows<T>(dx: &mut [T], g: &[T], xhat: &[T], rstd: &[T], n: usize) where [T: FloatElem] {
        let count = T::from_f64(n as f64);
        for (((row, gr), xr), &r) in dx.chunks_mut(n).zip(g.chunks(n)).zip(xhat.chunks(n)).zip(rstd) {
            let m1 = lane_sum(gr, |v| v) / count;
            let m2 = lane_dot(gr, xr) / count;
            for ((d, &g), &x) in row.iter_mut().zip(gr).zip(xr) {
                *d = (g - m1 - x * m2) * r;
            }
        }
    }
}
