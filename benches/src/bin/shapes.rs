//! GFLOP/s of the matrix products inside one `mlp_step` at a batch size:
//! `cargo run --release -p benches --bin shapes [batch]`.

#![allow(clippy::print_stdout)] // the output is the point

use autograd_cpu::Cpu;
use autograd_tensor::Tensor;
use benches::median_secs;

/// A named product, run by the closure, with its multiply-add count.
type Case<'a> = (&'static str, Box<dyn Fn() -> Tensor<Cpu> + 'a>, f64);

fn main() {
    let b: usize = std::env::args().nth(1).map(|s| s.parse().expect("batch")).unwrap_or(128);
    autograd_tensor::manual_seed(0);
    let r = |s: [usize; 2]| Tensor::<Cpu>::randn(s);
    let (x, w1, w2, g) = (r([b, 784]), r([512, 784]), r([512, 512]), r([b, 512]));
    let cases: Vec<Case<'_>> = vec![
        ("fwd x @ W1^T", Box::new(|| x.matmul(&w1.t())), (b * 784 * 512) as f64),
        ("fwd h @ W2^T", Box::new(|| g.matmul(&w2.t())), (b * 512 * 512) as f64),
        ("bwd g^T @ x (dW1)", Box::new(|| g.t().matmul(&x)), (b * 784 * 512) as f64),
        ("bwd g^T @ h (dW2)", Box::new(|| g.t().matmul(&g)), (b * 512 * 512) as f64),
        ("bwd g @ W2 (dh)", Box::new(|| g.matmul(&w2)), (b * 512 * 512) as f64),
    ];
    for (name, f, macs) in cases {
        let s = median_secs(51, || {
            std::hint::black_box(f());
        });
        println!("{name:<20} {:>8.1} us {:>7.1} GFLOP/s", s * 1e6, 2.0 * macs / s / 1e9);
    }
}
