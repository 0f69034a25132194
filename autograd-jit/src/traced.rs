//! `Traced<B>`: a backend that runs every primitive on `B` and, while a
//! step is being traced, records it.
//!
//! Why a decorator rather than a hook inside the CPU backend: `Backend`
//! methods are static and storage is the backend's own type, so a recorder
//! must see every buffer's identity, and keep a handle on the persistent
//! ones (parameters, gradients, optimizer state) to read and write them on
//! replay. A decorator gets both from its storage type (an `Arc` with an
//! id) and works over any backend, the reference one included, without any
//! backend knowing about compilation. The price: a model that will be
//! compiled lives on `Traced<Cpu>` (eagerly it runs at `Cpu`'s speed, plus
//! one uncontended lock per primitive).

use crate::recorder::{self, Kind};
use autograd_core::fused_update::FusedUpdate;
use autograd_core::fusion::ElementwiseProgram;
use autograd_core::rng::{Distribution, Generator};
use autograd_core::{ArgReduceOp, Backend, BinaryOp, DType, Error, HostData, Layout, ReduceOp, Result, Shape, UnaryOp};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The recording decorator over backend `B` (see the crate docs).
///
/// ```
/// use autograd_cpu::Cpu;
/// use autograd_jit::Traced;
/// use autograd_tensor::Tensor;
/// // Eagerly, a Traced<Cpu> tensor computes exactly as a Cpu one.
/// let x = Tensor::<Traced<Cpu>>::from_vec(vec![1.0f32, -2.0], [2]);
/// assert_eq!(x.relu().to_vec::<f32>(), vec![1.0, 0.0]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Traced<B: Backend>(PhantomData<B>);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One buffer of `B`, with an identity the recorder keys values by.
pub struct Buf<B: Backend> {
    pub(crate) id: u64,
    dtype: DType,
    len: usize,
    data: RwLock<B::Storage>,
}

impl<B: Backend> Buf<B> {
    pub(crate) fn new(s: B::Storage) -> Arc<Self> {
        Arc::new(Buf { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), dtype: B::dtype(&s), len: B::len(&s), data: RwLock::new(s) })
    }
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, B::Storage> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, B::Storage> {
        self.data.write().unwrap_or_else(|e| e.into_inner())
    }
    /// Replaces the contents with a new storage of the same dtype and
    /// length (a replay writing a gradient the user's tensor holds).
    pub(crate) fn replace(&self, s: B::Storage) -> Result<()> {
        if B::dtype(&s) != self.dtype || B::len(&s) != self.len {
            return Err(Error::msg(format!(
                "compiled step: a replayed value of {:?} x {} does not fit its buffer of {:?} x {}",
                B::dtype(&s),
                B::len(&s),
                self.dtype,
                self.len
            )));
        }
        *self.write() = s;
        Ok(())
    }
    /// Drops the contents (dead until the replay writes them again): the
    /// buffer holds an empty storage meanwhile, so a read in between is an
    /// `Err` from the layout checks, not stale values.
    pub(crate) fn release(&self) -> Result<()> {
        *self.write() = B::full(&Shape::from([0]), 0.0, self.dtype)?;
        Ok(())
    }
    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<B: Backend> std::fmt::Debug for Buf<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buf#{}({:?} x {})", self.id, self.dtype, self.len)
    }
}

/// The storage of [`Traced`]: a shared handle on a buffer of `B`.
pub struct TracedStorage<B: Backend>(pub(crate) Arc<Buf<B>>);

impl<B: Backend> std::fmt::Debug for TracedStorage<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<B: Backend> TracedStorage<B> {
    pub(crate) fn new(s: B::Storage) -> Self {
        TracedStorage(Buf::new(s))
    }
    fn read(&self) -> RwLockReadGuard<'_, B::Storage> {
        self.0.read()
    }
}

/// Runs `f` on `B`, wraps its output, records the op with `inputs`.
fn produce<B: Backend>(inputs: &[&TracedStorage<B>], kind: impl FnOnce() -> Kind<B>, s: B::Storage) -> TracedStorage<B> {
    let y = TracedStorage::new(s);
    recorder::record(inputs, &[], &[&y], kind);
    y
}

impl<B: Backend> Backend for Traced<B> {
    type Storage = TracedStorage<B>;
    const NAME: &'static str = "traced";

