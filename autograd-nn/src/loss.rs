//! Losses as modules (thin wrappers over `autograd_tensor::functional`),
//! with the modules' convention: `try_forward` returns `Result`, `forward`
//! panics at the caller's line.

use autograd_core::{Backend, Result, ResultExt};
use autograd_tensor::Tensor;
use autograd_tensor::functional::{self as F, CrossEntropyOptions, Reduction};

/// Mean squared error.
#[derive(Clone, Copy, Debug, Default)]
pub struct MSELoss {
    /// Reduction.
    pub reduction: Reduction,
}

impl MSELoss {
    /// `(input - target)^2` reduced.
    #[track_caller]
    pub fn try_forward<B: Backend>(&self, input: &Tensor<B>, target: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_mse_loss(input, target, self.reduction)
    }
    /// Panicking [`Self::try_forward`] (the panic points at the caller's line).
    #[track_caller]
    pub fn forward<B: Backend>(&self, input: &Tensor<B>, target: &Tensor<B>) -> Tensor<B> {
        self.try_forward(input, target).or_panic()
    }
}

/// Mean absolute error.
#[derive(Clone, Copy, Debug, Default)]
pub struct L1Loss {
    /// Reduction.
    pub reduction: Reduction,
}

impl L1Loss {
    /// `|input - target|` reduced.
    #[track_caller]
    pub fn try_forward<B: Backend>(&self, input: &Tensor<B>, target: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_l1_loss(input, target, self.reduction)
    }
    /// Panicking [`Self::try_forward`] (the panic points at the caller's line).
    #[track_caller]
    pub fn forward<B: Backend>(&self, input: &Tensor<B>, target: &Tensor<B>) -> Tensor<B> {
        self.try_forward(input, target).or_panic()
    }
}

/// Huber loss with threshold `delta` (PyTorch default 1).
#[derive(Clone, Copy, Debug)]
pub struct HuberLoss {
    /// Threshold between the quadratic and linear parts.
    pub delta: f64,
    /// Reduction.
    pub reduction: Reduction,
}

impl HuberLoss {
    /// Huber loss reduced.
    #[track_caller]
    pub fn try_forward<B: Backend>(&self, input: &Tensor<B>, target: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_huber_loss(input, target, self.delta, self.reduction)
    }
    /// Panicking [`Self::try_forward`] (the panic points at the caller's line).
    #[track_caller]
    pub fn forward<B: Backend>(&self, input: &Tensor<B>, target: &Tensor<B>) -> Tensor<B> {
        self.try_forward(input, target).or_panic()
    }
}

/// Smooth L1 loss with threshold `beta` (PyTorch default 1).
#[derive(Clone, Copy, Debug)]
pub struct SmoothL1Loss {
    /// Threshold.
    pub beta: f64,
    /// Reduction.
    pub reduction: Reduction,
}

impl SmoothL1Loss {
    /// Smooth L1 loss reduced.
    #[track_caller]
    pub fn try_forward<B: Backend>(&self, input: &Tensor<B>, target: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_smooth_l1_loss(input, target, self.beta, self.reduction)
    }
    /// Panicking [`Self::try_forward`] (the panic points at the caller's line).
    #[track_caller]
    pub fn forward<B: Backend>(&self, input: &Tensor<B>, target: &Tensor<B>) -> Tensor<B> {
        self.try_forward(input, target).or_panic()
    }
}

/// Cross-entropy of logits against class indices, with class weights,
/// `ignore_index` and label smoothing.
#[derive(Clone, Debug, Default)]
pub struct CrossEntropyLoss<B: Backend> {
    /// Reduction.
    pub reduction: Reduction,
    /// Weights, ignore_index, label smoothing.
    pub options: CrossEntropyOptions<B>,
}

impl<B: Backend> CrossEntropyLoss<B> {
    /// The loss of logits `[N, C]` for targets `[N]` (I64).
    #[track_caller]
    pub fn try_forward(&self, logits: &Tensor<B>, targets: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_cross_entropy(logits, targets, self.reduction, &self.options)
    }
    /// Panicking [`Self::try_forward`] (the panic points at the caller's line).
    #[track_caller]
    pub fn forward(&self, logits: &Tensor<B>, targets: &Tensor<B>) -> Tensor<B> {
        self.try_forward(logits, targets).or_panic()
    }
}

/// Negative log-likelihood of log-probabilities.
#[derive(Clone, Debug, Default)]
pub struct NLLLoss<B: Backend> {
    /// Reduction.
    pub reduction: Reduction,
    /// Per-class weights.
    pub weight: Option<Tensor<B>>,
    /// Ignored target class.
    pub ignore_index: Option<i64>,
}

impl<B: Backend> NLLLoss<B> {
    /// The loss of log-probabilities `[N, C]` for targets `[N]`.
    #[track_caller]
    pub fn try_forward(&self, logp: &Tensor<B>, targets: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_nll_loss(logp, targets, self.weight.as_ref(), self.ignore_index, self.reduction)
    }
    /// Panicking [`Self::try_forward`] (the panic points at the caller's line).
    #[track_caller]
    pub fn forward(&self, logp: &Tensor<B>, targets: &Tensor<B>) -> Tensor<B> {
        self.try_forward(logp, targets).or_panic()
    }
}

/// Binary cross-entropy on logits, with an optional positive-class weight.
#[derive(Clone, Debug, Default)]
pub struct BCEWithLogitsLoss<B: Backend> {
    /// Reduction.
    pub reduction: Reduction,
    /// Weight of positive examples, broadcast over the last dim.
    pub pos_weight: Option<Tensor<B>>,
}

impl<B: Backend> BCEWithLogitsLoss<B> {
    /// The loss of logits against 0/1 (or soft) targets of the same shape.
    #[track_caller]
    pub fn try_forward(&self, logits: &Tensor<B>, targets: &Tensor<B>) -> Result<Tensor<B>> {
        F::try_binary_cross_entropy_with_logits(logits, targets, self.pos_weight.as_ref(), self.reduction)
    }
    /// Panicking [`Self::try_forward`] (the panic points at the caller's line).
    #[track_caller]
    pub fn forward(&self, logits: &Tensor<B>, targets: &Tensor<B>) -> Tensor<B> {
        self.try_forward(logits, targets).or_panic()
    }
}
