//! Resampling: `F.interpolate` (nearest, linear, bilinear, both
//! `align_corners`) and adaptive max pooling. Linear interpolation is one
//! matrix product per spatial dim (separable weights), nearest an index
//! selection per dim, so their backward sums into the sources as PyTorch's.

use crate::Tensor;
use autograd_core::{Backend, Error, Result};
use std::panic::Location;

/// How [`try_interpolate`] computes each output element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterpolateMode {
    /// The nearest source element (PyTorch's `"nearest"`: `floor(dst * scale)`).
    Nearest,
    /// Linear interpolation along each spatial dim (`"linear"`, `"bilinear"`,
    /// `"trilinear"` by the input's rank).
    Linear,
}

/// The output size of [`try_interpolate`]: sizes, or scale factors (the
/// size `floor(in * factor)`, the sampling scale `1 / factor`, as PyTorch
/// with `recompute_scale_factor` unset).
#[derive(Clone, Debug, PartialEq)]
pub enum InterpolateSize {
    /// The output's spatial sizes (one, or one per dim).
    Size(Vec<usize>),
    /// Scale factors (one, or one per dim).
    ScaleFactor(Vec<f64>),
}

/// Source position of output `dst` for `Linear`, PyTorch's
/// `area_pixel_compute_source_index`.
fn linear_source(dst: usize, scale: f64, align_corners: bool) -> f64 {
    if align_corners { dst as f64 * scale } else { ((dst as f64 + 0.5) * scale - 0.5).max(0.0) }
}

/// PyTorch's `F.interpolate` for `(N, C, *spatial)` inputs with 1 to 3
/// spatial dims: `Nearest` or `Linear` (`align_corners` as PyTorch; it must
/// be `false` for `Nearest`).
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [1, 1, 2]);
/// let up = |mode, ac| F::try_interpolate(&x, &F::InterpolateSize::Size(vec![4]), mode, ac).unwrap().to_vec::<f64>();
/// assert_eq!(up(F::InterpolateMode::Nearest, false), vec![1.0, 1.0, 2.0, 2.0]);
/// assert_eq!(up(F::InterpolateMode::Linear, false), vec![1.0, 1.25, 1.75, 2.0]);
/// let corners = up(F::InterpolateMode::Linear, true);
/// assert!(corners.iter().zip([1.0, 4.0 / 3.0, 5.0 / 3.0, 2.0]).all(|(a, b)| (a - b).abs() < 1e-15));
/// ```
#[track_caller]
pub fn try_interpolate<B: Backend>(x: &Tensor<B>, size: &InterpolateSize, mode: InterpolateMode, align_corners: bool) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let bad = |msg: String| Error::InvalidShape { op: "interpolate", msg, location: Some(loc) };
    if !(3..=5).contains(&x.rank()) {
        return Err(bad(format!("expected an input (N, C, *spatial) with 1 to 3 spatial dims, got {:?}", x.dims())));
    }
    if mode == InterpolateMode::Nearest && align_corners {
        return Err(bad("align_corners only applies to linear modes".into()));
    }
    let r = x.rank() - 2;
    let spatial = x.dims()[2..].to_vec();
    // output size and sampling scale (input / output) per dim
    let (out, scales): (Vec<usize>, Vec<f64>) = match size {
        InterpolateSize::Size(s) if s.len() == 1 || s.len() == r => {
            let s: Vec<usize> = (0..r).map(|i| if s.len() == 1 { s[0] } else { s[i] }).collect();
            let scales = (0..r).map(|i| if s[i] == 0 { 0.0 } else { spatial[i] as f64 / s[i] as f64 }).collect();
            (s, scales)
        }
        InterpolateSize::ScaleFactor(f) if (f.len() == 1 || f.len() == r) && f.iter().all(|&v| v.is_finite() && v > 0.0) => {
            let f: Vec<f64> = (0..r).map(|i| if f.len() == 1 { f[0] } else { f[i] }).collect();
            let out: Vec<usize> = (0..r).map(|i| (spatial[i] as f64 * f[i]).floor() as usize).collect();
            (out, f.iter().map(|v| 1.0 / v).collect())
        }
        other => return Err(bad(format!("{other:?} needs one positive entry or one per spatial dim ({r})"))),
    };
    if spatial.contains(&0) || out.contains(&0) {
        return Err(bad(format!("input {:?} and output size {out:?} must have non-zero spatial sizes", x.dims())));
    }
    // the output and each dim's interpolation matrix must be allocatable (no overflow on the way)
    let mut out_dims = x.dims()[..2].to_vec();
    out_dims.extend_from_slice(&out);
    autograd_core::validate::output("interpolate", &autograd_core::Shape::from(out_dims), x.dtype()).map_err(|e| e.at(loc))?;
    for (&n_in, &n_out) in spatial.iter().zip(&out) {
        let m = n_in.checked_mul(n_out).ok_or_else(|| bad(format!("an interpolation matrix of {n_in} x {n_out} overflows")))?;
        autograd_core::memory::check_alloc("interpolate", m, 8).map_err(|e| e.at(loc))?;
    }
    let mut y = x.clone();
    for i in 0..r {
        let (n_in, n_out) = (spatial[i], out[i]);
        let d = (i + 2) as isize;
        y = match mode {
            InterpolateMode::Nearest => {
                let idx: Vec<i64> = (0..n_out).map(|o| ((o as f64 * scales[i]).floor() as usize).min(n_in - 1) as i64).collect();
                y.try_index_select(d, &Tensor::try_from_vec(idx, [n_out])?)?
            }
            InterpolateMode::Linear => {
                let scale = if align_corners { if n_out > 1 { (n_in - 1) as f64 / (n_out - 1) as f64 } else { 0.0 } } else { scales[i] };
                let mut m = vec![0.0; n_in * n_out];
                for o in 0..n_out {
                    let src = linear_source(o, scale, align_corners);
                    let i0 = (src.floor() as usize).min(n_in - 1);
                    let i1 = (i0 + 1).min(n_in - 1);
                    let l = src - i0 as f64;
                    m[i0 * n_out + o] += 1.0 - l;
                    m[i1 * n_out + o] += l;
                }
                let m = Tensor::<B>::try_from_vec(m, [n_in, n_out])?.try_to_dtype(y.dtype())?;
                let last = (y.rank() - 1) as isize;
                y.try_transpose(d, last)?.try_matmul(&m)?.try_transpose(d, last)?
            }
        };
    }
    y.try_contiguous()
}

