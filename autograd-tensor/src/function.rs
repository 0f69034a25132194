//! Custom differentiable functions, like `torch.autograd.Function`: the user
//! writes a forward (run without recording) and a backward.

use crate::node::{BackwardCtx, BackwardOp, SavedTensor};
use crate::{Tensor, no_grad};
use autograd_core::{Backend, Error, Result};
use std::sync::Arc;

/// Tensors a custom function keeps between forward and backward.
pub struct FunctionCtx<B: Backend> {
    saved: Vec<SavedTensor<B>>,
    name: &'static str,
}

impl<B: Backend> FunctionCtx<B> {
    /// Keeps tensors for backward (their versions are checked when read).
    pub fn save_for_backward(&mut self, tensors: &[&Tensor<B>]) {
        self.saved.extend(tensors.iter().map(|t| SavedTensor::new(&t.detach())));
    }
    /// The saved tensors, in the order saved; `Err` if one was modified in place since.
    pub fn saved_tensors(&self) -> Result<Vec<Tensor<B>>> {
        self.saved.iter().map(|s| s.get(self.name)).collect()
    }
}

/// A differentiable function with a hand-written backward.
///
/// ```
/// use autograd_tensor::{Tensor, Function, FunctionCtx};
/// use autograd_core::{RefBackend, Result};
/// /// Rounds in the forward, passes the gradient straight through.
/// struct StraightThroughRound;
/// impl Function<RefBackend> for StraightThroughRound {
///     fn forward(&self, _ctx: &mut FunctionCtx<RefBackend>, x: &[Tensor<RefBackend>]) -> Result<Tensor<RefBackend>> {
///         let v: Vec<f64> = x[0].to_vec_f64().iter().map(|v| v.round()).collect();
///         Tensor::try_from_vec(v, x[0].shape().clone())
///     }
///     fn backward(&self, _ctx: &FunctionCtx<RefBackend>, g: &Tensor<RefBackend>) -> Result<Vec<Option<Tensor<RefBackend>>>> {
///         Ok(vec![Some(g.clone())])
///     }
/// }
/// let x = Tensor::<RefBackend>::from_vec(vec![0.4f64, 1.6], [2]).requires_grad_(true);
/// let y = StraightThroughRound.apply(&[x.clone()]).unwrap();
/// assert_eq!(y.to_vec::<f64>(), vec![0.0, 2.0]);
/// (&y * 3.0).sum().backward().unwrap();
/// assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![3.0, 3.0]);
/// ```
pub trait Function<B: Backend>: Send + Sync + Sized + 'static {
    /// The node name shown by `grad_fn().name()`.
    fn name(&self) -> &'static str {
        "CustomFunctionBackward"
    }
    /// Computes the output from `inputs` (nothing is recorded here).
    fn forward(&self, ctx: &mut FunctionCtx<B>, inputs: &[Tensor<B>]) -> Result<Tensor<B>>;
    /// Gradients of the inputs from the output's gradient, one per input.
    fn backward(&self, ctx: &FunctionCtx<B>, grad: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>>;

    /// Runs the function and records it in the graph.
    #[track_caller]
    fn apply(self, inputs: &[Tensor<B>]) -> Result<Tensor<B>> {
        let mut ctx = FunctionCtx { saved: Vec::new(), name: self.name() };
        let detached: Vec<Tensor<B>> = inputs.iter().map(|t| t.detach()).collect();
        let out = no_grad(|| self.forward(&mut ctx, &detached))?;
        let refs: Vec<&Tensor<B>> = inputs.iter().collect();
        let n = inputs.len();
        let name = self.name();
        let node = Custom { f: Arc::new(self), ctx, n };
        Ok(Tensor::record(out.inner.storage.clone(), out.layout().clone(), out.dtype(), name, &refs, || node))
    }
}

struct Custom<B: Backend, F> {
    f: Arc<F>,
    ctx: FunctionCtx<B>,
    n: usize,
}

impl<B: Backend, F: Function<B>> BackwardOp<B> for Custom<B, F> {
    fn backward(&self, _: &BackwardCtx<'_, B>, grad: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
        let g = self.f.backward(&self.ctx, grad)?;
        if g.len() != self.n {
            return Err(Error::Autograd(format!("{}: backward returned {} gradients for {} inputs", self.f.name(), g.len(), self.n)));
        }
        Ok(g)
    }
}
