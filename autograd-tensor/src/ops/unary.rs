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
        UnaryOp::LeakyRelu(_) => "LeakyReluBackward0",
        UnaryOp::Gelu | UnaryOp::GeluTanh => "GeluBackward0",
        UnaryOp::Silu => "SiluBackward0",
        UnaryOp::Softplus { .. } => "SoftplusBackward0",
        UnaryOp::Clamp { .. } => "ClampBackward1",
        UnaryOp::Erf => "ErfBackward0",
        UnaryOp::Log1p => "Log1pBackward0",
        UnaryOp::Sin => "SinBackward0",
        UnaryOp::Cos => "CosBackward0",
    }
}

/// Which of input/output the derivative of `op` is expressed with.
fn saves(op: UnaryOp) -> (bool, bool) {
    match op {
        UnaryOp::Log
        | UnaryOp::Abs
        | UnaryOp::Square
        | UnaryOp::Powf(_)
        | UnaryOp::LeakyRelu(_)
        | UnaryOp::Gelu
        | UnaryOp::GeluTanh
        | UnaryOp::Silu
        | UnaryOp::Softplus { .. }
        | UnaryOp::Clamp { .. }
        | UnaryOp::Erf
        | UnaryOp::Log1p
        | UnaryOp::Sin
        | UnaryOp::Cos => (true, false),
        UnaryOp::Exp | UnaryOp::Sqrt | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Relu | UnaryOp::Recip => (false, true),
        _ => (false, false),
    }
}

/// `g * f'(x)` for an elementwise op `f`: the backward (with `g` the output
/// gradient) and, elementwise ops being diagonal, the JVP (with `g` the
/// tangent) at once. `x` is the input, `y` the output, each given when the
/// op's formula uses it.
fn d_unary<B: Backend>(
    op: UnaryOp,
    g: &Tensor<B>,
    x: impl Fn() -> Result<Tensor<B>>,
    y: impl Fn() -> Result<Tensor<B>>,
) -> Result<Tensor<B>> {
    let x = || -> Result<Tensor<B>> { x() };
    Ok(match op {
        UnaryOp::Neg => g.try_neg()?,
        UnaryOp::Exp => g.try_mul(&y()?)?,
        UnaryOp::Log => g.try_div(&x()?)?,
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
        // leaky_relu'(0) = slope, as PyTorch
        UnaryOp::LeakyRelu(sl) => g.try_mul(&x()?.gt_scalar(0.0).try_mul_scalar(1.0 - sl)?.try_add_scalar(sl)?)?,
        UnaryOp::Gelu => {
            // Phi(x) + x phi(x), with differentiable ops so gradients of gradients work
            let x = &x()?;
            let cdf = x.try_mul_scalar(std::f64::consts::FRAC_1_SQRT_2)?.try_erf()?.try_add_scalar(1.0)?.try_mul_scalar(0.5)?;
            let pdf = x.try_mul(x)?.try_mul_scalar(-0.5)?.try_exp()?.try_mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt())?;
            g.try_mul(&cdf.try_add(&x.try_mul(&pdf)?)?)?
        }
        UnaryOp::GeluTanh => {
            let x = &x()?;
            let k = (2.0 / std::f64::consts::PI).sqrt();
            let x2 = x.try_mul(x)?;
            let u = x.try_add(&x2.try_mul(x)?.try_mul_scalar(0.044715)?)?.try_mul_scalar(k)?;
            let t = u.try_tanh()?;
            let du = x2.try_mul_scalar(3.0 * 0.044715)?.try_add_scalar(1.0)?.try_mul_scalar(k)?;
            let left = t.try_add_scalar(1.0)?.try_mul_scalar(0.5)?;
            let right = x.try_mul_scalar(0.5)?.try_mul(&t.try_mul(&t)?.try_rsub_scalar(1.0)?)?.try_mul(&du)?;
            g.try_mul(&left.try_add(&right)?)?
        }
        UnaryOp::Silu => {
            let x = &x()?;
            let sg = x.try_sigmoid()?;
            g.try_mul(&sg.try_mul(&x.try_mul(&sg.try_rsub_scalar(1.0)?)?.try_add_scalar(1.0)?)?)?
        }
        UnaryOp::Softplus { beta, threshold } => {
            let x = &x()?;
            let bx = x.try_mul_scalar(beta)?;
            let linear = bx.gt_scalar(threshold);
            g.try_mul(&bx.try_sigmoid()?.try_masked_fill(&linear, 1.0)?)?
        }
        UnaryOp::Clamp { min, max } => {
            // gradient 1 strictly inside the bounds, 0 at and beyond them (PyTorch 2.15's convention)
            let x = &x()?;
            g.try_mul(&x.gt_scalar(min).try_mul(&x.lt_scalar(max))?)?
        }
        UnaryOp::Erf => {
            let x = &x()?;
            g.try_mul(&x.try_mul(x)?.try_neg()?.try_exp()?.try_mul_scalar(2.0 / std::f64::consts::PI.sqrt())?)?
        }
        UnaryOp::Log1p => g.try_div(&x()?.try_add_scalar(1.0)?)?,
        UnaryOp::Sin => g.try_mul(&x()?.try_cos()?)?,
        UnaryOp::Cos => g.try_mul(&x()?.try_sin()?.try_neg()?)?,
        // sign is flat wherever it is differentiable: a zero gradient, as PyTorch's SignBackward0
        UnaryOp::Sign => Tensor::try_zeros(g.shape().clone(), g.dtype())?,
        UnaryOp::Step | UnaryOp::Affine { .. } => unreachable!("handled without a graph or in affine()"),
    })
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
        if op == UnaryOp::Step {
            return self.try_unary_nograd(op);
        }
        let s = B::unary(op, &self.storage(), self.layout()).map_err(|e| e.at(std::panic::Location::caller()))?;
        let out = Tensor::record_new(s, self.shape().clone(), name_of(op), &[self], |out| {
            let (sx, sy) = saves(op);
            let x = sx.then(|| SavedTensor::new(self));
            let y = sy.then(|| SavedTensor::new(out));
            saving(move |ctx, g: &Tensor<B>| {
                let n = ctx.name();
                let x = || x.as_ref().expect("input saved").get(n);
                let y = || -> Result<Tensor<B>> { Ok(ctx.output(&y.as_ref().expect("output saved").get(n)?)) };
                let gx = d_unary(op, g, x, y)?;
                Ok(vec![Some(gx)])
            })
        });
        let y = out.detach();
        super::with_tangent(out, &[self], |t| d_unary(op, t[0].as_ref().expect("tangent"), || Ok(self.detach()), || Ok(y.clone())))
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
    sign, try_sign, UnaryOp::Sign, "Elementwise sign (-1, 0, 1; 0 for NaN); its gradient is zero (SignBackward0).";
    gelu, try_gelu, UnaryOp::Gelu, "GELU with the exact normal CDF (PyTorch's `approximate='none'`).";
    gelu_tanh, try_gelu_tanh, UnaryOp::GeluTanh, "GELU's tanh approximation (PyTorch's `approximate='tanh'`).";
    silu, try_silu, UnaryOp::Silu, "`x * sigmoid(x)` (SiLU, swish).";
    erf, try_erf, UnaryOp::Erf, "The error function.";
    log1p, try_log1p, UnaryOp::Log1p, "`log(1 + x)`, accurate near 0.";
    sin, try_sin, UnaryOp::Sin, "Elementwise sine.";
    cos, try_cos, UnaryOp::Cos, "Elementwise cosine.";
}

