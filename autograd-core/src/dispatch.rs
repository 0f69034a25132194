//! Dtype dispatch: one macro per arity, written by the dtype table
//! ([`crate::for_each_dtype!`]) so that none restates the dtypes:
//! [`with_dtype!`](crate::with_dtype) (a dtype value), [`with_any!`](crate::with_any) (one container),
//! [`with_pair!`](crate::with_pair) (two containers of one dtype), and [`with_float!`](crate::with_float) for the
//! kernels that exist in f32 and f64 only.

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

macro_rules! define_dispatch {
    ($d:tt $( $(#[$doc:meta])* $V:ident($T:ty) { $($facts:tt)* } )*) => {
        /// Runs `$body` with `$T` bound to the Rust element type of a
        /// [`crate::DType`] value: the dispatch of no input (a constructor's).
        ///
        /// ```
        /// use autograd_core::{with_dtype, DType, Element};
        /// let zero = |d: DType| with_dtype!(d, |T| <T as Element>::ZERO.to_f64());
        /// assert_eq!(zero(DType::BF16), 0.0);
        /// assert_eq!(with_dtype!(DType::I64, |T| std::mem::size_of::<T>()), 8);
        /// ```
        #[macro_export]
        macro_rules! with_dtype {
            ($d dtype:expr, |$d t:ident| $d body:expr) => {
                match $d dtype {
                    $( $d crate::DType::$V => {
                        #[allow(dead_code)]
                        type $d t = $T;
                        $d body
                    } )*
                }
            };
        }

        /// Runs `$body` with `$v` bound to the values inside a
        /// [`crate::HostData`] or [`crate::HostStorage`] (by value, `&` or
        /// `&mut` as the scrutinee is) and `$T` to their element type,
        /// whatever the dtype: the dispatch of one input.
        ///
        /// ```
        /// use autograd_core::{with_any, HostData};
        /// let d = HostData::from(vec![1i64, 2, 3]);
        /// let first_two: HostData = with_any!(HostData: &d, |v: T| v[..2].to_vec().into());
        /// assert_eq!(first_two, HostData::from(vec![1i64, 2]));
        /// ```
        #[macro_export]
        macro_rules! with_any {
            ($d container:ident : $d x:expr, |$d v:ident : $d t:ident| $d body:expr) => {
                match $d x {
                    $( $d crate::$d container::$V($d v) => {
                        #[allow(dead_code)]
                        type $d t = $T;
                        $d body
                    } )*
                }
            };
        }

        /// Runs `$body` with `$x` and `$y` bound to the values inside two
        /// containers of one dtype and `$T` to their element type; `else`
        /// gives the value for two different dtypes: the dispatch of two
        /// inputs.
        ///
        /// ```
        /// use autograd_core::{with_pair, HostData};
        /// let (a, b) = (HostData::from(vec![1.0f32]), HostData::from(vec![2.0f32]));
        /// let eq = |a: &HostData, b: &HostData| with_pair!(HostData: a, HostData: b, |x, y: T| Some(x == y), else None);
        /// assert_eq!(eq(&a, &b), Some(false));
        /// assert_eq!(eq(&a, &HostData::from(vec![2.0f64])), None);
        /// ```
        #[macro_export]
        macro_rules! with_pair {
            ($d ca:ident : $d a:expr, $d cb:ident : $d b:expr, |$d x:ident, $d y:ident : $d t:ident| $d body:expr, else $d other:expr) => {
                match ($d a, $d b) {
                    $( ($d crate::$d ca::$V($d x), $d crate::$d cb::$V($d y)) => {
                        #[allow(dead_code)]
                        type $d t = $T;
                        $d body
                    } )*
                    #[allow(unreachable_patterns)]
                    _ => $d other,
                }
            };
        }
    };
}

crate::for_each_dtype!(define_dispatch $);

/// Reads I64 index storage through a layout, failing for other dtypes.
pub fn index_values(s: &crate::HostStorage, layout: &crate::Layout, op: &'static str) -> crate::Result<Vec<i64>> {
    use crate::Element;
    match i64::buffer(s) {
        Some(v) => Ok(layout.offsets().map(|o| v[o]).collect()),
        None => Err(crate::Error::UnsupportedDType { op, dtype: s.dtype(), hint: "indices must be I64" }),
    }
}
