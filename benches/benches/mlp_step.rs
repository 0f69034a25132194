//! One full training step (zero_grad + forward + cross-entropy + backward +
//! SGD) of a 784-512-512-10 ReLU MLP in f32 on a fixed synthetic batch.

use autograd_cpu::Cpu;
use benches::MlpStep;
use criterion::{Criterion, criterion_group, criterion_main};
use std::time::Duration;

fn mlp_step(c: &mut Criterion) {
    let mut g = c.benchmark_group("mlp_step");
    g.measurement_time(Duration::from_secs(4)).sample_size(30);
    for batch in [16usize, 128, 1024] {
        let mut m = MlpStep::<Cpu>::new(batch);
        // Built once: building a pool per iteration would dominate a small step.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        g.bench_function(format!("batch_{batch}/2_threads"), |b| b.iter(|| pool.install(|| m.step())));
    }
    g.finish();
}

criterion_group!(benches, mlp_step);
criterion_main!(benches);
