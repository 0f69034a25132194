//! Host-memory storage shared by the CPU-resident backends.

use crate::DType;
use crate::memory::Buffer;
use half::{bf16, f16};

/// Plain typed data on the host, used to move values in and out of a backend.
///
/// ```
/// use autograd_core::{HostData, DType};
/// let d = HostData::from(vec![1.0f32, 2.0]);
/// assert_eq!(d.dtype(), DType::F32);
/// assert_eq!(d.to_f64_vec(), vec![1.0, 2.0]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    /// f16 values.
    F16(Vec<f16>),
    /// bf16 values.
    BF16(Vec<bf16>),
    /// f32 values.
    F32(Vec<f32>),
    /// f64 values.
    F64(Vec<f64>),
    /// i64 values.
    I64(Vec<i64>),
    /// Booleans (comparison results, masks).
    Bool(Vec<bool>),
}

macro_rules! host_from {
    ($t:ty, $v:ident) => {
        impl From<Vec<$t>> for HostData {
            fn from(v: Vec<$t>) -> Self {
                HostData::$v(v)
            }
        }
    };
}
host_from!(f16, F16);
host_from!(bf16, BF16);
host_from!(f32, F32);
host_from!(f64, F64);
host_from!(i64, I64);
host_from!(bool, Bool);

impl HostData {
    /// The dtype of the values.
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F16(_) => DType::F16,
            HostData::BF16(_) => DType::BF16,
            HostData::F32(_) => DType::F32,
            HostData::F64(_) => DType::F64,
            HostData::I64(_) => DType::I64,
            HostData::Bool(_) => DType::Bool,
        }
    }
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            HostData::F16(v) => v.len(),
            HostData::BF16(v) => v.len(),
            HostData::F32(v) => v.len(),
            HostData::F64(v) => v.len(),
            HostData::I64(v) => v.len(),
            HostData::Bool(v) => v.len(),
        }
    }
    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// All values converted to f64 (exact for every dtype but large i64).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            HostData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            HostData::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            HostData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::F64(v) => v.clone(),
            HostData::I64(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
        }
    }
    /// Values converted to `dtype` (rounding to nearest for narrower floats).
    pub fn convert(&self, dtype: DType) -> HostData {
        if self.dtype() == dtype {
            return self.clone();
        }
        if let HostData::I64(v) = self {
            // An int64 above 2^53 is not exact in f64: through f64 it would
            // round twice. PyTorch converts as `static_cast<float>(x)` for
            // f32 (and f16/bf16 through that float), `double` for f64.
            return match dtype {
                DType::F32 => HostData::F32(v.iter().map(|&x| x as f32).collect()),
                DType::F16 => HostData::F16(v.iter().map(|&x| f16::from_f32(x as f32)).collect()),
                DType::BF16 => HostData::BF16(v.iter().map(|&x| bf16::from_f32(x as f32)).collect()),
                DType::F64 => HostData::F64(v.iter().map(|&x| x as f64).collect()),
                DType::Bool => HostData::Bool(v.iter().map(|&x| x != 0).collect()),
                DType::I64 => self.clone(),
            };
        }
        // f32 -> f16/bf16 and back must round once, so go through f64 only
        // where f64 holds every source value exactly (it does for floats
        // and bools; integers were converted above).
        let v = self.to_f64_vec();
        HostData::from_f64(&v, dtype)
    }
    /// Values from f64, converted to `dtype`.
    pub fn from_f64(v: &[f64], dtype: DType) -> HostData {
        match dtype {
            DType::F16 => HostData::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
            DType::BF16 => HostData::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
            DType::F32 => HostData::F32(v.iter().map(|&x| x as f32).collect()),
            DType::F64 => HostData::F64(v.to_vec()),
            DType::I64 => HostData::I64(v.iter().map(|&x| x as i64).collect()),
            // Nonzero (NaN included) is true, as PyTorch's cast to bool.
            DType::Bool => HostData::Bool(v.iter().map(|&x| x != 0.0).collect()),
        }
    }
    /// Raw little-endian bytes, as in a safetensors file.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            HostData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::Bool(v) => v.iter().map(|&x| x as u8).collect(),
        }
    }
    /// Parses little-endian bytes of `dtype`; `None` if the length is not a multiple of the element size.
    pub fn from_le_bytes(bytes: &[u8], dtype: DType) -> Option<HostData> {
        let n = dtype.size_in_bytes();
        if !bytes.len().is_multiple_of(n) {
            return None;
        }
        let ch = bytes.chunks_exact(n);
        Some(match dtype {
            DType::F16 => HostData::F16(ch.map(|c| f16::from_le_bytes([c[0], c[1]])).collect()),
            DType::BF16 => HostData::BF16(ch.map(|c| bf16::from_le_bytes([c[0], c[1]])).collect()),
            DType::F32 => HostData::F32(ch.map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()),
            DType::F64 => HostData::F64(ch.map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()),
            DType::I64 => HostData::I64(ch.map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()),
            // Any nonzero byte reads as true (a file can hold other values than 0 and 1).
            DType::Bool => HostData::Bool(ch.map(|c| c[0] != 0).collect()),
        })
    }
}

/// Tensor storage in host memory, counted by [`crate::memory`].
///
/// Both backends in this workspace keep their data in this type; views are
/// expressed with a [`crate::Layout`] over it.
#[derive(Clone, Debug)]
pub enum HostStorage {
    /// f16 storage.
    F16(Buffer<f16>),
    /// bf16 storage.
    BF16(Buffer<bf16>),
    /// f32 storage.
    F32(Buffer<f32>),
    /// f64 storage.
    F64(Buffer<f64>),
    /// i64 storage.
    I64(Buffer<i64>),
    /// bool storage.
    Bool(Buffer<bool>),
}

impl HostStorage {
    /// The dtype.
    pub fn dtype(&self) -> DType {
        match self {
            HostStorage::F16(_) => DType::F16,
            HostStorage::BF16(_) => DType::BF16,
            HostStorage::F32(_) => DType::F32,
            HostStorage::F64(_) => DType::F64,
            HostStorage::I64(_) => DType::I64,
            HostStorage::Bool(_) => DType::Bool,
        }
    }
    /// Number of elements in the buffer.
    pub fn len(&self) -> usize {
        match self {
            HostStorage::F16(v) => v.len(),
            HostStorage::BF16(v) => v.len(),
            HostStorage::F32(v) => v.len(),
            HostStorage::F64(v) => v.len(),
            HostStorage::I64(v) => v.len(),
            HostStorage::Bool(v) => v.len(),
        }
    }
    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<HostData> for HostStorage {
    fn from(d: HostData) -> Self {
        match d {
            HostData::F16(v) => HostStorage::F16(Buffer::from_vec(v)),
            HostData::BF16(v) => HostStorage::BF16(Buffer::from_vec(v)),
            HostData::F32(v) => HostStorage::F32(Buffer::from_vec(v)),
            HostData::F64(v) => HostStorage::F64(Buffer::from_vec(v)),
            HostData::I64(v) => HostStorage::I64(Buffer::from_vec(v)),
            HostData::Bool(v) => HostStorage::Bool(Buffer::from_vec(v)),
        }
    }
}
