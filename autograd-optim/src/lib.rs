//! # autograd-optim
//!
//! Optimizers, gradient accumulation, clipping and learning-rate schedules.
//! Not implemented yet: the crate exists so that the workspace layout is
//! fixed; its issue is open.
