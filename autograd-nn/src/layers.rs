//! Layers: Linear, Sequential, activations, Dropout, LayerNorm, Embedding, Flatten, Identity.

use crate::{init, Module, Parameter};
use autograd_core::{Backend, DType, Error, Result};
use autograd_tensor::functional as F;
use autograd_tensor::Tensor;
use std::panic::Location;

/// `y = x W^T + b` with `W` of shape `(out_features, in_features)` like PyTorch,
/// initialised as PyTorch does: `U(-1/sqrt(in), 1/sqrt(in))` for both.
pub struct Linear<B: Backend> {
    /// `(out_features, in_features)`.
    pub weight: Parameter<B>,
    /// `(out_features,)`, if any.
    pub bias: Option<Parameter<B>>,
}

impl<B: Backend> Linear<B> {
    /// A linear layer with PyTorch's default initialisation from the global
    /// generator (panics where [`Linear::try_new`] is an `Err`).
    #[track_caller]
    pub fn new(in_features: usize, out_features: usize, bias: bool, dtype: DType) -> Self {
        or_panic(Self::try_new(in_features, out_features, bias, dtype))
    }
    /// Fallible [`Linear::new`]: `Err` when the weights cannot be allocated.
    /// With `in_features = 0` the bias is zeros, as in PyTorch (the bound
    /// `1/sqrt(fan_in)` is taken as 0).
    ///
    /// ```
    /// use autograd_nn::Linear;
    /// use autograd_core::{RefBackend, DType};
    /// let l = Linear::<RefBackend>::try_new(0, 3, true, DType::F32).unwrap();
    /// assert_eq!(l.bias.unwrap().tensor().to_vec::<f32>(), vec![0.0; 3]);
    /// assert!(Linear::<RefBackend>::try_new(1 << 31, 1 << 31, true, DType::F32).is_err());
    /// ```
    #[track_caller]
    pub fn try_new(in_features: usize, out_features: usize, bias: bool, dtype: DType) -> Result<Self> {
        let bound = if in_features > 0 { 1.0 / (in_features as f64).sqrt() } else { 0.0 };
        Ok(Linear {
            weight: Parameter::new(init::try_uniform::<B>([out_features, in_features], -bound, bound, dtype)?),
            bias: if bias { Some(Parameter::new(init::try_uniform::<B>([out_features], -bound, bound, dtype)?)) } else { None },
        })
    }
}

#[track_caller]
fn or_panic<T>(r: Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

impl<B: Backend> Module<B> for Linear<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::linear(x, self.weight.tensor(), self.bias.as_ref().map(|b| b.tensor()))
    }
    fn params(&self) -> Vec<(&'static str, &Parameter<B>)> {
        let mut v = vec![("weight", &self.weight)];
        if let Some(b) = &self.bias {
            v.push(("bias", b));
        }
        v
    }
    fn params_mut(&mut self) -> Vec<(&'static str, &mut Parameter<B>)> {
        let mut v = vec![("weight", &mut self.weight)];
        if let Some(b) = &mut self.bias {
            v.push(("bias", b));
        }
        v
    }
    fn type_name(&self) -> &'static str {
        "Linear"
    }
}

/// Modules applied in order; children are named by position (`0`, `1`, ...)
/// including parameter-free ones, so names match PyTorch's `nn.Sequential`.
pub struct Sequential<B: Backend> {
    layers: Vec<Box<dyn Module<B>>>,
    training: bool,
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
        Sequential { layers: Vec::new(), training: true }
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
    fn children(&self) -> Vec<(String, &dyn Module<B>)> {
        self.layers.iter().enumerate().map(|(i, l)| (i.to_string(), l.as_ref())).collect()
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module<B>)> {
        self.layers.iter_mut().enumerate().map(|(i, l)| (i.to_string(), l.as_mut() as &mut dyn Module<B>)).collect()
    }
    fn set_training(&mut self, on: bool) {
        self.training = on;
    }
    fn is_training(&self) -> bool {
        self.training
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
            fn type_name(&self) -> &'static str {
                stringify!($name)
            }
        }
    };
}

/// `max(x, 0)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReLU;
activation!(ReLU, |s, x| x.try_relu());

/// `x` or `negative_slope * x` (PyTorch's default slope is 0.01).
#[derive(Clone, Copy, Debug)]
pub struct LeakyReLU {
    /// Slope for negative inputs.
    pub negative_slope: f64,
}
activation!(LeakyReLU, |s, x| x.try_leaky_relu(s.negative_slope));

