//! Eager against compiled (`autograd-jit`), the same step in the same
//! sitting: the 2,000-op chain (forward, backward, the gradient), the
//! delivery-time MLP (300 steps from the initial weights: the compiled run
//! includes its eager warm-up and traced calls) and one step of the
//! 784-512-512-10 MLP at batch 16.

use autograd_cpu::Cpu;
use autograd_jit::Traced;
use benches::{CompiledChain, DeliveryTime, MlpStep, autograd_chain};
use criterion::{Criterion, criterion_group, criterion_main};
use std::time::Duration;

fn compile(c: &mut Criterion) {
    let mut g = c.benchmark_group("compile");
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("chain_2000/eager", |b| b.iter(|| autograd_chain::<Cpu>(2000)));
    let mut chain = CompiledChain::new(2000);
    g.bench_function("chain_2000/compiled", |b| b.iter(|| chain.run()));
    let (d, dt) = (DeliveryTime::<Cpu>::load(), DeliveryTime::<Traced<Cpu>>::load());
    g.bench_function("delivery_300/eager", |b| b.iter(|| d.train(300)));
    g.bench_function("delivery_300/compiled", |b| b.iter(|| dt.train_compiled(300)));
    let mut m = MlpStep::<Cpu>::new(16);
    g.bench_function("mlp_16/eager", |b| b.iter(|| m.step()));
    let mut mc = MlpStep::<Traced<Cpu>>::new(16).into_compiled();
    g.bench_function("mlp_16/compiled", |b| b.iter(&mut mc));
    g.finish();
}

criterion_group!(benches, compile);
criterion_main!(benches);
