//! Layers: Linear, Sequential, activations, Dropout, LayerNorm, Embedding, Flatten, Identity.

use crate::config_check::ConfigCheck;
use crate::training::TrainingFlag;
use crate::{Module, ModuleFields, Parameter, init};
use autograd_core::ResultExt;
use autograd_core::{Backend, DType, Error, Result};
use autograd_tensor::Tensor;
use autograd_tensor::functional as F;
use std::panic::Location;

/// `y = x W^T + b` with `W` of shape `(out_features, in_features)` like PyTorch,
/// initialised as PyTorch does: `U(-1/sqrt(in), 1/sqrt(in))` for both.
#[derive(Module)]
pub struct Linear<B: Backend> {
    /// `(out_features, in_features)`.
    pub weight: Parameter<B>,
    /// `(out_features,)`, if any.
    pub bias: Option<Parameter<B>>,
}

/// Configuration of a [`Linear`] layer, in burn's `XConfig` style: the
/// required sizes in [`LinearConfig::new`], PyTorch's defaults for the rest
/// (a bias, float32), `with_*` to change them, `init` to build.
///
/// ```
/// use autograd_nn::{Linear, LinearConfig};
/// use autograd_core::{RefBackend, DType};
/// let l: Linear<RefBackend> = LinearConfig::new(3, 2).with_bias(false).with_dtype(DType::F64).init();
/// assert!(l.bias.is_none());
/// assert_eq!(l.weight.tensor().dims(), &[2, 3]);
/// assert_eq!(l.weight.tensor().dtype(), DType::F64);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearConfig {
    /// Size of each input sample.
    pub in_features: usize,
    /// Size of each output sample.
    pub out_features: usize,
    /// Whether the layer learns an additive bias (PyTorch's default: yes).
    pub bias: bool,
    /// The parameters' dtype (PyTorch's default: float32).
    pub dtype: DType,
}

impl LinearConfig {
    /// `in_features -> out_features` with a bias, in float32.
    pub fn new(in_features: usize, out_features: usize) -> Self {
        LinearConfig { in_features, out_features, bias: true, dtype: DType::F32 }
    }
    /// With or without the bias.
    pub fn with_bias(self, bias: bool) -> Self {
        LinearConfig { bias, ..self }
    }
    /// With parameters of `dtype`.
    pub fn with_dtype(self, dtype: DType) -> Self {
        LinearConfig { dtype, ..self }
    }
    /// Builds the layer (panics where [`LinearConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> Linear<B> {
        self.try_init().or_panic()
    }
    /// Builds the layer with PyTorch's initialisation from the global
    /// generator: `U(-1/sqrt(in), 1/sqrt(in))` for weight and bias. `Err`
    /// when the weights cannot be allocated. With `in_features = 0` the bias
    /// is zeros, as in PyTorch (the bound `1/sqrt(fan_in)` is taken as 0).
    ///
    /// ```
    /// use autograd_nn::LinearConfig;
    /// use autograd_core::RefBackend;
    /// let l = LinearConfig::new(0, 3).try_init::<RefBackend>().unwrap();
    /// assert_eq!(l.bias.unwrap().tensor().to_vec::<f32>(), vec![0.0; 3]);
    /// assert!(LinearConfig::new(1 << 31, 1 << 31).try_init::<RefBackend>().is_err());
    /// ```
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<Linear<B>> {
        let LinearConfig { in_features, out_features, bias, dtype } = *self;
        let bound = if in_features > 0 { 1.0 / (in_features as f64).sqrt() } else { 0.0 };
        Ok(Linear {
            weight: Parameter::new(init::try_uniform::<B>([out_features, in_features], -bound, bound, dtype)?),
            bias: if bias { Some(Parameter::new(init::try_uniform::<B>([out_features], -bound, bound, dtype)?)) } else { None },
        })
    }
}

impl<B: Backend> Linear<B> {
    /// `nn.Linear(in_features, out_features)`: a bias, float32, PyTorch's
    /// initialisation; [`LinearConfig`] for the other choices.
    #[track_caller]
    pub fn new(in_features: usize, out_features: usize) -> Self {
        LinearConfig::new(in_features, out_features).init()
    }
}

impl<B: Backend> Module<B> for Linear<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_linear(x, self.weight.tensor(), self.bias.as_ref().map(|b| b.tensor()))
    }
}

