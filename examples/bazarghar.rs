//! The delivery-time regression of the lesson, trained on the shipped data:
//! `cargo run --release --example bazarghar` (`--device wgpu` on the GPU
//! backend, built with `--features wgpu`; f64 there takes the host path).
//!
//! Prints the loss table with and without zeroing gradients (the lesson's
//! pitfall) and checks autograd against a hand-written backward.

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::prelude::*;
use examples::bazarghar::{Report, run, sig};
use examples::device::{Device, OnDevice, run_on};

fn at(v: &[f64], steps: &[usize], lesson_style: bool) -> String {
    // Row A as the lesson printed it (4 decimals), rows B with 4 significant digits.
    steps
        .iter()
        .map(|&s| if lesson_style { format!("{:>9}", sig(v[s - 1], 4)) } else { format!("{:>9.4}", v[s - 1]) })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The lesson's runs on the backend `--device` names.
struct Lesson;

impl OnDevice for Lesson {
    type Output = Report;
    fn run<B: Backend>(self) -> Result<Report> {
        run::<B>(300, 0.1)
    }
}

fn main() -> Result<()> {
    let t = std::time::Instant::now();
    let args: Vec<String> = std::env::args().collect();
    let device = Device::from_args(&args)?;
    let r = run_on(device, Lesson)?;
    let steps = [1, 10, 50, 300];
    println!("bazarghar: 200 deliveries, 2 features, 2-16-1 ReLU network, full-batch GD, lr 0.1, 300 steps (f64, {device:?})");
    println!("initial loss                         {:.4}", r.initial_loss);
    println!("baseline (predict the mean, var(y))  {:.4}", r.baseline);
    println!();
    println!("{:<40} {:>9} {:>9} {:>9} {:>9}", "loss at step", 1, 10, 50, 300);
    println!("{:<40} {}", "A: zero_grad every step", at(&r.run_a, &steps, false));
    println!("{:<40} {}", "B: no zero_grad (lesson: stale .grad)", at(&r.run_b_lesson, &steps, true));
    println!("{:<40} {}", "B: no zero_grad (grads start empty)", at(&r.run_b_clean, &steps, true));
    println!();
    println!("without zero_grad the gradient is the sum of every step's gradient so far:");
    println!("the loss stalls near {:.4} instead of reaching {:.4}.", r.run_b_lesson[299], r.run_a[299]);
    println!("max |autograd - hand-written backward| at the initial weights: {:.1e}", r.max_grad_diff);
    println!();
    println!("{:<40} {}", "Sgd optimizer, zero_grad(true) each step", at(&r.run_sgd, &steps, false));
    println!("{:<40} {}", "Sgd optimizer, no zero_grad", at(&r.run_sgd_no_zero, &steps, true));
    let same = r.run_sgd.iter().zip(&r.run_a).all(|(a, b)| a == b);
    println!(
        "Sgd reproduces the manual loop: losses identical at all {} steps: {same}; max |weight diff| {:.1e}",
        r.run_a.len(),
        r.sgd_max_weight_diff
    );
    println!("({:.0} ms)", t.elapsed().as_secs_f64() * 1e3);
    Ok(())
}
