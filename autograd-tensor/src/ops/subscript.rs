//! PyTorch's `x[...]` subscripts as a method: `x.index(idx![0, .., 1..3])`.
//!
//! `std::ops::Index` must return a reference into `self`, so it cannot make
//! a new tensor; [`Tensor::try_index`] takes a list of [`TensorIndex`]
//! items instead, and [`idx!`](crate::idx) builds the list from Rust's own
//! syntax (integers, ranges, `..`, tensors). Every item lowers onto one
//! differentiable op: an integer to `select`, a range to `narrow` (and
//! `index_select` for a step), [`NewAxis`] to `unsqueeze`, a boolean mask to
//! `index_select` over the flattened masked dims, an `I64` tensor to
//! `index_select`. So gradients flow as PyTorch's `IndexBackward0` would.

use crate::Tensor;
use autograd_core::ResultExt;
use autograd_core::{Backend, DType, Error, Result};
use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};
use std::panic::Location;

/// One item of a subscript (see [`Tensor::try_index`]).
#[derive(Clone, Debug)]
pub enum TensorIndex<B: Backend> {
    /// `x[i]`: selects position `i` (negative counts from the end) and drops the dim.
    /// Wide enough for every Rust integer, so none wraps on the way in: a
    /// position outside `i64` is an `Err`, as PyTorch's overflow.
    Int(i128),
    /// `x[start:end:step]`, Python's slice rules: bounds clamp, negatives count from the end.
    Slice {
        /// First position (default 0); any integer, clamped as in Python.
        start: Option<i128>,
        /// One past the last position (default: the dim's size); any
        /// integer, clamped as in Python (`0..usize::MAX` is everything).
        end: Option<i128>,
        /// Positive step.
        step: usize,
    },
    /// `x[None]`: a new dim of size 1.
    NewAxis,
    /// `x[...]`: as many full slices as the other items leave.
    Ellipsis,
    /// `x[mask]` (a `Bool` tensor covering the next `mask.rank()` dims) or
    /// `x[indices]` (an `I64` tensor of positions in the next dim).
    Tensor(Tensor<B>),
}

/// `x[None]` in [`idx!`](crate::idx): a new dim of size 1.
#[derive(Clone, Copy, Debug)]
pub struct NewAxis;

/// `x[...]` in [`idx!`](crate::idx): the dims the other items leave, in full.
#[derive(Clone, Copy, Debug)]
pub struct Ellipsis;

impl<B: Backend> TensorIndex<B> {
    /// A slice with a step: `TensorIndex::step(0..10, 2)` is Python's `0:10:2`.
    pub fn step(range: impl Into<TensorIndex<B>>, step: usize) -> Self {
        match range.into() {
            TensorIndex::Slice { start, end, .. } => TensorIndex::Slice { start, end, step },
            other => other,
        }
    }
}

macro_rules! int_index {
    ($($t:ty),*) => {$(
        impl<B: Backend> From<$t> for TensorIndex<B> {
            fn from(i: $t) -> Self {
                TensorIndex::Int(i as i128)
            }
        }
        impl<B: Backend> From<Range<$t>> for TensorIndex<B> {
            fn from(r: Range<$t>) -> Self {
                TensorIndex::Slice { start: Some(r.start as i128), end: Some(r.end as i128), step: 1 }
            }
        }
        impl<B: Backend> From<RangeFrom<$t>> for TensorIndex<B> {
            fn from(r: RangeFrom<$t>) -> Self {
                TensorIndex::Slice { start: Some(r.start as i128), end: None, step: 1 }
            }
        }
        impl<B: Backend> From<RangeTo<$t>> for TensorIndex<B> {
            fn from(r: RangeTo<$t>) -> Self {
                TensorIndex::Slice { start: None, end: Some(r.end as i128), step: 1 }
            }
        }
        impl<B: Backend> From<RangeInclusive<$t>> for TensorIndex<B> {
            fn from(r: RangeInclusive<$t>) -> Self {
                // `a..=-1` is "through the last": an end of None, not 0.
                let end = *r.end() as i128;
                TensorIndex::Slice { start: Some(*r.start() as i128), end: if end == -1 { None } else { Some(end + 1) }, step: 1 }
            }
        }
        impl<B: Backend> From<RangeToInclusive<$t>> for TensorIndex<B> {
            fn from(r: RangeToInclusive<$t>) -> Self {
                let end = r.end as i128;
                TensorIndex::Slice { start: None, end: if end == -1 { None } else { Some(end + 1) }, step: 1 }
            }
        }
    )*};
}
int_index!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

