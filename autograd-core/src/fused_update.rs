//! The fused-update hook: one in-place pass over a parameter, its gradient
//! and its state buffers, that a backend may run natively.
//!
//! The hook knows nothing of optimizers. An update is plain data (an enum of
//! hyper-parameters, say) that says what to do to one element given its
//! gradient and its state; `autograd-optim` describes SGD, Adam, RMSprop and
//! Adagrad this way and a backend runs them without knowing which. Updates are
//! `Clone + 'static` so that a recorder can keep one and replay it later.
//!
//! What changes from one call to the next (a step count, a learning rate a
//! scheduler sets) lives on the device, in a small f64 *scalars* buffer the
//! call reads and writes: before touching any element the backend hands it
//! to [`FusedUpdate::resolve`], which returns the update to apply and may
//! advance a counter in it. A recorded call replays with the scalars in
//! force at each replay: eager and compiled steps run the same code
//! (PyTorch's "capturable" optimizers).
//!
//! ```
//! use autograd_core::fused_update::FusedUpdate;
//! /// `p -= lr * g`, no state.
//! #[derive(Clone, Debug)]
//! struct PlainStep { lr: f64 }
//! impl FusedUpdate for PlainStep {
//!     fn num_states(&self) -> usize { 0 }
//!     fn apply_f32(&self, p: &mut [f32], g: &[f32], _: &mut [&mut [f32]]) {
//!         p.iter_mut().zip(g).for_each(|(p, g)| *p -= self.lr as f32 * g);
//!     }
//!     fn apply_f64(&self, p: &mut [f64], g: &[f64], _: &mut [&mut [f64]]) {
//!         p.iter_mut().zip(g).for_each(|(p, g)| *p -= self.lr * g);
//!     }
//! }
//! let mut p = vec![1.0f64, 2.0];
//! PlainStep { lr: 0.5 }.apply_f64(&mut p, &[2.0, -2.0], &mut []);
//! assert_eq!(p, vec![0.0, 3.0]);
//! ```

use crate::{Backend, Error, HostData, Layout, Result, Shape};
use std::fmt::Debug;

/// An elementwise in-place update of a parameter from its gradient and
/// `num_states()` state buffers of the same length.
///
/// The `apply_*` methods are only called with slices of one length and with
/// exactly `num_states()` state buffers (the hook checks before calling);
/// they must not allocate per element and must treat each element alone, so
/// that a backend may split the buffers into chunks and run them in parallel.
pub trait FusedUpdate: Clone + Debug + Send + Sync + 'static {
    /// How many state buffers the update reads and writes.
    fn num_states(&self) -> usize;
    /// How many f64 values its scalars buffer holds (default: none).
    fn num_scalars(&self) -> usize {
        0
    }
    /// The update to apply this call, from the scalars buffer's values,
    /// which it may change (advance a step count): called once per call,
    /// before any element is touched. An `Err` (values it cannot use)
    /// leaves every buffer as it was. The default ignores the scalars.
    fn resolve(&self, scalars: &mut [f64]) -> Result<Self> {
        let _ = scalars;
        Ok(self.clone())
    }
    /// The update as an elementwise program ([`UpdateProgram`]), for a
    /// backend that runs it as one kernel on its own memory (a GPU), or
    /// `None` where the update has no such form (the default): the backend
    /// then calls `apply_*` on the buffers' host copies.
    fn program(&self) -> Option<UpdateProgram> {
        None
    }
    /// The update on f32 slices.
    fn apply_f32(&self, p: &mut [f32], g: &[f32], states: &mut [&mut [f32]]);
    /// The update on f64 slices (also the path for f16/bf16 parameters,
    /// which go through f64 on the host).
    fn apply_f64(&self, p: &mut [f64], g: &[f64], states: &mut [&mut [f64]]);
}

/// Checks what a backend's [`Backend::fused_update`] must check before it
/// touches a buffer: one element count for parameter, gradient view and
/// every state, the number of states the update expects, and a scalars
/// buffer of f64 with as many values as it names.
pub fn check<B: Backend, U: FusedUpdate>(
    update: &U,
    param: &B::Storage,
    lg: &Layout,
    states: &[&mut B::Storage],
    scalars: &B::Storage,
) -> Result<()> {
    if B::len(scalars) != update.num_scalars() || B::dtype(scalars) != crate::DType::F64 {
        return Err(Error::msg(format!(
            "fused update: {update:?} reads {} f64 scalars, got a buffer of {:?} x {}",
            update.num_scalars(),
            B::dtype(scalars),
            B::len(scalars)
        )));
    }
    let n = B::len(param);
    if lg.numel() != n || states.len() != update.num_states() || states.iter().any(|s| B::len(s) != n) {
        let lens: Vec<usize> = states.iter().map(|s| B::len(s)).collect();
        return Err(Error::msg(format!(
            "fused update: a parameter of {n} elements needs a gradient of {n} elements (got {}) and {} state buffers of {n} elements (got {lens:?})",
            lg.numel(),
            update.num_states(),
        )));
    }
    Ok(())
}

/// An update as an elementwise program: its inputs are the parameter, the
/// gradient, the state buffers in order, then one input per entry of
/// `constants` (a scalar every element reads); its outputs are the new
/// parameter and the new states, in order. The program must compute what
/// the update's `apply_*` computes, op for op, so that a backend that runs
/// it gives the host's numbers within its float rounding.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateProgram {
    /// The per-element steps.
    pub program: crate::fusion::ElementwiseProgram,
    /// The scalars the program reads after the buffers.
    pub constants: Vec<f64>,
}

