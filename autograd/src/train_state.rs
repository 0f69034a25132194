//! One resumable training state: model, optimizer, LR scheduler, the global
//! generator and the data loader's position, saved together.

use autograd_core::rng::Generator;
use autograd_core::{Backend, Error, Result};
use autograd_data::LoaderState;
use autograd_nn::{LoadOptions, ModuleExt};
use autograd_optim::{GradScaler, GradScalerState, Optimizer, OptimizerState, Scheduler};
use autograd_tensor::{Tensor, load_safetensors, no_grad, rng_state, save_safetensors, set_rng_state};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

const FORMAT: &str = "autograd-train-state/1";
/// Prefixes of the model's and the optimizer's entries (tensors and metadata).
const MODEL: &str = "model.";
const OPTIMIZER: &str = "optimizer.";

/// Everything a run needs to continue exactly where it stopped: the model's
/// state dict, the optimizer's state, the scheduler's epoch, the global
/// generator (dropout, initialisers) and where the data loader stands.
/// Saved as one safetensors file (`model.*` and `optimizer.*` tensors, the
/// rest as JSON in the header's metadata), atomically. Restoring validates
/// everything before anything changes: a bad or mismatched file is an `Err`
/// and the model, optimizer, scheduler and generator stay as they were.
///
/// ```
/// use autograd::prelude::*;
/// use autograd::data::LoaderState;
/// let model = Linear::<Cpu>::new(2, 1);
/// let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.1, ..Default::default() })?;
/// let loader = LoaderState { epoch: 3, batch: 2, rng: None };
/// let path = std::env::temp_dir().join(format!("train-state-doc-{}.safetensors", std::process::id()));
/// TrainState::capture(&model, &opt, None, Some(loader.clone()), 17).save(&path)?;
///
/// let mut fresh = Linear::<Cpu>::new(2, 1);
/// let mut opt2 = Sgd::new(fresh.parameters(), SgdConfig { lr: 0.5, ..Default::default() })?;
/// let state = TrainState::<Cpu>::load(&path)?;
/// state.restore(&mut fresh, &mut opt2, None)?;
/// assert_eq!(fresh.weight.tensor().to_vec::<f32>(), model.weight.tensor().to_vec::<f32>());
/// assert_eq!((state.step, state.loader, opt2.lr()), (17, Some(loader), 0.1));
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TrainState<B: Backend> {
    /// The model's state dict (parameters and buffers).
    pub model: BTreeMap<String, Tensor<B>>,
    /// The optimizer's state dict.
    pub optimizer: OptimizerState<B>,
    /// The scheduler's epoch, if the run has a scheduler.
    pub scheduler_epoch: Option<usize>,
    /// The global generator ([`autograd_tensor::rng_state`]).
    pub rng: Generator,
    /// Where the data loader stands, if the run has one.
    pub loader: Option<LoaderState>,
    /// The caller's step counter.
    pub step: u64,
    /// The loss scaler's state, if the run has one
    /// ([`TrainState::with_grad_scaler`]).
    pub grad_scaler: Option<GradScalerState>,
}

impl<B: Backend> TrainState<B> {
    /// Takes a snapshot of a run (tensors are copied: later steps do not change it).
    pub fn capture<M: ModuleExt<B> + ?Sized, O: Optimizer<B> + ?Sized>(
        model: &M,
        optimizer: &O,
        scheduler: Option<&Scheduler>,
        loader: Option<LoaderState>,
        step: u64,
    ) -> Self {
        let model = model.state_dict().into_iter().map(|(n, t)| (n, t.deep_clone())).collect();
        TrainState {
            model,
            optimizer: optimizer.state_dict(),
            scheduler_epoch: scheduler.map(Scheduler::epoch),
            rng: rng_state(),
            loader,
            step,
            grad_scaler: None,
        }
    }

    /// The snapshot with a loss scaler's state (f16 training): saved with
    /// the optimizer's, put back by [`TrainState::restore_grad_scaler`].
    pub fn with_grad_scaler(self, scaler: &GradScaler) -> Self {
        TrainState { grad_scaler: Some(scaler.state_dict()), ..self }
    }

    /// Puts the loss scaler back (an `Err` changing nothing if the saved
    /// run had none, or its state is invalid).
    pub fn restore_grad_scaler(&self, scaler: &mut GradScaler) -> Result<()> {
        let state = self.grad_scaler.as_ref().ok_or_else(|| Error::msg("TrainState: the saved run has no GradScaler state"))?;
        scaler.load_state_dict(state)
    }

