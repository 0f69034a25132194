//! A character-level LSTM language model on the shipped corpus (the King
//! James Bible's Genesis and Exodus, [`Corpus::shipped`]): an embedding, a
//! stacked LSTM and a linear read-out, trained on random windows with Adam
//! and gradient clipping, validated against the unigram entropy (the loss
//! of a model without context). The `char_lstm` example drives it;
//! `tests/char_lstm.rs` runs it short.

use crate::char_gpt::{Corpus, Rng, windows};
use autograd::nn::{LSTM, RecurrentConfig};
use autograd::prelude::*;
use autograd::tensor::fork_rng;

/// The model: `Embedding(vocab, embed)`, `LSTM(embed, hidden, layers,
/// batch_first)`, `Linear(hidden, vocab)`; names `embed.*`, `lstm.*`, `head.*`.
#[derive(Module)]
pub struct CharLstm<B: Backend> {
    /// Character embeddings.
    pub embed: Embedding<B>,
    /// The recurrence.
    pub lstm: LSTM<B>,
    /// Logits over the vocabulary.
    pub head: Linear<B>,
}

/// The model's and the run's sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct LstmRecipe {
    /// Embedding width.
    pub embed: usize,
    /// LSTM hidden width.
    pub hidden: usize,
    /// Stacked LSTM layers.
    pub layers: usize,
    /// Characters per training window.
    pub seq_len: usize,
    /// Windows per step.
    pub batch_size: usize,
    /// Optimizer steps.
    pub steps: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// Gradient norm clip.
    pub clip: f64,
    /// Validation windows (evenly spaced over the held-out text).
    pub eval_windows: usize,
    /// Seed of the weights and the batches.
    pub seed: u64,
}

impl Default for LstmRecipe {
    /// A 2-layer LSTM of 256 units on windows of 64 characters, batch 32,
    /// Adam 2e-3, 400 steps.
    fn default() -> Self {
        LstmRecipe {
            embed: 64,
            hidden: 256,
            layers: 2,
            seq_len: 64,
            batch_size: 32,
            steps: 400,
            lr: 2e-3,
            clip: 1.0,
            eval_windows: 64,
            seed: 0,
        }
    }
}

impl<B: Backend> CharLstm<B> {
    /// A model for `vocab` characters, initialised from `seed`.
    pub fn new(vocab: usize, r: &LstmRecipe) -> Result<Self> {
        fork_rng(r.seed, || {
            Ok(CharLstm {
                embed: EmbeddingConfig::new(vocab, r.embed).try_init()?,
                lstm: RecurrentConfig::lstm(r.embed, r.hidden).with_num_layers(r.layers).with_batch_first(true).try_init()?,
                head: LinearConfig::new(r.hidden, vocab).try_init()?,
            })
        })
    }
    /// Logits `(N, T, vocab)` for ids `(N, T)`.
    pub fn logits(&self, idx: &Tensor<B>) -> Result<Tensor<B>> {
        let h = self.lstm.try_forward(&self.embed.try_forward(idx)?)?;
        self.head.try_forward(&h)
    }
    /// Mean next-character cross-entropy of `idx` against `targets`.
    pub fn loss(&self, idx: &Tensor<B>, targets: &Tensor<B>) -> Result<Tensor<B>> {
        let logits = self.logits(idx)?;
        let v = logits.dims()[2] as isize;
        F::try_cross_entropy(&logits.try_reshape(&[-1, v])?, &targets.try_reshape(&[-1])?, Reduction::Mean, &Default::default())
    }
}

impl<B: Backend> Module<B> for CharLstm<B> {
    fn try_forward(&self, idx: &Tensor<B>) -> Result<Tensor<B>> {
        self.logits(idx)
    }
}

/// The mean validation loss over evenly spaced windows, without a graph.
pub fn validate<B: Backend>(model: &CharLstm<B>, corpus: &Corpus, r: &LstmRecipe) -> Result<f64> {
    let span =
        corpus.val.len().checked_sub(r.seq_len + 1).filter(|&s| s > 0).ok_or_else(|| Error::msg("char_lstm: validation text too short"))?;
    let starts: Vec<usize> = (0..r.eval_windows).map(|i| i * span / r.eval_windows.max(1)).collect();
    no_grad(|| {
        let mut total = 0.0;
        for chunk in starts.chunks(r.batch_size.max(1)) {
            let (x, y) = windows::<B>(&corpus.val, chunk, r.seq_len)?;
            total += model.loss(&x, &y)?.try_item()? * chunk.len() as f64;
        }
        Ok(total / starts.len().max(1) as f64)
    })
}

/// Trains `model`: random windows of the training text, Adam, gradient
/// clipping; `on_step(step, loss)` after each step. Returns every step's loss.
pub fn train<B: Backend>(model: &CharLstm<B>, corpus: &Corpus, r: &LstmRecipe, mut on_step: impl FnMut(usize, f32)) -> Result<Vec<f32>> {
    let span =
        corpus.train.len().checked_sub(r.seq_len + 1).filter(|&s| s > 0).ok_or_else(|| Error::msg("char_lstm: training text too short"))?;
    let params = model.parameters();
    let mut opt = Adam::new(params.clone(), AdamConfig { lr: r.lr, ..Default::default() })?;
    let mut rng = Rng::new(r.seed);
    let mut losses = Vec::with_capacity(r.steps);
    for step in 0..r.steps {
        let starts: Vec<usize> = (0..r.batch_size).map(|_| rng.below(span)).collect();
        let (x, y) = windows::<B>(&corpus.train, &starts, r.seq_len)?;
        opt.zero_grad(true);
        let loss = model.loss(&x, &y)?;
        loss.backward()?;
        clip_grad_norm_(&params, r.clip, NormType::P(2.0), false)?;
        opt.step()?;
        let l = loss.try_item()? as f32;
        losses.push(l);
        on_step(step + 1, l);
    }
    Ok(losses)
}
