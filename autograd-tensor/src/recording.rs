//! Recording an op: the op author's whole vocabulary, in one place.
//!
//! A differentiable op computes its forward with backend primitives (or
//! other ops, under `no_grad`) and attaches a graph node whose backward is
//! written with `Tensor` ops, so that backward is itself differentiable
//! (`create_graph`), plus a forward-mode rule. Which idiom to use:
//!
//! | the op is... | write | where |
//! |---|---|---|
//! | elementwise unary or binary, one primitive | a row of the table | `ops/unary.rs`, `ops/binary.rs` (the rows give the backward, the saved inputs and, being diagonal, the JVP) |
//! | several pieces that PyTorch records as one node, backward in closed form from the inputs (`var`, `layer_norm`, `linear`) | [`composite`] | the op's family file |
//! | a pointwise formula then a reduction, backward from elementwise derivatives (the losses) | [`pointwise_composite`] | `functional/loss.rs` |
//! | a new view of the same storage (`transpose`, `narrow`, `expand`) | [`Tensor::record_view`] | `ops/view.rs` |
//! | anything else: one primitive, a backward of its own | [`Tensor::record_new`] (fresh output storage) or [`Tensor::record`], a backward from [`saving`] / [`stateless`], a JVP with [`with_tangent`] | the op's family file |
//!
//! In every case the node is recorded only when grad mode is on and an
//! input requires grad; an input made under inference mode makes the
//! backward an `Err`; a capture observer hears of the leaves read.

use crate::Tensor;
use crate::grad_mode::is_grad_enabled;
use crate::node::{BackwardCtx, BackwardOp, Edge, Node, SavedTensor};
use crate::reduction::Reduction;
use crate::tensor::StorageCell;
use autograd_core::{Backend, DType, Error, Layout, Result, Shape};
use std::panic::Location;
use std::sync::Arc;

/// The output of an op being recorded, for a backward formula that saves it:
/// [`DetachedOutput::get`] makes a handle without the node (saving the
/// output itself would make a cycle through the node).
pub(crate) struct DetachedOutput<'a, B: Backend> {
    cell: &'a Arc<StorageCell<B>>,
    layout: &'a Layout,
    dtype: DType,
}

impl<B: Backend> DetachedOutput<'_, B> {
    /// The output, detached.
    pub(crate) fn get(&self) -> Tensor<B> {
        Tensor::from_parts(self.cell.clone(), self.layout.clone(), self.dtype, None, false)
    }
}

impl<B: Backend> Tensor<B> {
    /// Records the result of a differentiable op: if grad mode is on and an
    /// input requires grad, a node named `name` with the backward op made by
    /// `op` is attached to the output.
    #[track_caller]
    pub(crate) fn record<O: BackwardOp<B> + 'static>(
        storage: Arc<StorageCell<B>>,
        layout: Layout,
        dtype: DType,
        name: &'static str,
        inputs: &[&Tensor<B>],
        op: impl FnOnce() -> O,
    ) -> Tensor<B> {
        let needs = is_grad_enabled() && inputs.iter().any(|t| t.requires_grad());
        if crate::capture::observing() && is_grad_enabled() {
            crate::capture::leaves_read(inputs);
        }
        let grad_fn = if needs {
            let next = inputs.iter().map(|t| t.edge()).collect();
            let op: Box<dyn BackwardOp<B>> =
                if inputs.iter().any(|t| t.inner.inference) { Box::new(InferenceTensorUsed) } else { Box::new(op()) };
            Some(Arc::new(Node::new(name, op, next, Location::caller())))
        } else {
            None
        };
        Self::from_parts(storage, layout, dtype, grad_fn, needs)
    }

    /// Like [`Tensor::record`] for a freshly computed contiguous storage;
    /// `op` receives the output, detached, to save it if the formula needs it
    /// ([`DetachedOutput::get`]: most formulas do not, and then no handle is
    /// allocated).
    #[track_caller]
    pub(crate) fn record_new<O: BackwardOp<B> + 'static>(
        storage: B::Storage,
        shape: Shape,
        name: &'static str,
        inputs: &[&Tensor<B>],
        op: impl FnOnce(&DetachedOutput<'_, B>) -> O,
    ) -> Tensor<B> {
        let dtype = B::dtype(&storage);
        let cell = StorageCell::new(storage);
        let layout = Layout::contiguous(shape);
        if crate::capture::observing() && is_grad_enabled() {
            crate::capture::leaves_read(inputs);
        }
        if !(is_grad_enabled() && inputs.iter().any(|t| t.requires_grad())) {
            return Self::from_parts(cell, layout, dtype, None, false);
        }
        let out = DetachedOutput { cell: &cell, layout: &layout, dtype };
        let next = inputs.iter().map(|t| t.edge()).collect();
        let op: Box<dyn BackwardOp<B>> =
            if inputs.iter().any(|t| t.inner.inference) { Box::new(InferenceTensorUsed) } else { Box::new(op(&out)) };
        let node = Arc::new(Node::new(name, op, next, Location::caller()));
        Self::from_parts(cell, layout, dtype, Some(node), true)
    }

    /// Records a view of `self` (shared storage, new layout).
    #[track_caller]
    pub(crate) fn record_view<O: BackwardOp<B> + 'static>(&self, layout: Layout, name: &'static str, op: impl FnOnce() -> O) -> Tensor<B> {
        Self::record(self.inner.storage.clone(), layout, self.dtype(), name, &[self], op)
    }

    pub(crate) fn edge(&self) -> Edge<B> {
        if let Some(f) = &self.inner.autograd.grad_fn {
            Edge::Node(f.clone())
        } else if self.requires_grad() {
            Edge::Leaf(self.clone())
        } else {
            Edge::None
        }
    }
}

