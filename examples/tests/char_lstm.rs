//! `char_lstm` run short: a smaller LSTM on the shipped corpus learns
//! context, its validation loss falling below the unigram entropy (the loss
//! of the best model without context), and runs repeat exactly.

use autograd::prelude::*;
use examples::char_gpt::Corpus;
use examples::char_lstm::{CharLstm, LstmRecipe, train, validate};

#[test]
fn a_short_run_beats_the_unigram_entropy() {
    let corpus = Corpus::shipped().unwrap();
    let r =
        LstmRecipe { embed: 32, hidden: 128, seq_len: 32, batch_size: 16, steps: 150, lr: 4e-3, eval_windows: 32, ..LstmRecipe::default() };
    let model = CharLstm::<Cpu>::new(corpus.vocab.len(), &r).unwrap();
    let before = validate(&model, &corpus, &r).unwrap();
    let losses = train(&model, &corpus, &r, |_, _| {}).unwrap();
    let after = validate(&model, &corpus, &r).unwrap();
    eprintln!("char_lstm: validation {before:.3} -> {after:.3}, unigram entropy {:.3}", corpus.unigram_entropy);
    // an untrained model guesses about uniformly: ln(72)
    assert!((before - 72f64.ln()).abs() < 0.3, "{before}");
    assert!(after < corpus.unigram_entropy - 0.2, "validation loss {after} vs unigram entropy {}", corpus.unigram_entropy);
    assert!(losses[losses.len() - 1] < losses[0] - 1.0, "{losses:?}");
    // the same seed gives the same run
    let again = CharLstm::<Cpu>::new(corpus.vocab.len(), &LstmRecipe { steps: 3, ..r.clone() }).unwrap();
    let twice = CharLstm::<Cpu>::new(corpus.vocab.len(), &LstmRecipe { steps: 3, ..r.clone() }).unwrap();
    let short = LstmRecipe { steps: 3, ..r };
    assert_eq!(train(&again, &corpus, &short, |_, _| {}).unwrap(), train(&twice, &corpus, &short, |_, _| {}).unwrap());
}
