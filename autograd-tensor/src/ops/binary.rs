//! `+ - * /`, `pow` with a tensor exponent, `maximum`/`minimum`, with
//! broadcasting, scalar variants and operator overloads.

use crate::Tensor;
use crate::node::SavedTensor;
use crate::recording::{FnBackward, stateless};
use autograd_core::ResultExt;
use autograd_core::{Backend, BinaryOp, DType, Result, Shape, UnaryOp};
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::panic::Location;

/// How much of the gradient of `maximum(a, b)` (or `minimum`) each operand
/// gets, as PyTorch's derivatives.yaml: half each on a tie, all to the
/// winner, and all to *both* where the comparison is undecided (a NaN), so
/// NaN gradients are not silently zeroed.
fn min_max_weights<B: Backend>(op: BinaryOp, a: &Tensor<B>, b: &Tensor<B>) -> Result<(Tensor<B>, Tensor<B>)> {
    let half_tie = a.eq_mask(b)?.try_mul_scalar(0.5)?;
    let (a_loses, b_loses) = if op == BinaryOp::Maximum { (a.lt_mask(b)?, a.gt_mask(b)?) } else { (a.gt_mask(b)?, a.lt_mask(b)?) };
    let wa = a_loses.try_add(&half_tie)?.try_rsub_scalar(1.0)?;
    let wb = b_loses.try_add(&half_tie)?.try_rsub_scalar(1.0)?;
    Ok((wa, wb))
}

/// `(reads a, reads b, reads the output)` from a row's list of `a`, `b`, `y`.
macro_rules! reads_of {
    ($($r:ident)*) => {
        (false $(|| reads_of!(@is a $r))*, false $(|| reads_of!(@is b $r))*, false $(|| reads_of!(@is y $r))*)
    };
    (@is a a) => { true };
    (@is b b) => { true };
    (@is y y) => { true };
    (@is $want:ident $r:ident) => { false };
}

/// One row per binary op: variant, `try_` method (its panicking twin is
/// generated below), kernel name for messages, `grad_fn` name, what each
/// partial derivative reads (`a`, `b`, the output `y`), and the partials
/// times the incoming `g` (the gradient, or the tangent in forward mode),
/// before broadcasting is undone. As `derivatives.yaml`: `self:` and `other:`.
/// The generated matches name every variant (comparisons are masks, in
/// `compare.rs`), so a new `BinaryOp` without a row does not compile.
macro_rules! binary_table {
    ($(
        $v:ident: $try:ident, $kernel:literal, $grad_fn:literal, $doc:literal,
        reads(a: [$($ra:ident)*], b: [$($rb:ident)*]),
        |$g:ident, $a:ident, $b:ident, $y:ident| da = $da:expr, db = $db:expr;
    )*) => {
        fn kernel_name(op: BinaryOp) -> &'static str {
            match op {
                $( BinaryOp::$v => $kernel, )*
                // comparisons are masks without a gradient (compare.rs)
                BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => "compare",
            }
        }

        fn grad_fn_name(op: BinaryOp) -> &'static str {
            match op {
                $( BinaryOp::$v => $grad_fn, )*
                BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => "CompareBackward0",
            }
        }

        /// Which of (a, b, output) the node must save, given which operands need a gradient.
        fn reads(op: BinaryOp, na: bool, nb: bool) -> (bool, bool, bool) {
            let or = |x: (bool, bool, bool), y: (bool, bool, bool)| (x.0 || y.0, x.1 || y.1, x.2 || y.2);
            let none = (false, false, false);
            match op {
                $( BinaryOp::$v => {
                    or(if na { reads_of!($($ra)*) } else { none }, if nb { reads_of!($($rb)*) } else { none })
                } )*
                BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => none,
            }
        }

        /// The partials of `op` times `ga` (for `a`) and `gb` (for `b`),
        /// each only where given.
        #[allow(clippy::type_complexity)]
        fn d_binary<B: Backend>(
            op: BinaryOp,
            ga: Option<&Tensor<B>>,
            gb: Option<&Tensor<B>>,
            a: impl Fn() -> Result<Tensor<B>>,
            b: impl Fn() -> Result<Tensor<B>>,
            y: impl Fn() -> Result<Tensor<B>>,
        ) -> Result<(Option<Tensor<B>>, Option<Tensor<B>>)> {
            #[allow(unused_variables)]
            match op {
                $( BinaryOp::$v => {
                    let ($a, $b, $y) = (&a, &b, &y);
                    let da = match ga { Some($g) => Some($da?), None => None };
                    let db = match gb { Some($g) => Some($db?), None => None };
                    Ok((da, db))
                } )*
                BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => Ok((None, None)),
            }
        }

        impl<B: Backend> Tensor<B> {
            $(
                #[doc = $doc]
                #[track_caller]
                pub fn $try(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
                    self.try_binary_op(other, BinaryOp::$v)
                }
            )*
        }
    };
}

