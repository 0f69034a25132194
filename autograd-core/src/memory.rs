//! Storage memory accounting: live and peak bytes of tensor storage.
//!
//! Every backend buffer is a [`Buffer`], whose constructor and destructor
//! update counters: the process's, or a thread's own ([`with_counters`]). Checkpointing and graph freeing are measured
//! with these numbers instead of being assumed.

use std::any::{Any, TypeId};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

/// One set of storage counters. The process has one ([`Counters::global`]);
/// a thread can count into its own instead ([`with_counters`]): each rank
/// of an in-process group of ranks (`autograd-dist`) measures its own
/// memory although the ranks share the process. A buffer returns its bytes
/// to the counters it was counted in, whichever thread frees it.
///
/// ```
/// use autograd_core::memory::{stats, with_counters, Buffer, Counters};
/// let mine = Counters::leak();
/// let b = with_counters(mine, || Buffer::from_vec(vec![0u8; 100]));
/// assert_eq!(mine.stats().live_bytes, 100);
/// drop(b); // on this thread, outside `with_counters`: still returned to `mine`
/// assert_eq!((mine.stats().live_bytes, mine.stats().peak_bytes), (0, 100));
/// ```
#[derive(Debug, Default)]
pub struct Counters {
    live: AtomicUsize,
    peak: AtomicUsize,
    live_buffers: AtomicUsize,
    excluded: AtomicUsize,
    peak_net: AtomicUsize,
    device: AtomicUsize,
    cast_cache: AtomicUsize,
}

static GLOBAL: Counters = Counters::new();

thread_local! {
    static CURRENT: Cell<&'static Counters> = const { Cell::new(&GLOBAL) };
}

impl Counters {
    const fn new() -> Self {
        Counters {
            live: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            live_buffers: AtomicUsize::new(0),
            excluded: AtomicUsize::new(0),
            peak_net: AtomicUsize::new(0),
            device: AtomicUsize::new(0),
            cast_cache: AtomicUsize::new(0),
        }
    }
    /// The process-wide counters (what a thread counts into by default).
    pub fn global() -> &'static Counters {
        &GLOBAL
    }
    /// New zeroed counters that live as long as the process (buffers made
    /// while they are installed point at them; 40 bytes, never freed).
    pub fn leak() -> &'static Counters {
        Box::leak(Box::new(Counters::new()))
    }
    /// A snapshot of these counters.
    pub fn stats(&self) -> MemoryStats {
        MemoryStats {
            live_bytes: self.live.load(Ordering::Relaxed),
            peak_bytes: self.peak.load(Ordering::Relaxed),
            live_buffers: self.live_buffers.load(Ordering::Relaxed),
            device_bytes: self.device.load(Ordering::Relaxed),
            cast_cache_bytes: self.cast_cache.load(Ordering::Relaxed),
        }
    }
    fn alloc(&self, bytes: usize) {
        let live = self.live.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(live, Ordering::Relaxed);
        self.peak_net.fetch_max(live.saturating_sub(self.excluded.load(Ordering::Relaxed)), Ordering::Relaxed);
        self.live_buffers.fetch_add(1, Ordering::Relaxed);
    }
    fn free(&self, bytes: usize) {
        self.live.fetch_sub(bytes, Ordering::Relaxed);
        self.live_buffers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The counters this thread counts into.
fn current() -> &'static Counters {
    CURRENT.try_with(Cell::get).unwrap_or(&GLOBAL)
}

/// Runs `f` with this thread counting new buffers into `counters` (and
/// [`stats`] and friends reading them), then restores the previous ones.
pub fn with_counters<R>(counters: &'static Counters, f: impl FnOnce() -> R) -> R {
    struct Restore(&'static Counters);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = CURRENT.try_with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(counters)));
    f()
}

/// Makes this thread count into `counters` from now on (for threads that
/// belong to one rank for their whole life, e.g. a rank's rayon workers).
pub fn set_thread_counters(counters: &'static Counters) {
    let _ = CURRENT.try_with(|c| c.set(counters));
}

/// A snapshot of the storage counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes held by live buffers now.
    pub live_bytes: usize,
    /// Highest `live_bytes` since start or the last [`reset_peak`].
    pub peak_bytes: usize,
    /// Number of live buffers.
    pub live_buffers: usize,
    /// The part of `live_bytes` held in device memory ([`DeviceBytes`]).
    pub device_bytes: usize,
    /// The part of `live_bytes` held by low-precision copies of parameters
    /// that autocast's weight-cast cache made ([`CastCacheBytes`]): not
    /// activations, so left out of [`peak_net_bytes`].
    pub cast_cache_bytes: usize,
}

