//! # autograd-checkpoint
//!
//! Activation checkpointing: trade recomputation for memory, and measure
//! both. [`checkpoint`] runs a function without keeping the tensors its ops
//! save for backward and recomputes it when backward needs them;
//! [`checkpoint_sequential`] and [`CheckpointedSequential`] apply it to a
//! sequence of layers according to a [`CheckpointPolicy`]: [`NoCheckpoint`],
//! [`Segments`] (PyTorch's), [`EveryK`], [`Sqrt`], or [`MemoryBudget`] (the
//! least recomputation within a memory budget, nesting checkpoints the way
//! binomial checkpointing does). Each [`Plan`] predicts its peak memory and
//! recomputation; `examples/checkpoint_memory.rs` and
//! `benches/README.md` hold the measured numbers.
//!
//! ```
//! use autograd_checkpoint::{checkpoint_sequential_with, SharedLayer, Sqrt};
//! use autograd_core::{DType, RefBackend};
//! use autograd_nn::{LinearConfig, Tanh};
//! use autograd_tensor::Tensor;
//! use std::sync::Arc;
//! let mut layers: Vec<SharedLayer<RefBackend>> = Vec::new();
//! for _ in 0..9 {
//!     layers.push(Arc::new(LinearConfig::new(8, 8).with_dtype(DType::F64).init()));
//!     layers.push(Arc::new(Tanh));
//! }
//! let x = Tensor::<RefBackend>::ones_dtype([4, 8], DType::F64).requires_grad_(true);
//! checkpoint_sequential_with(&layers, &Sqrt, &x).unwrap().sum().backward().unwrap();
//! let g = x.grad().unwrap().to_vec_f64();
//! x.set_grad(None);
//! layers.iter().fold(x.clone(), |h, l| l.forward(&h)).sum().backward().unwrap();
//! assert_eq!(g, x.grad().unwrap().to_vec_f64()); // identical gradients
//! ```

mod checkpoint;
mod measure;
mod policy;
mod sequential;

pub use checkpoint::{CheckpointFn, CheckpointOptions, checkpoint, checkpoint_with};
pub use measure::{MemoryReport, activation_peak};
pub use policy::{CheckpointPolicy, EveryK, MemoryBudget, NoCheckpoint, Plan, Segment, Segments, Sqrt};
pub use sequential::{CheckpointedSequential, SharedLayer, checkpoint_sequential, checkpoint_sequential_with, run_plan};
