//! The backend contract: a handful of primitive op families.
//!
//! A backend implements the primitives below and passes the conformance
//! suite (`autograd_testkit::backend_conformance!`, dev-only); nothing else
//! is required.
//! Kernels receive strided [`Layout`]s and return contiguous storage in
//! row-major order of the output shape. Composite ops (softmax, ...) are
//! written once with default implementations in terms of primitives; a
//! backend may override them with fused kernels.

use crate::{ArgReduceOp, BinaryOp, DType, HostData, Layout, ReduceOp, Result, Shape, UnaryOp};
use std::fmt::Debug;

/// The op trait every compute backend implements.
///
/// Conventions: every input comes with its [`Layout`] (possibly strided,
/// transposed or broadcast with stride 0); every output is a fresh contiguous
/// storage in row-major order. Every method is safe to call with any
/// arguments: a backend checks layouts against its storages, dims, shapes and
/// output sizes with [`crate::validate`] before any access, and answers
/// `Err` rather than reading out of bounds, panicking or aborting.
///
/// ```
/// use autograd_core::{Backend, Layout, RefBackend, Shape, UnaryOp, HostData};
/// let x = RefBackend::from_host(HostData::from(vec![-1.0f64, 2.0]));
/// let y = RefBackend::unary(UnaryOp::Relu, &x, &Layout::contiguous(Shape::from([2]))).unwrap();
/// assert_eq!(RefBackend::to_host(&y, &Layout::contiguous(Shape::from([2]))).unwrap(), HostData::from(vec![0.0, 2.0]));
/// ```
pub trait Backend: Clone + Copy + Debug + Default + Send + Sync + 'static {
    /// The backend's storage buffer.
    type Storage: Debug + Send + Sync + 'static;

    /// A short name for messages and benches.
    const NAME: &'static str;

    /// Whether the backend can run here: `Err` saying what is missing (a
    /// device backend with no adapter), checked by the test suites before
    /// they run on it. Host backends always can (the default).
    fn available() -> Result<()> {
        Ok(())
    }
    /// The dtype of a storage.
    fn dtype(s: &Self::Storage) -> DType;
    /// Number of elements in a storage buffer.
    fn len(s: &Self::Storage) -> usize;
    /// Uploads host data.
    fn from_host(data: HostData) -> Self::Storage;
    /// Downloads the elements selected by `layout`, in row-major order
    /// (`Err` for a layout outside the storage or an impossible allocation).
    fn to_host(s: &Self::Storage, layout: &Layout) -> Result<HostData>;
    /// A contiguous storage of `shape` filled with `value`.
    fn full(shape: &Shape, value: f64, dtype: DType) -> Result<Self::Storage>;
    /// `shape.numel()` samples of `dist` drawn from `gen` in row-major order,
    /// stored as `dtype` (contiguous). A draw is a primitive, not an upload,
    /// so that a recording backend keeps it as an op and a replay draws
    /// fresh values from the same generator sequence. The default samples
    /// in f64 on the host, one value per element in order, and uploads.
    ///
    /// ```
    /// use autograd_core::{Backend, DType, Layout, RefBackend, Shape, rng::{Distribution, Generator}};
    /// let s = RefBackend::random(&Shape::from([3]), DType::F64, Distribution::Uniform, &mut Generator::new(1)).unwrap();
    /// let mut g = Generator::new(1);
    /// let want: Vec<f64> = (0..3).map(|_| g.uniform()).collect();
    /// assert_eq!(RefBackend::to_host(&s, &Layout::contiguous(Shape::from([3]))).unwrap().to_f64_vec(), want);
    /// ```
    fn random(shape: &Shape, dtype: DType, dist: crate::rng::Distribution, generator: &mut crate::rng::Generator) -> Result<Self::Storage> {
        let n = shape.try_numel("random")?;
        crate::memory::check_alloc("random", n, dtype.size_in_bytes())?;
        let mut v = crate::memory::try_with_capacity::<f64>("random", n)?;
        v.extend((0..n).map(|_| dist.sample(generator)));
        Ok(Self::from_host(HostData::from_f64(&v, dtype)))
    }
    /// Converts to another dtype (contiguous result).
    fn cast(s: &Self::Storage, layout: &Layout, dtype: DType) -> Result<Self::Storage>;
    /// Copies a strided view into a new contiguous storage.
    fn copy_strided(s: &Self::Storage, layout: &Layout) -> Result<Self::Storage>;

    /// Elementwise unary op.
    fn unary(op: UnaryOp, s: &Self::Storage, layout: &Layout) -> Result<Self::Storage>;
    /// Elementwise binary op; both layouts already have the output's shape
    /// (broadcasting is expressed with stride 0).
    fn binary(op: BinaryOp, a: &Self::Storage, la: &Layout, b: &Self::Storage, lb: &Layout) -> Result<Self::Storage>;
    /// `cond != 0 ? a : b`, all three layouts of the output's shape.
    fn where_select(
        cond: &Self::Storage,
        lc: &Layout,
        a: &Self::Storage,
        la: &Layout,
        b: &Self::Storage,
        lb: &Layout,
    ) -> Result<Self::Storage>;
    /// Reduces over `dims` (sorted, unique); the output keeps them as size 1.
    fn reduce(op: ReduceOp, s: &Self::Storage, layout: &Layout, dims: &[usize]) -> Result<Self::Storage>;
    /// Reduces over `dim` returning (values, I64 indices), both keeping `dim` as size 1.
    fn arg_reduce(op: ArgReduceOp, s: &Self::Storage, layout: &Layout, dim: usize) -> Result<(Self::Storage, Self::Storage)>;
    /// Batched matrix product: `la` is `[batch.., m, k]`, `lb` is `[batch.., k, n]`
    /// with identical batch dims (broadcast batches have stride 0); output `[batch.., m, n]`.
    fn matmul(a: &Self::Storage, la: &Layout, b: &Self::Storage, lb: &Layout) -> Result<Self::Storage>;
    /// `c + a @ b` (PyTorch's `addmm` with `beta = alpha = 1`, batched as
    /// [`Backend::matmul`]): `lc` has the output's shape, with stride 0 where
    /// `c` is broadcast (a bias row). The default runs `matmul`, then adds;
    /// a backend may fuse the add into the product (the CPU backend starts
    /// the GEMM from `c`, one pass over the output fewer).
    ///
    /// ```
    /// use autograd_core::{Backend, HostData, Layout, RefBackend, Shape};
    /// let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    /// let a = RefBackend::from_host(HostData::from(vec![1.0f64, 2.0]));
    /// let b = RefBackend::from_host(HostData::from(vec![3.0f64, 4.0]));
    /// let bias = RefBackend::from_host(HostData::from(vec![10.0f64, 20.0]));
    /// let lc = l(&[2]).broadcast_as(&Shape::from([2, 2])).unwrap();
    /// let y = RefBackend::addmm(&bias, &lc, &a, &l(&[2, 1]), &b, &l(&[1, 2])).unwrap();
    /// assert_eq!(RefBackend::to_host(&y, &l(&[2, 2])).unwrap(), HostData::from(vec![13.0, 24.0, 16.0, 28.0]));
    /// ```
    fn addmm(c: &Self::Storage, lc: &Layout, a: &Self::Storage, la: &Layout, b: &Self::Storage, lb: &Layout) -> Result<Self::Storage> {
        crate::validate::addmm(lc, la, lb, Self::dtype(a))?;
        let y = Self::matmul(a, la, b, lb)?;
        Self::binary(BinaryOp::Add, c, lc, &y, &Layout::contiguous(lc.shape().clone()))
    }
    /// [`Backend::matmul`] in the operands' dtype, each output rounded to
    /// it, then cast to `dtype`: the bits of `cast(matmul(a, b), dtype)`.
    /// `linear`'s weight gradient under autocast is one (a bf16 product
    /// widened for the f32 parameter, as PyTorch's `mm` then `ToCopy`
    /// backward). The default runs the two; a backend may write the cast
    /// values directly (the CPU backend widens a bf16 or f16 product in
    /// its own f32 output, so the low-precision product never lives whole
    /// beside it).
    ///
    /// ```
    /// use autograd_core::{Backend, DType, HostData, Layout, RefBackend, Shape};
    /// let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    /// let third = RefBackend::from_host(HostData::from(vec![1.0f32 / 3.0]).convert(DType::BF16));
    /// let y = RefBackend::matmul_cast(&third, &l(&[1, 1]), &third, &l(&[1, 1]), DType::F32).unwrap();
    /// // the bf16 product (0.1111...) rounded to bf16, then widened
    /// let want = half::bf16::from_f32(half::bf16::from_f32(1.0 / 3.0).to_f32().powi(2)).to_f32();
    /// assert_eq!(RefBackend::to_host(&y, &l(&[1, 1])).unwrap(), HostData::from(vec![want]));
    /// ```
    fn matmul_cast(a: &Self::Storage, la: &Layout, b: &Self::Storage, lb: &Layout, dtype: DType) -> Result<Self::Storage> {
        crate::validate::matmul(la, lb, Self::dtype(a))?;
        let y = Self::matmul(a, la, b, lb)?;
        let mut dims = la.dims().to_vec();
        if let (Some(last), Some(&n)) = (dims.last_mut(), lb.dims().last()) {
            *last = n;
        }
        Self::cast(&y, &Layout::contiguous(Shape::new(dims)), dtype)
    }
    /// `out[i][j] = x[i][idx[i][j]]` along `dim` (PyTorch's gather); `lidx` has the output's shape.
    fn gather(s: &Self::Storage, layout: &Layout, dim: usize, idx: &Self::Storage, lidx: &Layout) -> Result<Self::Storage>;
    /// A zero tensor of `shape` into which `src` is added at `idx` along `dim`
    /// (PyTorch's `zeros(shape).scatter_add_(dim, idx, src)`).
    fn scatter_add(
        shape: &Shape,
        dim: usize,
        idx: &Self::Storage,
        lidx: &Layout,
        src: &Self::Storage,
        lsrc: &Layout,
    ) -> Result<Self::Storage>;
    /// Writes `src` (viewed through `ls`) into the elements of `dst` selected
    /// by `ld` (same shape; `src` is converted to `dst`'s dtype). The only
    /// primitive that mutates: in-place ops and optimizers use it.
    fn assign(dst: &mut Self::Storage, ld: &Layout, src: &Self::Storage, ls: &Layout) -> Result<()>;
    /// Concatenates along `dim`.
    fn cat(parts: &[(&Self::Storage, &Layout)], dim: usize) -> Result<Self::Storage>;
    /// im2col (PyTorch's `F.unfold`, for any number of spatial dims): the
    /// `[N, C, *spatial]` image read through `layout` as contiguous
    /// `[N, C * K, L]` columns, `K` the window's elements and `L` its
    /// positions; row `c * K + k` holds kernel offset `k` (row-major over the
    /// kernel) of channel `c`, and taps in the padding read `pad_value`
    /// (0 for a convolution, -inf for max pooling).
    ///
    /// ```
    /// use autograd_core::{Backend, HostData, Layout, RefBackend, Shape, window::Window};
    /// let x = RefBackend::from_host(HostData::from(vec![1.0f64, 2.0, 3.0]));
    /// let w = Window::new("unfold", &[2], &[1], &[(1, 0)], &[1]).unwrap();
    /// let cols = RefBackend::unfold(&x, &Layout::contiguous(Shape::from([1, 1, 3])), &w, 0.0).unwrap();
    /// // positions at -1, 0, 1: taps (pad, 1), (1, 2), (2, 3)
    /// let l = Layout::contiguous(Shape::from([1, 2, 3]));
    /// assert_eq!(RefBackend::to_host(&cols, &l).unwrap(), HostData::from(vec![0.0, 1.0, 2.0, 1.0, 2.0, 3.0]));
    /// ```
    fn unfold(s: &Self::Storage, layout: &Layout, window: &crate::window::Window, pad_value: f64) -> Result<Self::Storage>;
    /// col2im (PyTorch's `F.fold`): the adjoint of [`Backend::unfold`] with
    /// zero padding. `[N, C * K, L]` columns read through `layout` become a
    /// contiguous `[N, C, *spatial]` image, each element the sum of the taps
    /// that read it; taps in the padding are dropped.
    ///
    /// ```
    /// use autograd_core::{Backend, HostData, Layout, RefBackend, Shape, window::Window};
    /// let cols = RefBackend::from_host(HostData::from(vec![1.0f64, 1.0, 1.0, 1.0, 1.0, 1.0]));
    /// let w = Window::new("fold", &[2], &[1], &[(1, 0)], &[1]).unwrap();
    /// let x = RefBackend::fold(&cols, &Layout::contiguous(Shape::from([1, 2, 3])), &w, &[3]).unwrap();
    /// // positions read (pad, 0), (0, 1), (1, 2): elements 0 and 1 twice, element 2 once
    /// assert_eq!(RefBackend::to_host(&x, &Layout::contiguous(Shape::from([1, 1, 3]))).unwrap(), HostData::from(vec![2.0, 2.0, 1.0]));
    /// ```
    fn fold(s: &Self::Storage, layout: &Layout, window: &crate::window::Window, spatial: &[usize]) -> Result<Self::Storage>;

    /// One fused in-place update of a parameter (an optimizer step, say):
    /// `param` and every buffer in `states` are contiguous storages of one
    /// length, `grad` is read through `lg`, `scalars` is the update's f64
    /// scalars buffer (step count, learning rate...), read and written
    /// through [`crate::fused_update::FusedUpdate::resolve`]. The default
    /// goes through host memory in f64
    /// ([`crate::fused_update::host_fallback`]); a backend overrides it with
    /// a native kernel, after the same [`crate::fused_update::check`].
    fn fused_update<U: crate::fused_update::FusedUpdate>(
        update: &U,
        param: &mut Self::Storage,
        grad: &Self::Storage,
        lg: &Layout,
        states: &mut [&mut Self::Storage],
        scalars: &mut Self::Storage,
    ) -> Result<()> {
        crate::fused_update::host_fallback::<Self, U>(update, param, grad, lg, states, scalars)
    }

    /// Runs a fused chain of elementwise ops ([`crate::fusion`]) over inputs
    /// of one shape and float dtype (broadcast through their layouts),
    /// returning the program's output registers as contiguous storages.
    /// The default runs each step as its own primitive
    /// ([`crate::fusion::unfused`]); a backend overrides it with a kernel
    /// that keeps the intermediates out of memory, giving the same bits.
    fn fused_elementwise(program: &crate::fusion::ElementwiseProgram, inputs: &[(&Self::Storage, &Layout)]) -> Result<Vec<Self::Storage>> {
        crate::fusion::unfused::<Self>(program, inputs)
    }

    /// Layer normalisation without its affine part: `(xhat, rstd)` with
    /// `xhat = (x - mean) * rstd` and `rstd = 1 / sqrt(var + eps)`, the mean
    /// and the biased variance taken over the trailing `k` dims. `xhat` is
    /// contiguous in the layout's shape, `rstd` contiguous in that shape with
    /// the trailing `k` dims set to 1. Composite here (the formula every
    /// backend follows); a backend may fuse it into one pass per row.
    ///
    /// ```
    /// use autograd_core::{Backend, HostData, Layout, RefBackend, Shape};
    /// let x = RefBackend::from_host(HostData::from(vec![1.0f64, 3.0, 10.0, 10.0]));
    /// let (xhat, rstd) = RefBackend::layer_norm(&x, &Layout::contiguous(Shape::from([2, 2])), 1, 0.0).unwrap();
    /// assert_eq!(RefBackend::to_host(&xhat, &Layout::contiguous(Shape::from([2, 2]))).unwrap().to_f64_vec()[..2], [-1.0, 1.0]);
    /// assert!(RefBackend::to_host(&rstd, &Layout::contiguous(Shape::from([2, 1]))).unwrap().to_f64_vec()[1].is_infinite());
    /// assert!(RefBackend::layer_norm(&x, &Layout::contiguous(Shape::from([4])), 2, 0.0).is_err());
    /// ```
    fn layer_norm(s: &Self::Storage, layout: &Layout, k: usize, eps: f64) -> Result<(Self::Storage, Self::Storage)> {
        composite::layer_norm::<Self>(s, layout, k, eps)
    }

    /// Softmax along `dim` (composite; a backend may fuse it).
    fn softmax(s: &Self::Storage, layout: &Layout, dim: usize) -> Result<Self::Storage> {
        composite::softmax::<Self>(s, layout, dim)
    }

    /// The gradient of [`Backend::layer_norm`]'s input given the gradient
    /// `g` of its `xhat` (the affine weight already applied), PyTorch's
    /// `native_layer_norm_backward` without the weight:
    /// `rstd (g - mean(g) - xhat mean(g xhat))`, the means over the
    /// trailing `k` dims (the mean and the variance depend on every element
    /// normalised with them). `g` and `xhat` share a shape; `rstd` is
    /// [`Backend::layer_norm`]'s, that shape with the trailing `k` dims 1.
    /// Returns a contiguous buffer of `g`'s shape. Composite here; a
    /// backend may fuse it into one pass per row.
    ///
    /// ```
    /// use autograd_core::{Backend, HostData, Layout, RefBackend, Shape};
    /// let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    /// let x = RefBackend::from_host(HostData::from(vec![1.0f64, 3.0]));
    /// let (xhat, rstd) = RefBackend::layer_norm(&x, &l(&[1, 2]), 1, 0.0).unwrap();
    /// // a gradient along xhat itself moves x only through the scale: none survives
    /// let dx = RefBackend::layer_norm_backward(&xhat, &l(&[1, 2]), &xhat, &l(&[1, 2]), &rstd, &l(&[1, 1]), 1).unwrap();
    /// assert_eq!(RefBackend::to_host(&dx, &l(&[1, 2])).unwrap().to_f64_vec(), vec![0.0, 0.0]);
    /// ```
    fn layer_norm_backward(
        g: &Self::Storage,
        lg: &Layout,
        xhat: &Self::Storage,
        lx: &Layout,
        rstd: &Self::Storage,
        lr: &Layout,
        k: usize,
    ) -> Result<Self::Storage> {
        composite::layer_norm_backward::<Self>(g, lg, xhat, lx, rstd, lr, k)
    }

    /// The gradient of a softmax's input along `dim` from its output `y`
    /// and the output's gradient `g`: `y (g - sum(g y))`; with `log`, of a
    /// log-softmax from its output: `g - exp(y) sum(g)`. Returns a
    /// contiguous buffer of the shape. Composite here; a backend may fuse it
    /// into one pass per row.
    ///
    /// ```
    /// use autograd_core::{Backend, HostData, Layout, RefBackend, Shape};
    /// let l = Layout::contiguous(Shape::from([2]));
    /// let y = RefBackend::from_host(HostData::from(vec![0.25f64, 0.75]));
    /// let g = RefBackend::from_host(HostData::from(vec![1.0f64, 0.0]));
    /// let dx = RefBackend::softmax_backward(&y, &l, &g, &l, 0, false).unwrap();
    /// assert_eq!(RefBackend::to_host(&dx, &l).unwrap().to_f64_vec(), vec![0.1875, -0.1875]);
    /// ```
    fn softmax_backward(y: &Self::Storage, ly: &Layout, g: &Self::Storage, lg: &Layout, dim: usize, log: bool) -> Result<Self::Storage> {
        composite::softmax_backward::<Self>(y, ly, g, lg, dim, log)
    }

    /// Scaled dot-product attention as one call
    /// ([`crate::attention`]): `inputs` are `q [..., L, E]`, `k [..., S, E]`,
    /// `v [..., S, Ev]` and optionally a mask `[..., L, S]` (`Bool`, `true`
    /// attends, or added to the scores), one batch (broadcast with stride
    /// 0), then, when `spec.dropout` is above zero, the dropout seed
    /// ([`crate::attention::Dropout`]). Returns `softmax(q k^T scale + mask) v`
    /// `[..., L, Ev]` (the weights dropped and rescaled first, with dropout)
    /// and each query's log-sum-exp of its scores `[..., L]` (`+inf`, and a
    /// zero output row, for a query that attends to no key). The default is the
    /// math path ([`crate::attention::forward`]); a backend fuses it into
    /// blocks that never hold a whole score matrix.
    ///
    /// ```
    /// use autograd_core::{Backend, HostData, Layout, RefBackend, Shape, attention::AttentionSpec};
    /// let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    /// let x = RefBackend::from_host(HostData::from(vec![1.0f64, 2.0]));
    /// let spec = AttentionSpec { scale: 1.0, causal: false, dropout: 0.0 };
    /// let (out, _) = RefBackend::attention(&[(&x, &l(&[1, 1])), (&x, &l(&[2, 1])), (&x, &l(&[2, 1]))], spec).unwrap();
    /// let w = 1.0 / (1.0 + 1f64.exp()); // weights e^1 : e^2
    /// assert!((RefBackend::to_host(&out, &l(&[1, 1])).unwrap().to_f64_vec()[0] - (w + 2.0 * (1.0 - w))).abs() < 1e-15);
    /// ```
    fn attention(inputs: &[(&Self::Storage, &Layout)], spec: crate::attention::AttentionSpec) -> Result<(Self::Storage, Self::Storage)> {
        crate::attention::forward::<Self>(inputs, spec)
    }

    /// The gradients `[dq, dk, dv]` of [`Backend::attention`] (each in its
    /// input's shape, batch dims unreduced): `inputs` are `q`, `k`, `v`,
    /// the forward's `out` and `lse`, the output's gradient, then the
    /// forward's mask if it had one and its dropout seed if it had dropout
    /// (the same mask is recomputed from it). The default recomputes the scores
    /// with the math path ([`crate::attention::backward`]).
    ///
    /// ```
    /// use autograd_core::{Backend, HostData, Layout, RefBackend, Shape, attention::AttentionSpec};
    /// let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    /// let x = RefBackend::from_host(HostData::from(vec![1.0f64, 2.0]));
    /// let spec = AttentionSpec { scale: 1.0, causal: true, dropout: 0.0 };
    /// let (q, kv) = ((&x, &l(&[2, 1])), (&x, &l(&[2, 1])));
    /// let (out, lse) = RefBackend::attention(&[q, kv, kv], spec).unwrap();
    /// let g = RefBackend::from_host(HostData::from(vec![1.0f64, 0.0]));
    /// let grads = RefBackend::attention_backward(&[q, kv, kv, (&out, &l(&[2, 1])), (&lse, &l(&[2])), (&g, &l(&[2, 1]))], spec).unwrap();
    /// // only query 0's output has a gradient, and it copies value 0: dv = [1, 0]
    /// assert_eq!(RefBackend::to_host(&grads[2], &l(&[2, 1])).unwrap().to_f64_vec(), vec![1.0, 0.0]);
    /// ```
    fn attention_backward(inputs: &[(&Self::Storage, &Layout)], spec: crate::attention::AttentionSpec) -> Result<Vec<Self::Storage>> {
        crate::attention::backward::<Self>(inputs, spec)
    }

    /// The scales an [`Backend::attention`] call with dropout `p` applied to
    /// its weights, `shape` `[batch.., L, S]` in `dtype` (0 where dropped,
    /// `1 / (1 - p)` where kept), from the call's `seed` (`F64`, `[2]`):
    /// the mask the fused kernels recompute, as a tensor for the math path
    /// that a `create_graph` backward differentiates. A primitive rather
    /// than a host computation, so a compiled step replays it from each
    /// replay's own seed. The default reads the seed back and builds the
    /// scales on the host ([`crate::attention::dropout_scales`]).
    ///
    /// ```
    /// use autograd_core::{Backend, DType, HostData, Layout, RefBackend, Shape};
    /// let seed = RefBackend::from_host(HostData::from(vec![0.25f64, 0.5]));
    /// let s = RefBackend::attention_dropout(&seed, &Layout::contiguous(Shape::from([2])), &Shape::from([3, 4]), 0.5, DType::F32).unwrap();
    /// let v = RefBackend::to_host(&s, &Layout::contiguous(Shape::from([3, 4]))).unwrap().to_f64_vec();
    /// assert!(v.iter().all(|&x| x == 0.0 || x == 2.0));
    /// ```
    fn attention_dropout(seed: &Self::Storage, lseed: &Layout, shape: &Shape, p: f64, dtype: DType) -> Result<Self::Storage> {
        crate::attention::dropout_scales::<Self>(seed, lseed, shape, p, dtype)
    }
}

