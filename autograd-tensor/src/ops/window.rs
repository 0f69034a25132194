//! Sliding windows as columns: `im2col` and its adjoint `col2im`, the two
//! primitives convolution and pooling are written with. Each is the
//! other's backward (both are linear), so every order of derivative and the
//! forward mode follow from these two rules.

use crate::Tensor;
use crate::recording::{stateless, with_tangent};
use autograd_core::window::Window;
use autograd_core::{Backend, Result, Shape};
use std::panic::Location;

impl<B: Backend> Tensor<B> {
    /// im2col (PyTorch's `F.unfold`, for 1, 2 or more spatial dims): the
    /// `[N, C, *spatial]` input as `[N, C * K, L]` columns, `K` the window's
    /// elements and `L` its positions; taps in the padding read `pad_value`
    /// (0 for a convolution, `-inf` for max pooling; a constant, so it gets
    /// no gradient).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, window::Window};
    /// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [1, 1, 2, 2]).requires_grad_(true);
    /// let w = Window::new("unfold", &[2, 2], &[1, 1], &[(0, 0), (0, 0)], &[1, 1]).unwrap();
    /// let cols = x.try_im2col(&w, 0.0).unwrap();
    /// assert_eq!(cols.dims(), &[1, 4, 1]);
    /// cols.sum().backward();
    /// assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![1.0; 4]);
    /// ```
    #[track_caller]
    pub fn try_im2col(&self, window: &Window, pad_value: f64) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let sizes = autograd_core::validate::unfold("unfold", self.layout(), window, self.dtype()).map_err(|e| e.at(loc))?;
        let s = B::unfold(&self.storage(), self.layout(), window, pad_value).map_err(|e| e.at(loc))?;
        let shape = Shape::from([sizes.batch, sizes.channels * window.kernel_numel(), sizes.num_positions()]);
        let spatial = sizes.spatial.to_vec();
        let w = window.clone();
        let out = Tensor::record_new(s, shape, "Im2ColBackward0", &[self], |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_col2im(&w, &spatial)?)]))
        });
        with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_im2col(window, 0.0))
    }

    /// col2im (PyTorch's `F.fold`): `[N, C * K, L]` columns summed into an
    /// `[N, C, *spatial]` image, each element the sum of the taps that read
    /// it (taps in the padding are dropped); the adjoint of
    /// [`Tensor::try_im2col`] with zero padding.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::{RefBackend, window::Window};
    /// let cols = Tensor::<RefBackend>::ones([1, 4, 1]);
    /// let w = Window::new("fold", &[2, 2], &[1, 1], &[(0, 0), (0, 0)], &[1, 1]).unwrap();
    /// assert_eq!(cols.try_col2im(&w, &[2, 2]).unwrap().dims(), &[1, 1, 2, 2]);
    /// ```
    #[track_caller]
    pub fn try_col2im(&self, window: &Window, spatial: &[usize]) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let sizes = autograd_core::validate::fold(self.layout(), window, spatial, self.dtype()).map_err(|e| e.at(loc))?;
        let s = B::fold(&self.storage(), self.layout(), window, spatial).map_err(|e| e.at(loc))?;
        let mut dims = vec![sizes.batch, sizes.channels];
        dims.extend_from_slice(spatial);
        let w = window.clone();
        let out = Tensor::record_new(s, Shape::from(dims), "Col2ImBackward0", &[self], |_| {
            stateless(move |_, g: &Tensor<B>| Ok(vec![Some(g.try_im2col(&w, 0.0)?)]))
        });
        with_tangent(out, &[self], |t| t[0].as_ref().expect("tangent").try_col2im(window, spatial))
    }
}
