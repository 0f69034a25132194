//! Pooling, written with the window primitive: max pooling is the maximum
//! of the input's windows as columns (padding reads `-inf`), average
//! pooling their sum over PyTorch's divisor, adaptive average pooling one
//! averaging matrix per spatial dim. Backward is that of the maximum (the
//! gradient goes to the element PyTorch picks: the first maximum in the
//! window's row-major order, a NaN over any number) and of the sum.
//!
//! ```
//! use autograd_tensor::{Tensor, functional as F};
//! use autograd_core::RefBackend;
//! let x = Tensor::<RefBackend>::from_vec((0..16).map(|i| i as f64).collect(), [1, 1, 4, 4]);
//! let y = F::max_pool2d(&x, &F::PoolOptions::new(&[2]));
//! assert_eq!(y.to_vec::<f64>(), vec![5.0, 7.0, 13.0, 15.0]);
//! ```

use super::conv::{batched, per_dim};
use crate::Tensor;
use autograd_core::window::Window;
use autograd_core::{Backend, Error, Result};
use std::panic::Location;

/// The options of a max or average pooling. PyTorch's defaults: the stride
/// is the kernel size, padding 0, dilation 1 (max pooling only), floor
/// mode; for average pooling the padding counts in the divisor and no
/// divisor is forced. Each size is one number or one per spatial dim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolOptions {
    /// The window's size.
    pub kernel_size: Vec<usize>,
    /// Step between windows (`None`: the kernel size).
    pub stride: Option<Vec<usize>>,
    /// Implicit padding on both sides (at most half the kernel, as PyTorch).
    pub padding: Vec<usize>,
    /// Spacing between a window's taps (max pooling only).
    pub dilation: Vec<usize>,
    /// Output sizes rounded up: a last window may start past the end of
    /// the input if it starts inside it or its left padding.
    pub ceil_mode: bool,
    /// Average pooling: whether the zero padding counts in the divisor.
    pub count_include_pad: bool,
    /// Average pooling: a divisor to use instead of the window's size.
    pub divisor_override: Option<usize>,
}

