//! `+ - * /`, `pow` with a tensor exponent, `maximum`/`minimum`, with
//! broadcasting, scalar variants and operator overloads.

use super::{saving, stateless, want};
use crate::node::SavedTensor;
use crate::tensor::or_panic;
use crate::Tensor;
use autograd_core::{Backend, BinaryOp, DType, Result, Shape, UnaryOp};
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::panic::Location;

/// How much of the gradient of `maximum(a, b)` (or `minimum`) each operand
/// gets, as PyTorch's derivatives.yaml: half each on a tie, all to the
/// winner, and all to *both* where the comparison is undecided (a NaN), so
/// NaN gradients are not silently zeroed.
fn min_max_weights<B: Backend>(op: BinaryOp, a: &Tensor<B>, b: &Tensor<B>) -> Result<(Tensor<B>, Tensor<B>)> {
    let half_tie = a.try_eq(b)?.try_mul_scalar(0.5)?;
    let (a_loses, b_loses) = if op == BinaryOp::Maximum { (a.try_lt(b)?, a.try_gt(b)?) } else { (a.try_gt(b)?, a.try_lt(b)?) };
    let wa = a_loses.try_add(&half_tie)?.try_rsub_scalar(1.0)?;
    let wb = b_loses.try_add(&half_tie)?.try_rsub_scalar(1.0)?;
    Ok((wa, wb))
}

impl<B: Backend> Tensor<B> {
    /// Brings two operands to one dtype with PyTorch's promotion (the wider
    /// float wins, but a 0-d tensor does not widen a dimensioned one of its
    /// category: [`DType::result_type`]).
    #[track_caller]
    pub(crate) fn promote_pair(&self, other: &Tensor<B>) -> Result<(Tensor<B>, Tensor<B>)> {
        if self.dtype() == other.dtype() {
            return Ok((self.clone(), other.clone()));
        }
        let d = DType::result_type(self.dtype(), self.rank() == 0, other.dtype(), other.rank() == 0);
        Ok((self.try_to_dtype(d)?, other.try_to_dtype(d)?))
    }

    /// Runs a broadcasting binary kernel; returns the storage and the output shape.
    #[track_caller]
    pub(crate) fn binary_kernel(&self, other: &Tensor<B>, op: BinaryOp, name: &'static str) -> Result<(B::Storage, Shape)> {
        let loc = Location::caller();
        if self.shape() == other.shape() {
            let s = B::binary(op, &self.storage(), self.layout(), &other.storage(), other.layout()).map_err(|e| e.at(loc))?;
            return Ok((s, self.shape().clone()));
        }
        let shape = self.shape().broadcast(other.shape(), name).map_err(|e| e.at(loc))?;
        let la = self.layout().broadcast_as(&shape)?;
        let lb = other.layout().broadcast_as(&shape)?;
        let s = B::binary(op, &self.storage(), &la, &other.storage(), &lb).map_err(|e| e.at(loc))?;
        Ok((s, shape))
    }

    /// A 0-d tensor of this tensor's dtype (Rust scalars adopt the tensor's dtype).
    pub(crate) fn scalar_like(&self, v: f64) -> Tensor<B> {
        Tensor::full(Shape::scalar(), v, self.dtype())
    }

