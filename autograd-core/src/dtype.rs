//! Runtime element types, as in PyTorch and in safetensors files.

use std::fmt;

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
    /// IEEE half precision (computed through f32).
    F16,
    /// bfloat16 (computed through f32).
    BF16,
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// 64-bit signed integer (indices, class targets).
    I64,
    /// Boolean: comparison results and masks (one byte each, as PyTorch's `torch.bool`).
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// Whether arithmetic is implemented for this dtype (every float dtype).
    pub fn is_compute(self) -> bool {
        self.is_float()
    }

    /// Whether this is f16 or bf16, the dtypes computed through f32.
    pub fn is_low_precision(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// Whether this is a floating-point dtype.
    pub fn is_float(self) -> bool {
        !matches!(self, DType::I64 | DType::Bool)
    }

    /// The dtype name used in safetensors headers.
    pub fn safetensors_name(self) -> &'static str {
        match self {
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::F32 => "F32",
            DType::F64 => "F64",
            DType::I64 => "I64",
            DType::Bool => "BOOL",
        }
    }

    /// Parses a safetensors dtype name.
    pub fn from_safetensors_name(name: &str) -> Option<DType> {
        Some(match name {
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "F32" => DType::F32,
            "F64" => DType::F64,
            "I64" => DType::I64,
            "BOOL" => DType::Bool,
            _ => return None,
        })
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

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            DType::F16 => "torch.float16",
            DType::BF16 => "torch.bfloat16",
            DType::F32 => "torch.float32",
            DType::F64 => "torch.float64",
            DType::I64 => "torch.int64",
            DType::Bool => "torch.bool",
        };
        f.write_str(s)
    }
}
