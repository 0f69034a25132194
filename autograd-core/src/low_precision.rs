//! f16 and bf16 as compute dtypes: every host kernel computes them through
//! f32, PyTorch's "opmath" type for both on CPU. Inputs are widened (exact:
//! every f16 and bf16 value is an f32), the f32 kernel runs (reductions and
//! matrix products accumulate in f32) and the result is rounded once to the
//! input's dtype, to nearest with ties to even, as PyTorch's CPU kernels do.
//!
//! One home for the rule: both host backends call [`through_f32`] at the top
//! of each primitive, after validation, so a low-precision op is its f32 op
//! on the rounded inputs by construction (the conformance suite checks it).
//!
//! ```
//! use autograd_core::{Backend, HostData, Layout, RefBackend, Shape, UnaryOp};
//! use half::bf16;
//! let x = RefBackend::from_host(HostData::BF16(vec![bf16::from_f32(2.0)]));
//! let l = Layout::contiguous(Shape::from([1]));
//! let y = RefBackend::unary(UnaryOp::Sqrt, &x, &l).unwrap();
//! // sqrt(2) in f32, rounded once to bf16
//! assert_eq!(RefBackend::to_host(&y, &l).unwrap().to_f64_vec(), vec![bf16::from_f32(2f32.sqrt()).to_f64()]);
//! assert!(y.dtype().is_low_precision());
//! ```

use crate::memory::Buffer;
use crate::{DType, HostStorage, Result};
use half::{bf16, f16};

/// `f` over `src` as one loop over two slices, the form LLVM vectorises
/// with contiguous loads and stores (a `collect`, or fixed chunks, came out
/// scalar or as gathers). Inlined into the per-instruction-set copies of
/// `dispatch!`.
#[inline(always)]
fn map_slice<S: Copy, D: Copy + Send + 'static>(src: &[S], zero: D, f: impl Fn(S) -> D) -> Vec<D> {
    // every element is written below: a pooled vector as it is (a fresh
    // one for each widening paid page faults on every step)
    let mut out = crate::memory::scratch(src.len(), zero);
    for (o, &i) in out.iter_mut().zip(src) {
        *o = f(i);
    }
    out
}

