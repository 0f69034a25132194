//! Pooling and reshaping layers: `MaxPool1d/2d`, `AvgPool1d/2d`,
//! `AdaptiveAvgPool1d/2d`, `Unflatten` (PyTorch's arguments and defaults;
//! no parameters).

use crate::Module;
use autograd_core::{Backend, Result};
use autograd_tensor::Tensor;
use autograd_tensor::functional as F;

/// Max pooling over `D` spatial dims (`MaxPool1d` is `MaxPool<1>`,
/// `MaxPool2d` is `MaxPool<2>`): the maximum of each window.
///
/// ```
/// use autograd_nn::{MaxPool2d, Module};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let pool = MaxPool2d::new(&[2]);
/// assert_eq!(Module::<RefBackend>::forward(&pool, &Tensor::ones([1, 3, 8, 8])).dims(), &[1, 3, 4, 4]);
/// ```
#[derive(Clone, Debug, Module)]
pub struct MaxPool<const D: usize> {
    /// Kernel, stride, padding, dilation and ceil mode.
    #[module(skip)]
    pub options: F::PoolOptions,
}

/// PyTorch's `nn.MaxPool1d`.
pub type MaxPool1d = MaxPool<1>;
/// PyTorch's `nn.MaxPool2d`.
pub type MaxPool2d = MaxPool<2>;

impl<const D: usize> MaxPool<D> {
    /// A window of `kernel_size` (one size for every dim, or one per dim), stride = kernel size.
    pub fn new(kernel_size: &[usize]) -> Self {
        MaxPool { options: F::PoolOptions::new(kernel_size) }
    }
    /// With `options` (stride, padding, dilation, ceil mode).
    pub fn with_options(options: F::PoolOptions) -> Self {
        MaxPool { options }
    }
    /// The maxima and their flat indices into each input plane (PyTorch's `return_indices=True`).
    pub fn try_forward_with_indices<B: Backend>(&self, x: &Tensor<B>) -> Result<(Tensor<B>, Tensor<B>)> {
        if D == 1 { F::try_max_pool1d_with_indices(x, &self.options) } else { F::try_max_pool2d_with_indices(x, &self.options) }
    }
}

impl<B: Backend, const D: usize> Module<B> for MaxPool<D> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        if D == 1 { F::try_max_pool1d(x, &self.options) } else { F::try_max_pool2d(x, &self.options) }
    }
}

/// Average pooling over `D` spatial dims (`AvgPool1d`, `AvgPool2d`):
/// PyTorch's `count_include_pad`, `ceil_mode` and `divisor_override`.
///
/// ```
/// use autograd_nn::{AvgPool2d, Module};
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let pool = AvgPool2d::with_options(F::PoolOptions::new(&[3]).with_stride(&[2]).with_padding(&[1]));
/// assert_eq!(Module::<RefBackend>::forward(&pool, &Tensor::ones([1, 1, 7, 7])).dims(), &[1, 1, 4, 4]);
/// ```
#[derive(Clone, Debug, Module)]
pub struct AvgPool<const D: usize> {
    /// Kernel, stride, padding, ceil mode, divisor.
    #[module(skip)]
    pub options: F::PoolOptions,
}

/// PyTorch's `nn.AvgPool1d`.
pub type AvgPool1d = AvgPool<1>;
/// PyTorch's `nn.AvgPool2d`.
pub type AvgPool2d = AvgPool<2>;

impl<const D: usize> AvgPool<D> {
    /// A window of `kernel_size`, stride = kernel size, PyTorch's defaults.
    pub fn new(kernel_size: &[usize]) -> Self {
        AvgPool { options: F::PoolOptions::new(kernel_size) }
    }
    /// With `options`.
    pub fn with_options(options: F::PoolOptions) -> Self {
        AvgPool { options }
    }
}

impl<B: Backend, const D: usize> Module<B> for AvgPool<D> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        if D == 1 { F::try_avg_pool1d(x, &self.options) } else { F::try_avg_pool2d(x, &self.options) }
    }
}

