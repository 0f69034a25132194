//! `BatchNorm1d`, `BatchNorm2d`, `BatchNorm3d`: batch statistics in
//! training, running statistics (buffers updated outside the graph) in
//! evaluation. One type, `BatchNorm<B, D>`, whose `D` fixes the input ranks
//! it accepts (PyTorch's three classes differ only in that check).

use crate::config_check::ConfigCheck;
use crate::training::TrainingFlag;
use crate::{Module, Parameter};
use autograd_core::{Backend, DType, Error, Result};
use autograd_tensor::functional::{self as F, RunningStats};
use autograd_tensor::{Tensor, no_grad};
use std::panic::Location;

/// Batch normalisation of `(N, C)` or `(N, C, L)` inputs over every dim but
/// `C`, as `nn.BatchNorm1d`: an affine `weight` (ones) and `bias` (zeros),
/// and the buffers `running_mean` (zeros), `running_var` (ones) and
/// `num_batches_tracked` (an int64 count) that state dicts carry under
/// PyTorch's names. Training normalises with the batch's statistics and
/// mixes them into the running ones (the variance unbiased) without
/// recording anything in the graph; evaluation normalises with the running
/// statistics.
///
/// ```
/// use autograd_nn::{BatchNorm1d, ModuleExt, Module};
/// use autograd_core::RefBackend;
/// use autograd_tensor::Tensor;
/// let bn = BatchNorm1d::<RefBackend>::new(2);
/// let names: Vec<String> = bn.state_dict().into_keys().collect();
/// assert_eq!(names, ["bias", "num_batches_tracked", "running_mean", "running_var", "weight"]);
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f32, 10.0, 3.0, 30.0], [2, 2]);
/// let y = bn.forward(&x).to_vec::<f32>(); // each channel: mean 0, biased variance 1 (eps aside)
/// assert!(y.iter().zip([-1.0f32, -1.0, 1.0, 1.0]).all(|(a, b)| (a - b).abs() < 1e-4));
/// bn.forward(&x);
/// assert_eq!(bn.running_mean.as_ref().unwrap().to_vec::<f32>(), vec![0.38, 3.8]); // two updates of 0.1
/// assert_eq!(bn.num_batches_tracked.as_ref().unwrap().to_vec::<i64>(), vec![2]);
/// ```
#[derive(Module)]
pub struct BatchNorm<B: Backend, const D: usize> {
    /// `C`, the channels.
    pub num_features: usize,
    /// Added to the variance.
    pub eps: f64,
    /// The running statistics' update factor; `None` for a cumulative
    /// average over the batches seen.
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
    /// A 0-d int64 count of training batches, if running statistics are tracked.
    #[buffer]
    pub num_batches_tracked: Option<Tensor<B>>,
    training: TrainingFlag,
}

/// PyTorch's `nn.BatchNorm1d`: `(N, C)` or `(N, C, L)` inputs.
pub type BatchNorm1d<B> = BatchNorm<B, 1>;
/// PyTorch's `nn.BatchNorm2d`: `(N, C, H, W)` inputs, statistics per channel
/// over the batch and both spatial dims.
///
/// ```
/// use autograd_nn::{BatchNorm2d, Module};
/// use autograd_core::RefBackend;
/// use autograd_tensor::Tensor;
/// let bn = BatchNorm2d::<RefBackend>::new(3);
/// assert_eq!(bn.forward(&Tensor::ones([2, 3, 4, 4])).dims(), &[2, 3, 4, 4]);
/// assert!(bn.try_forward(&Tensor::ones([2, 3, 4])).is_err());
/// ```
pub type BatchNorm2d<B> = BatchNorm<B, 2>;
/// PyTorch's `nn.BatchNorm3d`: `(N, C, D, H, W)` inputs.
pub type BatchNorm3d<B> = BatchNorm<B, 3>;

/// The layer's name and the input ranks it accepts.
fn kind(d: usize) -> (&'static str, &'static str, &'static [usize]) {
    match d {
        1 => ("BatchNorm1d", "a 2D or 3D input (N, C[, L])", &[2, 3]),
        2 => ("BatchNorm2d", "a 4D input (N, C, H, W)", &[4]),
        _ => ("BatchNorm3d", "a 5D input (N, C, D, H, W)", &[5]),
    }
}

