//! # autograd-checkpoint
//!
//! Activation checkpointing whose memory savings are measured. Not
//! implemented yet: the crate exists so that the workspace layout is fixed;
//! its issue is open.
