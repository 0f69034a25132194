//! Optimizer state dicts: hyper-parameters as JSON, buffers as tensors,
//! saved together in one safetensors file (tensors plus `__metadata__`).

use autograd_core::{Backend, Error, Result};
use autograd_tensor::{Tensor, load_safetensors, save_safetensors};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

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
