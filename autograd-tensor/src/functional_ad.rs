//! `torch.autograd.functional`-style helpers built on [`crate::autograd::grad`]:
//! vector-Jacobian products, Jacobians, Hessians, Hessian-vector products.

use crate::GradOptions;
use crate::Tensor;
use crate::engine::grad;
use autograd_core::{Backend, Error, Result, Shape};

fn leaf<B: Backend>(x: &Tensor<B>) -> Tensor<B> {
    x.detach().requires_grad_(true)
}

/// `(f(x), v^T J)`: the output and the vector-Jacobian product.
pub fn vjp<B: Backend>(f: impl Fn(&Tensor<B>) -> Tensor<B>, x: &Tensor<B>, v: &Tensor<B>) -> Result<(Tensor<B>, Tensor<B>)> {
    let x = leaf(x);
    let y = f(&x);
    let g = grad(
        std::slice::from_ref(&y),
        std::slice::from_ref(&x),
        Some(std::slice::from_ref(v)),
        GradOptions { allow_unused: true, ..Default::default() },
    )?;
    Ok((y.detach(), g[0].clone().unwrap_or_else(|| x.zeros_like())))
}

/// The Jacobian of `f` at `x`, shape `f(x).shape + x.shape` (one reverse pass per output element).
///
/// ```
/// use autograd_tensor::{Tensor, autograd::jacobian};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [2]);
/// let j = jacobian(|x| x * x, &x).unwrap();
/// assert_eq!(j.to_vec::<f64>(), vec![2.0, 0.0, 0.0, 4.0]);
/// ```
pub fn jacobian<B: Backend>(f: impl Fn(&Tensor<B>) -> Tensor<B>, x: &Tensor<B>) -> Result<Tensor<B>> {
    let x = leaf(x);
    let y = f(&x);
    let n = y.numel();
    let flat = y.try_reshape(&[-1])?;
    let mut rows = Vec::with_capacity(n);
    for i in 0..n {
        let g = grad(
            &[flat.try_select(0, i as isize)?],
            std::slice::from_ref(&x),
            None,
            GradOptions { retain_graph: true, allow_unused: true, ..Default::default() },
        )?;
        rows.push(g[0].clone().unwrap_or_else(|| x.zeros_like()).detach());
    }
    let mut shape = y.dims().to_vec();
    shape.extend_from_slice(x.dims());
    if rows.is_empty() {
        return Ok(Tensor::zeros_dtype(Shape::new(shape), x.dtype()));
    }
    Tensor::try_stack(&rows, 0)?.try_reshape_to(&Shape::new(shape))
}

/// The Hessian of a scalar function, shape `x.shape + x.shape`.
pub fn hessian<B: Backend>(f: impl Fn(&Tensor<B>) -> Tensor<B>, x: &Tensor<B>) -> Result<Tensor<B>> {
    let gradient = |x: &Tensor<B>| {
        let y = f(x);
        assert_eq!(y.numel(), 1, "hessian: f must return a scalar, got shape {:?}", y.shape());
        grad(&[y], std::slice::from_ref(x), None, GradOptions { retain_graph: true, create_graph: true, allow_unused: true })
            .expect("gradient")[0]
            .clone()
            .unwrap_or_else(|| x.zeros_like())
    };
    jacobian(gradient, x)
}

/// `(f(x), H v)`: a Hessian-vector product by double backward, without forming `H`.
pub fn hvp<B: Backend>(f: impl Fn(&Tensor<B>) -> Tensor<B>, x: &Tensor<B>, v: &Tensor<B>) -> Result<(Tensor<B>, Tensor<B>)> {
    if v.shape() != x.shape() {
        return Err(Error::shape_mismatch("hvp", x.shape(), v.shape(), None));
    }
    let x = leaf(x);
    let y = f(&x);
    let g = grad(
        std::slice::from_ref(&y),
        std::slice::from_ref(&x),
        None,
        GradOptions { retain_graph: true, create_graph: true, ..Default::default() },
    )?[0]
        .clone()
        .expect("used");
    let hv = grad(&[g], std::slice::from_ref(&x), Some(std::slice::from_ref(v)), GradOptions { allow_unused: true, ..Default::default() })?;
    Ok((y.detach(), hv[0].clone().unwrap_or_else(|| x.zeros_like())))
}

/// Forward-mode AD: `(f(primals), J(primals) . tangents)`, computed in one
/// forward pass with dual tensors (each op applies its JVP rule), without a
/// backward pass. Costs one pass per direction, so it suits functions with
/// few inputs and many outputs.
///
/// ```
/// use autograd_tensor::{Tensor, autograd::jvp};
/// use autograd_core::RefBackend;
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [2]);
/// let (y, dy) = jvp(|x| x[0].exp() * &x[0], &[x.clone()], &[x.ones_like()]).unwrap();
/// let e = std::f64::consts::E;
/// assert!((dy.to_vec::<f64>()[0] - 2.0 * e).abs() < 1e-12); // (1 + x) e^x at 1
/// assert_eq!(y.dims(), &[2]);
/// ```
pub fn jvp<B: Backend>(
    f: impl Fn(&[Tensor<B>]) -> Tensor<B>,
    primals: &[Tensor<B>],
    tangents: &[Tensor<B>],
) -> Result<(Tensor<B>, Tensor<B>)> {
    if primals.len() != tangents.len() {
        return Err(Error::msg(format!("jvp: {} primals but {} tangents", primals.len(), tangents.len())));
    }
    let duals: Vec<Tensor<B>> = primals.iter().zip(tangents).map(|(p, t)| Tensor::make_dual(&p.detach(), t)).collect::<Result<_>>()?;
    let y = f(&duals);
    let t = y.tangent().unwrap_or_else(|| y.zeros_like());
    Ok((y.detach(), t))
}
