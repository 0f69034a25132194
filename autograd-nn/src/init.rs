//! Parameter initialisers, drawing from the global generator
//! ([`autograd_tensor::manual_seed`]) so results are reproducible.

use autograd_core::{Backend, DType, Shape};
use autograd_tensor::Tensor;

/// `U(low, high)`.
pub fn uniform<B: Backend>(shape: impl Into<Shape>, low: f64, high: f64, dtype: DType) -> Tensor<B> {
    let shape = shape.into();
    let v: Vec<f64> = autograd_tensor::with_rng(|g| (0..shape.numel()).map(|_| low + (high - low) * g.uniform()).collect());
    Tensor::try_from_host(autograd_core::HostData::from_f64(&v, dtype), shape).expect("sizes agree")
}

/// `N(mean, std^2)`.
pub fn normal<B: Backend>(shape: impl Into<Shape>, mean: f64, std: f64, dtype: DType) -> Tensor<B> {
    let shape = shape.into();
    let v: Vec<f64> = autograd_tensor::with_rng(|g| (0..shape.numel()).map(|_| mean + std * g.normal()).collect());
    Tensor::try_from_host(autograd_core::HostData::from_f64(&v, dtype), shape).expect("sizes agree")
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
    Tensor::full(shape.to_vec(), value, dtype)
}
