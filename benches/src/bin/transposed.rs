//! Transposed GEMM operands: the product on the strided view against a
//! copy to row-major first (the copy included), interleaved in one process:
//! `cargo run --release -p benches --bin transposed [sizes] [rounds]`.

#![allow(clippy::print_stdout)] // the output is the point

use autograd_core::DType;
use benches::{median_secs, square, with_threads};

fn main() {
    let sizes: Vec<usize> =
        std::env::args().nth(1).map(|s| s.split(',').map(|x| x.parse().expect("size")).collect()).unwrap_or(vec![512, 1024]);
    let rounds: usize = std::env::args().nth(2).map(|s| s.parse().expect("rounds")).unwrap_or(3);
    for threads in [1usize, 2] {
        for &n in &sizes {
            let (a, b) = square(n, DType::F32);
            let gf = |s: f64| 2.0 * (n as f64).powi(3) / s / 1e9;
            let reps = if n >= 1024 { 5 } else { 15 };
            let mut rows: Vec<(&str, Vec<f64>)> =
                vec![("a b", vec![]), ("a b^T", vec![]), ("a (b^T copied)", vec![]), ("a^T b", vec![]), ("(a^T copied) b", vec![])];
            for _ in 0..rounds {
                with_threads(threads, || {
                    rows[0].1.push(gf(median_secs(reps, || drop(std::hint::black_box(a.matmul(&b))))));
                    rows[1].1.push(gf(median_secs(reps, || drop(std::hint::black_box(a.matmul(&b.t()))))));
                    rows[2].1.push(gf(median_secs(reps, || drop(std::hint::black_box(a.matmul(&b.t().contiguous()))))));
                    rows[3].1.push(gf(median_secs(reps, || drop(std::hint::black_box(a.t().matmul(&b))))));
                    rows[4].1.push(gf(median_secs(reps, || drop(std::hint::black_box(a.t().contiguous().matmul(&b))))));
                });
            }
            for (name, v) in rows {
                let mut v = v;
                v.sort_by(|x, y| x.partial_cmp(y).expect("finite"));
                println!(
                    "n {n} threads {threads} {name:<16} {:7.1} GFLOP/s (rounds {:?})",
                    v[v.len() / 2],
                    v.iter().map(|x| x.round()).collect::<Vec<_>>()
                );
            }
        }
    }
}