/// GELU; `tanh_approximation` selects PyTorch's `approximate='tanh'`.
#[derive(Clone, Copy, Debug, Default)]
pub struct GELU {
    /// Use the tanh formula instead of erf.
    pub tanh_approximation: bool,
}
activation!(GELU, |s, x| if s.tanh_approximation { x.try_gelu_tanh() } else { x.try_gelu() });

/// `x * sigmoid(x)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SiLU;
activation!(SiLU, |s, x| x.try_silu());

/// Hyperbolic tangent.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tanh;
activation!(Tanh, |s, x| x.try_tanh());

/// Logistic sigmoid.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sigmoid;
activation!(Sigmoid, |s, x| x.try_sigmoid());

/// Softmax over `dim`.
#[derive(Clone, Copy, Debug)]
pub struct Softmax {
    /// The dim that sums to one.
    pub dim: isize,
}
activation!(Softmax, |s, x| x.try_softmax(s.dim));

/// Log-softmax over `dim`.
#[derive(Clone, Copy, Debug)]
pub struct LogSoftmax {
    /// The normalised dim.
    pub dim: isize,
}
activation!(LogSoftmax, |s, x| x.try_log_softmax(s.dim));

/// Passes its input through.
#[derive(Clone, Copy, Debug, Default)]
pub struct Identity;
activation!(Identity, |s, x| Ok(x.clone()));

/// Flattens dims `start_dim..=end_dim` (PyTorch's default: 1 to -1).
#[derive(Clone, Copy, Debug)]
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
pub struct Dropout {
    /// Drop probability.
    pub p: f64,
    training: bool,
}

impl Dropout {
    /// Dropout with probability `p` (in training mode); panics where
    /// [`Dropout::try_new`] is an `Err`.
    #[track_caller]
    pub fn new(p: f64) -> Self {
        or_panic(Self::try_new(p))
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
        Ok(Dropout { p, training: true })
    }
}

impl<B: Backend> Module<B> for Dropout {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::dropout(x, self.p, self.training)
    }
    fn set_training(&mut self, on: bool) {
        self.training = on;
    }
    fn is_training(&self) -> bool {
        self.training
    }
    fn type_name(&self) -> &'static str {
        "Dropout"
    }
}

/// Layer normalisation over the trailing `normalized_shape` dims with optional affine weight (ones) and bias (zeros).
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

impl<B: Backend> LayerNorm<B> {
    /// PyTorch's defaults: `eps = 1e-5`, affine (panics where
    /// [`LayerNorm::try_new`] is an `Err`).
    #[track_caller]
    pub fn new(normalized_shape: &[usize], eps: f64, affine: bool, dtype: DType) -> Self {
        or_panic(Self::try_new(normalized_shape, eps, affine, dtype))
    }
    /// Fallible [`LayerNorm::new`]: `Err` when the parameters cannot be allocated.
    #[track_caller]
    pub fn try_new(normalized_shape: &[usize], eps: f64, affine: bool, dtype: DType) -> Result<Self> {
        Ok(LayerNorm {
            normalized_shape: normalized_shape.to_vec(),
            eps,
            weight: if affine { Some(Parameter::new(Tensor::try_ones(normalized_shape.to_vec(), dtype)?)) } else { None },
            bias: if affine { Some(Parameter::new(Tensor::try_zeros(normalized_shape.to_vec(), dtype)?)) } else { None },
        })
    }
}

impl<B: Backend> Module<B> for LayerNorm<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::layer_norm(x, &self.normalized_shape, self.weight.as_ref().map(|w| w.tensor()), self.bias.as_ref().map(|b| b.tensor()), self.eps)
    }
    fn params(&self) -> Vec<(&'static str, &Parameter<B>)> {
        self.weight.iter().map(|w| ("weight", w)).chain(self.bias.iter().map(|b| ("bias", b))).collect()
    }
    fn params_mut(&mut self) -> Vec<(&'static str, &mut Parameter<B>)> {
        self.weight.iter_mut().map(|w| ("weight", w)).chain(self.bias.iter_mut().map(|b| ("bias", b))).collect()
    }
    fn type_name(&self) -> &'static str {
        "LayerNorm"
    }
}

/// A lookup table `(num_embeddings, embedding_dim)`, initialised `N(0, 1)` like PyTorch.
pub struct Embedding<B: Backend> {
    /// The table.
    pub weight: Parameter<B>,
}

