//! Shared code of the examples: loading the shipped data and the lessons'
//! computations, kept in a library so that tests can check the numbers the
//! examples print.

pub mod bazarghar;
pub mod char_gpt;
pub mod char_gpt_dist;
pub mod char_lstm;
pub mod compiled;
pub mod data;
pub mod ddp;
pub mod device;
pub mod digits;
pub mod forward_vs_reverse;
pub mod greeks;
pub mod kinematics;
pub mod zero;

/// The README's code, compiled and run as a doctest so the first thing a
/// user copies always works.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
