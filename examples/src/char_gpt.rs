//! A character-level GPT (decoder-only Transformer) trained on the King
//! James Bible's Genesis and Exodus (`examples/data/kjv_genesis_exodus.txt`):
//! the corpus, the model, the training loop with AdamW, warm-up and cosine
//! schedule, gradient clipping, validation and sampling, and the
//! checkpointing policies measured on it. The `char_gpt` example drives it;
//! `tests/char_gpt.rs` runs it short.

use autograd::checkpoint::{CheckpointPolicy, CheckpointedSequential, EveryK, NoCheckpoint, Sqrt, activation_peak};
use autograd::nn::{EncoderOptions, TransformerEncoderLayer, TransformerEncoderLayerConfig};
use autograd::optim::{CosineAnnealingLR, LinearLR, SequentialLR};
use autograd::prelude::*;
use autograd::tensor::fork_rng;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// A text as character ids, split into training and validation parts.
pub struct Corpus {
    /// The distinct characters, sorted; a character's id is its index.
    pub vocab: Vec<char>,
    /// The first 90% of the text, as ids.
    pub train: Vec<i64>,
    /// The last 10%, as ids.
    pub val: Vec<i64>,
    /// The entropy (nats) of the text's character frequencies: the loss of
    /// the best model that ignores context.
    pub unigram_entropy: f64,
}

impl Corpus {
    /// The shipped corpus.
    pub fn shipped() -> Result<Self> {
        Self::load(&crate::data::data_dir().join("kjv_genesis_exodus.txt"))
    }

    /// A UTF-8 text file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::msg(format!("{}: {e}", path.display())))?;
        Self::from_text(&text)
    }

    /// Ids for `text`, the last 10% held out for validation; `Err` for a text
    /// too short to hold a training and a validation part.
    ///
    /// ```
    /// let c = examples::char_gpt::Corpus::from_text(&"abca".repeat(10)).unwrap();
    /// assert_eq!(c.vocab, vec!['a', 'b', 'c']);
    /// assert_eq!((c.train.len(), c.val.len()), (36, 4));
    /// assert!((c.unigram_entropy - (-(0.5f64 * 0.5f64.ln() + 2.0 * 0.25 * 0.25f64.ln()))).abs() < 1e-12);
    /// ```
    pub fn from_text(text: &str) -> Result<Self> {
        let mut counts: BTreeMap<char, usize> = BTreeMap::new();
        for c in text.chars() {
            *counts.entry(c).or_default() += 1;
        }
        let vocab: Vec<char> = counts.keys().copied().collect();
        let ids: Vec<i64> = text.chars().map(|c| vocab.binary_search(&c).map_or(0, |i| i as i64)).collect();
        if ids.len() < 20 {
            return Err(Error::msg(format!("char_gpt: a corpus of {} characters is too short", ids.len())));
        }
        let n = ids.len() as f64;
        let unigram_entropy = -counts.values().map(|&k| k as f64 / n * (k as f64 / n).ln()).sum::<f64>();
        let split = ids.len() - ids.len() / 10;
        Ok(Corpus { vocab, val: ids[split..].to_vec(), train: ids[..split].to_vec(), unigram_entropy })
    }

    /// The text of `ids` (ids outside the vocabulary as `?`).
    pub fn decode(&self, ids: &[i64]) -> String {
        ids.iter().map(|&i| usize::try_from(i).ok().and_then(|i| self.vocab.get(i)).copied().unwrap_or('?')).collect()
    }

    /// Ids of `text` (characters outside the vocabulary as id 0).
    pub fn encode(&self, text: &str) -> Vec<i64> {
        text.chars().map(|c| self.vocab.binary_search(&c).map_or(0, |i| i as i64)).collect()
    }
}

/// The model's sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GptConfig {
    /// Distinct characters.
    pub vocab: usize,
    /// Width.
    pub d_model: usize,
    /// Blocks.
    pub n_layers: usize,
    /// Attention heads per block.
    pub n_heads: usize,
    /// The longest context (positions learnt).
    pub context: usize,
    /// Dropout in the blocks.
    pub dropout: f64,
}

impl GptConfig {
    /// The issue's model: 4 layers, 4 heads, width 128, context 128.
    pub fn small(vocab: usize) -> Self {
        GptConfig { vocab, d_model: 128, n_layers: 4, n_heads: 4, context: 128, dropout: 0.0 }
    }
}