impl<B: Backend> From<RangeFull> for TensorIndex<B> {
    fn from(_: RangeFull) -> Self {
        TensorIndex::Slice { start: None, end: None, step: 1 }
    }
}
impl<B: Backend> From<NewAxis> for TensorIndex<B> {
    fn from(_: NewAxis) -> Self {
        TensorIndex::NewAxis
    }
}
impl<B: Backend> From<Ellipsis> for TensorIndex<B> {
    fn from(_: Ellipsis) -> Self {
        TensorIndex::Ellipsis
    }
}
impl<B: Backend> From<&Tensor<B>> for TensorIndex<B> {
    fn from(t: &Tensor<B>) -> Self {
        TensorIndex::Tensor(t.clone())
    }
}
impl<B: Backend> From<Tensor<B>> for TensorIndex<B> {
    fn from(t: Tensor<B>) -> Self {
        TensorIndex::Tensor(t)
    }
}

/// Builds a subscript for [`Tensor::index`] from Rust's syntax: integers,
/// ranges (`1..3`, `..`, `2..`, `..=4`), [`NewAxis`], [`Ellipsis`], a
/// `Bool` mask or `I64` index tensor, and `TensorIndex::step(0..10, 2)`.
///
/// ```
/// use autograd_tensor::{idx, Tensor, NewAxis, Ellipsis};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::arange(0.0, 24.0, 1.0).reshape(&[2, 3, 4]);
/// assert_eq!(x.index(idx![0]).dims(), &[3, 4]);                  // x[0]
/// assert_eq!(x.index(idx![.., 1]).to_vec::<f32>(), vec![4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0, 19.0]); // x[:, 1]
/// assert_eq!(x.index(idx![1, 1..3, -1]).to_vec::<f32>(), vec![19.0, 23.0]); // x[1, 1:3, -1]
/// assert_eq!(x.index(idx![Ellipsis, NewAxis, 0]).dims(), &[2, 3, 1]);        // x[..., None, 0]
/// let mask = x.gt_scalar(20.0);
/// assert_eq!(x.index(idx![&mask]).to_vec::<f32>(), vec![21.0, 22.0, 23.0]); // x[x > 20]
/// ```
#[macro_export]
macro_rules! idx {
    ($($item:expr),* $(,)?) => {
        &[$($crate::TensorIndex::from($item)),*]
    };
}

