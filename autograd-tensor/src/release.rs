//! Freeing a tensor's storage while handles to it live, and filling it
//! again: PyTorch's `untyped_storage().resize_(0)` and back, which fully
//! sharded data parallelism uses to free a gathered parameter between its
//! forward and its backward while the graph still holds it. Every handle
//! that shares the storage (views, clones, tensors a graph saved) sees the
//! change; reading or writing a released tensor is an `Err`, never a read
//! out of bounds.

use crate::Tensor;
use autograd_core::{Backend, Error, HostData, Result};
use std::panic::Location;
use std::sync::atomic::Ordering;

/// What a [`Tensor::try_refill_storage`] puts back, for the version counter
/// that saved tensors check.
///
/// ```
/// use autograd_tensor::Refill;
/// assert_ne!(Refill::Same, Refill::Changed);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refill {
    /// The values the tensor held when it was released: the version stays,
    /// so a graph that saved the tensor before the release may read it.
    /// The caller vouches for it (a gather of shards that have not changed).
    Same,
    /// New values: the version is bumped, as an in-place write bumps it, so
    /// a graph that saved the old values refuses to use the new ones.
    Changed,
}

impl<B: Backend> Tensor<B> {
    /// Frees the storage this tensor owns: every handle sharing it then
    /// holds an empty storage until [`Tensor::try_refill_storage`]. `Err`
    /// unless the tensor is the whole of its storage (contiguous, from its
    /// first element, nothing past its end), so no view loses data it
    /// alone could see. Releasing a released tensor does nothing.
    ///
    /// ```
    /// use autograd_core::{HostData, RefBackend};
    /// use autograd_tensor::{Refill, Tensor};
    /// let w = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [2]).requires_grad_(true);
    /// let y = (&w * &w).sum(); // the graph saves w
    /// w.try_release_storage().unwrap();
    /// assert!(w.is_storage_released() && w.try_to_vec::<f64>().is_err());
    /// w.try_refill_storage(HostData::from(vec![1.0f64, 2.0]), Refill::Same).unwrap();
    /// y.backward().unwrap(); // reads w again
    /// assert_eq!(w.grad().unwrap().to_vec::<f64>(), vec![2.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn try_release_storage(&self) -> Result<()> {
        let mut data = self.inner.storage.data.write().unwrap_or_else(|e| e.into_inner());
        let len = B::len(&data);
        if len == 0 {
            return Ok(());
        }
        if !self.is_contiguous() || self.layout().offset() != 0 || len != self.numel() {
            return Err(Error::InvalidShape {
                op: "release_storage",
                location: Some(Location::caller()),
                msg: format!(
                    "a tensor of shape {:?} (offset {}, contiguous: {}) over a storage of {len} elements is not the whole of it",
                    self.dims(),
                    self.layout().offset(),
                    self.is_contiguous()
                ),
            });
        }
        *data = B::from_host(HostData::from_f64(&[], self.dtype()));
        Ok(())
    }

    /// Whether [`Tensor::try_release_storage`] freed this tensor's storage
    /// (and nothing has refilled it since). An empty tensor's storage is
    /// always empty, so it counts as released.
    pub fn is_storage_released(&self) -> bool {
        B::len(&self.storage()) < self.numel() || self.numel() == 0
    }

    /// Gives a released tensor its values again: `data` (this tensor's
    /// dtype, one value per element, in row-major order) becomes the
    /// storage every handle shares. `refill` says whether the values are
    /// the ones released ([`Refill::Same`], the version stays) or new
    /// ([`Refill::Changed`], the version is bumped). `Err` if the tensor
    /// is not released or `data` does not fit it.
    #[track_caller]
    pub fn try_refill_storage(&self, data: HostData, refill: Refill) -> Result<()> {
        if data.dtype() != self.dtype() || data.len() != self.numel() {
            return Err(Error::InvalidShape {
                op: "refill_storage",
                location: Some(Location::caller()),
                msg: format!("{} {:?} values for a tensor of shape {:?} in {:?}", data.len(), data.dtype(), self.dims(), self.dtype()),
            });
        }
        let mut storage = self.inner.storage.data.write().unwrap_or_else(|e| e.into_inner());
        if B::len(&storage) != 0 {
            return Err(Error::InvalidShape {
                op: "refill_storage",
                location: Some(Location::caller()),
                msg: format!("the tensor of shape {:?} holds its values (release it first)", self.dims()),
            });
        }
        *storage = B::from_host(data);
        if refill == Refill::Changed {
            self.inner.storage.version.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}