/// Gradients returned by a backward formula, one per input.
pub(crate) type Grads<B> = Result<Vec<Option<Tensor<B>>>>;

/// A backward op given as a closure over its saved tensors. Dropping it
/// (after backward, unless `retain_graph`) frees what it saved.
pub(crate) struct FnBackward<F> {
    pub(crate) f: F,
    pub(crate) saves: bool,
}

impl<B: Backend, F> BackwardOp<B> for FnBackward<F>
where
    F: Fn(&BackwardCtx<'_, B>, &Tensor<B>) -> Grads<B> + Send + Sync,
{
    fn backward(&self, ctx: &BackwardCtx<'_, B>, grad: &Tensor<B>) -> Grads<B> {
        (self.f)(ctx, grad)
    }
    fn saves_tensors(&self) -> bool {
        self.saves
    }
}

/// A backward formula that keeps saved tensors.
pub(crate) fn saving<B: Backend, F>(f: F) -> FnBackward<F>
where
    F: Fn(&BackwardCtx<'_, B>, &Tensor<B>) -> Grads<B> + Send + Sync,
{
    FnBackward { f, saves: true }
}

/// A backward formula that keeps nothing but shapes (can run again after backward).
pub(crate) fn stateless<B: Backend, F>(f: F) -> FnBackward<F>
where
    F: Fn(&BackwardCtx<'_, B>, &Tensor<B>) -> Grads<B> + Send + Sync,
{
    FnBackward { f, saves: false }
}

/// `Some(g)` only where the input asked for a gradient.
pub(crate) fn want<B: Backend>(needed: bool, f: impl FnOnce() -> Result<Tensor<B>>) -> Result<Option<Tensor<B>>> {
    if needed { f().map(Some) } else { Ok(None) }
}

/// Attaches the forward-mode tangent of `out` computed by `rule` from the
/// inputs' tangents (`None` = zero), if any input carries one. Cheap when
/// none does: one check per input.
pub(crate) fn with_tangent<B: Backend>(
    out: Tensor<B>,
    inputs: &[&Tensor<B>],
    rule: impl FnOnce(&[Option<Tensor<B>>]) -> Result<Tensor<B>>,
) -> Result<Tensor<B>> {
    if inputs.iter().all(|t| t.inner.autograd.tangent.get().is_none()) {
        return Ok(out);
    }
    let ts: Vec<Option<Tensor<B>>> = inputs.iter().map(|t| t.tangent()).collect();
    let mut tan = rule(&ts)?;
    if tan.shape() != out.shape() {
        tan = tan.try_expand_to(out.shape())?;
    }
    if tan.dtype() != out.dtype() {
        tan = tan.try_to_dtype(out.dtype())?;
    }
    let _ = out.inner.autograd.tangent.set(tan);
    Ok(out)
}

/// One node for a composite op that PyTorch records as one node (`var`,
/// `layer_norm`, `linear`, ...): `forward` runs its pieces without recording
/// them; the node saves the inputs and `backward(inputs, needs_grad, g)`
/// gives one gradient per input with differentiable ops (so `create_graph`
/// works). Forward mode needs no rule of its own: the pieces, run on the
/// inputs, carry their tangents to the output.
#[track_caller]
pub(crate) fn composite<B: Backend>(
    name: &'static str,
    inputs: &[&Tensor<B>],
    forward: impl FnOnce() -> Result<Tensor<B>>,
    backward: impl Fn(&[Tensor<B>], &[bool], &Tensor<B>) -> Grads<B> + Send + Sync + 'static,
) -> Result<Tensor<B>> {
    let y = crate::no_grad(forward)?;
    let tangent = y.tangent();
    let needed: Vec<bool> = inputs.iter().map(|t| t.requires_grad()).collect();
    let out = Tensor::record(y.inner.storage.clone(), y.layout().clone(), y.dtype(), name, inputs, || {
        let saved: Vec<SavedTensor<B>> = inputs.iter().map(|t| SavedTensor::new(t)).collect();
        saving(move |ctx, g: &Tensor<B>| {
            let xs: Vec<Tensor<B>> = saved.iter().map(|s| s.get(ctx.name())).collect::<Result<_>>()?;
            backward(&xs, &needed, g)
        })
    });
    if let Some(t) = tangent {
        let _ = out.inner.autograd.tangent.set(t);
    }
    Ok(out)
}

/// `t` or zeros shaped like `like`.
pub(crate) fn tan_or_zero<B: Backend>(t: &Option<Tensor<B>>, like: &Tensor<B>) -> Tensor<B> {
    t.clone().unwrap_or_else(|| like.zeros_like())
}

/// The elementwise derivatives of a pointwise composite: given its inputs
/// and which of them need one, `d out_elem / d input_i` (broadcastable to
/// the output).
type PointwiseDerivs<B> = dyn Fn(&[Tensor<B>], &[bool]) -> Result<Vec<Option<Tensor<B>>>> + Send + Sync;

/// Records `per_elem` (the unreduced result, computed without a graph),
/// reduced by `reduction`, as ONE node `name` over `inputs`, as PyTorch
/// records its loss functions. `derivs` gives the closed-form elementwise
/// derivative for each input; backward multiplies it by the incoming
/// gradient (`g / N` broadcast for a mean) and sums to the input's shape,
/// and forward mode (JVP) sums the tangents times the same derivatives.
/// Closed forms give PyTorch's values at the kinks (|d| = delta, logit 0)
/// where gradients assembled from the pieces would not.
pub(crate) fn pointwise_composite<B: Backend>(
    name: &'static str,
    inputs: &[&Tensor<B>],
    per_elem: Tensor<B>,
    reduction: Reduction,
    derivs: impl Fn(&[Tensor<B>], &[bool]) -> Result<Vec<Option<Tensor<B>>>> + Send + Sync + 'static,
) -> Result<Tensor<B>> {
    let derivs: Arc<PointwiseDerivs<B>> = Arc::new(derivs);
    let shape = per_elem.shape().clone();
    let n = per_elem.numel() as f64;
    let out = crate::no_grad(|| reduction.apply(per_elem))?;
    let needed: Vec<bool> = inputs.iter().map(|t| t.requires_grad()).collect();
    let shapes: Vec<Shape> = inputs.iter().map(|t| t.shape().clone()).collect();
    let d2 = derivs.clone();
    let out = Tensor::record(out.inner.storage.clone(), out.layout().clone(), out.dtype(), name, inputs, || {
        let saved: Vec<SavedTensor<B>> = inputs.iter().map(|t| SavedTensor::new(t)).collect();
        saving(move |ctx, g: &Tensor<B>| {
            let g_elem = match reduction {
                Reduction::Mean => g.try_div_scalar(n)?.try_expand_to(&shape)?,
                Reduction::Sum => g.try_expand_to(&shape)?,
                Reduction::None => g.clone(),
            };
            let xs: Vec<Tensor<B>> = saved.iter().map(|s| s.get(ctx.name())).collect::<Result<_>>()?;
            let ds = d2(&xs, &needed)?;
            ds.into_iter().zip(&shapes).map(|(d, sh)| d.map(|d| g_elem.try_mul(&d)?.try_sum_to(sh)).transpose()).collect()
        })
    });
    let detached: Vec<Tensor<B>> = inputs.iter().map(|t| t.detach()).collect();
    with_tangent(out, inputs, |t| {
        let want: Vec<bool> = t.iter().map(|x| x.is_some()).collect();
        let ds = derivs(&detached, &want)?;
        let mut acc = Tensor::try_zeros_dtype(detached[0].shape().clone(), detached[0].dtype())?;
        for (tan, d) in t.iter().zip(ds) {
            if let (Some(tan), Some(d)) = (tan, d) {
                acc = acc.try_add(&tan.try_mul(&d)?)?;
            }
        }
        reduction.apply(acc)
    })
}

/// Stands in for the backward of an op that used an inference tensor.
struct InferenceTensorUsed;

impl<B: Backend> BackwardOp<B> for InferenceTensorUsed {
    fn backward(&self, ctx: &crate::node::BackwardCtx<'_, B>, _: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
        Err(Error::Autograd(format!(
            "{}: an input was created in inference_mode; inference tensors cannot be saved for backward. Make a copy with deep_clone() outside inference mode",
            ctx.name()
        )))
    }
    fn saves_tensors(&self) -> bool {
        false
    }
}
