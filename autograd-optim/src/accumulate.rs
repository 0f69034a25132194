//! Gradient accumulation: k micro-batches, one update.

use autograd_core::{Backend, Error, Result};
use autograd_tensor::Tensor;

use crate::clip::{NormType, clip_grad_norm_, scale_grads_};
use crate::optimizer::Optimizer;

/// Accumulates gradients over `k` micro-batches and steps once: each loss is
/// scaled by `1/k` before its backward, so `k` micro-batches of size `b`
/// update the model exactly like one batch of size `k * b` with a mean loss.
/// After each step the gradients are cleared.
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_optim::{GradAccumulator, Sgd, SgdConfig};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::from_vec(vec![1.0f64], [1]).requires_grad_(true);
/// let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
/// let mut acc = GradAccumulator::new(2).unwrap();
/// for x in [1.0, 3.0] {
///     let loss = (&w * x).sum(); // d/dw = x
///     acc.backward_step(&loss, &mut opt).unwrap();
/// }
/// // one step with the mean gradient (1 + 3) / 2 = 2
/// assert!((w.to_vec_f64()[0] - 0.8).abs() < 1e-15);
/// assert!(w.grad().is_none());
/// ```
#[derive(Clone, Debug)]
pub struct GradAccumulator {
    k: usize,
    seen: usize,
    set_to_none: bool,
    clip: Option<(f64, NormType)>,
}

impl GradAccumulator {
    /// Steps every `k` micro-batches (`k >= 1`).
    pub fn new(k: usize) -> Result<Self> {
        if k == 0 {
            return Err(Error::msg("GradAccumulator: k must be at least 1"));
        }
        Ok(GradAccumulator { k, seen: 0, set_to_none: true, clip: None })
    }

    /// Zero gradients in place after a step instead of dropping them.
    pub fn zero_in_place(mut self) -> Self {
        self.set_to_none = false;
        self
    }

    /// Clip the accumulated gradients to this total norm before each step.
    pub fn clip_grad_norm(mut self, max_norm: f64, norm: NormType) -> Self {
        self.clip = Some((max_norm, norm));
        self
    }

    /// The factor each micro-batch loss is multiplied by (`1/k`).
    pub fn loss_scale(&self) -> f64 {
        1.0 / self.k as f64
    }

    /// Micro-batches accumulated since the last step.
    pub fn pending(&self) -> usize {
        self.seen
    }

    /// Backpropagates `loss / k`; on the k-th call also steps `opt` and clears
    /// the gradients. Returns whether a step happened.
    pub fn backward_step<B: Backend, O: Optimizer<B> + ?Sized>(&mut self, loss: &Tensor<B>, opt: &mut O) -> Result<bool> {
        loss.try_mul_scalar(self.loss_scale())?.backward()?;
        self.seen += 1;
        if self.seen < self.k {
            return Ok(false);
        }
        self.step(opt)?;
        Ok(true)
    }

    /// Steps on a partial window (the end of an epoch whose length is not a
    /// multiple of `k`): the gradients are rescaled by `k / pending` so the
    /// update is the mean over the micro-batches seen. Does nothing if none is pending.
    pub fn flush<B: Backend, O: Optimizer<B> + ?Sized>(&mut self, opt: &mut O) -> Result<bool> {
        if self.seen == 0 {
            return Ok(false);
        }
        if self.seen != self.k {
            scale_grads_(&opt.params(), self.k as f64 / self.seen as f64)?;
        }
        self.step(opt)?;
        Ok(true)
    }

    fn step<B: Backend, O: Optimizer<B> + ?Sized>(&mut self, opt: &mut O) -> Result<()> {
        if let Some((max_norm, norm)) = self.clip {
            clip_grad_norm_(&opt.params(), max_norm, norm, false)?;
        }
        opt.step()?;
        opt.zero_grad(self.set_to_none);
        self.seen = 0;
        Ok(())
    }
}
