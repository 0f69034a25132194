//! # autograd-cpu
//!
//! The fast CPU backend. Storage is the host buffer shared with the
//! reference backend ([`autograd_core::HostStorage`], counted by the memory
//! accounting); kernels walk strided layouts in coalesced runs, split work
//! over the rayon pool above [`PAR_MIN_ELEMS`] elements, and multiply
//! matrices with the cache-blocked, runtime-dispatched SIMD kernels of the
//! `gemm` crate, passing strides so transposed operands are never copied.
//!
//! ```
//! use autograd_core::{Backend, HostData, Layout, Shape};
//! use autograd_cpu::Cpu;
//! let a = Cpu::from_host(HostData::from(vec![1.0f32, 2.0, 3.0, 4.0]));
//! let l = Layout::contiguous(Shape::from([2, 2]));
//! let c = Cpu::matmul(&a, &l, &a, &l.transpose(0, 1).unwrap()).unwrap();
//! assert_eq!(Cpu::to_host(&c, &l).unwrap().to_f64_vec(), vec![5.0, 11.0, 11.0, 25.0]);
//! ```

mod attention;
mod cast;
mod elementwise;
mod fused;
mod fusion;
mod index;
mod low_elementwise;
pub mod matmul;
mod norm;
mod reduce;
pub mod simd;
mod softmax;
mod strided;
mod transpose;
mod window;

use autograd_core::attention::{AttentionSizes, AttentionSpec, Dropout, split_dropout};
use autograd_core::dispatch::index_values;
use autograd_core::low_precision::{self, through_f32};
use autograd_core::reference::binary_dtype_error;
use autograd_core::{
    ArgReduceOp, Backend, BinaryOp, DType, Element, Error, HostData, HostStorage, Layout, ReduceOp, Result, Shape, UnaryOp, validate,
    with_any, with_dtype, with_float, with_pair,
};
use half::{bf16, f16};

/// Memory-bound kernels (add, mul, copies, reductions) use the rayon pool
/// only from this many elements on. Measured on the 2-core machine
/// (`elementwise` bench, `benches/README.md`): waking the pool costs about
/// 20 us, and a sequential f32 add streams 6 G elements/s, so splitting an
/// add only pays past ~256K elements, and even then little (both cores
/// share the memory bandwidth).
pub const PAR_MIN_ELEMS: usize = 1 << 19;

/// Compute-bound kernels (exp, log, tanh, sigmoid, pow) use the pool from
/// this many elements on: a sequential f32 `exp` runs at ~300 M elements/s,
/// and two cores win from ~16K elements (55 us vs 42 us measured).
pub const PAR_MIN_ELEMS_HEAVY: usize = 1 << 14;

/// Every input of an attention call inside its storage, then the call's
/// own checks (`check` is the forward's or the backward's).
fn attention_checks(
    inputs: &[(&HostStorage, &Layout)],
    check: fn(&[&Layout], &[DType]) -> Result<autograd_core::attention::AttentionSizes>,
) -> Result<autograd_core::attention::AttentionSizes> {
    for (s, l) in inputs {
        validate::input("attention", s.len(), l)?;
    }
    let layouts: Vec<&Layout> = inputs.iter().map(|(_, l)| *l).collect();
    let dtypes: Vec<DType> = inputs.iter().map(|(s, _)| s.dtype()).collect();
    check(&layouts, &dtypes)
}

/// The kernel's view of `q` (already typed), `k`, `v` (inputs 1 and 2) and
/// the mask, input `mask_at` when there is one: elements `S` read as `T`.
fn attention_operands<'a, S: Element + attention::Source<T>, T: autograd_core::scalar::FloatElem>(
    inputs: &[(&'a HostStorage, &'a Layout)],
    q: &'a [S],
    mask_at: usize,
    z: &autograd_core::attention::AttentionSizes,
    spec: AttentionSpec,
    op: &'static str,
) -> Result<attention::Operands<'a, S, T>> {
    Ok(attention::Operands::new(
        (q, inputs[0].1),
        (typed::<S>(inputs[1].0, op)?, inputs[1].1),
        (typed::<S>(inputs[2].0, op)?, inputs[2].1),
        inputs.get(mask_at).map(|m| m.1),
        z,
        spec.scale,
    ))
}