/// The configuration of a normalisation layer with running statistics
/// (batch norm and instance norm share it): the struct `$name<D>` with
/// PyTorch's arguments, `new` with PyTorch's defaults (`affine` and
/// `track_running_stats` given, `eps` 1e-5, momentum 0.1, float32), the
/// builders and `init`; each layer writes its own `try_init`.
macro_rules! running_norm_config {
    ($(#[$doc:meta])* $name:ident => $layer:ident, affine: $affine:literal, track: $track:literal, momentum_none: $none:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name<const D: usize> {
            /// `C`.
            pub num_features: usize,
            /// Added to the variance (PyTorch's default: 1e-5).
            pub eps: f64,
            #[doc = concat!("Update factor of the running statistics (PyTorch's default: 0.1; `None`: ", $none, ").")]
            pub momentum: Option<f64>,
            #[doc = concat!("A learnt weight and bias (PyTorch's default: ", stringify!($affine), ").")]
            pub affine: bool,
            #[doc = concat!("Keep running statistics for evaluation (PyTorch's default: ", stringify!($track), ").")]
            pub track_running_stats: bool,
            /// The parameters' and statistics' dtype (PyTorch's default: float32).
            pub dtype: DType,
        }

        impl<const D: usize> $name<D> {
            /// `num_features` channels with PyTorch's defaults.
            pub fn new(num_features: usize) -> Self {
                $name { num_features, eps: 1e-5, momentum: Some(0.1), affine: $affine, track_running_stats: $track, dtype: DType::F32 }
            }
            /// With this `eps`.
            pub fn with_eps(self, eps: f64) -> Self {
                $name { eps, ..self }
            }
            #[doc = concat!("With this momentum (`None`: ", $none, ").")]
            pub fn with_momentum(self, momentum: Option<f64>) -> Self {
                $name { momentum, ..self }
            }
            /// With or without the affine weight and bias.
            pub fn with_affine(self, affine: bool) -> Self {
                $name { affine, ..self }
            }
            /// With or without running statistics.
            pub fn with_track_running_stats(self, track_running_stats: bool) -> Self {
                $name { track_running_stats, ..self }
            }
            /// With parameters and statistics of `dtype`.
            pub fn with_dtype(self, dtype: DType) -> Self {
                $name { dtype, ..self }
            }
            /// Builds the layer (panics where `try_init` is an `Err`).
            #[track_caller]
            pub fn init<B: Backend>(&self) -> $layer<B, D> {
                autograd_core::ResultExt::or_panic(self.try_init())
            }
        }
    };
}
pub(crate) use running_norm_config;

running_norm_config! {
    /// Configuration of a [`BatchNorm1d`]: the channels, and PyTorch's defaults
    /// for the rest (`eps` 1e-5, momentum 0.1, affine, tracking running
    /// statistics, float32).
    ///
    /// ```
    /// use autograd_nn::BatchNorm1dConfig;
    /// use autograd_core::RefBackend;
    /// let bn = BatchNorm1dConfig::new(3).with_track_running_stats(false).with_affine(false).init::<RefBackend>();
    /// assert!(bn.running_mean.is_none() && bn.weight.is_none());
    /// ```
    BatchNormConfig => BatchNorm, affine: true, track: true, momentum_none: "cumulative average"
}

/// Configuration of a [`BatchNorm1d`].
pub type BatchNorm1dConfig = BatchNormConfig<1>;
/// Configuration of a [`BatchNorm2d`].
pub type BatchNorm2dConfig = BatchNormConfig<2>;
/// Configuration of a [`BatchNorm3d`].
pub type BatchNorm3dConfig = BatchNormConfig<3>;

