//! scikit-learn's 8x8 digits with an MLP 64-128-10: Adam, mini-batches from
//! a seeded [`DataLoader`], the data set's fixed stratified 80/20 split.

use crate::data::{data_dir, load};
use autograd::prelude::*;
use autograd::tensor::autocast::autocast;
use autograd::tensor::fork_rng;
use autograd::tensor::functional::try_cross_entropy;

/// The data set split into training and test parts.
pub struct Digits<B: Backend> {
    /// Training images (1437 x 64, pixels / 16) and labels.
    pub train: (Tensor<B>, Tensor<B>),
    /// Test images (360 x 64) and labels.
    pub test: (Tensor<B>, Tensor<B>),
}

/// Loads `examples/data/digits.safetensors` and applies its stored split.
///
/// ```
/// let d = examples::digits::load_digits::<autograd::prelude::RefBackend>().unwrap();
/// assert_eq!((d.train.0.dims(), d.test.0.dims()), (&[1437, 64][..], &[360, 64][..]));
/// ```
pub fn load_digits<B: Backend>() -> Result<Digits<B>> {
    let t = load::<B>(&data_dir().join("digits.safetensors"))?;
    let get = |k: &str| t.get(k).cloned().ok_or_else(|| Error::Format(format!("digits.safetensors: missing {k}")));
    let (x, y) = (get("X")?, get("y")?);
    let part = |idx: &Tensor<B>| -> Result<(Tensor<B>, Tensor<B>)> { Ok((x.try_index_select(0, idx)?, y.try_index_select(0, idx)?)) };
    Ok(Digits { train: part(&get("train_idx")?)?, test: part(&get("test_idx")?)? })
}

/// The training recipe.
#[derive(Clone, Debug)]
pub struct Recipe {
    /// Epochs over the training set.
    pub epochs: usize,
    /// Mini-batch size.
    pub batch_size: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// Seed of the initialisation and of the shuffling.
    pub seed: u64,
    /// Forward and loss under `autocast` of this dtype (BF16, F16), the
    /// weights staying f32; `None`: plain f32.
    pub autocast: Option<DType>,
}

impl Default for Recipe {
    /// The issue's recipe: 30 epochs, batch 32, Adam lr 1e-3.
    fn default() -> Self {
        Recipe { epochs: 30, batch_size: 32, lr: 1e-3, seed: 0, autocast: None }
    }
}

/// What one epoch did.
#[derive(Clone, Debug)]
pub struct EpochStats {
    /// Mean training loss over the epoch's batches.
    pub train_loss: f64,
    /// Test accuracy after the epoch.
    pub test_accuracy: f64,
}

/// The trained model and its evaluation.
pub struct Trained<B: Backend> {
    /// The MLP.
    pub model: Sequential<B>,
    /// Per-epoch statistics.
    pub epochs: Vec<EpochStats>,
    /// `confusion[true][predicted]` counts on the test set.
    pub confusion: [[usize; 10]; 10],
    /// Final test accuracy.
    pub test_accuracy: f64,
}

/// Predicted classes for `x`.
pub fn predict<B: Backend>(model: &Sequential<B>, x: &Tensor<B>) -> Vec<i64> {
    no_grad(|| model.forward(x).max_dim(-1, false).1.to_vec::<i64>())
}

fn evaluate<B: Backend>(model: &Sequential<B>, x: &Tensor<B>, y: &Tensor<B>) -> ([[usize; 10]; 10], f64) {
    let mut confusion = [[0usize; 10]; 10];
    let pred = predict(model, x);
    let truth = y.to_vec::<i64>();
    for (t, p) in truth.iter().zip(&pred) {
        confusion[*t as usize][*p as usize] += 1;
    }
    let correct: usize = (0..10).map(|i| confusion[i][i]).sum();
    (confusion, correct as f64 / truth.len() as f64)
}

/// Trains with `recipe`, calling `on_batch(epoch, batch, batches)` after each
/// step (for a progress bar) and `on_epoch(epoch, stats)` after each epoch.
pub fn train<B: Backend>(
    data: &Digits<B>,
    recipe: &Recipe,
    mut on_batch: impl FnMut(usize, usize, usize),
    mut on_epoch: impl FnMut(usize, &EpochStats),
) -> Result<Trained<B>> {
    let model = fork_rng(recipe.seed, || MlpConfig::new(&[64, 128, 10]).init::<B>());
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: recipe.lr, ..Default::default() })?;
    let mut loader =
        DataLoader::new(TensorDataset::new(vec![data.train.0.clone(), data.train.1.clone()])?, recipe.batch_size).shuffle(recipe.seed);
    let batches = loader.num_batches();
    let mut epochs = Vec::with_capacity(recipe.epochs);
    // The evaluation after the last epoch is the final one.
    let (mut confusion, mut test_accuracy) = ([[0usize; 10]; 10], 0.0);
    for epoch in 0..recipe.epochs {
        let mut total = 0.0;
        for (i, batch) in loader.epoch().enumerate() {
            opt.zero_grad(true);
            let forward = || try_cross_entropy(&model.try_forward(&batch[0])?, &batch[1], Reduction::Mean, &Default::default());
            let loss = match recipe.autocast {
                Some(dtype) => autocast(dtype, forward)?,
                None => forward()?,
            };
            loss.backward()?;
            opt.step()?;
            total += loss.item();
            on_batch(epoch, i + 1, batches);
        }
        let (c, acc) = evaluate(&model, &data.test.0, &data.test.1);
        (confusion, test_accuracy) = (c, acc);
        let stats = EpochStats { train_loss: total / batches as f64, test_accuracy: acc };
        on_epoch(epoch, &stats);
        epochs.push(stats);
    }
    if recipe.epochs == 0 {
        (confusion, test_accuracy) = evaluate(&model, &data.test.0, &data.test.1);
    }
    Ok(Trained { model, epochs, confusion, test_accuracy })
}
