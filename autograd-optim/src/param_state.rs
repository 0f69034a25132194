//! What an optimizer keeps per parameter: its device scalars and its
//! state buffers.

use crate::UpdateRule;
use autograd_core::{Backend, Result};
use autograd_tensor::Tensor;

/// Per-parameter state: its scalars on the device (the step count and
/// every hyper-parameter of its group, [`UpdateRule::scalars`]: the update
/// reads its numbers there and counts its step there, eagerly and in a
/// compiled replay alike) and its buffers (in the rule's
/// [`UpdateRule::state_names`] order).
#[derive(Clone, Debug)]
pub(crate) struct ParamState<B: Backend> {
    pub(crate) scalars: Tensor<B>,
    pub(crate) buffers: Vec<Tensor<B>>,
}

impl<B: Backend> ParamState<B> {
    /// Fresh state for a parameter like `param` whose first update is
    /// `first` (a rule of step 1 on fresh state): no step taken, zero
    /// buffers.
    pub(crate) fn new(param: &Tensor<B>, first: &UpdateRule) -> Self {
        ParamState {
            scalars: scalars_tensor(first.scalars()),
            buffers: first.state_names().iter().map(|_| Tensor::zeros_dtype(param.shape().clone(), param.dtype())).collect(),
        }
    }
    /// Updates taken so far (a read of the device).
    pub(crate) fn steps(&self) -> Result<u64> {
        let v = self.scalars.try_to_vec::<f64>()?;
        Ok(v.first().copied().unwrap_or(0.0) as u64)
    }
}

/// A scalars buffer from its values.
pub(crate) fn scalars_tensor<B: Backend>(values: Vec<f64>) -> Tensor<B> {
    let n = values.len();
    Tensor::from_vec(values, [n])
}
