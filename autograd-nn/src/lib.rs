//! # autograd-nn
//!
//! Neural-network building blocks. So far: reading and writing named
//! tensors as safetensors files that PyTorch's `safetensors.torch` reads,
//! with every malformed file an `Err` (never a panic), and atomic saves.
//! Modules (Linear, Sequential, ...) are the open part of the nn issue.

pub mod safetensors_io;

pub use safetensors_io::{load_safetensors, load_safetensors_bytes, save_safetensors, NamedTensors};
