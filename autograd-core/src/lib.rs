//! # autograd-core
//!
//! The contract every other crate of the workspace builds on: [`Shape`],
//! strided [`Layout`] views, [`DType`], the one [`Error`] type, the
//! [`Backend`] op trait with its reference implementation [`RefBackend`], the
//! optimizer-agnostic [`fused_update`] hook and storage [`memory`]
//! accounting. The conformance suite a backend proves itself with lives in
//! the dev-only `autograd-testkit` crate.
//!
//! ```
//! use autograd_core::{Backend, RefBackend, Layout, Shape, HostData, BinaryOp};
//! let a = RefBackend::from_host(HostData::from(vec![1.0f64, 2.0, 3.0]));
//! let b = RefBackend::from_host(HostData::from(vec![10.0f64]));
//! let la = Layout::contiguous(Shape::from([3]));
//! let lb = Layout::contiguous(Shape::from([1])).broadcast_as(la.shape()).unwrap();
//! let c = RefBackend::binary(BinaryOp::Add, &a, &la, &b, &lb).unwrap();
//! assert_eq!(RefBackend::to_host(&c, &la).unwrap().to_f64_vec(), vec![11.0, 12.0, 13.0]);
//! ```

pub mod attention;
pub mod backend;
#[macro_use]
pub mod dispatch;
pub mod dtype;
pub mod error;
pub mod fused_update;
pub mod fusion;
pub mod layout;
pub mod low_precision;
pub mod memory;
pub mod ops;
pub mod primitive;
pub mod reference;
pub mod rng;
pub mod scalar;
pub mod shape;
pub mod storage;
pub mod validate;
pub mod window;

pub use backend::Backend;
pub use dtype::{DType, Element};
pub use error::{DistError, Error, Result, ResultExt};
/// The `half` crate, whose `f16` and `bf16` are the low-precision element types.
pub use half;
pub use layout::Layout;
pub use ops::{ArgReduceOp, BinaryOp, ReduceOp, UnaryOp};
pub use primitive::Primitive;
pub use reference::RefBackend;
pub use shape::{Shape, normalize_dim};
pub use storage::{HostData, HostStorage};
