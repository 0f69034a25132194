//! # autograd-jit
//!
//! Trace-then-compile for training steps: eager by default, compiled on
//! demand (the idea of `torch.compile` and `jax.jit`, on this workspace's
//! backend boundary).
//!
//! Everything (autograd, nn, optimizers, checkpointing) ends in `Backend`
//! primitives. A model built on [`Traced<B>`] runs eagerly on `B`; wrapped in
//! [`compile`], a step is recorded once as the program of primitives it ran,
//! compiled, and replayed on `B` directly on later calls: no `Tensor`, no
//! graph nodes, no per-op bookkeeping, elementwise chains fused into one
//! pass, temporaries freed at their last use.
//!
//! ```
//! use autograd_cpu::Cpu;
//! use autograd_jit::{compile, Traced};
//! use autograd_nn::{LinearConfig, Module, ModuleExt};
//! use autograd_optim::{Optimizer, Sgd, SgdConfig};
//! use autograd_tensor::{functional::{try_mse_loss, Reduction}, Tensor};
//! type T = Tensor<Traced<Cpu>>;
//!
//! let model = LinearConfig::new(3, 1).init::<Traced<Cpu>>();
//! let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
//! let mut step = compile(|batch: &[T]| {
//!     opt.zero_grad(true);
//!     let loss = try_mse_loss(&model.try_forward(&batch[0])?, &batch[1], Reduction::Mean)?;
//!     loss.backward()?;
//!     opt.step()?;
//!     Ok(vec![loss])
//! });
//! let x = T::from_vec(vec![1.0f32, 2.0, 3.0, -1.0, 0.5, 2.0], [2, 3]);
//! let y = T::from_vec(vec![1.0f32, -1.0], [2, 1]);
//! let losses: Vec<f32> = (0..20).map(|_| step.run(&[x.clone(), y.clone()]).unwrap()[0].item() as f32).collect();
//! assert!(losses[19] < losses[0]);
//! assert_eq!(step.counts().replayed, 18); // one eager call, one traced, then replays
//! println!("{}", step.programs().next().unwrap()); // ops, fused groups, memory plan
//! ```
//!
//! What compile handles, and what it does not: see [`compile`] and the
//! README's "Compiling a step".

mod buffer;
mod build;
mod compile;
mod guards;
mod passes;
mod program;
mod recorder;
mod run;
mod traced;

pub use buffer::TracedStorage;
pub use compile::{CallCounts, CompileOptions, CompiledStep, StepFn, WhenFull, compile, compile_with};
pub use program::{Program, Report};
pub use recorder::ValueId;
pub use traced::Traced;
