//! bf16 and f16 products against f32, interleaved in one process, and the
//! kernel the CPU runs for bf16 (AVX512_BF16 dot products or f32 after
//! widening): `cargo run --release -p benches --bin low_precision [sizes] [rounds]`.
//! `AUTOGRAD_CPU_ISA=avx2` shows the widening path on an AVX512_BF16 CPU.

#![allow(clippy::print_stdout)] // the output is the point

use autograd_core::DType;
use benches::{median_secs, square, with_threads};

fn main() {
    let sizes: Vec<usize> =
        std::env::args().nth(1).map(|s| s.split(',').map(|x| x.parse().expect("size")).collect()).unwrap_or(vec![512, 1024]);
    let rounds: usize = std::env::args().nth(2).map(|s| s.parse().expect("rounds")).unwrap_or(3);
    println!("bf16 kernel: {}", if autograd_cpu::matmul_bf16::available() { "AVX512_BF16 dot products" } else { "widened to f32" });
    for threads in [1usize, 2] {
        for &n in &sizes {
            let (a, b) = square(n, DType::F32);
            let (ab, bb) = (a.to_dtype(DType::BF16), b.to_dtype(DType::BF16));
            let (ah, bh) = (a.to_dtype(DType::F16), b.to_dtype(DType::F16));
            let gf = |s: f64| 2.0 * (n as f64).powi(3) / s / 1e9;
            let reps = if n >= 1024 { 5 } else { 15 };
            let mut rows: Vec<(&str, Vec<f64>)> = vec![("f32", vec![]), ("bf16", vec![]), ("f16", vec![])];
            for _ in 0..rounds {
                with_threads(threads, || {
                    rows[0].1.push(gf(median_secs(reps, || drop(std::hint::black_box(a.matmul(&b))))));
                    rows[1].1.push(gf(median_secs(reps, || drop(std::hint::black_box(ab.matmul(&bb))))));
                    rows[2].1.push(gf(median_secs(reps, || drop(std::hint::black_box(ah.matmul(&bh))))));
                });
            }
            for (name, v) in rows {
                let mut v = v;
                v.sort_by(|x, y| x.partial_cmp(y).expect("finite"));
                println!(
                    "n {n} threads {threads} {name:<5} {:7.1} GFLOP/s (rounds {:?})",
                    v[v.len() / 2],
                    v.iter().map(|x| x.round()).collect::<Vec<_>>()
                );
            }
        }
    }
}
