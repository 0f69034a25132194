//! Runtime element types, as in PyTorch and in safetensors files: the one
//! table of dtypes ([`for_each_dtype!`](crate::for_each_dtype)) and everything generated from it,
//! the [`DType`] tag, the [`Element`] trait of each Rust element type's
//! facts, and the [`HostData`]/[`HostStorage`] containers with one variant
//! per dtype. A new dtype costs one row of the table plus the kernels that
//! really differ for it; every `match` over dtypes elsewhere goes through
//! the dispatch macros of [`crate::dispatch`], which the same table writes.

use crate::memory::Buffer;
use std::fmt;

/// The table of dtypes: invokes `$callback! { $($prefix)* rows }` with one
/// row per dtype, in [`DType`]'s order. A row is
///
/// ```text
/// /// doc
/// Variant(RustType) {
///     name: "safetensors name", torch: "PyTorch's name",
///     float: is floating point, low_precision: computed through f32,
///     zero: the zero value,
///     from_f64: |v| conversion from f64 as PyTorch casts (f16 and bf16
///         through f32: one rounding for every f32 value),
///     to_f64: |x| conversion to f64,
///     from_i64: |v| conversion from i64 as PyTorch casts (not through f64),
///     to_le: |x| little-endian bytes,
///     from_le: |b| the value of a slice of exactly its size,
/// }
/// ```
///
/// `$prefix` is passed through first, so a callback can take a `$` token to
/// define macros of its own (as [`crate::dispatch`] does).
///
/// ```
/// macro_rules! names {
///     ($( $(#[$doc:meta])* $v:ident($t:ty) { $($facts:tt)* } )*) => { [$(stringify!($v)),*] };
/// }
/// assert_eq!(autograd_core::for_each_dtype!(names), ["F16", "BF16", "F32", "F64", "I64", "Bool"]);
/// ```
#[macro_export]
macro_rules! for_each_dtype {
    ($callback:ident $($prefix:tt)*) => {
        $callback! { $($prefix)*
            /// IEEE half precision (computed through f32).
            F16($crate::half::f16) {
                name: "F16", torch: "torch.float16", float: true, low_precision: true, zero: $crate::half::f16::ZERO,
                // through f32 as PyTorch's c10::Half(float); also exact rounding
                // of every f32, which half's from_f64 misses (it reads only
                // the f64's high word, so f32 bits 0-2 never break a tie)
                from_f64: |v| $crate::half::f16::from_f32(v as f32), to_f64: |x| x.to_f64(),
                from_i64: |v| $crate::half::f16::from_f32(v as f32),
                to_le: |x| x.to_le_bytes(), from_le: |b| $crate::half::f16::from_le_bytes([b[0], b[1]]),
            }
            /// bfloat16 (computed through f32).
            BF16($crate::half::bf16) {
                name: "BF16", torch: "torch.bfloat16", float: true, low_precision: true, zero: $crate::half::bf16::ZERO,
                // through f32 as PyTorch's c10::BFloat16(float) (see F16)
                from_f64: |v| $crate::half::bf16::from_f32(v as f32), to_f64: |x| x.to_f64(),
                from_i64: |v| $crate::half::bf16::from_f32(v as f32),
                to_le: |x| x.to_le_bytes(), from_le: |b| $crate::half::bf16::from_le_bytes([b[0], b[1]]),
            }
            /// 32-bit float.
            F32(f32) {
                name: "F32", torch: "torch.float32", float: true, low_precision: false, zero: 0.0,
                from_f64: |v| v as f32, to_f64: |x| x as f64,
                // one rounding (an int64 above 2^53 is not an f64 on the way), as PyTorch's static_cast
                from_i64: |v| v as f32,
                to_le: |x| x.to_le_bytes(), from_le: |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            }
            /// 64-bit float.
            F64(f64) {
                name: "F64", torch: "torch.float64", float: true, low_precision: false, zero: 0.0,
                from_f64: |v| v, to_f64: |x| x,
                from_i64: |v| v as f64,
                to_le: |x| x.to_le_bytes(), from_le: |b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            }
            /// 64-bit signed integer (indices, class targets).
            I64(i64) {
                name: "I64", torch: "torch.int64", float: false, low_precision: false, zero: 0,
                // truncation toward zero, saturating (NaN gives 0), as Rust's `as`
                from_f64: |v| v as i64, to_f64: |x| x as f64,
                from_i64: |v| v,
                to_le: |x| x.to_le_bytes(), from_le: |b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            }
            /// Boolean: comparison results and masks (one byte each, as PyTorch's `torch.bool`).
            Bool(bool) {
                name: "BOOL", torch: "torch.bool", float: false, low_precision: false, zero: false,
                // nonzero (NaN included) is true, as PyTorch's cast to bool
                from_f64: |v| v != 0.0, to_f64: |x| x as u8 as f64,
                from_i64: |v| v != 0,
                // any nonzero byte reads as true (a file can hold other values than 0 and 1)
                to_le: |x| [x as u8], from_le: |b| b[0] != 0,
            }
        }
    };
}

