//! Black-Scholes Greeks by autograd: `cargo run --release --example greeks`.
//! Delta, vega, rho and theta are first derivatives of the price; gamma and
//! vanna are second derivatives (`create_graph`). Each is printed next to
//! its closed form.

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::prelude::*;
use examples::greeks::{Market, by_autograd, closed_form};

fn main() -> Result<()> {
    let m = Market { s: 100.0, k: 105.0, r: 0.05, sigma: 0.2, t: 1.0 };
    let a = by_autograd::<Cpu>(m)?;
    let c = closed_form(m);
    println!("Black-Scholes call, S={} K={} r={} sigma={} T={} (f64)", m.s, m.k, m.r, m.sigma, m.t);
    println!("{:<8} {:>20} {:>20} {:>10}", "", "autograd", "closed form", "|diff|");
    for ((name, x), (_, y)) in a.named().into_iter().zip(c.named()) {
        println!("{name:<8} {x:>20.15} {y:>20.15} {:>10.1e}", (x - y).abs());
    }
    Ok(())
}
