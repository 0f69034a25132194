//! One Adam step over 10 million f32 parameters in 100 tensors of 100,000
//! (PyTorch's Adam over the same tensors is timed by `compare_pytorch.py`).

use autograd_optim::Optimizer;
use benches::adam_workload;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::time::Duration;

fn optim_step(c: &mut Criterion) {
    let mut g = c.benchmark_group("optim_step");
    g.measurement_time(Duration::from_secs(4)).sample_size(30).throughput(Throughput::Elements(10_000_000));
    for threads in [1usize, 2] {
        let (_params, mut opt) = adam_workload(10_000_000, 100);
        // Built once: building a pool per iteration is not part of a step.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
        g.bench_function(format!("adam_10M_f32/{threads}_threads"), |b| b.iter(|| pool.install(|| opt.step().expect("step"))));
    }
    g.finish();
}

criterion_group!(benches, optim_step);
criterion_main!(benches);
