//! The buffers of [`crate::Traced`]: one storage of the inner backend with
//! an identity (what the recorder keys values by) behind a lock (a replay
//! reads and writes the buffers a model keeps, from any thread).

use autograd_core::{Backend, DType, Error, Result, Shape};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One buffer of `B`, with an identity the recorder keys values by.
pub struct Buf<B: Backend> {
    pub(crate) id: u64,
    dtype: DType,
    len: usize,
    data: RwLock<B::Storage>,
}

impl<B: Backend> Buf<B> {
    pub(crate) fn new(s: B::Storage) -> Arc<Self> {
        Arc::new(Buf { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), dtype: B::dtype(&s), len: B::len(&s), data: RwLock::new(s) })
    }
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, B::Storage> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, B::Storage> {
        self.data.write().unwrap_or_else(|e| e.into_inner())
    }
    /// Replaces the contents with a new storage of the same dtype and
    /// length (a replay writing a gradient the user's tensor holds).
    pub(crate) fn replace(&self, s: B::Storage) -> Result<()> {
        if B::dtype(&s) != self.dtype || B::len(&s) != self.len {
            return Err(Error::msg(format!(
                "compiled step: a replayed value of {:?} x {} does not fit its buffer of {:?} x {}",
                B::dtype(&s),
                B::len(&s),
                self.dtype,
                self.len
            )));
        }
        *self.write() = s;
        Ok(())
    }
    /// Drops the contents (dead until the replay writes them again): the
    /// buffer holds an empty storage meanwhile, so a read in between is an
    /// `Err` from the layout checks, not stale values.
    pub(crate) fn release(&self) -> Result<()> {
        *self.write() = B::full(&Shape::from([0]), 0.0, self.dtype)?;
        Ok(())
    }
    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<B: Backend> std::fmt::Debug for Buf<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buf#{}({:?} x {})", self.id, self.dtype, self.len)
    }
}

/// The storage of [`crate::Traced`]: a shared handle on a buffer of `B`.
pub struct TracedStorage<B: Backend>(pub(crate) Arc<Buf<B>>);

impl<B: Backend> std::fmt::Debug for TracedStorage<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<B: Backend> TracedStorage<B> {
    pub(crate) fn new(s: B::Storage) -> Self {
        TracedStorage(Buf::new(s))
    }
}
