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
/// 2`): each channel of each sample normalised over its spatial dims;
/// `affine` adds `weight` and `bias` (PyTorch's default: no). With
/// `track_running_stats` (PyTorch's default: no; [`InstanceNormConfig`])
/// training also mixes the instances' statistics, averaged over the batch,
/// into the buffers `running_mean` and `running_var` (unbiased), and
/// evaluation normalises with them; `num_batches_tracked` is kept for
/// PyTorch's state dicts, never counted (as PyTorch).
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
    /// The running statistics' update factor; `None` leaves them as they
    /// are (PyTorch's instance norm passes 0).
    pub momentum: Option<f64>,
    /// `(C,)` scale, if affine.
    pub weight: Option<Parameter<B>>,
    /// `(C,)` shift, if affine.
    pub bias: Option<Parameter<B>>,
    /// `(C,)`, if running statistics are tracked.
    #[buffer]
    pub running_mean: Option<Tensor<B>>,
    /// `(C,)`, if running statistics are tracked.
    #[buffer]
    pub running_var: Option<Tensor<B>>,
    /// A 0-d int64 zero, if running statistics are tracked (PyTorch's
    /// state dict has it; its instance norm never counts).
    #[buffer]
    pub num_batches_tracked: Option<Tensor<B>>,
    training: TrainingFlag,
}

/// PyTorch's `nn.InstanceNorm1d`.
pub type InstanceNorm1d<B> = InstanceNorm<B, 1>;
/// PyTorch's `nn.InstanceNorm2d`.
pub type InstanceNorm2d<B> = InstanceNorm<B, 2>;

crate::batchnorm::running_norm_config! {
    /// Configuration of an [`InstanceNorm`]: the channels, and PyTorch's
    /// defaults for the rest (`eps` 1e-5, momentum 0.1, no affine terms, no
    /// running statistics, float32).
    ///
    /// ```
    /// use autograd_nn::{InstanceNorm2dConfig, ModuleExt};
    /// use autograd_core::RefBackend;
    /// let n = InstanceNorm2dConfig::new(3).with_affine(true).with_track_running_stats(true).init::<RefBackend>();
    /// let names: Vec<String> = n.state_dict().into_keys().collect();
    /// assert_eq!(names, ["bias", "num_batches_tracked", "running_mean", "running_var", "weight"]);
    /// assert!(InstanceNorm2dConfig::new(3).with_momentum(Some(1.5)).try_init::<RefBackend>().is_err());
    /// ```
    InstanceNormConfig => InstanceNorm, affine: false, track: false, momentum_none: "the statistics stay as they are, as PyTorch's instance norm"
}

/// Configuration of an [`InstanceNorm1d`].
pub type InstanceNorm1dConfig = InstanceNormConfig<1>;
/// Configuration of an [`InstanceNorm2d`].
pub type InstanceNorm2dConfig = InstanceNormConfig<2>;

impl<const D: usize> InstanceNormConfig<D> {
    /// Builds the layer; `Err` for a momentum outside `[0, 1]`, an `eps`
    /// that is negative or not finite, or when the tensors cannot be allocated.
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<InstanceNorm<B, D>> {
        let c = *self;
        let check = crate::config_check::ConfigCheck::new(["InstanceNorm1dConfig", "InstanceNorm2dConfig"][D.clamp(1, 2) - 1]);
        if let Some(m) = c.momentum {
            check.probability("momentum", m)?;
        }
        check.epsilon("eps", c.eps)?;
        let (n, track) = (c.num_features, c.track_running_stats);
        let (weight, bias) = affine(n, c.affine, c.dtype)?;
        Ok(InstanceNorm {
            num_features: n,
            eps: c.eps,
            momentum: c.momentum,
            weight,
            bias,
            running_mean: if track { Some(Tensor::try_zeros_dtype([n], c.dtype)?) } else { None },
            running_var: if track { Some(Tensor::try_ones_dtype([n], c.dtype)?) } else { None },
            num_batches_tracked: if track { Some(Tensor::try_zeros_dtype([], DType::I64)?) } else { None },
            training: TrainingFlag::default(),
        })
    }
}

