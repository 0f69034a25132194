//! Shared code of the examples: loading the shipped data and the lessons'
//! training loops, kept in a library so that tests can check the numbers the
//! examples print.

pub mod bazarghar;
pub mod data;