/// PyTorch's `nn.AdaptiveAvgPool1d`: averages over windows that tile the input into `output_size` positions.
#[derive(Clone, Copy, Debug, Module)]
pub struct AdaptiveAvgPool1d {
    /// Output length.
    pub output_size: usize,
}

impl<B: Backend> Module<B> for AdaptiveAvgPool1d {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_adaptive_avg_pool1d(x, self.output_size)
    }
}

/// PyTorch's `nn.AdaptiveAvgPool2d`: averages over windows that tile the
/// input into `output_size` positions (`[1, 1]`: global average pooling).
///
/// ```
/// use autograd_nn::{AdaptiveAvgPool2d, Module};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let gap = AdaptiveAvgPool2d { output_size: [1, 1] };
/// let y = Module::<RefBackend>::forward(&gap, &Tensor::ones([2, 5, 7, 3]));
/// assert_eq!(y.dims(), &[2, 5, 1, 1]);
/// ```
#[derive(Clone, Copy, Debug, Module)]
pub struct AdaptiveAvgPool2d {
    /// Output height and width.
    #[module(skip)]
    pub output_size: [usize; 2],
}

impl<B: Backend> Module<B> for AdaptiveAvgPool2d {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_adaptive_avg_pool2d(x, self.output_size)
    }
}

/// PyTorch's `nn.Unflatten`: dim `dim` split into `sizes` (one may be -1).
///
/// ```
/// use autograd_nn::{Module, Unflatten};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let u = Unflatten { dim: 1, sizes: vec![2, -1] };
/// assert_eq!(Module::<RefBackend>::forward(&u, &Tensor::ones([3, 8])).dims(), &[3, 2, 4]);
/// ```
#[derive(Clone, Debug, Module)]
pub struct Unflatten {
    /// The dim split.
    pub dim: isize,
    /// Its new sizes.
    #[module(skip)]
    pub sizes: Vec<isize>,
}

impl<B: Backend> Module<B> for Unflatten {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let d = autograd_core::normalize_dim(self.dim, x.rank(), "unflatten")?;
        let mut shape: Vec<isize> = x.dims()[..d].iter().map(|&s| s as isize).collect();
        shape.extend_from_slice(&self.sizes);
        shape.extend(x.dims()[d + 1..].iter().map(|&s| s as isize));
        x.try_reshape(&shape)
    }
}

/// PyTorch's `nn.AdaptiveMaxPool2d`: the maximum over windows that tile the
/// input into `output_size` positions.
///
/// ```
/// use autograd_nn::{AdaptiveMaxPool2d, Module};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let p = AdaptiveMaxPool2d { output_size: [2, 3] };
/// assert_eq!(Module::<RefBackend>::forward(&p, &Tensor::ones([1, 4, 7, 5])).dims(), &[1, 4, 2, 3]);
/// ```
#[derive(Clone, Copy, Debug, Module)]
pub struct AdaptiveMaxPool2d {
    /// Output height and width.
    #[module(skip)]
    pub output_size: [usize; 2],
}

impl<B: Backend> Module<B> for AdaptiveMaxPool2d {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_adaptive_max_pool2d(x, self.output_size)
    }
}

/// PyTorch's `nn.Upsample`: [`F::try_interpolate`] with a size or scale
/// factor, nearest or linear (bilinear for images), `align_corners`.
///
/// ```
/// use autograd_nn::{Module, Upsample};
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let up = Upsample { size: F::InterpolateSize::ScaleFactor(vec![2.0]), mode: F::InterpolateMode::Linear, align_corners: false };
/// assert_eq!(Module::<RefBackend>::forward(&up, &Tensor::ones([1, 3, 4, 5])).dims(), &[1, 3, 8, 10]);
/// ```
#[derive(Clone, Debug, Module)]
pub struct Upsample {
    /// The output size or scale factors.
    #[module(skip)]
    pub size: F::InterpolateSize,
    /// Nearest or linear.
    #[module(skip)]
    pub mode: F::InterpolateMode,
    /// PyTorch's `align_corners` (linear only).
    pub align_corners: bool,
}

impl<B: Backend> Module<B> for Upsample {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_interpolate(x, &self.size, self.mode, self.align_corners)
    }
}
