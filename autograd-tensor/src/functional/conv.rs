//! Convolutions, lowered onto [`Tensor::try_im2col`] and one (batched)
//! matrix product per call: the input's windows become columns, the
//! weight a matrix, and the product the output. Backward is the
//! product's backward and col2im (both matrix products or their adjoints),
//! so gradients of every order and the forward mode come with them.
//!
//! ```
//! use autograd_tensor::{Tensor, functional as F};
//! use autograd_core::RefBackend;
//! // a 3x3 box filter over a 4x4 image of ones, padding 1: corner windows see 4 ones
//! let x = Tensor::<RefBackend>::ones([1, 1, 4, 4]);
//! let w = Tensor::<RefBackend>::ones([1, 1, 3, 3]);
//! let y = F::conv2d(&x, &w, None, &F::ConvOptions::default().with_padding(F::Padding::Explicit(vec![1])));
//! assert_eq!(y.dims(), &[1, 1, 4, 4]);
//! assert_eq!(y.to_vec::<f32>()[..4], [4.0, 6.0, 6.0, 4.0]);
//! ```

use crate::Tensor;
use autograd_core::window::Window;
use autograd_core::{Backend, Error, Result, Shape};
use std::panic::Location;

/// How a convolution pads its input (PyTorch's `padding` argument).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Padding {
    /// Zeros before and after each spatial dim: one size for every dim, or
    /// one per dim (PyTorch's int or tuple).
    Explicit(Vec<usize>),
    /// PyTorch's `"same"`: the output keeps the input's size (stride 1
    /// only); an odd total pads one more after than before, as PyTorch.
    Same,
    /// PyTorch's `"valid"`: no padding.
    Valid,
}

/// A convolution's options; PyTorch's defaults: stride 1, padding 0,
/// dilation 1, one group. Each size is one number for every spatial dim or
/// one per dim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvOptions {
    /// Step between windows.
    pub stride: Vec<usize>,
    /// Padding of the input.
    pub padding: Padding,
    /// Spacing between a window's taps.
    pub dilation: Vec<usize>,
    /// Input and output channels split into this many independent groups
    /// (`groups == in_channels`: depthwise).
    pub groups: usize,
}

impl Default for ConvOptions {
    fn default() -> Self {
        ConvOptions { stride: vec![1], padding: Padding::Explicit(vec![0]), dilation: vec![1], groups: 1 }
    }
}

impl ConvOptions {
    /// With `stride`.
    pub fn with_stride(self, stride: &[usize]) -> Self {
        ConvOptions { stride: stride.to_vec(), ..self }
    }
    /// With `padding`.
    pub fn with_padding(self, padding: Padding) -> Self {
        ConvOptions { padding, ..self }
    }
    /// With `dilation`.
    pub fn with_dilation(self, dilation: &[usize]) -> Self {
        ConvOptions { dilation: dilation.to_vec(), ..self }
    }
    /// With `groups`.
    pub fn with_groups(self, groups: usize) -> Self {
        ConvOptions { groups, ..self }
    }
}

/// A transposed convolution's options; PyTorch's defaults: stride 1,
/// padding 0, output padding 0, dilation 1, one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvTransposeOptions {
    /// Step between the windows of the convolution this transposes.
    pub stride: Vec<usize>,
    /// Padding removed from each side of the output (`dilation * (kernel - 1) - padding` zeros in PyTorch's words).
    pub padding: Vec<usize>,
    /// Extra size added to one side of the output (below the stride or the dilation).
    pub output_padding: Vec<usize>,
    /// Spacing between a window's taps.
    pub dilation: Vec<usize>,
    /// Channels split into this many independent groups.
    pub groups: usize,
}

impl Default for ConvTransposeOptions {
    fn default() -> Self {
        ConvTransposeOptions { stride: vec![1], padding: vec![0], output_padding: vec![0], dilation: vec![1], groups: 1 }
    }
}

