//! Prints eager and compiled timings of the compile family as JSON lines,
//! for `compare_pytorch.py --only compile`: per-step milliseconds (median),
//! and the first compiled call (the traced call: trace, passes, and the step
//! itself, run eagerly while recording), for the 2,000-op chain, the
//! delivery-time MLP (one run of 300 steps) and the 784-512-512-10 MLP step
//! at batch 16, 128, 1024. Two threads, as the other workloads.

#![allow(clippy::print_stdout)] // the output is the point

use autograd_cpu::Cpu;
use autograd_jit::Traced;
use benches::{CompiledChain, DeliveryTime, MlpStep, median_secs, with_threads};
use std::time::Instant;

#[global_allocator]
static ALLOC: benches::alloc_count::Counting = benches::alloc_count::Counting;

/// Heap allocations of one call of `f`.
fn allocs<R>(f: impl FnOnce() -> R) -> u64 {
    benches::alloc_count::measure(f).0
}

fn ms(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e3
}

struct Line {
    eager: f64,
    compiled: f64,
    first: f64,
    eager_allocs: u64,
    compiled_allocs: u64,
}

fn line(name: &str, n: usize, l: Line) {
    println!(
        "{{\"workload\":\"{name}\",\"n\":{n},\"threads\":2,\"eager_ms\":{:.5},\"compiled_ms\":{:.5},\"first_call_ms\":{:.4},\"eager_allocs\":{},\"compiled_allocs\":{}}}",
        l.eager, l.compiled, l.first, l.eager_allocs, l.compiled_allocs
    );
}

fn main() {
    with_threads(2, || {
        let eager = median_secs(21, || {
            std::hint::black_box(benches::autograd_chain::<Cpu>(2000));
        }) * 1e3;
        let mut c = CompiledChain::new(2000);
        c.run(); // eager warm-up call
        let first = ms(|| {
            c.run();
        });
        let compiled = median_secs(21, || {
            std::hint::black_box(c.run());
        }) * 1e3;
        let (eager_allocs, compiled_allocs) = (allocs(|| benches::autograd_chain::<Cpu>(2000)), allocs(|| c.run()));
        line("compile_chain", 2000, Line { eager, compiled, first, eager_allocs, compiled_allocs });

        let d = DeliveryTime::<Cpu>::load();
        let eager = median_secs(11, || {
            std::hint::black_box(d.train(300));
        }) * 1e3
            / 300.0;
        let dt = DeliveryTime::<Traced<Cpu>>::load();
        let compiled = median_secs(11, || {
            std::hint::black_box(dt.train_compiled(300));
        }) * 1e3
            / 300.0;
        let first = dt.first_compiled_call_ms();
        // Per step, over a run of 300 (the compiled run includes its warm-up and traced calls).
        let (eager_allocs, compiled_allocs) = (allocs(|| d.train(300)) / 300, allocs(|| dt.train_compiled(300)) / 300);
        line("compile_delivery", 300, Line { eager, compiled, first, eager_allocs, compiled_allocs });

        for b in [16usize, 128, 1024] {
            let reps = if b >= 1024 { 21 } else { 101 };
            let mut m = MlpStep::<Cpu>::new(b);
            let eager = median_secs(reps, || {
                std::hint::black_box(m.step());
            }) * 1e3;
            let mut c = MlpStep::<Traced<Cpu>>::new(b).into_compiled();
            c(); // eager warm-up call
            let first = ms(|| {
                c();
            });
            let compiled = median_secs(reps, || {
                std::hint::black_box(c());
            }) * 1e3;
            let (eager_allocs, compiled_allocs) = (allocs(|| m.step()), allocs(&mut c));
            line("compile_mlp", b, Line { eager, compiled, first, eager_allocs, compiled_allocs });
        }
    });
}