impl<B: Backend> Tensor<B> {
    /// PyTorch's `x[...]`: applies each item to the dims in turn (see the
    /// module docs and [`idx!`](crate::idx)); differentiable. An index out
    /// of range, too many items, a mask whose shape does not match the dims
    /// it covers, or more than one tensor item (PyTorch's combined advanced
    /// indexing) is an `Err` naming the subscript and the shape.
    #[track_caller]
    pub fn try_index(&self, items: &[TensorIndex<B>]) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let err = |msg: String| Error::InvalidShape {
            op: "index",
            msg: format!("{msg} (indexing a tensor of shape {:?})", self.dims()),
            location: Some(loc),
        };
        let consumed: usize = items
            .iter()
            .map(|i| match i {
                TensorIndex::Int(_) | TensorIndex::Slice { .. } => 1,
                TensorIndex::Tensor(t) if t.dtype() == DType::Bool => t.rank(),
                TensorIndex::Tensor(_) => 1,
                TensorIndex::NewAxis | TensorIndex::Ellipsis => 0,
            })
            .sum();
        if items.iter().filter(|i| matches!(i, TensorIndex::Ellipsis)).count() > 1 {
            return Err(err("an index can only have a single ellipsis".into()));
        }
        if items.iter().filter(|i| matches!(i, TensorIndex::Tensor(_))).count() > 1 {
            return Err(err("one tensor item per subscript (combined advanced indexing is not supported); index in two steps".into()));
        }
        if consumed > self.rank() {
            return Err(err(format!("too many indices: {consumed} dims indexed")));
        }
        let mut x = self.clone();
        let mut d = 0usize; // the dim of `x` the next item applies to
        for item in items {
            match item {
                TensorIndex::Int(i) => {
                    if i64::try_from(*i).is_err() {
                        return Err(err(format!("index {i} overflows int64 (PyTorch: Overflow when unpacking long)")));
                    }
                    let n = x.dims()[d] as i128;
                    let j = if *i < 0 { i + n } else { *i };
                    if !(0..n).contains(&j) {
                        return Err(err(format!("index {i} is out of bounds for dimension {d} with size {n}")));
                    }
                    x = x.try_select(d as isize, j as isize)?;
                }
                TensorIndex::Slice { start, end, step } => {
                    if *step == 0 {
                        return Err(err("slice step cannot be zero".into()));
                    }
                    let n = x.dims()[d] as i128;
                    // Python's slice bounds: negatives count from the end, then
                    // clamp to [0, n] (in i128, so no bound wraps or overflows).
                    let clamp = |v: i128| (if v < 0 { v + n } else { v }).clamp(0, n);
                    let (s, e) = (start.map_or(0, clamp), end.map_or(n, clamp));
                    let len = (e - s).max(0) as usize;
                    x = x.try_narrow(d as isize, s as usize, len)?;
                    if *step > 1 && len > 0 {
                        let picks: Vec<i64> = (0..len as i64).step_by(*step).collect();
                        let k = picks.len();
                        x = x.try_index_select(d as isize, &Tensor::try_from_vec(picks, [k])?)?;
                    }
                    d += 1;
                }
                TensorIndex::NewAxis => {
                    x = x.try_unsqueeze(d as isize)?;
                    d += 1;
                }
                TensorIndex::Ellipsis => d += self.rank() - consumed,
                TensorIndex::Tensor(t) if t.dtype() == DType::Bool => {
                    let k = t.rank();
                    if x.dims()[d..d + k] != *t.dims() {
                        return Err(err(format!(
                            "the mask of shape {:?} does not match the indexed dims {:?}",
                            t.dims(),
                            &x.dims()[d..d + k]
                        )));
                    }
                    let picks: Vec<i64> = t.try_to_vec::<bool>()?.iter().enumerate().filter(|&(_, &m)| m).map(|(i, _)| i as i64).collect();
                    let nnz = picks.len();
                    // The masked dims become one dim of the selected positions.
                    let mut merged: Vec<isize> = x.dims()[..d].iter().map(|&s| s as isize).collect();
                    merged.push(t.numel() as isize);
                    merged.extend(x.dims()[d + k..].iter().map(|&s| s as isize));
                    x = x.try_reshape(&merged)?.try_index_select(d as isize, &Tensor::try_from_vec(picks, [nnz])?)?;
                    d += 1;
                }
                TensorIndex::Tensor(t) if t.dtype() == DType::I64 => {
                    // Positions in dim `d`, of any shape: the dim is replaced by the index's shape.
                    let n = x.dims()[d] as i64;
                    let flat: Vec<i64> = t.try_to_vec::<i64>()?;
                    if let Some(bad) = flat.iter().find(|&&i| !(-n..n).contains(&i)) {
                        return Err(err(format!("index {bad} is out of bounds for dimension {d} with size {n}")));
                    }
                    let picks: Vec<i64> = flat.iter().map(|&i| if i < 0 { i + n } else { i }).collect();
                    let len = picks.len();
                    let sel = x.try_index_select(d as isize, &Tensor::try_from_vec(picks, [len])?)?;
                    let mut shape: Vec<isize> = x.dims()[..d].iter().map(|&s| s as isize).collect();
                    shape.extend(t.dims().iter().map(|&s| s as isize));
                    shape.extend(x.dims()[d + 1..].iter().map(|&s| s as isize));
                    x = sel.try_reshape(&shape)?;
                    d += t.rank();
                }
                TensorIndex::Tensor(t) => {
                    return Err(err(format!("tensors used as indices must be Bool masks or I64 positions, not {:?}", t.dtype())));
                }
            }
        }
        Ok(x)
    }

    /// PyTorch's `x[...]` (panics where [`Tensor::try_index`] is an `Err`, at the caller's line).
    #[track_caller]
    pub fn index(&self, items: &[TensorIndex<B>]) -> Tensor<B> {
        self.try_index(items).or_panic()
    }
}