impl ConvTransposeOptions {
    /// With `stride`.
    pub fn with_stride(self, stride: &[usize]) -> Self {
        ConvTransposeOptions { stride: stride.to_vec(), ..self }
    }
    /// With `padding`.
    pub fn with_padding(self, padding: &[usize]) -> Self {
        ConvTransposeOptions { padding: padding.to_vec(), ..self }
    }
    /// With `output_padding`.
    pub fn with_output_padding(self, output_padding: &[usize]) -> Self {
        ConvTransposeOptions { output_padding: output_padding.to_vec(), ..self }
    }
    /// With `dilation`.
    pub fn with_dilation(self, dilation: &[usize]) -> Self {
        ConvTransposeOptions { dilation: dilation.to_vec(), ..self }
    }
    /// With `groups`.
    pub fn with_groups(self, groups: usize) -> Self {
        ConvTransposeOptions { groups, ..self }
    }
}

/// `v` as one entry per spatial dim (a single entry applies to every dim).
pub(crate) fn per_dim(op: &'static str, what: &str, v: &[usize], rank: usize, loc: &'static Location<'static>) -> Result<Vec<usize>> {
    match v.len() {
        1 => Ok(vec![v[0]; rank]),
        n if n == rank => Ok(v.to_vec()),
        _ => Err(Error::InvalidShape {
            op,
            msg: format!("{what} {v:?} needs one entry or one per spatial dim ({rank})"),
            location: Some(loc),
        }),
    }
}

fn isize_dims(d: &[usize]) -> Vec<isize> {
    d.iter().map(|&x| x as isize).collect()
}

/// The input as a batch (a leading dim of 1 for an unbatched input) and
/// whether it was unbatched; `Err` for other ranks.
pub(crate) fn batched<B: Backend>(
    op: &'static str,
    x: &Tensor<B>,
    spatial: usize,
    loc: &'static Location<'static>,
) -> Result<(Tensor<B>, bool)> {
    if x.rank() == spatial + 2 {
        Ok((x.clone(), false))
    } else if x.rank() == spatial + 1 {
        Ok((x.try_unsqueeze(0)?, true))
    } else {
        Err(Error::InvalidShape {
            op,
            msg: format!("expected a {}-d (batched) or {}-d (unbatched) input, got shape {:?}", spatial + 2, spatial + 1, x.dims()),
            location: Some(loc),
        })
    }
}

/// Checks the channels and groups of a weight `[out, in / groups, *kernel]`
/// (or, transposed, `[in, out / groups, *kernel]`) against an input with
/// `channels`, and the bias against the output channels.
fn check_channels<B: Backend>(
    op: &'static str,
    (x_dims, channels): (&[usize], usize),
    w: &Tensor<B>,
    bias: Option<&Tensor<B>>,
    groups: usize,
    transposed: bool,
    loc: &'static Location<'static>,
) -> Result<usize> {
    let bad = |msg: String| Error::InvalidShape { op, msg, location: Some(loc) };
    let (w0, w1) = (w.dims()[0], w.dims()[1]);
    if groups == 0 {
        return Err(bad("groups must be positive".into()));
    }
    let out_channels = if transposed {
        if w0 != channels || !channels.is_multiple_of(groups) {
            return Err(bad(format!(
                "input {x_dims:?} with {channels} channels and groups={groups} does not match weight {:?} ([in_channels, out_channels / groups, *kernel])",
                w.dims()
            )));
        }
        w1 * groups
    } else {
        if w1.checked_mul(groups) != Some(channels) || !w0.is_multiple_of(groups) {
            return Err(bad(format!(
                "input {x_dims:?} with {channels} channels and groups={groups} does not match weight {:?} ([out_channels, in_channels / groups, *kernel])",
                w.dims()
            )));
        }
        w0
    };
    if let Some(b) = bias
        && b.dims() != [out_channels]
    {
        return Err(bad(format!("bias {:?} must have one entry per output channel ({out_channels})", b.dims())));
    }
    Ok(out_channels)
}

/// `y + bias` with the bias along dim 1 of a `[N, C, *spatial]` output.
fn add_bias<B: Backend>(y: Tensor<B>, bias: Option<&Tensor<B>>, op: &'static str) -> Result<Tensor<B>> {
    let Some(b) = bias else { return Ok(y) };
    let b = crate::autocast::cast(op, b)?;
    let mut dims = vec![1isize; y.rank()];
    dims[1] = -1;
    y.try_add(&b.try_reshape(&dims)?)
}

