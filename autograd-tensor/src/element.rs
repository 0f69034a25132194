//! Rust element types that map onto a [`DType`].

use autograd_core::{DType, HostData};
use half::{bf16, f16};

/// A Rust scalar type that tensors can be built from and read into.
///
/// ```
/// use autograd_tensor::Element;
/// use autograd_core::DType;
/// assert_eq!(<f32 as Element>::DTYPE, DType::F32);
/// ```
pub trait Element: Copy + Send + Sync + 'static {
    /// The matching runtime dtype.
    const DTYPE: DType;
    /// Wraps values as host data.
    fn into_host(v: Vec<Self>) -> HostData;
    /// Reads host data of any dtype, converting values.
    fn from_host(h: HostData) -> Vec<Self>;
}

macro_rules! element {
    ($t:ty, $v:ident, $conv:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$v;
            fn into_host(v: Vec<Self>) -> HostData {
                HostData::$v(v)
            }
            fn from_host(h: HostData) -> Vec<Self> {
                // `convert` rounds once (an int64 above 2^53 is not an f64 on the way)
                match h.convert(DType::$v) {
                    HostData::$v(v) => v,
                    other => other.to_f64_vec().into_iter().map($conv).collect(),
                }
            }
        }
    };
}
element!(f32, F32, |x| x as f32);
element!(f64, F64, |x| x);
element!(i64, I64, |x| x as i64);
element!(bool, Bool, |x| x != 0.0);
element!(f16, F16, f16::from_f64);
element!(bf16, BF16, bf16::from_f64);
