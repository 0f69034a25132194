//! Automatic mixed precision: PyTorch's `torch.autocast("cpu", dtype)`.
//!
//! A thread-local region, like grad mode, in which each op casts its float
//! inputs by the op's [`CastPolicy`]: products run in the low dtype, losses
//! are widened to f32, everything else follows its inputs (an f32 tensor
//! stays f32, a bf16 one stays bf16; mixed operands promote as outside the
//! region). The casts are ordinary differentiable `to_dtype` nodes, so the
//! gradient reaching an f32 parameter is f32: the parameters stay the
//! master weights. f64 tensors are never cast (PyTorch's rule too).
//!
//! The backward pass runs outside the region (each op's backward uses the
//! dtypes its forward saw); activation checkpointing re-enters the region
//! of the forward when it recomputes.
//!
//! A parameter's low-precision copy is made once per region and shared by
//! the products that read it and their backward passes (the weight-cast
//! cache, [`cache_stats`]; PyTorch's `cache_enabled=True`), remade when an
//! in-place update bumps the parameter's version.
//!
//! ```
//! use autograd_tensor::{Tensor, autocast::autocast};
//! use autograd_core::{DType, RefBackend};
//! let x = Tensor::<RefBackend>::ones([2, 3]);
//! let w = Tensor::<RefBackend>::ones([3, 4]).requires_grad_(true);
//! let y = autocast(DType::BF16, || x.try_matmul(&w)).unwrap();
//! assert_eq!(y.dtype(), DType::BF16);
//! y.to_dtype(DType::F32).sum().backward().unwrap();
//! assert_eq!(w.grad().unwrap().dtype(), DType::F32);
//! ```

mod cache;

pub use cache::{CastCacheStats, cache_stats, clear_cache};

use crate::Tensor;
use autograd_core::{Backend, DType, Error, Result};
use std::cell::Cell;

thread_local! {
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
    /// Whether the current region caches parameters' copies.
    static CACHE_ENABLED: Cell<bool> = const { Cell::new(true) };
    /// Regions entered and not yet left: the cache lives while one is.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// How an op's float inputs are cast inside an autocast region (the lists
/// of PyTorch's CPU autocast, for the ops this library has).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CastPolicy {
    /// Run in the region's low dtype (`lower_precision_fp`): products.
    Lower,
    /// Widen to f32 (`fp32`): the losses.
    Float32,
    /// No cast: the op follows its inputs' dtypes.
    Follow,
}

/// The cast policy of an op, by its PyTorch name (`"matmul"`,
/// `"cross_entropy"`, ...): one table for every op the library has.
///
/// ```
/// use autograd_tensor::autocast::{CastPolicy, policy};
/// assert_eq!(policy("linear"), CastPolicy::Lower);
/// assert_eq!(policy("mse_loss"), CastPolicy::Float32);
/// assert_eq!(policy("softmax"), CastPolicy::Follow);
/// ```
pub fn policy(op: &str) -> CastPolicy {
    match op {
        "matmul"
        | "mm"
        | "bmm"
        | "addmm"
        | "linear"
        | "scaled_dot_product_attention"
        | "multi_head_attention"
        | "conv1d"
        | "conv2d"
        | "conv3d"
        | "conv_transpose1d"
        | "conv_transpose2d"
        | "conv_transpose3d" => CastPolicy::Lower,
        "mse_loss" | "l1_loss" | "smooth_l1_loss" | "huber_loss" | "binary_cross_entropy_with_logits" | "nll_loss" | "cross_entropy" => {
            CastPolicy::Float32
        }
        _ => CastPolicy::Follow,
    }
}

/// The low dtype of the autocast region this thread is in, if any.
pub fn autocast_dtype() -> Option<DType> {
    AUTOCAST.with(|a| a.get())
}

/// Whether this thread is inside an autocast region.
pub fn is_autocast_enabled() -> bool {
    autocast_dtype().is_some()
}

/// Whether the current region caches parameters' low-precision copies
/// (PyTorch's `torch.is_autocast_cache_enabled()`; on unless a region was
/// entered with [`AutocastGuard::with_cache`]`(_, false)`).
pub fn is_cache_enabled() -> bool {
    CACHE_ENABLED.with(Cell::get)
}