impl<const D: usize> BatchNormConfig<D> {
    /// Builds the layer; `Err` for a momentum outside `[0, 1]`, an `eps`
    /// that is negative or not finite, or when the tensors cannot be allocated.
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<BatchNorm<B, D>> {
        let c = *self;
        let check = ConfigCheck::new(["BatchNorm1dConfig", "BatchNorm2dConfig", "BatchNorm3dConfig"][D.clamp(1, 3) - 1]);
        if let Some(m) = c.momentum {
            check.probability("momentum", m)?;
        }
        check.epsilon("eps", c.eps)?;
        let n = c.num_features;
        let track = c.track_running_stats;
        Ok(BatchNorm {
            num_features: n,
            eps: c.eps,
            momentum: c.momentum,
            weight: if c.affine { Some(Parameter::new(Tensor::try_ones_dtype([n], c.dtype)?)) } else { None },
            bias: if c.affine { Some(Parameter::new(Tensor::try_zeros_dtype([n], c.dtype)?)) } else { None },
            running_mean: if track { Some(Tensor::try_zeros_dtype([n], c.dtype)?) } else { None },
            running_var: if track { Some(Tensor::try_ones_dtype([n], c.dtype)?) } else { None },
            num_batches_tracked: if track { Some(Tensor::try_zeros_dtype([], DType::I64)?) } else { None },
            training: TrainingFlag::default(),
        })
    }
}

impl<B: Backend, const D: usize> BatchNorm<B, D> {
    /// `nn.BatchNorm1d(num_features)` (or 2d, 3d) with PyTorch's defaults;
    /// [`BatchNormConfig`] for the other choices.
    #[track_caller]
    pub fn new(num_features: usize) -> Self {
        BatchNormConfig::<D>::new(num_features).init()
    }
}

impl<B: Backend, const D: usize> Module<B> for BatchNorm<B, D> {
    /// `x` is `(N, C)` or `(N, C, L)` for `BatchNorm1d`, `(N, C, H, W)` for
    /// `BatchNorm2d`, `(N, C, D, H, W)` for `BatchNorm3d`; anything else is
    /// an `Err`, as is training on one value per channel.
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let (name, expected, ranks) = kind(D);
        if !ranks.contains(&x.rank()) || x.dims()[1] != self.num_features {
            return Err(Error::InvalidShape {
                op: name,
                msg: format!("expected {expected} with C = {}, got {:?}", self.num_features, x.shape()),
                location: Some(loc),
            });
        }
        let training = self.training.get(name);
        let (w, b) = (self.weight.as_deref(), self.bias.as_deref());
        let at = |e: Error| e.at(loc);
        let (Some(mean), Some(var)) = (&self.running_mean, &self.running_var) else {
            return F::try_batch_norm(x, None, w, b, training, self.eps).map_err(at);
        };
        let count = self.num_batches_tracked.as_ref().filter(|_| training);
        if let Some(count) = count {
            no_grad(|| count.try_add_(&Tensor::try_full_dtype([], 1.0, DType::I64)?))?; // int64 + 1, on the device
        }
        match (self.momentum, count) {
            (Some(momentum), _) => F::try_batch_norm(x, Some(RunningStats { mean, var, momentum }), w, b, training, self.eps).map_err(at),
            (None, None) => F::try_batch_norm(x, Some(RunningStats { mean, var, momentum: 0.0 }), w, b, training, self.eps).map_err(at),
            (None, Some(count)) => {
                // The cumulative average, PyTorch's factor 1 / n, computed on
                // the device so that the step compiles: the batch statistics
                // land in zeroed scratch (momentum 1: 0 * 0 + batch, exact),
                // then mix in with the factor as an f64 0-d tensor, which
                // rounds to the statistics' dtype as the host number did.
                let zeros = |t: &Tensor<B>| Tensor::<B>::try_zeros_dtype(t.shape().clone(), t.dtype());
                let (batch_mean, batch_var) = (zeros(mean)?, zeros(var)?);
                let stats = RunningStats { mean: &batch_mean, var: &batch_var, momentum: 1.0 };
                let y = F::try_batch_norm(x, Some(stats), w, b, training, self.eps).map_err(at)?;
                no_grad(|| {
                    let factor = count.try_to_dtype(DType::F64)?.try_reciprocal()?;
                    let keep = factor.try_rsub_scalar(1.0)?;
                    mean.try_copy_(&mean.try_mul(&keep)?.try_add(&batch_mean.try_mul(&factor)?)?)?;
                    var.try_copy_(&var.try_mul(&keep)?.try_add(&batch_var.try_mul(&factor)?)?)
                })?;
                Ok(y)
            }
        }
    }
    fn set_training(&self, on: bool) {
        self.training.set(on);
    }
    fn is_training(&self) -> bool {
        self.training.peek()
    }
}
