//! Where rayon starts to pay: a sequential loop against a rayon split of
//! the same loop, for a cheap op (add) and an expensive one (exp), at sizes
//! around the CPU backend's `PAR_MIN_ELEMS` threshold; plus the backend
//! itself on contiguous, transposed and broadcast operands.

use autograd_cpu::Cpu;
use autograd_tensor::Tensor;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rayon::prelude::*;
use std::time::Duration;

fn threshold(c: &mut Criterion) {
    let mut g = c.benchmark_group("par_threshold");
    g.measurement_time(Duration::from_secs(1)).warm_up_time(Duration::from_millis(300));
    for n in [2048usize, 8192, 16384, 32768, 65536, 262144] {
        let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.01).collect();
        let y = x.clone();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("add_seq", n), &n, |b, _| {
            b.iter(|| x.iter().zip(&y).map(|(a, b)| a + b).collect::<Vec<f32>>())
        });
        g.bench_with_input(BenchmarkId::new("add_par", n), &n, |b, _| {
            b.iter(|| {
                let mut o = Vec::with_capacity(n);
                x.par_iter().zip(y.par_iter()).with_min_len(1024).map(|(a, b)| a + b).collect_into_vec(&mut o);
                o
            })
        });
        g.bench_with_input(BenchmarkId::new("exp_seq", n), &n, |b, _| b.iter(|| x.iter().map(|a| a.exp()).collect::<Vec<f32>>()));
        g.bench_with_input(BenchmarkId::new("exp_par", n), &n, |b, _| {
            b.iter(|| {
                let mut o = Vec::with_capacity(n);
                x.par_iter().with_min_len(1024).map(|a| a.exp()).collect_into_vec(&mut o);
                o
            })
        });
    }
    g.finish();
}

fn backend(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu_binary");
    g.measurement_time(Duration::from_secs(2));
    let n = 1024;
    let a = Tensor::<Cpu>::randn([n, n]);
    let b = Tensor::<Cpu>::randn([n, n]);
    let row = Tensor::<Cpu>::randn([n]);
    g.throughput(Throughput::Elements((n * n) as u64));
    g.bench_function("add_contiguous_1M", |bch| bch.iter(|| &a + &b));
    g.bench_function("add_transposed_1M", |bch| bch.iter(|| &a + &b.t()));
    g.bench_function("add_broadcast_row_1M", |bch| bch.iter(|| &a + &row));
    g.bench_function("sum_all_1M", |bch| bch.iter(|| a.sum()));
    g.bench_function("sum_dim0_1M", |bch| bch.iter(|| a.sum_dims(&[0], false)));
    g.bench_function("sum_dim1_1M", |bch| bch.iter(|| a.sum_dims(&[1], false)));
    g.finish();
}

criterion_group!(benches, threshold, backend);
criterion_main!(benches);