/// Inside an autocast region of `dtype` (`Some(BF16)` or `Some(F16)`) or
/// outside any (`None`, PyTorch's `autocast(enabled=False)`) until dropped.
///
/// ```
/// use autograd_tensor::autocast::{AutocastGuard, autocast_dtype};
/// use autograd_core::DType;
/// {
///     let _g = AutocastGuard::new(Some(DType::BF16)).unwrap();
///     assert_eq!(autocast_dtype(), Some(DType::BF16));
/// }
/// assert_eq!(autocast_dtype(), None);
/// assert!(AutocastGuard::new(Some(DType::F64)).is_err());
/// ```
#[must_use = "the region ends when the guard is dropped"]
pub struct AutocastGuard {
    prev: Option<DType>,
    prev_cache: bool,
    /// The region is this thread's: a guard dropped on another thread
    /// would restore that thread's state, so it cannot be sent.
    _thread: std::marker::PhantomData<*const ()>,
}

impl AutocastGuard {
    /// Enters the region; an `Err` unless `dtype` is `None`, BF16 or F16.
    /// The weight-cast cache stays as the enclosing region has it (on
    /// outside any).
    pub fn new(dtype: Option<DType>) -> Result<Self> {
        Self::with_cache(dtype, is_cache_enabled())
    }
    /// Enters the region with the weight-cast cache on or off (PyTorch's
    /// `torch.autocast(..., cache_enabled=...)`): off, every product casts
    /// its parameters afresh and its backward casts them again, holding no
    /// copy between forward and backward.
    ///
    /// ```
    /// use autograd_tensor::{Tensor, autocast::{AutocastGuard, cache_stats, is_cache_enabled}, functional::try_linear};
    /// use autograd_core::{DType, RefBackend};
    /// let w = Tensor::<RefBackend>::ones([4, 3]).requires_grad_(true);
    /// let _g = AutocastGuard::with_cache(Some(DType::BF16), false)?;
    /// assert!(!is_cache_enabled());
    /// try_linear(&Tensor::ones([2, 3]), &w, None)?;
    /// assert_eq!(cache_stats().entries, 0);
    /// # Ok::<(), autograd_core::Error>(())
    /// ```
    pub fn with_cache(dtype: Option<DType>, cache: bool) -> Result<Self> {
        if let Some(d) = dtype.filter(|d| !d.is_low_precision()) {
            return Err(Error::UnsupportedDType {
                op: "autocast",
                dtype: d,
                hint: "CPU autocast runs in BF16 or F16 (PyTorch: torch.bfloat16, torch.float16)",
            });
        }
        DEPTH.with(|d| d.set(d.get() + 1));
        Ok(AutocastGuard {
            prev: AUTOCAST.with(|a| a.replace(dtype)),
            prev_cache: CACHE_ENABLED.with(|c| c.replace(cache)),
            _thread: std::marker::PhantomData,
        })
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        AUTOCAST.with(|a| a.set(self.prev));
        CACHE_ENABLED.with(|c| c.set(self.prev_cache));
        let depth = DEPTH.with(|d| {
            d.set(d.get().saturating_sub(1));
            d.get()
        });
        if depth == 0 {
            // PyTorch's rule: the cache lives as long as the outermost region
            clear_cache();
        }
    }
}

/// Runs the fallible `f` inside an autocast region of `dtype` (BF16 or
/// F16; any other dtype is an `Err` and `f` does not run). `f`'s own `Err`
/// comes back as it is: one `?` for both.
///
/// ```
/// use autograd_tensor::{Tensor, autocast::autocast, functional};
/// use autograd_core::{DType, RefBackend};
/// let x = Tensor::<RefBackend>::ones([2, 3]);
/// let w = Tensor::<RefBackend>::ones([4, 3]);
/// let (y, loss) = autocast(DType::BF16, || {
///     let y = functional::try_linear(&x, &w, None)?;
///     let loss = functional::try_mse_loss(&y, &Tensor::zeros([2, 4]), Default::default())?;
///     Ok((y, loss))
/// })?;
/// assert_eq!((y.dtype(), loss.dtype()), (DType::BF16, DType::F32));
/// assert!(autocast(DType::F64, || Ok(())).is_err()); // not a low-precision dtype
/// # Ok::<(), autograd_core::Error>(())
/// ```
pub fn autocast<R>(dtype: DType, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let _g = AutocastGuard::new(Some(dtype))?;
    f()
}

