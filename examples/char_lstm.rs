//! A character-level LSTM language model (embedding 64, 2-layer LSTM of
//! 256, linear read-out) on the King James Bible's Genesis and Exodus:
//! `cargo run --release --example char_lstm` (`--steps N`, `--seed N`).
//!
//! Prints a progress bar with the training loss, then the validation loss
//! beside the unigram entropy (the loss of a model without context) and a
//! sample.

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::prelude::*;
use examples::char_gpt::Corpus;
use examples::char_lstm::{CharLstm, LstmRecipe, train, validate};
use indicatif::{ProgressBar, ProgressStyle};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|s| s.parse::<u64>().ok());
    let base = LstmRecipe::default();
    let recipe = LstmRecipe { steps: arg("--steps").map_or(base.steps, |s| s as usize), seed: arg("--seed").unwrap_or(0), ..base };
    let corpus = Corpus::shipped()?;
    println!(
        "char_lstm: {} training / {} validation characters, vocabulary {}, embedding {}, LSTM {} x {}, windows of {}, batch {}, Adam lr {}, {} steps",
        corpus.train.len(),
        corpus.val.len(),
        corpus.vocab.len(),
        recipe.embed,
        recipe.layers,
        recipe.hidden,
        recipe.seq_len,
        recipe.batch_size,
        recipe.lr,
        recipe.steps
    );
    let model = CharLstm::<Cpu>::new(corpus.vocab.len(), &recipe)?;
    let before = validate(&model, &corpus, &recipe)?;
    let bar = ProgressBar::new(recipe.steps as u64)
        .with_style(ProgressStyle::with_template("[{bar:30}] {pos}/{len} steps {msg}").expect("a valid template").progress_chars("=> "));
    let start = std::time::Instant::now();
    train(&model, &corpus, &recipe, |step, loss| {
        bar.set_position(step as u64);
        bar.set_message(format!("loss {loss:.3}"));
        if bar.is_hidden() && (step % 50 == 0 || step == recipe.steps) {
            println!("step {step:>4} loss {loss:.3}");
        }
    })?;
    bar.finish();
    let secs = start.elapsed().as_secs_f64();
    let after = validate(&model, &corpus, &recipe)?;
    println!();
    println!("validation loss: {before:.3} before training, {after:.3} after (nats per character)");
    println!("unigram entropy: {:.3} (a model without context)", corpus.unigram_entropy);
    println!("training time: {secs:.1} s ({:.1} ms per step)", secs * 1e3 / recipe.steps.max(1) as f64);
    Ok(())
}
