//! Convolution layers: `Conv1d`, `Conv2d`, `ConvTranspose1d`,
//! `ConvTranspose2d`, with PyTorch's arguments, defaults, parameter names
//! and layouts (a PyTorch state dict loads strictly) and initialisation.

use crate::{Module, Parameter, init};
use autograd_core::{Backend, DType, Error, Result, ResultExt};
use autograd_tensor::Tensor;
use autograd_tensor::functional as F;
use std::panic::Location;

/// How a convolution layer fills its padding (PyTorch's `padding_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PaddingMode {
    /// Zeros (the default).
    #[default]
    Zeros,
    /// The input mirrored at the edge.
    Reflect,
    /// The edge repeated.
    Replicate,
    /// The input wrapped around.
    Circular,
}

/// A convolution over `D` spatial dims (`Conv1d` is `Conv<B, 1>`, `Conv2d`
/// is `Conv<B, 2>`): `weight` `[out_channels, in_channels / groups,
/// *kernel]` and `bias` `[out_channels]`, PyTorch's names and layouts.
///
/// ```
/// use autograd_nn::{Conv2d, Conv2dConfig, Module};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let conv: Conv2d<RefBackend> = Conv2dConfig::new(3, 8, [3, 3]).with_padding([1, 1]).init();
/// let y = conv.forward(&Tensor::ones([2, 3, 16, 16]));
/// assert_eq!(y.dims(), &[2, 8, 16, 16]);
/// let e = conv.try_forward(&Tensor::ones([2, 4, 16, 16])).unwrap_err().to_string();
/// assert!(e.contains("conv2d") && e.contains("[2, 4, 16, 16]"), "{e}");
/// ```
#[derive(Module)]
pub struct Conv<B: Backend, const D: usize> {
    /// `[out_channels, in_channels / groups, *kernel_size]`.
    pub weight: Parameter<B>,
    /// `[out_channels]`, if any.
    pub bias: Option<Parameter<B>>,
    /// Stride, padding, dilation and groups.
    #[module(skip)]
    pub options: F::ConvOptions,
    /// How the padding is filled.
    #[module(skip)]
    pub padding_mode: PaddingMode,
}

/// PyTorch's `nn.Conv1d`.
pub type Conv1d<B> = Conv<B, 1>;
/// PyTorch's `nn.Conv2d`.
pub type Conv2d<B> = Conv<B, 2>;

/// The padding of a convolution layer: sizes per dim, `"same"` or `"valid"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvPadding<const D: usize> {
    /// Zeros (or the padding mode's values) on both sides of each dim.
    Explicit([usize; D]),
    /// The output keeps the input's size (stride 1 only).
    Same,
    /// No padding.
    Valid,
}

/// Configuration of a [`Conv`] layer: channels and kernel in
/// [`ConvConfig::new`], PyTorch's defaults for the rest (stride 1, padding
/// 0, dilation 1, one group, a bias, zeros padding, float32).
///
/// ```
/// use autograd_nn::{Conv1d, Conv1dConfig, PaddingMode};
/// use autograd_core::RefBackend;
/// let c: Conv1d<RefBackend> = Conv1dConfig::new(4, 6, [3]).with_groups(2).with_padding_mode(PaddingMode::Circular).with_padding([1]).init();
/// assert_eq!(c.weight.tensor().dims(), &[6, 2, 3]);
/// assert!(Conv1dConfig::new(4, 6, [3]).with_groups(3).try_init::<RefBackend>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvConfig<const D: usize> {
    /// Channels of the input.
    pub in_channels: usize,
    /// Channels of the output.
    pub out_channels: usize,
    /// The window's size.
    pub kernel_size: [usize; D],
    /// Step between windows.
    pub stride: [usize; D],
    /// Padding of the input.
    pub padding: ConvPadding<D>,
    /// Spacing between a window's taps.
    pub dilation: [usize; D],
    /// Independent channel groups (`in_channels`: depthwise).
    pub groups: usize,
    /// Whether the layer learns a bias.
    pub bias: bool,
    /// How the padding is filled.
    pub padding_mode: PaddingMode,
    /// The parameters' dtype.
    pub dtype: DType,
}

/// Configuration of a [`Conv1d`].
pub type Conv1dConfig = ConvConfig<1>;
/// Configuration of a [`Conv2d`].
pub type Conv2dConfig = ConvConfig<2>;

