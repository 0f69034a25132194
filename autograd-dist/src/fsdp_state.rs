//! A fully sharded model's state: whole state dicts (gathered, loadable
//! on any number of ranks), one shard file per rank, and the optimizer's
//! state gathered into the one a single process would hold or cut again
//! for this rank.

use crate::communicator::{Communicator, all_gather_varying, host_to_text, text_to_host};
use crate::fsdp::{FullyShardedDataParallel, Rows};
use crate::host;
use autograd_core::{Backend, DistError, Error, HostData, Result};
use autograd_nn::{Module, ModuleExt};
use autograd_optim::OptimizerState;
use autograd_tensor::{Tensor, no_grad};
use std::collections::BTreeMap;

impl<B: Backend, M: Module<B>> FullyShardedDataParallel<B, M> {
    /// Every parameter and buffer of the whole model (this unit and the
    /// units inside it), whole, under the unwrapped model's names: each
    /// parameter all-gathered from its shards. A collective: every rank
    /// calls it and gets the same tensors (save them on one rank).
    pub fn full_state_dict(&self) -> Result<BTreeMap<String, Tensor<B>>> {
        let comm = self.comm().as_ref();
        let shards = self.named_shards();
        let mut out = BTreeMap::new();
        for ((name, shard), shape) in shards.iter().zip(whole_shapes(comm, &shards)?) {
            out.insert(name.clone(), gather_rows(comm, shard, shape)?);
        }
        for (name, b) in self.named_buffers() {
            out.insert(name, b.detach());
        }
        Ok(out)
    }

    /// Loads whole parameters and buffers (a [`FullyShardedDataParallel::full_state_dict`],
    /// or the unwrapped model's `state_dict`, saved on any number of
    /// ranks): each rank copies its rows into its shards. A collective
    /// (the whole shapes are gathered): every rank calls it with the same
    /// state. `Err` naming the tensor when a name is missing or unknown or
    /// a shape or dtype differs from the whole parameter's; nothing is
    /// changed then.
    pub fn load_full_state_dict(&self, state: &BTreeMap<String, Tensor<B>>) -> Result<()> {
        let (world, rank) = (self.comm().world_size(), self.comm().rank());
        let shards = self.named_shards();
        let whole = whole_shapes(self.comm().as_ref(), &shards)?;
        let buffers = self.named_buffers();
        let mismatch = |detail: String| -> Error { DistError::Mismatch { op: "load_full_state_dict", detail }.into() };
        let known: Vec<&String> = shards.iter().chain(&buffers).map(|(n, _)| n).collect();
        if let Some(extra) = state.keys().find(|k| !known.contains(k)) {
            return Err(mismatch(format!("the state has {extra}, which the model does not")));
        }
        let mut copies: Vec<(&Tensor<B>, Tensor<B>)> = Vec::new();
        for ((name, shard), whole) in shards.iter().zip(&whole) {
            let t = state.get(name).ok_or_else(|| mismatch(format!("the state has no {name}")))?;
            if t.dtype() != shard.dtype() || t.dims() != whole.as_slice() {
                return Err(mismatch(format!(
                    "{name} is {:?} of shape {:?}, the model's is {:?} of shape {whole:?}",
                    t.dtype(),
                    t.dims(),
                    shard.dtype(),
                )));
            }
            let rows = Rows::of(t.shape(), world);
            let want = rows.shard_shape(t.shape(), rank);
            let (start, n) = rows.of_rank(rank);
            let values = host::slice(&t.try_to_host()?, start * rows.row_len, n * rows.row_len);
            copies.push((shard, Tensor::try_from_host(values, want)?));
        }
        for (name, b) in &buffers {
            let t = state.get(name).ok_or_else(|| mismatch(format!("the state has no {name}")))?;
            if t.dtype() != b.dtype() || t.shape() != b.shape() {
                return Err(mismatch(format!("{name}: {:?} {:?} for a buffer {:?} {:?}", t.dtype(), t.dims(), b.dtype(), b.dims())));
            }
            copies.push((b, t.clone()));
        }
        for (dst, values) in copies {
            no_grad(|| dst.try_copy_(&values))?;
        }
        Ok(())
    }

