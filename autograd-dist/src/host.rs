//! Host buffers as collectives see them: slicing, padding, concatenating
//! and reducing [`HostData`] of any dtype. The thread group reduces with
//! these; MPI reduces f32/f64/i64 itself and low precision through them.

use crate::CollectiveOp;
use autograd_core::{DistError, Element, HostData, Result, with_any, with_pair};
use half::{bf16, f16};

/// `n` elements of `data` from `start` (a copy; clamped to the end).
pub(crate) fn slice(data: &HostData, start: usize, n: usize) -> HostData {
    with_any!(HostData: data, |v: T| {
        let s = start.min(v.len());
        v[s..(s + n).min(v.len())].to_vec().into()
    })
}

/// `n` zeros of `dtype`.
pub(crate) fn zeros(dtype: autograd_core::DType, n: usize) -> HostData {
    let mut d = HostData::from_f64(&[], dtype);
    pad(&mut d, n);
    d
}

/// Extends `data` with default values to `len` elements.
pub(crate) fn pad(data: &mut HostData, len: usize) {
    with_any!(HostData: data, |v: T| v.resize(len.max(v.len()), T::ZERO))
}

/// The parts, in order, as one buffer; `Err` when their dtypes differ.
pub(crate) fn concat(parts: &[&HostData]) -> Result<HostData> {
    let Some(first) = parts.first() else { return Ok(HostData::F32(Vec::new())) };
    let mut out = slice(first, 0, 0);
    for p in parts {
        let joined = with_pair!(HostData: &mut out, HostData: p, |o, v: T| {
            o.extend_from_slice(v);
            true
        }, else false);
        if !joined {
            return Err(DistError::Mismatch {
                op: "collective",
                detail: format!("{:?} and {:?} buffers cannot be joined", out.dtype(), p.dtype()),
            }
            .into());
        }
    }
    Ok(out)
}

/// NaN (the one value not comparable with itself): max and min propagate it, as PyTorch's.
fn is_nan<T: PartialOrd>(x: T) -> bool {
    x.partial_cmp(&x).is_none()
}

/// `parts` combined element by element with `f`, in rank order: zipped
/// slice loops (vectorised), the first pass writing the output.
fn fold<T: Copy>(parts: &[&[T]], f: impl Fn(T, T) -> T) -> Vec<T> {
    let mut out: Vec<T> = match parts {
        [a, b, ..] => a.iter().zip(b.iter()).map(|(&x, &y)| f(x, y)).collect(),
        [a] => a.to_vec(),
        [] => Vec::new(),
    };
    for p in parts.iter().skip(2) {
        out.iter_mut().zip(p.iter()).for_each(|(x, &y)| *x = f(*x, y));
    }
    out
}

/// The reduction of `parts` by `op` (`d`: the divisor of an average).
fn combine<T: Copy + PartialOrd + std::ops::Add<Output = T> + std::ops::DivAssign>(parts: &[&[T]], op: CollectiveOp, d: T) -> Vec<T> {
    match op {
        CollectiveOp::Sum => fold(parts, |a, b| a + b),
        CollectiveOp::Avg => {
            let mut out = fold(parts, |a, b| a + b);
            out.iter_mut().for_each(|x| *x /= d);
            out
        }
        CollectiveOp::Max => fold(parts, |a, b| if b > a || is_nan(b) { b } else { a }),
        CollectiveOp::Min => fold(parts, |a, b| if b < a || is_nan(b) { b } else { a }),
    }
}

/// Reduces `parts` (one per rank, in rank order: the same order, so the
/// same bits, on every rank) with `op`; [`CollectiveOp::Avg`] divides by the
/// number of parts. f16/bf16 are reduced in f32 and
/// rounded once. `Err` for differing dtypes or lengths, and for booleans.
pub(crate) fn reduce(parts: &[&HostData], op: CollectiveOp, what: &str) -> Result<HostData> {
    let first = parts.first().ok_or_else(|| DistError::Transport { what: what.to_string(), detail: "no ranks".into() })?;
    for (r, p) in parts.iter().enumerate() {
        if p.dtype() != first.dtype() || p.len() != first.len() {
            return Err(DistError::Mismatch {
                op: "reduce",
                detail: format!(
                    "{what}: rank {r} sent {} {:?} values, rank 0 sent {} {:?} values",
                    p.len(),
                    p.dtype(),
                    first.len(),
                    first.dtype()
                ),
            }
            .into());
        }
    }
    let n = parts.len();
    // the dtypes were checked equal: every part's values are of `first`'s type
    fn native<T: Element + PartialOrd + std::ops::Add<Output = T> + std::ops::DivAssign>(
        parts: &[&HostData],
        op: CollectiveOp,
        n: T,
    ) -> HostData {
        let slices: Vec<&[T]> = parts.iter().filter_map(|p| T::values(p)).collect();
        combine(&slices, op, n).into()
    }
    Ok(match first {
        HostData::F32(_) => native(parts, op, n as f32),
        HostData::F64(_) => native(parts, op, n as f64),
        HostData::I64(_) => native(parts, op, n as i64),
        HostData::F16(_) | HostData::BF16(_) => {
            let wide: Vec<HostData> = parts.iter().map(|p| HostData::F32(widen(p))).collect();
            let refs: Vec<&HostData> = wide.iter().collect();
            let HostData::F32(sum) = reduce(&refs, op, what)? else { unreachable!() };
            narrow(&sum, first.dtype())
        }
        HostData::Bool(_) => {
            return Err(DistError::InvalidArgument { op: "reduce", detail: format!("{what}: boolean buffers cannot be reduced") }.into());
        }
    })
}

/// f16/bf16 values as f32 (other dtypes: empty).
pub(crate) fn widen(data: &HostData) -> Vec<f32> {
    match data {
        HostData::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
        HostData::BF16(v) => v.iter().map(|x| x.to_f32()).collect(),
        _ => Vec::new(),
    }
}

/// f32 values rounded to `dtype` (f16 or bf16).
pub(crate) fn narrow(v: &[f32], dtype: autograd_core::DType) -> HostData {
    match dtype {
        autograd_core::DType::F16 => HostData::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
        _ => HostData::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
    }
}
