//! One neuron, `L = tanh(a*b + c)`, and its graph:
//! `cargo run --release --example neuron` prints the values, the graph and
//! the gradients, and writes `neuron.dot` with values and gradients on the
//! nodes (render with `dot -Tpng neuron.dot -o neuron.png`).

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::prelude::*;
use autograd::tensor::{GradFn, to_dot};

type T = Tensor<RefBackend>;

fn print_graph(f: &GradFn<RefBackend>, depth: usize) {
    let loc = f.location().map(|l| format!("  (created at {}:{})", l.file(), l.line())).unwrap_or_default();
    println!("{}{}{}", "  ".repeat(depth), f.name(), loc);
    for n in f.next_functions().into_iter().flatten() {
        print_graph(&n, depth + 1);
    }
}

fn main() -> std::io::Result<()> {
    let a = T::scalar(2.0f64).requires_grad_(true);
    let b = T::scalar(-1.0f64).requires_grad_(true);
    let c = T::scalar(1.5f64).requires_grad_(true);
    let l = (&a * &b + &c).tanh();
    println!("L = tanh(a*b + c) = {l}");
    print_graph(&l.grad_fn().expect("L has a graph"), 0);
    l.backward().expect("backward");
    for (name, t) in [("a", &a), ("b", &b), ("c", &c)] {
        println!("dL/d{name} = {:.4}", t.grad().expect("grad").item());
    }
    std::fs::write("neuron.dot", to_dot(&l, true))?;
    println!("graph written to neuron.dot (render: dot -Tpng neuron.dot -o neuron.png)");
    Ok(())
}