/// A thread's autocast region as a value: its dtype (`None`: outside any)
/// and whether it caches parameters' copies (PyTorch's checkpoint saves
/// the same pair, `enabled`/`dtype` and `cache_enabled`, to recompute a
/// forward as it first ran).
///
/// ```
/// use autograd_tensor::autocast::{AutocastGuard, AutocastState};
/// use autograd_core::DType;
/// assert_eq!(AutocastState::current(), AutocastState { dtype: None, cache: true });
/// let _g = AutocastGuard::with_cache(Some(DType::BF16), false).unwrap();
/// assert_eq!(AutocastState::current(), AutocastState { dtype: Some(DType::BF16), cache: false });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutocastState {
    /// The region's dtype, `None` outside any.
    pub dtype: Option<DType>,
    /// Whether the region caches parameters' low-precision copies.
    pub cache: bool,
}

impl AutocastState {
    /// This thread's region now.
    pub fn current() -> AutocastState {
        AutocastState { dtype: autocast_dtype(), cache: is_cache_enabled() }
    }
}

/// Runs `f` with this thread's autocast region set to `state` (its dtype
/// and its weight-cast cache flag), restoring the current one afterwards:
/// how checkpointing recomputes a forward in the region it first ran in.
/// An `Err` (and `f` does not run) when the dtype is not BF16 or F16.
///
/// ```
/// use autograd_tensor::autocast::{AutocastState, is_cache_enabled, with_autocast_state};
/// use autograd_core::DType;
/// let first_run = AutocastState { dtype: Some(DType::F16), cache: false };
/// assert!(!with_autocast_state(first_run, is_cache_enabled).unwrap());
/// assert!(is_cache_enabled()); // restored
/// ```
pub fn with_autocast_state<R>(state: AutocastState, f: impl FnOnce() -> R) -> Result<R> {
    let _g = AutocastGuard::with_cache(state.dtype, state.cache)?;
    Ok(f())
}

/// The cast `op`'s policy asks of a float input inside the current region:
/// the dtype to cast `x` to, or `None` (outside a region, f64, not a
/// float, already there, or a `Follow` op).
fn target(op: &str, x: DType) -> Option<DType> {
    let low = autocast_dtype()?;
    if !x.is_float() || x == DType::F64 {
        return None;
    }
    let to = match policy(op) {
        CastPolicy::Lower => low,
        CastPolicy::Float32 => DType::F32,
        CastPolicy::Follow => return None,
    };
    (to != x).then_some(to)
}

/// `x` cast as `op`'s policy asks inside the current region (a shared
/// handle when nothing changes); a parameter's copy comes from the
/// weight-cast cache, recorded as a cast of the parameter.
#[track_caller]
pub(crate) fn cast<B: Backend>(op: &str, x: &Tensor<B>) -> Result<Tensor<B>> {
    match target(op, x.dtype()) {
        Some(to) => match cache::cached_copy(x, to)? {
            Some(copy) => Ok(x.record_cast(&copy)),
            None => x.try_to_dtype(to),
        },
        None => Ok(x.clone()),
    }
}

/// A parameter `x` cast to `to` without recording, for ops that cast
/// inside their own node (`linear`): the cache's copy when `x` is cached
/// (`true`: the op may keep it for backward, as the cache holds it
/// anyway), else a fresh cast (`false`: recast it in backward rather than
/// saving it).
#[track_caller]
pub(crate) fn cast_unrecorded<B: Backend>(x: &Tensor<B>, to: DType) -> Result<(Tensor<B>, bool)> {
    if x.dtype() == to {
        return Ok((x.clone(), false));
    }
    match cache::cached_copy(x, to)? {
        Some(copy) => Ok((copy, true)),
        None => Ok((crate::no_grad(|| x.try_to_dtype(to))?, false)),
    }
}

/// The dtype `op` runs in for an input of dtype `x` (for ops that cast a
/// parameter themselves and must not save the cast copy).
pub(crate) fn dtype_for(op: &str, x: DType) -> DType {
    target(op, x).unwrap_or(x)
}
