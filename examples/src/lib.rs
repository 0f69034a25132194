//! Shared helpers for the examples (data loading).
