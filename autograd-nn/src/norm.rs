//! `GroupNorm`, `InstanceNorm1d`/`2d`, `RMSNorm` and `Dropout2d`, with
//! PyTorch's arguments, defaults and parameter names.

use crate::training::TrainingFlag;
use crate::{Module, Parameter};
use autograd_core::{Backend, DType, Error, Result};
use autograd_tensor::Tensor;
use autograd_tensor::functional as F;
use std::panic::Location;

/// PyTorch's `nn.GroupNorm(num_groups, num_channels)`: the channels split
/// into groups normalised over their channels and spatial dims, then an
/// affine `weight` (ones) and `bias` (zeros) per channel.
///
/// ```
/// use autograd_nn::{GroupNorm, Module};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let gn = GroupNorm::<RefBackend>::new(2, 4);
/// assert_eq!(gn.forward(&Tensor::randn([3, 4, 5, 5])).dims(), &[3, 4, 5, 5]);
/// assert!(GroupNorm::<RefBackend>::try_new(3, 4, 1e-5, true, autograd_core::DType::F32).is_err());
/// ```
#[derive(Module)]
pub struct GroupNorm<B: Backend> {
    /// Groups of channels.
    pub num_groups: usize,
    /// Channels.
    pub num_channels: usize,
    /// Added to the variance.
    pub eps: f64,
    /// `(C,)` scale, if affine.
    pub weight: Option<Parameter<B>>,
    /// `(C,)` shift, if affine.
    pub bias: Option<Parameter<B>>,
}

/// An optional weight and bias.
type Affine<B> = (Option<Parameter<B>>, Option<Parameter<B>>);

/// The affine weight (ones) and bias (zeros) of `c` channels, if any.
fn affine<B: Backend>(c: usize, on: bool, dtype: DType) -> Result<Affine<B>> {
    if !on {
        return Ok((None, None));
    }
    Ok((Some(Parameter::new(Tensor::try_ones_dtype([c], dtype)?)), Some(Parameter::new(Tensor::try_zeros_dtype([c], dtype)?))))
}

impl<B: Backend> GroupNorm<B> {
    /// `nn.GroupNorm(num_groups, num_channels)`: eps 1e-5, affine, float32.
    #[track_caller]
    pub fn new(num_groups: usize, num_channels: usize) -> Self {
        autograd_core::ResultExt::or_panic(Self::try_new(num_groups, num_channels, 1e-5, true, DType::F32))
    }
    /// `Err` unless `num_groups` divides `num_channels`.
    #[track_caller]
    pub fn try_new(num_groups: usize, num_channels: usize, eps: f64, affine_: bool, dtype: DType) -> Result<Self> {
        if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
            return Err(Error::InvalidShape {
                op: "GroupNorm",
                msg: format!("num_channels ({num_channels}) must be divisible by num_groups ({num_groups})"),
                location: Some(Location::caller()),
            });
        }
        let (weight, bias) = affine(num_channels, affine_, dtype)?;
        Ok(GroupNorm { num_groups, num_channels, eps, weight, bias })
    }
}

impl<B: Backend> Module<B> for GroupNorm<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_group_norm(x, self.num_groups, self.weight.as_deref(), self.bias.as_deref(), self.eps)
    }
}

/// PyTorch's `nn.InstanceNorm1d` (`D = 1`) and `nn.InstanceNorm2d` (`D =
/// 2`) without running statistics (PyTorch's default): each channel of each
/// sample normalised over its spatial dims; `affine` adds `weight` and
/// `bias` (PyTorch's default: no).
///
/// ```
/// use autograd_nn::{InstanceNorm2d, Module};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let n = InstanceNorm2d::<RefBackend>::new(3);
/// assert_eq!(n.forward(&Tensor::randn([2, 3, 4, 4])).dims(), &[2, 3, 4, 4]);
/// assert_eq!(n.forward(&Tensor::randn([3, 4, 4])).dims(), &[3, 4, 4]); // unbatched
/// ```
#[derive(Module)]
pub struct InstanceNorm<B: Backend, const D: usize> {
    /// Channels.
    pub num_features: usize,
    /// Added to the variance.
    pub eps: f64,
    /// `(C,)` scale, if affine.
    pub weight: Option<Parameter<B>>,
    /// `(C,)` shift, if affine.
    pub bias: Option<Parameter<B>>,
}

/// PyTorch's `nn.InstanceNorm1d`.
pub type InstanceNorm1d<B> = InstanceNorm<B, 1>;
/// PyTorch's `nn.InstanceNorm2d`.
pub type InstanceNorm2d<B> = InstanceNorm<B, 2>;

