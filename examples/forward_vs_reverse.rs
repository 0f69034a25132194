//! One function of 50 inputs, its gradient three ways:
//! `cargo run --release --example forward_vs_reverse`.

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::prelude::*;
use examples::forward_vs_reverse::compare;

fn main() -> Result<()> {
    let n = 50;
    let r = compare::<Cpu>(n)?;
    println!("f: R^{n} -> R built from +, *, pow, tanh, relu, exp, log (f64)");
    println!("reverse mode: 1 forward pass recording {} nodes + 1 backward pass ({:.2} ms)", r.reverse_nodes, r.seconds[0] * 1e3);
    println!("forward mode: {} forward passes with tangents, one per input ({:.2} ms)", r.forward_passes, r.seconds[1] * 1e3);
    println!("central differences: {} function evaluations ({:.2} ms)", 2 * n, r.seconds[2] * 1e3);
    println!("max |reverse - forward|            = {:.1e}", r.max_diff_forward);
    println!("max |reverse - central difference| = {:.1e}", r.max_diff_central);
    println!(
        "work: forward mode needed {} passes where reverse mode needed 1 forward + 1 backward; {:.0}x the time (per-op overhead of these small vector ops hides part of the n-fold arithmetic)",
        r.forward_passes,
        r.seconds[1] / r.seconds[0]
    );
    Ok(())
}
