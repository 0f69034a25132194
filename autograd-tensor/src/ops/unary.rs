//! Elementwise unary ops and their derivatives.

use super::saving;
use crate::node::SavedTensor;
use crate::tensor::or_panic;
use crate::Tensor;
use autograd_core::{Backend, Result, UnaryOp};

fn name_of(op: UnaryOp) -> &'static str {
    match op {
        UnaryOp::Neg => "NegBackward0",
        UnaryOp::Exp => "ExpBackward0",
        UnaryOp::Log => "LogBackward0",
        UnaryOp::Sqrt => "SqrtBackward0",
        UnaryOp::Abs => "AbsBackward0",
        UnaryOp::Tanh => "TanhBackward0",
        UnaryOp::Sigmoid => "SigmoidBackward0",
        UnaryOp::Relu => "ReluBackward0",
        UnaryOp::Recip => "ReciprocalBackward0",
        UnaryOp::Square | UnaryOp::Powf(_) => "PowBackward0",
        UnaryOp::Sign => "SignBackward0",
        UnaryOp::Step => "StepBackward0",
        UnaryOp::Affine { .. } => "AffineBackward0",
    }
}

/// Which of input/output the derivative of `op` is expressed with.
fn saves(op: UnaryOp) -> (bool, bool) {
    match op {
        UnaryOp::Log | UnaryOp::Abs | UnaryOp::Square | UnaryOp::Powf(_) => (true, false),
        UnaryOp::Exp | UnaryOp::Sqrt | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Relu | UnaryOp::Recip => (false, true),
        _ => (false, false),
    }
}

impl<B: Backend> Tensor<B> {
    /// A non-differentiable elementwise op (masks, signs): no graph is recorded.
    pub(crate) fn try_unary_nograd(&self, op: UnaryOp) -> Result<Tensor<B>> {
        let s = B::unary(op, &self.storage(), self.layout())?;
        Ok(Tensor::from_storage(s, self.shape().clone()))
    }

    /// Applies a differentiable elementwise op.
    #[track_caller]
    pub(crate) fn try_unary_op(&self, op: UnaryOp) -> Result<Tensor<B>> {
        if matches!(op, UnaryOp::Sign | UnaryOp::Step) {
            return self.try_unary_nograd(op);
        }
        let s = B::unary(op, &self.storage(), self.layout())?;
        Ok(Tensor::record_new(s, self.shape().clone(), name_of(op), &[self], |out| {
            let (sx, sy) = saves(op);
            let x = sx.then(|| SavedTensor::new(self));
            let y = sy.then(|| SavedTensor::new(out));
            saving(move |ctx, g: &Tensor<B>| {
                let n = ctx.name();
                let x = || x.as_ref().expect("input saved").get(n);
                let y = || -> Result<Tensor<B>> { Ok(ctx.output(y.as_ref().expect("output saved").get(n)?)) };
                let gx = match op {
                    UnaryOp::Neg => g.try_neg()?,
                    UnaryOp::Exp => g.try_mul(&y()?)?,
                    UnaryOp::Log => g.try_div(x()?)?,
                    UnaryOp::Sqrt => g.try_div(&y()?.try_mul_scalar(2.0)?)?,
                    // |x|' = sign(x), with 0 at 0 (PyTorch's convention)
                    UnaryOp::Abs => g.try_mul(&x()?.try_unary_nograd(UnaryOp::Sign)?)?,
                    UnaryOp::Tanh => {
                        let y = y()?;
                        g.try_mul(&y.try_mul(&y)?.try_rsub_scalar(1.0)?)?
                    }
                    UnaryOp::Sigmoid => {
                        let y = y()?;
                        g.try_mul(&y.try_mul(&y.try_rsub_scalar(1.0)?)?)?
                    }
                    // relu'(0) = 0: the mask is taken from the output being > 0
                    UnaryOp::Relu => g.try_mul(&y()?.try_unary_nograd(UnaryOp::Step)?)?,
                    UnaryOp::Recip => {
                        let y = y()?;
                        g.try_neg()?.try_mul(&y.try_mul(&y)?)?
                    }
                    UnaryOp::Square => g.try_mul(&x()?.try_mul_scalar(2.0)?)?,
                    UnaryOp::Powf(p) => {
                        if p == 0.0 {
                            g.try_mul_scalar(0.0)?
                        } else {
                            g.try_mul(&x()?.try_powf(p - 1.0)?.try_mul_scalar(p)?)?
                        }
                    }
                    UnaryOp::Sign | UnaryOp::Step | UnaryOp::Affine { .. } => unreachable!("handled without a graph or in affine()"),
                };
                Ok(vec![Some(gx)])
            })
        }))
    }

    /// `self ^ p` for a scalar exponent (PowBackward0).
    #[track_caller]
    pub fn try_powf(&self, p: f64) -> Result<Tensor<B>> {
        self.try_unary_op(UnaryOp::Powf(p))
    }

    /// Panicking [`Tensor::try_powf`].
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::scalar(3.0f64).requires_grad_(true);
    /// let y = x.powf(2.0);
    /// y.backward().unwrap();
    /// assert_eq!((y.item(), x.grad().unwrap().item()), (9.0, 6.0));
    /// ```
    #[track_caller]
    pub fn powf(&self, p: f64) -> Tensor<B> {
        or_panic(self.try_powf(p))
    }
}

macro_rules! unary_methods {
    ($($name:ident, $try:ident, $op:expr, $doc:literal;)*) => {
        impl<B: Backend> Tensor<B> {
            $(
                #[doc = $doc]
                #[track_caller]
                pub fn $try(&self) -> Result<Tensor<B>> {
                    self.try_unary_op($op)
                }
                #[doc = $doc]
                ///
                /// Panics on a dtype without arithmetic (f16/bf16/i64); see the `try_` twin.
                #[track_caller]
                pub fn $name(&self) -> Tensor<B> {
                    or_panic(self.$try())
                }
            )*
        }
    };
}

unary_methods! {
    neg, try_neg, UnaryOp::Neg, "Elementwise negation.";
    exp, try_exp, UnaryOp::Exp, "Elementwise `e^x`.";
    log, try_log, UnaryOp::Log, "Elementwise natural logarithm.";
    sqrt, try_sqrt, UnaryOp::Sqrt, "Elementwise square root.";
    abs, try_abs, UnaryOp::Abs, "Elementwise absolute value (gradient 0 at 0).";
    tanh, try_tanh, UnaryOp::Tanh, "Elementwise hyperbolic tangent.";
    sigmoid, try_sigmoid, UnaryOp::Sigmoid, "Elementwise logistic sigmoid (no overflow for large |x|).";
    relu, try_relu, UnaryOp::Relu, "Elementwise `max(x, 0)` (gradient 0 at 0).";
    reciprocal, try_reciprocal, UnaryOp::Recip, "Elementwise `1 / x`.";
    square, try_square, UnaryOp::Square, "Elementwise `x * x`.";
    sign, try_sign, UnaryOp::Sign, "Elementwise sign (-1, 0, 1); not differentiable (no graph).";
}
