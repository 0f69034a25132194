//! Task heads: a final layer plus the loss and the readout that go with it.

#[cfg(doc)]
use crate::LinearConfig;
use crate::{Linear, Module};
use autograd_core::{Backend, Result};
use autograd_tensor::Tensor;
use autograd_tensor::functional::{self as F, Reduction};

/// Logits for `classes` classes, cross-entropy loss, argmax prediction.
///
/// ```
/// use autograd_nn::{ClassificationHead, LinearConfig, Module};
/// use autograd_core::{RefBackend, DType};
/// use autograd_tensor::Tensor;
/// let h = ClassificationHead::<RefBackend> { linear: LinearConfig::new(4, 3).with_dtype(DType::F64).init() };
/// let x = Tensor::randn_dtype([5, 4], DType::F64);
/// assert_eq!(h.predict(&x).dims(), &[5]);
/// let p = h.probabilities(&x).sum_dims(&[1], false).to_vec::<f64>();
/// assert!(p.iter().all(|s| (s - 1.0).abs() < 1e-12));
/// ```
#[derive(Module)]
pub struct ClassificationHead<B: Backend> {
    /// The logits layer.
    pub linear: Linear<B>,
}

impl<B: Backend> ClassificationHead<B> {
    /// A float32 head from `in_features` to `classes` logits (a
    /// [`Linear`](crate::Linear) made from [`LinearConfig`] for other choices).
    pub fn new(in_features: usize, classes: usize) -> Self {
        ClassificationHead { linear: Linear::new(in_features, classes) }
    }
    /// Mean cross-entropy of the logits for I64 `targets`.
    pub fn loss(&self, x: &Tensor<B>, targets: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_cross_entropy(&self.try_forward(x)?, targets, Reduction::Mean, &Default::default())
    }
    /// The most likely class (I64).
    pub fn predict(&self, x: &Tensor<B>) -> Tensor<B> {
        self.forward(x).max_dim(-1, false).1
    }
    /// Softmax probabilities.
    pub fn probabilities(&self, x: &Tensor<B>) -> Tensor<B> {
        self.forward(x).softmax(-1)
    }
}

impl<B: Backend> Module<B> for ClassificationHead<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.linear.try_forward(x)
    }
}

/// Which loss a [`RegressionHead`] uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RegressionLoss {
    /// Mean squared error.
    Mse,
    /// Huber with this delta.
    Huber(f64),
}

/// `outputs` real values with an MSE or Huber loss.
#[derive(Module)]
pub struct RegressionHead<B: Backend> {
    /// The output layer.
    pub linear: Linear<B>,
    /// The loss.
    #[module(skip)]
    pub loss_kind: RegressionLoss,
}

impl<B: Backend> RegressionHead<B> {
    /// A float32 head from `in_features` to `outputs` values (build the
    /// fields for other choices).
    pub fn new(in_features: usize, outputs: usize, loss_kind: RegressionLoss) -> Self {
        RegressionHead { linear: Linear::new(in_features, outputs), loss_kind }
    }
    /// The loss of the predictions against `targets` (mean reduction).
    pub fn loss(&self, x: &Tensor<B>, targets: &Tensor<B>) -> Result<Tensor<B>> {
        let y = self.try_forward(x)?;
        match self.loss_kind {
            RegressionLoss::Mse => F::try_mse_loss(&y, targets, Reduction::Mean),
            RegressionLoss::Huber(d) => F::try_huber_loss(&y, targets, d, Reduction::Mean),
        }
    }
}

impl<B: Backend> Module<B> for RegressionHead<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.linear.try_forward(x)
    }
}