    /// Elementwise sum with broadcasting; `Err` names both shapes if they do not broadcast.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let a = Tensor::<RefBackend>::from_vec(vec![1.0f32, 2.0], [2]);
    /// let b = Tensor::<RefBackend>::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
    /// let e = a.try_add(&b).unwrap_err().to_string();
    /// assert!(e.contains("[2]") && e.contains("[3]"));
    /// ```
    #[track_caller]
    pub fn try_add(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        let (a, b) = self.promote_pair(other)?;
        let (s, shape) = a.binary_kernel(&b, BinaryOp::Add, "add")?;
        let (sa, sb, na, nb) = (a.shape().clone(), b.shape().clone(), a.requires_grad(), b.requires_grad());
        let out = Tensor::record_new(s, shape, "AddBackward0", &[&a, &b], |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![want(na, || g.try_sum_to(&sa))?, want(nb, || g.try_sum_to(&sb))?]))
        });
        super::with_tangent(out, &[&a, &b], |t| {
            let z = |i: usize, x: &Tensor<B>| super::tan_or_zero(&t[i], x);
            z(0, &a).try_add(&z(1, &b))
        })
    }

    /// Elementwise difference with broadcasting.
    #[track_caller]
    pub fn try_sub(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        let (a, b) = self.promote_pair(other)?;
        let (s, shape) = a.binary_kernel(&b, BinaryOp::Sub, "sub")?;
        let (sa, sb, na, nb) = (a.shape().clone(), b.shape().clone(), a.requires_grad(), b.requires_grad());
        let out = Tensor::record_new(s, shape, "SubBackward0", &[&a, &b], |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![want(na, || g.try_sum_to(&sa))?, want(nb, || g.try_neg()?.try_sum_to(&sb))?]))
        });
        super::with_tangent(out, &[&a, &b], |t| {
            let z = |i: usize, x: &Tensor<B>| super::tan_or_zero(&t[i], x);
            z(0, &a).try_sub(&z(1, &b))
        })
    }

    /// Elementwise product with broadcasting.
    #[track_caller]
    pub fn try_mul(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        let (a, b) = self.promote_pair(other)?;
        let (s, shape) = a.binary_kernel(&b, BinaryOp::Mul, "mul")?;
        let (na, nb) = (a.requires_grad(), b.requires_grad());
        let out = Tensor::record_new(s, shape, "MulBackward0", &[&a, &b], |_| {
            let (sa, sb) = (a.shape().clone(), b.shape().clone());
            let xa = nb.then(|| SavedTensor::new(&a));
            let xb = na.then(|| SavedTensor::new(&b));
            saving(move |ctx, g: &Tensor<B>| {
                let ga = match &xb {
                    Some(b) => Some(g.try_mul(&b.get(ctx.name())?)?.try_sum_to(&sa)?),
                    None => None,
                };
                let gb = match &xa {
                    Some(a) => Some(g.try_mul(&a.get(ctx.name())?)?.try_sum_to(&sb)?),
                    None => None,
                };
                Ok(vec![ga, gb])
            })
        });
        super::with_tangent(out, &[&a, &b], |t| {
            let z = |i: usize, x: &Tensor<B>| super::tan_or_zero(&t[i], x);
            z(0, &a).try_mul(&b.detach())?.try_add(&a.detach().try_mul(&z(1, &b))?)
        })
    }

    /// Elementwise quotient with broadcasting.
    #[track_caller]
    pub fn try_div(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        let (a, b) = self.promote_pair(other)?;
        let (s, shape) = a.binary_kernel(&b, BinaryOp::Div, "div")?;
        let (na, nb) = (a.requires_grad(), b.requires_grad());
        let out = Tensor::record_new(s, shape, "DivBackward0", &[&a, &b], |_| {
            let (sa, sb) = (a.shape().clone(), b.shape().clone());
            let xa = nb.then(|| SavedTensor::new(&a));
            let xb = SavedTensor::new(&b);
            saving(move |ctx, g: &Tensor<B>| {
                let b = &xb.get(ctx.name())?;
                let ga = want(na, || g.try_div(b)?.try_sum_to(&sa))?;
                let gb = match &xa {
                    // d(a/b)/db = -a / b^2
                    Some(a) => Some(g.try_neg()?.try_mul(&a.get(ctx.name())?)?.try_div(&b.try_mul(b)?)?.try_sum_to(&sb)?),
                    None => None,
                };
                Ok(vec![ga, gb])
            })
        });
        super::with_tangent(out, &[&a, &b], |t| {
            let z = |i: usize, x: &Tensor<B>| super::tan_or_zero(&t[i], x);
            let (a, b) = (a.detach(), b.detach());
            z(0, &a).try_div(&b)?.try_sub(&a.try_mul(&z(1, &b))?.try_div(&b.try_mul(&b)?)?)
        })
    }

    /// `self ^ exponent` elementwise with broadcasting (PowBackward1).
    #[track_caller]
    pub fn try_pow(&self, exponent: &Tensor<B>) -> Result<Tensor<B>> {
        let (a, b) = self.promote_pair(exponent)?;
        let (s, shape) = a.binary_kernel(&b, BinaryOp::Pow, "pow")?;
        let (na, nb) = (a.requires_grad(), b.requires_grad());
        let out = Tensor::record_new(s, shape, "PowBackward1", &[&a, &b], |out| {
            let (sa, sb) = (a.shape().clone(), b.shape().clone());
            let (xa, xb, y) = (SavedTensor::new(&a), SavedTensor::new(&b), SavedTensor::new(out));
            saving(move |ctx, g: &Tensor<B>| {
                let (a, b) = (xa.get(ctx.name())?, xb.get(ctx.name())?);
                // PyTorch's pow_backward_self: 0 where the exponent is 0 (not 0 * 0^-1 = NaN at a = 0).
                let ga = want(na, || {
                    let d = g.try_mul(&b.try_mul(&a.try_pow(&b.try_sub(&b.scalar_like(1.0))?)?)?)?;
                    d.try_masked_fill(&b.try_eq(&b.scalar_like(0.0))?, 0.0)?.try_sum_to(&sa)
                })?;
                let gb = want(nb, || {
                    let y = ctx.output(&y.get(ctx.name())?);
                    // PyTorch's convention: where a == 0 and b >= 0 the gradient is 0, not NaN.
                    let zero_base = a.try_eq(&a.scalar_like(0.0))?.try_mul(&b.try_ge(&b.scalar_like(0.0))?)?;
                    let d = g.try_mul(&y)?.try_mul(&a.log())?;
                    d.try_masked_fill(&zero_base, 0.0)?.try_sum_to(&sb)
                })?;
                Ok(vec![ga, gb])
            })
        });
        super::with_tangent(out, &[&a, &b], |t| {
            let z = |i: usize, x: &Tensor<B>| super::tan_or_zero(&t[i], x);
            let (a, b) = (a.detach(), b.detach());
            let y = a.try_pow(&b)?;
            let da = z(0, &a).try_mul(&b)?.try_mul(&a.try_pow(&b.try_sub_scalar(1.0)?)?)?.try_masked_fill(&b.eq_scalar(0.0), 0.0)?;
            let zero_base = a.eq_scalar(0.0).try_mul(&b.ge_scalar(0.0))?;
            da.try_add(&z(1, &b).try_mul(&y)?.try_mul(&a.try_log()?)?.try_masked_fill(&zero_base, 0.0)?)
        })
    }

    /// Elementwise maximum; ties split the gradient in half, as PyTorch does.
    #[track_caller]
    pub fn try_maximum(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        self.min_max(other, BinaryOp::Maximum, "MaximumBackward0")
    }

    /// Elementwise minimum; ties split the gradient in half.
    #[track_caller]
    pub fn try_minimum(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        self.min_max(other, BinaryOp::Minimum, "MinimumBackward0")
    }

    #[track_caller]
    fn min_max(&self, other: &Tensor<B>, op: BinaryOp, name: &'static str) -> Result<Tensor<B>> {
        let (a, b) = self.promote_pair(other)?;
        let (s, shape) = a.binary_kernel(&b, op, if op == BinaryOp::Maximum { "maximum" } else { "minimum" })?;
        let (na, nb) = (a.requires_grad(), b.requires_grad());
        let out = Tensor::record_new(s, shape, name, &[&a, &b], |_| {
            let (sa, sb) = (a.shape().clone(), b.shape().clone());
            let (xa, xb) = (SavedTensor::new(&a), SavedTensor::new(&b));
            saving(move |ctx, g: &Tensor<B>| {
                let (a, b) = (&xa.get(ctx.name())?, &xb.get(ctx.name())?);
                let (wa, wb) = min_max_weights(op, a, b)?;
                let ga = want(na, || g.try_mul(&wa)?.try_sum_to(&sa))?;
                let gb = want(nb, || g.try_mul(&wb)?.try_sum_to(&sb))?;
                Ok(vec![ga, gb])
            })
        });
        super::with_tangent(out, &[&a, &b], |t| {
            let z = |i: usize, x: &Tensor<B>| super::tan_or_zero(&t[i], x);
            let (wa, wb) = min_max_weights(op, &a.detach(), &b.detach())?;
            z(0, &a).try_mul(&wa)?.try_add(&z(1, &b).try_mul(&wb)?)
        })
    }

    // ----- scalar variants (a Rust scalar adopts the tensor's dtype) -----

    /// `self + c`.
    #[track_caller]
    pub fn try_add_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.scalar_op(BinaryOp::Add, c, false, 1.0, "AddBackward0")
    }
    /// `self - c`.
    #[track_caller]
    pub fn try_sub_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.scalar_op(BinaryOp::Sub, c, false, 1.0, "SubBackward0")
    }
    /// `c - self`.
    #[track_caller]
    pub fn try_rsub_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.scalar_op(BinaryOp::Sub, c, true, -1.0, "RsubBackward1")
    }
    /// `self * c`.
    #[track_caller]
    pub fn try_mul_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.scalar_op(BinaryOp::Mul, c, false, c, "MulBackward0")
    }
    /// `self / c` (a true division, bit-identical to dividing by a tensor).
    #[track_caller]
    pub fn try_div_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.try_div(&self.scalar_like(c))
    }
    /// `c / self`, as PyTorch computes it: `reciprocal(self) * c`.
    #[track_caller]
    pub fn try_rdiv_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.try_unary_op(UnaryOp::Recip)?.try_mul_scalar(c)
    }

    /// `self op c` (or `c op self` when `scalar_first`) with `c` in this
    /// tensor's dtype, broadcast with stride 0: the kernel's scalar path. The
    /// derivative is the constant `d` (1 for +/-, -1 for `c - x`, `c` for
    /// `x * c`), so the node saves nothing.
    #[track_caller]
    fn scalar_op(&self, op: BinaryOp, c: f64, scalar_first: bool, d: f64, name: &'static str) -> Result<Tensor<B>> {
        let at = |e: autograd_core::Error| e.at(Location::caller());
        let c = self.scalar_like(c);
        let lc = c.layout().broadcast_as(self.shape()).map_err(at)?;
        let (cs, xs) = (c.storage(), self.storage());
        let s = if scalar_first { B::binary(op, &cs, &lc, &xs, self.layout()) } else { B::binary(op, &xs, self.layout(), &cs, &lc) };
        let out = Tensor::record_new(s.map_err(at)?, self.shape().clone(), name, &[self], |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(if d == 1.0 { g.clone() } else { g.try_mul_scalar(d)? })]))
        });
        super::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_mul_scalar(d))
    }
}

