//! # autograd-data
//!
//! Data loading, PyTorch's `torch.utils.data` in small: a [`TensorDataset`]
//! of tensors that share their first dimension, and a [`DataLoader`] that
//! cuts it into mini-batches, optionally shuffled by a seeded generator so
//! that an epoch's order is reproducible, or sharded across ranks by a
//! [`DistributedSampler`].
//!
//! ```
//! use autograd_core::RefBackend;
//! use autograd_data::{DataLoader, TensorDataset};
//! use autograd_tensor::Tensor;
//! let x = Tensor::<RefBackend>::from_vec((0..10).map(|i| i as f64).collect(), [5, 2]);
//! let mut loader = DataLoader::new(TensorDataset::new(vec![x]).unwrap(), 2).shuffle(7);
//! let sizes: Vec<usize> = loader.epoch().map(|batch| batch[0].dims()[0]).collect();
//! assert_eq!(sizes, vec![2, 2, 1]);
//! ```

mod loader;
mod sampler;

pub use loader::{Batches, DataLoader, LoaderState, TensorDataset};
pub use sampler::DistributedSampler;