/// The composite defaults of the fused primitives, written from the others;
/// a backend that overrides one for some dtypes calls these for the rest.
pub mod composite {
    use super::*;

    /// [`Backend::layer_norm`] from reductions and elementwise ops.
    pub fn layer_norm<B: Backend>(s: &B::Storage, layout: &Layout, k: usize, eps: f64) -> Result<(B::Storage, B::Storage)> {
        crate::validate::layer_norm("layer_norm", layout, k)?;
        let shape = layout.shape().clone();
        let r = shape.rank();
        let dims: Vec<usize> = (r - k..r).collect();
        let n: usize = dims.iter().map(|&d| shape.dims()[d]).product();
        let dtype = B::dtype(s);
        let mut kd = shape.dims().to_vec();
        for &d in &dims {
            kd[d] = 1;
        }
        let kshape = Shape::new(kd);
        let (out, lkc) = (Layout::contiguous(shape.clone()), Layout::contiguous(kshape.clone()));
        let lk = lkc.broadcast_as(&shape)?;
        let scalar = |v: f64| -> Result<(B::Storage, Layout)> {
            Ok((B::full(&Shape::scalar(), v, dtype)?, Layout::contiguous(Shape::scalar()).broadcast_as(&kshape)?))
        };
        let (count, lcount) = scalar(n as f64)?;
        let mean = B::binary(BinaryOp::Div, &B::reduce(ReduceOp::Sum, s, layout, &dims)?, &lkc, &count, &lcount)?;
        let xc = B::binary(BinaryOp::Sub, s, layout, &mean, &lk)?;
        let sq = B::binary(BinaryOp::Mul, &xc, &out, &xc, &out)?;
        let var = B::binary(BinaryOp::Div, &B::reduce(ReduceOp::Sum, &sq, &out, &dims)?, &lkc, &count, &lcount)?;
        let (e, le) = scalar(eps)?;
        let std = B::unary(UnaryOp::Sqrt, &B::binary(BinaryOp::Add, &var, &lkc, &e, &le)?, &lkc)?;
        let rstd = B::unary(UnaryOp::Recip, &std, &lkc)?;
        let xhat = B::binary(BinaryOp::Mul, &xc, &out, &rstd, &lk)?;
        Ok((xhat, rstd))
    }

