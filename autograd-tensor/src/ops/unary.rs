//! Elementwise unary ops: one table, one row per op, as PyTorch's
//! `derivatives.yaml` and tinygrad's gradient rules.
//!
//! A row gives the variant of [`UnaryOp`] (the backend kernel), the methods
//! (`-` for a parametrised op whose methods are written below the table),
//! the `grad_fn` name, what the derivative reads (`input`, `output` or
//! `nothing`: what the node saves) and the derivative: `g * f'(x)` written
//! with differentiable ops, which serves as the backward (`g` the output's
//! gradient) and, elementwise ops being diagonal, as the JVP (`g` the input's
//! tangent). The table expands into exhaustive matches, so a variant
//! without a row does not compile.

use crate::Tensor;
use crate::node::SavedTensor;
use crate::recording::saving;
use autograd_core::{Backend, Result, UnaryOp};
use std::f64::consts::PI;

/// The node saves what the derivative reads: (input, output).
macro_rules! reads {
    (nothing) => {
        (false, false)
    };
    (input) => {
        (true, false)
    };
    (output) => {
        (false, true)
    };
}

macro_rules! unary_table {
    ($(
        $($v:ident)::+ $(($($p:pat),*))? $({ $($f:ident),* })?
        : $methods:tt, $grad_fn:literal, $reads:ident,
        |$g:ident, $x:ident, $y:ident| $d:expr;
    )*) => {
        fn name_of(op: UnaryOp) -> &'static str {
            #[allow(unused_variables)]
            match op {
                $( UnaryOp::$($v)::+ $(($($p),*))? $({ $($f),* })? => $grad_fn, )*
            }
        }

        /// What the derivative of `op` reads: (input, output).
        fn reads(op: UnaryOp) -> (bool, bool) {
            #[allow(unused_variables)]
            match op {
                $( UnaryOp::$($v)::+ $(($($p),*))? $({ $($f),* })? => reads!($reads), )*
            }
        }

        /// `g * f'(x)` for the elementwise op `f`; `x` and `y` give the input
        /// and the output, each read only where the op's row says so.
        fn d_unary<B: Backend>(
            op: UnaryOp,
            g: &Tensor<B>,
            x: impl Fn() -> Result<Tensor<B>>,
            y: impl Fn() -> Result<Tensor<B>>,
        ) -> Result<Tensor<B>> {
            #[allow(unused_variables)]
            match op {
                $( UnaryOp::$($v)::+ $(($($p),*))? $({ $($f),* })? => {
                    let ($g, $x, $y) = (g, &x, &y);
                    $d
                } )*
            }
        }

        $( unary_table!(@methods $methods $($v)::+); )*
    };
    (@methods - $($v:ident)::+) => {};
    (@methods ($name:ident, $try:ident, $doc:literal) $v:ident) => {
        impl<B: Backend> Tensor<B> {
            #[doc = $doc]
            #[track_caller]
            pub fn $try(&self) -> Result<Tensor<B>> {
                self.try_unary_op(UnaryOp::$v)
            }
        }
        panicking_twins! { $name() -> Tensor<B> = $try, $doc; }
    };
}

