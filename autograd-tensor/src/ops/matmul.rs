//! Matrix products with PyTorch's `matmul` semantics: 1-D operands are
//! promoted to matrices and the added dim removed again; batch dims
//! broadcast.

use crate::Tensor;
use crate::node::SavedTensor;
use crate::recording::{saving, want};
use autograd_core::{Backend, Error, Result, Shape};
use std::panic::Location;

impl<B: Backend> Tensor<B> {
    /// Matrix product (`a @ b` in Python).
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let a = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2]);
    /// let v = Tensor::<RefBackend>::from_vec(vec![1.0f64, 1.0], [2]);
    /// assert_eq!(a.matmul(&v).to_vec::<f64>(), vec![3.0, 7.0]);
    /// assert!(a.try_matmul(&Tensor::from_vec(vec![1.0f64; 3], [3])).is_err());
    /// ```
    #[track_caller]
    pub fn try_matmul(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        let loc = Location::caller();
        let (a, b) = (crate::autocast::cast("matmul", self)?, crate::autocast::cast("matmul", other)?);
        let (a, b) = a.promote_pair(&b)?;
        if a.rank() == 0 || b.rank() == 0 {
            return Err(Error::InvalidShape {
                op: "matmul",
                msg: format!("both arguments to matmul need to be at least 1-D, got {:?} and {:?}", a.shape(), b.shape()),
                location: Some(loc),
            });
        }
        // Promote vectors: [k] @ .. -> [1, k]; .. @ [k] -> [k, 1].
        let a2 = if a.rank() == 1 { a.layout().unsqueeze(0)? } else { a.layout().clone() };
        let b2 = if b.rank() == 1 { b.layout().unsqueeze(1)? } else { b.layout().clone() };
        let (ra, rb) = (a2.rank(), b2.rank());
        let (m, k, k2, n) = (a2.dims()[ra - 2], a2.dims()[ra - 1], b2.dims()[rb - 2], b2.dims()[rb - 1]);
        if k != k2 {
            return Err(Error::InvalidShape {
                op: "matmul",
                msg: format!("shapes {:?} and {:?} cannot be multiplied ({m}x{k} and {k2}x{n})", a.shape(), b.shape()),
                location: Some(loc),
            });
        }
        let batch = Shape::new(a2.dims()[..ra - 2].to_vec())
            .broadcast(&Shape::new(b2.dims()[..rb - 2].to_vec()), "matmul")
            .map_err(|_| Error::shape_mismatch("matmul", a.shape(), b.shape(), Some(loc)))?;
        let full = |x, y| Shape::new(batch.dims().iter().copied().chain([x, y]).collect());
        let la = a2.broadcast_as(&full(m, k))?;
        let lb = b2.broadcast_as(&full(k, n))?;
        let s = B::matmul(&a.storage(), &la, &b.storage(), &lb).map_err(|e| e.at(Location::caller()))?;
        let mut od: Vec<usize> = batch.dims().to_vec();
        if a.rank() > 1 {
            od.push(m);
        }
        if b.rank() > 1 {
            od.push(n);
        }
        let name = match (a.rank(), b.rank()) {
            (1, 1) => "DotBackward0",
            (2, 1) => "MvBackward0",
            (2, 2) => "MmBackward0",
            _ => "BmmBackward0",
        };
        let (na, nb) = (a.requires_grad(), b.requires_grad());
        let out_full = full(m, n);
        let out = Tensor::record_new(s, Shape::new(od), name, &[&a, &b], |_| {
            let xa = nb.then(|| SavedTensor::new(&a));
            let xb = na.then(|| SavedTensor::new(&b));
            let (sa, sb) = (a.shape().clone(), b.shape().clone());
            let (sa2, sb2) = (a2.shape().clone(), b2.shape().clone());
            // A 2-D operand stored transposed (a Linear weight used as `W.t()`)
            // gets its gradient computed transposed too, so that it arrives
            // at the leaf in the leaf's own row-major layout and is stored
            // without a transposing copy (PyTorch's mm backward does the same).
            let (ta, tb) = (col_major(&a2), col_major(&b2));
            saving(move |ctx, g: &Tensor<B>| {
                let g = g.try_reshape_to(&out_full)?;
                // dA = dC B^T summed over broadcast batch dims; dB = A^T dC likewise.
                let ga = want(na, || {
                    let b = xb.as_ref().expect("b saved").get(ctx.name())?.try_reshape_to(&sb2)?;
                    if ta && b.rank() == 2 && g.rank() == 2 {
                        return b.try_matmul(&g.try_t()?)?.try_t()?.try_reshape_to(&sa);
                    }
                    g.try_matmul(&b.try_transpose(-1, -2)?)?.try_sum_to(&sa2)?.try_reshape_to(&sa)
                })?;
                let gb = want(nb, || {
                    let a = xa.as_ref().expect("a saved").get(ctx.name())?.try_reshape_to(&sa2)?;
                    if tb && a.rank() == 2 && g.rank() == 2 {
                        return g.try_t()?.try_matmul(&a)?.try_t()?.try_reshape_to(&sb);
                    }
                    a.try_transpose(-1, -2)?.try_matmul(&g)?.try_sum_to(&sb2)?.try_reshape_to(&sb)
                })?;
                Ok(vec![ga, gb])
            })
        });
        crate::recording::with_tangent(out, &[&a, &b], |t| {
            let (ad, bd) = (a.detach(), b.detach());
            match (&t[0], &t[1]) {
                (Some(ta), Some(tb)) => ta.try_matmul(&bd)?.try_add(&ad.try_matmul(tb)?),
                (Some(ta), None) => ta.try_matmul(&bd),
                (None, Some(tb)) => ad.try_matmul(tb),
                _ => unreachable!(),
            }
        })
    }
}

