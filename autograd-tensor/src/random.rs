//! Random numbers: the process-wide generator, forked generators (PyTorch's
//! `fork_rng`), their saved states, and the random tensor constructors.
//! `nn::init`, dropout, `gradgradcheck` and checkpoint replay draw from here.

use crate::Tensor;
use autograd_core::ResultExt;
use autograd_core::rng::{Distribution, Generator};
use autograd_core::{Backend, DType, Result, Shape};
use std::panic::Location;
use std::sync::Mutex;

static GLOBAL_RNG: Mutex<Option<Generator>> = Mutex::new(None);
const DEFAULT_SEED: u64 = 0x5EED_0FA0_7067_AD00;

/// Seeds the global generator used by `rand`, `randn` and dropout.
///
/// ```
/// use autograd_tensor::{manual_seed, Tensor};
/// use autograd_core::{RefBackend, DType};
/// manual_seed(7);
/// let a = Tensor::<RefBackend>::randn_dtype([3], DType::F64).to_vec::<f64>();
/// manual_seed(7);
/// let b = Tensor::<RefBackend>::randn_dtype([3], DType::F64).to_vec::<f64>();
/// assert_eq!(a, b);
/// ```
pub fn manual_seed(seed: u64) {
    set_rng_state(Generator::new(seed));
}

thread_local! {
    static FORKED_RNG: std::cell::RefCell<Option<Generator>> = const { std::cell::RefCell::new(None) };
    /// This thread's own "global" generator ([`with_own_generator`]).
    static OWN_RNG: std::cell::RefCell<Option<Generator>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with this thread having its own global generator, starting
/// from the default seed: inside, [`manual_seed`], [`rng_state`],
/// [`set_rng_state`] and every draw use it and leave the process's
/// generator alone. Each rank of an in-process group (`autograd-dist`)
/// runs in one, so that ranks seeded alike draw alike, as separate
/// processes would. Unlike [`fork_rng`], draws inside count as draws from
/// the global generator (a compiled step replays them).
///
/// ```
/// use autograd_tensor::{manual_seed, with_own_generator, Tensor};
/// use autograd_core::{RefBackend, DType};
/// let draw = || Tensor::<RefBackend>::rand_dtype([2], DType::F64).to_vec::<f64>();
/// manual_seed(5);
/// let outside = draw();
/// let inside = std::thread::spawn(move || with_own_generator(|| { manual_seed(5); draw() })).join().unwrap();
/// assert_eq!(outside, inside);
/// ```
pub fn with_own_generator<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Generator>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            let _ = OWN_RNG.try_with(|r| *r.borrow_mut() = prev);
        }
    }
    let _restore = Restore(OWN_RNG.with(|r| r.borrow_mut().replace(Generator::new(DEFAULT_SEED))));
    f()
}

/// Runs `f` with the generator in use on this thread: the one installed by
/// [`fork_rng`] if any, else the global one.
pub fn with_rng<R>(f: impl FnOnce(&mut Generator) -> R) -> R {
    let mut f = Some(f);
    let forked = FORKED_RNG.with(|r| r.borrow_mut().as_mut().map(|g| (f.take().expect("once"))(g)));
    match forked {
        Some(out) => out,
        None => {
            let own = OWN_RNG.with(|r| r.borrow_mut().as_mut().map(|g| (f.take().expect("once"))(g)));
            match own {
                Some(out) => out,
                None => {
                    let mut g = GLOBAL_RNG.lock().unwrap_or_else(|e| e.into_inner());
                    (f.take().expect("once"))(g.get_or_insert_with(|| Generator::new(DEFAULT_SEED)))
                }
            }
        }
    }
}

/// Whether this thread draws from a forked generator ([`fork_rng`],
/// [`fork_rng_from`]) rather than the global one: a recorder that replays
/// draws from the global generator cannot replay these.
///
/// ```
/// use autograd_tensor::{fork_rng, is_rng_forked};
/// assert!(!is_rng_forked());
/// assert!(fork_rng(1, is_rng_forked));
/// ```
pub fn is_rng_forked() -> bool {
    // Borrowed: a draw from the forked generator is in progress.
    FORKED_RNG.with(|r| r.try_borrow().map_or(true, |g| g.is_some()))
}