impl<B: Backend> Embedding<B> {
    /// A table from the global generator (panics where [`Embedding::try_new`] is an `Err`).
    #[track_caller]
    pub fn new(num_embeddings: usize, embedding_dim: usize, dtype: DType) -> Self {
        or_panic(Self::try_new(num_embeddings, embedding_dim, dtype))
    }
    /// Fallible [`Embedding::new`]: `Err` when the table cannot be allocated.
    #[track_caller]
    pub fn try_new(num_embeddings: usize, embedding_dim: usize, dtype: DType) -> Result<Self> {
        Ok(Embedding { weight: Parameter::new(Tensor::try_randn([num_embeddings, embedding_dim], dtype)?) })
    }
}

impl<B: Backend> Module<B> for Embedding<B> {
    /// `x` holds I64 indices of any shape; an index outside the table is an `Err`.
    ///
    /// ```
    /// use autograd_nn::{Embedding, Module};
    /// use autograd_core::{RefBackend, DType};
    /// use autograd_tensor::Tensor;
    /// let e = Embedding::<RefBackend>::new(5, 2, DType::F32);
    /// let err = e.try_forward(&Tensor::from_vec(vec![7i64], [1])).unwrap_err().to_string();
    /// assert!(err.contains("embedding") && err.contains("7"), "{err}");
    /// ```
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        F::embedding(x, self.weight.tensor())
    }
    fn params(&self) -> Vec<(&'static str, &Parameter<B>)> {
        vec![("weight", &self.weight)]
    }
    fn params_mut(&mut self) -> Vec<(&'static str, &mut Parameter<B>)> {
        vec![("weight", &mut self.weight)]
    }
    fn type_name(&self) -> &'static str {
        "Embedding"
    }
}

/// Activation choice for [`mlp`].
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

fn act<B: Backend>(a: Activation) -> Box<dyn Module<B>> {
    match a {
        Activation::ReLU => Box::new(ReLU),
        Activation::Tanh => Box::new(Tanh),
        Activation::GELU => Box::new(GELU { tanh_approximation: false }),
        Activation::SiLU => Box::new(SiLU),
        Activation::Sigmoid => Box::new(Sigmoid),
    }
}

/// An MLP as a [`Sequential`]: `Linear, act, [Dropout], Linear, act, ..., Linear [, output act]`,
/// with the same child numbering PyTorch gives the equivalent `nn.Sequential`.
///
/// ```
/// use autograd_nn::{mlp, Activation, ModuleExt};
/// use autograd_core::{RefBackend, DType};
/// let m = mlp::<RefBackend>(&[4, 8, 8, 3], Activation::ReLU, 0.0, None, DType::F32);
/// let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]);
/// ```
#[track_caller]
pub fn mlp<B: Backend>(
    sizes: &[usize],
    activation: Activation,
    dropout: f64,
    output_activation: Option<Activation>,
    dtype: DType,
) -> Sequential<B> {
    or_panic(try_mlp(sizes, activation, dropout, output_activation, dtype))
}

/// Fallible [`mlp`]: `Err` for fewer than two sizes, a dropout outside
/// `[0, 1]` or weights that cannot be allocated.
///
/// ```
/// use autograd_nn::{try_mlp, Activation};
/// use autograd_core::{RefBackend, DType};
/// assert!(try_mlp::<RefBackend>(&[4], Activation::ReLU, 0.0, None, DType::F32).is_err());
/// assert!(try_mlp::<RefBackend>(&[4, 2], Activation::ReLU, 2.0, None, DType::F32).is_err());
/// ```
#[track_caller]
pub fn try_mlp<B: Backend>(
    sizes: &[usize],
    activation: Activation,
    dropout: f64,
    output_activation: Option<Activation>,
    dtype: DType,
) -> Result<Sequential<B>> {
    if sizes.len() < 2 {
        return Err(Error::InvalidShape {
            op: "mlp",
            msg: format!("needs at least input and output sizes, got {sizes:?}"),
            location: Some(Location::caller()),
        });
    }
    let drop = Dropout::try_new(dropout)?;
    let mut s = Sequential::new();
    for (i, w) in sizes.windows(2).enumerate() {
        s.push(Box::new(Linear::try_new(w[0], w[1], true, dtype)?));
        let last = i + 2 == sizes.len();
        if !last {
            s.push(act(activation));
            if dropout > 0.0 {
                s.push(Box::new(Dropout { p: drop.p, training: true }));
            }
        } else if let Some(a) = output_activation {
            s.push(act(a));
        }
    }
    Ok(s)
}