    /// Saves this rank's shards and the module's buffers to `path` (one
    /// file per rank), with the layout in the safetensors header: the
    /// format, the world size, this rank and each parameter's whole shape
    /// (`shape.NAME`, e.g. `[128,64]`). A collective (the whole shapes are
    /// gathered): every rank calls it with its own path.
    pub fn save_sharded(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let shards = self.named_shards();
        let buffers = self.named_buffers();
        let mut metadata = std::collections::HashMap::new();
        metadata.insert("format".to_string(), SHARD_FORMAT.to_string());
        metadata.insert("world".to_string(), self.comm().world_size().to_string());
        metadata.insert("rank".to_string(), self.comm().rank().to_string());
        for ((name, _), shape) in shards.iter().zip(whole_shapes(self.comm().as_ref(), &shards)?) {
            metadata.insert(format!("shape.{name}"), format!("{shape:?}").replace(' ', ""));
        }
        let named: Vec<(&str, &Tensor<B>)> = shards.iter().chain(&buffers).map(|(n, t)| (n.as_str(), t)).collect();
        autograd_tensor::save_safetensors(&named, &metadata, path)
    }

    /// Loads what [`FullyShardedDataParallel::save_sharded`] wrote for this
    /// rank of a group of the same size. `Err` (and nothing changed) when
    /// the file was written by another rank or world size (to change the
    /// number of ranks, go through [`FullyShardedDataParallel::full_state_dict`]),
    /// or a name, shape or dtype differs from this rank's shards.
    pub fn load_sharded(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let path = path.as_ref();
        let file = autograd_tensor::load_safetensors::<B>(path)?;
        let bad = |detail: String| -> Error {
            DistError::Mismatch { op: "load_sharded", detail: format!("{}: {detail}", path.display()) }.into()
        };
        let meta = |key: &str| file.metadata.get(key).cloned().unwrap_or_default();
        if meta("format") != SHARD_FORMAT {
            return Err(bad(format!("not a shard file (format {:?})", meta("format"))));
        }
        let (world, rank) = (self.comm().world_size().to_string(), self.comm().rank().to_string());
        if meta("world") != world || meta("rank") != rank {
            return Err(bad(format!(
                "written by rank {} of {}, read by rank {rank} of {world}: load the whole state dict to change the number of ranks",
                meta("rank"),
                meta("world")
            )));
        }
        let saved: BTreeMap<String, Tensor<B>> = file.tensors.into_iter().collect();
        let mine: Vec<(String, Tensor<B>)> = self.named_shards().into_iter().chain(self.named_buffers()).collect();
        if saved.len() != mine.len() {
            return Err(bad(format!("{} tensors for a model with {}", saved.len(), mine.len())));
        }
        for (name, t) in &mine {
            let s = saved.get(name).ok_or_else(|| bad(format!("no {name}")))?;
            if s.dtype() != t.dtype() || s.shape() != t.shape() {
                return Err(bad(format!("{name} is {:?} {:?}, this rank's is {:?} {:?}", s.dtype(), s.dims(), t.dtype(), t.dims())));
            }
        }
        for (name, t) in &mine {
            no_grad(|| t.try_copy_(&saved[name]))?;
        }
        Ok(())
    }

    /// The state of an optimizer over this model's `parameters()` (the
    /// shards, in that order), gathered: each tensor of a parameter's state
    /// shaped like its shard (Adam's moments, momentum) becomes the whole
    /// tensor, the rest (step counts, scalars) is kept. The result is the
    /// state a one-process optimizer over the unwrapped model's parameters
    /// would hold: save it on one rank, load it there or cut it for any
    /// number of ranks with [`FullyShardedDataParallel::shard_optimizer_state`].
    /// A collective: every rank calls it. `Err` on every rank when the
    /// ranks' states name different tensors.
    pub fn gather_optimizer_state(&self, state: &OptimizerState<B>) -> Result<OptimizerState<B>> {
        let comm = self.comm().as_ref();
        let shards = self.named_shards();
        let whole = whole_shapes(comm, &shards)?;
        // Which tensors are cut like their parameter, decided on every rank
        // and compared: the gathers must be the same collectives everywhere.
        let mut cut = Vec::with_capacity(state.tensors.len());
        for (key, t) in &state.tensors {
            cut.push(shard_of(key, &shards)?.map(|i| (i, shards[i].1.shape() == t.shape())));
        }
        let mine: String = state.tensors.keys().zip(&cut).map(|(k, c)| format!("{k}:{}\n", c.is_some_and(|(_, cut)| cut) as u8)).collect();
        let all = all_gather_varying(comm, &text_to_host(&mine))?;
        if let Some(r) = all.iter().position(|t| host_to_text(t) != mine) {
            return Err(DistError::Mismatch {
                op: "gather_optimizer_state",
                detail: format!("rank {r}'s optimizer state differs in its tensors or their shapes from rank {}'s", comm.rank()),
            }
            .into());
        }
        let mut out = state.clone();
        for ((key, t), cut) in state.tensors.iter().zip(cut) {
            if let Some((i, true)) = cut {
                out.tensors.insert(key.clone(), gather_rows(comm, t, whole[i].clone())?);
            }
        }
        Ok(out)
    }

