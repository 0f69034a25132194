//! The lesson's delivery-time regression: a 2-16-1 ReLU network trained by
//! full-batch gradient descent, with and without zeroing gradients.

use crate::data::{data_dir, load};
use autograd::prelude::*;

/// The data set and initial weights.
pub struct Problem<B: Backend> {
    /// Inputs, 200 x 2.
    pub x: Tensor<B>,
    /// Targets, 200 x 1.
    pub y: Tensor<B>,
    /// Initial weights `[W1, b1, W2, b2]`.
    pub init: [Tensor<B>; 4],
}

/// Loads `examples/data/bazarghar.safetensors`.
pub fn load_problem<B: Backend>() -> Result<Problem<B>> {
    let mut t = load::<B>(&data_dir().join("bazarghar.safetensors"))?;
    let mut take = |k: &str| t.remove(k).ok_or_else(|| Error::Format(format!("bazarghar.safetensors: missing {k}")));
    Ok(Problem { x: take("X")?, y: take("y")?, init: [take("W1")?, take("b1")?, take("W2")?, take("b2")?] })
}

/// `mean((relu(X W1 + b1) W2 + b2 - y)^2)`.
pub fn loss<B: Backend>(p: &Problem<B>, w: &[Tensor<B>; 4]) -> Tensor<B> {
    let h = (p.x.matmul(&w[0]) + &w[1]).relu();
    let pred = h.matmul(&w[2]) + &w[3];
    (pred - &p.y).powf(2.0).mean()
}

/// Fresh leaf copies of the initial weights.
pub fn fresh_params<B: Backend>(p: &Problem<B>) -> [Tensor<B>; 4] {
    p.init.clone().map(|t| t.deep_clone().detach().requires_grad_(true))
}

/// Runs `steps` of `param -= lr * param.grad`; returns the loss before each update.
/// With `zero_grad`, gradients are cleared before each backward; without it they accumulate.
pub fn train<B: Backend>(p: &Problem<B>, params: &[Tensor<B>; 4], steps: usize, lr: f64, zero_grad: bool) -> Result<Vec<f64>> {
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        if zero_grad {
            params.iter().for_each(|w| w.set_grad(None));
        }
        let l = loss(p, params);
        losses.push(l.item());
        l.backward()?;
        no_grad(|| -> Result<()> {
            for w in params {
                let g = w.grad().expect("every parameter is used");
                w.try_sub_(&(g * lr))?;
            }
            Ok(())
        })?;
    }
    Ok(losses)
}

/// The same loop with the [`Sgd`] optimizer: `zero_grad(true)` (if asked),
/// loss, backward, `step()`. Returns the loss before each update.
pub fn train_sgd<B: Backend>(p: &Problem<B>, params: &[Tensor<B>; 4], steps: usize, lr: f64, zero_grad: bool) -> Result<Vec<f64>> {
    let mut opt = Sgd::new(params.to_vec(), SgdConfig { lr, ..Default::default() })?;
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        if zero_grad {
            opt.zero_grad(true);
        }
        let l = loss(p, params);
        losses.push(l.item());
        l.backward()?;
        opt.step()?;
    }
    Ok(losses)
}

/// Gradients of the loss at `w` written out by hand (the chain rule, no tape).
pub fn handwritten_grads<B: Backend>(p: &Problem<B>, w: &[Tensor<B>; 4]) -> [Tensor<B>; 4] {
    no_grad(|| {
        let n = p.y.numel() as f64;
        let z = p.x.matmul(&w[0]) + &w[1];
        let h = z.relu();
        let pred = h.matmul(&w[2]) + &w[3];
        let dpred = (pred - &p.y) * (2.0 / n);
        let dw2 = h.t().matmul(&dpred);
        let db2 = dpred.sum_dims(&[0], true);
        let dh = dpred.matmul(&w[2].t());
        let dz = dh * z.gt_scalar(0.0);
        let dw1 = p.x.t().matmul(&dz);
        let db1 = dz.sum_dims(&[0], true);
        [dw1, db1, dw2, db2]
    })
}

