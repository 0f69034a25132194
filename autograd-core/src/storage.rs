//! Host-memory containers shared by the CPU-resident backends: conversions
//! and file bytes of [`HostData`], written once over every dtype with the
//! dispatch macros (the enums themselves come from the dtype table).

pub use crate::dtype::{HostData, HostStorage};
use crate::{DType, Element};

impl HostData {
    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// All values converted to f64 (exact for every dtype but large i64).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        with_any!(HostData: self, |v: T| v.iter().map(|&x| x.to_f64()).collect())
    }
    /// Values converted to `dtype` (rounding to nearest for narrower floats).
    ///
    /// ```
    /// use autograd_core::{DType, HostData};
    /// // one rounding from int64, as PyTorch (not through f64): 2^60 + 2^37
    /// let big = HostData::from(vec![(1i64 << 60) + (1 << 36) + 1]);
    /// assert_eq!(big.convert(DType::F32), HostData::from(vec![((1u64 << 60) + (1 << 37)) as f32]));
    /// assert_eq!(HostData::from(vec![0.5f64, f64::NAN]).convert(DType::Bool), HostData::from(vec![true, true]));
    /// ```
    pub fn convert(&self, dtype: DType) -> HostData {
        if self.dtype() == dtype {
            return self.clone();
        }
        if let Some(v) = i64::values(self) {
            // An int64 above 2^53 is not exact in f64: through f64 it would
            // round twice. Each dtype converts from int64 as PyTorch does.
            return with_dtype!(dtype, |D| v.iter().map(|&x| D::from_i64(x)).collect::<Vec<D>>().into());
        }
        // f32 -> f16/bf16 and back must round once, so go through f64 only
        // where f64 holds every source value exactly (it does for floats
        // and bools; integers were converted above).
        HostData::from_f64(&self.to_f64_vec(), dtype)
    }
    /// Values from f64, converted to `dtype`.
    pub fn from_f64(v: &[f64], dtype: DType) -> HostData {
        with_dtype!(dtype, |T| v.iter().map(|&x| <T as Element>::from_f64(x)).collect::<Vec<T>>().into())
    }
    /// Raw little-endian bytes, as in a safetensors file.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() * self.dtype().size_in_bytes());
        with_any!(HostData: self, |v: T| v.iter().for_each(|x| x.write_le(&mut out)));
        out
    }
    /// Parses little-endian bytes of `dtype`; `None` if the length is not a multiple of the element size.
    pub fn from_le_bytes(bytes: &[u8], dtype: DType) -> Option<HostData> {
        let n = dtype.size_in_bytes();
        if !bytes.len().is_multiple_of(n) {
            return None;
        }
        Some(with_dtype!(dtype, |T| bytes.chunks_exact(n).map(T::read_le).collect::<Vec<T>>().into()))
    }
}

impl HostStorage {
    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