impl PoolOptions {
    /// A window of `kernel_size` with PyTorch's defaults for the rest.
    pub fn new(kernel_size: &[usize]) -> Self {
        PoolOptions {
            kernel_size: kernel_size.to_vec(),
            stride: None,
            padding: vec![0],
            dilation: vec![1],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
    /// With `stride`.
    pub fn with_stride(self, stride: &[usize]) -> Self {
        PoolOptions { stride: Some(stride.to_vec()), ..self }
    }
    /// With `padding`.
    pub fn with_padding(self, padding: &[usize]) -> Self {
        PoolOptions { padding: padding.to_vec(), ..self }
    }
    /// With `dilation`.
    pub fn with_dilation(self, dilation: &[usize]) -> Self {
        PoolOptions { dilation: dilation.to_vec(), ..self }
    }
    /// With `ceil_mode`.
    pub fn with_ceil_mode(self, ceil_mode: bool) -> Self {
        PoolOptions { ceil_mode, ..self }
    }
    /// With `count_include_pad`.
    pub fn with_count_include_pad(self, count_include_pad: bool) -> Self {
        PoolOptions { count_include_pad, ..self }
    }
    /// With `divisor_override`.
    pub fn with_divisor_override(self, divisor: Option<usize>) -> Self {
        PoolOptions { divisor_override: divisor, ..self }
    }
}

/// One pooling's geometry: per dim the kernel, stride, padding, dilation
/// and output size as PyTorch's `pooling_output_shape` computes them, and
/// the window (padded after as far as `ceil_mode` needs).
struct Pooling {
    kernel: Vec<usize>,
    stride: Vec<usize>,
    padding: Vec<usize>,
    out: Vec<usize>,
    window: Window,
}

impl Pooling {
    fn new(op: &'static str, spatial: &[usize], o: &PoolOptions, loc: &'static Location<'static>) -> Result<Pooling> {
        let r = spatial.len();
        let kernel = per_dim(op, "kernel_size", &o.kernel_size, r, loc)?;
        let stride = match &o.stride {
            Some(s) if !s.is_empty() => per_dim(op, "stride", s, r, loc)?,
            _ => kernel.clone(),
        };
        let padding = per_dim(op, "padding", &o.padding, r, loc)?;
        let dilation = per_dim(op, "dilation", &o.dilation, r, loc)?;
        let bad = |msg: String| Error::InvalidShape { op, msg, location: Some(loc) };
        let mut out = Vec::with_capacity(r);
        let mut pads = Vec::with_capacity(r);
        for i in 0..r {
            if kernel[i] == 0 || stride[i] == 0 || dilation[i] == 0 {
                return Err(bad(format!("kernel {kernel:?}, stride {stride:?} and dilation {dilation:?} must be positive")));
            }
            if padding[i] > kernel[i] / 2 {
                return Err(bad(format!(
                    "pad should be at most half of effective kernel size, but got pad={padding:?} and kernel_size={kernel:?}"
                )));
            }
            let extent = (dilation[i] as u128) * (kernel[i] as u128 - 1) + 1;
            let padded = spatial[i] as u128 + 2 * padding[i] as u128;
            if padded < extent {
                return Err(bad(format!(
                    "input spatial size {spatial:?} padded by {padding:?} is smaller than the kernel {kernel:?} dilated by {dilation:?}"
                )));
            }
            let span = padded - extent;
            let s = stride[i] as u128;
            let mut n = if o.ceil_mode { span.div_ceil(s) } else { span / s } + 1;
            // a last window must start inside the input or its left padding
            if o.ceil_mode && (n - 1) * s >= spatial[i] as u128 + padding[i] as u128 {
                n -= 1;
            }
            // the padding after that lets the window see the last position
            let needed = (n - 1) * s + extent;
            let after = needed.saturating_sub(spatial[i] as u128 + padding[i] as u128);
            let (n, after) = (usize::try_from(n), usize::try_from(after));
            let (Ok(n), Ok(after)) = (n, after) else { return Err(bad(format!("output size of {op} overflows"))) };
            out.push(n);
            pads.push((padding[i], after));
        }
        let window = Window::new(op, &kernel, &stride, &pads, &dilation).map_err(|e| e.at(loc))?;
        Ok(Pooling { kernel, stride, padding, out, window })
    }
}

/// The input's windows as `[N, C, K, L]` (padding reads `pad`).
fn windows<B: Backend>(x: &Tensor<B>, p: &Pooling, pad: f64) -> Result<Tensor<B>> {
    let (n, c) = (x.dims()[0], x.dims()[1]);
    let cols = x.try_im2col(&p.window, pad)?;
    let (k, l) = (p.window.kernel_numel(), p.out.iter().product::<usize>());
    cols.try_reshape(&[n as isize, c as isize, k as isize, l as isize])
}

/// `[N, C, L]` back to `[N, C, *out]`, unbatched again if the input was.
fn to_image<B: Backend>(y: &Tensor<B>, p: &Pooling, unbatched: bool) -> Result<Tensor<B>> {
    let mut dims: Vec<isize> = y.dims()[..2].iter().map(|&d| d as isize).collect();
    dims.extend(p.out.iter().map(|&d| d as isize));
    let y = y.try_reshape(&dims)?;
    if unbatched { y.try_squeeze_dim(0) } else { Ok(y) }
}

/// The flat input index (row-major over the spatial dims) each tap of the
/// window reads, `[K, L]` (taps in the padding: -1, never the maximum).
fn tap_indices(p: &Pooling, spatial: &[usize]) -> Vec<i64> {
    let k = p.window.kernel_numel();
    let l: usize = p.out.iter().product();
    let r = spatial.len();
    let mut out = Vec::with_capacity(k * l);
    let mut kidx = vec![0usize; r];
    for kf in 0..k {
        let mut rem = kf;
        for i in (0..r).rev() {
            kidx[i] = rem % p.kernel[i];
            rem /= p.kernel[i];
        }
        for lf in 0..l {
            let mut rem = lf;
            let mut flat = 0i64;
            let mut scale = 1i64;
            let mut inside = true;
            for i in (0..r).rev() {
                let o = rem % p.out[i];
                rem /= p.out[i];
                match p.window.source(i, o, kidx[i], spatial[i]) {
                    Some(x) => flat += x as i64 * scale,
                    None => inside = false,
                }
                scale *= spatial[i] as i64;
            }
            out.push(if inside { flat } else { -1 });
        }
    }
    out
}

fn max_pool_impl<B: Backend>(
    op: &'static str,
    r: usize,
    x: &Tensor<B>,
    o: &PoolOptions,
    loc: &'static Location<'static>,
) -> Result<(Tensor<B>, Tensor<B>)> {
    let (xb, unbatched) = batched(op, x, r, loc)?;
    let spatial = xb.dims()[2..].to_vec();
    let p = Pooling::new(op, &spatial, o, loc)?;
    let cols = windows(&xb, &p, f64::NEG_INFINITY)?;
    let (values, arg) = cols.try_max_dim(2, true)?;
    let l: usize = p.out.iter().product();
    let table = Tensor::<B>::try_from_vec(tap_indices(&p, &spatial), [1, 1, p.window.kernel_numel(), l])?;
    let table = table.try_expand(&[arg.dims()[0] as isize, arg.dims()[1] as isize, -1, -1])?;
    let indices = table.try_gather(2, &arg)?;
    let values = to_image(&values.try_squeeze_dim(2)?, &p, unbatched)?;
    let indices = to_image(&indices.try_squeeze_dim(2)?, &p, unbatched)?;
    Ok((values, indices))
}

/// PyTorch's `F.max_pool1d`: the maximum of each window of an `[N, C, L]`
/// or `[C, L]` input.
#[track_caller]
pub fn try_max_pool1d<B: Backend>(x: &Tensor<B>, options: &PoolOptions) -> Result<Tensor<B>> {
    Ok(max_pool_impl("max_pool1d", 1, x, options, Location::caller())?.0)
}

/// PyTorch's `F.max_pool2d`: the maximum of each window of an `[N, C, H,
/// W]` or `[C, H, W]` input.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::ones([1, 1, 5, 5]);
/// // ceil_mode keeps the partial last window
/// assert_eq!(F::try_max_pool2d(&x, &F::PoolOptions::new(&[2]).with_ceil_mode(true)).unwrap().dims(), &[1, 1, 3, 3]);
/// assert!(F::try_max_pool2d(&x, &F::PoolOptions::new(&[2]).with_padding(&[2])).is_err());
/// ```
#[track_caller]
pub fn try_max_pool2d<B: Backend>(x: &Tensor<B>, options: &PoolOptions) -> Result<Tensor<B>> {
    Ok(max_pool_impl("max_pool2d", 2, x, options, Location::caller())?.0)
}

/// [`try_max_pool1d`] with PyTorch's `return_indices=True`: the maxima and
/// their flat indices into each input plane (int64).
#[track_caller]
pub fn try_max_pool1d_with_indices<B: Backend>(x: &Tensor<B>, options: &PoolOptions) -> Result<(Tensor<B>, Tensor<B>)> {
    max_pool_impl("max_pool1d", 1, x, options, Location::caller())
}

/// [`try_max_pool2d`] with PyTorch's `return_indices=True`: the maxima and
/// their flat indices `h * W + w` into each input plane (int64).
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 4.0, 3.0, 2.0], [1, 1, 2, 2]);
/// let (v, i) = F::try_max_pool2d_with_indices(&x, &F::PoolOptions::new(&[2])).unwrap();
/// assert_eq!((v.to_vec::<f64>(), i.to_vec::<i64>()), (vec![4.0], vec![1]));
/// ```
#[track_caller]
pub fn try_max_pool2d_with_indices<B: Backend>(x: &Tensor<B>, options: &PoolOptions) -> Result<(Tensor<B>, Tensor<B>)> {
    max_pool_impl("max_pool2d", 2, x, options, Location::caller())
}

