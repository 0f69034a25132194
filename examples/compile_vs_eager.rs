//! The same training steps eager and compiled (trace-then-compile):
//! `cargo run --release --example compile_vs_eager`.
//!
//! For the delivery-time MLP (300 full-batch SGD steps, f64) and digits
//! with try_dropout (Adam, 30 epochs, f32): both timings, the speed-up, the
//! first compiled call's cost, whether the results agree, and the compiled
//! program (its ops, fused groups and memory plan).

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::jit::Traced;
use autograd::prelude::*;
use examples::compiled::{Run, bazarghar_compiled, bazarghar_eager, digits_compiled, digits_eager};
use examples::digits::{Recipe, load_digits};

fn report(name: &str, eager: &Run, compiled: &Run) {
    let same = eager.losses == compiled.losses && eager.params == compiled.params;
    let max_rel = eager
        .params
        .iter()
        .flatten()
        .zip(compiled.params.iter().flatten())
        .map(|(a, b)| (a - b).abs() / a.abs().max(1e-30))
        .fold(0.0f64, f64::max);
    println!(
        "{name}: eager {:.2} ms, compiled {:.2} ms ({:.2}x eager; first compiled call {:.2} ms), results {}",
        eager.seconds * 1e3,
        compiled.seconds * 1e3,
        compiled.seconds / eager.seconds,
        compiled.compile_seconds * 1e3,
        if same { "bit-identical".to_string() } else { format!("within {max_rel:.1e} relative") }
    );
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let quiet = args.iter().any(|a| a == "--quiet");
    // A first run of each warms caches and the allocator; the second is reported.
    let _ = (bazarghar_eager::<Cpu>(300)?, bazarghar_compiled::<Cpu>(300)?);
    let (eager, compiled) = (bazarghar_eager::<Cpu>(300)?, bazarghar_compiled::<Cpu>(300)?);
    report("delivery-time MLP, 300 steps", &eager, &compiled);
    if !quiet {
        println!("{}", compiled.programs[0]);
    }
    let recipe = Recipe::default();
    let (data, traced_data) = (load_digits::<Cpu>()?, load_digits::<Traced<Cpu>>()?);
    let (eager, compiled) = (digits_eager(&data, &recipe)?, digits_compiled(&traced_data, &recipe)?);
    report("digits + Dropout(0.1), 30 epochs", &eager, &compiled);
    if !quiet {
        println!("{}", compiled.programs[0]);
    }
    Ok(())
}
