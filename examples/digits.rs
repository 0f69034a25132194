//! scikit-learn's 8x8 digits, MLP 64-128-10, Adam lr 1e-3, batch 32,
//! 30 epochs on the shipped data's fixed split:
//! `cargo run --release --example digits`.
//!
//! Prints a progress bar per epoch, the test accuracy (PyTorch reaches
//! 97.2-97.5% with this recipe), a confusion matrix and the training time.

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::prelude::*;
use examples::digits::{Recipe, load_digits, train};
use indicatif::{ProgressBar, ProgressStyle};

fn main() -> Result<()> {
    let data = load_digits::<Cpu>()?;
    // `--seed N` changes the initialisation and shuffling seed.
    let args: Vec<String> = std::env::args().collect();
    let seed = args.iter().position(|a| a == "--seed").and_then(|i| args.get(i + 1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let recipe = Recipe { seed, ..Recipe::default() };
    println!(
        "digits: {} training / {} test images, MLP 64-128-10 (ReLU), Adam lr {}, batch {}, {} epochs, f32",
        data.train.0.dims()[0],
        data.test.0.dims()[0],
        recipe.lr,
        recipe.batch_size,
        recipe.epochs
    );
    let style = ProgressStyle::with_template("epoch {prefix:>2} [{bar:30}] {pos:>2}/{len} batches {msg}")
        .expect("a valid template")
        .progress_chars("=> ");
    let bar: std::cell::RefCell<Option<ProgressBar>> = Default::default();
    let start = std::time::Instant::now();
    let trained = train(
        &data,
        &recipe,
        |epoch, batch, batches| {
            let mut slot = bar.borrow_mut();
            let b = slot.get_or_insert_with(|| {
                let b = ProgressBar::new(batches as u64).with_style(style.clone());
                b.set_prefix(format!("{}", epoch + 1));
                b
            });
            b.set_position(batch as u64);
        },
        |epoch, stats| {
            let msg = format!("loss {:.4}  test accuracy {:.2}%", stats.train_loss, 100.0 * stats.test_accuracy);
            if let Some(b) = bar.borrow_mut().take() {
                if b.is_hidden() {
                    // Not a terminal (CI, a pipe): a plain line per epoch instead of the bar.
                    println!("epoch {:>2} {msg}", epoch + 1);
                }
                b.finish_with_message(msg);
            }
        },
    )?;
    let secs = start.elapsed().as_secs_f64();
    println!();
    println!("test accuracy: {:.2}% ({} of 360)", 100.0 * trained.test_accuracy, (trained.test_accuracy * 360.0).round());
    println!();
    println!("confusion matrix (rows: true digit, columns: predicted)");
    println!("      {}", (0..10).map(|d| format!("{d:>4}")).collect::<String>());
    for (t, row) in trained.confusion.iter().enumerate() {
        println!("  {t:>2}  {}", row.iter().map(|c| format!("{c:>4}")).collect::<String>());
    }
    println!();
    let steps = recipe.epochs * data.train.0.dims()[0].div_ceil(recipe.batch_size);
    println!("training time: {:.2} s ({steps} steps, {:.0} us per step incl. evaluation)", secs, secs * 1e6 / steps as f64);
    Ok(())
}