/// PyTorch's average-pooling divisor per output position: the window's
/// size clipped to the padded input (with `count_include_pad`) or to the
/// input, unless overridden.
fn divisors(p: &Pooling, spatial: &[usize], o: &PoolOptions) -> Vec<f64> {
    let r = spatial.len();
    // per dim, per output position: (with padding, without)
    let per_dim: Vec<Vec<(usize, usize)>> = (0..r)
        .map(|i| {
            (0..p.out[i])
                .map(|j| {
                    let start = (j * p.stride[i]) as i64 - p.padding[i] as i64;
                    let end = (start + p.kernel[i] as i64).min((spatial[i] + p.padding[i]) as i64);
                    let pool = (end - start) as usize;
                    let (s, e) = (start.max(0), end.min(spatial[i] as i64));
                    (pool, (e - s).max(0) as usize)
                })
                .collect()
        })
        .collect();
    let l: usize = p.out.iter().product();
    (0..l)
        .map(|lf| {
            if let Some(d) = o.divisor_override {
                return d as f64;
            }
            let mut rem = lf;
            let mut size = 1usize;
            for i in (0..r).rev() {
                let j = rem % p.out[i];
                rem /= p.out[i];
                let (with_pad, inside) = per_dim[i][j];
                size *= if o.count_include_pad { with_pad } else { inside };
            }
            size as f64
        })
        .collect()
}

