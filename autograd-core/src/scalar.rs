//! Scalar semantics of the elementwise ops, shared by every host backend so
//! that a fast kernel and the reference differ only in loop order, never in
//! the formula for one element.

use crate::Element;
use crate::ops::{BinaryOp, UnaryOp};
use num_traits::Float;

/// A compute element type (f32 or f64): an [`Element`] with arithmetic and
/// the transcendental functions every host backend computes the same way.
pub trait FloatElem: Element + Float + Default + std::iter::Sum {
    /// The error function, as every host backend computes it for this type.
    fn erf(self) -> Self;
    /// `e^x` as every host backend computes it for this type: std's in f64,
    /// a branch-free polynomial in f32 that loops vectorise.
    fn vexp(self) -> Self;
    /// `tanh x` as every host backend computes it for this type: std's in
    /// f64, a branch-free approximation in f32 that loops vectorise.
    fn vtanh(self) -> Self;
}

impl FloatElem for f32 {
    /// A rational approximation on `[-4, 4]` (Eigen's and XLA's float erf:
    /// `x P(x^2) / Q(x^2)`, exactly `+-1` from `|x| = 3.9`), absolute error below
    /// 5e-7 (PyTorch's vectorised float erf is an approximation too): no
    /// branch and no libm call, so a loop over a slice vectorises (GELU's
    /// forward and backward run it on every activation).
    ///
    /// ```
    /// use autograd_core::scalar::FloatElem;
    /// for x in [-5.0f32, -1.3, -1e-3, 0.0, 0.5, 2.0, 3.9, 1e30] {
    ///     assert!((FloatElem::erf(x) as f64 - libm::erf(x as f64)).abs() < 5e-7, "{x}");
    /// }
    /// assert!(FloatElem::erf(f32::NAN).is_nan());
    /// ```
    #[inline(always)]
    fn erf(self) -> Self {
        const P: [f32; 7] =
            [-2.726_142_3e-10, 2.770_681_4e-8, -2.101_024e-6, -5.692_506_4e-5, -7.349_906_3e-4, -2.9546e-3, -1.609_603_3e-2];
        const Q: [f32; 5] = [-1.456_607_2e-5, -2.133_740_6e-4, -1.682_827e-3, -7.373_329_2e-3, -1.426_474e-2];
        // `clamp` keeps NaN (it propagates through the polynomials)
        let x = self.clamp(-4.0, 4.0);
        let x2 = x * x;
        let p = P[1..].iter().fold(P[0], |acc, &c| acc * x2 + c) * x;
        let q = Q[1..].iter().fold(Q[0], |acc, &c| acc * x2 + c);
        // from |x| = 3.9 on, erf rounds to +-1 in float32: exactly +-1 there
        if self.abs() >= 3.9 { 1.0f32.copysign(self) } else { p / q }
    }
    /// Cephes' `expf`: `x = n ln2 + r` with `|r| <= ln2 / 2` (Cody-Waite
    /// split of ln2), a degree-7 polynomial for `e^r`, and `2^n` applied as
    /// two exact powers of two so that the whole float range, subnormal
    /// results and overflow to infinity included, needs no branch. Within 2
    /// ulp of the correctly rounded value (PyTorch's vectorised float exp,
    /// Sleef's, is within 1); NaN stays NaN.
    ///
    /// ```
    /// use autograd_core::scalar::FloatElem;
    /// for i in -1040..=890 {
    ///     let x = i as f32 / 10.0 + 0.037;
    ///     let (got, want) = (FloatElem::vexp(x), (x as f64).exp() as f32);
    ///     let ok = if want.is_infinite() { got == want } else { (got - want).abs() as f64 <= 2.5e-7 * want as f64 + 1.5e-45 };
    ///     assert!(ok, "{x}: {got} vs {want}");
    /// }
    /// assert_eq!(FloatElem::vexp(0.0f32), 1.0);
    /// assert_eq!(FloatElem::vexp(f32::INFINITY), f32::INFINITY);
    /// assert_eq!(FloatElem::vexp(89.0f32), f32::INFINITY);
    /// assert_eq!(FloatElem::vexp(f32::NEG_INFINITY), 0.0);
    /// assert!(FloatElem::vexp(f32::NAN).is_nan());
    /// ```
    #[inline(always)]
    fn vexp(self) -> Self {
        const LN2_HI: f32 = 0.693_359_4;
        const LN2_LO: f32 = -2.121_944_4e-4;
        // past these e^x is infinite / zero in float32; the clamp keeps n small
        // round to nearest by adding 1.5 * 2^23 (no libm call, so loops
        // vectorise): the sum's low mantissa bits then hold n itself
        const ROUND: f32 = 12_582_912.0;
        let x = self.clamp(-105.0, 89.0);
        let t = x * std::f32::consts::LOG2_E + ROUND;
        let n = t - ROUND;
        let r = x - n * LN2_HI - n * LN2_LO;
        let p = ((((((1.987_569_2e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 1.666_666_5e-1) * r + 0.5) * r)
            * r
            + r
            + 1.0;
        // 2^n = 2^h 2^(n-h): both halves are normal floats for n in [-152, 129]
        let n = t.to_bits() as i32 - ROUND.to_bits() as i32;
        let h = n >> 1;
        let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
        p * pow2(h) * pow2(n - h)
    }
    /// Cephes' `tanhf`, both sides computed and one selected (no branch, no
    /// libm call, so loops vectorise: every LSTM and GRU gate runs it): an
    /// odd polynomial below `|x| = 0.625`, `1 - 2 / (e^(2|x|) + 1)` with
    /// the sign restored above, through [`FloatElem::vexp`]. Within 2 ulp
    /// of the correctly rounded value (PyTorch's vectorised float tanh,
    /// Sleef's, is within 1); exactly `+-1` from `|x| = 9.1`; NaN stays NaN.
    ///
    /// ```
    /// use autograd_core::scalar::FloatElem;
    /// for i in -2000..=2000 {
    ///     let x = i as f32 / 100.0 + 0.0031;
    ///     let (got, want) = (FloatElem::vtanh(x) as f64, (x as f64).tanh());
    ///     assert!((got - want).abs() <= 2.5e-7 * want.abs(), "{x}: {got} vs {want}");
    /// }
    /// assert_eq!(FloatElem::vtanh(-0.0f32).to_bits(), (-0.0f32).to_bits());
    /// assert_eq!(FloatElem::vtanh(1e-30f32), 1e-30);
    /// assert_eq!((FloatElem::vtanh(f32::INFINITY), FloatElem::vtanh(-1e30f32)), (1.0, -1.0));
    /// assert!(FloatElem::vtanh(f32::NAN).is_nan());
    /// ```
    #[inline(always)]
    fn vtanh(self) -> Self {
        let z = self * self;
        let small =
            ((((-5.704_988_7e-3 * z + 2.063_909e-2) * z - 5.373_971_6e-2) * z + 1.333_144_2e-1) * z - 3.333_328e-1) * z * self + self;
        let e = (2.0 * self.abs()).vexp();
        let large = (1.0 - 2.0 / (e + 1.0)).copysign(self);
        // copysign keeps -0.0 (the polynomial's sum would round it to +0.0)
        if self.abs() < 0.625 { small.copysign(self) } else { large }
    }
}

impl FloatElem for f64 {
    /// libm's erf (correctly rounded to about 1 ulp).
    #[inline(always)]
    fn erf(self) -> Self {
        libm::erf(self)
    }
    /// std's `exp`.
    #[inline(always)]
    fn vexp(self) -> Self {
        self.exp()
    }
    /// std's `tanh`.
    #[inline(always)]
    fn vtanh(self) -> Self {
        self.tanh()
    }
}

/// Applies a unary op to one element.
///
/// ```
/// use autograd_core::{scalar::unary, UnaryOp};
/// assert_eq!(unary(UnaryOp::Relu, -2.0f64), 0.0);
/// assert_eq!(unary(UnaryOp::Square, 3.0f32), 9.0);
/// ```
#[inline(always)]
pub fn unary<T: FloatElem>(op: UnaryOp, x: T) -> T {
    let zero = T::zero();
    let one = T::one();
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.vexp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Tanh => x.vtanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        // `x < 0` is false for NaN and -0.0, which pass through (PyTorch's relu)
        UnaryOp::Relu => {
            if x < zero {
                zero
            } else {
                x
            }
        }
        // 0 for 0 and for NaN, as torch.sign
        UnaryOp::Sign => {
            if x > zero {
                one
            } else if x < zero {
                -one
            } else {
                zero
            }
        }
        UnaryOp::Recip => one / x,
        UnaryOp::Square => x * x,
        UnaryOp::Powf(p) => powf(x, p),
        UnaryOp::LeakyRelu(s) => {
            if x > zero {
                x
            } else {
                x * T::from_f64(s)
            }
        }
        UnaryOp::Gelu => gelu(x),
        UnaryOp::GeluTanh => {
            let k = T::from_f64((2.0 / std::f64::consts::PI).sqrt());
            let u = k * (x + T::from_f64(0.044715) * x * x * x);
            T::from_f64(0.5) * x * (one + u.vtanh())
        }
        UnaryOp::Silu => x * sigmoid(x),
        UnaryOp::Softplus { beta, threshold } => {
            let b = T::from_f64(beta);
            if (x * b).to_f64() > threshold {
                x
            } else {
                // log1p(exp(bx)) / b, written to not overflow for large bx
                let bx = x * b;
                (bx.max(zero) + (-bx.abs()).exp().ln_1p()) / b
            }
        }
        UnaryOp::Clamp { min, max } => {
            if x.is_nan() {
                x
            } else {
                x.max(T::from_f64(min)).min(T::from_f64(max))
            }
        }
        UnaryOp::Erf => erf(x),
        UnaryOp::Log1p => x.ln_1p(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
    }
}

/// `1 / (1 + e^-x)` for `x >= 0`, `e^x / (1 + e^x)` below, both from one
/// `e^-|x|` so that `exp` never overflows and neither side cancels; the two
/// are computed and one selected (no branch), and `exp` is
/// [`FloatElem::vexp`], so a loop over a slice vectorises (LSTM and GRU
/// gates run it on every element).
///
/// ```
/// use autograd_core::{scalar::unary, UnaryOp};
/// for x in [-100.0f32, -20.0, -1.5, -1e-3, 0.0, 2.0, 30.0] {
///     let want = 1.0 / (1.0 + (-(x as f64)).exp());
///     let got = unary(UnaryOp::Sigmoid, x) as f64;
///     // within 4 ulp, or half a subnormal's spacing where the result is subnormal
///     assert!((got - want).abs() <= 4.0 * f32::EPSILON as f64 * want + 1e-45, "{x}: {got} vs {want}");
/// }
/// assert!(unary(UnaryOp::Sigmoid, f32::NAN).is_nan());
/// ```
#[inline(always)]
pub fn sigmoid<T: FloatElem>(x: T) -> T {
    let e = (-x.abs()).vexp();
    let d = T::one() + e;
    let (pos, neg) = (T::one() / d, e / d);
    if x >= T::zero() { pos } else { neg }
}

/// GELU with the exact normal CDF: `x Phi(x) = x (1 + erf(x / sqrt 2)) / 2`
/// (its own function, not a `unary` arm, so that a kernel's loop inlines it).
///
/// ```
/// assert_eq!(autograd_core::scalar::gelu(0.0f64), 0.0);
/// assert!((autograd_core::scalar::gelu(1.0f64) - 0.8413447460685429).abs() < 1e-15);
/// ```
#[inline(always)]
pub fn gelu<T: FloatElem>(x: T) -> T {
    x * T::from_f64(0.5) * (T::one() + erf(x * T::from_f64(std::f64::consts::FRAC_1_SQRT_2)))
}

/// `g * gelu'(x)` with `gelu'(x) = Phi(x) + x phi(x)`: GELU's backward.
///
/// ```
/// assert_eq!(autograd_core::scalar::gelu_backward(3.0f64, 0.0), 1.5);
/// ```
#[inline(always)]
pub fn gelu_backward<T: FloatElem>(g: T, x: T) -> T {
    let cdf = T::from_f64(0.5) * (T::one() + erf(x * T::from_f64(std::f64::consts::FRAC_1_SQRT_2)));
    // 1 / sqrt(2 pi)
    let pdf = (T::from_f64(-0.5) * x * x).vexp() * T::from_f64(0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2);
    g * (cdf + x * pdf)
}

/// The error function: [`FloatElem::erf`] (libm's in f64, a vectorisable
/// approximation within 5e-7 in f32).
#[inline(always)]
pub fn erf<T: FloatElem>(x: T) -> T {
    FloatElem::erf(x)
}

/// `x^p` with exact results for small integer exponents, like PyTorch's pow.
#[inline(always)]
fn powf<T: FloatElem>(x: T, p: f64) -> T {
    if p == 2.0 {
        x * x
    } else if p == 1.0 {
        x
    } else if p == 0.0 {
        T::one()
    } else if p == 3.0 {
        x * x * x
    } else if p == 0.5 {
        x.sqrt()
    } else if p == -1.0 {
        T::one() / x
    } else if p.fract() == 0.0 && p.abs() < 64.0 {
        x.powi(p as i32)
    } else {
        x.powf(T::from_f64(p))
    }
}

/// Applies a binary op to one pair of elements. Comparisons give 1 or 0.
///
/// ```
/// use autograd_core::{scalar::binary, BinaryOp};
/// assert_eq!(binary(BinaryOp::Sub, 5.0f64, 3.0), 2.0);
/// assert_eq!(binary(BinaryOp::Gt, 1.0f32, 3.0), 0.0);
/// ```
#[inline(always)]
pub fn binary<T: FloatElem>(op: BinaryOp, a: T, b: T) -> T {
    let b2f = |c: bool| if c { T::one() } else { T::zero() };
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => a.powf(b),
        BinaryOp::Maximum => {
            if a.is_nan() || b.is_nan() {
                T::nan()
            } else if a >= b {
                a
            } else {
                b
            }
        }
        BinaryOp::Minimum => {
            if a.is_nan() || b.is_nan() {
                T::nan()
            } else if a <= b {
                a
            } else {
                b
            }
        }
        // `!(b <= 0)`, so a NaN output passes the gradient, as PyTorch
        BinaryOp::ThresholdBackward => {
            if b <= T::zero() {
                T::zero()
            } else {
                a
            }
        }
        BinaryOp::GeluBackward => gelu_backward(a, b),
        BinaryOp::Eq => b2f(a == b),
        BinaryOp::Ne => b2f(a != b),
        BinaryOp::Lt => b2f(a < b),
        BinaryOp::Le => b2f(a <= b),
        BinaryOp::Gt => b2f(a > b),
        BinaryOp::Ge => b2f(a >= b),
    }
}

/// Applies a binary op to a pair of I64 elements, as PyTorch's integer
/// kernels: `+ - *` and `pow` wrap on overflow, comparisons give 1 or 0.
/// Division is not an integer op here (PyTorch's `/` is true division: the
/// tensor layer computes it in float32). A negative exponent gives what
/// PyTorch's integer `pow` gives elementwise for a tensor exponent (`1` for
/// a base of 1, `±1` for -1, else 0). A scalar exponent is not an integer
/// op here: `powf` on an integer tensor is an `Err` naming the dtype.
///
/// ```
/// use autograd_core::{scalar::binary_i64, BinaryOp};
/// assert_eq!(binary_i64(BinaryOp::Mul, 6, 7), Ok(42));
/// assert_eq!(binary_i64(BinaryOp::Add, i64::MAX, 1), Ok(i64::MIN));
/// assert_eq!(binary_i64(BinaryOp::Pow, 3, 4), Ok(81));
/// assert_eq!(binary_i64(BinaryOp::Pow, 3, 1 << 33), Ok(4982619357117939713)); // the exact exponent, wrapping
/// assert_eq!(binary_i64(BinaryOp::Pow, -1, -3), Ok(-1));
/// assert_eq!(binary_i64(BinaryOp::Pow, 2, -1), Ok(0));
/// ```
pub fn binary_i64(op: BinaryOp, a: i64, b: i64) -> Result<i64, &'static str> {
    Ok(match op {
        BinaryOp::Add => a.wrapping_add(b),
        BinaryOp::Sub => a.wrapping_sub(b),
        BinaryOp::Mul => a.wrapping_mul(b),
        BinaryOp::Div => return Err("integer tensors divide as floats (true division); convert with to_dtype()"),
        BinaryOp::Pow => pow_i64(a, b),
        BinaryOp::Maximum => a.max(b),
        BinaryOp::Minimum => a.min(b),
        BinaryOp::ThresholdBackward => {
            if b <= 0 {
                0
            } else {
                a
            }
        }
        BinaryOp::GeluBackward => return Err("gelu_backward is defined for floating point tensors only"),
        BinaryOp::Eq => (a == b) as i64,
        BinaryOp::Ne => (a != b) as i64,
        BinaryOp::Lt => (a < b) as i64,
        BinaryOp::Le => (a <= b) as i64,
        BinaryOp::Gt => (a > b) as i64,
        BinaryOp::Ge => (a >= b) as i64,
    })
}

/// `a ^ b` in wrapping 64-bit arithmetic with the whole exponent (square
/// and multiply: a cast of `b` to `u32` would cap it), and PyTorch's
/// elementwise answer for a negative exponent (`powi_impl`): the exact
/// result truncated toward zero, so 1 for a base of 1, ±1 for -1 by the
/// exponent's parity, and 0 otherwise (a base of 0 gives 0 as well).
fn pow_i64(a: i64, b: i64) -> i64 {
    if b < 0 {
        return match a {
            1 => 1,
            -1 if b % 2 != 0 => -1,
            -1 => 1,
            _ => 0,
        };
    }
    let (mut base, mut e, mut acc) = (a, b as u64, 1i64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    acc
}
