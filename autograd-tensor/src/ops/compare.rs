//! Comparisons (masks without gradient), `where` and `masked_fill`.

use crate::Tensor;
use crate::node::SavedTensor;
use crate::recording::{saving, want};
use autograd_core::ResultExt;
use autograd_core::{Backend, BinaryOp, DType, Result, Shape};
use std::panic::Location;

macro_rules! cmp_methods {
    ($($name:ident, $try:ident, $sname:ident, $mask:ident, $op:expr, $doc:literal;)*) => {
        impl<B: Backend> Tensor<B> {
            $(
                #[doc = $doc]
                ///
                /// The result is a `Bool` tensor (PyTorch's `torch.bool`) that never
                /// requires grad; operands broadcast and promote as in arithmetic.
                #[track_caller]
                pub fn $try(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
                    if !self.dtype().is_float() && !other.dtype().is_float() {
                        return self.int_compare(other, $op, stringify!($name));
                    }
                    self.$mask(other)?.try_to_dtype(DType::Bool)
                }
                #[doc = $doc]
                #[track_caller]
                pub fn $name(&self, other: &Tensor<B>) -> Tensor<B> {
                    self.$try(other).or_panic()
                }
                #[doc = $doc]
                /// (against a scalar)
                #[track_caller]
                pub fn $sname(&self, c: f64) -> Tensor<B> {
                    self.scalar_operand(c).and_then(|(x, c)| x.$try(&c)).or_panic()
                }
                /// The same comparison as a 1.0/0.0 mask in the operands'
                /// (promoted, floating) dtype: what gradient formulas multiply by.
                #[track_caller]
                pub(crate) fn $mask(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
                    // A gradient's mask: integer and boolean operands (exact below
                    // 2^53) only reach here beside a float one; the public
                    // comparisons of two integer operands go through `int_compare`.
                    let as_float = |t: &Tensor<B>| if t.dtype().is_float() { Ok(t.detach()) } else { t.detach().try_to_dtype(DType::F64) };
                    let (a, b) = (as_float(self)?, as_float(other)?);
                    let (a, b) = a.promote_pair(&b)?;
                    let (s, shape) = a.binary_kernel(&b, $op, stringify!($name))?;
                    Ok(Tensor::from_storage(s, shape))
                }
            )*
        }
    };
}

cmp_methods! {
    eq, try_eq, eq_scalar, eq_mask, BinaryOp::Eq, "Elementwise `==`.";
    ne, try_ne, ne_scalar, ne_mask, BinaryOp::Ne, "Elementwise `!=`.";
    lt, try_lt, lt_scalar, lt_mask, BinaryOp::Lt, "Elementwise `<`.";
    le, try_le, le_scalar, le_mask, BinaryOp::Le, "Elementwise `<=`.";
    gt, try_gt, gt_scalar, gt_mask, BinaryOp::Gt, "Elementwise `>`.";
    ge, try_ge, ge_scalar, ge_mask, BinaryOp::Ge, "Elementwise `>=`.";
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
        crate::recording::with_tangent(out, &[&x, &y], |t| {
            let c = cond.detach();
            Tensor::try_where_cond(&c, &crate::recording::tan_or_zero(&t[0], &x), &crate::recording::tan_or_zero(&t[1], &y))
        })
    }

    /// Panicking [`Tensor::try_where_cond`].
    #[track_caller]
    pub fn where_cond(cond: &Tensor<B>, x: &Tensor<B>, y: &Tensor<B>) -> Tensor<B> {
        Self::try_where_cond(cond, x, y).or_panic()
    }

    /// `value` where `mask != 0`, else `self` (gradient flows only where the mask is 0).
    #[track_caller]
    pub fn try_masked_fill(&self, mask: &Tensor<B>, value: f64) -> Result<Tensor<B>> {
        Tensor::try_where_cond(mask, &self.scalar_like(value), self)
    }
}