fn avg_pool_impl<B: Backend>(
    op: &'static str,
    r: usize,
    x: &Tensor<B>,
    o: &PoolOptions,
    loc: &'static Location<'static>,
) -> Result<Tensor<B>> {
    if o.dilation.iter().any(|&d| d != 1) {
        return Err(Error::InvalidShape {
            op,
            msg: format!("average pooling has no dilation (got {:?})", o.dilation),
            location: Some(loc),
        });
    }
    if o.divisor_override == Some(0) {
        return Err(Error::InvalidShape { op, msg: "divisor must be not zero".into(), location: Some(loc) });
    }
    let (xb, unbatched) = batched(op, x, r, loc)?;
    let spatial = xb.dims()[2..].to_vec();
    let p = Pooling::new(op, &spatial, o, loc)?;
    let sums = windows(&xb, &p, 0.0)?.try_sum_dims(&[2], false)?;
    let l: usize = p.out.iter().product();
    let div = Tensor::<B>::try_from_vec(divisors(&p, &spatial, o), [l])?.try_to_dtype(sums.dtype())?;
    to_image(&sums.try_div(&div)?, &p, unbatched)
}

/// PyTorch's `F.avg_pool1d`.
#[track_caller]
pub fn try_avg_pool1d<B: Backend>(x: &Tensor<B>, options: &PoolOptions) -> Result<Tensor<B>> {
    avg_pool_impl("avg_pool1d", 1, x, options, Location::caller())
}

/// PyTorch's `F.avg_pool2d` (`count_include_pad`, `ceil_mode` and
/// `divisor_override` as PyTorch).
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::ones([1, 1, 2, 2]);
/// let o = F::PoolOptions::new(&[2]).with_stride(&[1]).with_padding(&[1]);
/// // the corner window holds one input element and three padding zeros
/// assert_eq!(F::try_avg_pool2d(&x, &o).unwrap().to_vec::<f32>()[0], 0.25);
/// assert_eq!(F::try_avg_pool2d(&x, &o.with_count_include_pad(false)).unwrap().to_vec::<f32>()[0], 1.0);
/// ```
#[track_caller]
pub fn try_avg_pool2d<B: Backend>(x: &Tensor<B>, options: &PoolOptions) -> Result<Tensor<B>> {
    avg_pool_impl("avg_pool2d", 2, x, options, Location::caller())
}