/// A pre-norm Transformer block attending causally: a
/// [`TransformerEncoderLayer`] with `norm_first` and GELU, whose forward
/// passes `is_causal` (so it fits a [`CheckpointedSequential`], which calls
/// `forward(x)`).
#[derive(Module)]
pub struct CausalBlock<B: Backend> {
    /// The block.
    pub layer: TransformerEncoderLayer<B>,
}

impl<B: Backend> Module<B> for CausalBlock<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.layer.try_forward_with(x, EncoderOptions { is_causal: true, ..Default::default() })
    }
}

/// Token and position embeddings, causal blocks (checkpointed by a policy),
/// a final norm and a linear head to the next character's logits.
#[derive(Module)]
pub struct CharGpt<B: Backend> {
    /// Character embeddings `(vocab, d_model)`.
    pub tok: Embedding<B>,
    /// Position embeddings `(context, d_model)`.
    pub pos: Embedding<B>,
    /// The blocks.
    pub blocks: CheckpointedSequential<B>,
    /// The final norm.
    pub ln_f: LayerNorm<B>,
    /// `d_model -> vocab`.
    pub head: Linear<B>,
}

impl<B: Backend> CharGpt<B> {
    /// A model initialised from `seed` (the same weights for every policy).
    pub fn new(c: &GptConfig, policy: Box<dyn CheckpointPolicy>, seed: u64) -> Result<Self> {
        Self::with_blocks(c, policy, seed, &|b| Ok(Box::new(b)))
    }

    /// [`CharGpt::new`] with each block passed through `wrap` (e.g. into
    /// its own fully sharded unit) as it is made.
    pub fn with_blocks(
        c: &GptConfig,
        policy: Box<dyn CheckpointPolicy>,
        seed: u64,
        wrap: &dyn Fn(CausalBlock<B>) -> Result<Box<dyn Module<B>>>,
    ) -> Result<Self> {
        fork_rng(seed, || {
            let block = TransformerEncoderLayerConfig::new(c.d_model, c.n_heads)
                .with_dim_feedforward(4 * c.d_model)
                .with_dropout(c.dropout)
                .with_activation(Activation::GELU)
                .with_norm_first(true);
            let mut blocks = Sequential::new();
            for _ in 0..c.n_layers {
                blocks.push(wrap(CausalBlock { layer: block.try_init()? })?);
            }
            // GPT-2's small embeddings: N(0, 0.02) rather than nn.Embedding's N(0, 1)
            let small = |rows: usize| -> Result<Embedding<B>> {
                let e = EmbeddingConfig::new(rows, c.d_model).try_init::<B>()?;
                no_grad(|| e.weight.tensor().try_mul_(&Tensor::full_dtype([], 0.02, DType::F32)))?;
                Ok(e)
            };
            Ok(CharGpt {
                tok: small(c.vocab)?,
                pos: small(c.context)?,
                blocks: CheckpointedSequential::new(blocks, policy),
                ln_f: LayerNorm::new(&[c.d_model]),
                head: Linear::new(c.d_model, c.vocab),
            })
        })
    }

    /// Logits `(N, T, vocab)` for character ids `(N, T)`, `T` at most the context.
    pub fn logits(&self, idx: &Tensor<B>) -> Result<Tensor<B>> {
        let t = idx.dims()[1];
        let pos = Tensor::<B>::try_arange_dtype(0.0, t as f64, 1.0, DType::I64)?;
        let x = self.tok.try_forward(idx)?.try_add(&self.pos.try_forward(&pos)?)?;
        self.head.try_forward(&self.ln_f.try_forward(&self.blocks.try_forward(&x)?)?)
    }

    /// Mean cross-entropy (nats) of predicting `targets` from `idx`, both `(N, T)`.
    pub fn loss(&self, idx: &Tensor<B>, targets: &Tensor<B>) -> Result<Tensor<B>> {
        let logits = self.logits(idx)?;
        let (n, v) = (targets.numel(), logits.dims()[2]);
        F::try_cross_entropy(
            &logits.try_reshape(&[n as isize, v as isize])?,
            &targets.try_reshape(&[n as isize])?,
            Reduction::Mean,
            &Default::default(),
        )
    }
}

impl<B: Backend> Module<B> for CharGpt<B> {
    /// Logits for character ids, as [`CharGpt::logits`].
    fn try_forward(&self, idx: &Tensor<B>) -> Result<Tensor<B>> {
        self.logits(idx)
    }
}

/// A small seeded generator (SplitMix64) for batch offsets and sampling, so
/// that runs repeat exactly and every policy sees the same batches.
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize
    }
}

