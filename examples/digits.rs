//! scikit-learn's 8x8 digits, MLP 64-128-10, Adam lr 1e-3, batch 32,
//! 30 epochs on the shipped data's fixed split:
//! `cargo run --release --example digits` (`--seed N`, `--epochs N`;
//! `--device wgpu` on the GPU backend, built with `--features wgpu`).
//!
//! Prints a progress bar per epoch, the test accuracy (PyTorch reaches
//! 97.2-97.5% with this recipe), a confusion matrix and the training time.

fn main() -> autograd::prelude::Result<()> {
    examples::digits::cli(examples::digits::Network::Mlp)
}