binary_table! {
    Add: try_add, "add", "AddBackward0",
        "Elementwise sum with broadcasting; `Err` names both shapes if they do not broadcast.\n\n```\nuse autograd_tensor::Tensor;\nuse autograd_core::RefBackend;\nlet a = Tensor::<RefBackend>::from_vec(vec![1.0f32, 2.0], [2]);\nlet b = Tensor::<RefBackend>::from_vec(vec![1.0f32, 2.0, 3.0], [3]);\nlet e = a.try_add(&b).unwrap_err().to_string();\nassert!(e.contains(\"[2]\") && e.contains(\"[3]\"));\n```",
        reads(a: [], b: []),
        |g, a, b, y| da = Ok::<_, autograd_core::Error>(g.clone()), db = Ok::<_, autograd_core::Error>(g.clone());
    Sub: try_sub, "sub", "SubBackward0", "Elementwise difference with broadcasting.",
        reads(a: [], b: []),
        |g, a, b, y| da = Ok::<_, autograd_core::Error>(g.clone()), db = g.try_neg();
    Mul: try_mul, "mul", "MulBackward0", "Elementwise product with broadcasting.",
        reads(a: [b], b: [a]),
        |g, a, b, y| da = g.try_mul(&b()?), db = g.try_mul(&a()?);
    // d(a/b)/db = -a / b^2
    Div: try_div, "div", "DivBackward0", "Elementwise quotient with broadcasting.",
        reads(a: [b], b: [a b]),
        |g, a, b, y| da = g.try_div(&b()?), db = { let b = b()?; g.try_neg()?.try_mul(&a()?)?.try_div(&b.try_mul(&b)?) };
    // PyTorch's pow_backward_self: 0 where the exponent is 0 (not 0 * 0^-1 = NaN
    // at a = 0); pow_backward_exponent: 0 where a == 0 and b >= 0, not NaN
    Pow: try_pow, "pow", "PowBackward1", "`self ^ exponent` elementwise with broadcasting (PowBackward1).",
        reads(a: [a b], b: [a b y]),
        |g, a, b, y| da = {
            let (a, b) = (a()?, b()?);
            let d = g.try_mul(&b.try_mul(&a.try_pow(&b.try_sub(&b.scalar_like(1.0))?)?)?)?;
            d.try_masked_fill(&b.eq_mask(&b.scalar_like(0.0))?, 0.0)
        }, db = {
            let (a, b) = (a()?, b()?);
            let zero_base = a.eq_mask(&a.scalar_like(0.0))?.try_mul(&b.ge_mask(&b.scalar_like(0.0))?)?;
            g.try_mul(&y()?)?.try_mul(&a.try_log()?)?.try_masked_fill(&zero_base, 0.0)
        };
    // ties split the gradient in half, as PyTorch ([`min_max_weights`])
    Maximum: try_maximum, "maximum", "MaximumBackward0", "Elementwise maximum; ties split the gradient in half, as PyTorch does.",
        reads(a: [a b], b: [a b]),
        |g, a, b, y| da = g.try_mul(&min_max_weights(BinaryOp::Maximum, &a()?, &b()?)?.0),
                     db = g.try_mul(&min_max_weights(BinaryOp::Maximum, &a()?, &b()?)?.1);
    Minimum: try_minimum, "minimum", "MinimumBackward0", "Elementwise minimum; ties split the gradient in half.",
        reads(a: [a b], b: [a b]),
        |g, a, b, y| da = g.try_mul(&min_max_weights(BinaryOp::Minimum, &a()?, &b()?)?.0),
                     db = g.try_mul(&min_max_weights(BinaryOp::Minimum, &a()?, &b()?)?.1);
    // relu's backward in one pass; its own gradient is the same mask for the
    // incoming gradient and zero for the output (flat almost everywhere),
    // as PyTorch's ThresholdBackwardBackward0
    ThresholdBackward: try_threshold_backward, "threshold_backward", "ThresholdBackwardBackward0",
        "`self` (a gradient) where `output > 0` or is NaN, else 0: relu's backward in one pass, as PyTorch's `threshold_backward(grad, output, 0)`.\n\n```\nuse autograd_tensor::Tensor;\nuse autograd_core::RefBackend;\nlet g = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0, 3.0], [3]);\nlet y = Tensor::<RefBackend>::from_vec(vec![0.5f64, 0.0, f64::NAN], [3]);\nassert_eq!(g.try_threshold_backward(&y).unwrap().to_vec::<f64>(), vec![1.0, 0.0, 3.0]);\n```",
        reads(a: [b], b: []),
        |g, a, b, y| da = g.try_threshold_backward(&b()?), db = Tensor::try_zeros_dtype(g.shape().clone(), g.dtype());
    // GELU's backward in one pass; its own gradient (GeluBackwardBackward0):
    // gelu'(x) for the incoming gradient, a phi(x) (2 - x^2) for x
    GeluBackward: try_gelu_backward, "gelu_backward", "GeluBackwardBackward0",
        "`self * gelu'(x)` (a gradient times GELU's exact derivative `Phi(x) + x phi(x)`): GELU's backward in one pass, as PyTorch's `gelu_backward(grad, self)`.\n\n```\nuse autograd_tensor::Tensor;\nuse autograd_core::RefBackend;\nlet g = Tensor::<RefBackend>::from_vec(vec![2.0f64, 2.0], [2]);\nlet x = Tensor::<RefBackend>::from_vec(vec![0.0f64, 40.0], [2]);\nassert_eq!(g.try_gelu_backward(&x).unwrap().to_vec::<f64>(), vec![1.0, 2.0]);\n```",
        reads(a: [b], b: [a b]),
        |g, a, b, y| da = g.try_gelu_backward(&b()?), db = {
            let x = b()?;
            let pdf = x.try_mul(&x)?.try_mul_scalar(-0.5)?.try_exp()?.try_mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt())?;
            g.try_mul(&a()?)?.try_mul(&pdf)?.try_mul(&x.try_mul(&x)?.try_rsub_scalar(2.0)?)
        };
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
        Tensor::full_dtype(Shape::scalar(), v, self.dtype())
    }

    /// Applies a differentiable binary op with broadcasting and promotion:
    /// the kernel, the node its row in the table describes (saving only what
    /// the needed derivatives read; reducing each gradient to its operand's
    /// shape once, here) and the forward-mode tangent.
    #[track_caller]
    fn try_binary_op(&self, other: &Tensor<B>, op: BinaryOp) -> Result<Tensor<B>> {
        let (mut a, mut b) = self.promote_pair(other)?;
        if op == BinaryOp::Div && !a.dtype().is_float() {
            // PyTorch's `/` is true division: integers divide in the default float dtype.
            (a, b) = (a.try_to_dtype(DType::F32)?, b.try_to_dtype(DType::F32)?);
        }
        let (s, shape) = a.binary_kernel(&b, op, kernel_name(op))?;
        let (na, nb) = (a.requires_grad(), b.requires_grad());
        let out = Tensor::record_new(s, shape, grad_fn_name(op), &[&a, &b], |out| {
            let (sa, sb) = (a.shape().clone(), b.shape().clone());
            let (ra, rb, ry) = reads(op, na, nb);
            let xa = ra.then(|| SavedTensor::new(&a));
            let xb = rb.then(|| SavedTensor::new(&b));
            let xy = ry.then(|| SavedTensor::new(&out.get()));
            let saves = ra || rb || ry;
            let f = move |ctx: &crate::node::BackwardCtx<'_, B>, g: &Tensor<B>| {
                let n = ctx.name();
                let a = || xa.as_ref().expect("a saved").get(n);
                let b = || xb.as_ref().expect("b saved").get(n);
                let y = || -> Result<Tensor<B>> { Ok(ctx.output(&xy.as_ref().expect("output saved").get(n)?)) };
                let (ga, gb) = d_binary(op, na.then_some(g), nb.then_some(g), a, b, y)?;
                Ok(vec![ga.map(|t| t.try_sum_to(&sa)).transpose()?, gb.map(|t| t.try_sum_to(&sb)).transpose()?])
            };
            FnBackward { f, saves }
        });
        if a.inner.autograd.tangent.get().is_none() && b.inner.autograd.tangent.get().is_none() {
            return Ok(out); // no forward mode: skip the output's detached handle
        }
        let y = out.detach();
        crate::recording::with_tangent(out, &[&a, &b], |t| {
            let (ad, bd) = (a.detach(), b.detach());
            let (da, db) = d_binary(op, t[0].as_ref(), t[1].as_ref(), || Ok(ad.clone()), || Ok(bd.clone()), || Ok(y.clone()))?;
            match (da, db) {
                (Some(da), Some(db)) => da.try_add(&db),
                (Some(d), None) | (None, Some(d)) => Ok(d),
                (None, None) => Tensor::try_zeros_dtype(y.shape().clone(), y.dtype()),
            }
        })
    }

    // ----- scalar variants -----------------------------------------------
    //
    // PyTorch's scalar promotion: a scalar never widens a float tensor (an
    // f32 tensor times 2.0f64 is f32); a float scalar lifts an integer tensor
    // to the default float dtype (float32); an integer scalar keeps an
    // integer tensor integer. The `f64` methods below take a float scalar;
    // the operators take any Rust number (`&x * 2`, `2.5f32 - &x`).

    /// `self` in the dtype an op with a scalar computes in.
    fn for_scalar(&self, float_scalar: bool) -> Result<Tensor<B>> {
        if float_scalar && !self.dtype().is_float() { self.try_to_dtype(DType::F32) } else { Ok(self.clone()) }
    }

    /// `self + c`.
    #[track_caller]
    pub fn try_add_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.scalar_arith(BinaryOp::Add, c, true, false)
    }
    /// `self - c`.
    #[track_caller]
    pub fn try_sub_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.scalar_arith(BinaryOp::Sub, c, true, false)
    }
    /// `c - self`.
    #[track_caller]
    pub fn try_rsub_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.scalar_arith(BinaryOp::Sub, c, true, true)
    }
    /// `self * c`.
    #[track_caller]
    pub fn try_mul_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.scalar_arith(BinaryOp::Mul, c, true, false)
    }
    /// `self / c` (a true division, bit-identical to dividing by a tensor).
    #[track_caller]
    pub fn try_div_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.scalar_arith(BinaryOp::Div, c, true, false)
    }
    /// `c / self`, as PyTorch computes it: `reciprocal(self) * c`.
    #[track_caller]
    pub fn try_rdiv_scalar(&self, c: f64) -> Result<Tensor<B>> {
        self.scalar_arith(BinaryOp::Div, c, true, true)
    }

    /// `self op c` for a scalar of any Rust numeric type, with PyTorch's
    /// promotion (see the section comment); `scalar_first` for `c op self`.
    #[track_caller]
    pub(crate) fn try_scalar_any(&self, op: BinaryOp, c: impl Scalar, scalar_first: bool) -> Result<Tensor<B>> {
        if !c.is_float() && !self.dtype().is_float() && op != BinaryOp::Div {
            return self.int_scalar_arith(op, c, scalar_first);
        }
        self.scalar_arith(op, c.to_f64(), c.is_float(), scalar_first)
    }

    /// An integer (or bool) tensor with an integer scalar: int64 arithmetic
    /// end to end, wrapping as PyTorch's (the scalar is never an f64, which
    /// would round it above 2^53). A scalar outside int64 is an `Err`, as
    /// PyTorch's "Overflow when unpacking long".
    #[track_caller]
    fn int_scalar_arith(&self, op: BinaryOp, c: impl Scalar, scalar_first: bool) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let v = c.to_i64().ok_or_else(|| {
            autograd_core::Error::msg(format!("{op:?} with the scalar {}: it does not fit int64 (called at {loc})", c.to_f64()))
        })?;
        if !matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul) {
            return Err(autograd_core::Error::msg(format!("{op:?} with a scalar is not an operator")));
        }
        let x = self.try_to_dtype(DType::I64)?; // bool + int is int64, as in PyTorch
        let c = Tensor::<B>::try_from_host(autograd_core::HostData::I64(vec![v]), Shape::scalar())?;
        let (a, b) = if scalar_first { (&c, &x) } else { (&x, &c) };
        a.try_binary_op(b, op).map_err(|e| e.at(loc))
    }

    /// The one home of scalar arithmetic: the promotion, then the op.
    /// Division is true division, so it always computes as with a float scalar.
    #[track_caller]
    fn scalar_arith(&self, op: BinaryOp, c: f64, float_scalar: bool, scalar_first: bool) -> Result<Tensor<B>> {
        let x = self.for_scalar(float_scalar || op == BinaryOp::Div)?;
        match (op, scalar_first) {
            (BinaryOp::Add, _) => x.scalar_op(op, c, false, 1.0, "AddBackward0"),
            (BinaryOp::Sub, false) => x.scalar_op(op, c, false, 1.0, "SubBackward0"),
            (BinaryOp::Sub, true) => x.scalar_op(op, c, true, -1.0, "RsubBackward1"),
            (BinaryOp::Mul, _) => x.scalar_op(op, c, false, c, "MulBackward0"),
            (BinaryOp::Div, false) => x.try_div(&x.scalar_like(c)),
            (BinaryOp::Div, true) => x.try_unary_op(UnaryOp::Recip)?.try_mul_scalar(c),
            (op, _) => Err(autograd_core::Error::msg(format!("{op:?} with a scalar is not an operator"))),
        }
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
        crate::recording::with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_mul_scalar(d))
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
    gelu_backward(x: &Tensor<B>) -> Tensor<B> = try_gelu_backward, "`self * gelu'(x)`: GELU's backward in one pass (GeluBackwardBackward0).";
    threshold_backward(output: &Tensor<B>) -> Tensor<B> = try_threshold_backward, "`self` where `output > 0` (or NaN), else 0: relu's backward (ThresholdBackwardBackward0).";
}

