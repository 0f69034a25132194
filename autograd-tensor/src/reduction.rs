//! How a loss (or any pointwise composite) combines its per-element values.

use crate::Tensor;
use autograd_core::{Backend, Result};

/// How a loss combines per-element values.
///
/// ```
/// use autograd_tensor::{Tensor, functional::Reduction};
/// use autograd_core::RefBackend;
/// let l = Tensor::<RefBackend>::from_vec(vec![1.0f64, 3.0], [2]);
/// assert_eq!(Reduction::Mean.apply(l.clone()).unwrap().item(), 2.0);
/// assert_eq!(Reduction::Sum.apply(l).unwrap().item(), 4.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The mean over elements (PyTorch's default).
    #[default]
    Mean,
    /// The sum.
    Sum,
    /// No reduction: one value per element (or per sample).
    None,
}

impl Reduction {
    /// Reduces `l` this way.
    pub fn apply<B: Backend>(self, l: Tensor<B>) -> Result<Tensor<B>> {
        match self {
            Reduction::Mean => l.try_mean(),
            Reduction::Sum => l.try_sum(),
            Reduction::None => Ok(l),
        }
    }
}