/// Modules applied in order; children are named by position (`0`, `1`, ...)
/// including parameter-free ones, so names match PyTorch's `nn.Sequential`.
pub struct Sequential<B: Backend> {
    layers: Vec<Box<dyn Module<B>>>,
    training: TrainingFlag,
}

impl<B: Backend> Default for Sequential<B> {
    /// An empty sequence in training mode, like [`Sequential::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl<B: Backend> Sequential<B> {
    /// An empty sequence (in training mode).
    pub fn new() -> Self {
        Sequential { layers: Vec::new(), training: TrainingFlag::default() }
    }
    /// Appends a module (builder style).
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, m: impl Module<B> + 'static) -> Self {
        self.layers.push(Box::new(m));
        self
    }
    /// Appends a boxed module.
    pub fn push(&mut self, m: Box<dyn Module<B>>) {
        self.layers.push(m);
    }
    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }
    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
    /// Takes the layers out (e.g. to share them with a checkpointing wrapper).
    pub fn into_layers(self) -> Vec<Box<dyn Module<B>>> {
        self.layers
    }
    /// The layers.
    pub fn layers(&self) -> &[Box<dyn Module<B>>] {
        &self.layers
    }
}

impl<B: Backend> Module<B> for Sequential<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let mut h = x.clone();
        for l in &self.layers {
            h = l.try_forward(&h)?;
        }
        Ok(h)
    }
    fn set_training(&self, on: bool) {
        self.training.set(on);
    }
    fn is_training(&self) -> bool {
        self.training.peek()
    }
}

/// Written by hand: the children are numbered by position (`0`, `1`, ...),
/// as PyTorch's `nn.Sequential`, not named by a field.
impl<B: Backend> ModuleFields<B> for Sequential<B> {
    fn children(&self) -> Vec<(String, &dyn Module<B>)> {
        self.layers.iter().enumerate().map(|(i, l)| (i.to_string(), l.as_ref())).collect()
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module<B>)> {
        self.layers.iter_mut().enumerate().map(|(i, l)| (i.to_string(), l.as_mut() as &mut dyn Module<B>)).collect()
    }
    fn type_name(&self) -> &'static str {
        "Sequential"
    }
}

macro_rules! activation {
    ($name:ident, |$s:ident, $x:ident| $body:expr) => {
        impl<B: Backend> Module<B> for $name {
            fn try_forward(&self, $x: &Tensor<B>) -> Result<Tensor<B>> {
                let $s = self;
                let _ = $s;
                $body
            }
        }
    };
}

/// `max(x, 0)`.
#[derive(Clone, Copy, Debug, Default, Module)]
pub struct ReLU;
activation!(ReLU, |s, x| x.try_relu());

/// `x` or `negative_slope * x` (PyTorch's default slope is 0.01).
#[derive(Clone, Copy, Debug, Module)]
pub struct LeakyReLU {
    /// Slope for negative inputs.
    pub negative_slope: f64,
}
activation!(LeakyReLU, |s, x| x.try_leaky_relu(s.negative_slope));

/// GELU; `tanh_approximation` selects PyTorch's `approximate='tanh'`.
#[derive(Clone, Copy, Debug, Default, Module)]
pub struct GELU {
    /// Use the tanh formula instead of erf.
    pub tanh_approximation: bool,
}
activation!(GELU, |s, x| if s.tanh_approximation { x.try_gelu_tanh() } else { x.try_gelu() });

/// `x * sigmoid(x)`.
#[derive(Clone, Copy, Debug, Default, Module)]
pub struct SiLU;
activation!(SiLU, |s, x| x.try_silu());

/// Hyperbolic tangent.
#[derive(Clone, Copy, Debug, Default, Module)]
pub struct Tanh;
activation!(Tanh, |s, x| x.try_tanh());

/// Logistic sigmoid.
#[derive(Clone, Copy, Debug, Default, Module)]
pub struct Sigmoid;
activation!(Sigmoid, |s, x| x.try_sigmoid());

/// Softmax over `dim`.
#[derive(Clone, Copy, Debug, Module)]
pub struct Softmax {
    /// The dim that sums to one.
    pub dim: isize,
}
activation!(Softmax, |s, x| x.try_softmax(s.dim));

/// Log-softmax over `dim`.
#[derive(Clone, Copy, Debug, Module)]
pub struct LogSoftmax {
    /// The normalised dim.
    pub dim: isize,
}
activation!(LogSoftmax, |s, x| x.try_log_softmax(s.dim));

/// Passes its input through.
#[derive(Clone, Copy, Debug, Default, Module)]
pub struct Identity;
activation!(Identity, |s, x| Ok(x.clone()));