/// Bytes of a buffer in device memory, counted in the current counters as
/// a host [`Buffer`]'s are (live, peak, buffers) and apart as
/// [`MemoryStats::device_bytes`], until dropped: a GPU backend holds one
/// per device buffer in use, so checkpointing's measurements and the
/// memory statistics mean the same on every backend.
///
/// ```
/// use autograd_core::memory::{DeviceBytes, Counters, with_counters};
/// let mine = Counters::leak();
/// let held = with_counters(mine, || DeviceBytes::new(4096));
/// assert_eq!((mine.stats().live_bytes, mine.stats().device_bytes), (4096, 4096));
/// drop(held);
/// assert_eq!((mine.stats().live_bytes, mine.stats().device_bytes, mine.stats().peak_bytes), (0, 0, 4096));
/// ```
#[derive(Debug)]
pub struct DeviceBytes {
    counters: &'static Counters,
    bytes: usize,
}

impl DeviceBytes {
    /// Counts `bytes` of device memory until the value is dropped.
    pub fn new(bytes: usize) -> DeviceBytes {
        let counters = current();
        counters.alloc(bytes);
        counters.device.fetch_add(bytes, Ordering::Relaxed);
        DeviceBytes { counters, bytes }
    }
}

impl Drop for DeviceBytes {
    fn drop(&mut self) {
        self.counters.device.fetch_sub(self.bytes, Ordering::Relaxed);
        self.counters.free(self.bytes);
    }
}

/// Bytes of a parameter's low-precision copy made by autocast's
/// weight-cast cache, counted apart until dropped: in
/// [`MemoryStats::cast_cache_bytes`], and [`exclude`]d from
/// [`peak_net_bytes`] (what activation measurements read) from before the
/// copy is allocated until the storage holding this guard is freed. The
/// copy's buffer itself is counted in live and peak bytes as every buffer.
///
/// ```
/// use autograd_core::memory::{with_counters, Buffer, CastCacheBytes, Counters};
/// let mine = Counters::leak();
/// with_counters(mine, || {
///     let guard = CastCacheBytes::new(2048); // before the copy allocates
///     let copy = Buffer::from_vec(vec![0u8; 2048]);
///     assert_eq!(mine.stats().cast_cache_bytes, 2048);
///     drop((copy, guard));
/// });
/// assert_eq!(mine.stats().cast_cache_bytes, 0);
/// assert_eq!(mine.stats().peak_bytes, 2048);
/// ```
#[derive(Debug)]
pub struct CastCacheBytes {
    counters: &'static Counters,
    bytes: usize,
}

