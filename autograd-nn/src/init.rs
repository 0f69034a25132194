//! Parameter initialisers, drawing from the global generator
//! ([`autograd_tensor::manual_seed`]) so results are reproducible.

use autograd_core::ResultExt;
use autograd_core::rng::Generator;
use autograd_core::{Backend, DType, Result, Shape};
use autograd_tensor::Tensor;

/// Draws `shape.numel()` values `f(generator)` into a tensor, checking the
/// size and allocating fallibly first.
#[track_caller]
fn try_draw<B: Backend>(shape: Shape, dtype: DType, op: &'static str, f: impl Fn(&mut Generator) -> f64) -> Result<Tensor<B>> {
    let n = shape.try_numel(op)?;
    autograd_core::memory::check_alloc(op, n, dtype.size_in_bytes())?;
    let mut v = autograd_core::memory::try_with_capacity::<f64>(op, n)?;
    autograd_tensor::with_rng(|g| v.extend((0..n).map(|_| f(g))));
    Tensor::try_from_host(autograd_core::HostData::from_f64(&v, dtype), shape)
}

/// `U(low, high)` (panics where [`try_uniform`] is an `Err`).
#[track_caller]
pub fn uniform<B: Backend>(shape: impl Into<Shape>, low: f64, high: f64, dtype: DType) -> Tensor<B> {
    try_uniform(shape, low, high, dtype).or_panic()
}

/// Fallible [`uniform`]: `Err` for a shape that cannot be allocated.
///
/// ```
/// use autograd_nn::init::try_uniform;
/// use autograd_core::{RefBackend, DType};
/// assert!(try_uniform::<RefBackend>([1usize << 62], 0.0, 1.0, DType::F32).is_err());
/// ```
#[track_caller]
pub fn try_uniform<B: Backend>(shape: impl Into<Shape>, low: f64, high: f64, dtype: DType) -> Result<Tensor<B>> {
    try_draw(shape.into(), dtype, "uniform", |g| low + (high - low) * g.uniform())
}

/// `N(mean, std^2)` (panics where [`try_normal`] is an `Err`).
#[track_caller]
pub fn normal<B: Backend>(shape: impl Into<Shape>, mean: f64, std: f64, dtype: DType) -> Tensor<B> {
    try_normal(shape, mean, std, dtype).or_panic()
}

/// Fallible [`normal`].
#[track_caller]
pub fn try_normal<B: Backend>(shape: impl Into<Shape>, mean: f64, std: f64, dtype: DType) -> Result<Tensor<B>> {
    try_draw(shape.into(), dtype, "normal", |g| mean + std * g.normal())
}

/// `(fan_in, fan_out)` of a weight `(out, in, ...)` as PyTorch computes them.
pub fn fans(shape: &[usize]) -> (usize, usize) {
    match shape.len() {
        0 => (1, 1),
        1 => (shape[0], shape[0]),
        _ => {
            let rf: usize = shape[2..].iter().product();
            (shape[1] * rf, shape[0] * rf)
        }
    }
}

/// Glorot/Xavier uniform: `U(-a, a)`, `a = gain * sqrt(6 / (fan_in + fan_out))`.
pub fn xavier_uniform<B: Backend>(shape: &[usize], gain: f64, dtype: DType) -> Tensor<B> {
    let (i, o) = fans(shape);
    let a = gain * (6.0 / (i + o) as f64).sqrt();
    uniform(shape.to_vec(), -a, a, dtype)
}

/// Glorot/Xavier normal: `N(0, gain^2 * 2 / (fan_in + fan_out))`.
pub fn xavier_normal<B: Backend>(shape: &[usize], gain: f64, dtype: DType) -> Tensor<B> {
    let (i, o) = fans(shape);
    normal(shape.to_vec(), 0.0, gain * (2.0 / (i + o) as f64).sqrt(), dtype)
}

/// Which fan Kaiming initialisation preserves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanMode {
    /// Preserve the forward pass's variance.
    FanIn,
    /// Preserve the backward pass's variance.
    FanOut,
}

/// He/Kaiming uniform for ReLU-like layers: `U(-b, b)`, `b = gain * sqrt(3 / fan)`, `gain = sqrt(2 / (1 + a^2))`.
pub fn kaiming_uniform<B: Backend>(shape: &[usize], a: f64, mode: FanMode, dtype: DType) -> Tensor<B> {
    let (i, o) = fans(shape);
    let fan = if mode == FanMode::FanIn { i } else { o } as f64;
    let b = (2.0 / (1.0 + a * a)).sqrt() * (3.0 / fan).sqrt();
    uniform(shape.to_vec(), -b, b, dtype)
}

/// He/Kaiming normal: `N(0, gain^2 / fan)`.
pub fn kaiming_normal<B: Backend>(shape: &[usize], a: f64, mode: FanMode, dtype: DType) -> Tensor<B> {
    let (i, o) = fans(shape);
    let fan = if mode == FanMode::FanIn { i } else { o } as f64;
    normal(shape.to_vec(), 0.0, (2.0 / (1.0 + a * a)).sqrt() / fan.sqrt(), dtype)
}

/// A constant.
pub fn constant<B: Backend>(shape: &[usize], value: f64, dtype: DType) -> Tensor<B> {
    Tensor::full_dtype(shape.to_vec(), value, dtype)
}