/// Defines `fn $name(v: &[$s]) -> Vec<$d>` as `map_slice(v, $zero, $f)`
/// compiled three times (AVX-512BW, AVX2, baseline) and run in the widest
/// copy the CPU has: integer conversions whose baseline (SSE2) code lacks
/// the narrowing and widening moves and runs several times slower. Every
/// copy computes the same bits (integer arithmetic only).
macro_rules! dispatch {
    ($(#[$meta:meta])* fn $name:ident($s:ty) -> $d:ty { $zero:expr, $f:expr }) => {
        $(#[$meta])*
        fn $name(v: &[$s]) -> Vec<$d> {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx2")]
                fn avx512(v: &[$s]) -> Vec<$d> {
                    map_slice(v, $zero, $f)
                }
                #[target_feature(enable = "avx2")]
                fn avx2(v: &[$s]) -> Vec<$d> {
                    map_slice(v, $zero, $f)
                }
                if std::arch::is_x86_feature_detected!("avx512bw") {
                    // SAFETY: the features were detected on this CPU.
                    return unsafe { avx512(v) };
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: as above.
                    return unsafe { avx2(v) };
                }
            }
            map_slice(v, $zero, $f)
        }
    };
}

dispatch! {
    /// bf16 to f32 is a shift of the bits.
    fn bf16_to_f32(bf16) -> f32 { 0f32, |x: bf16| f32::from_bits((x.to_bits() as u32) << 16) }
}

dispatch! {
    /// f32 to bf16, to nearest with ties to even; NaN stays a (quiet) NaN.
    /// The same bits as `half::bf16::from_f32`, in integer arithmetic
    /// without branches.
    fn f32_to_bf16(f32) -> bf16 {
        bf16::ZERO,
        |x: f32| {
            let b = x.to_bits();
            let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
            let quiet = (b >> 16) | 0x0040;
            let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
            bf16::from_bits(if nan { quiet } else { rounded } as u16)
        }
    }
}

/// The f32 values of a float buffer of any dtype (f64 rounded).
///
/// ```
/// use autograd_core::{HostData, HostStorage, low_precision::to_f32};
/// let s: HostStorage = HostData::from(vec![1.5f64]).into();
/// assert_eq!(to_f32(&s).unwrap(), vec![1.5f32]);
/// ```
pub fn to_f32(s: &HostStorage) -> Option<Vec<f32>> {
    use half::slice::HalfFloatSliceExt;
    Some(match s {
        HostStorage::BF16(v) => bf16_to_f32(v),
        HostStorage::F16(v) => {
            // overwritten whole: a pooled vector as it is (see map_slice)
            let mut out = crate::memory::scratch(v.len(), 0.0f32);
            v.convert_to_f32_slice(&mut out);
            out
        }
        HostStorage::F32(v) => v.to_vec(),
        HostStorage::F64(v) => v.iter().map(|&x| x as f32).collect(),
        _ => return None,
    })
}

/// f32 values rounded to `dtype` (f16 or bf16; other dtypes keep f32).
///
/// ```
/// use autograd_core::{DType, low_precision::from_f32};
/// let s = from_f32(&[1.0 + 1.0 / 256.0], DType::BF16);
/// assert_eq!(s.dtype(), DType::BF16);
/// ```
pub fn from_f32(v: &[f32], dtype: DType) -> HostStorage {
    use half::slice::HalfFloatSliceExt;
    match dtype {
        DType::BF16 => HostStorage::BF16(Buffer::from_vec(f32_to_bf16(v))),
        DType::F16 => {
            let mut out = crate::memory::scratch(v.len(), f16::ZERO);
            out.convert_from_f32_slice(v);
            HostStorage::F16(Buffer::from_vec(out))
        }
        _ => HostStorage::F32(Buffer::from_vec(v.to_vec())),
    }
}

/// A low-precision buffer widened to f32 (the whole buffer, so a layout
/// over it applies unchanged); `None` for other dtypes.
pub fn widen(s: &HostStorage) -> Option<HostStorage> {
    s.dtype().is_low_precision().then(|| HostStorage::F32(Buffer::from_vec(to_f32(s).expect("a float buffer"))))
}

/// Results of an f32 kernel rounded back to the inputs' dtype: f32 buffers
/// are rounded, others (indices) kept.
pub trait Narrow {
    /// Rounds every f32 buffer to `dtype`.
    fn narrow(self, dtype: DType) -> Self;
}

impl Narrow for HostStorage {
    fn narrow(self, dtype: DType) -> Self {
        match self {
            HostStorage::F32(v) => from_f32(&v, dtype),
            other => other,
        }
    }
}

impl Narrow for (HostStorage, HostStorage) {
    fn narrow(self, dtype: DType) -> Self {
        (self.0.narrow(dtype), self.1.narrow(dtype))
    }
}

impl Narrow for Vec<HostStorage> {
    fn narrow(self, dtype: DType) -> Self {
        self.into_iter().map(|s| s.narrow(dtype)).collect()
    }
}

/// Runs `f32_op` on the widened `inputs` and rounds its results back when
/// the first input is f16 or bf16 and every input has that dtype; `None`
/// otherwise (the caller goes on with its own dispatch, whose dtype errors
/// then name the mismatch).
///
/// ```
/// use autograd_core::{BinaryOp, Backend, DType, HostData, HostStorage, Layout, RefBackend, Shape, low_precision};
/// use half::bf16;
/// let a: HostStorage = HostData::BF16(vec![bf16::from_f32(1.0)]).into();
/// let l = Layout::contiguous(Shape::from([1]));
/// let r = low_precision::through_f32(&[&a, &a], |w| RefBackend::binary(BinaryOp::Add, w[0], &l, w[1], &l)).unwrap().unwrap();
/// assert_eq!(r.dtype(), DType::BF16);
/// ```
pub fn through_f32<R: Narrow>(inputs: &[&HostStorage], f32_op: impl FnOnce(&[&HostStorage]) -> Result<R>) -> Option<Result<R>> {
    let dtype = inputs.first()?.dtype();
    if !dtype.is_low_precision() || inputs.iter().any(|s| s.dtype() != dtype) {
        return None;
    }
    let wide: Vec<HostStorage> = inputs.iter().map(|s| widen(s).expect("checked low")).collect();
    let refs: Vec<&HostStorage> = wide.iter().collect();
    Some(f32_op(&refs).map(|r| r.narrow(dtype)))
}