    /// [`Backend::layer_norm_backward`] from reductions and elementwise ops.
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm_backward<B: Backend>(
        g: &B::Storage,
        lg: &Layout,
        xhat: &B::Storage,
        lx: &Layout,
        rstd: &B::Storage,
        lr: &Layout,
        k: usize,
    ) -> Result<B::Storage> {
        let dtype = B::dtype(g);
        crate::validate::layer_norm_backward(lg, lx, lr, k, dtype)?;
        let shape = lg.shape().clone();
        let r = shape.rank();
        let dims: Vec<usize> = (r - k..r).collect();
        let n: usize = shape.dims()[r - k..].iter().product();
        let out = Layout::contiguous(shape.clone());
        let kshape = lr.shape().clone();
        let lkc = Layout::contiguous(kshape.clone());
        let lk = lkc.broadcast_as(&shape)?;
        let (count, lcount) = (B::full(&Shape::scalar(), n as f64, dtype)?, Layout::contiguous(Shape::scalar()).broadcast_as(&kshape)?);
        let mean = |s: &B::Storage, l: &Layout| -> Result<B::Storage> {
            B::binary(BinaryOp::Div, &B::reduce(ReduceOp::Sum, s, l, &dims)?, &lkc, &count, &lcount)
        };
        let m1 = mean(g, lg)?;
        let gx = B::binary(BinaryOp::Mul, g, lg, xhat, lx)?;
        let m2 = mean(&gx, &out)?;
        let centred = B::binary(BinaryOp::Sub, g, lg, &m1, &lk)?;
        let along = B::binary(BinaryOp::Mul, xhat, lx, &m2, &lk)?;
        let diff = B::binary(BinaryOp::Sub, &centred, &out, &along, &out)?;
        B::binary(BinaryOp::Mul, &diff, &out, rstd, &lr.broadcast_as(&shape)?)
    }

