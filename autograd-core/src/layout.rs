//! Strided layouts: how a shape maps onto a flat storage buffer.
//!
//! Transpose, permute, narrow, slicing, expand and broadcasting only build a
//! new `Layout` over the same storage; nothing is copied until a kernel needs
//! contiguous data.

use crate::shape::DimVec;
use crate::{Error, Result, Shape};

/// Shape + strides (in elements) + offset into the storage.
///
/// ```
/// use autograd_core::{Layout, Shape};
/// let l = Layout::contiguous(Shape::from([2, 3]));
/// let t = l.transpose(0, 1).unwrap();
/// assert_eq!(t.shape().dims(), &[3, 2]);
/// assert_eq!(t.strides(), &[1, 3]);
/// assert!(!t.is_contiguous());
/// assert_eq!(t.offsets().collect::<Vec<_>>(), vec![0, 3, 1, 4, 2, 5]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    shape: Shape,
    strides: DimVec,
    offset: usize,
}

impl Layout {
    /// A row-major layout starting at offset 0.
    pub fn contiguous(shape: impl Into<Shape>) -> Self {
        let shape = shape.into();
        let strides = shape.contiguous_strides();
        Layout { shape, strides, offset: 0 }
    }
    /// A layout from its parts (no validation against a storage size: every
    /// backend checks a layout with [`Layout::check_storage`] before use).
    /// Panics if `strides` does not have one entry per dim.
    #[track_caller]
    pub fn new(shape: Shape, strides: impl Into<DimVec>, offset: usize) -> Self {
        let strides = strides.into();
        assert_eq!(shape.rank(), strides.len(), "Layout::new: rank of shape and strides differ");
        Layout { shape, strides, offset }
    }
    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    /// The dims of the shape.
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }
    /// Strides in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    /// Offset of the first element.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.numel()
    }
    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }
    /// Row-major with no gaps (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1;
        for (&d, &s) in self.shape.dims().iter().zip(&self.strides).rev() {
            if d != 1 && s != acc {
                return false;
            }
            acc = acc.saturating_mul(d);
        }
        true
    }
    /// `Some((start, end))` when the elements are the contiguous range `start..end` of the storage.
    pub fn contiguous_range(&self) -> Option<(usize, usize)> {
        self.is_contiguous().then(|| (self.offset, self.offset.saturating_add(self.numel())))
    }
    /// Swaps two dims.
    pub fn transpose(&self, d0: usize, d1: usize) -> Result<Layout> {
        let r = self.rank();
        if d0 >= r.max(1) || d1 >= r.max(1) {
            return Err(Error::DimOutOfRange { op: "transpose", dim: d0.max(d1) as isize, rank: r, location: None });
        }
        if r == 0 {
            return Ok(self.clone());
        }
        let mut dims = DimVec::from_slice(self.shape.dims());
        let mut strides = self.strides.clone();
        dims.swap(d0, d1);
        strides.swap(d0, d1);
        Ok(Layout { shape: Shape::from_dims(dims), strides, offset: self.offset })
    }
    /// Reorders dims: output dim `i` is input dim `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Result<Layout> {
        let r = self.rank();
        let mut seen = vec![false; r];
        if perm.len() != r || perm.iter().any(|&p| p >= r || std::mem::replace(&mut seen[p], true)) {
            return Err(Error::invalid_shape(
                "permute",
                format!("{perm:?} is not a permutation of the {r} dims of a tensor of shape {:?}", self.shape),
            ));
        }
        let dims: DimVec = perm.iter().map(|&p| self.shape.dims()[p]).collect();
        let strides: DimVec = perm.iter().map(|&p| self.strides[p]).collect();
        Ok(Layout { shape: Shape::from_dims(dims), strides, offset: self.offset })
    }
    /// Elements `start..start+len` of dim `dim`, every `step`-th.
    ///
    /// Every bound is computed with checked arithmetic: a length or step
    /// whose last element would lie past the dimension (or overflow) is an
    /// `Err`, never a view that reaches outside the storage.
    ///
    /// ```
    /// use autograd_core::{Layout, Shape};
    /// let l = Layout::contiguous(Shape::from([3, 3]));
    /// assert_eq!(l.slice(1, 1, 2, 1).unwrap().dims(), &[3, 2]);
    /// assert!(l.slice(1, 2, usize::MAX, 1).is_err());
    /// assert!(l.slice(0, 3, usize::MAX, 1).is_err());
    /// ```
    pub fn slice(&self, dim: usize, start: usize, len: usize, step: usize) -> Result<Layout> {
        let Some(&size) = self.shape.dims().get(dim) else {
            return Err(Error::DimOutOfRange { op: "narrow", dim: dim as isize, rank: self.rank(), location: None });
        };
        let last = match len {
            0 => Some(start),
            _ => (len - 1).checked_mul(step).and_then(|x| x.checked_add(start)),
        };
        let fits = match last {
            Some(last) if len == 0 => last <= size,
            Some(last) => last < size,
            None => false,
        };
        if step == 0 || !fits {
            return Err(Error::invalid_shape(
                "narrow",
                format!("start {start}, length {len}, step {step} exceed dimension {dim} of size {size}"),
            ));
        }
        let mut dims = DimVec::from_slice(self.shape.dims());
        let mut strides = self.strides.clone();
        dims[dim] = len;
        // In range: start <= size and the layout's own offsets fit (checked when it was validated);
        // saturating keeps an unvalidated layout from wrapping to a small offset.
        let offset = self.offset.saturating_add(start.saturating_mul(strides[dim]));
        strides[dim] = strides[dim].saturating_mul(step);
        Ok(Layout { shape: Shape::from_dims(dims), strides, offset })
    }
    /// Removes dim `dim` by picking index `index` in it.
    pub fn select(&self, dim: usize, index: usize) -> Result<Layout> {
        let l = self.slice(dim, index, 1, 1)?;
        l.squeeze(dim)
    }
    /// Inserts a size-1 dim at `dim` (0..=rank).
    pub fn unsqueeze(&self, dim: usize) -> Result<Layout> {
        if dim > self.rank() {
            return Err(Error::DimOutOfRange { op: "unsqueeze", dim: dim as isize, rank: self.rank(), location: None });
        }
        let mut dims = DimVec::from_slice(self.shape.dims());
        let mut strides = self.strides.clone();
        let st = if dim < self.rank() { dims[dim].saturating_mul(strides[dim]) } else { 1 };
        dims.insert(dim, 1);
        strides.insert(dim, st);
        Ok(Layout { shape: Shape::from_dims(dims), strides, offset: self.offset })
    }
    /// Removes dim `dim` if its size is 1 (otherwise returns the layout unchanged, as PyTorch does).
    pub fn squeeze(&self, dim: usize) -> Result<Layout> {
        if self.rank() == 0 {
            return Ok(self.clone());
        }
        if dim >= self.rank() {
            return Err(Error::DimOutOfRange { op: "squeeze", dim: dim as isize, rank: self.rank(), location: None });
        }
        if self.shape.dims()[dim] != 1 {
            return Ok(self.clone());
        }
        let mut dims = DimVec::from_slice(self.shape.dims());
        let mut strides = self.strides.clone();
        dims.remove(dim);
        strides.remove(dim);
        Ok(Layout { shape: Shape::from_dims(dims), strides, offset: self.offset })
    }
    /// A stride-0 view of this layout as `target` (NumPy broadcasting rules:
    /// new leading dims and size-1 dims are stretched).
    pub fn broadcast_as(&self, target: &Shape) -> Result<Layout> {
        let r = target.rank();
        if r < self.rank() {
            return Err(Error::invalid_shape(
                "expand",
                format!("the expanded size {target:?} must have at least as many dims as the tensor {:?}", self.shape),
            ));
        }
        let lead = r - self.rank();
        target.try_numel("expand")?;
        let mut strides: DimVec = smallvec::smallvec![0; r];
        for i in 0..self.rank() {
            let (d, t) = (self.shape.dims()[i], target.dims()[lead + i]);
            if d == t {
                strides[lead + i] = self.strides[i];
            } else if d == 1 {
                strides[lead + i] = 0;
            } else {
                return Err(Error::invalid_shape(
                    "expand",
                    format!(
                        "the expanded size {t} must match the existing size {d} at non-singleton dimension {} (shape {:?} to {:?})",
                        lead + i,
                        self.shape,
                        target
                    ),
                ));
            }
        }
        Ok(Layout { shape: target.clone(), strides, offset: self.offset })
    }
    /// A view with a new shape, when the data allows one without copying
    /// (currently: contiguous layouts). `None` means a copy is needed.
    pub fn reshape(&self, shape: &Shape) -> Option<Layout> {
        if shape.checked_numel()? != self.shape.checked_numel()? {
            return None;
        }
        if self.is_contiguous() {
            Some(Layout { shape: shape.clone(), strides: shape.contiguous_strides(), offset: self.offset })
        } else {
            None
        }
    }
    /// Storage offsets of all elements in row-major order.
    pub fn offsets(&self) -> StridedOffsets<'_> {
        StridedOffsets::new(self)
    }
    /// One past the largest storage offset this layout touches (0 if empty);
    /// saturates at `usize::MAX` where [`Layout::checked_required_len`] overflows.
    pub fn required_len(&self) -> usize {
        self.checked_required_len().unwrap_or(usize::MAX)
    }
    /// One past the largest storage offset this layout touches (0 if empty),
    /// or `None` when computing it overflows.
    pub fn checked_required_len(&self) -> Option<usize> {
        if self.shape.checked_numel()? == 0 {
            return Some(0);
        }
        let mut last = self.offset;
        for (&d, &s) in self.shape.dims().iter().zip(&self.strides) {
            last = last.checked_add((d - 1).checked_mul(s)?)?;
        }
        last.checked_add(1)
    }
    /// The one check every backend makes before touching a storage of `len`
    /// elements through this layout: the element count fits
    /// ([`crate::shape::MAX_NUMEL`]), and every offset the layout can produce
    /// (computed with checked arithmetic) lies inside the storage. Kernels,
    /// including the `unsafe` GEMM calls, rely on it for every index they form.
    ///
    /// ```
    /// use autograd_core::{Layout, Shape};
    /// let l = Layout::contiguous(Shape::from([2, 3]));
    /// assert!(l.check_storage(6, "add").is_ok());
    /// assert!(l.check_storage(5, "add").is_err());
    /// let bad = Layout::new(Shape::from([3, usize::MAX]), vec![3, 1], 2);
    /// assert!(bad.check_storage(9, "matmul").unwrap_err().to_string().contains("matmul"));
    /// ```
    pub fn check_storage(&self, len: usize, op: &'static str) -> Result<()> {
        self.shape.try_numel(op)?;
        match self.checked_required_len() {
            Some(need) if need <= len => Ok(()),
            _ => Err(Error::invalid_shape(
                op,
                format!(
                    "a view of shape {:?} (strides {:?}, offset {}) reaches past the end of its storage of {len} elements",
                    self.shape, self.strides, self.offset
                ),
            )),
        }
    }
}