/// A Rust number usable as a scalar operand (`&x * 2`, `0.5f32 + &x`), with
/// PyTorch's promotion: see [`Tensor::try_add_scalar`]'s section.
///
/// ```
/// use autograd_tensor::Tensor;
/// use autograd_core::{RefBackend, DType};
/// let i = Tensor::<RefBackend>::from_vec(vec![1i64, 2], [2]);
/// assert_eq!((&i * 3).dtype(), DType::I64);     // int scalar keeps int
/// assert_eq!((&i * 0.5).dtype(), DType::F32);   // float scalar lifts to float32
/// let x = Tensor::<RefBackend>::ones([2]);
/// assert_eq!((2.0f64 * &x).dtype(), DType::F32); // a scalar never widens a float tensor
/// assert_eq!((&x - 10u8).to_vec::<f32>(), vec![-9.0, -9.0]);
/// assert_eq!((10 - &x).to_vec::<f32>(), vec![9.0, 9.0]);
/// ```
pub trait Scalar: Copy {
    /// The value as an f64 (exact for every float and for integers up to 2^53).
    fn to_f64(self) -> f64;
    /// Whether this is a floating-point type.
    fn is_float(self) -> bool;
    /// The exact value as an int64, for an integer type whose value fits
    /// (`None` for floats and for unsigned values above `i64::MAX`): what
    /// an integer tensor computes with, never rounded through f64.
    fn to_i64(self) -> Option<i64>;
}