/// `n` windows of `t + 1` characters of `ids` starting at `starts`, as
/// inputs and next-character targets `(n, t)`.
pub fn windows<B: Backend>(ids: &[i64], starts: &[usize], t: usize) -> Result<(Tensor<B>, Tensor<B>)> {
    let (mut x, mut y) = (Vec::with_capacity(starts.len() * t), Vec::with_capacity(starts.len() * t));
    for &s in starts {
        x.extend_from_slice(&ids[s..s + t]);
        y.extend_from_slice(&ids[s + 1..s + t + 1]);
    }
    Ok((Tensor::try_from_vec(x, [starts.len(), t])?, Tensor::try_from_vec(y, [starts.len(), t])?))
}

/// How to train.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    /// Optimizer steps.
    pub steps: usize,
    /// Sequences per step.
    pub batch_size: usize,
    /// Peak learning rate (AdamW).
    pub lr: f64,
    /// Learning rate at the end of the cosine decay.
    pub min_lr: f64,
    /// Linear warm-up steps.
    pub warmup: usize,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f64,
    /// Gradient norm clip.
    pub clip: f64,
    /// Validate every this many steps (and at the end).
    pub eval_every: usize,
    /// Validation windows (spread evenly over the held-out text).
    pub eval_windows: usize,
    /// Seed of the weights and the batches.
    pub seed: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            steps: 600,
            batch_size: 16,
            lr: 3e-3,
            min_lr: 3e-4,
            warmup: 30,
            weight_decay: 0.1,
            clip: 1.0,
            eval_every: 100,
            eval_windows: 64,
            seed: 0,
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainReport {
    /// The training loss of every step.
    pub losses: Vec<f32>,
    /// `(step, validation loss)` at each evaluation.
    pub val_losses: Vec<(usize, f64)>,
    /// Peak activation memory of a training step (forward and backward,
    /// parameter gradients left out), by the backend's counters.
    pub peak_activation_bytes: usize,
    /// Median seconds per training step.
    pub step_seconds: f64,
}

impl TrainReport {
    /// The last validation loss.
    pub fn final_val_loss(&self) -> f64 {
        self.val_losses.last().map_or(f64::NAN, |v| v.1)
    }
}

/// The mean validation loss over `windows` evenly spaced windows, in
/// evaluation mode without a graph.
pub fn validate<B: Backend>(model: &CharGpt<B>, corpus: &Corpus, ctx: usize, windows_n: usize, batch: usize) -> Result<f64> {
    if corpus.val.len() <= ctx + 1 {
        return Err(Error::msg(format!("char_gpt: the validation text is shorter than the context {ctx}")));
    }
    let span = corpus.val.len() - ctx - 1;
    let starts: Vec<usize> = (0..windows_n).map(|i| i * span / windows_n.max(1)).collect();
    model.eval();
    let mut total = 0.0;
    let result = no_grad(|| -> Result<()> {
        for chunk in starts.chunks(batch.max(1)) {
            let (x, y) = windows::<B>(&corpus.val, chunk, ctx)?;
            total += model.loss(&x, &y)?.try_item()? * chunk.len() as f64;
        }
        Ok(())
    });
    model.train();
    result?;
    Ok(total / starts.len().max(1) as f64)
}

/// AdamW's settings for `c` (betas 0.9, 0.95, as nanoGPT).
pub fn adamw_config(c: &TrainConfig) -> AdamWConfig {
    AdamWConfig { lr: c.lr, weight_decay: c.weight_decay, betas: (0.9, 0.95), ..Default::default() }
}

/// Linear warm-up from a tenth of the rate, then cosine decay to `min_lr`.
pub fn lr_schedule(c: &TrainConfig) -> Result<SequentialLR> {
    let warmup = c.warmup.min(c.steps.saturating_sub(1)).max(1);
    SequentialLR::new(
        vec![
            Box::new(LinearLR { start_factor: 0.1, end_factor: 1.0, total_iters: warmup }),
            Box::new(CosineAnnealingLR { t_max: c.steps.saturating_sub(warmup).max(1), eta_min: c.min_lr }),
        ],
        vec![warmup],
    )
}