unary_table! {
    Neg: (neg, try_neg, "Elementwise negation."), "NegBackward0", nothing,
        |g, x, y| g.try_neg();
    Exp: (exp, try_exp, "Elementwise `e^x`."), "ExpBackward0", output,
        |g, x, y| g.try_mul(&y()?);
    Log: (log, try_log, "Elementwise natural logarithm."), "LogBackward0", input,
        |g, x, y| g.try_div(&x()?);
    Sqrt: (sqrt, try_sqrt, "Elementwise square root."), "SqrtBackward0", output,
        |g, x, y| g.try_div(&y()?.try_mul_scalar(2.0)?);
    // |x|' = sign(x), with 0 at 0 (PyTorch's convention)
    Abs: (abs, try_abs, "Elementwise absolute value (gradient 0 at 0)."), "AbsBackward0", input,
        |g, x, y| g.try_mul(&x()?.try_unary_nograd(UnaryOp::Sign)?);
    Tanh: (tanh, try_tanh, "Elementwise hyperbolic tangent."), "TanhBackward0", output,
        |g, x, y| { let y = y()?; g.try_mul(&y.try_mul(&y)?.try_rsub_scalar(1.0)?) };
    Sigmoid: (sigmoid, try_sigmoid, "Elementwise logistic sigmoid (no overflow for large |x|)."), "SigmoidBackward0", output,
        |g, x, y| { let y = y()?; g.try_mul(&y.try_mul(&y.try_rsub_scalar(1.0)?)?) };
    // relu'(0) = 0, from the output as PyTorch's threshold_backward: the
    // gradient passes where y > 0 and where y is NaN
    Relu: (relu, try_relu, "Elementwise `max(x, 0)` (gradient 0 at 0)."), "ReluBackward0", output,
        |g, x, y| g.try_threshold_backward(&y()?);
    // sign is flat wherever it is differentiable: a zero gradient, as PyTorch's SignBackward0
    Sign: (sign, try_sign, "Elementwise sign (-1, 0, 1; 0 for NaN); its gradient is zero (SignBackward0)."), "SignBackward0", nothing,
        |g, x, y| Tensor::try_zeros_dtype(g.shape().clone(), g.dtype());
    Recip: (reciprocal, try_reciprocal, "Elementwise `1 / x`."), "ReciprocalBackward0", output,
        |g, x, y| { let y = y()?; g.try_neg()?.try_mul(&y.try_mul(&y)?) };
    Square: (square, try_square, "Elementwise `x * x`."), "PowBackward0", input,
        |g, x, y| g.try_mul(&x()?.try_mul_scalar(2.0)?);
    // d/dx x^0 = 0 everywhere (also at x = 0, where p x^(p-1) would be NaN)
    Powf(p): -, "PowBackward0", input,
        |g, x, y| if p == 0.0 { g.try_mul_scalar(0.0) } else { g.try_mul(&x()?.try_powf(p - 1.0)?.try_mul_scalar(p)?) };
    // leaky_relu'(0) = slope, as PyTorch
    LeakyRelu(sl): -, "LeakyReluBackward0", input,
        |g, x, y| { let x = &x()?; g.try_mul(&x.gt_mask(&x.scalar_like(0.0))?.try_mul_scalar(1.0 - sl)?.try_add_scalar(sl)?) };
    // Phi(x) + x phi(x), with differentiable ops so gradients of gradients work
    Gelu: (gelu, try_gelu, "GELU with the exact normal CDF (PyTorch's `approximate='none'`)."), "GeluBackward0", input,
        |g, x, y| g.try_gelu_backward(&x()?);
    GeluTanh: (gelu_tanh, try_gelu_tanh, "GELU's tanh approximation (PyTorch's `approximate='tanh'`)."), "GeluBackward0", input,
        |g, x, y| {
            let x = &x()?;
            let k = (2.0 / PI).sqrt();
            let x2 = x.try_mul(x)?;
            let u = x.try_add(&x2.try_mul(x)?.try_mul_scalar(0.044715)?)?.try_mul_scalar(k)?;
            let t = u.try_tanh()?;
            let du = x2.try_mul_scalar(3.0 * 0.044715)?.try_add_scalar(1.0)?.try_mul_scalar(k)?;
            let left = t.try_add_scalar(1.0)?.try_mul_scalar(0.5)?;
            let right = x.try_mul_scalar(0.5)?.try_mul(&t.try_mul(&t)?.try_rsub_scalar(1.0)?)?.try_mul(&du)?;
            g.try_mul(&left.try_add(&right)?)
        };
    Silu: (silu, try_silu, "`x * sigmoid(x)` (SiLU, swish)."), "SiluBackward0", input,
        |g, x, y| {
            let x = &x()?;
            let sg = x.try_sigmoid()?;
            g.try_mul(&sg.try_mul(&x.try_mul(&sg.try_rsub_scalar(1.0)?)?.try_add_scalar(1.0)?)?)
        };
    // sigmoid(beta x), 1 past the threshold
    Softplus { beta, threshold }: -, "SoftplusBackward0", input,
        |g, x, y| {
            let bx = x()?.try_mul_scalar(beta)?;
            let linear = bx.gt_scalar(threshold);
            g.try_mul(&bx.try_sigmoid()?.try_masked_fill(&linear, 1.0)?)
        };
    // gradient 1 strictly inside the bounds, 0 at and beyond them (PyTorch 2.15's convention)
    Clamp { min, max }: -, "ClampBackward1", input,
        |g, x, y| { let x = &x()?; g.try_mul(&x.gt_mask(&x.scalar_like(min))?.try_mul(&x.lt_mask(&x.scalar_like(max))?)?) };
    Erf: (erf, try_erf, "The error function."), "ErfBackward0", input,
        |g, x, y| { let x = &x()?; g.try_mul(&x.try_mul(x)?.try_neg()?.try_exp()?.try_mul_scalar(2.0 / PI.sqrt())?) };
    Log1p: (log1p, try_log1p, "`log(1 + x)`, accurate near 0."), "Log1pBackward0", input,
        |g, x, y| g.try_div(&x()?.try_add_scalar(1.0)?);
    Sin: (sin, try_sin, "Elementwise sine."), "SinBackward0", input,
        |g, x, y| g.try_mul(&x()?.try_cos()?);
    Cos: (cos, try_cos, "Elementwise cosine."), "CosBackward0", input,
        |g, x, y| g.try_mul(&x()?.try_sin()?.try_neg()?);
}