    /// Writes the state to `path` (atomically: a crash leaves the old file).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let mut meta: HashMap<String, String> =
            self.optimizer.metadata()?.into_iter().map(|(k, v)| (format!("{OPTIMIZER}{k}"), v)).collect();
        meta.insert("format".to_string(), FORMAT.to_string());
        meta.insert("scheduler_epoch".to_string(), json!(self.scheduler_epoch).to_string());
        meta.insert("rng".to_string(), json!(self.rng.state()).to_string());
        let loader = self.loader.as_ref().map(|l| json!({"epoch": l.epoch, "batch": l.batch, "rng": l.rng}));
        meta.insert("loader".to_string(), json!(loader).to_string());
        meta.insert("step".to_string(), self.step.to_string());
        if let Some(s) = &self.grad_scaler {
            let pairs: serde_json::Map<String, Value> = s.to_pairs().into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
            meta.insert("grad_scaler".to_string(), Value::Object(pairs).to_string());
        }
        let names: Vec<(String, &Tensor<B>)> = self
            .model
            .iter()
            .map(|(n, t)| (format!("{MODEL}{n}"), t))
            .chain(self.optimizer.tensors.iter().map(|(n, t)| (format!("{OPTIMIZER}{n}"), t)))
            .collect();
        let named: Vec<(&str, &Tensor<B>)> = names.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        save_safetensors(&named, &meta, path)
    }

    /// Reads a state written by [`TrainState::save`]; a missing or malformed
    /// piece is an `Err` naming the file and the piece.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = load_safetensors::<B>(path)?;
        let bad = |what: String| Error::Format(format!("{}: not a training state: {what}", path.display()));
        let get = |k: &str| file.metadata.get(k).ok_or_else(|| bad(format!("metadata has no `{k}`")));
        let parse = |k: &str| -> Result<Value> { serde_json::from_str(get(k)?).map_err(|e| bad(format!("{k}: {e}"))) };
        let field = |v: &Value, k: &str| -> Result<Value> { v.get(k).cloned().ok_or_else(|| bad(format!("loader has no `{k}`"))) };
        if get("format")? != FORMAT {
            return Err(bad(format!("format {:?}, expected {FORMAT:?}", get("format")?)));
        }
        let scheduler_epoch: Option<usize> =
            serde_json::from_value(parse("scheduler_epoch")?).map_err(|e| bad(format!("scheduler_epoch: {e}")))?;
        let rng: [u64; 4] = serde_json::from_value(parse("rng")?).map_err(|e| bad(format!("rng: {e}")))?;
        let loader = match parse("loader")? {
            Value::Null => None,
            v => Some(LoaderState {
                epoch: serde_json::from_value(field(&v, "epoch")?).map_err(|e| bad(format!("loader epoch: {e}")))?,
                batch: serde_json::from_value(field(&v, "batch")?).map_err(|e| bad(format!("loader batch: {e}")))?,
                rng: serde_json::from_value(field(&v, "rng")?).map_err(|e| bad(format!("loader rng: {e}")))?,
            }),
        };
        let step: u64 = get("step")?.parse().map_err(|e| bad(format!("step: {e}")))?;
        // optional: files from runs without a scaler have none
        let grad_scaler = match file.metadata.get("grad_scaler") {
            None => None,
            Some(_) => {
                let v = parse("grad_scaler")?;
                let state = GradScalerState::from_pairs(|k| v.get(k).and_then(Value::as_f64));
                Some(state.map_err(|e| bad(format!("grad_scaler: {e}")))?)
            }
        };
        let (mut model, mut tensors) = (BTreeMap::new(), BTreeMap::new());
        for (name, t) in file.tensors {
            if let Some(n) = name.strip_prefix(MODEL) {
                model.insert(n.to_string(), t);
            } else if let Some(n) = name.strip_prefix(OPTIMIZER) {
                tensors.insert(n.to_string(), t);
            } else {
                return Err(bad(format!("tensor `{name}` belongs to neither the model nor the optimizer")));
            }
        }
        let opt_meta: HashMap<String, String> =
            file.metadata.iter().filter_map(|(k, v)| k.strip_prefix(OPTIMIZER).map(|k| (k.to_string(), v.clone()))).collect();
        let optimizer = OptimizerState::from_metadata(&opt_meta, tensors, &path.display().to_string())?;
        Ok(TrainState { model, optimizer, scheduler_epoch, rng: Generator::from_state(rng), loader, step, grad_scaler })
    }

    /// Puts the run back: the model's parameters and buffers (strictly), the
    /// optimizer's state, the scheduler's epoch (and so the learning rate)
    /// and the global generator. The loader is resumed by the caller with
    /// [`autograd_data::DataLoader::resume`] on [`TrainState::loader`].
    /// All or nothing: on `Err` everything is as before.
    pub fn restore<M: ModuleExt<B> + ?Sized, O: Optimizer<B>>(
        &self,
        model: &mut M,
        optimizer: &mut O,
        scheduler: Option<&mut Scheduler>,
    ) -> Result<()> {
        if scheduler.is_some() != self.scheduler_epoch.is_some() {
            return Err(Error::msg("TrainState::restore: the saved run and this one disagree on having a scheduler"));
        }
        // The model load validates everything before writing; keep a copy so
        // that an optimizer state that does not fit can undo it.
        let before: BTreeMap<String, Tensor<B>> = model.state_dict().into_iter().map(|(n, t)| (n, t.deep_clone())).collect();
        model.load_state_dict(&self.model, LoadOptions::default())?;
        if let Err(e) = optimizer.load_state_dict(&self.optimizer) {
            no_grad(|| model.load_state_dict(&before, LoadOptions::default()))?;
            return Err(e);
        }
        if let (Some(s), Some(epoch)) = (scheduler, self.scheduler_epoch) {
            s.set_epoch(optimizer, epoch);
        }
        set_rng_state(self.rng.clone());
        Ok(())
    }
}
