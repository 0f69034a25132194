//! Runs the tiny-op autograd chain in a loop, for profilers (`perf record`).

#![allow(clippy::print_stdout)]

use autograd_cpu::Cpu;

#[global_allocator]
static ALLOC: benches::alloc_count::Counting = benches::alloc_count::Counting;

fn main() {
    let iters: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(500);
    let t = std::time::Instant::now();
    let mut acc = 0.0f32;
    for _ in 0..iters {
        acc += benches::autograd_chain::<Cpu>(2000);
    }
    let secs = t.elapsed().as_secs_f64();
    let (allocs, bytes, _) = benches::alloc_count::measure(|| benches::autograd_chain::<Cpu>(2000));
    println!(
        "{:.3} us/op (checksum {acc}); {:.2} allocations ({:.0} bytes) per op",
        secs / (iters * 2000) as f64 * 1e6,
        allocs as f64 / 2000.0,
        bytes as f64 / 2000.0
    );
}