/// The `[size, out]` matrix averaging PyTorch's adaptive windows:
/// `start = floor(j * size / out)`, `end = ceil((j + 1) * size / out)`
/// (its size checked by the caller).
fn adaptive_matrix(size: usize, out: usize) -> Vec<f64> {
    let mut m = vec![0.0; size * out];
    for j in 0..out {
        let (jj, s, o) = (j as u128, size as u128, out as u128);
        let (start, end) = ((jj * s / o) as usize, ((jj + 1) * s).div_ceil(o) as usize);
        for i in start..end {
            m[i * out + j] = 1.0 / (end - start) as f64;
        }
    }
    m
}

fn adaptive_avg_impl<B: Backend>(
    op: &'static str,
    x: &Tensor<B>,
    output_size: &[usize],
    loc: &'static Location<'static>,
) -> Result<Tensor<B>> {
    let r = output_size.len();
    let (xb, unbatched) = batched(op, x, r, loc)?;
    let spatial = xb.dims()[2..].to_vec();
    if spatial.contains(&0) {
        return Err(Error::InvalidShape {
            op,
            msg: format!("input {:?} must have non-zero spatial sizes (output size {output_size:?})", x.dims()),
            location: Some(loc),
        });
    }
    let mut out_dims = xb.dims()[..2].to_vec();
    out_dims.extend_from_slice(output_size);
    autograd_core::validate::output(op, &autograd_core::Shape::from(out_dims), xb.dtype()).map_err(|e| e.at(loc))?;
    for (&s, &o) in spatial.iter().zip(output_size) {
        let m = s.checked_mul(o).ok_or_else(|| Error::InvalidShape {
            op,
            msg: format!("an averaging matrix of {s} x {o} overflows"),
            location: Some(loc),
        })?;
        autograd_core::memory::check_alloc(op, m, 8).map_err(|e| e.at(loc))?;
    }
    // the average over a box is the product of averages per dim: one matrix product per dim, last dim first
    let mut y = xb;
    for i in (0..r).rev() {
        let m = Tensor::<B>::try_from_vec(adaptive_matrix(spatial[i], output_size[i]), [spatial[i], output_size[i]])?;
        let m = m.try_to_dtype(y.dtype())?;
        let d = (i + 2) as isize;
        let last = (y.rank() - 1) as isize;
        y = y.try_transpose(d, last)?.try_matmul(&m)?.try_transpose(d, last)?;
    }
    let y = y.try_contiguous()?;
    if unbatched { y.try_squeeze_dim(0) } else { Ok(y) }
}

/// PyTorch's `F.adaptive_avg_pool1d`.
#[track_caller]
pub fn try_adaptive_avg_pool1d<B: Backend>(x: &Tensor<B>, output_size: usize) -> Result<Tensor<B>> {
    adaptive_avg_impl("adaptive_avg_pool1d", x, &[output_size], Location::caller())
}

/// PyTorch's `F.adaptive_avg_pool2d`: windows of sizes that tile the
/// input, `start = floor(j * in / out)`, `end = ceil((j + 1) * in / out)`.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec((0..6).map(|i| i as f64).collect(), [1, 1, 2, 3]);
/// let y = F::try_adaptive_avg_pool2d(&x, [1, 2]).unwrap();
/// assert_eq!(y.to_vec::<f64>(), vec![2.0, 3.0]);
/// ```
#[track_caller]
pub fn try_adaptive_avg_pool2d<B: Backend>(x: &Tensor<B>, output_size: [usize; 2]) -> Result<Tensor<B>> {
    adaptive_avg_impl("adaptive_avg_pool2d", x, &output_size, Location::caller())
}
