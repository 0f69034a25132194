//! Differentiable ops, one family per file. Each op computes its forward
//! with backend primitives and records a backward written with `Tensor` ops,
//! so that the backward pass is itself differentiable (`create_graph`).

/// The panicking twin of each fallible method: `name(args) -> Ret = try_name, "doc";`
/// makes `pub fn name(&self, args) -> Ret` that panics at the caller's line
/// with the `Err` of `try_name` (one home for every op family's twins).
macro_rules! panicking_twins {
    ($($name:ident($($a:ident: $t:ty),*) -> $ret:ty = $try:ident, $doc:expr;)*) => {
        impl<B: Backend> Tensor<B> {
            $(
                #[doc = $doc]
                ///
                /// Panics where the `try_` twin returns an `Err` (at the caller's line).
                #[track_caller]
                pub fn $name(&self, $($a: $t),*) -> $ret {
                    crate::tensor::or_panic(self.$try($($a),*))
                }
            )*
        }
    };
}

pub(crate) mod binary;
pub(crate) mod cast;
pub(crate) mod compare;
pub(crate) mod index;
pub(crate) mod inplace;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod reduce;
pub(crate) mod softmax;
pub(crate) mod subscript;
pub(crate) mod unary;
pub(crate) mod view;

use crate::Tensor;
use crate::node::{BackwardCtx, BackwardOp, SavedTensor};
use autograd_core::{Backend, Result};

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
    if inputs.iter().all(|t| t.inner.tangent.get().is_none()) {
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
    let _ = out.inner.tangent.set(tan);
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
        let _ = out.inner.tangent.set(t);
    }
    Ok(out)
}

/// `t` or zeros shaped like `like`.
pub(crate) fn tan_or_zero<B: Backend>(t: &Option<Tensor<B>>, like: &Tensor<B>) -> Tensor<B> {
    t.clone().unwrap_or_else(|| like.zeros_like())
}