    /// This rank's part of a gathered optimizer state (from
    /// [`FullyShardedDataParallel::gather_optimizer_state`] on any number
    /// of ranks, or a one-process optimizer over the unwrapped model): each
    /// tensor shaped like its whole parameter is cut to this rank's rows,
    /// the rest (step counts, scalars) is kept; load the result into the
    /// optimizer over `parameters()`. A collective (the whole shapes are
    /// gathered): every rank calls it. `Err` when a tensor names a
    /// parameter the model lacks.
    pub fn shard_optimizer_state(&self, state: &OptimizerState<B>) -> Result<OptimizerState<B>> {
        let (world, rank) = (self.comm().world_size(), self.comm().rank());
        let shards = self.named_shards();
        let whole = whole_shapes(self.comm().as_ref(), &shards)?;
        let mut out = state.clone();
        for (key, t) in &state.tensors {
            let Some(i) = shard_of(key, &shards)? else { continue };
            if t.dims() == whole[i].as_slice() {
                let rows = Rows::of(t.shape(), world);
                let (start, n) = rows.of_rank(rank);
                let values = host::slice(&t.try_to_host()?, start * rows.row_len, n * rows.row_len);
                out.tensors.insert(key.clone(), Tensor::try_from_host(values, rows.shard_shape(t.shape(), rank))?);
            }
        }
        Ok(out)
    }
}

/// The `format` a shard file's header names.
const SHARD_FORMAT: &str = "autograd-fsdp-shard/1";

/// Each parameter's whole shape from every rank's shards, in one
/// collective (a scalar's shard is 0-d on rank 0 and `[0]` elsewhere; any
/// other's is its rows of the whole).
fn whole_shapes<B: Backend>(comm: &dyn Communicator, shards: &[(String, Tensor<B>)]) -> Result<Vec<Vec<usize>>> {
    // Each shard as its rank count and dims, one after another.
    let mine: Vec<i64> =
        shards.iter().flat_map(|(_, t)| std::iter::once(t.dims().len()).chain(t.dims().iter().copied())).map(|d| d as i64).collect();
    let ranks: Vec<Vec<f64>> = all_gather_varying(comm, &HostData::I64(mine))?.iter().map(HostData::to_f64_vec).collect();
    let malformed = || -> Error { DistError::Mismatch { op: "whole shapes", detail: "the ranks hold different parameters".into() }.into() };
    let mut at = vec![0usize; ranks.len()];
    let mut out = Vec::with_capacity(shards.len());
    for _ in shards {
        let mut shape: Vec<usize> = Vec::new();
        for (r, dims) in ranks.iter().enumerate() {
            let n = *dims.get(at[r]).ok_or_else(malformed)? as usize;
            let d: Vec<usize> = dims.get(at[r] + 1..at[r] + 1 + n).ok_or_else(malformed)?.iter().map(|&d| d as usize).collect();
            at[r] += 1 + n;
            match (r, d.split_first()) {
                (0, _) => shape = d.clone(),
                (_, Some((rows, _))) if !shape.is_empty() => shape[0] += rows,
                _ => {}
            }
        }
        out.push(shape);
    }
    Ok(out)
}

/// A whole tensor of `shape` from every rank's rows. A collective.
fn gather_rows<B: Backend>(comm: &dyn Communicator, shard: &Tensor<B>, shape: Vec<usize>) -> Result<Tensor<B>> {
    let values = all_gather_varying(comm, &shard.try_to_host()?)?;
    Tensor::try_from_host(host::concat(&values.iter().collect::<Vec<_>>())?, shape)
}

/// The index of the shard an optimizer state key (`state.INDEX.NAME`)
/// belongs to; `None` for a key of another form. `Err` for an index past
/// the shards.
fn shard_of<B: Backend>(key: &str, shards: &[(String, Tensor<B>)]) -> Result<Option<usize>> {
    let mut parts = key.splitn(3, '.');
    let (Some("state"), Some(index), Some(_)) = (parts.next(), parts.next(), parts.next()) else { return Ok(None) };
    let Ok(i) = index.parse::<usize>() else { return Ok(None) };
    match shards.get(i) {
        Some(_) => Ok(Some(i)),
        None => Err(DistError::Mismatch {
            op: "optimizer state",
            detail: format!(
                "{key} names parameter {i}, the model has {} (build the optimizer over the model's parameters())",
                shards.len()
            ),
        }
        .into()),
    }
}