/// Puts the initial values back into the same tensors, leaving their `.grad` as it is.
fn reset_values<B: Backend>(params: &[Tensor<B>; 4], init: &[Tensor<B>; 4]) -> Result<()> {
    no_grad(|| params.iter().zip(init).try_for_each(|(t, i)| t.try_copy_(i)))
}

/// Everything the example prints.
pub struct Report {
    /// Loss at the initial weights.
    pub initial_loss: f64,
    /// MSE of predicting the mean (population variance of y).
    pub baseline: f64,
    /// Run A (gradients zeroed every step).
    pub run_a: Vec<f64>,
    /// Run B as the lesson ran it (weights reset, stale gradient kept).
    pub run_b_lesson: Vec<f64>,
    /// Run B with gradients starting empty.
    pub run_b_clean: Vec<f64>,
    /// Max |autograd - hand-written| over all initial gradients.
    pub max_grad_diff: f64,
    /// Run A with the `Sgd` optimizer.
    pub run_sgd: Vec<f64>,
    /// Max |weights of run A - weights of the `Sgd` run| after training.
    pub sgd_max_weight_diff: f64,
    /// Run B (the lesson's, stale gradient kept) with the `Sgd` optimizer and no `zero_grad`.
    pub run_sgd_no_zero: Vec<f64>,
}

/// Runs the whole lesson.
pub fn run<B: Backend>(steps: usize, lr: f64) -> Result<Report> {
    let p = load_problem::<B>()?;
    let w = fresh_params(&p);
    let l0 = loss(&p, &w);
    l0.backward()?;
    let hand = handwritten_grads(&p, &w);
    let mut max_grad_diff = 0.0f64;
    for (a, h) in w.iter().zip(&hand) {
        for (x, y) in a.grad().expect("grad").to_vec_f64().iter().zip(h.to_vec_f64()) {
            max_grad_diff = max_grad_diff.max((x - y).abs());
        }
    }
    let baseline = p.y.var_dims(&[], 0, false).item();

    // Run A: the normal loop, by hand and with the optimizer.
    let w = fresh_params(&p);
    let run_a = train(&p, &w, steps, lr, true)?;
    let w_sgd = fresh_params(&p);
    let run_sgd = train_sgd(&p, &w_sgd, steps, lr, true)?;
    let mut sgd_max_weight_diff = 0.0f64;
    for (a, b) in w.iter().zip(&w_sgd) {
        for (x, y) in a.to_vec_f64().iter().zip(b.to_vec_f64()) {
            sgd_max_weight_diff = sgd_max_weight_diff.max((x - y).abs());
        }
    }
    // The optimizer without zero_grad, continuing from run A's stale gradients as the lesson did.
    reset_values(&w_sgd, &p.init)?;
    let run_sgd_no_zero = train_sgd(&p, &w_sgd, steps, lr, false)?;
    // Run B as the lesson did it: same tensors, values reset, .grad NOT reset.
    reset_values(&w, &p.init)?;
    let run_b_lesson = train(&p, &w, steps, lr, false)?;
    // Run B clean: gradients start empty, then accumulate.
    let w = fresh_params(&p);
    let run_b_clean = train(&p, &w, steps, lr, false)?;
    Ok(Report {
        initial_loss: l0.item(),
        baseline,
        run_a,
        run_b_lesson,
        run_b_clean,
        max_grad_diff,
        run_sgd,
        sgd_max_weight_diff,
        run_sgd_no_zero,
    })
}

/// `x` with `digits` significant digits, as the lesson printed its second row (`%.4g`).
///
/// ```
/// assert_eq!(examples::bazarghar::sig(1.0814965, 4), "1.081");
/// assert_eq!(examples::bazarghar::sig(0.0960379, 4), "0.09604");
/// ```
pub fn sig(x: f64, digits: i32) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let decimals = (digits - 1 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.decimals$}")
}