impl<const D: usize> ConvConfig<D> {
    /// `in_channels -> out_channels` with a `kernel_size` window and PyTorch's defaults.
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: [usize; D]) -> Self {
        ConvConfig {
            in_channels,
            out_channels,
            kernel_size,
            stride: [1; D],
            padding: ConvPadding::Explicit([0; D]),
            dilation: [1; D],
            groups: 1,
            bias: true,
            padding_mode: PaddingMode::Zeros,
            dtype: DType::F32,
        }
    }
    /// With `stride`.
    pub fn with_stride(self, stride: [usize; D]) -> Self {
        ConvConfig { stride, ..self }
    }
    /// With padding of `padding` on both sides of each dim.
    pub fn with_padding(self, padding: [usize; D]) -> Self {
        ConvConfig { padding: ConvPadding::Explicit(padding), ..self }
    }
    /// With `"same"` or `"valid"` padding (or explicit sizes).
    pub fn with_padding_kind(self, padding: ConvPadding<D>) -> Self {
        ConvConfig { padding, ..self }
    }
    /// With `dilation`.
    pub fn with_dilation(self, dilation: [usize; D]) -> Self {
        ConvConfig { dilation, ..self }
    }
    /// With `groups`.
    pub fn with_groups(self, groups: usize) -> Self {
        ConvConfig { groups, ..self }
    }
    /// With or without the bias.
    pub fn with_bias(self, bias: bool) -> Self {
        ConvConfig { bias, ..self }
    }
    /// With `padding_mode`.
    pub fn with_padding_mode(self, padding_mode: PaddingMode) -> Self {
        ConvConfig { padding_mode, ..self }
    }
    /// With parameters of `dtype`.
    pub fn with_dtype(self, dtype: DType) -> Self {
        ConvConfig { dtype, ..self }
    }
    /// Builds the layer (panics where [`ConvConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> Conv<B, D> {
        self.try_init().or_panic()
    }
    /// Builds the layer with PyTorch's initialisation: weight and bias
    /// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`, `fan_in = in_channels / groups
    /// * prod(kernel_size)` (Kaiming uniform with `a = sqrt(5)`). `Err` for
    ///   groups that do not divide the channels, a zero size, or `"same"`
    ///   with a stride.
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<Conv<B, D>> {
        let loc = Location::caller();
        let op = if D == 1 { "Conv1d" } else { "Conv2d" };
        check_groups(op, self.in_channels, self.out_channels, self.groups, loc)?;
        if self.kernel_size.contains(&0) || self.stride.contains(&0) || self.dilation.contains(&0) {
            return Err(bad(
                op,
                format!("kernel_size {:?}, stride {:?} and dilation {:?} must be positive", self.kernel_size, self.stride, self.dilation),
                loc,
            ));
        }
        if self.padding == ConvPadding::Same && self.stride.iter().any(|&s| s != 1) {
            return Err(bad(op, "padding='same' is not supported for strided convolutions".into(), loc));
        }
        let mut shape = vec![self.out_channels, self.in_channels / self.groups];
        shape.extend_from_slice(&self.kernel_size);
        let fan_in = (self.in_channels / self.groups) * self.kernel_size.iter().product::<usize>();
        let bound = if fan_in > 0 { 1.0 / (fan_in as f64).sqrt() } else { 0.0 };
        let padding = match self.padding {
            ConvPadding::Explicit(p) => F::Padding::Explicit(p.to_vec()),
            ConvPadding::Same => F::Padding::Same,
            ConvPadding::Valid => F::Padding::Valid,
        };
        Ok(Conv {
            weight: Parameter::new(init::try_uniform::<B>(shape, -bound, bound, self.dtype)?),
            bias: if self.bias {
                Some(Parameter::new(init::try_uniform::<B>([self.out_channels], -bound, bound, self.dtype)?))
            } else {
                None
            },
            options: F::ConvOptions { stride: self.stride.to_vec(), padding, dilation: self.dilation.to_vec(), groups: self.groups },
            padding_mode: self.padding_mode,
        })
    }
}

fn bad(op: &'static str, msg: String, loc: &'static Location<'static>) -> Error {
    Error::InvalidShape { op, msg, location: Some(loc) }
}

