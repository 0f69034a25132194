//! The gradient of one function of many inputs three ways: reverse mode
//! (one backward), forward mode (one JVP per input) and central differences.

use autograd::core::HostData;
use autograd::prelude::*;
use autograd::tensor::live_nodes;
use autograd::{grad, jvp};

/// A scalar function of `x` `[n]` built from +, *, pow, tanh, relu, exp, log.
pub fn f<B: Backend>(x: &Tensor<B>) -> Tensor<B> {
    let n = x.numel() as isize;
    let a = x.narrow(0, 0, (n - 1) as usize);
    let b = x.narrow(0, 1, (n - 1) as usize);
    let pairs = (&a * &b).tanh().sum();
    let bumps = (x * 0.5 - 0.1).relu().powf(2.0).sum();
    let soft = ((x * 0.3).exp() + 1.0).log().sum();
    pairs + bumps * 0.7 + soft + x.powf(3.0).mean() * 0.01
}

/// What the comparison found.
pub struct Report {
    /// Gradient by reverse mode.
    pub reverse: Vec<f64>,
    /// max |reverse - forward|.
    pub max_diff_forward: f64,
    /// max |reverse - central difference|.
    pub max_diff_central: f64,
    /// Graph nodes recorded by the reverse-mode gradient.
    pub reverse_nodes: usize,
    /// Forward passes (with tangents) forward mode needed.
    pub forward_passes: usize,
    /// Seconds for reverse mode, forward mode, central differences.
    pub seconds: [f64; 3],
}

/// Runs the comparison at a fixed point of `n` inputs.
pub fn compare<B: Backend>(n: usize) -> Result<Report> {
    let x0: Vec<f64> = (0..n).map(|i| ((i as f64) * 0.37).sin() * 1.5).collect();
    let xt = Tensor::<B>::from_vec(x0.clone(), [n]);
    let t = std::time::Instant::now();
    let nodes_before = live_nodes();
    let x = xt.detach().requires_grad_(true);
    let y = f(&x);
    let reverse_nodes = live_nodes() - nodes_before;
    let reverse = grad(&[y], std::slice::from_ref(&x), None, GradOptions::default())?[0].clone().expect("used").to_vec_f64();
    let t_rev = t.elapsed().as_secs_f64();

    let t = std::time::Instant::now();
    let mut forward = vec![0.0; n];
    for (i, fw) in forward.iter_mut().enumerate() {
        let mut e = vec![0.0; n];
        e[i] = 1.0;
        let tan = Tensor::<B>::try_from_host(HostData::from_f64(&e, DType::F64), [n])?;
        *fw = jvp(|p| f(&p[0]), std::slice::from_ref(&xt), &[tan])?.1.item();
    }
    let t_fwd = t.elapsed().as_secs_f64();

    let t = std::time::Instant::now();
    // near cbrt(machine epsilon): balances truncation (h^2) against rounding (eps / h)
    let h = 1e-5;
    let mut central = vec![0.0; n];
    for (i, c) in central.iter_mut().enumerate() {
        let at = |d: f64| {
            let mut v = x0.clone();
            v[i] += d;
            f(&Tensor::<B>::from_vec(v, [n])).item()
        };
        *c = (at(h) - at(-h)) / (2.0 * h);
    }
    let t_cd = t.elapsed().as_secs_f64();
    let maxdiff = |o: &[f64]| reverse.iter().zip(o).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    Ok(Report {
        max_diff_forward: maxdiff(&forward),
        max_diff_central: maxdiff(&central),
        reverse,
        reverse_nodes,
        forward_passes: n,
        seconds: [t_rev, t_fwd, t_cd],
    })
}