/// A matrix stored column by column (the transpose of a contiguous matrix).
fn col_major(l: &autograd_core::Layout) -> bool {
    l.rank() == 2 && l.dims()[0] > 1 && l.dims()[1] > 1 && l.strides() == [1, l.dims()[0]]
}

impl<B: Backend> Tensor<B> {
    /// PyTorch's `mm`: [`Tensor::try_matmul`] restricted to two 2-D operands
    /// (`(n, k) @ (k, m)`), so a batch or a vector is an `Err`, not broadcast.
    ///
    /// ```
    /// use autograd_tensor::Tensor;
    /// use autograd_core::RefBackend;
    /// let a = Tensor::<RefBackend>::ones([2, 3]);
    /// assert_eq!(a.mm(&Tensor::ones([3, 4])).dims(), &[2, 4]);
    /// assert!(a.try_mm(&Tensor::ones([3])).is_err());
    /// assert_eq!(Tensor::<RefBackend>::ones([5, 2, 3]).bmm(&Tensor::ones([5, 3, 4])).dims(), &[5, 2, 4]);
    /// assert!(a.try_bmm(&Tensor::ones([3, 4])).is_err());
    /// ```
    #[track_caller]
    pub fn try_mm(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        self.check_ranks("mm", other, 2)?;
        self.try_matmul(other)
    }
    /// PyTorch's `bmm`: [`Tensor::try_matmul`] restricted to two 3-D operands
    /// with the same batch size (`(b, n, k) @ (b, k, m)`), without broadcasting.
    #[track_caller]
    pub fn try_bmm(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        self.check_ranks("bmm", other, 3)?;
        if self.dims()[0] != other.dims()[0] {
            return Err(Error::InvalidShape {
                op: "bmm",
                msg: format!("batch1 and batch2 must have the same batch size, got {:?} and {:?}", self.dims(), other.dims()),
                location: Some(Location::caller()),
            });
        }
        self.try_matmul(other)
    }
    #[track_caller]
    fn check_ranks(&self, op: &'static str, other: &Tensor<B>, rank: usize) -> Result<()> {
        if self.rank() != rank || other.rank() != rank {
            return Err(Error::InvalidShape {
                op,
                msg: format!("expects two {rank}-D tensors, got shapes {:?} and {:?}", self.dims(), other.dims()),
                location: Some(Location::caller()),
            });
        }
        Ok(())
    }
}

panicking_twins! {
    matmul(other: &Tensor<B>) -> Tensor<B> = try_matmul, "Panicking [`Tensor::try_matmul`].";
    mm(other: &Tensor<B>) -> Tensor<B> = try_mm, "Panicking [`Tensor::try_mm`].";
    bmm(other: &Tensor<B>) -> Tensor<B> = try_bmm, "Panicking [`Tensor::try_bmm`].";
}