/// The f32 kernel's call on f16/bf16 operands `L` read as they are
/// (`attention::Source`): its f32 results ([`attention_kernel_forward`]
/// or [`attention_kernel_backward`]).
type LowAttention<L> = fn(&[(&HostStorage, &Layout)], &[L], &AttentionSizes, AttentionSpec, Option<Dropout>) -> Result<Vec<Vec<f32>>>;

/// An f16/bf16 attention call (`run` for its dtype) with each f32 result
/// rounded once: the bits of the f32 kernel on the inputs widened, without
/// whole f32 copies of them (an additive mask too is read as it is).
/// `None` for other dtypes.
fn low_attention(
    inputs: &[(&HostStorage, &Layout)],
    (z, spec, dropout): (&AttentionSizes, AttentionSpec, Option<Dropout>),
    run: (LowAttention<bf16>, LowAttention<f16>),
) -> Option<Result<Vec<HostStorage>>> {
    Some(match inputs[0].0 {
        HostStorage::BF16(q) => run.0(inputs, q, z, spec, dropout).map(|o| o.iter().map(|v| cast::rounded::<bf16>(v).into()).collect()),
        HostStorage::F16(q) => run.1(inputs, q, z, spec, dropout).map(|o| o.iter().map(|v| cast::rounded::<f16>(v).into()).collect()),
        _ => return None,
    })
}

/// The CPU kernel's forward on elements `S` read as `T`: `[out, lse]` in
/// `T` (the mask, when there is one, is `Bool` or of the operands' dtype,
/// read as `T` too).
fn attention_kernel_forward<S: Element + attention::Source<T>, T: Element + autograd_core::scalar::FloatElem>(
    inputs: &[(&HostStorage, &Layout)],
    q: &[S],
    z: &AttentionSizes,
    spec: AttentionSpec,
    dropout: Option<Dropout>,
) -> Result<Vec<Vec<T>>> {
    let ops = attention_operands::<S, T>(inputs, q, 3, z, spec, "attention")?;
    let (out, lse) = attention::forward(&ops, *z, spec, attention_mask::<S>(inputs.get(3))?, dropout);
    Ok(vec![out, lse])
}

/// The CPU kernel's backward on elements `S` read as `T`: `[dq, dk, dv]`.
fn attention_kernel_backward<S: Element + attention::Source<T>, T: Element + autograd_core::scalar::FloatElem>(
    inputs: &[(&HostStorage, &Layout)],
    q: &[S],
    z: &AttentionSizes,
    spec: AttentionSpec,
    dropout: Option<Dropout>,
) -> Result<Vec<Vec<T>>> {
    let f = |k: usize| typed::<S>(inputs[k].0, "attention_backward");
    let ops = attention_operands::<S, T>(inputs, q, 6, z, spec, "attention_backward")?;
    let g = attention::Grads::new((f(3)?, inputs[3].1), (f(4)?, inputs[4].1), (f(5)?, inputs[5].1), z);
    let (dq, dk, dv) = attention::backward(&ops, &g, *z, spec, attention_mask::<S>(inputs.get(6))?, dropout);
    Ok(vec![dq, dk, dv])
}

/// [`Backend::attention`] on the inputs without the dropout seed.
fn attention_forward(
    inputs: &[(&HostStorage, &Layout)],
    spec: AttentionSpec,
    dropout: Option<Dropout>,
) -> Result<(HostStorage, HostStorage)> {
    let z = attention_checks(inputs, autograd_core::attention::check_forward)?;
    let run = (attention_kernel_forward::<bf16, f32> as LowAttention<bf16>, attention_kernel_forward::<f16, f32> as LowAttention<f16>);
    if let Some(r) = low_attention(inputs, (&z, spec, dropout), run) {
        return r.map(|mut o| {
            let lse = o.pop().expect("two outputs");
            (o.pop().expect("two outputs"), lse)
        });
    }
    with_float!(inputs[0].0, "attention", |q: T| {
        let mut o = attention_kernel_forward::<T, T>(inputs, q, &z, spec, dropout)?;
        let lse = o.pop().expect("two outputs");
        Ok((o.pop().expect("two outputs").into(), lse.into()))
    })
}

