//! GFLOP/s of the matrix products inside one training step, at 1 and 2
//! threads: `cargo run --release -p benches --bin shapes [batch]` for the
//! `mlp_step` products, `... --bin shapes gpt` for those of the char_gpt
//! step (context 128, batch 16: 2,048 tokens of width 128). PyTorch's
//! times for the same products: `benches/gemm_shapes.py` (same names).

#![allow(clippy::print_stdout)] // the output is the point

use autograd_cpu::Cpu;
use autograd_tensor::Tensor;
use benches::{median_secs, with_threads};

/// A named product, run by the closure, with its multiply-add count.
type Case<'a> = (String, Box<dyn Fn() -> Tensor<Cpu> + Sync + 'a>, f64);

/// A layer's name, its input `x [t, k]`, weight `W [n, k]` and output
/// gradient `g [t, n]`.
type Layer = (String, Tensor<Cpu>, Tensor<Cpu>, Tensor<Cpu>);

/// The three products of a `Linear(k -> n)` layer's forward and backward on
/// `t` rows: `x W^T`, `g W` (input gradient), `g^T x` (weight gradient).
fn linear_cases<'a>(name: &str, x: &'a Tensor<Cpu>, w: &'a Tensor<Cpu>, g: &'a Tensor<Cpu>) -> Vec<Case<'a>> {
    let (t, k, n) = (x.dims()[0], x.dims()[1], w.dims()[0]);
    let macs = (t * k * n) as f64;
    vec![
        (format!("{name} fwd x W^T [{t}x{k}]x[{k}x{n}]"), Box::new(move || x.matmul(&w.t())), macs),
        (format!("{name} bwd g W (dx)"), Box::new(move || g.matmul(w)), macs),
        (format!("{name} bwd g^T x (dW)"), Box::new(move || g.t().matmul(x)), macs),
    ]
}

fn main() {
    let arg = std::env::args().nth(1).unwrap_or_else(|| "128".into());
    autograd_tensor::manual_seed(0);
    let r = |s: [usize; 2]| Tensor::<Cpu>::randn(s);
    let tensors: Vec<Layer> = if arg == "gpt" {
        let t = 2048;
        [("qkv", 128, 384), ("out", 128, 128), ("mlp up", 128, 512), ("mlp down", 512, 128), ("head", 128, 65)]
            .into_iter()
            .map(|(name, k, n)| (name.to_string(), r([t, k]), r([n, k]), r([t, n])))
            .collect()
    } else {
        let b: usize = arg.parse().expect("batch or `gpt`");
        [("fc1", 784, 512), ("fc2", 512, 512)].into_iter().map(|(name, k, n)| (name.to_string(), r([b, k]), r([n, k]), r([b, n]))).collect()
    };
    let cases: Vec<Case<'_>> = tensors.iter().flat_map(|(name, x, w, g)| linear_cases(name, x, w, g)).collect();
    println!("{:<44} {:>10} {:>10} {:>10} {:>10}", "product", "1 thr us", "GFLOP/s", "2 thr us", "GFLOP/s");
    for (name, f, macs) in &cases {
        let time = |threads| {
            with_threads(threads, || {
                median_secs(41, || {
                    std::hint::black_box(f());
                })
            })
        };
        let (s1, s2) = (time(1), time(2));
        println!("{name:<44} {:>10.1} {:>10.1} {:>10.1} {:>10.1}", s1 * 1e6, 2.0 * macs / s1 / 1e9, s2 * 1e6, 2.0 * macs / s2 / 1e9);
    }
}