/// Flattens dims `start_dim..=end_dim` (PyTorch's default: 1 to -1).
#[derive(Clone, Copy, Debug, Module)]
pub struct Flatten {
    /// First flattened dim.
    pub start_dim: isize,
    /// Last flattened dim.
    pub end_dim: isize,
}
impl Default for Flatten {
    fn default() -> Self {
        Flatten { start_dim: 1, end_dim: -1 }
    }
}
activation!(Flatten, |s, x| x.try_flatten(s.start_dim, s.end_dim));

/// Zeroes elements with probability `p` in training mode, scaling the rest
/// by `1/(1-p)`; the identity in eval mode.
#[derive(Module)]
pub struct Dropout {
    /// Drop probability.
    pub p: f64,
    training: TrainingFlag,
}

impl Clone for Dropout {
    fn clone(&self) -> Self {
        Dropout { p: self.p, training: self.training.clone() }
    }
}

impl Dropout {
    /// Dropout with probability `p` (in training mode); panics where
    /// [`Dropout::try_new`] is an `Err`.
    #[track_caller]
    pub fn new(p: f64) -> Self {
        Self::try_new(p).or_panic()
    }
    /// Fallible [`Dropout::new`]: `Err` unless `0 <= p <= 1`.
    ///
    /// ```
    /// use autograd_nn::Dropout;
    /// assert!(Dropout::try_new(0.5).is_ok());
    /// assert!(Dropout::try_new(1.5).is_err());
    /// assert!(Dropout::try_new(f64::NAN).is_err());
    /// ```
    #[track_caller]
    pub fn try_new(p: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::InvalidShape {
                op: "Dropout",
                msg: format!("dropout probability has to be between 0 and 1, but got {p}"),
                location: Some(Location::caller()),
            });
        }
        Ok(Dropout { p, training: TrainingFlag::default() })
    }
}

impl<B: Backend> Module<B> for Dropout {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_dropout(x, self.p, self.training.get("Dropout"))
    }
    fn set_training(&self, on: bool) {
        self.training.set(on);
    }
    fn is_training(&self) -> bool {
        self.training.peek()
    }
}

/// Layer normalisation over the trailing `normalized_shape` dims with optional affine weight (ones) and bias (zeros).
#[derive(Module)]
pub struct LayerNorm<B: Backend> {
    /// The normalised trailing dims.
    pub normalized_shape: Vec<usize>,
    /// Added to the variance.
    pub eps: f64,
    /// Scale, if affine.
    pub weight: Option<Parameter<B>>,
    /// Shift, if affine.
    pub bias: Option<Parameter<B>>,
}

/// Configuration of a [`LayerNorm`]: the normalised trailing shape, and
/// PyTorch's defaults for the rest (`eps = 1e-5`, affine, float32).
///
/// ```
/// use autograd_nn::{LayerNorm, LayerNormConfig};
/// use autograd_core::RefBackend;
/// let ln: LayerNorm<RefBackend> = LayerNormConfig::new(&[4]).with_eps(1e-6).with_affine(false).init();
/// assert!(ln.weight.is_none() && ln.eps == 1e-6);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNormConfig {
    /// The normalised trailing dims.
    pub normalized_shape: Vec<usize>,
    /// Added to the variance (PyTorch's default: 1e-5).
    pub eps: f64,
    /// Learn a weight (ones) and a bias (zeros) (PyTorch's default: yes).
    pub affine: bool,
    /// The parameters' dtype (PyTorch's default: float32).
    pub dtype: DType,
}