/// [`Backend::attention_backward`] on the inputs without the dropout seed.
fn attention_backward(inputs: &[(&HostStorage, &Layout)], spec: AttentionSpec, dropout: Option<Dropout>) -> Result<Vec<HostStorage>> {
    let z = attention_checks(inputs, autograd_core::attention::check_backward)?;
    let run = (attention_kernel_backward::<bf16, f32> as LowAttention<bf16>, attention_kernel_backward::<f16, f32> as LowAttention<f16>);
    if let Some(r) = low_attention(inputs, (&z, spec, dropout), run) {
        return r;
    }
    with_float!(inputs[0].0, "attention_backward", |q: T| {
        Ok(attention_kernel_backward::<T, T>(inputs, q, &z, spec, dropout)?.into_iter().map(Into::into).collect())
    })
}

/// The elements of a storage checked to be of dtype `T`.
fn typed<'a, T: Element>(s: &'a HostStorage, op: &'static str) -> Result<&'a [T]> {
    T::buffer(s).map(|b| &b[..]).ok_or(Error::DTypeMismatch { op, lhs: T::DTYPE, rhs: s.dtype() })
}

/// The mask argument of an attention call, as the kernel reads it.
fn attention_mask<'a, T: Element>(mask: Option<&(&'a HostStorage, &'a Layout)>) -> Result<attention::Mask<'a, T>> {
    Ok(match mask {
        None => attention::Mask::None,
        Some((HostStorage::Bool(b), _)) => attention::Mask::Bool(b),
        Some((s, _)) => attention::Mask::Add(typed::<T>(s, "attention")?),
    })
}

/// The fast CPU backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu;

/// Every kernel below starts here: the layout fits its storage
/// ([`Layout::check_storage`]) and an output of the layout's shape can be
/// allocated. The kernels index (and the GEMM call offsets raw pointers)
/// only within what this proved.
/// Whether `l` views its whole `len`-element buffer in row-major order.
fn whole(l: &Layout, len: usize) -> bool {
    l.is_contiguous() && l.offset() == 0 && l.numel() == len
}

