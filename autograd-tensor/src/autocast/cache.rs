//! The weight-cast cache of an autocast region (PyTorch's `cached_cast`):
//! a parameter's low-precision copy is made once per region and reused by
//! every product that reads the parameter in it (a layer applied twice,
//! tied embeddings, a recurrent cell over time steps, a checkpointed
//! segment recomputed in the region) and by their backward passes, which
//! keep the copy as PyTorch's graph keeps it.
//!
//! What is cached is PyTorch's rule: an f32 leaf that requires grad, cast
//! to the region's low dtype. Unlike PyTorch, a hit also needs the
//! parameter's version counter unchanged since the copy was made, so an
//! optimizer step inside the region (an in-place update) is seen and the
//! copy remade rather than silently stale. Nothing is cached while a step
//! is captured for compile (a replay must cast afresh each time), or for a
//! tensor carrying a forward-mode tangent (the copy would drop it).
//!
//! The cache is this thread's and lives as long as the outermost region:
//! [`clear_cache`] runs when it ends. A copy's bytes are counted apart from
//! activations ([`autograd_core::memory::CastCacheBytes`]) for as long as
//! its storage lives, in the cache or in a graph that saved it.

use crate::Tensor;
use crate::tensor::{StorageCell, TensorImpl};
use autograd_core::memory::CastCacheBytes;
use autograd_core::{Backend, DType, Error, Layout, Result};
use std::any::{Any, TypeId};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// One cached copy.
struct Entry<B: Backend> {
    /// The parameter copied. Its address is the key; holding a `Weak`
    /// keeps that address from being reused by another tensor while the
    /// entry lives, and says whether the parameter is gone.
    source: Weak<TensorImpl<B>>,
    /// The parameter's version when copied.
    version: u64,
    /// The low-precision copy (no graph).
    copy: Tensor<B>,
}

/// An entry of any backend, as the thread-local map holds it.
trait AnyEntry {
    fn source_alive(&self) -> bool;
    fn as_any(&self) -> &dyn Any;
}

impl<B: Backend> AnyEntry for Entry<B> {
    fn source_alive(&self) -> bool {
        self.source.strong_count() > 0
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The backend, the parameter's address and the target dtype.
type Key = (TypeId, usize, DType);

thread_local! {
    static CACHE: RefCell<HashMap<Key, Box<dyn AnyEntry>>> = RefCell::new(HashMap::new());
    static COUNTS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// Entries at which the next insert looks for entries of dropped
    /// parameters: twice what the last look left (at least 64), so a
    /// region that remakes every copy each step costs no scan per copy.
    static PURGE_AT: Cell<usize> = const { Cell::new(64) };
}

/// What this thread's weight-cast cache holds and has done.
///
/// ```
/// use autograd_tensor::{Tensor, autocast::{autocast, cache_stats}, functional::try_linear};
/// use autograd_core::{DType, RefBackend};
/// let w = Tensor::<RefBackend>::ones([4, 3]).requires_grad_(true);
/// let x = Tensor::<RefBackend>::ones([2, 3]);
/// let before = cache_stats();
/// autocast(DType::BF16, || {
///     try_linear(&x, &w, None)?; // the copy is made
///     try_linear(&x, &w, None)?; // and reused
///     assert_eq!(cache_stats().entries, 1);
///     Ok(())
/// })?;
/// let after = cache_stats();
/// assert_eq!((after.misses - before.misses, after.hits - before.hits, after.entries), (1, 1, 0));
/// # Ok::<(), autograd_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CastCacheStats {
    /// Copies held now (emptied when the outermost region ends).
    pub entries: usize,
    /// Casts answered from the cache since the thread started.
    pub hits: usize,
    /// Copies made since the thread started.
    pub misses: usize,
}

/// This thread's weight-cast cache: entries held, hits and misses.
pub fn cache_stats() -> CastCacheStats {
    let (hits, misses) = COUNTS.with(Cell::get);
    CastCacheStats { entries: CACHE.with(|c| c.borrow().len()), hits, misses }
}

/// Drops this thread's cached copies (PyTorch's `torch.clear_autocast_cache`;
/// done when the outermost autocast region ends, and by a compiled step
/// before and after it runs, since a replay updates parameters without the
/// version counter seeing it). Copies a graph saved stay with the graph.
pub fn clear_cache() {
    // taken out first: dropping tensors must not run under the borrow
    let old = CACHE.try_with(|c| std::mem::take(&mut *c.borrow_mut()));
    drop(old);
}

/// Whether `x`'s cast to `to` goes through the cache (PyTorch's rule, see
/// the module's docs).
fn cacheable<B: Backend>(x: &Tensor<B>, to: DType) -> bool {
    super::is_autocast_enabled()
        && super::is_cache_enabled()
        && x.dtype() == DType::F32
        && to.is_low_precision()
        && x.is_leaf()
        && x.requires_grad()
        && !x.is_inference()
        && x.inner.autograd.tangent.get().is_none()
        && !crate::capture::is_capturing()
}

/// `x`'s low-precision copy in `to` (no graph) from this region's cache,
/// made and cached on a miss; `None` when `x` is not cached (the caller
/// casts as usual).
#[track_caller]
pub(crate) fn cached_copy<B: Backend>(x: &Tensor<B>, to: DType) -> Result<Option<Tensor<B>>> {
    if !cacheable(x, to) {
        return Ok(None);
    }
    let key = (TypeId::of::<B>(), Arc::as_ptr(&x.inner) as usize, to);
    let version = x.version();
    let hit = CACHE.with(|c| {
        let c = c.borrow();
        let e = c.get(&key)?.as_any().downcast_ref::<Entry<B>>()?;
        (e.version == version && e.source.strong_count() > 0).then(|| e.copy.clone())
    });
    if let Some(copy) = hit {
        COUNTS.with(|n| n.set((n.get().0 + 1, n.get().1)));
        return Ok(Some(copy));
    }
    let bytes = x
        .numel()
        .checked_mul(to.size_in_bytes())
        .ok_or_else(|| Error::msg(format!("autocast: a copy of {:?} in {to:?} overflows usize bytes", x.shape())))?;
    // set apart before the copy allocates, so no activation peak sees it
    let set_aside = CastCacheBytes::new(bytes);
    let storage = B::cast(&x.storage(), x.layout(), to).map_err(|e| e.at(std::panic::Location::caller()))?;
    let cell = StorageCell::set_aside(storage, set_aside);
    let copy = Tensor::from_parts(cell, Layout::contiguous(x.shape().clone()), to, None, false);
    let entry = Entry { source: Arc::downgrade(&x.inner), version, copy: copy.clone() };
    let dropped = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let mut dropped: Vec<Box<dyn AnyEntry>> = c.insert(key, Box::new(entry)).into_iter().collect();
        if c.len() >= PURGE_AT.with(Cell::get) {
            // entries of parameters that are gone can never hit again
            let dead: Vec<Key> = c.iter().filter(|(_, e)| !e.source_alive()).map(|(k, _)| *k).collect();
            dropped.extend(dead.iter().filter_map(|k| c.remove(k)));
            PURGE_AT.with(|p| p.set((2 * c.len()).max(64)));
        }
        dropped
    });
    drop(dropped);
    COUNTS.with(|n| n.set((n.get().0, n.get().1 + 1)));
    Ok(Some(copy))
}
