//! Optimizer state dicts: hyper-parameters as JSON, buffers as tensors,
//! saved together in one safetensors file (tensors plus `__metadata__`).

use autograd_core::{Backend, Error, Result};
use autograd_tensor::{Tensor, load_safetensors, no_grad, save_safetensors};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::optimizer::{Optim, OptimizerConfig, ParamState};

/// A snapshot of an optimizer (PyTorch's `optimizer.state_dict()`):
/// parameters are numbered across groups in order; buffers are named
/// `state.<index>.<buffer>` (`state.3.exp_avg`).
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_optim::{Adam, AdamConfig, Optimizer};
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [2]).requires_grad_(true);
/// let mut opt = Adam::new(vec![w.clone()], AdamConfig::default()).unwrap();
/// (&w * &w).sum().backward().unwrap();
/// opt.step().unwrap();
/// let sd = opt.state_dict();
/// assert_eq!(sd.steps, vec![Some(1)]);
/// assert!(sd.tensors.contains_key("state.0.exp_avg_sq"));
/// ```
#[derive(Clone, Debug)]
pub struct OptimizerState<B: Backend> {
    /// PyTorch's class name of the optimizer (`"Adam"`).
    pub optimizer: String,
    /// Per group: its hyper-parameters and the indices of its parameters.
    pub param_groups: Vec<GroupRecord>,
    /// Updates each parameter received; `None` for parameters without state.
    pub steps: Vec<Option<u64>>,
    /// State buffers by name.
    pub tensors: BTreeMap<String, Tensor<B>>,
}

/// One parameter group in a state dict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// The group's hyper-parameters, as the config's JSON.
    pub config: serde_json::Value,
    /// Indices of its parameters (numbered across groups).
    pub params: Vec<usize>,
}

const FORMAT: &str = "autograd-optim/1";

impl<B: Backend> OptimizerState<B> {
    /// Writes the state as safetensors; hyper-parameters and step counts go
    /// to the header's metadata as JSON. Atomic, like model saves.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let named: Vec<(&str, &Tensor<B>)> = self.tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        save_safetensors(&named, &self.metadata()?, path)
    }

    /// Reads a state written by [`OptimizerState::save`]; any missing or
    /// malformed piece is an `Err` naming the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = load_safetensors::<B>(path)?;
        Self::from_metadata(&file.metadata, file.tensors.into_iter().collect(), &path.display().to_string())
    }

    /// Everything but the buffers, as string metadata (what [`OptimizerState::save`]
    /// puts in the header; a training state embeds it under a prefix).
    pub fn metadata(&self) -> Result<HashMap<String, String>> {
        let mut meta = HashMap::new();
        meta.insert("format".to_string(), FORMAT.to_string());
        meta.insert("optimizer".to_string(), self.optimizer.clone());
        meta.insert("param_groups".to_string(), to_json(&self.param_groups)?);
        meta.insert("steps".to_string(), to_json(&self.steps)?);
        Ok(meta)
    }

    /// A state from [`OptimizerState::metadata`] and its buffers; `source`
    /// (a file name) is named in the errors.
    pub fn from_metadata(metadata: &HashMap<String, String>, tensors: BTreeMap<String, Tensor<B>>, source: &str) -> Result<Self> {
        let bad = |what: String| Error::Format(format!("{source}: not an optimizer state: {what}"));
        let get = |k: &str| metadata.get(k).ok_or_else(|| bad(format!("metadata has no `{k}`")));
        if get("format")? != FORMAT {
            return Err(bad(format!("format {:?}, expected {FORMAT:?}", get("format")?)));
        }
        let param_groups: Vec<GroupRecord> = serde_json::from_str(get("param_groups")?).map_err(|e| bad(format!("param_groups: {e}")))?;
        let steps: Vec<Option<u64>> = serde_json::from_str(get("steps")?).map_err(|e| bad(format!("steps: {e}")))?;
        Ok(OptimizerState { optimizer: get("optimizer")?.clone(), param_groups, steps, tensors })
    }
}

/// JSON text of a serializable value, as metadata holds it.
fn to_json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Format(e.to_string()))
}

