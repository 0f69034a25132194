//! Prints this crate's timings of the comparison workloads as JSON lines,
//! for `compare_pytorch.py`: f32 GEMM GFLOP/s (plain and transposed) at
//! several sizes and thread counts, and the per-op cost of a tiny autograd chain.

#![allow(clippy::print_stdout)] // the output is the point

use autograd_core::DType;
use autograd_cpu::Cpu;
use benches::{autograd_chain, median_secs, square, with_threads};

fn main() {
    let sizes: Vec<usize> =
        std::env::args().nth(1).map(|s| s.split(',').map(|x| x.parse().expect("size")).collect()).unwrap_or(vec![256, 512, 1024, 2048]);
    for threads in [1usize, 2] {
        for &n in &sizes {
            let (a, b) = square(n, DType::F32);
            for (kind, f) in [("nn", 0), ("tn", 1), ("nt", 2)] {
                let reps = if n >= 2048 { 3 } else { 7 };
                let s = with_threads(threads, || {
                    median_secs(reps, || {
                        let c = match f {
                            0 => a.matmul(&b),
                            1 => a.t().matmul(&b),
                            _ => a.matmul(&b.t()),
                        };
                        std::hint::black_box(c);
                    })
                });
                let gflops = 2.0 * (n as f64).powi(3) / s / 1e9;
                println!("{{\"workload\":\"gemm_f32_{kind}\",\"n\":{n},\"threads\":{threads},\"gflops\":{gflops:.1}}}");
            }
        }
    }
    let n = 2000;
    for threads in [1usize, 2] {
        let s = with_threads(threads, || {
            median_secs(21, || {
                std::hint::black_box(autograd_chain::<Cpu>(n));
            })
        });
        println!("{{\"workload\":\"autograd_chain\",\"ops\":{n},\"threads\":{threads},\"us_per_op\":{:.3}}}", s / n as f64 * 1e6);
    }
}