macro_rules! scalar_types {
    ($($t:ty: $float:literal, $to_i64:expr;)*) => {$(
        impl Scalar for $t {
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn is_float(self) -> bool {
                $float
            }
            fn to_i64(self) -> Option<i64> {
                $to_i64(self)
            }
        }
    )*};
}
/// An integer's exact int64, if it has one.
fn int_to_i64<T: TryInto<i64>>(v: T) -> Option<i64> {
    v.try_into().ok()
}
scalar_types! {
    f32: true, |_| None;
    f64: true, |_| None;
    i8: false, int_to_i64;
    i16: false, int_to_i64;
    i32: false, int_to_i64;
    i64: false, int_to_i64;
    isize: false, int_to_i64;
    u8: false, int_to_i64;
    u16: false, int_to_i64;
    u32: false, int_to_i64;
    u64: false, int_to_i64;
    usize: false, int_to_i64;
}

/// The operators for every owned/borrowed pair of tensors, a scalar of any
/// [`Scalar`] type on the right, and an `f64` or `i64` scalar on the left.
///
/// Two limits come from Rust, not from choice. `x * x` on an owned handle
/// cannot compile (the left operand moves before the right is read; a
/// `Tensor` is cheap to clone but not `Copy`): write `&x * &x`. And an
/// unsuffixed literal on the left (`2.0 * &x`, `2 * &x`) only infers its
/// type when one float and one integer type implement the operator, so the
/// left side takes `f64` and `i64` (cast other types: `f64::from(s) * &x`);
/// the right side is generic and takes every numeric type.
macro_rules! bin_trait {
    ($Trait:ident, $method:ident, $try:ident, $op:expr) => {
        bin_trait!(@pair $Trait, $method, &Tensor<B>, &Tensor<B>, |a, b| a.$try(b));
        bin_trait!(@pair $Trait, $method, Tensor<B>, Tensor<B>, |a, b| a.$try(&b));
        bin_trait!(@pair $Trait, $method, Tensor<B>, &Tensor<B>, |a, b| a.$try(b));
        bin_trait!(@pair $Trait, $method, &Tensor<B>, Tensor<B>, |a, b| a.$try(&b));
        impl<B: Backend, S: Scalar> $Trait<S> for &Tensor<B> {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: S) -> Tensor<B> {
                self.try_scalar_any($op, rhs, false).or_panic()
            }
        }
        impl<B: Backend, S: Scalar> $Trait<S> for Tensor<B> {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: S) -> Tensor<B> {
                self.try_scalar_any($op, rhs, false).or_panic()
            }
        }
        bin_trait!(@left $Trait, $method, $op, f64 i64);
    };
    (@pair $Trait:ident, $method:ident, $L:ty, $R:ty, |$a:ident, $b:ident| $body:expr) => {
        impl<B: Backend> $Trait<$R> for $L {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: $R) -> Tensor<B> {
                let ($a, $b) = (self, rhs);
                $body.or_panic()
            }
        }
    };
    (@left $Trait:ident, $method:ident, $op:expr, $($s:ty)*) => {$(
        impl<B: Backend> $Trait<&Tensor<B>> for $s {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: &Tensor<B>) -> Tensor<B> {
                rhs.try_scalar_any($op, self, true).or_panic()
            }
        }
        impl<B: Backend> $Trait<Tensor<B>> for $s {
            type Output = Tensor<B>;
            #[track_caller]
            fn $method(self, rhs: Tensor<B>) -> Tensor<B> {
                rhs.try_scalar_any($op, self, true).or_panic()
            }
        }
    )*};
}

bin_trait!(Add, add, try_add, BinaryOp::Add);
bin_trait!(Sub, sub, try_sub, BinaryOp::Sub);
bin_trait!(Mul, mul, try_mul, BinaryOp::Mul);
bin_trait!(Div, div, try_div, BinaryOp::Div);

impl<B: Backend> Neg for &Tensor<B> {
    type Output = Tensor<B>;
    #[track_caller]
    fn neg(self) -> Tensor<B> {
        self.try_neg().or_panic()
    }
}

impl<B: Backend> Neg for Tensor<B> {
    type Output = Tensor<B>;
    #[track_caller]
    fn neg(self) -> Tensor<B> {
        self.try_neg().or_panic()
    }
}
