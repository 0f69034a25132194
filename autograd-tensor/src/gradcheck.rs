//! Numerical gradient checking (central differences in f64), like
//! `torch.autograd.gradcheck` and `gradgradcheck`.

use crate::GradOptions;
use crate::Tensor;
use crate::engine::grad;
use autograd_core::{Backend, DType, Error, HostData, Result};

/// The worst disagreement found by [`gradcheck`].
#[derive(Clone, Debug, PartialEq)]
pub struct GradcheckReport {
    /// Which input.
    pub input: usize,
    /// Flat index of the input element.
    pub input_element: usize,
    /// Flat index of the output element.
    pub output_element: usize,
    /// d output / d input by autograd.
    pub analytic: f64,
    /// The same by central differences.
    pub numeric: f64,
    /// `|analytic - numeric|`.
    pub abs_error: f64,
}

fn perturbed<B: Backend>(inputs: &[Tensor<B>], which: usize, elem: usize, delta: f64) -> Result<Vec<Tensor<B>>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if i != which {
                return Ok(t.detach());
            }
            let mut v = t.to_vec_f64();
            v[elem] += delta;
            Tensor::try_from_host(HostData::from_f64(&v, t.dtype()), t.shape().clone())
        })
        .collect()
}

/// Compares the Jacobian of `f` at `inputs` computed by reverse mode with
/// central differences of step `eps`. Every input must be F64 and require
/// grad. `Ok` carries the worst element; `Err` reports it when
/// `|analytic - numeric| > atol + rtol |numeric|` anywhere.
///
/// ```
/// use autograd_tensor::{Tensor, autograd::gradcheck};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![0.3f64, -1.2, 2.0], [3]).requires_grad_(true);
/// let r = gradcheck(|x| x[0].tanh() * &x[0], &[x], 1e-6, 1e-8, 1e-6).unwrap();
/// assert!(r.abs_error < 1e-8);
/// ```
pub fn gradcheck<B: Backend>(
    f: impl Fn(&[Tensor<B>]) -> Tensor<B>,
    inputs: &[Tensor<B>],
    eps: f64,
    atol: f64,
    rtol: f64,
) -> Result<GradcheckReport> {
    for (i, t) in inputs.iter().enumerate() {
        if t.dtype() != DType::F64 || !t.requires_grad() {
            return Err(Error::Autograd(format!(
                "gradcheck: input {i} must be F64 and require grad (got {:?}, requires_grad {})",
                t.dtype(),
                t.requires_grad()
            )));
        }
    }
    let out = f(inputs);
    let n_out = out.numel();
    let mut worst = GradcheckReport { input: 0, input_element: 0, output_element: 0, analytic: 0.0, numeric: 0.0, abs_error: -1.0 };
    let mut failed = false;
    // Analytic rows: one vjp per output element.
    let mut analytic: Vec<Vec<Vec<f64>>> = Vec::with_capacity(n_out);
    for o in 0..n_out {
        if !out.requires_grad() {
            // The output does not depend on the inputs through the graph: a zero Jacobian.
            analytic.push(inputs.iter().map(|t| vec![0.0; t.numel()]).collect());
            continue;
        }
        let mut e = vec![0.0; n_out];
        e[o] = 1.0;
        let seed = Tensor::try_from_host(HostData::from_f64(&e, out.dtype()), out.shape().clone())?;
        let g = grad(
            std::slice::from_ref(&out),
            inputs,
            Some(&[seed]),
            GradOptions { retain_graph: true, allow_unused: true, ..Default::default() },
        )?;
        analytic.push(g.iter().zip(inputs).map(|(g, t)| g.as_ref().map_or(vec![0.0; t.numel()], |g| g.to_vec_f64())).collect());
    }
    #[allow(clippy::needless_range_loop)] // e indexes the input, the perturbation and the Jacobian row alike
    for (i, t) in inputs.iter().enumerate() {
        for e in 0..t.numel() {
            let plus = f(&perturbed(inputs, i, e, eps)?).to_vec_f64();
            let minus = f(&perturbed(inputs, i, e, -eps)?).to_vec_f64();
            for o in 0..n_out {
                let numeric = (plus[o] - minus[o]) / (2.0 * eps);
                let a = analytic[o][i][e];
                let err = (a - numeric).abs();
                // NaN counts as a failure
                let bad = err.is_nan() || err > atol + rtol * numeric.abs();
                if (bad && !failed) || (bad == failed && err > worst.abs_error) {
                    worst = GradcheckReport { input: i, input_element: e, output_element: o, analytic: a, numeric, abs_error: err };
                }
                failed |= bad;
            }
        }
    }
    if failed {
        return Err(Error::Autograd(format!(
            "gradcheck failed: d out[{}] / d input{}[{}]: analytic {:e}, numeric {:e} (|error| {:e}, atol {atol:e}, rtol {rtol:e})",
            worst.output_element, worst.input, worst.input_element, worst.analytic, worst.numeric, worst.abs_error
        )));
    }
    Ok(worst)
}

/// Checks second derivatives: [`gradcheck`] of `x -> grad(f(x) . u, x)` for a
/// fixed random `u` (the gradient computed with `create_graph`).
pub fn gradgradcheck<B: Backend>(
    f: impl Fn(&[Tensor<B>]) -> Tensor<B>,
    inputs: &[Tensor<B>],
    eps: f64,
    atol: f64,
    rtol: f64,
) -> Result<GradcheckReport> {
    let out = f(inputs);
    let u = crate::random::with_rng(|g| (0..out.numel()).map(|_| g.normal()).collect::<Vec<f64>>());
    let u = Tensor::<B>::try_from_host(HostData::from_f64(&u, out.dtype()), out.shape().clone())?;
    let first = |xs: &[Tensor<B>]| -> Tensor<B> {
        // Perturbed copies arrive detached: make them leaves so the first gradient exists.
        let xs: Vec<Tensor<B>> = xs.iter().map(|x| if x.requires_grad() { x.clone() } else { x.detach().requires_grad_(true) }).collect();
        let xs = &xs[..];
        let y = f(xs);
        let gs = grad(&[y], xs, Some(std::slice::from_ref(&u)), GradOptions { retain_graph: true, create_graph: true, allow_unused: true })
            .expect("first-order gradient");
        let parts: Vec<Tensor<B>> = gs.into_iter().zip(xs).map(|(g, x)| g.unwrap_or_else(|| x.zeros_like()).reshape(&[-1])).collect();
        Tensor::cat(&parts, 0)
    };
    gradcheck(first, inputs, eps, atol, rtol)
}