/// A convolution over the spatial dims the weight has (`weight.rank() - 2`):
/// PyTorch's `F.conv1d`, `F.conv2d`, `F.conv3d` in one. The input is
/// `[N, C_in, *spatial]` or unbatched `[C_in, *spatial]`, the weight
/// `[C_out, C_in / groups, *kernel]`, the bias `[C_out]`. `Err` naming the
/// shapes for mismatched channels or groups, and for a kernel larger than
/// the padded input.
#[track_caller]
pub fn try_conv<B: Backend>(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>, options: &ConvOptions) -> Result<Tensor<B>> {
    conv_impl("conv", x, weight, bias, options, Location::caller())
}

fn conv_impl<B: Backend>(
    op: &'static str,
    x: &Tensor<B>,
    weight: &Tensor<B>,
    bias: Option<&Tensor<B>>,
    options: &ConvOptions,
    loc: &'static Location<'static>,
) -> Result<Tensor<B>> {
    if weight.rank() < 3 {
        return Err(Error::InvalidShape {
            op,
            msg: format!("weight {:?} must be [out_channels, in_channels / groups, *kernel]", weight.dims()),
            location: Some(loc),
        });
    }
    let r = weight.rank() - 2;
    let (xb, unbatched) = batched(op, x, r, loc)?;
    let groups = options.groups;
    let out_channels = check_channels(op, (x.dims(), xb.dims()[1]), weight, bias, groups, false, loc)?;
    let x = xb;
    let kernel = weight.dims()[2..].to_vec();
    if kernel.contains(&0) {
        // before any size arithmetic: `kernel - 1` below needs a positive kernel
        return Err(Error::InvalidShape { op, msg: format!("weight {:?} has a zero kernel size", weight.dims()), location: Some(loc) });
    }
    let stride = per_dim(op, "stride", &options.stride, r, loc)?;
    let dilation = per_dim(op, "dilation", &options.dilation, r, loc)?;
    let padding: Vec<(usize, usize)> = match &options.padding {
        Padding::Explicit(p) => per_dim(op, "padding", p, r, loc)?.into_iter().map(|p| (p, p)).collect(),
        Padding::Valid => vec![(0, 0); r],
        Padding::Same => {
            if stride.iter().any(|&s| s != 1) {
                return Err(Error::InvalidShape {
                    op,
                    msg: format!("padding='same' is not supported for strided convolutions (stride {stride:?})"),
                    location: Some(loc),
                });
            }
            kernel
                .iter()
                .zip(&dilation)
                .map(|(&k, &d)| {
                    let total = d.saturating_mul(k - 1);
                    (total / 2, total - total / 2)
                })
                .collect()
        }
    };
    let window = Window::new(op, &kernel, &stride, &padding, &dilation).map_err(|e| e.at(loc))?;
    let sizes = autograd_core::validate::unfold(op, x.layout(), &window, x.dtype()).map_err(|e| e.at(loc))?;
    let x = crate::autocast::cast(op, &x)?;
    let w = crate::autocast::cast(op, weight)?;
    let lowered = Lowered {
        window,
        groups,
        out_channels,
        channels: sizes.channels,
        positions: sizes.positions.to_vec(),
        spatial: sizes.spatial.to_vec(),
    };
    let y = lowered.convolve(&x, &w)?;
    let y = add_bias(y, bias, op)?;
    if unbatched { y.try_squeeze_dim(0) } else { Ok(y) }
}

/// Column bytes per chunk of images: a convolution lowers a few images at
/// a time, so its im2col columns stay a few MiB whatever the batch (75 MiB
/// for a ResNet block's batch of 32 at once: allocated, faulted in and
/// zeroed on every call, and kept for backward).
const COLUMN_CHUNK_BYTES: usize = 4 << 20;

/// A convolution lowered onto im2col and matrix products, a chunk of
/// images at a time: one node (`ConvolutionBackward0`, as PyTorch's)
/// that saves only its input and weight and recomputes each chunk's
/// columns in backward. Forward and backward are written with
/// differentiable ops (im2col, products, col2im), so every order of
/// derivative and the forward mode follow.
struct Lowered {
    window: Window,
    groups: usize,
    out_channels: usize,
    channels: usize,
    positions: Vec<usize>,
    spatial: Vec<usize>,
}

