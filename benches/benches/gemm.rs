//! f32/f64 (and bf16/f16, f32-accumulated) GEMM through the candidates: the CPU backend (the `gemm` crate,
//! strided operands), and ndarray's `dot` (matrixmultiply, threaded).
//! Transposed operands (A^T B, A B^T) as the backward pass uses them.
//! Throughput is in flop/s (criterion's "elem/s").

use autograd_core::DType;
use benches::{square, with_threads};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ndarray::Array2;
use std::time::Duration;

fn gemm(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm");
    g.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    let cases: Vec<(usize, DType)> = vec![
        (256, DType::F32),
        (512, DType::F32),
        (1024, DType::F32),
        (2048, DType::F32),
        (1024, DType::F64),
        (1024, DType::BF16),
        (1024, DType::F16),
    ];
    for threads in [1usize, 2] {
        for &(n, dtype) in &cases {
            g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
            let (a, b) = square(n, dtype);
            let tag = format!("{dtype:?}/{threads}t");
            g.bench_with_input(BenchmarkId::new(format!("cpu_nn/{tag}"), n), &n, |bch, _| {
                with_threads(threads, || bch.iter(|| a.matmul(&b)))
            });
            if n == 1024 && !dtype.is_low_precision() {
                g.bench_with_input(BenchmarkId::new(format!("cpu_tn/{tag}"), n), &n, |bch, _| {
                    with_threads(threads, || bch.iter(|| a.t().matmul(&b)))
                });
                g.bench_with_input(BenchmarkId::new(format!("cpu_nt/{tag}"), n), &n, |bch, _| {
                    with_threads(threads, || bch.iter(|| a.matmul(&b.t())))
                });
            }
            if dtype == DType::F32 && n <= 1024 {
                let x = Array2::from_shape_vec((n, n), a.to_vec::<f32>()).expect("shape");
                let y = Array2::from_shape_vec((n, n), b.to_vec::<f32>()).expect("shape");
                g.bench_with_input(BenchmarkId::new(format!("ndarray_matrixmultiply/{tag}"), n), &n, |bch, _| {
                    with_threads(threads, || bch.iter(|| x.dot(&y)))
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, gemm);
criterion_main!(benches);