impl<B: Backend> Tensor<B> {
    /// A non-differentiable elementwise op (masks, signs): no graph is recorded.
    pub(crate) fn try_unary_nograd(&self, op: UnaryOp) -> Result<Tensor<B>> {
        let s = B::unary(op, &self.storage(), self.layout())?;
        Ok(Tensor::from_storage(s, self.shape().clone()))
    }

    /// Applies a differentiable elementwise op: the kernel, the node its row
    /// describes and the forward-mode tangent.
    #[track_caller]
    pub(crate) fn try_unary_op(&self, op: UnaryOp) -> Result<Tensor<B>> {
        let s = B::unary(op, &self.storage(), self.layout()).map_err(|e| e.at(std::panic::Location::caller()))?;
        let out = Tensor::record_new(s, self.shape().clone(), name_of(op), &[self], |out| {
            let (sx, sy) = reads(op);
            let x = sx.then(|| SavedTensor::new(self));
            let y = sy.then(|| SavedTensor::new(&out.get()));
            saving(move |ctx, g: &Tensor<B>| {
                let n = ctx.name();
                let x = || x.as_ref().expect("input saved").get(n);
                let y = || -> Result<Tensor<B>> { Ok(ctx.output(&y.as_ref().expect("output saved").get(n)?)) };
                Ok(vec![Some(d_unary(op, g, x, y)?)])
            })
        });
        if self.inner.autograd.tangent.get().is_none() {
            return Ok(out); // no forward mode: skip the output's detached handle
        }
        let y = out.detach();
        crate::recording::with_tangent(out, &[self], |t| {
            d_unary(op, t[0].as_ref().expect("tangent"), || Ok(self.detach()), || Ok(y.clone()))
        })
    }

    /// `self ^ p` for a scalar exponent (PowBackward0).
    #[track_caller]
    pub fn try_powf(&self, p: f64) -> Result<Tensor<B>> {
        self.try_unary_op(UnaryOp::Powf(p))
    }
}

panicking_twins! {
    powf(p: f64) -> Tensor<B> = try_powf, "Panicking [`Tensor::try_powf`].\n\n```\nuse autograd_tensor::Tensor;\nuse autograd_core::RefBackend;\nlet x = Tensor::<RefBackend>::scalar(3.0f64).requires_grad_(true);\nlet y = x.powf(2.0);\ny.backward().unwrap();\nassert_eq!((y.item(), x.grad().unwrap().item()), (9.0, 6.0));\n```";
}

impl<B: Backend> Tensor<B> {
    /// Fallible [`Tensor::leaky_relu`].
    #[track_caller]
    pub fn try_leaky_relu(&self, slope: f64) -> Result<Tensor<B>> {
        self.try_unary_op(UnaryOp::LeakyRelu(slope))
    }
    /// Fallible [`Tensor::softplus`]: one `SoftplusBackward0` node whose
    /// gradient is the closed form `sigmoid(beta x)` (1 past the threshold).
    #[track_caller]
    pub fn try_softplus(&self, beta: f64, threshold: f64) -> Result<Tensor<B>> {
        self.try_unary_op(UnaryOp::Softplus { beta, threshold })
    }
    /// Fallible [`Tensor::clamp`].
    #[track_caller]
    pub fn try_clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Tensor<B>> {
        self.try_unary_op(UnaryOp::Clamp { min: min.unwrap_or(f64::NEG_INFINITY), max: max.unwrap_or(f64::INFINITY) })
    }
}

panicking_twins! {
    leaky_relu(slope: f64) -> Tensor<B> = try_leaky_relu, "`x` for `x > 0`, `slope * x` otherwise (PyTorch's default slope is 0.01).";
    softplus(beta: f64, threshold: f64) -> Tensor<B> = try_softplus, "`log(1 + exp(beta x)) / beta`, linear where `beta x > threshold` (PyTorch: beta 1, threshold 20).";
    clamp(min: Option<f64>, max: Option<f64>) -> Tensor<B> = try_clamp, "Clamps into `[min, max]` (either bound optional); gradient 0 at and beyond the bounds.

```
use autograd_tensor::Tensor;
use autograd_core::RefBackend;
let x = Tensor::<RefBackend>::from_vec(vec![-2.0f64, 0.5, 3.0], [3]);
assert_eq!(x.clamp(Some(-1.0), Some(1.0)).to_vec::<f64>(), vec![-1.0, 0.5, 1.0]);
```";
}