impl CastCacheBytes {
    /// Sets `bytes` apart in the current counters until dropped.
    pub fn new(bytes: usize) -> CastCacheBytes {
        let counters = current();
        counters.excluded.fetch_add(bytes, Ordering::Relaxed);
        counters.cast_cache.fetch_add(bytes, Ordering::Relaxed);
        CastCacheBytes { counters, bytes }
    }
    /// The bytes set apart.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for CastCacheBytes {
    fn drop(&mut self) {
        self.counters.cast_cache.fetch_sub(self.bytes, Ordering::Relaxed);
        self.counters.excluded.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The current counters (this thread's: the process's unless [`with_counters`] says otherwise).
///
/// ```
/// use autograd_core::memory::{stats, Buffer};
/// let b = Buffer::from_vec(vec![0f32; 1000]);
/// assert!(stats().peak_bytes >= 4000);
/// drop(b);
/// ```
pub fn stats() -> MemoryStats {
    current().stats()
}

/// Bytes held by live storage buffers.
pub fn live_bytes() -> usize {
    current().live.load(Ordering::Relaxed)
}

/// Peak of [`live_bytes`] since start or the last [`reset_peak`].
pub fn peak_bytes() -> usize {
    current().peak.load(Ordering::Relaxed)
}

/// Sets the peak to the current live bytes, to measure a region of code.
pub fn reset_peak() {
    let c = current();
    let live = c.live.load(Ordering::Relaxed);
    c.peak.store(live, Ordering::Relaxed);
    c.peak_net.store(live.saturating_sub(c.excluded.load(Ordering::Relaxed)), Ordering::Relaxed);
}

/// Declares `bytes` of live storage as not part of what is being measured
/// (e.g. parameter gradients, which every checkpointing policy allocates
/// alike); [`peak_net_bytes`] tracks the peak of live minus excluded bytes.
/// Call [`unexclude`] when those bytes are freed.
pub fn exclude(bytes: usize) {
    current().excluded.fetch_add(bytes, Ordering::Relaxed);
}

/// Undoes [`exclude`] for `bytes`.
pub fn unexclude(bytes: usize) {
    current().excluded.fetch_sub(bytes, Ordering::Relaxed);
}

/// Peak of live bytes minus [`exclude`]d bytes since the last [`reset_peak`].
///
/// ```
/// use autograd_core::memory::{exclude, peak_net_bytes, reset_peak, unexclude, Buffer};
/// reset_peak();
/// let before = peak_net_bytes();
/// let g = Buffer::from_vec(vec![0u8; 1 << 20]);
/// exclude(1 << 20);
/// drop(g);
/// unexclude(1 << 20);
/// assert!(peak_net_bytes() >= before); // counted until excluded (other threads may allocate too)
/// ```
pub fn peak_net_bytes() -> usize {
    current().peak_net.load(Ordering::Relaxed)
}

/// A `Vec<T>` whose bytes are counted in [`stats`].
///
/// ```
/// use autograd_core::memory::Buffer;
/// let b = Buffer::from_vec(vec![1.0f64, 2.0]);
/// assert_eq!(&b[..], &[1.0, 2.0]);
/// ```
#[derive(Debug)]
pub struct Buffer<T: Send + 'static> {
    data: Vec<T>,
    /// Where its bytes are counted (`None` once given back by `into_vec`).
    counted: Option<&'static Counters>,
}

impl<T: Send + 'static> Buffer<T> {
    /// Takes ownership of `data` and counts its bytes.
    pub fn from_vec(data: Vec<T>) -> Self {
        let counters = current();
        counters.alloc(data.len() * std::mem::size_of::<T>());
        Buffer { data, counted: Some(counters) }
    }
    /// Gives the vector back (its bytes stop being counted).
    pub fn into_vec(mut self) -> Vec<T> {
        if let Some(c) = self.counted.take() {
            c.free(self.data.len() * std::mem::size_of::<T>());
        }
        std::mem::take(&mut self.data)
    }
}

impl<T: Clone + Send + 'static> Clone for Buffer<T> {
    fn clone(&self) -> Self {
        Buffer::from_vec(self.data.clone())
    }
}

impl<T: Send + 'static> Drop for Buffer<T> {
    fn drop(&mut self) {
        if let Some(c) = self.counted {
            c.free(self.data.len() * std::mem::size_of::<T>());
            // Kept for reuse: by the pool installed on this thread if any
            // (a compiled step's replay), else by the process's cache when
            // large enough to be worth it.
            if !self.data.is_empty() {
                let mut data = Some(std::mem::take(&mut self.data));
                let _ = POOL.try_with(|c| {
                    if let Ok(mut p) = c.try_borrow_mut()
                        && let Some(p) = p.as_mut()
                    {
                        p.put(data.take().expect("taken once"));
                    }
                });
                if let Some(data) = data {
                    cache_put(data);
                }
            }
        }
    }
}

impl<T: Send + 'static> Deref for Buffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

impl<T: Send + 'static> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.data
    }
}

/// Storage vectors freed while the pool was installed ([`with_pool`]),
/// kept to be handed out again by [`filled`]: a program that allocates the
/// same sizes on every run (a compiled step's replay) then allocates nothing
/// once warm. The vectors it holds are not live storage: the counters of
/// [`stats`] do not include them ([`Pool::held_bytes`] says how much).
///
/// ```
/// use autograd_core::memory::{filled, with_pool, Buffer, Pool};
/// let mut pool = Pool::default();
/// let first = with_pool(&mut pool, || {
///     let b = Buffer::from_vec(filled(1000, 0f32));
///     let p = b.as_ptr();
///     drop(b); // back to the pool
///     p
/// });
/// assert_eq!(pool.held_bytes(), 4000);
/// let again = with_pool(&mut pool, || Buffer::from_vec(filled(1000, 1f32)));
/// assert_eq!((again.as_ptr(), again[999]), (first, 1.0)); // the same memory, refilled
/// assert_eq!((pool.hits(), pool.held_bytes()), (1, 0));
/// ```
#[derive(Debug, Default)]
pub struct Pool {
    free: HashMap<(TypeId, usize), Vec<Box<dyn Any + Send>>>,
    bytes: usize,
    hits: usize,
    misses: usize,
}

