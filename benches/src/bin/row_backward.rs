//! The one-pass row gradients of layer norm and softmax against the
//! backend's composite defaults (the formulas as tensor kernels, what the
//! backward ran before), interleaved in one process on char_gpt's shapes
//! (2,048 rows of 128 for layer norm; 2,048 rows of 65 for the
//! cross-entropy's log-softmax; 4,096 rows of 128 for a softmax), f32:
//! `cargo run --release -p benches --bin row_backward [rounds]`.
//! Prints the median time of each and the ratio (composite / fused).

#![allow(clippy::print_stdout)] // the output is the point

use autograd_core::backend::composite;
use autograd_core::{Backend, DType, Layout, Shape};
use autograd_cpu::Cpu;
use autograd_tensor::Tensor;
use benches::{median_secs, with_threads};

fn main() {
    let rounds: usize = std::env::args().nth(1).map(|s| s.parse().expect("rounds")).unwrap_or(3);
    println!("isa {:?}", autograd_cpu::simd::active_isa());
    let data = |dims: &[usize]| Tensor::<Cpu>::randn_dtype(Shape::from(dims), DType::F32);
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        v[v.len() / 2]
    };
    // layer norm's input gradient
    let (rows, n) = (2048usize, 128usize);
    let (g, x) = (data(&[rows, n]), data(&[rows, n]));
    let (xhat, rstd) = Cpu::layer_norm(&x.storage(), x.layout(), 1, 1e-5).expect("layer_norm");
    let (l, lr) = (Layout::contiguous(Shape::from([rows, n])), Layout::contiguous(Shape::from([rows, 1])));
    let (gs, gl) = (g.storage(), g.layout().clone());
    let fused = || drop(Cpu::layer_norm_backward(&gs, &gl, &xhat, &l, &rstd, &lr, 1).expect("fused"));
    let composed = || drop(composite::layer_norm_backward::<Cpu>(&gs, &gl, &xhat, &l, &rstd, &lr, 1).expect("composite"));
    report(&format!("layer_norm_backward {rows}x{n}"), rounds, &fused, &composed, med);
    // softmax and log-softmax gradients
    for (rows, n, log) in [(2048usize, 65usize, true), (4096, 128, false)] {
        let (y, g) = (data(&[rows, n]), data(&[rows, n]));
        let (ys, yl, gs, gl) = (y.storage(), y.layout().clone(), g.storage(), g.layout().clone());
        let fused = || drop(Cpu::softmax_backward(&ys, &yl, &gs, &gl, 1, log).expect("fused"));
        let composed = || drop(composite::softmax_backward::<Cpu>(&ys, &yl, &gs, &gl, 1, log).expect("composite"));
        report(&format!("{}softmax_backward {rows}x{n}", if log { "log_" } else { "" }), rounds, &fused, &composed, med);
    }
}

fn report(name: &str, rounds: usize, fused: &(dyn Fn() + Sync), composed: &(dyn Fn() + Sync), med: impl Fn(&mut Vec<f64>) -> f64) {
    let (mut f, mut c) = (vec![], vec![]);
    for _ in 0..rounds {
        with_threads(2, || {
            f.push(median_secs(51, fused));
            c.push(median_secs(51, composed));
        });
    }
    let (tf, tc) = (med(&mut f), med(&mut c));
    println!("{name}, 2 threads: fused {:.1} us, composite {:.1} us, composite/fused {:.2}x", tf * 1e6, tc * 1e6, tc / tf);
}
