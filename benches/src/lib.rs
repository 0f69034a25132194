//! Benchmarks live in `benches/`; this library is intentionally empty.