impl<B: Backend, const D: usize> InstanceNorm<B, D> {
    /// `num_features` channels, eps 1e-5, no affine terms, no running statistics.
    #[track_caller]
    pub fn new(num_features: usize) -> Self {
        InstanceNormConfig::<D>::new(num_features).init()
    }
    /// With `eps`, and `affine` weight and bias of `dtype` (no running statistics).
    #[track_caller]
    pub fn try_new(num_features: usize, eps: f64, affine_: bool, dtype: DType) -> Result<Self> {
        InstanceNormConfig::<D>::new(num_features).with_eps(eps).with_affine(affine_).with_dtype(dtype).try_init()
    }

    /// Mixes the instances' statistics of `x` (`(N, C, *spatial)`),
    /// averaged over the batch, into the running ones, as PyTorch (whose
    /// instance norm is a batch norm over `N C` channels whose `N` copies of
    /// the running statistics are averaged back): the variance unbiased
    /// over the spatial elements, the factor `momentum`. Also as PyTorch:
    /// `num_batches_tracked` is never counted, and a momentum of `None`
    /// (PyTorch passes 0) leaves the statistics as they are.
    fn update_running(&self, x: &Tensor<B>, mean: &Tensor<B>, var: &Tensor<B>) -> Result<()> {
        let Some(m) = self.momentum.filter(|&m| m != 0.0) else { return Ok(()) };
        autograd_tensor::no_grad(|| {
            let spatial: Vec<isize> = (2..x.rank() as isize).collect();
            let x = x.detach();
            let batch_mean = x.try_mean_dims(&spatial, false)?.try_mean_dims(&[0], false)?.try_to_dtype(mean.dtype())?;
            let batch_var = x.try_var_dims(&spatial, 1, false)?.try_mean_dims(&[0], false)?.try_to_dtype(var.dtype())?;
            mean.try_copy_(&mean.try_mul_scalar(1.0 - m)?.try_add(&batch_mean.try_mul_scalar(m)?)?)?;
            var.try_copy_(&var.try_mul_scalar(1.0 - m)?.try_add(&batch_var.try_mul_scalar(m)?)?)
        })
    }
}

impl<B: Backend, const D: usize> Module<B> for InstanceNorm<B, D> {
    /// `(N, C, *spatial)` or unbatched `(C, *spatial)` with `D` spatial dims.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let name = if D == 1 { "InstanceNorm1d" } else { "InstanceNorm2d" };
        let loc = Location::caller();
        let unbatched = x.rank() == D + 1;
        if !(x.rank() == D + 2 || unbatched) || x.dims()[x.rank() - D - 1] != self.num_features {
            return Err(Error::InvalidShape {
                op: name,
                msg: format!(
                    "expected an input (N, {0}, {D} spatial dims) or ({0}, {D} spatial dims), got {1:?}",
                    self.num_features,
                    x.dims()
                ),
                location: Some(loc),
            });
        }
        let xb = if unbatched { x.try_unsqueeze(0)? } else { x.clone() };
        let training = self.training.get(name);
        let (w, b) = (self.weight.as_deref(), self.bias.as_deref());
        let y = match (&self.running_mean, &self.running_var) {
            (Some(mean), Some(var)) if training => {
                let y = F::try_instance_norm(&xb, w, b, self.eps)?;
                self.update_running(&xb, mean, var)?;
                y
            }
            // evaluation with running statistics: a batch norm in evaluation
            (Some(mean), Some(var)) => F::try_batch_norm(&xb, Some(F::RunningStats { mean, var, momentum: 0.0 }), w, b, false, self.eps)?,
            _ => F::try_instance_norm(&xb, w, b, self.eps)?,
        };
        if unbatched { y.try_squeeze_dim(0) } else { Ok(y) }
    }
    fn set_training(&self, on: bool) {
        self.training.set(on);
    }
    fn is_training(&self) -> bool {
        self.training.peek()
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
