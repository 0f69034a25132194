//! Per-op cost of the tape: a 1-element tensor through 2,000 chained ops
//! (alternating `*` and `+` with constant 1-element tensors), forward,
//! backward and reading the gradient. Divide the time by 2,000.

use autograd_core::RefBackend;
use autograd_cpu::Cpu;
use benches::autograd_chain;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::time::Duration;

fn overhead(c: &mut Criterion) {
    let mut g = c.benchmark_group("autograd_overhead");
    g.measurement_time(Duration::from_secs(3)).throughput(Throughput::Elements(2000));
    g.bench_function("cpu/2000_ops", |b| b.iter(|| autograd_chain::<Cpu>(2000)));
    g.bench_function("reference/2000_ops", |b| b.iter(|| autograd_chain::<RefBackend>(2000)));
    g.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
