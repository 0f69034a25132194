//! The same training steps run eagerly and compiled (`autograd::jit`): the
//! delivery-time MLP, digits with dropout, the Greeks, a checkpointed MLP.
//! Each step is written once, generic over the backend; the eager run uses
//! `B`, the compiled one `Traced<B>` wrapped in `compile`.

use crate::bazarghar::load_problem;
use crate::digits::{Digits, Recipe};
use crate::greeks::{Market, call_price};
use autograd::checkpoint::{CheckpointedSequential, EveryK};
use autograd::jit::{CompiledStep, Program, StepFn, Traced, compile};
use autograd::prelude::*;
use autograd::tensor::fork_rng;
use autograd::tensor::functional::try_cross_entropy;
use std::time::Instant;

/// What a run produced: the loss of every step, the final parameters, the
/// wall time of the steps, and (compiled) the program printed.
#[derive(Clone, Debug)]
pub struct Run {
    /// Per step (digits: per batch).
    pub losses: Vec<f64>,
    /// Every parameter's values after the run, in `parameters()` order.
    pub params: Vec<Vec<f64>>,
    /// Seconds spent in the steps (digits: training only, not evaluation).
    pub seconds: f64,
    /// Seconds of the first compiled call with each input signature (trace
    /// and passes), summed; 0 for eager runs.
    pub compile_seconds: f64,
    /// The compiled programs, printed; empty for eager runs.
    pub programs: Vec<String>,
}

fn values<B: Backend>(params: &[Tensor<B>]) -> Vec<Vec<f64>> {
    params.iter().map(|p| p.to_vec_f64()).collect()
}

fn printed<B: Backend, F: StepFn<B>>(step: &CompiledStep<B, F>) -> Vec<String> {
    step.programs().map(|p: &Program<B>| p.to_string()).collect()
}

/// One step of the delivery-time MLP with SGD: zero_grad, loss, backward, step.
fn bazarghar_step<B: Backend>(x: &Tensor<B>, y: &Tensor<B>, w: &[Tensor<B>], opt: &mut Sgd<B>) -> Result<Tensor<B>> {
    opt.zero_grad(true);
    let h = x.try_matmul(&w[0])?.try_add(&w[1])?.try_relu()?;
    let pred = h.try_matmul(&w[2])?.try_add(&w[3])?;
    let loss = pred.try_sub(y)?.try_powf(2.0)?.try_mean()?;
    loss.backward()?;
    opt.step()?;
    Ok(loss)
}

/// The delivery-time MLP (2-16-1, f64, 200 samples, full batch) trained
/// `steps` times with SGD lr 0.01 on `B`, eagerly.
///
/// ```
/// use autograd::prelude::*;
/// let eager = examples::compiled::bazarghar_eager::<Cpu>(5).unwrap();
/// let compiled = examples::compiled::bazarghar_compiled::<Cpu>(5).unwrap();
/// assert_eq!(eager.losses, compiled.losses);
/// assert_eq!(eager.params, compiled.params);
/// ```
pub fn bazarghar_eager<B: Backend>(steps: usize) -> Result<Run> {
    let p = load_problem::<B>()?;
    let w: Vec<Tensor<B>> = crate::bazarghar::fresh_params(&p).to_vec();
    let mut opt = Sgd::new(w.clone(), SgdConfig { lr: 0.01, ..Default::default() })?;
    let start = Instant::now();
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        losses.push(bazarghar_step(&p.x, &p.y, &w, &mut opt)?);
    }
    let seconds = start.elapsed().as_secs_f64();
    let losses = losses.iter().map(|l| l.try_item()).collect::<Result<_>>()?;
    Ok(Run { losses, params: values(&w), seconds, compile_seconds: 0.0, programs: vec![] })
}

/// [`bazarghar_eager`] compiled: the same step on `Traced<B>` in `compile`.
pub fn bazarghar_compiled<B: Backend>(steps: usize) -> Result<Run> {
    let p = load_problem::<Traced<B>>()?;
    let w: Vec<Tensor<Traced<B>>> = crate::bazarghar::fresh_params(&p).to_vec();
    let mut opt = Sgd::new(w.clone(), SgdConfig { lr: 0.01, ..Default::default() })?;
    let mut step = compile(|b: &[Tensor<Traced<B>>]| Ok(vec![bazarghar_step(&b[0], &b[1], &w, &mut opt)?]));
    let batch = [p.x.clone(), p.y.clone()];
    let (mut losses, mut compile_seconds) = (Vec::with_capacity(steps), 0.0);
    let start = Instant::now();
    for i in 0..steps {
        let t = Instant::now();
        losses.push(step.run(&batch)?.remove(0));
        if i == 1 {
            compile_seconds += t.elapsed().as_secs_f64();
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let programs = printed(&step);
    drop(step);
    let losses = losses.iter().map(|l| l.try_item()).collect::<Result<_>>()?;
    Ok(Run { losses, params: values(&w), seconds, compile_seconds, programs })
}

/// The digits MLP of [`crate::digits`] with a `Dropout(0.1)` after the
/// hidden layer: 64-128-10, seeded.
pub fn digits_model<B: Backend>(seed: u64) -> Sequential<B> {
    fork_rng(seed, || {
        Sequential::new()
            .add(LinearConfig::new(64, 128).init::<B>())
            .add(ReLU)
            .add(Dropout::new(0.1))
            .add(LinearConfig::new(128, 10).init::<B>())
    })
}

fn digits_step<B: Backend>(model: &Sequential<B>, opt: &mut Adam<B>, x: &Tensor<B>, y: &Tensor<B>) -> Result<Tensor<B>> {
    opt.zero_grad(true);
    let loss = try_cross_entropy(&model.try_forward(x)?, y, Reduction::Mean, &Default::default())?;
    loss.backward()?;
    opt.step()?;
    Ok(loss)
}

/// Digits with dropout, Adam, `recipe.epochs` epochs, eagerly; dropout
/// draws from the global generator, seeded with `recipe.seed` first.
pub fn digits_eager<B: Backend>(data: &Digits<B>, recipe: &Recipe) -> Result<Run> {
    let model = digits_model::<B>(recipe.seed);
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: recipe.lr, ..Default::default() })?;
    let mut loader =
        DataLoader::new(TensorDataset::new(vec![data.train.0.clone(), data.train.1.clone()])?, recipe.batch_size).shuffle(recipe.seed);
    manual_seed(recipe.seed);
    let (mut losses, mut seconds) = (Vec::new(), 0.0);
    for _ in 0..recipe.epochs {
        let start = Instant::now();
        let epoch: Vec<Tensor<B>> = loader.epoch().map(|b| digits_step(&model, &mut opt, &b[0], &b[1])).collect::<Result<_>>()?;
        seconds += start.elapsed().as_secs_f64();
        losses.extend(epoch.iter().map(|l| l.item()));
    }
    Ok(Run { losses, params: values(&model.parameters()), seconds, compile_seconds: 0.0, programs: vec![] })
}