impl LayerNormConfig {
    /// Normalises over the trailing `normalized_shape`, with PyTorch's defaults.
    pub fn new(normalized_shape: &[usize]) -> Self {
        LayerNormConfig { normalized_shape: normalized_shape.to_vec(), eps: 1e-5, affine: true, dtype: DType::F32 }
    }
    /// With this `eps`.
    pub fn with_eps(self, eps: f64) -> Self {
        LayerNormConfig { eps, ..self }
    }
    /// With or without the affine weight and bias.
    pub fn with_affine(self, affine: bool) -> Self {
        LayerNormConfig { affine, ..self }
    }
    /// With parameters of `dtype`.
    pub fn with_dtype(self, dtype: DType) -> Self {
        LayerNormConfig { dtype, ..self }
    }
    /// Builds the layer (panics where [`LayerNormConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> LayerNorm<B> {
        self.try_init().or_panic()
    }
    /// Builds the layer; `Err` for an `eps` that is negative or not finite,
    /// or when the parameters cannot be allocated.
    ///
    /// ```
    /// use autograd_nn::LayerNormConfig;
    /// use autograd_core::RefBackend;
    /// let e = LayerNormConfig::new(&[4]).with_eps(f64::NAN).try_init::<RefBackend>().err().unwrap().to_string();
    /// assert!(e.contains("LayerNormConfig") && e.contains("eps"), "{e}");
    /// ```
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<LayerNorm<B>> {
        ConfigCheck::new("LayerNormConfig").epsilon("eps", self.eps)?;
        let shape = &self.normalized_shape;
        Ok(LayerNorm {
            normalized_shape: shape.clone(),
            eps: self.eps,
            weight: if self.affine { Some(Parameter::new(Tensor::try_ones_dtype(shape.clone(), self.dtype)?)) } else { None },
            bias: if self.affine { Some(Parameter::new(Tensor::try_zeros_dtype(shape.clone(), self.dtype)?)) } else { None },
        })
    }
}

impl<B: Backend> LayerNorm<B> {
    /// `nn.LayerNorm(normalized_shape)`: `eps = 1e-5`, affine, float32;
    /// [`LayerNormConfig`] for the other choices.
    #[track_caller]
    pub fn new(normalized_shape: &[usize]) -> Self {
        LayerNormConfig::new(normalized_shape).init()
    }
}

impl<B: Backend> Module<B> for LayerNorm<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_layer_norm(
            x,
            &self.normalized_shape,
            self.weight.as_ref().map(|w| w.tensor()),
            self.bias.as_ref().map(|b| b.tensor()),
            self.eps,
        )
    }
}

/// A lookup table `(num_embeddings, embedding_dim)`, initialised `N(0, 1)` like PyTorch.
#[derive(Module)]
pub struct Embedding<B: Backend> {
    /// The table.
    pub weight: Parameter<B>,
}

/// Configuration of an [`Embedding`]: table size, and PyTorch's default dtype (float32).
///
/// ```
/// use autograd_nn::{Embedding, EmbeddingConfig};
/// use autograd_core::{RefBackend, DType};
/// let e: Embedding<RefBackend> = EmbeddingConfig::new(10, 4).with_dtype(DType::F64).init();
/// assert_eq!(e.weight.tensor().dims(), &[10, 4]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddingConfig {
    /// Rows of the table.
    pub num_embeddings: usize,
    /// Size of each embedding vector.
    pub embedding_dim: usize,
    /// The table's dtype (PyTorch's default: float32).
    pub dtype: DType,
}

impl EmbeddingConfig {
    /// A `num_embeddings x embedding_dim` table in float32.
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Self {
        EmbeddingConfig { num_embeddings, embedding_dim, dtype: DType::F32 }
    }
    /// With a table of `dtype`.
    pub fn with_dtype(self, dtype: DType) -> Self {
        EmbeddingConfig { dtype, ..self }
    }
    /// Builds the table (panics where [`EmbeddingConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> Embedding<B> {
        self.try_init().or_panic()
    }
    /// Builds the table, `N(0, 1)` from the global generator like PyTorch;
    /// `Err` when it cannot be allocated.
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<Embedding<B>> {
        Ok(Embedding { weight: Parameter::new(Tensor::try_randn_dtype([self.num_embeddings, self.embedding_dim], self.dtype)?) })
    }
}

impl<B: Backend> Embedding<B> {
    /// `nn.Embedding(num_embeddings, embedding_dim)` in float32.
    #[track_caller]
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Self {
        EmbeddingConfig::new(num_embeddings, embedding_dim).init()
    }
}

impl<B: Backend> Module<B> for Embedding<B> {
    /// `x` holds I64 indices of any shape; an index outside the table is an `Err`.
    ///
    /// ```
    /// use autograd_nn::{Embedding, Module};
    /// use autograd_core::{RefBackend, DType};
    /// use autograd_tensor::Tensor;
    /// let e = Embedding::<RefBackend>::new(5, 2);
    /// let err = e.try_forward(&Tensor::from_vec(vec![7i64], [1])).unwrap_err().to_string();
    /// assert!(err.contains("embedding") && err.contains("7"), "{err}");
    /// ```
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_embedding(x, self.weight.tensor())
    }
}

/// Activation choice for [`MlpConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// ReLU.
    ReLU,
    /// Tanh.
    Tanh,
    /// GELU (exact).
    GELU,
    /// SiLU.
    SiLU,
    /// Sigmoid.
    Sigmoid,
}

