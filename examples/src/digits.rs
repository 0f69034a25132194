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
    on_batch: impl FnMut(usize, usize, usize),
    on_epoch: impl FnMut(usize, &EpochStats),
) -> Result<Trained<B>> {
    let model = fork_rng(recipe.seed, || MlpConfig::new(&[64, 128, 10]).init::<B>());
    train_model(model, data, recipe, on_batch, on_epoch)
}

/// A LeNet-like network for the 8x8 images: the flat pixels unflattened to
/// `[1, 8, 8]`, two 3x3 convolutions (16 and 32 channels, padding 1) each
/// followed by ReLU and 2x2 max pooling, then a 128-64-10 MLP.
///
/// ```
/// use autograd::prelude::*;
/// let net = examples::digits::lenet::<RefBackend>();
/// assert_eq!(net.forward(&Tensor::zeros([5, 64])).dims(), &[5, 10]);
/// ```
pub fn lenet<B: Backend>() -> Sequential<B> {
    Sequential::new()
        .add(Unflatten { dim: 1, sizes: vec![1, 8, 8] })
        .add(Conv2dConfig::new(1, 16, [3, 3]).with_padding([1, 1]).init::<B>())
        .add(ReLU)
        .add(MaxPool2d::new(&[2]))
        .add(Conv2dConfig::new(16, 32, [3, 3]).with_padding([1, 1]).init::<B>())
        .add(ReLU)
        .add(MaxPool2d::new(&[2]))
        .add(Flatten::default())
        .add(Linear::new(128, 64))
        .add(ReLU)
        .add(Linear::new(64, 10))
}

/// The recipe for [`lenet`]: Adam lr 3e-3, batch 32, 20 epochs (PyTorch
/// with this network and recipe: 97.6% mean test accuracy over seeds 0-4).
pub fn lenet_recipe() -> Recipe {
    Recipe { epochs: 20, lr: 3e-3, ..Recipe::default() }
}

/// Trains the convolutional [`lenet`] with `recipe` (initialised from its seed).
pub fn train_lenet<B: Backend>(
    data: &Digits<B>,
    recipe: &Recipe,
    on_batch: impl FnMut(usize, usize, usize),
    on_epoch: impl FnMut(usize, &EpochStats),
) -> Result<Trained<B>> {
    let model = fork_rng(recipe.seed, lenet::<B>);
    train_model(model, data, recipe, on_batch, on_epoch)
}

/// Trains `model` with `recipe`, calling `on_batch(epoch, batch, batches)`
/// after each step and `on_epoch(epoch, stats)` after each epoch.
pub fn train_model<B: Backend>(
    model: Sequential<B>,
    data: &Digits<B>,
    recipe: &Recipe,
    mut on_batch: impl FnMut(usize, usize, usize),
    mut on_epoch: impl FnMut(usize, &EpochStats),
) -> Result<Trained<B>> {
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

/// Which network [`cli`] trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// The MLP 64-128-10 with [`Recipe::default`].
    Mlp,
    /// The convolutional [`lenet`] with [`lenet_recipe`].
    Lenet,
}

/// The `digits` and `digits_cnn` examples: trains `network` with its
/// recipe (`--seed N` and `--epochs N` from the command line change it) on
/// the backend `--device cpu|wgpu` names, printing a progress bar per epoch
/// (a line per epoch when not on a terminal), the test accuracy, the
/// confusion matrix and the training time.
pub fn cli(network: Network) -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    crate::device::run_on(crate::device::Device::from_args(&args)?, Cli { network, args })
}

/// [`cli`]'s work on a backend.
struct Cli {
    network: Network,
    args: Vec<String>,
}

impl crate::device::OnDevice for Cli {
    type Output = ();
    fn run<B: Backend>(self) -> Result<()> {
        cli_on::<B>(self.network, &self.args)
    }
}

#[allow(clippy::print_stdout)] // printing is what an example is for
fn cli_on<B: Backend>(network: Network, args: &[String]) -> Result<()> {
    use indicatif::{ProgressBar, ProgressStyle};
    let data = load_digits::<B>()?;
    fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|s| s.parse().ok())
    }
    let base = match network {
        Network::Mlp => Recipe::default(),
        Network::Lenet => lenet_recipe(),
    };
    let recipe = Recipe { seed: arg(args, "--seed").unwrap_or(0), epochs: arg(args, "--epochs").unwrap_or(base.epochs), ..base };
    let what = match network {
        Network::Mlp => "MLP 64-128-10 (ReLU)",
        Network::Lenet => "LeNet-like CNN (conv 3x3 16, pool, conv 3x3 32, pool, MLP 128-64-10)",
    };
    println!(
        "digits: {} training / {} test images, {what}, Adam lr {}, batch {}, {} epochs, f32 on {}",
        data.train.0.dims()[0],
        data.test.0.dims()[0],
        recipe.lr,
        recipe.batch_size,
        recipe.epochs,
        B::NAME
    );
    let style = ProgressStyle::with_template("epoch {prefix:>2} [{bar:30}] {pos:>2}/{len} batches {msg}")
        .expect("a valid template")
        .progress_chars("=> ");
    let bar: std::cell::RefCell<Option<ProgressBar>> = Default::default();
    let on_batch = |epoch: usize, batch: usize, batches: usize| {
        let mut slot = bar.borrow_mut();
        let b = slot.get_or_insert_with(|| {
            let b = ProgressBar::new(batches as u64).with_style(style.clone());
            b.set_prefix(format!("{}", epoch + 1));
            b
        });
        b.set_position(batch as u64);
    };
    let on_epoch = |epoch: usize, stats: &EpochStats| {
        let msg = format!("loss {:.4}  test accuracy {:.2}%", stats.train_loss, 100.0 * stats.test_accuracy);
        if let Some(b) = bar.borrow_mut().take() {
            if b.is_hidden() {
                // Not a terminal (CI, a pipe): a plain line per epoch instead of the bar.
                println!("epoch {:>2} {msg}", epoch + 1);
            }
            b.finish_with_message(msg);
        }
    };
    let start = std::time::Instant::now();
    let trained = match network {
        Network::Mlp => train(&data, &recipe, on_batch, on_epoch)?,
        Network::Lenet => train_lenet(&data, &recipe, on_batch, on_epoch)?,
    };
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
