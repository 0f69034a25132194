//! A 3-link planar arm (links 1.0, 0.8, 0.6) reaches the point (1.2, 1.0) by
//! gradient descent on its joint angles: `cargo run --release --example inverse_kinematics`.

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::prelude::*;
use examples::kinematics::solve;

fn main() -> Result<()> {
    let (errors, theta) = solve::<Cpu>([1.2, 1.0], [1.0, 0.8, 0.6], [0.3, 0.3, 0.3], 0.1, 100)?;
    println!("iteration  distance to target");
    for (i, e) in errors.iter().enumerate() {
        if i < 10 || i % 10 == 0 || i + 1 == errors.len() {
            println!("{i:>9}  {e:.3e}");
        }
    }
    println!("joint angles (rad): {:.4} {:.4} {:.4}", theta[0], theta[1], theta[2]);
    Ok(())
}