/// A Rust element type of a dtype: the per-dtype facts every container and
/// kernel reads, implemented (and sealed) for exactly the table's types.
///
/// ```
/// use autograd_core::{DType, Element, HostData};
/// assert_eq!(<f32 as Element>::DTYPE, DType::F32);
/// assert_eq!(<i64 as Element>::from_i64((1 << 60) + 1), (1 << 60) + 1);
/// let d = <half::bf16 as Element>::into_host(vec![half::bf16::ONE]);
/// assert_eq!(d.dtype(), DType::BF16);
/// assert_eq!(<f64 as Element>::from_host(d), vec![1.0]);
/// ```
pub trait Element: sealed::Sealed + Copy + Default + Send + Sync + PartialEq + fmt::Debug + 'static {
    /// The matching runtime dtype.
    const DTYPE: DType;
    /// Zero (false for bool).
    const ZERO: Self;
    /// From f64 as PyTorch casts: rounding to nearest, f16 and bf16 through
    /// f32 (so every f32 value rounds once); truncating for integers;
    /// nonzero is true.
    ///
    /// Call it as `<T as Element>::from_f64` where `T` is a concrete type
    /// (inside `with_dtype!`, `with_any!`): there `T::from_f64` names
    /// `half`'s inherent method first, which rounds some f32 values wrongly.
    fn from_f64(v: f64) -> Self;
    /// To f64 (exact for every dtype but i64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// From i64 as PyTorch casts: once, not through f64.
    fn from_i64(v: i64) -> Self;
    /// Appends the little-endian bytes, as in a safetensors file.
    fn write_le(self, out: &mut Vec<u8>);
    /// The value of exactly `size_in_bytes` little-endian bytes.
    fn read_le(bytes: &[u8]) -> Self;
    /// Wraps values as host data.
    fn into_host(v: Vec<Self>) -> HostData;
    /// Wraps values as host storage.
    fn into_storage(v: Vec<Self>) -> HostStorage;
    /// The values of host data of this dtype; `None` for another dtype.
    fn values(d: &HostData) -> Option<&[Self]>;
    /// The buffer of host storage of this dtype; `None` for another dtype.
    fn buffer(s: &HostStorage) -> Option<&Buffer<Self>>;
    /// Reads host data of any dtype, converting values ([`HostData::convert`]).
    fn from_host(h: HostData) -> Vec<Self>;
}

mod sealed {
    /// Only the table's types hold a dtype.
    pub trait Sealed {}
}