/// [`digits_eager`] compiled (two input signatures: full batches and the
/// last, shorter one).
pub fn digits_compiled<B: Backend>(data: &Digits<Traced<B>>, recipe: &Recipe) -> Result<Run> {
    let model = digits_model::<Traced<B>>(recipe.seed);
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: recipe.lr, ..Default::default() })?;
    let mut loader =
        DataLoader::new(TensorDataset::new(vec![data.train.0.clone(), data.train.1.clone()])?, recipe.batch_size).shuffle(recipe.seed);
    let mut step = compile(|b: &[Tensor<Traced<B>>]| Ok(vec![digits_step(&model, &mut opt, &b[0], &b[1])?]));
    manual_seed(recipe.seed);
    let (mut losses, mut seconds, mut compile_seconds) = (Vec::new(), 0.0, 0.0);
    for _ in 0..recipe.epochs {
        let start = Instant::now();
        let mut epoch = Vec::new();
        for b in loader.epoch() {
            let traced = step.counts().traced;
            let t = Instant::now();
            epoch.push(step.run(&b)?.remove(0));
            if step.counts().traced > traced {
                compile_seconds += t.elapsed().as_secs_f64();
            }
        }
        seconds += start.elapsed().as_secs_f64();
        losses.extend(epoch.iter().map(|l| l.item()));
    }
    let programs = printed(&step);
    drop(step);
    Ok(Run { losses, params: values(&model.parameters()), seconds, compile_seconds, programs })
}

/// Price and the six Greeks of [`crate::greeks`] as one step: inputs the
/// five market scalars, outputs the price, delta, vega, rho, theta, gamma
/// and vanna (second order by `create_graph`).
pub fn greeks_step<B: Backend>(m: &[Tensor<B>]) -> Result<Vec<Tensor<B>>> {
    let leaf = |t: &Tensor<B>| t.detach().requires_grad_(true);
    let (s, k, r, sigma, t) = (leaf(&m[0]), leaf(&m[1]), leaf(&m[2]), leaf(&m[3]), leaf(&m[4]));
    let c = call_price(&s, &k, &r, &sigma, &t);
    let opts = GradOptions { retain_graph: true, create_graph: true, ..Default::default() };
    let g = autograd::grad(std::slice::from_ref(&c), &[s.clone(), sigma.clone(), r.clone(), t.clone()], None, opts)?;
    let first = |i: usize| g[i].clone().ok_or_else(|| Error::msg("greeks: an input is unused"));
    let second = autograd::grad(&[first(0)?], &[s.clone(), sigma.clone()], None, GradOptions::default())?;
    let second = |i: usize| second[i].clone().ok_or_else(|| Error::msg("greeks: an input is unused"));
    Ok(vec![c.detach(), first(0)?, first(1)?, first(2)?, first(3)?.try_neg()?, second(0)?, second(1)?])
}

/// The market as the five scalar inputs of [`greeks_step`].
pub fn market_inputs<B: Backend>(m: Market) -> Vec<Tensor<B>> {
    [m.s, m.k, m.r, m.sigma, m.t].iter().map(|&v| Tensor::<B>::scalar(v)).collect()
}

/// A 4-block MLP (width 32, f64) whose blocks are recomputed in backward
/// (`EveryK(1)`), trained with Adam; returns losses and parameters.
pub fn checkpointed_model<B: Backend>(seed: u64) -> CheckpointedSequential<B> {
    let seq = fork_rng(seed, || {
        let mut s = Sequential::new();
        for i in 0..4 {
            let (i_, o) = (if i == 0 { 8 } else { 32 }, if i == 3 { 1 } else { 32 });
            s = s.add(LinearConfig::new(i_, o).with_dtype(DType::F64).init::<B>());
            if i < 3 {
                s = s.add(Tanh);
            }
        }
        s
    });
    CheckpointedSequential::new(seq, EveryK(1))
}

/// One step of [`checkpointed_model`] on `(x, y)` with `opt`.
pub fn checkpointed_step<B: Backend>(
    model: &CheckpointedSequential<B>,
    opt: &mut Adam<B>,
    x: &Tensor<B>,
    y: &Tensor<B>,
) -> Result<Tensor<B>> {
    opt.zero_grad(true);
    let loss = F::try_mse_loss(&model.try_forward(x)?, y, Reduction::Mean)?;
    loss.backward()?;
    opt.step()?;
    Ok(loss)
}
