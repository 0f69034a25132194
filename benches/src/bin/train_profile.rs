//! Quick timing of the `mlp_step` and `optim_step` workloads, for profiling:
//! `cargo run --release -p benches --bin train_profile [mlp|adam] [batch]`.

#![allow(clippy::print_stdout)] // the output is the point

use autograd_cpu::Cpu;
use autograd_optim::Optimizer;
use benches::{MlpStep, adam_workload, median_secs};

#[global_allocator]
static ALLOC: benches::alloc_count::Counting = benches::alloc_count::Counting;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str).unwrap_or("mlp") {
        "adam" => {
            let (_p, mut opt) = adam_workload(10_000_000, 100);
            let s = median_secs(11, || opt.step().expect("step"));
            println!("adam step, 10M f32 in 100 tensors: {:.2} ms", s * 1e3);
        }
        _ => {
            for b in args.get(2).map(|b| vec![b.parse().expect("batch")]).unwrap_or(vec![16, 128, 1024]) {
                let mut m = MlpStep::<Cpu>::new(b);
                let reps = if b >= 1024 { 21 } else { 101 };
                let s = median_secs(reps, || {
                    std::hint::black_box(m.step());
                });
                let (allocs, bytes, _) = benches::alloc_count::measure(|| m.step());
                println!(
                    "mlp_step batch {b}: {:.3} ms; {allocs} allocations ({:.1} MiB) per step",
                    s * 1e3,
                    bytes as f64 / (1 << 20) as f64
                );
            }
        }
    }
}