macro_rules! define_dtypes {
    ($(
        $(#[$doc:meta])*
        $V:ident($T:ty) {
            name: $name:literal, torch: $torch:literal, float: $float:literal, low_precision: $low:literal, zero: $zero:expr,
            from_f64: |$fv:ident| $from_f64:expr, to_f64: |$tx:ident| $to_f64:expr,
            from_i64: |$iv:ident| $from_i64:expr,
            to_le: |$lx:ident| $to_le:expr, from_le: |$lb:ident| $from_le:expr $(,)?
        }
    )*) => {
        /// The element type of a tensor.
        ///
        /// Every float dtype computes; `F16` and `BF16` compute through f32 (each
        /// op rounds its f32 result once, reductions and products accumulate in
        /// f32: [`crate::low_precision`]); `I64` holds indices and integer targets.
        ///
        /// ```
        /// use autograd_core::DType;
        /// assert_eq!(DType::F32.size_in_bytes(), 4);
        /// assert_eq!(DType::promote(DType::F32, DType::F64), DType::F64);
        /// assert_eq!(DType::from_safetensors_name("BF16"), Some(DType::BF16));
        /// ```
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum DType {
            $( $(#[$doc])* $V, )*
        }

        impl DType {
            /// Every dtype, in the table's order.
            pub const ALL: &'static [DType] = &[$(DType::$V),*];

            /// Bytes per element.
            pub fn size_in_bytes(self) -> usize {
                match self { $(DType::$V => std::mem::size_of::<$T>(),)* }
            }
            /// Whether this is a floating-point dtype.
            pub fn is_float(self) -> bool {
                match self { $(DType::$V => $float,)* }
            }
            /// Whether this is f16 or bf16, the dtypes computed through f32.
            pub fn is_low_precision(self) -> bool {
                match self { $(DType::$V => $low,)* }
            }
            /// The dtype name used in safetensors headers.
            pub fn safetensors_name(self) -> &'static str {
                match self { $(DType::$V => $name,)* }
            }
            /// Parses a safetensors dtype name.
            pub fn from_safetensors_name(name: &str) -> Option<DType> {
                match name { $($name => Some(DType::$V),)* _ => None }
            }
        }

        impl fmt::Display for DType {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $(DType::$V => $torch,)* })
            }
        }

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
            $( $(#[$doc])* $V(Vec<$T>), )*
        }

        /// Tensor storage in host memory, counted by [`crate::memory`].
        ///
        /// Both backends in this workspace keep their data in this type; views are
        /// expressed with a [`crate::Layout`] over it.
        #[derive(Clone, Debug)]
        pub enum HostStorage {
            $( $(#[$doc])* $V(Buffer<$T>), )*
        }

        impl HostData {
            /// The dtype of the values.
            pub fn dtype(&self) -> DType {
                match self { $(HostData::$V(_) => DType::$V,)* }
            }
            /// Number of values.
            pub fn len(&self) -> usize {
                match self { $(HostData::$V(v) => v.len(),)* }
            }
        }

        impl HostStorage {
            /// The dtype.
            pub fn dtype(&self) -> DType {
                match self { $(HostStorage::$V(_) => DType::$V,)* }
            }
            /// Number of elements in the buffer.
            pub fn len(&self) -> usize {
                match self { $(HostStorage::$V(v) => v.len(),)* }
            }
        }

        impl From<HostData> for HostStorage {
            fn from(d: HostData) -> Self {
                match d { $(HostData::$V(v) => HostStorage::$V(Buffer::from_vec(v)),)* }
            }
        }

        $(
            impl sealed::Sealed for $T {}

            impl Element for $T {
                const DTYPE: DType = DType::$V;
                const ZERO: Self = $zero;
                #[inline(always)]
                fn from_f64($fv: f64) -> Self {
                    $from_f64
                }
                #[inline(always)]
                fn to_f64(self) -> f64 {
                    let $tx = self;
                    $to_f64
                }
                #[inline(always)]
                fn from_i64($iv: i64) -> Self {
                    $from_i64
                }
                fn write_le(self, out: &mut Vec<u8>) {
                    let $lx = self;
                    out.extend_from_slice(&$to_le);
                }
                fn read_le($lb: &[u8]) -> Self {
                    $from_le
                }
                fn into_host(v: Vec<Self>) -> HostData {
                    HostData::$V(v)
                }
                fn into_storage(v: Vec<Self>) -> HostStorage {
                    HostStorage::$V(Buffer::from_vec(v))
                }
                fn values(d: &HostData) -> Option<&[Self]> {
                    match d { HostData::$V(v) => Some(v), _ => None }
                }
                fn buffer(s: &HostStorage) -> Option<&Buffer<Self>> {
                    match s { HostStorage::$V(v) => Some(v), _ => None }
                }
                fn from_host(h: HostData) -> Vec<Self> {
                    match h.convert(DType::$V) {
                        HostData::$V(v) => v,
                        // `convert` gives the dtype asked for: not reached
                        other => other.to_f64_vec().into_iter().map(Self::from_f64).collect(),
                    }
                }
            }
        )*
    };
}

for_each_dtype!(define_dtypes);

impl<T: Element> From<Vec<T>> for HostData {
    fn from(v: Vec<T>) -> Self {
        T::into_host(v)
    }
}

impl<T: Element> From<Vec<T>> for HostStorage {
    fn from(v: Vec<T>) -> Self {
        T::into_storage(v)
    }
}

impl DType {
    /// Whether arithmetic is implemented for this dtype (every float dtype).
    pub fn is_compute(self) -> bool {
        self.is_float()
    }

    /// PyTorch's type promotion for two floating operands: the wider wins;
    /// f16 with bf16 promotes to f32.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        match (a, b) {
            (x, y) if x == y => x,
            (F64, _) | (_, F64) => F64,
            (F32, _) | (_, F32) => F32,
            (F16, BF16) | (BF16, F16) => F32,
            // Bool below integers below floats, as PyTorch's categories.
            (Bool, x) | (x, Bool) => x,
            (I64, x) | (x, I64) => x,
            _ => F32,
        }
    }
}

impl DType {
    /// PyTorch's `result_type` for two tensor operands, where a 0-d tensor
    /// (`*_0d`) does not widen a dimensioned one of the same category (an
    /// f32 tensor times a 0-d f64 tensor is f32), but does lift a lower
    /// category (an i64 tensor plus a 0-d f64 tensor is f64).
    ///
    /// ```
    /// use autograd_core::DType;
    /// assert_eq!(DType::result_type(DType::F32, false, DType::F64, true), DType::F32);
    /// assert_eq!(DType::result_type(DType::I64, false, DType::F64, true), DType::F64);
    /// assert_eq!(DType::result_type(DType::F32, true, DType::F64, true), DType::F64);
    /// assert_eq!(DType::result_type(DType::F16, false, DType::F64, true), DType::F16);
    /// ```
    pub fn result_type(a: DType, a_0d: bool, b: DType, b_0d: bool) -> DType {
        if a_0d == b_0d || a == b {
            return DType::promote(a, b);
        }
        let (dim, zero) = if a_0d { (b, a) } else { (a, b) };
        if zero.is_float() && !dim.is_float() { DType::promote(dim, zero) } else { dim }
    }
}
