//! A 3-link planar arm reaching a target by gradient descent on its joint angles.

use autograd::prelude::*;

/// End-effector position `[x, y]` for joint angles `theta` `[3]` and link lengths.
pub fn forward_kinematics<B: Backend>(theta: &Tensor<B>, lengths: &[f64; 3]) -> Tensor<B> {
    let mut angle = theta.select(0, 0);
    let (mut x, mut y) = (angle.cos() * lengths[0], angle.sin() * lengths[0]);
    for (i, &l) in lengths.iter().enumerate().skip(1) {
        angle = angle + theta.select(0, i as isize);
        x = x + angle.cos() * l;
        y = y + angle.sin() * l;
    }
    Tensor::stack(&[x, y], 0)
}

/// Distance to the target after each iteration of gradient descent on
/// `|p(theta) - target|^2` (index 0 = before the first step), and the final angles.
pub fn solve<B: Backend>(target: [f64; 2], lengths: [f64; 3], start: [f64; 3], lr: f64, iters: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let theta = Tensor::<B>::from_vec(start.to_vec(), [3]).requires_grad_(true);
    let goal = Tensor::<B>::from_vec(target.to_vec(), [2]);
    let mut errors = Vec::with_capacity(iters + 1);
    for _ in 0..iters {
        theta.set_grad(None);
        let d = forward_kinematics(&theta, &lengths) - &goal;
        let loss = (&d * &d).sum();
        errors.push(loss.item().sqrt());
        loss.backward()?;
        no_grad(|| theta.try_sub_(&(theta.grad().expect("grad") * lr)))?;
    }
    let p = forward_kinematics(&theta.detach(), &lengths) - &goal;
    errors.push((&p * &p).sum().item().sqrt());
    Ok((errors, theta.to_vec_f64()))
}