impl Pool {
    /// Bytes of the vectors held for reuse.
    pub fn held_bytes(&self) -> usize {
        self.bytes
    }
    /// Requests served from the pool.
    pub fn hits(&self) -> usize {
        self.hits
    }
    /// Requests the pool could not serve (a new allocation).
    pub fn misses(&self) -> usize {
        self.misses
    }
    /// Drops every vector held.
    pub fn clear(&mut self) {
        self.free.clear();
        self.bytes = 0;
    }
    fn take<T: 'static>(&mut self, n: usize) -> Option<Vec<T>> {
        let got = self.free.get_mut(&(TypeId::of::<T>(), n)).and_then(|l| l.pop()).and_then(|b| b.downcast::<Vec<T>>().ok());
        match got {
            Some(v) => {
                self.hits += 1;
                self.bytes -= n * std::mem::size_of::<T>();
                Some(*v)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }
    fn put<T: Send + 'static>(&mut self, v: Vec<T>) {
        self.bytes += v.len() * std::mem::size_of::<T>();
        self.free.entry((TypeId::of::<T>(), v.len())).or_default().push(Box::new(v));
    }
}

thread_local! {
    static POOL: RefCell<Option<Pool>> = const { RefCell::new(None) };
}

/// Runs `f` with `pool` installed on this thread: buffers freed on this
/// thread go into it, and [`filled`] takes from it. Other threads (the
/// rayon pool's workers) allocate and free as usual.
pub fn with_pool<R>(pool: &mut Pool, f: impl FnOnce() -> R) -> R {
    struct Restore<'a> {
        pool: &'a mut Pool,
        prev: Option<Pool>,
    }
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let prev = self.prev.take();
            *self.pool = POOL.with(|c| std::mem::replace(&mut *c.borrow_mut(), prev)).unwrap_or_default();
        }
    }
    let prev = POOL.with(|c| c.borrow_mut().replace(std::mem::take(pool)));
    let _restore = Restore { pool, prev };
    f()
}

/// `n` copies of `value`: a kernel's output vector. Taken from the pool
/// installed on this thread when it holds one of exactly `n` elements,
/// else from the process's cache ([`cached_bytes`]) when it does
/// (refilled either way), else newly allocated.
pub fn filled<T: Copy + Send + 'static>(n: usize, value: T) -> Vec<T> {
    let pooled = reuse::<T>(n);
    match pooled {
        Some(mut v) => {
            v.fill(value);
            v
        }
        None => vec![value; n],
    }
}

/// A vector of `n` elements for a kernel that writes every one of them: a
/// pooled or cached vector as it was (its old values, not refilled) when
/// the pool installed on this thread or the process's cache holds one of
/// exactly `n` elements, else `n` copies of `value`. Saves [`filled`]'s
/// pass over memory (and, for a cached vector, the page faults of fresh
/// memory).
///
/// ```
/// use autograd_core::memory::scratch;
/// let mut v = scratch(3, 0f32);
/// v.copy_from_slice(&[1.0, 2.0, 3.0]); // every element written
/// assert_eq!(v, vec![1.0, 2.0, 3.0]);
/// ```
pub fn scratch<T: Copy + Send + 'static>(n: usize, value: T) -> Vec<T> {
    let pooled = reuse::<T>(n);
    pooled.unwrap_or_else(|| vec![value; n])
}

/// A vector of exactly `n` elements from this thread's pool, else from
/// the process's cache.
fn reuse<T: Send + 'static>(n: usize) -> Option<Vec<T>> {
    let pooled = POOL.try_with(|c| c.try_borrow_mut().ok().and_then(|mut p| p.as_mut().and_then(|p| p.take::<T>(n)))).ok().flatten();
    pooled.or_else(|| cache_take::<T>(n))
}

/// Storage vectors this small are left to the allocator: below it a
/// `malloc` is served from its bins without touching the OS, and caching
/// would only hold memory.
pub const CACHE_MIN_BYTES: usize = 64 << 10;

