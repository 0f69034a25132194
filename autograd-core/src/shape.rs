//! Shapes, dimension normalisation, broadcasting and its inverse.
//!
//! Broadcasting and "unbroadcasting" (which axes a gradient must be summed
//! over to get back to an operand's shape) live here and nowhere else.

use crate::{Error, Result};
use smallvec::SmallVec;

/// Inline storage for dims and strides: tensors of rank <= 6 never allocate for them.
pub type DimVec = SmallVec<[usize; 6]>;

/// The largest element count a tensor may have: `isize::MAX / 8`, so that a
/// buffer of the widest dtype (8 bytes) still fits in a Rust allocation and
/// every offset computed inside it fits in `isize` (what raw-pointer
/// arithmetic in kernels requires).
pub const MAX_NUMEL: usize = (isize::MAX as usize) / 8;
use std::fmt;

/// The sizes of a tensor's dimensions, outermost first.
///
/// ```
/// use autograd_core::Shape;
/// let s = Shape::from([2, 3, 4]);
/// assert_eq!(s.numel(), 24);
/// assert_eq!(&s.contiguous_strides()[..], &[12, 4, 1]);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(DimVec);

impl Shape {
    /// A shape from its dimensions.
    pub fn new(dims: Vec<usize>) -> Self {
        Shape(DimVec::from_vec(dims))
    }
    /// A shape from inline dims (no allocation for rank <= 6).
    pub fn from_dims(dims: DimVec) -> Self {
        Shape(dims)
    }
    /// The 0-d (scalar) shape.
    pub fn scalar() -> Self {
        Shape(DimVec::new())
    }
    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    /// Number of elements (1 for a 0-d shape).
    ///
    /// Saturates at `usize::MAX` when the product overflows, so that an
    /// impossible shape can never pass for a small one; every shape a tensor
    /// holds was checked with [`Shape::checked_numel`] on the way in.
    pub fn numel(&self) -> usize {
        self.checked_numel().unwrap_or(usize::MAX)
    }
    /// Number of elements, or `None` when the product overflows `usize`
    /// (a shape with a zero dim has 0 elements whatever its other dims).
    ///
    /// ```
    /// use autograd_core::Shape;
    /// assert_eq!(Shape::from([1 << 32, 1 << 32]).checked_numel(), None);
    /// assert_eq!(Shape::from([0, 1 << 40, 1 << 40]).checked_numel(), Some(0));
    /// ```
    pub fn checked_numel(&self) -> Option<usize> {
        if self.0.contains(&0) {
            return Some(0);
        }
        self.0.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }
    /// The element count, or an `Err` naming `op` and the shape when it
    /// overflows or exceeds [`MAX_NUMEL`] (no buffer of any dtype could hold it).
    ///
    /// ```
    /// use autograd_core::Shape;
    /// assert_eq!(Shape::from([2, 3]).try_numel("zeros").unwrap(), 6);
    /// let e = Shape::from([1 << 32, 1 << 32]).try_numel("zeros").unwrap_err();
    /// assert!(e.to_string().contains("zeros"));
    /// ```
    pub fn try_numel(&self, op: &'static str) -> Result<usize> {
        match self.checked_numel() {
            Some(n) if n <= MAX_NUMEL => Ok(n),
            _ => Err(Error::invalid_shape(
                op,
                format!("a tensor of shape {self:?} would have more than {MAX_NUMEL} elements (the most any buffer can hold)"),
            )),
        }
    }
    /// Row-major (C order) strides in elements (saturating, which only
    /// matters for shapes with a zero dim, whose strides are never used).
    pub fn contiguous_strides(&self) -> DimVec {
        let mut strides: DimVec = smallvec::smallvec![0; self.0.len()];
        let mut acc = 1usize;
        for (s, d) in strides.iter_mut().zip(&self.0).rev() {
            *s = acc;
            acc = acc.saturating_mul(*d);
        }
        strides
    }
    /// Turns a PyTorch-style dim (negative counts from the end) into an index.
    ///
    /// ```
    /// use autograd_core::Shape;
    /// assert_eq!(Shape::from([2, 3]).dim(-1, "sum").unwrap(), 1);
    /// assert!(Shape::from([2, 3]).dim(2, "sum").is_err());
    /// ```
    pub fn dim(&self, dim: isize, op: &'static str) -> Result<usize> {
        normalize_dim(dim, self.rank(), op)
    }
    /// The size of dimension `i` (already normalised).
    pub fn size(&self, i: usize) -> usize {
        self.0[i]
    }
    /// The shape that `self` and `other` broadcast to (NumPy/PyTorch rules).
    ///
    /// ```
    /// use autograd_core::Shape;
    /// let s = Shape::from([3, 1]).broadcast(&Shape::from([1, 4]), "add").unwrap();
    /// assert_eq!(s, Shape::from([3, 4]));
    /// ```
    pub fn broadcast(&self, other: &Shape, op: &'static str) -> Result<Shape> {
        let r = self.rank().max(other.rank());
        let mut out: DimVec = smallvec::smallvec![0; r];
        for (i, o) in out.iter_mut().enumerate() {
            let a = dim_from_end(&self.0, r - 1 - i);
            let b = dim_from_end(&other.0, r - 1 - i);
            *o = match (a, b) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => return Err(Error::shape_mismatch(op, self, other, None)),
            };
        }
        Ok(Shape(out))
    }
    /// The axes of `self` (a broadcast result) that must be summed, keeping
    /// dims, so that a reshape yields `target`. Empty when no sum is needed.
    ///
    /// ```
    /// use autograd_core::Shape;
    /// let axes = Shape::from([2, 3, 4]).unbroadcast_axes(&Shape::from([3, 1]));
    /// assert_eq!(axes, vec![0, 2]);
    /// ```
    pub fn unbroadcast_axes(&self, target: &Shape) -> Vec<usize> {
        let lead = self.rank() - target.rank().min(self.rank());
        let mut axes: Vec<usize> = (0..lead).collect();
        for (i, &t) in target.0.iter().enumerate() {
            if t == 1 && self.0[lead + i] != 1 {
                axes.push(lead + i);
            }
        }
        axes
    }
    /// Resolves one `-1` entry of a reshape target against `numel`.
    pub fn infer_reshape(&self, target: &[isize], op: &'static str) -> Result<Shape> {
        let numel = self.numel();
        let mut infer = None;
        let mut known = 1usize;
        let any_zero = target.contains(&0);
        for (i, &d) in target.iter().enumerate() {
            if d == -1 {
                if infer.is_some() {
                    return Err(Error::invalid_shape(op, "only one dimension can be inferred (-1)"));
                }
                infer = Some(i);
            } else if d < 0 {
                return Err(Error::invalid_shape(op, format!("invalid shape dimension {d}")));
            } else {
                // A zero dim makes the product 0 whatever else is there; otherwise overflow is an error.
                known = if any_zero {
                    0
                } else {
                    known.checked_mul(d as usize).ok_or_else(|| {
                        Error::invalid_shape(
                            op,
                            format!("shape {target:?} is invalid for input of size {numel} (shape {self:?}): its size overflows"),
                        )
                    })?
                };
            }
        }
        let mut dims: DimVec = target.iter().map(|&d| d.max(0) as usize).collect();
        if let Some(i) = infer {
            if known == 0 || !numel.is_multiple_of(known) {
                return Err(Error::invalid_shape(op, format!("shape {target:?} is invalid for input of size {numel} (shape {self:?})")));
            }
            dims[i] = numel / known;
        }
        let out = Shape(dims);
        if out.checked_numel() != Some(numel) {
            return Err(Error::invalid_shape(op, format!("shape {target:?} is invalid for input of size {numel} (shape {self:?})")));
        }
        Ok(out)
    }
}

fn dim_from_end(dims: &[usize], k: usize) -> usize {
    if k < dims.len() { dims[dims.len() - 1 - k] } else { 1 }
}

/// Normalises a possibly negative dim against `rank` (a 0-d tensor accepts 0 and -1).
pub fn normalize_dim(dim: isize, rank: usize, op: &'static str) -> Result<usize> {
    let r = rank.max(1) as isize;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(Error::DimOutOfRange { op, dim, rank, location: None });
    }
    Ok(d as usize)
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &self.0[..])
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &self.0[..])
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Self {
        Shape(DimVec::from_vec(v))
    }
}
impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Self {
        Shape(DimVec::from_slice(v))
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Self {
        Shape(DimVec::from_slice(&v))
    }
}
impl From<&Shape> for Shape {
    fn from(v: &Shape) -> Self {
        v.clone()
    }
}
impl From<()> for Shape {
    fn from(_: ()) -> Self {
        Shape(DimVec::new())
    }
}
impl From<usize> for Shape {
    fn from(v: usize) -> Self {
        Shape(smallvec::smallvec![v])
    }
}

impl FromIterator<usize> for Shape {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        Shape(iter.into_iter().collect())
    }
}