/// Iterator over the storage offsets of a layout, in row-major order.
pub struct StridedOffsets<'a> {
    layout: &'a Layout,
    index: DimVec,
    next: Option<usize>,
}

impl<'a> StridedOffsets<'a> {
    fn new(layout: &'a Layout) -> Self {
        let next = (layout.numel() > 0).then_some(layout.offset);
        StridedOffsets { layout, index: smallvec::smallvec![0; layout.rank()], next }
    }
}

impl Iterator for StridedOffsets<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        let cur = self.next?;
        let dims = self.layout.shape.dims();
        let strides = &self.layout.strides;
        let mut off = cur;
        let mut d = dims.len();
        loop {
            if d == 0 {
                self.next = None;
                break;
            }
            d -= 1;
            self.index[d] += 1;
            if self.index[d] < dims[d] {
                off += strides[d];
                self.next = Some(off);
                break;
            }
            off -= strides[d] * (dims[d] - 1);
            self.index[d] = 0;
        }
        Some(cur)
    }
}

/// Calls `f` with every multi-index of `dims` in row-major order (nothing for an empty shape).
///
/// ```
/// let mut seen = vec![];
/// autograd_core::layout::for_each_index(&[2, 2], |i| seen.push(i.to_vec()));
/// assert_eq!(seen, vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]);
/// ```
pub fn for_each_index(dims: &[usize], mut f: impl FnMut(&[usize])) {
    if dims.contains(&0) {
        return;
    }
    let mut idx: DimVec = smallvec::smallvec![0; dims.len()];
    loop {
        f(&idx);
        let mut d = dims.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}