impl<B: Backend> Tensor<B> {
    /// `x` for `x > 0`, `slope * x` otherwise (PyTorch's default slope is 0.01).
    #[track_caller]
    pub fn leaky_relu(&self, slope: f64) -> Tensor<B> {
        or_panic(self.try_leaky_relu(slope))
    }
    /// Fallible [`Tensor::leaky_relu`].
    #[track_caller]
    pub fn try_leaky_relu(&self, slope: f64) -> Result<Tensor<B>> {
        self.try_unary_op(UnaryOp::LeakyRelu(slope))
    }
    /// `log(1 + exp(beta x)) / beta`, linear where `beta x > threshold` (PyTorch: beta 1, threshold 20).
    #[track_caller]
    pub fn softplus(&self, beta: f64, threshold: f64) -> Tensor<B> {
        or_panic(self.try_softplus(beta, threshold))
    }
    /// Fallible [`Tensor::softplus`]: one `SoftplusBackward0` node whose
    /// gradient is the closed form `sigmoid(beta x)` (1 past the threshold).
    #[track_caller]
    pub fn try_softplus(&self, beta: f64, threshold: f64) -> Result<Tensor<B>> {
        self.try_unary_op(UnaryOp::Softplus { beta, threshold })
    }
    /// Clamps into `[min, max]` (either bound optional); gradient 0 at and beyond the bounds.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let x = Tensor::<RefBackend>::from_vec(vec![-2.0f64, 0.5, 3.0], [3]);
    /// assert_eq!(x.clamp(Some(-1.0), Some(1.0)).to_vec::<f64>(), vec![-1.0, 0.5, 1.0]);
    /// ```
    #[track_caller]
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Tensor<B> {
        or_panic(self.try_clamp(min, max))
    }
    /// Fallible [`Tensor::clamp`].
    #[track_caller]
    pub fn try_clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Tensor<B>> {
        self.try_unary_op(UnaryOp::Clamp { min: min.unwrap_or(f64::NEG_INFINITY), max: max.unwrap_or(f64::INFINITY) })
    }
}