impl<B: Backend> Tensor<B> {
    /// Two integer or boolean operands compared in int64, exactly (through
    /// f64 they would round above 2^53 and compare equal when they differ).
    #[track_caller]
    fn int_compare(&self, other: &Tensor<B>, op: BinaryOp, name: &'static str) -> Result<Tensor<B>> {
        let (a, b) = (self.detach().try_to_dtype(DType::I64)?, other.detach().try_to_dtype(DType::I64)?);
        let (s, shape) = a.binary_kernel(&b, op, name)?;
        Tensor::from_storage(s, shape).try_to_dtype(DType::Bool)
    }

    /// `self` and a 0-d operand holding `c` exactly: an integral `c` in
    /// int64's range beside an integer tensor is an int64 (compared exactly);
    /// any other `c` beside an integer tensor compares in f64 (a cast of
    /// 2.5 to the tensor's int64 would make `2 == 2.5` true); a float
    /// tensor takes `c` in its own dtype, as PyTorch's scalar promotion.
    fn scalar_operand(&self, c: f64) -> Result<(Tensor<B>, Tensor<B>)> {
        if self.dtype().is_float() {
            return Ok((self.clone(), self.scalar_like(c)));
        }
        // 2^63 is exact in f64; every integral f64 in [-2^63, 2^63) is an exact i64.
        if c.fract() == 0.0 && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&c) {
            return Ok((self.clone(), Tensor::try_from_host(autograd_core::HostData::I64(vec![c as i64]), Shape::scalar())?));
        }
        let x = self.detach().try_to_dtype(DType::F64)?;
        let c = x.scalar_like(c);
        Ok((x, c))
    }

    /// `self` as 1.0 where nonzero (true), 0.0 elsewhere, in f64: the common ground of the logical ops.
    fn truth(&self) -> Result<Tensor<B>> {
        let x = if self.dtype().is_float() { self.detach() } else { self.detach().try_to_dtype(DType::F64)? };
        x.ne_mask(&x.scalar_like(0.0))
    }
    /// Elementwise logical NOT of the truth of `self` (nonzero is true), as a `Bool` tensor.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let m = Tensor::<RefBackend>::from_vec(vec![true, false], [2]);
    /// let x = Tensor::<RefBackend>::from_vec(vec![0.0f32, 2.0], [2]);
    /// assert_eq!(m.logical_not().to_vec::<bool>(), vec![false, true]);
    /// assert_eq!(m.logical_and(&x).to_vec::<bool>(), vec![false, false]);
    /// assert_eq!(m.logical_or(&x).to_vec::<bool>(), vec![true, true]);
    /// assert_eq!(x.gt_scalar(1.0).sum().to_vec::<i64>(), vec![1]); // booleans sum to int64
    /// ```
    #[track_caller]
    pub fn try_logical_not(&self) -> Result<Tensor<B>> {
        self.truth()?.try_rsub_scalar(1.0)?.try_to_dtype(DType::Bool)
    }
    /// Elementwise logical AND, broadcasting, as a `Bool` tensor.
    #[track_caller]
    pub fn try_logical_and(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        self.truth()?.try_mul(&other.truth()?)?.try_to_dtype(DType::Bool)
    }
    /// Elementwise logical OR, broadcasting, as a `Bool` tensor.
    #[track_caller]
    pub fn try_logical_or(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        self.truth()?.try_add(&other.truth()?)?.try_to_dtype(DType::Bool)
    }
}

panicking_twins! {
    logical_not() -> Tensor<B> = try_logical_not, "Panicking [`Tensor::try_logical_not`].";
    logical_and(other: &Tensor<B>) -> Tensor<B> = try_logical_and, "Panicking [`Tensor::try_logical_and`].";
    logical_or(other: &Tensor<B>) -> Tensor<B> = try_logical_or, "Panicking [`Tensor::try_logical_or`].";
    masked_fill(mask: &Tensor<B>, value: f64) -> Tensor<B> = try_masked_fill, "Panicking [`Tensor::try_masked_fill`].";
}