impl Lowered {
    /// Images per chunk: as many as keep the columns under [`COLUMN_CHUNK_BYTES`], at least one.
    fn chunk(&self, x: &Tensor<impl Backend>) -> usize {
        let per_image = self.channels.saturating_mul(self.window.kernel_numel()).saturating_mul(self.positions.iter().product());
        let per_image = per_image.saturating_mul(x.dtype().size_in_bytes()).max(1);
        (COLUMN_CHUNK_BYTES / per_image).clamp(1, x.dims()[0].max(1))
    }

    /// The chunks of the batch `0..n`: `(start, length)`.
    fn chunks(&self, x: &Tensor<impl Backend>) -> Vec<(usize, usize)> {
        let (n, c) = (x.dims()[0], self.chunk(x));
        (0..n.div_ceil(c)).map(|i| (i * c, c.min(n - i * c))).collect()
    }

    /// `[groups]` with several groups, `[]` with one: the batch dims of the
    /// group products (one group is a plain product, no broadcast batch).
    fn group_dims(&self, lead: &[usize], rows: usize, cols: usize) -> Vec<isize> {
        let groups = (self.groups > 1).then_some(self.groups);
        isize_dims(&lead.iter().copied().chain(groups).chain([rows, cols]).collect::<Vec<_>>())
    }

    /// `C_in / groups * K`.
    fn per_group(&self) -> usize {
        self.channels / self.groups * self.window.kernel_numel()
    }

    /// The weight as `[(groups,) C_out / groups, C_in / groups * K]`.
    fn weight_matrix<B: Backend>(&self, w: &Tensor<B>) -> Result<Tensor<B>> {
        w.try_reshape(&self.group_dims(&[], self.out_channels / self.groups, self.per_group()))
    }

    /// The columns of images `x` (`[c, ...]`) as `[c, (groups,) C_in / groups * K, L]`.
    fn columns<B: Backend>(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let cols = x.try_im2col(&self.window, 0.0)?;
        let l: usize = self.positions.iter().product();
        cols.try_reshape(&self.group_dims(&[x.dims()[0]], self.per_group(), l))
    }

    /// `[c, (groups,) C_out / groups, L]` gradients or outputs as the image layout `[c, C_out, *positions]`.
    fn as_image<B: Backend>(&self, y: Tensor<B>) -> Result<Tensor<B>> {
        let mut dims = vec![y.dims()[0], self.out_channels];
        dims.extend_from_slice(&self.positions);
        y.try_reshape(&isize_dims(&dims))
    }

    fn convolve<B: Backend>(self, x: &Tensor<B>, w: &Tensor<B>) -> Result<Tensor<B>> {
        let me = std::sync::Arc::new(self);
        let fwd = me.clone();
        // a batch lowered in one chunk keeps its columns (a few MiB at most)
        // for a backward without create_graph, instead of recomputing them
        // (saved through the saved-tensor hooks: a checkpointed region drops them)
        let kept: std::sync::Arc<std::sync::OnceLock<crate::node::SavedTensor<B>>> = Default::default();
        let kept2 = kept.clone();
        crate::recording::composite(
            "ConvolutionBackward0",
            &[x, w],
            || {
                let wm = fwd.weight_matrix(w)?;
                let chunks = fwd.chunks(x);
                let mut ys = Vec::with_capacity(chunks.len());
                for &(start, len) in &chunks {
                    let cols = fwd.columns(&x.try_narrow(0, start, len)?)?;
                    ys.push(fwd.as_image(wm.try_matmul(&cols)?)?);
                    if chunks.len() == 1 && crate::ops::program::plain(&[x, w]) {
                        let _ = kept.set(crate::node::SavedTensor::new(&cols));
                    }
                }
                if ys.is_empty() { Tensor::try_zeros_dtype(fwd.image_shape(0), x.dtype()) } else { Tensor::try_cat(&ys, 0) }
            },
            move |xs, need, g| {
                let kept =
                    kept2.get().filter(|_| !crate::grad_mode::is_grad_enabled()).map(|c| c.get("ConvolutionBackward0")).transpose()?;
                me.backward(xs, need, g, kept.as_ref())
            },
        )
    }