/// The elements of a view in row-major order: the buffer itself when the
/// view is all of it, else a dense copy.
fn dense_view<'a, T: Copy + Send + Sync + Default + 'static>(v: &'a [T], l: &Layout) -> std::borrow::Cow<'a, [T]> {
    if whole(l, v.len()) { std::borrow::Cow::Borrowed(v) } else { std::borrow::Cow::Owned(elementwise::copy_strided(v, l)) }
}

fn check_len(s: &HostStorage, l: &Layout, op: &'static str) -> Result<()> {
    validate::input(op, s.len(), l)?;
    validate::output(op, l.shape(), s.dtype()).map(|_| ())
}

impl Backend for Cpu {
    type Storage = HostStorage;
    const NAME: &'static str = "cpu";

    fn dtype(s: &HostStorage) -> DType {
        s.dtype()
    }
    fn len(s: &HostStorage) -> usize {
        s.len()
    }
    fn from_host(data: HostData) -> HostStorage {
        data.into()
    }
    fn to_host(s: &HostStorage, layout: &Layout) -> Result<HostData> {
        check_len(s, layout, "to_host")?;
        Ok(with_any!(HostStorage: s, |v: T| elementwise::copy_strided(v, layout).into()))
    }
    fn full(shape: &Shape, value: f64, dtype: DType) -> Result<HostStorage> {
        let n = validate::output("full", shape, dtype)?;
        use autograd_core::memory::try_filled as fill;
        Ok(with_dtype!(dtype, |T| fill("full", n, <T as Element>::from_f64(value))?.into()))
    }
    fn cast(s: &HostStorage, layout: &Layout, dtype: DType) -> Result<HostStorage> {
        check_len(s, layout, "to_dtype")?;
        validate::output("to_dtype", layout.shape(), dtype)?;
        Ok(match (s, dtype) {
            (HostStorage::F32(v), DType::F64) => {
                elementwise::copy_strided(v, layout).into_iter().map(|x| x as f64).collect::<Vec<_>>().into()
            }
            (HostStorage::F64(v), DType::F32) => {
                elementwise::copy_strided(v, layout).into_iter().map(|x| x as f32).collect::<Vec<_>>().into()
            }
            // autocast's casts: widened or rounded in vectorised runs over
            // the pool (reading the buffer in place when the view is all
            // of it), the reference backend's bits
            (HostStorage::F32(v), DType::BF16) => cast::rounded::<bf16>(&dense_view(v, layout)).into(),
            (HostStorage::F32(v), DType::F16) => cast::rounded::<f16>(&dense_view(v, layout)).into(),
            (HostStorage::BF16(v), DType::F32) => cast::widened(&dense_view(v, layout)).into(),
            (HostStorage::F16(v), DType::F32) => cast::widened(&dense_view(v, layout)).into(),
            _ => Self::to_host(s, layout)?.convert(dtype).into(),
        })
    }
    fn copy_strided(s: &HostStorage, layout: &Layout) -> Result<HostStorage> {
        check_len(s, layout, "contiguous")?;
        Ok(with_any!(HostStorage: s, |v: T| elementwise::copy_strided(v, layout).into()))
    }
    fn unary(op: UnaryOp, s: &HostStorage, layout: &Layout) -> Result<HostStorage> {
        check_len(s, layout, "unary")?;
        if let Some(r) = low_elementwise::unary(op, s, layout) {
            return Ok(r);
        }
        with_float!(s, "unary", |v: T| Ok(elementwise::unary::<T>(op, v, layout).into()))
    }
    fn binary(op: BinaryOp, a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout) -> Result<HostStorage> {
        validate::same_shape("binary", la, lb)?;
        check_len(a, la, "binary")?;
        check_len(b, lb, "binary")?;
        if let Some(r) = low_elementwise::binary(op, a, la, b, lb) {
            return Ok(r);
        }
        match (a, b) {
            (HostStorage::F32(x), HostStorage::F32(y)) => Ok(elementwise::binary(op, x, la, y, lb).into()),
            (HostStorage::F64(x), HostStorage::F64(y)) => Ok(elementwise::binary(op, x, la, y, lb).into()),
            // Integer arithmetic is for indices and counters, not hot loops:
            // the reference loop is the one implementation.
            (HostStorage::I64(_), HostStorage::I64(_)) => autograd_core::RefBackend::binary(op, a, la, b, lb),
            _ => Err(binary_dtype_error(a.dtype(), b.dtype())),
        }
    }
    fn where_select(c: &HostStorage, lc: &Layout, a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout) -> Result<HostStorage> {
        validate::same_shape("where", lc, la)?;
        validate::same_shape("where", lc, lb)?;
        check_len(c, lc, "where")?;
        check_len(a, la, "where")?;
        check_len(b, lb, "where")?;
        if let Some(r) = through_f32(&[a, b], |w| Self::where_select(c, lc, w[0], la, w[1], lb)) {
            return r;
        }
        if let Some(wc) = low_precision::widen(c) {
            return Self::where_select(&wc, lc, a, la, b, lb);
        }
        macro_rules! sel {
            ($cv:expr, $pred:expr) => {
                match (a, b) {
                    (HostStorage::F32(x), HostStorage::F32(y)) => Ok(elementwise::where_select($pred, $cv, lc, x, la, y, lb).into()),
                    (HostStorage::F64(x), HostStorage::F64(y)) => Ok(elementwise::where_select($pred, $cv, lc, x, la, y, lb).into()),
                    (HostStorage::I64(x), HostStorage::I64(y)) => Ok(elementwise::where_select($pred, $cv, lc, x, la, y, lb).into()),
                    (HostStorage::Bool(x), HostStorage::Bool(y)) => Ok(elementwise::where_select($pred, $cv, lc, x, la, y, lb).into()),
                    _ => Err(Error::DTypeMismatch { op: "where", lhs: a.dtype(), rhs: b.dtype() }),
                }
            };
        }
        match c {
            HostStorage::F32(cv) => sel!(cv, |x: f32| x != 0.0),
            HostStorage::F64(cv) => sel!(cv, |x: f64| x != 0.0),
            HostStorage::I64(cv) => sel!(cv, |x: i64| x != 0),
            HostStorage::Bool(cv) => sel!(cv, |x: bool| x),
            other => {
                Err(Error::UnsupportedDType { op: "where", dtype: other.dtype(), hint: "the condition must be Bool, F32, F64 or I64" })
            }
        }
    }
    fn reduce(op: ReduceOp, s: &HostStorage, layout: &Layout, dims: &[usize]) -> Result<HostStorage> {
        validate::input("reduce", s.len(), layout)?;
        validate::reduce_dims("reduce", layout.rank(), dims)?;
        validate::reduce_output("reduce", layout, dims, s.dtype())?;
        // a bf16 column reduction (Linear's bias gradient under autocast)
        // widens each element as it reads it: the bits of the widened
        // copy's reduction, without the copy (f16 takes the copy: its
        // per-element conversion is slower than the vectorised one)
        if let HostStorage::BF16(v) = s
            && let Some(wide) = reduce::low_columns(op, v, layout, dims, |x| x.to_f32())
        {
            return Ok(low_precision::from_f32(&wide, DType::BF16));
        }
        if let Some(r) = through_f32(&[s], |w| Self::reduce(op, w[0], layout, dims)) {
            return r;
        }
        if let HostStorage::I64(_) = s {
            // integer reductions count and index: the reference loop is the one implementation
            return autograd_core::RefBackend::reduce(op, s, layout, dims);
        }
        with_float!(s, "reduce", |v: T| Ok(reduce::reduce::<T>(op, v, layout, dims).into()))
    }
    fn layer_norm(s: &HostStorage, layout: &Layout, k: usize, eps: f64) -> Result<(HostStorage, HostStorage)> {
        validate::input("layer_norm", s.len(), layout)?;
        validate::output("layer_norm", layout.shape(), s.dtype())?;
        if let Some(r) = through_f32(&[s], |w| Self::layer_norm(w[0], layout, k, eps)) {
            return r;
        }
        with_float!(s, "layer_norm", |v: T| {
            let (xhat, rstd) = norm::layer_norm::<T>(v, layout, k, eps)?;
            Ok((xhat.into(), rstd.into()))
        })
    }
    fn softmax(s: &HostStorage, layout: &Layout, dim: usize) -> Result<HostStorage> {
        validate::input("softmax", s.len(), layout)?;
        validate::reduce_dims("softmax", layout.rank(), &[dim])?;
        validate::output("softmax", layout.shape(), s.dtype())?;
        if let Some(r) = through_f32(&[s], |w| Self::softmax(w[0], layout, dim)) {
            return r;
        }
        with_float!(s, "softmax", |v: T| Ok(softmax::softmax::<T>(v, layout, dim)?.into()))
    }
    fn layer_norm_backward(
        g: &HostStorage,
        lg: &Layout,
        xhat: &HostStorage,
        lx: &Layout,
        rstd: &HostStorage,
        lr: &Layout,
        k: usize,
    ) -> Result<HostStorage> {
        const OP: &str = "layer_norm_backward";
        for (s, l) in [(g, lg), (xhat, lx), (rstd, lr)] {
            validate::input(OP, s.len(), l)?;
        }
        validate::layer_norm_backward(lg, lx, lr, k, g.dtype())?;
        if let Some(r) = through_f32(&[g, xhat, rstd], |w| Self::layer_norm_backward(w[0], lg, w[1], lx, w[2], lr, k)) {
            return r;
        }
        with_float!(g, OP, |gv: T| Ok(norm::layer_norm_backward::<T>(gv, lg, typed(xhat, OP)?, lx, typed(rstd, OP)?, lr, k).into()))
    }
    fn softmax_backward(y: &HostStorage, ly: &Layout, g: &HostStorage, lg: &Layout, dim: usize, log: bool) -> Result<HostStorage> {
        const OP: &str = "softmax_backward";
        validate::input(OP, y.len(), ly)?;
        validate::input(OP, g.len(), lg)?;
        validate::softmax_backward(ly, lg, dim, g.dtype())?;
        if let Some(r) = through_f32(&[y, g], |w| Self::softmax_backward(w[0], ly, w[1], lg, dim, log)) {
            return r;
        }
        with_float!(g, OP, |gv: T| Ok(softmax::softmax_backward::<T>(typed(y, OP)?, ly, gv, lg, dim, log)?.into()))
    }
    fn attention(inputs: &[(&HostStorage, &Layout)], spec: AttentionSpec) -> Result<(HostStorage, HostStorage)> {
        let (inputs, dropout) = split_dropout::<Self>(inputs, spec, "attention")?;
        attention_forward(inputs, spec, dropout)
    }
    fn attention_backward(inputs: &[(&HostStorage, &Layout)], spec: AttentionSpec) -> Result<Vec<HostStorage>> {
        let (inputs, dropout) = split_dropout::<Self>(inputs, spec, "attention_backward")?;
        attention_backward(inputs, spec, dropout)
    }
    fn arg_reduce(op: ArgReduceOp, s: &HostStorage, layout: &Layout, dim: usize) -> Result<(HostStorage, HostStorage)> {
        validate::input("max/min", s.len(), layout)?;
        validate::arg_reduce("max/min", layout, dim)?;
        // the values are gathered into a row-major copy first
        validate::output("max/min", layout.shape(), s.dtype())?;
        if let Some(r) = through_f32(&[s], |w| Self::arg_reduce(op, w[0], layout, dim)) {
            return r;
        }
        if let HostStorage::I64(_) = s {
            return autograd_core::RefBackend::arg_reduce(op, s, layout, dim);
        }
        with_float!(s, "max/min", |v: T| {
            let (vals, idx) = reduce::arg_reduce::<T>(op, v, layout, dim);
            Ok((vals.into(), idx.into()))
        })
    }
    fn matmul(a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout) -> Result<HostStorage> {
        // The GEMM kernel offsets raw pointers by these layouts: both are
        // proven inside their storages, and the shapes consistent, here.
        validate::input("matmul", a.len(), la)?;
        validate::input("matmul", b.len(), lb)?;
        validate::matmul(la, lb, a.dtype())?;
        if let Some(r) = matmul::low_precision(a, la, b, lb, None) {
            return r;
        }
        match (a, b) {
            (HostStorage::F32(x), HostStorage::F32(y)) => Ok(matmul::matmul(x, la, y, lb, None).into()),
            (HostStorage::F64(x), HostStorage::F64(y)) => Ok(matmul::matmul(x, la, y, lb, None).into()),
            _ => Err(binary_dtype_error(a.dtype(), b.dtype())),
        }
    }
    fn matmul_cast(a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout, dtype: DType) -> Result<HostStorage> {
        // an f16/bf16 product widened (a weight gradient under autocast):
        // written into its f32 output and widened there; else the product, then the cast
        validate::input("matmul_cast", a.len(), la)?;
        validate::input("matmul_cast", b.len(), lb)?;
        validate::matmul(la, lb, a.dtype())?;
        let mut dims = la.dims().to_vec();
        dims[la.rank() - 1] = lb.dims()[lb.rank() - 1];
        let out = Layout::contiguous(Shape::new(dims));
        validate::output("matmul_cast", out.shape(), dtype)?;
        if dtype == DType::F32
            && let Some(v) = matmul::low_precision_widened(a, la, b, lb)
        {
            return Ok(v.into());
        }
        Self::cast(&Self::matmul(a, la, b, lb)?, &out, dtype)
    }
    fn addmm(c: &HostStorage, lc: &Layout, a: &HostStorage, la: &Layout, b: &HostStorage, lb: &Layout) -> Result<HostStorage> {
        // As `matmul`, and `lc` (read while the output is initialised)
        // inside its storage with the output's shape.
        validate::input("addmm", a.len(), la)?;
        validate::input("addmm", b.len(), lb)?;
        validate::input("addmm", c.len(), lc)?;
        validate::addmm(lc, la, lb, a.dtype())?;
        if let Some(r) = matmul::low_precision(a, la, b, lb, Some((c, lc))) {
            return r;
        }
        match (a, b, c) {
            (HostStorage::F32(x), HostStorage::F32(y), HostStorage::F32(z)) => Ok(matmul::matmul(x, la, y, lb, Some((z, lc))).into()),
            (HostStorage::F64(x), HostStorage::F64(y), HostStorage::F64(z)) => Ok(matmul::matmul(x, la, y, lb, Some((z, lc))).into()),
            _ if a.dtype() != b.dtype() => Err(binary_dtype_error(a.dtype(), b.dtype())),
            _ => Err(binary_dtype_error(a.dtype(), c.dtype())),
        }
    }
    fn gather(s: &HostStorage, layout: &Layout, dim: usize, idx: &HostStorage, lidx: &Layout) -> Result<HostStorage> {
        validate::input("gather", s.len(), layout)?;
        check_len(idx, lidx, "gather")?;
        validate::gather(layout, dim, lidx, s.dtype())?;
        if let Some(rows) = index::slice_index(idx, lidx, dim) {
            return Ok(with_any!(HostStorage: s, |v: T| index::gather_slices(v, layout, dim, &rows, lidx.shape())?.into()));
        }
        let iv = index_values(idx, lidx, "gather")?;
        let sh = lidx.shape();
        Ok(with_any!(HostStorage: s, |v: T| index::gather(v, layout, dim, &iv, sh)?.into()))
    }
    fn scatter_add(shape: &Shape, dim: usize, idx: &HostStorage, lidx: &Layout, src: &HostStorage, lsrc: &Layout) -> Result<HostStorage> {
        check_len(idx, lidx, "scatter_add")?;
        check_len(src, lsrc, "scatter_add")?;
        validate::scatter_add(shape, dim, lidx, lsrc, src.dtype())?;
        if let Some(r) = through_f32(&[src], |w| Self::scatter_add(shape, dim, idx, lidx, w[0], lsrc)) {
            return r;
        }
        if let Some(rows) = index::slice_index(idx, lidx, dim) {
            return with_float!(src, "scatter_add", |v: T| Ok(index::scatter_add_slices::<T>(shape, dim, &rows, v, lsrc)?.into()));
        }
        let iv = index_values(idx, lidx, "scatter_add")?;
        with_float!(src, "scatter_add", |v: T| Ok(index::scatter_add::<T>(shape, dim, &iv, lidx.shape(), v, lsrc)?.into()))
    }
    fn assign(dst: &mut HostStorage, ld: &Layout, src: &HostStorage, ls: &Layout) -> Result<()> {
        validate::same_shape("assign", ld, ls)?;
        validate::input("assign", dst.len(), ld)?;
        check_len(src, ls, "assign")?;
        if dst.dtype() != src.dtype() {
            let conv: HostStorage = Self::to_host(src, ls)?.convert(dst.dtype()).into();
            return Self::assign(dst, ld, &conv, &Layout::contiguous(ls.shape().clone()));
        }
        with_pair!(HostStorage: dst, HostStorage: src, |d, s: T| elementwise::assign(d, ld, s, ls), else ());
        Ok(())
    }
    fn fused_update<U: autograd_core::fused_update::FusedUpdate>(
        update: &U,
        param: &mut HostStorage,
        grad: &HostStorage,
        lg: &Layout,
        states: &mut [&mut HostStorage],
        scalars: &mut HostStorage,
    ) -> Result<()> {
        fused::fused_update(update, param, grad, lg, states, scalars)
    }
    fn fused_elementwise(
        program: &autograd_core::fusion::ElementwiseProgram,
        inputs: &[(&HostStorage, &Layout)],
    ) -> Result<Vec<HostStorage>> {
        program.check::<Self>(inputs)?;
        // f16/bf16 programs run op by op: each step rounds as the eager op does
        if inputs.iter().any(|(s, _)| s.dtype().is_low_precision()) {
            return autograd_core::fusion::unfused::<Self>(program, inputs);
        }
        fusion::fused_elementwise(program, inputs)
    }
    fn cat(parts: &[(&HostStorage, &Layout)], dim: usize) -> Result<HostStorage> {
        let shapes: Vec<&Shape> = parts.iter().map(|(_, l)| l.shape()).collect();
        let dtype = parts.first().map_or(DType::F32, |p| p.0.dtype());
        validate::cat(&shapes, dim, dtype)?;
        for (s, l) in parts {
            validate::input("cat", s.len(), l)?;
        }
        with_dtype!(dtype, |T| {
            let mut typed = Vec::with_capacity(parts.len());
            for (s, l) in parts {
                match T::buffer(s) {
                    Some(v) => typed.push((&v[..], *l)),
                    None => return Err(Error::DTypeMismatch { op: "cat", lhs: dtype, rhs: s.dtype() }),
                }
            }
            Ok(index::cat(&typed, dim).into())
        })
    }
    fn unfold(s: &HostStorage, layout: &Layout, window: &autograd_core::window::Window, pad_value: f64) -> Result<HostStorage> {
        validate::input("unfold", s.len(), layout)?;
        let sizes = validate::unfold("unfold", layout, window, s.dtype())?;
        Ok(with_any!(HostStorage: s, |v: T| window::unfold(v, layout, window, &sizes, <T as Element>::from_f64(pad_value)).into()))
    }
    fn fold(s: &HostStorage, layout: &Layout, window: &autograd_core::window::Window, spatial: &[usize]) -> Result<HostStorage> {
        validate::input("fold", s.len(), layout)?;
        let sizes = validate::fold(layout, window, spatial, s.dtype())?;
        if let Some(r) = through_f32(&[s], |w| Self::fold(w[0], layout, window, spatial)) {
            return r;
        }
        with_float!(s, "fold", |v: T| Ok(window::fold::<T>(v, layout, window, &sizes).into()))
    }
}