fn check_groups(op: &'static str, inc: usize, outc: usize, groups: usize, loc: &'static Location<'static>) -> Result<()> {
    if groups == 0 {
        return Err(bad(op, "groups must be a positive integer".into(), loc));
    }
    if !inc.is_multiple_of(groups) || !outc.is_multiple_of(groups) {
        return Err(bad(op, format!("in_channels ({inc}) and out_channels ({outc}) must be divisible by groups ({groups})"), loc));
    }
    Ok(())
}

impl<B: Backend, const D: usize> Conv<B, D> {
    /// The (before, after) padding per spatial dim, as the options give it.
    fn pads(&self) -> Vec<(usize, usize)> {
        let kernel = &self.weight.tensor().dims()[2..];
        let dil = |i: usize| if self.options.dilation.len() == 1 { self.options.dilation[0] } else { self.options.dilation[i] };
        match &self.options.padding {
            F::Padding::Explicit(p) => (0..D).map(|i| if p.len() == 1 { (p[0], p[0]) } else { (p[i], p[i]) }).collect(),
            F::Padding::Valid => vec![(0, 0); D],
            F::Padding::Same => (0..D)
                .map(|i| {
                    let total = dil(i) * (kernel[i] - 1);
                    (total / 2, total - total / 2)
                })
                .collect(),
        }
    }
}

impl<B: Backend, const D: usize> Module<B> for Conv<B, D> {
    #[track_caller]
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let w = self.weight.tensor();
        let b = self.bias.as_ref().map(|b| b.tensor());
        let conv = |x: &Tensor<B>, o: &F::ConvOptions| match D {
            1 => F::try_conv1d(x, w, b, o),
            2 => F::try_conv2d(x, w, b, o),
            _ => F::try_conv(x, w, b, o),
        };
        let mode = match self.padding_mode {
            PaddingMode::Zeros => return conv(x, &self.options),
            PaddingMode::Reflect => F::PadMode::Reflect,
            PaddingMode::Replicate => F::PadMode::Replicate,
            PaddingMode::Circular => F::PadMode::Circular,
        };
        // PyTorch pads with F.pad (last dim first), then convolves without padding
        let pad: Vec<usize> = self.pads().iter().rev().flat_map(|&(lo, hi)| [lo, hi]).collect();
        let padded = F::try_pad(x, &pad, mode)?;
        conv(&padded, &F::ConvOptions { padding: F::Padding::Valid, ..self.options.clone() })
    }
}

/// A transposed convolution over `D` spatial dims (`ConvTranspose1d` is
/// `ConvTranspose<B, 1>`, `ConvTranspose2d` is `ConvTranspose<B, 2>`):
/// `weight` `[in_channels, out_channels / groups, *kernel]`, `bias`
/// `[out_channels]`, PyTorch's names and layouts.
///
/// ```
/// use autograd_nn::{ConvTranspose2d, ConvTranspose2dConfig, Module};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let up: ConvTranspose2d<RefBackend> = ConvTranspose2dConfig::new(8, 4, [2, 2]).with_stride([2, 2]).init();
/// assert_eq!(up.forward(&Tensor::ones([1, 8, 5, 5])).dims(), &[1, 4, 10, 10]);
/// ```
#[derive(Module)]
pub struct ConvTranspose<B: Backend, const D: usize> {
    /// `[in_channels, out_channels / groups, *kernel_size]`.
    pub weight: Parameter<B>,
    /// `[out_channels]`, if any.
    pub bias: Option<Parameter<B>>,
    /// Stride, padding, output padding, dilation and groups.
    #[module(skip)]
    pub options: F::ConvTransposeOptions,
}

/// PyTorch's `nn.ConvTranspose1d`.
pub type ConvTranspose1d<B> = ConvTranspose<B, 1>;
/// PyTorch's `nn.ConvTranspose2d`.
pub type ConvTranspose2d<B> = ConvTranspose<B, 2>;

/// Configuration of a [`ConvTranspose`] layer (PyTorch's defaults: stride
/// 1, padding 0, output padding 0, dilation 1, one group, a bias, float32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTransposeConfig<const D: usize> {
    /// Channels of the input.
    pub in_channels: usize,
    /// Channels of the output.
    pub out_channels: usize,
    /// The window's size.
    pub kernel_size: [usize; D],
    /// Stride of the convolution this transposes.
    pub stride: [usize; D],
    /// Padding removed from each side of the output.
    pub padding: [usize; D],
    /// Size added to one side of the output.
    pub output_padding: [usize; D],
    /// Spacing between a window's taps.
    pub dilation: [usize; D],
    /// Independent channel groups.
    pub groups: usize,
    /// Whether the layer learns a bias.
    pub bias: bool,
    /// The parameters' dtype.
    pub dtype: DType,
}

