//! The op vocabulary the primitives take as parameters: elementwise unary
//! and binary ops, reductions and arg-reductions, each an enum with `ALL`
//! (one value of every variant) for the suites that walk them.

/// Defines an op enum together with `ALL`, one value of every variant
/// (parametrised variants with the sample after `=`), generated from the
/// same list: a suite that walks `ALL` cannot miss a variant.
macro_rules! op_enum {
    (
        $(#[$m:meta])*
        pub enum $name:ident {
            $(
                $(#[$vm:meta])*
                $v:ident $(( $($t:ty),* ))? $({ $($(#[$fm:meta])* $f:ident: $ft:ty),* $(,)? })? $(= $sample:expr)?
            ),* $(,)?
        }
    ) => {
        $(#[$m])*
        pub enum $name {
            $(
                $(#[$vm])*
                $v $(( $($t),* ))? $({ $($(#[$fm])* $f: $ft),* })?
            ),*
        }
        impl $name {
            /// One value of every variant, in declaration order (parametrised
            /// variants with a sample parameter): what conformance suites walk.
            pub const ALL: &'static [$name] = &[$(op_enum!(@sample $name $v $(= $sample)?)),*];
        }
    };
    (@sample $name:ident $v:ident) => { $name::$v };
    (@sample $name:ident $v:ident = $sample:expr) => { $sample };
}

op_enum! {
    /// Elementwise unary ops (f32/f64).
    ///
    /// ```
    /// use autograd_core::UnaryOp;
    /// assert!(UnaryOp::ALL.contains(&UnaryOp::Exp));
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub enum UnaryOp {
        /// `-x`
        Neg,
        /// `e^x`
        Exp,
        /// natural log
        Log,
        /// square root
        Sqrt,
        /// `|x|`
        Abs,
        /// hyperbolic tangent
        Tanh,
        /// logistic sigmoid, computed without overflow
        Sigmoid,
        /// `max(x, 0)`; NaN stays NaN
        Relu,
        /// -1, 0 or 1 (0 for NaN, as torch.sign)
        Sign,
        /// `1 / x`
        Recip,
        /// `x * x`
        Square,
        /// `x ^ p`
        Powf(f64) = UnaryOp::Powf(3.0),
        /// `x` for `x > 0`, else `slope * x`
        LeakyRelu(f64) = UnaryOp::LeakyRelu(0.1),
        /// `x * Phi(x)` with the exact normal CDF (erf)
        Gelu,
        /// GELU's tanh approximation
        GeluTanh,
        /// `x * sigmoid(x)`
        Silu,
        /// `log(1 + exp(beta x)) / beta`, or `x` where `beta x > threshold`
        Softplus {
            /// sharpness
            beta: f64,
            /// above `beta x > threshold` the op is the identity
            threshold: f64,
        } = UnaryOp::Softplus { beta: 2.0, threshold: 3.0 },
        /// `min(max(x, min), max)`; NaN stays NaN
        Clamp {
            /// lower bound (`-inf` for none)
            min: f64,
            /// upper bound (`inf` for none)
            max: f64,
        } = UnaryOp::Clamp { min: -0.5, max: 0.8 },
        /// the error function
        Erf,
        /// `log(1 + x)`, accurate for small `x`
        Log1p,
        /// sine
        Sin,
        /// cosine
        Cos,
    }
}

op_enum! {
    /// Elementwise binary ops. Comparisons return 1/0 in the operands' dtype.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum BinaryOp {
        /// `a + b`
        Add,
        /// `a - b`
        Sub,
        /// `a * b`
        Mul,
        /// `a / b`
        Div,
        /// `a ^ b`
        Pow,
        /// larger of the two (NaN propagates)
        Maximum,
        /// smaller of the two (NaN propagates)
        Minimum,
        /// `a` where `b > 0` (or `b` is NaN), else 0: relu's backward in one
        /// pass (PyTorch's `threshold_backward(grad, output, 0)`)
        ThresholdBackward,
        /// `a * gelu'(b)`: GELU's backward in one pass (PyTorch's
        /// `gelu_backward(grad, self)`, exact erf form)
        GeluBackward,
        /// `a == b`
        Eq,
        /// `a != b`
        Ne,
        /// `a < b`
        Lt,
        /// `a <= b`
        Le,
        /// `a > b`
        Gt,
        /// `a >= b`
        Ge,
    }
}

op_enum! {
    /// Reductions over a set of axes.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum ReduceOp {
        /// sum
        Sum,
        /// maximum (NaN propagates)
        Max,
        /// minimum (NaN propagates)
        Min,
    }
}

op_enum! {
    /// Reductions over one axis that also return the index of the chosen element.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum ArgReduceOp {
        /// maximum and the index of its first occurrence
        Max,
        /// minimum and the index of its first occurrence
        Min,
    }
}