/// Trains `model` on `corpus`: random windows of the model's context, AdamW
/// with linear warm-up and cosine decay, gradient clipping, validation
/// every `eval_every` steps. The first step runs under
/// [`activation_peak`] to measure its memory. `on_step(step, loss, val)`
/// reports progress.
pub fn train<B: Backend>(
    model: &CharGpt<B>,
    corpus: &Corpus,
    c: &TrainConfig,
    ctx: usize,
    mut on_step: impl FnMut(usize, f32, Option<f64>),
) -> Result<TrainReport> {
    if corpus.train.len() <= ctx + 1 || corpus.val.len() <= ctx + 1 {
        return Err(Error::msg(format!("char_gpt: the corpus is shorter than the context {ctx}")));
    }
    let params = model.parameters();
    let mut opt = AdamW::new(params.clone(), adamw_config(c))?;
    let mut sched = Scheduler::new(&mut opt, lr_schedule(c)?)?;
    let mut rng = Rng::new(c.seed ^ 0x5EED);
    let mut report = TrainReport { losses: Vec::new(), val_losses: Vec::new(), peak_activation_bytes: 0, step_seconds: 0.0 };
    let mut times = Vec::new();
    model.train();
    for step in 0..c.steps {
        let starts: Vec<usize> = (0..c.batch_size).map(|_| rng.below(corpus.train.len() - ctx - 1)).collect();
        let (x, y) = windows::<B>(&corpus.train, &starts, ctx)?;
        let start = Instant::now();
        let mut loss = 0.0f32;
        let mut fwd_bwd = || -> Result<()> {
            let l = model.loss(&x, &y)?;
            loss = l.try_item()? as f32;
            l.backward()
        };
        if step == 0 {
            report.peak_activation_bytes = activation_peak(&params, fwd_bwd)?.peak_bytes;
        } else {
            opt.zero_grad(true);
            fwd_bwd()?;
        }
        clip_grad_norm_(&params, c.clip, NormType::P(2.0), false)?;
        opt.step()?;
        if step + 1 < c.steps {
            sched.step(&mut opt)?;
        }
        times.push(start.elapsed().as_secs_f64());
        report.losses.push(loss);
        let val = if (step + 1) % c.eval_every.max(1) == 0 || step + 1 == c.steps {
            let v = validate(model, corpus, ctx, c.eval_windows, c.batch_size)?;
            report.val_losses.push((step + 1, v));
            Some(v)
        } else {
            None
        };
        on_step(step, loss, val);
    }
    times.sort_by(f64::total_cmp);
    report.step_seconds = times.get(times.len() / 2).copied().unwrap_or(0.0);
    Ok(report)
}

/// `n` characters sampled after `prompt` at `temperature`, from a seeded generator.
pub fn sample<B: Backend>(
    model: &CharGpt<B>,
    corpus: &Corpus,
    prompt: &str,
    n: usize,
    temperature: f64,
    ctx: usize,
    seed: u64,
) -> Result<String> {
    let mut ids = corpus.encode(prompt);
    if ids.is_empty() {
        ids.push(0);
    }
    let mut rng = Rng::new(seed);
    model.eval();
    let result = no_grad(|| -> Result<()> {
        for _ in 0..n {
            let window = &ids[ids.len().saturating_sub(ctx)..];
            let x = Tensor::<B>::try_from_vec(window.to_vec(), [1, window.len()])?;
            let logits = model.logits(&x)?;
            let last = logits.try_narrow(1, window.len() - 1, 1)?.try_div_scalar(temperature.max(1e-6))?.try_softmax(-1)?;
            let probs = last.to_vec_f64();
            let u = rng.uniform();
            let mut acc = 0.0;
            let next = probs.iter().position(|p| {
                acc += p;
                acc > u
            });
            ids.push(next.unwrap_or(probs.len() - 1) as i64);
        }
        Ok(())
    });
    model.train();
    result?;
    Ok(corpus.decode(&ids))
}

/// A policy by name: `none`, `sqrt`, or `every-K` (a checkpoint every `K` blocks).
///
/// ```
/// use examples::char_gpt::policy;
/// assert!(policy("every-2").is_ok() && policy("sqrt").is_ok() && policy("none").is_ok());
/// assert!(policy("every-0").is_err() && policy("most").is_err());
/// ```
pub fn policy(name: &str) -> Result<Box<dyn CheckpointPolicy>> {
    match name {
        "none" => Ok(Box::new(NoCheckpoint)),
        "sqrt" => Ok(Box::new(Sqrt)),
        _ => match name.strip_prefix("every-").and_then(|k| k.parse::<usize>().ok()) {
            Some(k) if k > 0 => Ok(Box::new(EveryK(k))),
            _ => Err(Error::msg(format!("char_gpt: unknown checkpoint policy {name:?} (none, sqrt, every-K)"))),
        },
    }
}