/// `a` applied to `x` (the function a block stores instead of a module).
pub(crate) fn apply_activation<B: Backend>(a: Activation, x: &Tensor<B>) -> Result<Tensor<B>> {
    match a {
        Activation::ReLU => x.try_relu(),
        Activation::Tanh => x.try_tanh(),
        Activation::GELU => x.try_gelu(),
        Activation::SiLU => x.try_silu(),
        Activation::Sigmoid => x.try_sigmoid(),
    }
}

fn act<B: Backend>(a: Activation) -> Box<dyn Module<B>> {
    match a {
        Activation::ReLU => Box::new(ReLU),
        Activation::Tanh => Box::new(Tanh),
        Activation::GELU => Box::new(GELU { tanh_approximation: false }),
        Activation::SiLU => Box::new(SiLU),
        Activation::Sigmoid => Box::new(Sigmoid),
    }
}

/// Configuration of an MLP built as a [`Sequential`]: `Linear, act,
/// [Dropout], Linear, act, ..., Linear [, output act]`, with the same child
/// numbering PyTorch gives the equivalent `nn.Sequential`. Defaults: ReLU,
/// no dropout, no output activation, float32.
///
/// ```
/// use autograd_nn::{Activation, MlpConfig, ModuleExt, Sequential};
/// use autograd_core::{RefBackend, DType};
/// let m: Sequential<RefBackend> = MlpConfig::new(&[4, 8, 8, 3]).with_activation(Activation::Tanh).with_dtype(DType::F64).init();
/// let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]);
/// assert!(MlpConfig::new(&[4]).try_init::<RefBackend>().is_err());
/// assert!(MlpConfig::new(&[4, 2]).with_dropout(2.0).try_init::<RefBackend>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct MlpConfig {
    /// Input size, hidden sizes, output size.
    pub sizes: Vec<usize>,
    /// The activation after each hidden layer.
    pub activation: Activation,
    /// Dropout probability after each hidden activation (0: none).
    pub dropout: f64,
    /// An activation after the last layer, if any.
    pub output_activation: Option<Activation>,
    /// The parameters' dtype.
    pub dtype: DType,
}

impl MlpConfig {
    /// An MLP through `sizes` with PyTorch-style defaults.
    pub fn new(sizes: &[usize]) -> Self {
        MlpConfig { sizes: sizes.to_vec(), activation: Activation::ReLU, dropout: 0.0, output_activation: None, dtype: DType::F32 }
    }
    /// With this hidden activation.
    pub fn with_activation(self, activation: Activation) -> Self {
        MlpConfig { activation, ..self }
    }
    /// With dropout `p` after each hidden activation.
    pub fn with_dropout(self, dropout: f64) -> Self {
        MlpConfig { dropout, ..self }
    }
    /// With an activation after the last layer.
    pub fn with_output_activation(self, output_activation: Option<Activation>) -> Self {
        MlpConfig { output_activation, ..self }
    }
    /// With parameters of `dtype`.
    pub fn with_dtype(self, dtype: DType) -> Self {
        MlpConfig { dtype, ..self }
    }
    /// Builds the MLP (panics where [`MlpConfig::try_init`] is an `Err`).
    #[track_caller]
    pub fn init<B: Backend>(&self) -> Sequential<B> {
        self.try_init().or_panic()
    }
    /// Builds the MLP: `Err` for fewer than two sizes, a dropout outside
    /// `[0, 1]` or weights that cannot be allocated.
    #[track_caller]
    pub fn try_init<B: Backend>(&self) -> Result<Sequential<B>> {
        let sizes = &self.sizes;
        if sizes.len() < 2 {
            return Err(Error::InvalidShape {
                op: "mlp",
                msg: format!("needs at least input and output sizes, got {sizes:?}"),
                location: Some(Location::caller()),
            });
        }
        let drop = Dropout::try_new(self.dropout)?;
        let mut s = Sequential::new();
        for (i, w) in sizes.windows(2).enumerate() {
            s.push(Box::new(LinearConfig::new(w[0], w[1]).with_dtype(self.dtype).try_init::<B>()?));
            let last = i + 2 == sizes.len();
            if !last {
                s.push(act(self.activation));
                if self.dropout > 0.0 {
                    s.push(Box::new(drop.clone()));
                }
            } else if let Some(a) = self.output_activation {
                s.push(act(a));
            }
        }
        Ok(s)
    }
}