/// The process's cache of freed storage (PyTorch's caching allocator on
/// the host): vectors of [`CACHE_MIN_BYTES`] and more, freed while no pool
/// is installed on the freeing thread, are kept by dtype and exact length
/// and handed out again by [`filled`] and [`scratch`]. A training loop
/// allocates the same sizes every step, so once warm it takes no fresh
/// pages from the OS: no page faults, no zeroing by the kernel. Vectors
/// held here are not live storage (the counters of [`stats`] exclude
/// them; [`cached_bytes`] says how much is held). Bounded by
/// [`set_cache_limit`]: above it the oldest-inserted lengths are returned
/// to the system first.
struct Cache {
    /// By (element type, length, bytes).
    free: HashMap<CacheKey, Vec<Box<dyn Any + Send>>>,
    /// Keys in the order their lists were last added to (eviction order).
    order: std::collections::VecDeque<CacheKey>,
    bytes: usize,
    limit: usize,
}

type CacheKey = (TypeId, usize, usize);

static CACHE: std::sync::Mutex<Option<Cache>> = std::sync::Mutex::new(None);

/// The default bound: 1 GiB, or an eighth of the machine's memory if less.
fn default_cache_limit() -> usize {
    let eighth = physical_memory().map(|m| (m / 8).min(usize::MAX as u128) as usize).unwrap_or(usize::MAX);
    eighth.min(1 << 30)
}

fn with_cache<R>(f: impl FnOnce(&mut Cache) -> R) -> R {
    let mut guard = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let cache = guard.get_or_insert_with(|| Cache {
        free: HashMap::new(),
        order: std::collections::VecDeque::new(),
        bytes: 0,
        limit: default_cache_limit(),
    });
    f(cache)
}

fn cache_put<T: Send + 'static>(v: Vec<T>) {
    let bytes = v.len() * std::mem::size_of::<T>();
    if bytes < CACHE_MIN_BYTES {
        return;
    }
    // the vector is dropped (returned to the system) outside the lock
    let _evicted: Vec<Box<dyn Any + Send>> = with_cache(|c| {
        if bytes > c.limit {
            return vec![Box::new(v) as Box<dyn Any + Send>];
        }
        let mut out: Vec<Box<dyn Any + Send>> = Vec::new();
        while c.bytes + bytes > c.limit {
            let Some(key) = c.order.pop_front() else { break };
            if let Some(list) = c.free.get_mut(&key)
                && let Some(old) = list.pop()
            {
                c.bytes -= key.2;
                if !list.is_empty() {
                    c.order.push_back(key);
                }
                out.push(old);
            }
        }
        let key = (TypeId::of::<T>(), v.len(), bytes);
        c.free.entry(key).or_default().push(Box::new(v));
        c.order.retain(|k| *k != key);
        c.order.push_back(key);
        c.bytes += bytes;
        out
    });
}

fn cache_take<T: Send + 'static>(n: usize) -> Option<Vec<T>> {
    let bytes = n * std::mem::size_of::<T>();
    if bytes < CACHE_MIN_BYTES {
        return None;
    }
    with_cache(|c| {
        let key = (TypeId::of::<T>(), n, bytes);
        let v = c.free.get_mut(&key)?.pop()?.downcast::<Vec<T>>().ok()?;
        c.bytes -= bytes;
        if c.free.get(&key).is_some_and(|l| l.is_empty()) {
            c.free.remove(&key);
            c.order.retain(|k| *k != key);
        }
        Some(*v)
    })
}

/// Bytes of freed storage the process's cache holds for reuse (not
/// counted as live: see [`stats`]).
///
/// ```
/// use autograd_core::memory::{Buffer, cached_bytes, empty_cache, scratch};
/// let b = Buffer::from_vec(scratch(1 << 20, 0f32)); // 4 MiB
/// drop(b);
/// assert!(cached_bytes() >= 4 << 20); // kept (other threads may add theirs)
/// empty_cache();
/// ```
pub fn cached_bytes() -> usize {
    with_cache(|c| c.bytes)
}

/// Returns every vector the process's cache holds to the system
/// (PyTorch's `torch.cuda.empty_cache()`, for host memory here).
///
/// ```
/// use autograd_core::memory::{Buffer, cached_bytes, empty_cache, scratch};
/// drop(Buffer::from_vec(scratch(1 << 18, 0f64)));
/// empty_cache();
/// let v: Vec<f64> = scratch(1 << 18, 1.0); // newly allocated: the cache was emptied
/// assert!(v.iter().all(|&x| x == 1.0));
/// ```
pub fn empty_cache() {
    let dropped = with_cache(|c| {
        c.bytes = 0;
        c.order.clear();
        std::mem::take(&mut c.free)
    });
    drop(dropped);
}