/// Runs an update's program on backend `B`: the constants as one-element
/// buffers broadcast over the gradient's shape, one
/// [`Backend::fused_elementwise`] call, the outputs assigned back into the
/// parameter and the states (the caller has [`check`]ed the buffers).
///
/// ```
/// use autograd_core::fused_update::{run_program, UpdateProgram};
/// use autograd_core::fusion::{ElementwiseProgram, Instr};
/// use autograd_core::{Backend, BinaryOp, HostData, Layout, RefBackend, Shape};
/// // p - 0.5 g
/// let program = ElementwiseProgram::new(3, vec![Instr::Binary(BinaryOp::Mul, 2, 1), Instr::Binary(BinaryOp::Sub, 0, 3)], vec![4]).unwrap();
/// let mut p = RefBackend::from_host(HostData::from(vec![1.0f64, 2.0]));
/// let g = RefBackend::from_host(HostData::from(vec![2.0f64, -2.0]));
/// let l = Layout::contiguous(Shape::from([2]));
/// run_program::<RefBackend>(&UpdateProgram { program, constants: vec![0.5] }, &mut p, &g, &l, &mut []).unwrap();
/// assert_eq!(RefBackend::to_host(&p, &l).unwrap(), HostData::from(vec![0.0f64, 3.0]));
/// ```
pub fn run_program<B: Backend>(
    update: &UpdateProgram,
    param: &mut B::Storage,
    grad: &B::Storage,
    lg: &Layout,
    states: &mut [&mut B::Storage],
) -> Result<()> {
    let program = &update.program;
    let expected = 2 + states.len() + update.constants.len();
    if program.inputs() != expected || program.outputs().len() != 1 + states.len() {
        return Err(Error::msg(format!(
            "fused update: a program of {} inputs and {} outputs for {} states and {} constants",
            program.inputs(),
            program.outputs().len(),
            states.len(),
            update.constants.len()
        )));
    }
    let dtype = B::dtype(param);
    let shape = lg.shape().clone();
    let whole = Layout::contiguous(shape.clone());
    let one = Shape::new(vec![1; shape.rank()]);
    let spread = Layout::new(shape.clone(), vec![0; shape.rank()], 0);
    let constants: Vec<B::Storage> = update.constants.iter().map(|&c| B::full(&one, c, dtype)).collect::<Result<_>>()?;
    let outs = {
        let mut inputs: Vec<(&B::Storage, &Layout)> = vec![(&*param, &whole), (grad, lg)];
        inputs.extend(states.iter().map(|s| (&**s, &whole)));
        inputs.extend(constants.iter().map(|c| (c, &spread)));
        B::fused_elementwise(program, &inputs)?
    };
    B::assign(param, &whole, &outs[0], &whole)?;
    for (s, o) in states.iter_mut().zip(&outs[1..]) {
        B::assign(s, &whole, o, &whole)?;
    }
    Ok(())
}

/// A host copy of an update's scalars (a handful: kept off the heap).
pub type Scalars = smallvec::SmallVec<[f64; 16]>;

/// Resolves the update from a host copy of its scalars ([`FusedUpdate::resolve`])
/// and checks that the resolved update still expects `states` buffers.
/// Returns it with the scalars as they must be written back.
pub fn resolve<U: FusedUpdate>(update: &U, scalars: &[f64], states: usize) -> Result<(U, Scalars)> {
    let mut values = Scalars::from_slice(scalars);
    let resolved = update.resolve(&mut values)?;
    if resolved.num_states() != states || values.len() != scalars.len() {
        return Err(Error::msg(format!(
            "fused update: {update:?} resolved from its scalars into {resolved:?}, which needs {} state buffers ({states} exist): a hyper-parameter that decides the state changed between steps",
            resolved.num_states()
        )));
    }
    Ok((resolved, values))
}

/// The generic [`Backend::fused_update`]: downloads everything, applies the
/// update in f64 and writes the results back. Correct for every backend and
/// dtype; a backend overrides `fused_update` to stay on its own memory.
pub fn host_fallback<B: Backend, U: FusedUpdate>(
    update: &U,
    param: &mut B::Storage,
    grad: &B::Storage,
    lg: &Layout,
    states: &mut [&mut B::Storage],
    scalars: &mut B::Storage,
) -> Result<()> {
    check::<B, U>(update, param, lg, states, scalars)?;
    let ls = Layout::contiguous(Shape::new(vec![B::len(scalars)]));
    let (update, values) = resolve(update, &B::to_host(scalars, &ls)?.to_f64_vec(), states.len())?;
    let l = Layout::contiguous(Shape::new(vec![B::len(param)]));
    let mut p = B::to_host(param, &l)?.to_f64_vec();
    let g = B::to_host(grad, lg)?.to_f64_vec();
    let mut s: Vec<Vec<f64>> = states.iter().map(|s| B::to_host(s, &l).map(|h| h.to_f64_vec())).collect::<Result<_>>()?;
    {
        let mut refs: Vec<&mut [f64]> = s.iter_mut().map(|v| v.as_mut_slice()).collect();
        update.apply_f64(&mut p, &g, &mut refs);
    }
    let dtype = B::dtype(param);
    B::assign(param, &l, &B::from_host(HostData::from_f64(&p, dtype)), &l)?;
    for (dst, v) in states.iter_mut().zip(&s) {
        let dtype = B::dtype(dst);
        B::assign(dst, &l, &B::from_host(HostData::from_f64(v, dtype)), &l)?;
    }
    B::assign(scalars, &ls, &B::from_host(HostData::from(values.to_vec())), &ls)
}
