//! `char_gpt` run short (what `--steps 6 --checkpoint none,sqrt,every-2`
//! does): the model on the shipped corpus, the same seed under each
//! checkpointing policy. Losses must be identical, the checkpointed runs
//! must need less activation memory, and the loss must fall.

use autograd::prelude::*;
use examples::char_gpt::{CharGpt, Corpus, GptConfig, TrainConfig, policy, sample, train, validate};

#[test]
fn checkpointing_changes_memory_not_losses() {
    let corpus = Corpus::shipped().unwrap();
    assert_eq!(corpus.vocab.len(), 72);
    assert!((corpus.unigram_entropy - 3.019).abs() < 1e-3, "{}", corpus.unigram_entropy);
    let gc = GptConfig::small(corpus.vocab.len());
    let tc = TrainConfig { steps: 6, warmup: 2, eval_every: 3, eval_windows: 8, ..TrainConfig::default() };
    let mut runs = Vec::new();
    for name in ["none", "sqrt", "every-2"] {
        let model = CharGpt::<Cpu>::new(&gc, policy(name).unwrap(), tc.seed).unwrap();
        let report = train(&model, &corpus, &tc, gc.context, |_, _, _| {}).unwrap();
        runs.push((name, report, model));
    }
    let (_, none, model) = &runs[0];
    assert_eq!(none.losses.len(), 6);
    // the first loss is about ln(72): an untrained model guesses uniformly
    assert!((none.losses[0] - 72f32.ln()).abs() < 0.3, "{:?}", none.losses);
    assert!(none.losses[5] < none.losses[0] - 0.5, "{:?}", none.losses);
    assert_eq!(none.val_losses.iter().map(|v| v.0).collect::<Vec<_>>(), vec![3, 6]);
    for (name, r, _) in &runs[1..] {
        assert_eq!(r.losses, none.losses, "{name}: losses differ from no checkpointing");
        assert_eq!(r.val_losses, none.val_losses, "{name}");
        assert!(
            (r.peak_activation_bytes as f64) < 0.8 * none.peak_activation_bytes as f64,
            "{name}: peak {} bytes, without checkpointing {}",
            r.peak_activation_bytes,
            none.peak_activation_bytes
        );
    }
    // validation leaves the model in training mode, and repeats exactly
    let v = validate(model, &corpus, gc.context, 8, 16).unwrap();
    assert_eq!(v, none.final_val_loss());
    assert!(model.is_training());
    let text = sample(model, &corpus, "And God", 20, 0.8, gc.context, 1).unwrap();
    assert!(text.starts_with("And God") && text.chars().count() == 27, "{text:?}");
}

#[test]
fn policies_by_name() {
    assert!(policy("every-3").is_ok());
    let e = policy("every-k").map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("every-k") && e.contains("none, sqrt, every-K"), "{e}");
}

#[test]
fn a_corpus_shorter_than_the_context_is_an_error() {
    let corpus = Corpus::from_text(&"ab".repeat(30)).unwrap();
    let gc = GptConfig::small(corpus.vocab.len());
    let model = CharGpt::<Cpu>::new(&gc, policy("none").unwrap(), 0).unwrap();
    assert!(validate(&model, &corpus, gc.context, 4, 2).is_err());
    assert!(train(&model, &corpus, &TrainConfig { steps: 1, ..TrainConfig::default() }, gc.context, |_, _, _| {}).is_err());
}
