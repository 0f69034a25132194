//! Dtype dispatch helpers for host backends.

/// Runs `$body` with `$v` bound to the typed slice of a float [`crate::HostStorage`]
/// (f32 or f64) and `$T` to its element type; other dtypes give an
/// `UnsupportedDType` error for `$op`.
#[macro_export]
macro_rules! with_float {
    ($s:expr, $op:expr, |$v:ident : $T:ident| $body:expr) => {
        match $s {
            $crate::HostStorage::F32($v) => {
                #[allow(dead_code)]
                type $T = f32;
                $body
            }
            $crate::HostStorage::F64($v) => {
                #[allow(dead_code)]
                type $T = f64;
                $body
            }
            other => {
                return Err($crate::Error::UnsupportedDType {
                    op: $op,
                    dtype: other.dtype(),
                    hint: "compute in F32 or F64: convert with to_dtype()",
                })
            }
        }
    };
}

/// Like [`with_float!`] but for every dtype (element type only needs `Copy`).
#[macro_export]
macro_rules! with_any {
    ($s:expr, |$v:ident| $body:expr) => {
        match $s {
            $crate::HostStorage::F16($v) => $crate::HostStorage::F16($crate::memory::Buffer::from_vec($body)),
            $crate::HostStorage::BF16($v) => $crate::HostStorage::BF16($crate::memory::Buffer::from_vec($body)),
            $crate::HostStorage::F32($v) => $crate::HostStorage::F32($crate::memory::Buffer::from_vec($body)),
            $crate::HostStorage::F64($v) => $crate::HostStorage::F64($crate::memory::Buffer::from_vec($body)),
            $crate::HostStorage::I64($v) => $crate::HostStorage::I64($crate::memory::Buffer::from_vec($body)),
            $crate::HostStorage::Bool($v) => $crate::HostStorage::Bool($crate::memory::Buffer::from_vec($body)),
        }
    };
}

/// Wraps a typed vector back into a [`crate::HostStorage`] of the same element type.
pub trait IntoStorage {
    /// Wraps into storage.
    fn into_storage(self) -> crate::HostStorage;
}

macro_rules! into_storage {
    ($t:ty, $v:ident) => {
        impl IntoStorage for Vec<$t> {
            fn into_storage(self) -> crate::HostStorage {
                crate::HostStorage::$v(crate::memory::Buffer::from_vec(self))
            }
        }
    };
}
into_storage!(f32, F32);
into_storage!(f64, F64);
into_storage!(i64, I64);
into_storage!(bool, Bool);
into_storage!(half::f16, F16);
into_storage!(half::bf16, BF16);

/// Reads I64 index storage through a layout, failing for other dtypes.
pub fn index_values(s: &crate::HostStorage, layout: &crate::Layout, op: &'static str) -> crate::Result<Vec<i64>> {
    match s {
        crate::HostStorage::I64(v) => Ok(layout.offsets().map(|o| v[o]).collect()),
        other => Err(crate::Error::UnsupportedDType { op, dtype: other.dtype(), hint: "indices must be I64" }),
    }
}
