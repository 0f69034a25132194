//! Parameters: leaf tensors that require grad, owned by a module.

use autograd_core::Backend;
use autograd_tensor::Tensor;

/// A trainable tensor owned by a module (a leaf that requires grad).
///
/// ```
/// use autograd_nn::Parameter;
/// use autograd_core::{RefBackend, DType};
/// use autograd_tensor::Tensor;
/// let p = Parameter::new(Tensor::<RefBackend>::zeros([2]));
/// assert!(p.tensor().requires_grad() && p.tensor().is_leaf());
/// ```
pub struct Parameter<B: Backend> {
    t: Tensor<B>,
}

impl<B: Backend> Parameter<B> {
    /// Wraps `t` as a fresh leaf that requires grad.
    pub fn new(t: Tensor<B>) -> Self {
        Parameter { t: t.detach().requires_grad_(true) }
    }
    /// The tensor (a cheap handle; shares data and gradient).
    pub fn tensor(&self) -> &Tensor<B> {
        &self.t
    }
    /// Replaces the tensor (e.g. after a dtype change), keeping whether the
    /// parameter is trained (a frozen parameter stays frozen).
    pub fn set(&mut self, t: Tensor<B>) {
        let trained = self.t.requires_grad();
        self.t = t.detach().requires_grad_(trained);
    }
}

impl<B: Backend> std::ops::Deref for Parameter<B> {
    type Target = Tensor<B>;
    fn deref(&self) -> &Tensor<B> {
        &self.t
    }
}