/// Configuration of a [`ConvTranspose1d`].
pub type ConvTranspose1dConfig = ConvTransposeConfig<1>;
/// Configuration of a [`ConvTranspose2d`].
pub type ConvTranspose2dConfig = ConvTransposeConfig<2>;

impl<const D: usize> ConvTransposeConfig<D> {
    /// `in_channels -> out_channels` with a `kernel_size` window and PyTorch's defaults.
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: [usize; D]) -> Self {
        ConvTransposeConfig {
            in_channels,
            out_channels,
            kernel_size,
            stride: [1; D],
            padding: [0; D],
            output_padding: [0; D],
            dilation: [1; D],
            groups: 1,
            bias: true,
            dtype: DType::F32,
        }
    }
    /// With `stride`.
    pub fn with_stride(self, stride: [usize; D]) -> Self {
        ConvTransposeConfig { stride, ..self }
    }
    /// With `padding`.
    pub fn with_padding(self, padding: [usize; D]) -> Self {
        ConvTransposeConfig { padding, ..self }
    }
    /// With `output_padding`.
    pub fn with_output_padding(self, output_padding: [usize; D]) -> Self {
        ConvTransposeConfig { output_padding, ..self }
    }
    /// With `dilation`.
    pub fn with_dilation(self, dilation: [usize; D]) -> Self {
        ConvTransposeConfig { dilation, ..self }
    }
    /// With `groups`.
    pub fn with_groups(self, groups: usize) -> Self {
        ConvTransposeConfig { groups, ..self }
    }
    /// With or without the bias.
    pub fn with_bias(self, bias: bool) -> Self {
        ConvTransposeConfig { bias, ..self }
    }
    /// With parameters of `dtype`.
    pub fn with_dtype(self, dtype: DType) -> Self {
        ConvTransposeConfig { dtype, ..self }
    }
    /// Builds the layer (panics where [`ConvTransposeConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> ConvTranspose<B, D> {
        self.try_init().or_panic()
    }
    /// Builds the layer with PyTorch's initialisation: `U(-1/sqrt(fan_in),
    /// 1/sqrt(fan_in))` with PyTorch's `fan_in` of the weight,
    /// `out_channels / groups * prod(kernel_size)`.
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<ConvTranspose<B, D>> {
        let loc = Location::caller();
        let op = if D == 1 { "ConvTranspose1d" } else { "ConvTranspose2d" };
        check_groups(op, self.in_channels, self.out_channels, self.groups, loc)?;
        if self.kernel_size.contains(&0) || self.stride.contains(&0) || self.dilation.contains(&0) {
            return Err(bad(op, "kernel_size, stride and dilation must be positive".into(), loc));
        }
        let mut shape = vec![self.in_channels, self.out_channels / self.groups];
        shape.extend_from_slice(&self.kernel_size);
        let fan_in = (self.out_channels / self.groups) * self.kernel_size.iter().product::<usize>();
        let bound = if fan_in > 0 { 1.0 / (fan_in as f64).sqrt() } else { 0.0 };
        Ok(ConvTranspose {
            weight: Parameter::new(init::try_uniform::<B>(shape, -bound, bound, self.dtype)?),
            bias: if self.bias {
                Some(Parameter::new(init::try_uniform::<B>([self.out_channels], -bound, bound, self.dtype)?))
            } else {
                None
            },
            options: F::ConvTransposeOptions {
                stride: self.stride.to_vec(),
                padding: self.padding.to_vec(),
                output_padding: self.output_padding.to_vec(),
                dilation: self.dilation.to_vec(),
                groups: self.groups,
            },
        })
    }
}

impl<B: Backend, const D: usize> Module<B> for ConvTranspose<B, D> {
    #[track_caller]
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let (w, b) = (self.weight.tensor(), self.bias.as_ref().map(|b| b.tensor()));
        if D == 1 { F::try_conv_transpose1d(x, w, b, &self.options) } else { F::try_conv_transpose2d(x, w, b, &self.options) }
    }
}