impl<B: Backend, const D: usize> InstanceNorm<B, D> {
    /// `num_features` channels, eps 1e-5, no affine terms.
    #[track_caller]
    pub fn new(num_features: usize) -> Self {
        autograd_core::ResultExt::or_panic(Self::try_new(num_features, 1e-5, false, DType::F32))
    }
    /// With `eps`, and `affine` weight and bias of `dtype`.
    pub fn try_new(num_features: usize, eps: f64, affine_: bool, dtype: DType) -> Result<Self> {
        let (weight, bias) = affine(num_features, affine_, dtype)?;
        Ok(InstanceNorm { num_features, eps, weight, bias })
    }
}

impl<B: Backend, const D: usize> Module<B> for InstanceNorm<B, D> {
    /// `(N, C, *spatial)` or unbatched `(C, *spatial)` with `D` spatial dims.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let name = if D == 1 { "InstanceNorm1d" } else { "InstanceNorm2d" };
        let unbatched = x.rank() == D + 1;
        if !(x.rank() == D + 2 || unbatched) || x.dims()[x.rank() - D - 1] != self.num_features {
            return Err(Error::InvalidShape {
                op: name,
                msg: format!(
                    "expected an input (N, {0}, {D} spatial dims) or ({0}, {D} spatial dims), got {1:?}",
                    self.num_features,
                    x.dims()
                ),
                location: None,
            });
        }
        let xb = if unbatched { x.try_unsqueeze(0)? } else { x.clone() };
        let y = F::try_instance_norm(&xb, self.weight.as_deref(), self.bias.as_deref(), self.eps)?;
        if unbatched { y.try_squeeze_dim(0) } else { Ok(y) }
    }
}

/// PyTorch's `nn.RMSNorm(normalized_shape)`: `x / sqrt(mean(x^2) + eps) *
/// weight` over the trailing dims, `weight` ones; `eps` `None` is the
/// dtype's machine epsilon.
///
/// ```
/// use autograd_nn::{Module, RMSNorm};
/// use autograd_tensor::Tensor;
/// use autograd_core::RefBackend;
/// let n = RMSNorm::<RefBackend>::new(&[8]);
/// assert_eq!(n.forward(&Tensor::randn([2, 5, 8])).dims(), &[2, 5, 8]);
/// ```
#[derive(Module)]
pub struct RMSNorm<B: Backend> {
    /// The normalised trailing dims.
    pub normalized_shape: Vec<usize>,
    /// Added to the mean square (`None`: machine epsilon of the dtype).
    pub eps: Option<f64>,
    /// The scale, if elementwise affine.
    pub weight: Option<Parameter<B>>,
}

impl<B: Backend> RMSNorm<B> {
    /// `nn.RMSNorm(normalized_shape)`: eps `None`, a weight, float32.
    #[track_caller]
    pub fn new(normalized_shape: &[usize]) -> Self {
        autograd_core::ResultExt::or_panic(Self::try_new(normalized_shape, None, true, DType::F32))
    }
    /// With `eps`, and the weight if `elementwise_affine`, of `dtype`.
    pub fn try_new(normalized_shape: &[usize], eps: Option<f64>, elementwise_affine: bool, dtype: DType) -> Result<Self> {
        let weight =
            if elementwise_affine { Some(Parameter::new(Tensor::try_ones_dtype(normalized_shape.to_vec(), dtype)?)) } else { None };
        Ok(RMSNorm { normalized_shape: normalized_shape.to_vec(), eps, weight })
    }
}

impl<B: Backend> Module<B> for RMSNorm<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_rms_norm(x, &self.normalized_shape, self.weight.as_deref(), self.eps)
    }
}

/// PyTorch's `nn.Dropout2d(p)`: whole channels zeroed in training.
#[derive(Module)]
pub struct Dropout2d {
    /// Drop probability of a channel.
    pub p: f64,
    training: TrainingFlag,
}

impl Dropout2d {
    /// Channel dropout with probability `p` (in training mode); `Err` outside `[0, 1]`.
    pub fn try_new(p: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::msg(format!("dropout probability has to be between 0 and 1, but got {p}")));
        }
        Ok(Dropout2d { p, training: TrainingFlag::default() })
    }
}

impl<B: Backend> Module<B> for Dropout2d {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_dropout2d(x, self.p, self.training.get("Dropout2d"))
    }
    fn set_training(&self, on: bool) {
        self.training.set(on);
    }
    fn is_training(&self) -> bool {
        self.training.peek()
    }
}