/// Bounds the process's cache at `bytes` (0 turns it off) and trims it to
/// that; returns the previous bound.
///
/// ```
/// use autograd_core::memory::set_cache_limit;
/// let before = set_cache_limit(0); // no caching
/// set_cache_limit(before);
/// ```
pub fn set_cache_limit(bytes: usize) -> usize {
    let (prev, dropped) = with_cache(|c| {
        let prev = std::mem::replace(&mut c.limit, bytes);
        let mut out: Vec<Box<dyn Any + Send>> = Vec::new();
        while c.bytes > c.limit {
            let Some(key) = c.order.pop_front() else { break };
            if let Some(list) = c.free.remove(&key) {
                c.bytes -= key.2 * list.len();
                out.extend(list);
            }
        }
        (prev, out)
    });
    drop(dropped);
    prev
}

/// Total physical memory of this machine in bytes (Linux: `MemTotal` of
/// `/proc/meminfo`), read once; `None` where it cannot be found.
pub fn physical_memory() -> Option<u128> {
    static TOTAL: std::sync::OnceLock<Option<u128>> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    })
}

/// Checks that `numel` elements of `elem_bytes` bytes can be allocated for
/// `op` before a kernel tries: an `Err` ([`crate::Error::OutOfMemory`],
/// with the byte count) for more than `isize::MAX` bytes or more than the
/// machine's physical memory, instead of the allocator aborting the process.
///
/// A request under those limits can still fail later: the kernel may
/// overcommit and kill the process when the pages are touched. No library
/// can catch that; keep allocations within the memory you have.
///
/// ```
/// use autograd_core::memory::check_alloc;
/// assert!(check_alloc("zeros", 1000, 4).is_ok());
/// assert!(check_alloc("zeros", 1 << 40, 4).unwrap_err().to_string().contains("4398046511104 bytes"));
/// assert!(check_alloc("zeros", usize::MAX, 8).is_err());
/// ```
pub fn check_alloc(op: &'static str, numel: usize, elem_bytes: usize) -> crate::Result<usize> {
    let bytes = numel as u128 * elem_bytes as u128;
    let err = |why: String| crate::Error::OutOfMemory { op, bytes, numel: numel as u128, dtype_bytes: elem_bytes, why, location: None };
    if bytes > isize::MAX as u128 {
        return Err(err("more than isize::MAX bytes, the most one allocation may hold".into()));
    }
    if let Some(total) = physical_memory()
        && bytes > total
    {
        return Err(err(format!("more than this machine's {total} bytes of physical memory")));
    }
    Ok(bytes as usize)
}

/// A vector of `n` copies of `value`, allocated fallibly: from the
/// process's cache when it holds one (refilled), else [`check_alloc`] first, then
/// `try_reserve_exact`, so that a refused allocation is an `Err` naming
/// `op` and the byte count rather than an abort.
///
/// ```
/// use autograd_core::memory::try_filled;
/// assert_eq!(try_filled("full", 3, 1.5f32).unwrap(), vec![1.5, 1.5, 1.5]);
/// assert!(try_filled("full", 1 << 61, 0f64).is_err());
/// ```
pub fn try_filled<T: Clone + Send + 'static>(op: &'static str, n: usize, value: T) -> crate::Result<Vec<T>> {
    // the process's cache only: a replay's pool serves the kernels' outputs
    if let Some(mut v) = cache_take::<T>(n) {
        v.fill(value);
        return Ok(v);
    }
    let mut v = try_with_capacity(op, n)?;
    v.resize(n, value);
    Ok(v)
}

/// An empty vector with room for `n` elements, allocated fallibly (see [`try_filled`]).
pub fn try_with_capacity<T>(op: &'static str, n: usize) -> crate::Result<Vec<T>> {
    let elem = std::mem::size_of::<T>();
    check_alloc(op, n, elem)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| crate::Error::OutOfMemory {
        op,
        bytes: n as u128 * elem as u128,
        numel: n as u128,
        dtype_bytes: elem,
        why: format!("the allocator refused: {e}"),
        location: None,
    })?;
    Ok(v)
}