/// PyTorch's `F.adaptive_max_pool2d` with `return_indices=True`: the
/// maximum over windows that tile an `(N, C, H, W)` or `(C, H, W)` input
/// into `output_size` positions, and the flat indices `h * W + w` of the
/// maxima.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec((0..12).map(|i| i as f64).collect(), [1, 1, 3, 4]);
/// let (v, i) = F::try_adaptive_max_pool2d_with_indices(&x, [2, 2]).unwrap();
/// assert_eq!(v.to_vec::<f64>(), vec![5.0, 7.0, 9.0, 11.0]);
/// assert_eq!(i.to_vec::<i64>(), vec![5, 7, 9, 11]);
/// ```
#[track_caller]
pub fn try_adaptive_max_pool2d_with_indices<B: Backend>(x: &Tensor<B>, output_size: [usize; 2]) -> Result<(Tensor<B>, Tensor<B>)> {
    let loc = Location::caller();
    let (xb, unbatched) = super::conv::batched("adaptive_max_pool2d", x, 2, loc)?;
    let (n, c, h, w) = (xb.dims()[0], xb.dims()[1], xb.dims()[2], xb.dims()[3]);
    if h == 0 || w == 0 {
        return Err(Error::InvalidShape {
            op: "adaptive_max_pool2d",
            msg: format!("input {:?} must have non-zero spatial sizes", x.dims()),
            location: Some(loc),
        });
    }
    let [oh, ow] = output_size;
    // the output, and the window table (at most one window of the input per position), must be allocatable
    autograd_core::validate::output("adaptive_max_pool2d", &autograd_core::Shape::from([n, c, oh, ow]), xb.dtype())
        .map_err(|e| e.at(loc))?;
    // in u128: `(i + 1) * size` cannot overflow
    let window = |i: usize, size: usize, out: usize| {
        let (i, size, out) = (i as u128, size as u128, out as u128);
        ((i * size / out) as usize, ((i + 1) * size).div_ceil(out) as usize)
    };
    let kh = (0..oh).map(|i| window(i, h, oh)).map(|(s, e)| e - s).max().unwrap_or(0);
    let kw = (0..ow).map(|i| window(i, w, ow)).map(|(s, e)| e - s).max().unwrap_or(0);
    // per output position, the flat sources of its window, padded with the index of an appended -inf
    let pad = (h * w) as i64;
    let table_len = [oh, ow, kh, kw].iter().try_fold(1usize, |a, &b| a.checked_mul(b));
    let table_len = table_len.ok_or_else(|| Error::InvalidShape {
        op: "adaptive_max_pool2d",
        msg: format!("output size {output_size:?} over an input of [{h}, {w}] overflows"),
        location: Some(loc),
    })?;
    autograd_core::memory::check_alloc("adaptive_max_pool2d", table_len, std::mem::size_of::<i64>()).map_err(|e| e.at(loc))?;
    let mut table = Vec::with_capacity(table_len);
    for i in 0..oh {
        let (h0, h1) = window(i, h, oh);
        for j in 0..ow {
            let (w0, w1) = window(j, w, ow);
            for a in 0..kh {
                for b in 0..kw {
                    let (hh, ww) = (h0 + a, w0 + b);
                    table.push(if hh < h1 && ww < w1 { (hh * w + ww) as i64 } else { pad });
                }
            }
        }
    }
    let flat = xb.try_reshape(&[n as isize, c as isize, (h * w) as isize])?;
    let neg = Tensor::<B>::try_full_dtype([n, c, 1], f64::NEG_INFINITY, flat.dtype())?;
    let flat = Tensor::try_cat(&[flat, neg], 2)?;
    let k = kh * kw;
    let table = Tensor::<B>::try_from_vec(table, [oh * ow * k])?;
    let windows = flat.try_index_select(2, &table)?.try_reshape(&[n as isize, c as isize, (oh * ow) as isize, k as isize])?;
    let (values, arg) = windows.try_max_dim(3, true)?;
    let lookup = table.try_reshape(&[1, 1, (oh * ow) as isize, k as isize])?.try_expand(&[n as isize, c as isize, -1, -1])?;
    let indices = lookup.try_gather(3, &arg)?;
    let shape = [n as isize, c as isize, oh as isize, ow as isize];
    let (values, indices) = (values.try_reshape(&shape)?, indices.try_reshape(&shape)?);
    if unbatched { Ok((values.try_squeeze_dim(0)?, indices.try_squeeze_dim(0)?)) } else { Ok((values, indices)) }
}

/// PyTorch's `F.adaptive_max_pool2d`: [`try_adaptive_max_pool2d_with_indices`]'s maxima.
#[track_caller]
pub fn try_adaptive_max_pool2d<B: Backend>(x: &Tensor<B>, output_size: [usize; 2]) -> Result<Tensor<B>> {
    Ok(try_adaptive_max_pool2d_with_indices(x, output_size)?.0)
}
