//! # autograd-dist
//!
//! Data-parallel training across ranks, PyTorch's `torch.distributed` in
//! small:
//!
//! - [`Communicator`]: rank, world size and the collectives (all-reduce,
//!   non-blocking all-reduce, broadcast, all-gather, reduce-scatter,
//!   barrier; all-gather and reduce-scatter also without waiting), implemented by [`ThreadGroup`]'s ranks (threads of one
//!   process) and, with the `mpi` cargo feature, `Mpi` (processes started
//!   by `mpirun`, on one machine or many).
//! - [`DistributedDataParallel`]: a model replicated on every rank whose
//!   gradients are averaged in buckets during backward, overlapping the
//!   all-reduce with the rest of backward.
//! - [`DistributedSampler`] (from `autograd-data`): each rank's shard of
//!   the data set.
//! - [`ZeroRedundancyOptimizer`]: ZeRO stage 1, optimizer state sharded.
//! - [`ShardedDataParallel`] and its [`ShardedOptimizer`]: ZeRO stage 2,
//!   gradients reduce-scattered into flat ranges of each bucket, the
//!   optimizer over a rank's ranges.
//! - [`FullyShardedDataParallel`]: ZeRO stage 3 (PyTorch's FSDP),
//!   parameters cut on dim 0, gathered around each unit's forward and
//!   backward, gradients reduce-scattered as its backward ends; whole or
//!   per-rank state dicts.
//! - [`run_rank`] (one failing rank ends the job, never a hang) and
//!   [`on_rank0`] (save on one rank, the others wait).
//!
//! ```
//! use autograd_dist::{Communicator, DdpConfig, DistributedDataParallel, ThreadGroup};
//! use autograd_nn::{Linear, Module, ModuleExt};
//! use autograd_optim::{Optimizer, Sgd, SgdConfig};
//! use autograd_tensor::Tensor;
//! use autograd_cpu::Cpu;
//! let finals = ThreadGroup::new(2).run(|comm| {
//!     let model = DistributedDataParallel::new(Linear::<Cpu>::new(4, 1), comm.clone(), DdpConfig::default())?;
//!     let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.1, ..Default::default() })?;
//!     for _ in 0..3 {
//!         let x = Tensor::<Cpu>::full([8, 4], comm.rank() as f64); // this rank's half of the batch
//!         opt.zero_grad(true);
//!         model.forward(&x).powf(2.0).mean().backward()?; // gradients averaged over ranks here
//!         opt.step()?;
//!     }
//!     Ok(model.module().weight.to_vec::<f32>())
//! }).unwrap();
//! assert_eq!(finals[0], finals[1]); // the replicas stay identical
//! ```

mod bucket;
mod communicator;
mod ddp;
mod flat_shard;
mod fsdp;
mod fsdp_state;
mod host;
mod launch;
#[cfg(feature = "mpi")]
mod mpi;
mod sharded;
mod threads;
mod worker;
mod zero;

/// The `mpi` crate (rsmpi), for [`Mpi::with_raw`].
#[cfg(feature = "mpi")]
pub use ::mpi as rsmpi;
pub use autograd_data::DistributedSampler;
pub use communicator::{CollectiveOp, Communicator, Work, all_gather_varying};
pub use ddp::{DdpConfig, DistributedDataParallel, NoSync};
pub use fsdp::{FsdpConfig, FullyShardedDataParallel};
pub use launch::{on_rank0, run_rank};
#[cfg(feature = "mpi")]
pub use mpi::Mpi;
pub use sharded::{ShardedDataParallel, ShardedOptimizer, clip_sharded_grad_norm};
pub use threads::{ThreadComm, ThreadGroup};
pub use zero::ZeroRedundancyOptimizer;