    fn dtype(s: &Self::Storage) -> DType {
        s.0.dtype()
    }
    fn len(s: &Self::Storage) -> usize {
        s.0.len()
    }
    fn from_host(data: HostData) -> Self::Storage {
        let kept = recorder::is_active().then(|| data.clone());
        let y = TracedStorage::new(B::from_host(data));
        if let Some(data) = kept {
            recorder::record(&[], &[], &[&y], || Kind::FromHost(data));
        }
        y
    }
    fn to_host(s: &Self::Storage, layout: &Layout) -> Result<HostData> {
        recorder::refuse_host_read()?;
        B::to_host(&s.read(), layout)
    }
    fn full(shape: &Shape, value: f64, dtype: DType) -> Result<Self::Storage> {
        Ok(produce(&[], || Kind::Full { shape: shape.clone(), value, dtype }, B::full(shape, value, dtype)?))
    }
    fn random(shape: &Shape, dtype: DType, dist: Distribution, generator: &mut Generator) -> Result<Self::Storage> {
        let s = B::random(shape, dtype, dist, generator)?;
        Ok(produce(&[], || Kind::Random { shape: shape.clone(), dtype, dist }, s))
    }
    fn cast(s: &Self::Storage, layout: &Layout, dtype: DType) -> Result<Self::Storage> {
        Ok(produce(&[s], || Kind::Cast { layout: layout.clone(), dtype }, B::cast(&s.read(), layout, dtype)?))
    }
    fn copy_strided(s: &Self::Storage, layout: &Layout) -> Result<Self::Storage> {
        Ok(produce(&[s], || Kind::CopyStrided { layout: layout.clone() }, B::copy_strided(&s.read(), layout)?))
    }
    fn unary(op: UnaryOp, s: &Self::Storage, layout: &Layout) -> Result<Self::Storage> {
        Ok(produce(&[s], || Kind::Unary { op, layout: layout.clone() }, B::unary(op, &s.read(), layout)?))
    }
    fn binary(op: BinaryOp, a: &Self::Storage, la: &Layout, b: &Self::Storage, lb: &Layout) -> Result<Self::Storage> {
        let y = B::binary(op, &a.read(), la, &b.read(), lb)?;
        Ok(produce(&[a, b], || Kind::Binary { op, la: la.clone(), lb: lb.clone() }, y))
    }
    fn where_select(
        cond: &Self::Storage,
        lc: &Layout,
        a: &Self::Storage,
        la: &Layout,
        b: &Self::Storage,
        lb: &Layout,
    ) -> Result<Self::Storage> {
        let y = B::where_select(&cond.read(), lc, &a.read(), la, &b.read(), lb)?;
        Ok(produce(&[cond, a, b], || Kind::Where { lc: lc.clone(), la: la.clone(), lb: lb.clone() }, y))
    }
    fn reduce(op: ReduceOp, s: &Self::Storage, layout: &Layout, dims: &[usize]) -> Result<Self::Storage> {
        let y = B::reduce(op, &s.read(), layout, dims)?;
        Ok(produce(&[s], || Kind::Reduce { op, layout: layout.clone(), dims: dims.to_vec() }, y))
    }
    fn arg_reduce(op: ArgReduceOp, s: &Self::Storage, layout: &Layout, dim: usize) -> Result<(Self::Storage, Self::Storage)> {
        let (v, i) = B::arg_reduce(op, &s.read(), layout, dim)?;
        let (v, i) = (TracedStorage::new(v), TracedStorage::new(i));
        recorder::record(&[s], &[], &[&v, &i], || Kind::ArgReduce { op, layout: layout.clone(), dim });
        Ok((v, i))
    }
    fn matmul(a: &Self::Storage, la: &Layout, b: &Self::Storage, lb: &Layout) -> Result<Self::Storage> {
        let y = B::matmul(&a.read(), la, &b.read(), lb)?;
        Ok(produce(&[a, b], || Kind::Matmul { la: la.clone(), lb: lb.clone() }, y))
    }
    fn addmm(c: &Self::Storage, lc: &Layout, a: &Self::Storage, la: &Layout, b: &Self::Storage, lb: &Layout) -> Result<Self::Storage> {
        let y = B::addmm(&c.read(), lc, &a.read(), la, &b.read(), lb)?;
        Ok(produce(&[c, a, b], || Kind::Addmm { lc: lc.clone(), la: la.clone(), lb: lb.clone() }, y))
    }
    fn gather(s: &Self::Storage, layout: &Layout, dim: usize, idx: &Self::Storage, lidx: &Layout) -> Result<Self::Storage> {
        let y = B::gather(&s.read(), layout, dim, &idx.read(), lidx)?;
        Ok(produce(&[s, idx], || Kind::Gather { layout: layout.clone(), dim, lidx: lidx.clone() }, y))
    }
    fn scatter_add(
        shape: &Shape,
        dim: usize,
        idx: &Self::Storage,
        lidx: &Layout,
        src: &Self::Storage,
        lsrc: &Layout,
    ) -> Result<Self::Storage> {
        let y = B::scatter_add(shape, dim, &idx.read(), lidx, &src.read(), lsrc)?;
        Ok(produce(&[idx, src], || Kind::ScatterAdd { shape: shape.clone(), dim, lidx: lidx.clone(), lsrc: lsrc.clone() }, y))
    }
    fn assign(dst: &mut Self::Storage, ld: &Layout, src: &Self::Storage, ls: &Layout) -> Result<()> {
        if Arc::ptr_eq(&dst.0, &src.0) {
            // One buffer both read and written: go through a copy.
            let tmp = B::copy_strided(&src.read(), ls)?;
            B::assign(&mut dst.0.write(), ld, &tmp, &Layout::contiguous(ls.shape().clone()))?;
        } else {
            B::assign(&mut dst.0.write(), ld, &src.read(), ls)?;
        }
        recorder::record(&[src], &[dst], &[], || Kind::Assign { ld: ld.clone(), ls: ls.clone() });
        Ok(())
    }
    fn cat(parts: &[(&Self::Storage, &Layout)], dim: usize) -> Result<Self::Storage> {
        let guards: Vec<_> = parts.iter().map(|(s, _)| s.read()).collect();
        let inner: Vec<(&B::Storage, &Layout)> = guards.iter().zip(parts).map(|(g, (_, l))| (&**g, *l)).collect();
        let y = B::cat(&inner, dim)?;
        drop(inner);
        drop(guards);
        let ins: Vec<&TracedStorage<B>> = parts.iter().map(|(s, _)| *s).collect();
        Ok(produce(&ins, || Kind::Cat { layouts: parts.iter().map(|(_, l)| (*l).clone()).collect(), dim }, y))
    }
    fn fused_update<U: FusedUpdate>(
        update: &U,
        param: &mut Self::Storage,
        grad: &Self::Storage,
        lg: &Layout,
        states: &mut [&mut Self::Storage],
    ) -> Result<()> {
        {
            let mut guards: Vec<_> = states.iter().map(|s| s.0.write()).collect();
            let mut refs: Vec<&mut B::Storage> = guards.iter_mut().map(|g| &mut **g).collect();
            B::fused_update(update, &mut param.0.write(), &grad.read(), lg, &mut refs)?;
        }
        let mut mutated: Vec<&TracedStorage<B>> = vec![&*param];
        mutated.extend(states.iter().map(|s| &**s));
        recorder::record(&[grad], &mutated, &[], || Kind::FusedUpdate {
            update: recorder::erase_update::<B, U>(update.clone()),
            lg: lg.clone(),
        });
        Ok(())
    }
    fn fused_elementwise(program: &ElementwiseProgram, inputs: &[(&Self::Storage, &Layout)]) -> Result<Vec<Self::Storage>> {
        let guards: Vec<_> = inputs.iter().map(|(s, _)| s.read()).collect();
        let inner: Vec<(&B::Storage, &Layout)> = guards.iter().zip(inputs).map(|(g, (_, l))| (&**g, *l)).collect();
        let ys = B::fused_elementwise(program, &inner)?;
        drop(inner);
        drop(guards);
        let ys: Vec<TracedStorage<B>> = ys.into_iter().map(TracedStorage::new).collect();
        let ins: Vec<&TracedStorage<B>> = inputs.iter().map(|(s, _)| *s).collect();
        let outs: Vec<&TracedStorage<B>> = ys.iter().collect();
        recorder::record(&ins, &[], &outs, || Kind::Fused {
            program: Arc::new(program.clone()),
            layouts: inputs.iter().map(|(_, l)| (*l).clone()).collect(),
        });
        Ok(ys)
    }
    fn layer_norm(s: &Self::Storage, layout: &Layout, k: usize, eps: f64) -> Result<(Self::Storage, Self::Storage)> {
        let (x, r) = B::layer_norm(&s.read(), layout, k, eps)?;
        let (x, r) = (TracedStorage::new(x), TracedStorage::new(r));
        recorder::record(&[s], &[], &[&x, &r], || Kind::LayerNorm { layout: layout.clone(), k, eps });
        Ok((x, r))
    }
    fn softmax(s: &Self::Storage, layout: &Layout, dim: usize) -> Result<Self::Storage> {
        Ok(produce(&[s], || Kind::Softmax { layout: layout.clone(), dim }, B::softmax(&s.read(), layout, dim)?))
    }
}
