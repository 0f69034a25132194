//! Comparisons (masks without gradient), `where` and `masked_fill`.

use super::{saving, want};
use crate::node::SavedTensor;
use crate::tensor::or_panic;
use crate::Tensor;
use autograd_core::{Backend, BinaryOp, DType, Result};
use std::panic::Location;

macro_rules! cmp_methods {
    ($($name:ident, $try:ident, $sname:ident, $op:expr, $doc:literal;)*) => {
        impl<B: Backend> Tensor<B> {
            $(
                #[doc = $doc]
                ///
                /// The mask holds 1.0/0.0 in the operands' (promoted) dtype and never requires grad.
                #[track_caller]
                pub fn $try(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
                    // Integer operands (index tensors, 0/1 masks) compare as f64, exact below 2^53.
                    let as_float = |t: &Tensor<B>| if t.dtype().is_float() { Ok(t.detach()) } else { t.detach().try_to_dtype(DType::F64) };
                    let (a, b) = (as_float(self)?, as_float(other)?);
                    let (a, b) = a.promote_pair(&b)?;
                    let (s, shape) = a.binary_kernel(&b, $op, stringify!($name))?;
                    Ok(Tensor::from_storage(s, shape))
                }
                #[doc = $doc]
                #[track_caller]
                pub fn $name(&self, other: &Tensor<B>) -> Tensor<B> {
                    or_panic(self.$try(other))
                }
                #[doc = $doc]
                /// (against a scalar)
                #[track_caller]
                pub fn $sname(&self, c: f64) -> Tensor<B> {
                    or_panic(self.$try(&self.scalar_like(c)))
                }
            )*
        }
    };
}

cmp_methods! {
    eq, try_eq, eq_scalar, BinaryOp::Eq, "Elementwise `==` as a 0/1 mask.";
    ne, try_ne, ne_scalar, BinaryOp::Ne, "Elementwise `!=` as a 0/1 mask.";
    lt, try_lt, lt_scalar, BinaryOp::Lt, "Elementwise `<` as a 0/1 mask.";
    le, try_le, le_scalar, BinaryOp::Le, "Elementwise `<=` as a 0/1 mask.";
    gt, try_gt, gt_scalar, BinaryOp::Gt, "Elementwise `>` as a 0/1 mask.";
    ge, try_ge, ge_scalar, BinaryOp::Ge, "Elementwise `>=` as a 0/1 mask.";
}

impl<B: Backend> Tensor<B> {
    /// `cond != 0 ? x : y` elementwise with broadcasting (PyTorch's `torch.where`).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![-1.0f64, 2.0], [2]);
    /// let y = Tensor::where_cond(&x.gt_scalar(0.0), &x, &x.zeros_like());
    /// assert_eq!(y.to_vec::<f64>(), vec![0.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn try_where_cond(cond: &Tensor<B>, x: &Tensor<B>, y: &Tensor<B>) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let (x, y) = x.promote_pair(y)?;
        let shape = x.shape().broadcast(y.shape(), "where").map_err(|e| e.at(loc))?;
        let shape = shape.broadcast(cond.shape(), "where").map_err(|e| e.at(loc))?;
        let (lc, lx, ly) = (cond.layout().broadcast_as(&shape)?, x.layout().broadcast_as(&shape)?, y.layout().broadcast_as(&shape)?);
        let s = B::where_select(&cond.storage(), &lc, &x.storage(), &lx, &y.storage(), &ly)?;
        let (nx, ny) = (x.requires_grad(), y.requires_grad());
        let out = Tensor::record_new(s, shape, "WhereBackward0", &[&x, &y], |_| {
            let (sx, sy) = (x.shape().clone(), y.shape().clone());
            let c = SavedTensor::new(&cond.detach());
            saving(move |ctx, g: &Tensor<B>| {
                let c = &c.get(ctx.name())?;
                let z = g.zeros_like();
                let gx = want(nx, || Tensor::try_where_cond(c, g, &z)?.try_sum_to(&sx))?;
                let gy = want(ny, || Tensor::try_where_cond(c, &z, g)?.try_sum_to(&sy))?;
                Ok(vec![gx, gy])
            })
        });
        super::with_tangent(out, &[&x, &y], |t| {
            let c = cond.detach();
            Tensor::try_where_cond(&c, &super::tan_or_zero(&t[0], &x), &super::tan_or_zero(&t[1], &y))
        })
    }

    /// Panicking [`Tensor::try_where_cond`].
    #[track_caller]
    pub fn where_cond(cond: &Tensor<B>, x: &Tensor<B>, y: &Tensor<B>) -> Tensor<B> {
        or_panic(Self::try_where_cond(cond, x, y))
    }

    /// `value` where `mask != 0`, else `self` (gradient flows only where the mask is 0).
    #[track_caller]
    pub fn try_masked_fill(&self, mask: &Tensor<B>, value: f64) -> Result<Tensor<B>> {
        Tensor::try_where_cond(mask, &self.scalar_like(value), self)
    }
}

panicking_twins! {
    masked_fill(mask: &Tensor<B>, value: f64) -> Tensor<B> = try_masked_fill, "Panicking [`Tensor::try_masked_fill`].";
}
