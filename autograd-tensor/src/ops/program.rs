//! Elementwise programs on tensors, unrecorded: the fused inner loops of a
//! composite op (an LSTM cell, batch norm's normalisation and its
//! gradient) run as one [`Backend::fused_elementwise`] call instead of one
//! pass and one temporary per piece. Nothing is recorded and no tangent is
//! carried: a caller uses a program only where [`plain`] holds (outside a
//! graph being built, no forward-mode input), and keeps its composite of
//! differentiable ops for the other cases.

use crate::Tensor;
use crate::grad_mode::is_grad_enabled;
use autograd_core::fusion::ElementwiseProgram;
use autograd_core::{Backend, Layout, Result, Shape};

/// Whether `inputs` can go through a program: one float compute dtype, no
/// forward-mode tangent, and no graph to record (grad mode off, as inside
/// a composite's forward or a backward without `create_graph`).
pub(crate) fn plain<B: Backend>(inputs: &[&Tensor<B>]) -> bool {
    let Some(first) = inputs.first() else { return false };
    !is_grad_enabled() && first.dtype().is_compute() && inputs.iter().all(|t| t.dtype() == first.dtype() && t.tangent().is_none())
}

/// Runs `program` over `inputs` broadcast to their common shape; one
/// contiguous tensor per output register.
pub(crate) fn run<B: Backend>(program: &ElementwiseProgram, inputs: &[&Tensor<B>]) -> Result<Vec<Tensor<B>>> {
    let mut shape = inputs.first().map_or_else(Shape::scalar, |t| t.shape().clone());
    for t in inputs.iter().skip(1) {
        shape = shape.broadcast(t.shape(), "fused_elementwise")?;
    }
    let layouts: Vec<Layout> = inputs.iter().map(|t| t.layout().broadcast_as(&shape)).collect::<Result<_>>()?;
    let guards: Vec<_> = inputs.iter().map(|t| t.storage()).collect();
    let ins: Vec<(&B::Storage, &Layout)> = guards.iter().map(|g| &**g).zip(&layouts).collect();
    let outs = B::fused_elementwise(program, &ins)?;
    Ok(outs.into_iter().map(|s| Tensor::from_storage(s, shape.clone())).collect())
}

/// A program built once per process from its steps (`inputs` registers, then
/// one per step; `outputs` as in [`ElementwiseProgram::new`]).
macro_rules! program {
    ($inputs:expr, [$($step:expr),* $(,)?], $outputs:expr) => {{
        static P: std::sync::OnceLock<autograd_core::fusion::ElementwiseProgram> = std::sync::OnceLock::new();
        P.get_or_init(|| autograd_core::fusion::ElementwiseProgram::new($inputs, vec![$($step),*], $outputs).expect("a valid program"))
    }};
}
pub(crate) use program;
