//! An optimizer's state dict: taken from its parameter groups and state,
//! and loaded back into them (checked whole before anything changes).

use crate::optimizer::{Optim, OptimizerConfig};
use crate::param_state::{ParamState, scalars_tensor};
use crate::state::{GroupRecord, OptimizerState};
use autograd_core::{Backend, Error, Result};
use autograd_tensor::{Tensor, no_grad};
use std::collections::BTreeMap;

impl<B: Backend, C: OptimizerConfig> Optim<B, C> {
    /// The optimizer's state dict ([`crate::Optimizer::try_state_dict`]).
    pub(crate) fn snapshot(&self) -> Result<OptimizerState<B>> {
        let opt = self;
        let mut param_groups = Vec::new();
        let mut steps = Vec::new();
        let mut tensors = BTreeMap::new();
        for (group, states) in opt.groups.iter().zip(&opt.state) {
            let mut params = Vec::new();
            for st in states {
                let index = steps.len();
                params.push(index);
                steps.push(st.as_ref().map(|s| s.steps()).transpose()?);
                if let Some(st) = st {
                    let names = group.config.rule(1, false).state_names();
                    for (name, buf) in names.iter().zip(&st.buffers) {
                        tensors.insert(format!("state.{index}.{name}"), buf.deep_clone());
                    }
                }
            }
            param_groups.push(GroupRecord { config: serde_json::to_value(&group.config).expect("configs serialize"), params });
        }
        Ok(OptimizerState { optimizer: opt.groups.first().map_or("", |g| g.config.name()).to_string(), param_groups, steps, tensors })
    }

    /// Loads a state dict ([`crate::Optimizer::load_state_dict`]): all of it
    /// is checked before anything changes.
    pub(crate) fn restore(&mut self, sd: &OptimizerState<B>) -> Result<()> {
        let opt = self;
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
                        let names = config.rule(1, false).state_names();
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
                        let mut scalars = config.rule(1, false).scalars();
                        scalars[0] = step as f64;
                        Some(ParamState { scalars: scalars_tensor(scalars), buffers })
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
        // step, which keeps handles on these buffers and scalars, sees the load.
        for (old_group, new_group) in opt.state.iter_mut().zip(states) {
            for (old, new) in old_group.iter_mut().zip(new_group) {
                match (old.as_mut(), new) {
                    (Some(o), Some(n)) if same_buffers(&o.buffers, &n.buffers) && o.scalars.shape() == n.scalars.shape() => {
                        for (ob, nb) in o.buffers.iter().zip(&n.buffers).chain([(&o.scalars, &n.scalars)]) {
                            no_grad(|| ob.try_copy_(nb))?;
                        }
                    }
                    (_, n) => *old = n,
                }
            }
        }
        Ok(())
    }
}

/// Whether two lists of state buffers have the same shapes and dtypes.
fn same_buffers<B: Backend>(a: &[Tensor<B>], b: &[Tensor<B>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.shape() == y.shape() && x.dtype() == y.dtype())
}