/// Runs `f` with a private generator seeded with `seed` on this thread,
/// leaving the global generator untouched (PyTorch's `fork_rng`): random
/// draws inside are reproducible whatever other threads do meanwhile.
///
/// ```
/// use autograd_tensor::{fork_rng, Tensor};
/// use autograd_core::{RefBackend, DType};
/// let a = fork_rng(1, || Tensor::<RefBackend>::rand_dtype([4], DType::F64).to_vec::<f64>());
/// let b = fork_rng(1, || Tensor::<RefBackend>::rand_dtype([4], DType::F64).to_vec::<f64>());
/// assert_eq!(a, b);
/// ```
pub fn fork_rng<R>(seed: u64, f: impl FnOnce() -> R) -> R {
    fork_rng_from(Generator::new(seed), f)
}

/// [`fork_rng`] from a generator state (e.g. one saved by [`rng_state`]):
/// draws inside `f` replay the draws made after that state was taken.
/// Activation checkpointing uses it to recompute dropout masks exactly.
///
/// ```
/// use autograd_tensor::{fork_rng_from, rng_state, Tensor};
/// use autograd_core::{RefBackend, DType};
/// let state = rng_state();
/// let a = Tensor::<RefBackend>::rand_dtype([3], DType::F64).to_vec::<f64>();
/// let b = fork_rng_from(state, || Tensor::<RefBackend>::rand_dtype([3], DType::F64).to_vec::<f64>());
/// assert_eq!(a, b);
/// ```
pub fn fork_rng_from<R>(state: Generator, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Generator>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            FORKED_RNG.with(|r| *r.borrow_mut() = prev);
        }
    }
    let _restore = Restore(FORKED_RNG.with(|r| r.borrow_mut().replace(state)));
    f()
}

/// Returns a copy of the global generator's state (this thread's own
/// inside [`with_own_generator`]), to replay random ops.
pub fn rng_state() -> Generator {
    with_rng(|g| g.clone())
}

/// Restores a state saved by [`rng_state`].
pub fn set_rng_state(state: Generator) {
    let mut state = Some(state);
    OWN_RNG.with(|r| {
        if let Some(g) = r.borrow_mut().as_mut() {
            *g = state.take().expect("once");
        }
    });
    if let Some(state) = state {
        *GLOBAL_RNG.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
    }
}

impl<B: Backend> Tensor<B> {
    /// Draws `shape.numel()` values with `draw` into a new tensor, checking the size first.
    #[track_caller]
    fn try_random(shape: Shape, dtype: DType, op: &'static str, dist: Distribution) -> Result<Self> {
        let loc = Location::caller();
        shape.try_numel(op).map_err(|e| e.at(loc))?;
        let s = with_rng(|g| B::random(&shape, dtype, dist, g)).map_err(|e| e.at(loc))?;
        Ok(Self::from_storage(s, shape))
    }

    /// Uniform samples in `[0, 1)` from the global generator (see [`manual_seed`]).
    #[track_caller]
    pub fn rand_dtype(shape: impl Into<Shape>, dtype: DType) -> Self {
        Self::try_rand_dtype(shape, dtype).or_panic()
    }

    /// Fallible [`Tensor::rand_dtype`] (`Err` for shapes that cannot be allocated).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// assert!(Tensor::<RefBackend>::try_rand([1 << 32, 1 << 32]).is_err());
    /// ```
    #[track_caller]
    pub fn try_rand_dtype(shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        Self::try_random(shape.into(), dtype, "rand", Distribution::Uniform)
    }

    /// Standard normal samples from the global generator (see [`manual_seed`]).
    #[track_caller]
    pub fn randn_dtype(shape: impl Into<Shape>, dtype: DType) -> Self {
        Self::try_randn_dtype(shape, dtype).or_panic()
    }

    /// Fallible [`Tensor::randn_dtype`] (`Err` for shapes that cannot be allocated).
    #[track_caller]
    pub fn try_randn_dtype(shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        Self::try_random(shape.into(), dtype, "randn", Distribution::Normal)
    }
}
