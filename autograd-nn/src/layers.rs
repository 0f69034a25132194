//! Layers: Linear, Sequential, activations, Dropout, LayerNorm, Embedding, Flatten, Identity.

use crate::{init, Module, Parameter};
use autograd_core::{Backend, DType};
use autograd_tensor::functional as F;
use autograd_tensor::Tensor;

/// `y = x W^T + b` with `W` of shape `(out_features, in_features)` like PyTorch,
/// initialised as PyTorch does: `U(-1/sqrt(in), 1/sqrt(in))` for both.
pub struct Linear<B: Backend> {
    /// `(out_features, in_features)`.
    pub weight: Parameter<B>,
    /// `(out_features,)`, if any.
    pub bias: Option<Parameter<B>>,
}

impl<B: Backend> Linear<B> {
    /// A linear layer with PyTorch's default initialisation from the global generator.
    pub fn new(in_features: usize, out_features: usize, bias: bool, dtype: DType) -> Self {
        let bound = 1.0 / (in_features as f64).sqrt();
        Linear {
            weight: Parameter::new(init::uniform::<B>([out_features, in_features], -bound, bound, dtype)),
            bias: bias.then(|| Parameter::new(init::uniform::<B>([out_features], -bound, bound, dtype))),
        }
    }
}

impl<B: Backend> Module<B> for Linear<B> {
    #[track_caller]
    fn forward(&self, x: &Tensor<B>) -> Tensor<B> {
        match F::linear(x, self.weight.tensor(), self.bias.as_ref().map(|b| b.tensor())) {
            Ok(y) => y,
            Err(e) => panic!("{e}"),
        }
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
#[derive(Default)]
pub struct Sequential<B: Backend> {
    layers: Vec<Box<dyn Module<B>>>,
    training: bool,
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
    fn forward(&self, x: &Tensor<B>) -> Tensor<B> {
        let mut h = x.clone();
        for l in &self.layers {
            h = l.forward(&h);
        }
        h
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
            fn forward(&self, $x: &Tensor<B>) -> Tensor<B> {
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
activation!(ReLU, |s, x| x.relu());

/// `x` or `negative_slope * x` (PyTorch's default slope is 0.01).
#[derive(Clone, Copy, Debug)]
pub struct LeakyReLU {
    /// Slope for negative inputs.
    pub negative_slope: f64,
}
activation!(LeakyReLU, |s, x| x.leaky_relu(s.negative_slope));

/// GELU; `tanh_approximation` selects PyTorch's `approximate='tanh'`.
#[derive(Clone, Copy, Debug, Default)]
pub struct GELU {
    /// Use the tanh formula instead of erf.
    pub tanh_approximation: bool,
}
activation!(GELU, |s, x| if s.tanh_approximation { x.gelu_tanh() } else { x.gelu() });

/// `x * sigmoid(x)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SiLU;
activation!(SiLU, |s, x| x.silu());

/// Hyperbolic tangent.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tanh;
activation!(Tanh, |s, x| x.tanh());

/// Logistic sigmoid.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sigmoid;
activation!(Sigmoid, |s, x| x.sigmoid());

/// Softmax over `dim`.
#[derive(Clone, Copy, Debug)]
pub struct Softmax {
    /// The dim that sums to one.
    pub dim: isize,
}
activation!(Softmax, |s, x| x.softmax(s.dim));

/// Log-softmax over `dim`.
#[derive(Clone, Copy, Debug)]
pub struct LogSoftmax {
    /// The normalised dim.
    pub dim: isize,
}
activation!(LogSoftmax, |s, x| x.log_softmax(s.dim));

/// Passes its input through.
#[derive(Clone, Copy, Debug, Default)]
pub struct Identity;
activation!(Identity, |s, x| x.clone());

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
activation!(Flatten, |s, x| x.flatten(s.start_dim, s.end_dim));

/// Zeroes elements with probability `p` in training mode, scaling the rest
/// by `1/(1-p)`; the identity in eval mode.
pub struct Dropout {
    /// Drop probability.
    pub p: f64,
    training: bool,
}

impl Dropout {
    /// Dropout with probability `p` (in training mode).
    pub fn new(p: f64) -> Self {
        assert!((0.0..=1.0).contains(&p), "dropout probability has to be between 0 and 1, but got {p}");
        Dropout { p, training: true }
    }
}

impl<B: Backend> Module<B> for Dropout {
    fn forward(&self, x: &Tensor<B>) -> Tensor<B> {
        F::dropout(x, self.p, self.training).expect("p validated in new()")
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
    /// PyTorch's defaults: `eps = 1e-5`, affine.
    pub fn new(normalized_shape: &[usize], eps: f64, affine: bool, dtype: DType) -> Self {
        LayerNorm {
            normalized_shape: normalized_shape.to_vec(),
            eps,
            weight: affine.then(|| Parameter::new(Tensor::ones(normalized_shape.to_vec(), dtype))),
            bias: affine.then(|| Parameter::new(Tensor::zeros(normalized_shape.to_vec(), dtype))),
        }
    }
}

impl<B: Backend> Module<B> for LayerNorm<B> {
    #[track_caller]
    fn forward(&self, x: &Tensor<B>) -> Tensor<B> {
        match F::layer_norm(
            x,
            &self.normalized_shape,
            self.weight.as_ref().map(|w| w.tensor()),
            self.bias.as_ref().map(|b| b.tensor()),
            self.eps,
        ) {
            Ok(y) => y,
            Err(e) => panic!("{e}"),
        }
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
    /// A table from the global generator.
    pub fn new(num_embeddings: usize, embedding_dim: usize, dtype: DType) -> Self {
        Embedding { weight: Parameter::new(Tensor::randn([num_embeddings, embedding_dim], dtype)) }
    }
}

impl<B: Backend> Module<B> for Embedding<B> {
    /// `x` holds I64 indices of any shape.
    #[track_caller]
    fn forward(&self, x: &Tensor<B>) -> Tensor<B> {
        match F::embedding(x, self.weight.tensor()) {
            Ok(y) => y,
            Err(e) => panic!("{e}"),
        }
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
pub fn mlp<B: Backend>(
    sizes: &[usize],
    activation: Activation,
    dropout: f64,
    output_activation: Option<Activation>,
    dtype: DType,
) -> Sequential<B> {
    assert!(sizes.len() >= 2, "mlp needs at least input and output sizes, got {sizes:?}");
    let mut s = Sequential::new();
    for (i, w) in sizes.windows(2).enumerate() {
        s.push(Box::new(Linear::new(w[0], w[1], true, dtype)));
        let last = i + 2 == sizes.len();
        if !last {
            s.push(act(activation));
            if dropout > 0.0 {
                s.push(Box::new(Dropout::new(dropout)));
            }
        } else if let Some(a) = output_activation {
            s.push(act(a));
        }
    }
    s
}