    /// `[n, C_out, *positions]`.
    fn image_shape(&self, n: usize) -> Shape {
        Shape::new([n, self.out_channels].into_iter().chain(self.positions.iter().copied()).collect())
    }

    /// Per chunk: the columns recomputed, `dW += g cols^T` (summed over the
    /// chunk's images), `dx = col2im(W^T g)`.
    /// `kept`: the columns of a batch lowered in one chunk, if the forward kept them.
    fn backward<B: Backend>(
        &self,
        xs: &[Tensor<B>],
        need: &[bool],
        g: &Tensor<B>,
        kept: Option<&Tensor<B>>,
    ) -> Result<Vec<Option<Tensor<B>>>> {
        let (x, w) = (&xs[0], &xs[1]);
        let wm = self.weight_matrix(w)?;
        let l: usize = self.positions.iter().product();
        let (mut dw, mut dx) = (None::<Tensor<B>>, Vec::new());
        for (start, len) in self.chunks(x) {
            let gc = g.try_narrow(0, start, len)?.try_reshape(&self.group_dims(&[len], self.out_channels / self.groups, l))?;
            if need[1] {
                let cols = match kept {
                    Some(cols) => cols.clone(),
                    None => self.columns(&x.try_narrow(0, start, len)?)?,
                };
                let part = gc.try_matmul(&cols.try_transpose(-1, -2)?)?.try_sum_dims(&[0], false)?;
                dw = Some(match dw {
                    None => part,
                    Some(acc) => acc.try_add(&part)?,
                });
            }
            if need[0] {
                let dcols = wm.try_transpose(-1, -2)?.try_matmul(&gc)?;
                let dcols = dcols.try_reshape(&isize_dims(&[len, self.channels * self.window.kernel_numel(), l]))?;
                dx.push(dcols.try_col2im(&self.window, &self.spatial)?);
            }
        }
        let dx = if !need[0] {
            None
        } else if dx.is_empty() {
            Some(x.zeros_like())
        } else {
            Some(Tensor::try_cat(&dx, 0)?)
        };
        let dw = match (need[1], dw) {
            (false, _) => None,
            (true, Some(d)) => Some(d.try_reshape_to(w.shape())?),
            (true, None) => Some(w.zeros_like()),
        };
        Ok(vec![dx, dw])
    }
}

/// PyTorch's `F.conv1d`: [`try_conv`] over one spatial dim (`Err` for a
/// weight of another rank).
#[track_caller]
pub fn try_conv1d<B: Backend>(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>, options: &ConvOptions) -> Result<Tensor<B>> {
    let loc = Location::caller();
    check_weight_rank("conv1d", weight, 1, loc)?;
    conv_impl("conv1d", x, weight, bias, options, loc)
}

/// PyTorch's `F.conv2d`: [`try_conv`] over two spatial dims (`Err` for a
/// weight of another rank).
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::ones([2, 4, 8, 8]);
/// let w = Tensor::<RefBackend>::ones([6, 2, 3, 3]);
/// let y = F::try_conv2d(&x, &w, None, &F::ConvOptions::default().with_groups(2).with_stride(&[2])).unwrap();
/// assert_eq!(y.dims(), &[2, 6, 3, 3]);
/// let e = F::try_conv2d(&x, &w, None, &F::ConvOptions::default()).unwrap_err().to_string();
/// assert!(e.contains("conv2d") && e.contains("[6, 2, 3, 3]"), "{e}");
/// ```
#[track_caller]
pub fn try_conv2d<B: Backend>(x: &Tensor<B>, weight: &Tensor<B>, bias: Option<&Tensor<B>>, options: &ConvOptions) -> Result<Tensor<B>> {
    let loc = Location::caller();
    check_weight_rank("conv2d", weight, 2, loc)?;
    conv_impl("conv2d", x, weight, bias, options, loc)
}

fn check_weight_rank<B: Backend>(op: &'static str, weight: &Tensor<B>, spatial: usize, loc: &'static Location<'static>) -> Result<()> {
    if weight.rank() == spatial + 2 {
        return Ok(());
    }
    Err(Error::InvalidShape { op, msg: format!("expected a {}-d weight, got shape {:?}", spatial + 2, weight.dims()), location: Some(loc) })
}

