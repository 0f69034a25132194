//! Conversions between `Tensor` and `ndarray::ArrayD` (feature `ndarray`).
//!
//! Into a tensor, an array in standard (row-major) layout hands its buffer
//! over (an offset is trimmed in place, without a new allocation); any
//! other layout is copied once in logical order. Out of a tensor, the elements are copied once (a
//! tensor's storage is shared with its views and graph, so it cannot be
//! handed out), then the array takes that buffer without another copy.

use crate::Tensor;
use autograd_core::Element;
use autograd_core::ResultExt;
use autograd_core::{Backend, Error, Result};
use ndarray::{ArrayD, IxDyn};
use std::panic::Location;

impl<B: Backend> Tensor<B> {
    /// A tensor holding `array`'s elements in its shape and the dtype of `T`.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, DType};
    /// let a = ndarray::ArrayD::from_shape_vec(vec![2, 3], (0..6).map(|i| i as f32).collect()).unwrap();
    /// let t = Tensor::<RefBackend>::from_ndarray(a.clone());
    /// assert_eq!((t.dims(), t.dtype()), (&[2, 3][..], DType::F32));
    /// assert_eq!(t.to_ndarray::<f32>(), a);
    /// // A transposed (non-standard) array is copied in logical order.
    /// let tt = Tensor::<RefBackend>::from_ndarray(a.t().to_owned().into_dyn().reversed_axes().reversed_axes());
    /// assert_eq!(tt.to_vec::<f32>(), a.t().iter().copied().collect::<Vec<_>>());
    /// ```
    #[track_caller]
    pub fn from_ndarray<T: Element>(array: ArrayD<T>) -> Self {
        Self::try_from_ndarray(array).or_panic()
    }

    /// Fallible [`Tensor::from_ndarray`] (`Err` where memory cannot be allocated).
    #[track_caller]
    pub fn try_from_ndarray<T: Element>(array: ArrayD<T>) -> Result<Self> {
        let shape = array.shape().to_vec();
        let n = array.len();
        let data = if array.is_standard_layout() {
            // The logical elements are `n` contiguous values from the offset:
            // trimmed in place, the buffer is kept, never reallocated.
            let (mut v, offset) = array.into_raw_vec_and_offset();
            let o = offset.unwrap_or(0);
            v.truncate(o + n);
            v.drain(..o);
            v
        } else {
            array.iter().copied().collect()
        };
        Self::try_from_vec(data, shape)
    }

    /// The elements as an `ndarray::ArrayD<T>` of this tensor's shape
    /// (values converted to `T`); panics where [`Tensor::try_to_ndarray`] is an `Err`.
    #[track_caller]
    pub fn to_ndarray<T: Element>(&self) -> ArrayD<T> {
        self.try_to_ndarray().or_panic()
    }

    /// Fallible [`Tensor::to_ndarray`].
    #[track_caller]
    pub fn try_to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        let loc = Location::caller();
        let v = self.try_to_vec::<T>()?;
        ArrayD::from_shape_vec(IxDyn(self.dims()), v).map_err(|e| Error::InvalidShape {
            op: "to_ndarray",
            msg: e.to_string(),
            location: Some(loc),
        })
    }
}

impl<B: Backend, T: Element> From<ArrayD<T>> for Tensor<B> {
    /// [`Tensor::from_ndarray`].
    #[track_caller]
    fn from(array: ArrayD<T>) -> Self {
        Tensor::from_ndarray(array)
    }
}