panicking_twins! {
    add(other: &Tensor<B>) -> Tensor<B> = try_add, "`self + other`, broadcasting (AddBackward0).";
    sub(other: &Tensor<B>) -> Tensor<B> = try_sub, "`self - other`, broadcasting (SubBackward0).";
    mul(other: &Tensor<B>) -> Tensor<B> = try_mul, "`self * other`, broadcasting (MulBackward0).";
    div(other: &Tensor<B>) -> Tensor<B> = try_div, "`self / other`, broadcasting (DivBackward0).";
    pow(exponent: &Tensor<B>) -> Tensor<B> = try_pow, "`self ^ exponent`, broadcasting (PowBackward1).";
    maximum(other: &Tensor<B>) -> Tensor<B> = try_maximum, "Elementwise maximum, broadcasting; NaN propagates.";
    minimum(other: &Tensor<B>) -> Tensor<B> = try_minimum, "Elementwise minimum, broadcasting; NaN propagates.";
}

macro_rules! bin_trait {
    ($Trait:ident, $method:ident, $try:ident, $try_scalar:ident, $try_rscalar:expr) => {
        impl<B: Backend> $Trait<&Tensor<B>> for &Tensor<B> {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: &Tensor<B>) -> Tensor<B> {
                or_panic(self.$try(rhs))
            }
        }
        impl<B: Backend> $Trait<Tensor<B>> for Tensor<B> {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: Tensor<B>) -> Tensor<B> {
                or_panic(self.$try(&rhs))
            }
        }
        impl<B: Backend> $Trait<&Tensor<B>> for Tensor<B> {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: &Tensor<B>) -> Tensor<B> {
                or_panic(self.$try(rhs))
            }
        }
        impl<B: Backend> $Trait<Tensor<B>> for &Tensor<B> {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: Tensor<B>) -> Tensor<B> {
                or_panic(self.$try(&rhs))
            }
        }
        impl<B: Backend> $Trait<f64> for &Tensor<B> {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: f64) -> Tensor<B> {
                or_panic(self.$try_scalar(rhs))
            }
        }
        impl<B: Backend> $Trait<f64> for Tensor<B> {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: f64) -> Tensor<B> {
                or_panic(self.$try_scalar(rhs))
            }
        }
        impl<B: Backend> $Trait<&Tensor<B>> for f64 {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: &Tensor<B>) -> Tensor<B> {
                let f: fn(&Tensor<B>, f64) -> Result<Tensor<B>> = $try_rscalar;
                or_panic(f(rhs, self))
            }
        }
        impl<B: Backend> $Trait<Tensor<B>> for f64 {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: Tensor<B>) -> Tensor<B> {
                let f: fn(&Tensor<B>, f64) -> Result<Tensor<B>> = $try_rscalar;
                or_panic(f(&rhs, self))
            }
        }
    };
}

bin_trait!(Add, add, try_add, try_add_scalar, |t, c| t.try_add_scalar(c));
bin_trait!(Sub, sub, try_sub, try_sub_scalar, |t, c| t.try_rsub_scalar(c));
bin_trait!(Mul, mul, try_mul, try_mul_scalar, |t, c| t.try_mul_scalar(c));
bin_trait!(Div, div, try_div, try_div_scalar, |t, c| t.try_rdiv_scalar(c));

impl<B: Backend> Neg for &Tensor<B> {
    type Output = Tensor<B>;
    #[track_caller]
    fn neg(self) -> Tensor<B> {
        or_panic(self.try_neg())
    }
}

impl<B: Backend> Neg for Tensor<B> {
    type Output = Tensor<B>;
    #[track_caller]
    fn neg(self) -> Tensor<B> {
        or_panic(self.try_neg())
    }
}
