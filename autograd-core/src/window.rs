//! Sliding windows: the geometry shared by convolution, pooling and
//! `unfold`/`fold` (PyTorch's `im2col`/`col2im`).
//!
//! A [`Window`] slides over the trailing spatial dims of an
//! `[N, C, *spatial]` tensor. Its output size along a dim of input size
//! `s` is PyTorch's
//! `(s + pad_before + pad_after - dilation * (kernel - 1) - 1) / stride + 1`,
//! in checked arithmetic; a window larger than the padded input is an `Err`
//! naming the op and the sizes, as PyTorch refuses it.

use crate::{Error, Result};
use smallvec::SmallVec;

/// Per spatial dim sizes (most windows are 1-, 2- or 3-d: no heap).
pub type Dims = SmallVec<[usize; 3]>;

/// The geometry of a sliding window over `k` spatial dims.
///
/// ```
/// use autograd_core::window::Window;
/// // a 3x3 window, stride 2, padding 1: 32x32 -> 16x16
/// let w = Window::new("conv2d", &[3, 3], &[2, 2], &[(1, 1), (1, 1)], &[1, 1]).unwrap();
/// assert_eq!(w.out_dims("conv2d", &[32, 32]).unwrap().as_slice(), &[16, 16]);
/// // a kernel larger than the padded input is an Err, as in PyTorch
/// assert!(w.out_dims("conv2d", &[0, 32]).is_err());
/// assert!(Window::new("conv2d", &[3, 3], &[0, 1], &[(0, 0), (0, 0)], &[1, 1]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    kernel: Dims,
    stride: Dims,
    padding: SmallVec<[(usize, usize); 3]>,
    dilation: Dims,
}

impl Window {
    /// A window; `Err` unless every list has one entry per spatial dim and
    /// kernel, stride and dilation are positive.
    pub fn new(op: &'static str, kernel: &[usize], stride: &[usize], padding: &[(usize, usize)], dilation: &[usize]) -> Result<Window> {
        let k = kernel.len();
        if k == 0 || stride.len() != k || padding.len() != k || dilation.len() != k {
            return Err(Error::invalid_shape(
                op,
                format!(
                    "kernel {kernel:?}, stride {stride:?}, padding {padding:?} and dilation {dilation:?} need one entry per spatial dim each"
                ),
            ));
        }
        for (what, v) in [("kernel size", kernel), ("stride", stride), ("dilation", dilation)] {
            if v.contains(&0) {
                return Err(Error::invalid_shape(op, format!("{what} must be positive (got {v:?})")));
            }
        }
        if kernel.iter().try_fold(1usize, |a, &b| a.checked_mul(b)).is_none() {
            return Err(Error::invalid_shape(op, format!("kernel size {kernel:?} overflows")));
        }
        Ok(Window { kernel: kernel.into(), stride: stride.into(), padding: padding.into(), dilation: dilation.into() })
    }

    /// The number of spatial dims.
    pub fn rank(&self) -> usize {
        self.kernel.len()
    }
    /// Kernel size per spatial dim.
    pub fn kernel(&self) -> &[usize] {
        &self.kernel
    }
    /// Stride per spatial dim.
    pub fn stride(&self) -> &[usize] {
        &self.stride
    }
    /// Padding before and after per spatial dim.
    pub fn padding(&self) -> &[(usize, usize)] {
        &self.padding
    }
    /// Dilation per spatial dim.
    pub fn dilation(&self) -> &[usize] {
        &self.dilation
    }
    /// Elements of one window (the product of the kernel sizes, checked in [`Window::new`]).
    pub fn kernel_numel(&self) -> usize {
        self.kernel.iter().product()
    }

    /// The window's extent along dim `i`: `dilation * (kernel - 1) + 1`.
    fn extent(&self, op: &'static str, i: usize) -> Result<usize> {
        (self.kernel[i] - 1)
            .checked_mul(self.dilation[i])
            .and_then(|e| e.checked_add(1))
            .ok_or_else(|| Error::invalid_shape(op, format!("kernel {:?} with dilation {:?} overflows", self.kernel, self.dilation)))
    }

    /// Number of window positions per spatial dim for an input of
    /// `spatial` sizes; `Err` if a window does not fit the padded input.
    pub fn out_dims(&self, op: &'static str, spatial: &[usize]) -> Result<Dims> {
        if spatial.len() != self.rank() {
            return Err(Error::invalid_shape(
                op,
                format!("a {}-d window needs {} spatial dims (got {spatial:?})", self.rank(), self.rank()),
            ));
        }
        (0..self.rank())
            .map(|i| {
                let (lo, hi) = self.padding[i];
                let padded = spatial[i].checked_add(lo).and_then(|s| s.checked_add(hi));
                let padded = padded.ok_or_else(|| Error::invalid_shape(op, format!("padding {:?} overflows", self.padding)))?;
                let extent = self.extent(op, i)?;
                if padded < extent {
                    return Err(Error::invalid_shape(
                        op,
                        format!(
                            "input spatial size {spatial:?} padded by {:?} is smaller than the kernel {:?} dilated by {:?}: \
                             the kernel must fit the padded input",
                            self.padding, self.kernel, self.dilation
                        ),
                    ));
                }
                Ok((padded - extent) / self.stride[i] + 1)
            })
            .collect()
    }

    /// The input index along dim `i` read by output position `o` at kernel
    /// offset `k`, or `None` where it falls in the padding.
    #[inline]
    pub fn source(&self, i: usize, o: usize, k: usize, size: usize) -> Option<usize> {
        // o * stride + k * dilation < padded size, proven by out_dims
        let p = o * self.stride[i] + k * self.dilation[i];
        p.checked_sub(self.padding[i].0).filter(|&x| x < size)
    }
}