/// A transposed convolution (the gradient of a convolution with respect
/// to its input; PyTorch's `F.conv_transpose1d`/`2d`/`3d` in one): input
/// `[N, C_in, *spatial]` or unbatched, weight `[C_in, C_out / groups,
/// *kernel]`, bias `[C_out]`. The output's size per dim is
/// `(in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1`.
#[track_caller]
pub fn try_conv_transpose<B: Backend>(
    x: &Tensor<B>,
    weight: &Tensor<B>,
    bias: Option<&Tensor<B>>,
    options: &ConvTransposeOptions,
) -> Result<Tensor<B>> {
    conv_transpose_impl("conv_transpose", x, weight, bias, options, Location::caller())
}

fn conv_transpose_impl<B: Backend>(
    op: &'static str,
    x: &Tensor<B>,
    weight: &Tensor<B>,
    bias: Option<&Tensor<B>>,
    options: &ConvTransposeOptions,
    loc: &'static Location<'static>,
) -> Result<Tensor<B>> {
    if weight.rank() < 3 {
        return Err(Error::InvalidShape {
            op,
            msg: format!("weight {:?} must be [in_channels, out_channels / groups, *kernel]", weight.dims()),
            location: Some(loc),
        });
    }
    let r = weight.rank() - 2;
    let (xb, unbatched) = batched(op, x, r, loc)?;
    let groups = options.groups;
    let out_channels = check_channels(op, (x.dims(), xb.dims()[1]), weight, bias, groups, true, loc)?;
    let x = xb;
    let kernel = weight.dims()[2..].to_vec();
    if kernel.contains(&0) {
        // before any size arithmetic: `kernel - 1` below needs a positive kernel
        return Err(Error::InvalidShape { op, msg: format!("weight {:?} has a zero kernel size", weight.dims()), location: Some(loc) });
    }
    let stride = per_dim(op, "stride", &options.stride, r, loc)?;
    let padding = per_dim(op, "padding", &options.padding, r, loc)?;
    let output_padding = per_dim(op, "output_padding", &options.output_padding, r, loc)?;
    let dilation = per_dim(op, "dilation", &options.dilation, r, loc)?;
    let bad = |msg: String| Error::InvalidShape { op, msg, location: Some(loc) };
    let mut spatial = Vec::with_capacity(r);
    for i in 0..r {
        if output_padding[i] >= stride[i].max(dilation[i]) {
            return Err(bad(format!(
                "output_padding {output_padding:?} must be smaller than either stride {stride:?} or dilation {dilation:?}"
            )));
        }
        // (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
        let size = (x.dims()[i + 2].saturating_sub(1) as u128) * stride[i] as u128
            + dilation[i] as u128 * (kernel[i] as u128 - 1)
            + output_padding[i] as u128
            + 1;
        let size = size.checked_sub(2 * padding[i] as u128).filter(|&s| s > 0 && x.dims()[i + 2] > 0);
        match size.and_then(|s| usize::try_from(s).ok()) {
            Some(s) => spatial.push(s),
            None => {
                return Err(bad(format!(
                    "input {:?} with kernel {kernel:?}, stride {stride:?}, padding {padding:?} and dilation {dilation:?} gives no output",
                    x.dims()
                )));
            }
        }
    }
    let pads: Vec<(usize, usize)> = padding.iter().map(|&p| (p, p)).collect();
    let window = Window::new(op, &kernel, &stride, &pads, &dilation).map_err(|e| e.at(loc))?;
    let x = crate::autocast::cast(op, &x)?;
    let w = crate::autocast::cast(op, weight)?;
    let (n, c_in) = (x.dims()[0], x.dims()[1]);
    let k = window.kernel_numel();
    let l: usize = x.dims()[2..].iter().product();
    // [g, C_out/g K, C_in/g] x [N, g, C_in/g, L]: the columns col2im sums
    let xm = x.try_reshape(&isize_dims(&[n, groups, c_in / groups, l]))?;
    let wm = w.try_reshape(&isize_dims(&[groups, c_in / groups, out_channels / groups * k]))?.try_transpose(1, 2)?;
    let cols = wm.try_matmul(&xm)?.try_reshape(&isize_dims(&[n, out_channels * k, l]))?;
    let y = cols.try_col2im(&window, &spatial).map_err(|e| e.at(loc))?;
    let y = add_bias(y, bias, op)?;
    if unbatched { y.try_squeeze_dim(0) } else { Ok(y) }
}

