//! # autograd-nn
//!
//! Neural-network modules (Linear, MLP, losses, ...) with PyTorch-compatible
//! parameter names and safetensors weights. Not implemented yet: the crate
//! exists so that the workspace layout is fixed; its issue is open.