    /// [`Backend::softmax_backward`] from a product, a sum and a difference.
    pub fn softmax_backward<B: Backend>(
        y: &B::Storage,
        ly: &Layout,
        g: &B::Storage,
        lg: &Layout,
        dim: usize,
        log: bool,
    ) -> Result<B::Storage> {
        crate::validate::softmax_backward(ly, lg, dim, B::dtype(g))?;
        let shape = ly.shape().clone();
        let out = Layout::contiguous(shape.clone());
        let mut kd = shape.dims().to_vec();
        kd[dim] = 1;
        let lk = Layout::contiguous(Shape::new(kd)).broadcast_as(&shape)?;
        if log {
            let sum = B::reduce(ReduceOp::Sum, g, lg, &[dim])?;
            let p = B::unary(UnaryOp::Exp, y, ly)?;
            let scaled = B::binary(BinaryOp::Mul, &p, &out, &sum, &lk)?;
            return B::binary(BinaryOp::Sub, g, lg, &scaled, &out);
        }
        let gy = B::binary(BinaryOp::Mul, g, lg, y, ly)?;
        let dot = B::reduce(ReduceOp::Sum, &gy, &out, &[dim])?;
        let centred = B::binary(BinaryOp::Sub, g, lg, &dot, &lk)?;
        B::binary(BinaryOp::Mul, y, ly, &centred, &out)
    }

    /// [`Backend::softmax`] from a max, an exp and a sum.
    pub fn softmax<B: Backend>(s: &B::Storage, layout: &Layout, dim: usize) -> Result<B::Storage> {
        let shape = layout.shape().clone();
        let out = Layout::contiguous(shape.clone());
        let max = B::reduce(ReduceOp::Max, s, layout, &[dim])?;
        let mut kd = shape.dims().to_vec();
        kd[dim] = 1;
        let lmax = Layout::contiguous(Shape::new(kd.clone())).broadcast_as(&shape)?;
        let shifted = B::binary(BinaryOp::Sub, s, layout, &max, &lmax)?;
        let e = B::unary(UnaryOp::Exp, &shifted, &out)?;
        let sum = B::reduce(ReduceOp::Sum, &e, &out, &[dim])?;
        let lsum = Layout::contiguous(Shape::new(kd)).broadcast_as(&shape)?;
        B::binary(BinaryOp::Div, &e, &out, &sum, &lsum)
    }
}