pub(crate) fn capture<B: Backend, C: OptimizerConfig>(opt: &Optim<B, C>) -> OptimizerState<B> {
    let mut param_groups = Vec::new();
    let mut steps = Vec::new();
    let mut tensors = BTreeMap::new();
    for (group, states) in opt.groups.iter().zip(&opt.state) {
        let mut params = Vec::new();
        for st in states {
            let index = steps.len();
            params.push(index);
            steps.push(st.as_ref().map(|s| s.step.get()));
            if let Some(st) = st {
                let names = group.config.rule(st.step.get().max(1), false).state_names();
                for (name, buf) in names.iter().zip(&st.buffers) {
                    tensors.insert(format!("state.{index}.{name}"), buf.deep_clone());
                }
            }
        }
        param_groups.push(GroupRecord { config: serde_json::to_value(&group.config).expect("configs serialize"), params });
    }
    OptimizerState { optimizer: opt.groups.first().map_or("", |g| g.config.name()).to_string(), param_groups, steps, tensors }
}

pub(crate) fn restore<B: Backend, C: OptimizerConfig>(opt: &mut Optim<B, C>, sd: &OptimizerState<B>) -> Result<()> {
    let mismatch = |what: String| Error::msg(format!("load_state_dict: {what}"));
    if opt.groups.len() != sd.param_groups.len() {
        return Err(mismatch(format!("the state has {} parameter groups, the optimizer {}", sd.param_groups.len(), opt.groups.len())));
    }
    let total: usize = opt.groups.iter().map(|g| g.params.len()).sum();
    if sd.steps.len() != total {
        return Err(mismatch(format!("the state covers {} parameters, the optimizer has {total}", sd.steps.len())));
    }
    let name = opt.groups.first().map_or("", |g| g.config.name());
    if !opt.groups.is_empty() && sd.optimizer != name {
        return Err(mismatch(format!("the state was saved by {}, this optimizer is {name}", sd.optimizer)));
    }
    // Build everything first; the optimizer is only touched once all of it is valid.
    let mut configs = Vec::new();
    let mut states = Vec::new();
    let mut index = 0;
    let mut used = 0;
    for (gi, (group, rec)) in opt.groups.iter().zip(&sd.param_groups).enumerate() {
        let config: C = serde_json::from_value(rec.config.clone())
            .map_err(|e| mismatch(format!("group {gi}: hyper-parameters don't fit this optimizer: {e}")))?;
        if config.name() != group.config.name() || sd.optimizer != group.config.name() {
            return Err(mismatch(format!("the state was saved by {}, this optimizer is {}", sd.optimizer, group.config.name())));
        }
        config.validate()?;
        let expected: Vec<usize> = (index..index + group.params.len()).collect();
        if rec.params != expected {
            return Err(mismatch(format!("group {gi} holds parameters {:?} in the state, {expected:?} in the optimizer", rec.params)));
        }
        let mut group_states = Vec::new();
        for p in &group.params {
            let st = match sd.steps[index] {
                None => None,
                Some(step) => {
                    let names = config.rule(step.max(1), false).state_names();
                    let mut buffers = Vec::new();
                    for name in names {
                        let key = format!("state.{index}.{name}");
                        let t = sd.tensors.get(&key).ok_or_else(|| mismatch(format!("missing buffer `{key}`")))?;
                        if t.shape() != p.shape() {
                            return Err(mismatch(format!("`{key}` has shape {:?}, its parameter {:?}", t.dims(), p.dims())));
                        }
                        buffers.push(t.detach().to_dtype(p.dtype()).deep_clone());
                        used += 1;
                    }
                    Some(ParamState { step: crate::optimizer::StepCount::new(step), buffers })
                }
            };
            group_states.push(st);
            index += 1;
        }
        configs.push(config);
        states.push(group_states);
    }
    if used != sd.tensors.len() {
        return Err(mismatch(format!("the state has {} buffers that no parameter uses", sd.tensors.len() - used)));
    }
    for (group, config) in opt.groups.iter_mut().zip(configs) {
        group.config = config;
    }
    // State that exists already is overwritten in place, so that a compiled
    // step, which keeps handles on these buffers and counters, sees the load.
    for (old_group, new_group) in opt.state.iter_mut().zip(states) {
        for (old, new) in old_group.iter_mut().zip(new_group) {
            match (old.as_mut(), new) {
                (Some(o), Some(n)) if same_buffers(&o.buffers, &n.buffers) => {
                    o.step.set(n.step.get());
                    for (ob, nb) in o.buffers.iter().zip(&n.buffers) {
                        no_grad(|| ob.try_copy_(nb))?;
                    }
                }
                (_, n) => *old = n,
            }
        }
    }
    opt.sync_configs();
    Ok(())
}

/// Whether two lists of state buffers have the same shapes and dtypes.
fn same_buffers<B: Backend>(a: &[Tensor<B>], b: &[Tensor<B>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.shape() == y.shape() && x.dtype() == y.dtype())
}