/// PyTorch's `F.conv_transpose1d`: [`try_conv_transpose`] over one spatial dim.
#[track_caller]
pub fn try_conv_transpose1d<B: Backend>(
    x: &Tensor<B>,
    weight: &Tensor<B>,
    bias: Option<&Tensor<B>>,
    options: &ConvTransposeOptions,
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    check_weight_rank("conv_transpose1d", weight, 1, loc)?;
    conv_transpose_impl("conv_transpose1d", x, weight, bias, options, loc)
}

/// PyTorch's `F.conv_transpose2d`: [`try_conv_transpose`] over two spatial dims.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::ones([1, 4, 5, 5]);
/// let w = Tensor::<RefBackend>::ones([4, 3, 3, 3]);
/// let o = F::ConvTransposeOptions::default().with_stride(&[2]).with_padding(&[1]).with_output_padding(&[1]);
/// assert_eq!(F::try_conv_transpose2d(&x, &w, None, &o).unwrap().dims(), &[1, 3, 10, 10]);
/// ```
#[track_caller]
pub fn try_conv_transpose2d<B: Backend>(
    x: &Tensor<B>,
    weight: &Tensor<B>,
    bias: Option<&Tensor<B>>,
    options: &ConvTransposeOptions,
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    check_weight_rank("conv_transpose2d", weight, 2, loc)?;
    conv_transpose_impl("conv_transpose2d", x, weight, bias, options, loc)
}

/// PyTorch's `F.unfold` (im2col) of a 4-d `[N, C, H, W]` input: `[N, C *
/// kh * kw, L]` columns. The sizes are one number or one per spatial dim.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::ones([2, 3, 5, 5]);
/// assert_eq!(F::try_unfold(&x, &[2], &[1], &[0], &[1]).unwrap().dims(), &[2, 12, 16]);
/// ```
#[track_caller]
pub fn try_unfold<B: Backend>(
    x: &Tensor<B>,
    kernel_size: &[usize],
    dilation: &[usize],
    padding: &[usize],
    stride: &[usize],
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let r = x.rank().saturating_sub(2).max(1);
    let kernel = per_dim("unfold", "kernel_size", kernel_size, r, loc)?;
    let pads: Vec<(usize, usize)> = per_dim("unfold", "padding", padding, r, loc)?.into_iter().map(|p| (p, p)).collect();
    let window = Window::new(
        "unfold",
        &kernel,
        &per_dim("unfold", "stride", stride, r, loc)?,
        &pads,
        &per_dim("unfold", "dilation", dilation, r, loc)?,
    )
    .map_err(|e| e.at(loc))?;
    x.try_im2col(&window, 0.0).map_err(|e| e.at(loc))
}

/// PyTorch's `F.fold` (col2im): `[N, C * kh * kw, L]` columns summed into
/// an `[N, C, *output_size]` image.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let cols = Tensor::<RefBackend>::ones([1, 4, 4]);
/// let y = F::try_fold(&cols, &[3, 3], &[2, 2], &[1], &[0], &[1]).unwrap();
/// assert_eq!(y.to_vec::<f32>(), vec![1.0, 2.0, 1.0, 2.0, 4.0, 2.0, 1.0, 2.0, 1.0]);
/// ```
#[track_caller]
pub fn try_fold<B: Backend>(
    x: &Tensor<B>,
    output_size: &[usize],
    kernel_size: &[usize],
    dilation: &[usize],
    padding: &[usize],
    stride: &[usize],
) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let r = output_size.len().max(1);
    let kernel = per_dim("fold", "kernel_size", kernel_size, r, loc)?;
    let pads: Vec<(usize, usize)> = per_dim("fold", "padding", padding, r, loc)?.into_iter().map(|p| (p, p)).collect();
    let window =
        Window::new("fold", &kernel, &per_dim("fold", "stride", stride, r, loc)?, &pads, &per_dim("fold", "dilation", dilation, r, loc)?)
            .map_err(|e| e.at(loc))?;
    x.try_col2im(&window, output_size).map_err(|e| e.at(loc))
}
