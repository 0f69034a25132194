//! Padding (PyTorch's `F.pad`): constant, reflect, replicate and circular.
//! The non-constant modes are one `index_select` per padded dim (the index
//! lists say which input element each output element copies), so their
//! gradient sums back into the elements copied, as PyTorch's.

use crate::Tensor;
use autograd_core::{Backend, Error, Result};
use std::panic::Location;

/// How [`try_pad`] fills the border.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode {
    /// A constant value (PyTorch's `mode="constant"`, `value=`).
    Constant(f64),
    /// The input mirrored without repeating the edge (`"reflect"`): each pad below the dim's size.
    Reflect,
    /// The edge repeated (`"replicate"`).
    Replicate,
    /// The input wrapped around (`"circular"`): each pad at most the dim's size.
    Circular,
}

/// The source index of output position `j` of a dim of `size` padded by `lo` before.
fn source(mode: PadMode, j: usize, lo: usize, size: usize) -> usize {
    let i = j as i64 - lo as i64;
    let n = size as i64;
    let s = match mode {
        PadMode::Reflect => {
            let period = 2 * (n - 1);
            let m = if period == 0 { 0 } else { i.rem_euclid(period) };
            if m < n { m } else { period - m }
        }
        PadMode::Replicate => i.clamp(0, n - 1),
        PadMode::Circular | PadMode::Constant(_) => i.rem_euclid(n),
    };
    s as usize
}

/// PyTorch's `F.pad`: `pad` lists (before, after) pairs from the last dim
/// backwards, as PyTorch (`[left, right, top, bottom]` pads W then H).
/// `Err` for an odd list, more pairs than dims, and reflect or circular
/// pads larger than the input allows.
///
/// ```
/// use autograd_tensor::{Tensor, functional as F};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0, 3.0], [1, 1, 3]);
/// assert_eq!(F::pad(&x, &[2, 1], F::PadMode::Reflect).to_vec::<f64>(), vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0]);
/// assert_eq!(F::pad(&x, &[1, 1], F::PadMode::Replicate).to_vec::<f64>(), vec![1.0, 1.0, 2.0, 3.0, 3.0]);
/// assert_eq!(F::pad(&x, &[1, 2], F::PadMode::Circular).to_vec::<f64>(), vec![3.0, 1.0, 2.0, 3.0, 1.0, 2.0]);
/// assert_eq!(F::pad(&x, &[1, 0], F::PadMode::Constant(9.0)).to_vec::<f64>(), vec![9.0, 1.0, 2.0, 3.0]);
/// assert!(F::try_pad(&x, &[3, 0], F::PadMode::Reflect).is_err());
/// ```
#[track_caller]
pub fn try_pad<B: Backend>(x: &Tensor<B>, pad: &[usize], mode: PadMode) -> Result<Tensor<B>> {
    let loc = Location::caller();
    let bad = |msg: String| Error::InvalidShape { op: "pad", msg, location: Some(loc) };
    if !pad.len().is_multiple_of(2) || pad.len() / 2 > x.rank() {
        return Err(bad(format!("padding {pad:?} must be (before, after) pairs for at most {} dims", x.rank())));
    }
    let mut y = x.clone();
    for (k, pair) in pad.chunks(2).enumerate() {
        let (lo, hi) = (pair[0], pair[1]);
        if lo == 0 && hi == 0 {
            continue;
        }
        let dim = x.rank() - 1 - k;
        let size = x.dims()[dim];
        let fits = match mode {
            PadMode::Reflect => lo < size && hi < size,
            PadMode::Circular => lo <= size && hi <= size,
            PadMode::Replicate => size > 0,
            PadMode::Constant(_) => true,
        };
        if !fits {
            return Err(bad(format!(
                "{mode:?} padding {pad:?} does not fit dim {dim} of size {size} of input {:?} (reflect: below the size; circular: at most the size)",
                x.dims()
            )));
        }
        let total = size.checked_add(lo).and_then(|s| s.checked_add(hi)).ok_or_else(|| bad(format!("padding {pad:?} overflows")))?;
        y = match mode {
            PadMode::Constant(v) => {
                let mut dims: Vec<usize> = y.dims().to_vec();
                let mut parts = Vec::with_capacity(3);
                if lo > 0 {
                    dims[dim] = lo;
                    parts.push(Tensor::try_full_dtype(dims.clone(), v, y.dtype())?);
                }
                parts.push(y.clone());
                if hi > 0 {
                    dims[dim] = hi;
                    parts.push(Tensor::try_full_dtype(dims.clone(), v, y.dtype())?);
                }
                Tensor::try_cat(&parts, dim as isize)?
            }
            _ => {
                autograd_core::memory::check_alloc("pad", total, std::mem::size_of::<i64>()).map_err(|e| e.at(loc))?;
                let idx: Vec<i64> = (0..total).map(|j| source(mode, j, lo, size) as i64).collect();
                y.try_index_select(dim as isize, &Tensor::try_from_vec(idx, [total])?)?
            }
        };
    }
    Ok(y)
}
