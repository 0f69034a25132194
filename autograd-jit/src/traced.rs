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

use crate::buffer::{Buf, TracedStorage};
use crate::recorder;
use autograd_core::rng::Generator;
use autograd_core::{Backend, DType, Error, HostData, Layout, Primitive, Result};
use smallvec::SmallVec;
use std::marker::PhantomData;
use std::sync::Arc;

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

/// Generates `Traced`'s primitive methods from the table
/// ([`autograd_core::for_each_primitive!`]): each builds the call's
/// [`Primitive`] value from its arguments and hands it to [`call`].
macro_rules! traced_methods {
    ($(
        $(#[doc = $doc:literal])*
        $v:ident { $($field:ident : $fty:ty = $fval:expr),* $(,)? }
        pure: $pure:literal;
        fn $method:ident $(<$g:ident : $gb:path>)? ($($arg:ident : $aty:ty),* $(,)?) -> $ret:ty;
        reads: $reads:expr;
        writes: $writes:expr;
        $(rng: $rng:expr;)?
        returns: $kind:ident;
        run: |$ins:ident, $muts:ident, $gen:ident| $run:expr;
        show: |$f:ident| $show:expr;
        sample: $sample:expr;
    )*) => {
        $(
            fn $method $(<$g: $gb>)? ($($arg: $aty),*) -> $ret {
                let primitive: Primitive<B> = Primitive::$v { $($field: $fval),* };
                let mut reads: SmallVec<[&TracedStorage<B>; 4]> = SmallVec::new();
                reads.extend($reads);
                let mut writes: SmallVec<[&TracedStorage<B>; 4]> = SmallVec::new();
                writes.extend($writes);
                let rng: Option<&mut Generator> = None $(.or(Some($rng)))?;
                returns::$kind(call(primitive, &reads, &writes, rng))
            }
        )*
    };
}

/// A buffer and its read lock.
type Locked<'a, B> = (&'a Arc<Buf<B>>, std::sync::RwLockReadGuard<'a, <B as Backend>::Storage>);

/// The buffers a call made (most make one or two: no heap allocation).
type Made<B> = SmallVec<[TracedStorage<B>; 2]>;

/// Runs `primitive` on `B` with the buffers' contents (read-locked once
/// each; those it updates write-locked) and records it while a step is
/// being traced.
fn call<B: Backend>(
    primitive: Primitive<B>,
    reads: &[&TracedStorage<B>],
    writes: &[&TracedStorage<B>],
    rng: Option<&mut Generator>,
) -> Result<Made<B>> {
    let recorded = recorder::is_active().then(|| primitive.clone());
    let outs = {
        let written = |s: &TracedStorage<B>| writes.iter().any(|w| Arc::ptr_eq(&w.0, &s.0));
        if let Some(k) = writes.iter().enumerate().position(|(i, w)| writes[..i].iter().any(|u| Arc::ptr_eq(&u.0, &w.0))) {
            return Err(Error::msg(format!("{}: buffer {:?} is updated twice in one call", primitive.name(), writes[k])));
        }
        // A buffer both read and updated is read from a copy of itself, taken
        // first (a whole-buffer copy: the read's layout still applies).
        let copies: SmallVec<[Option<B::Storage>; 4]> =
            reads.iter().map(|s| written(s).then(|| B::copy_strided(&s.0.read(), &whole::<B>(&s.0))).transpose()).collect::<Result<_>>()?;
        // One read lock per distinct buffer (a second read lock on one
        // buffer from one thread may wait behind a queued writer).
        let mut guards: SmallVec<[Locked<'_, B>; 4]> = SmallVec::new();
        for (s, c) in reads.iter().zip(&copies) {
            if c.is_none() && !guards.iter().any(|(b, _)| Arc::ptr_eq(b, &s.0)) {
                guards.push((&s.0, s.0.read()));
            }
        }
        let ins: SmallVec<[&B::Storage; 4]> = reads
            .iter()
            .zip(&copies)
            .map(|(s, c)| match c {
                Some(c) => c,
                None => &*guards.iter().find(|(b, _)| Arc::ptr_eq(b, &s.0)).expect("locked above").1,
            })
            .collect();
        let mut locked: SmallVec<[_; 4]> = writes.iter().map(|w| w.0.write()).collect();
        let mut muts: SmallVec<[&mut B::Storage; 4]> = locked.iter_mut().map(|g| &mut **g).collect();
        primitive.run_once(&ins, &mut muts, rng)?
    };
    let outs: Made<B> = outs.into_iter().map(TracedStorage::new).collect();
    if let Some(p) = recorded {
        let ins: SmallVec<[&Arc<Buf<B>>; 4]> = reads.iter().map(|s| &s.0).collect();
        let muts: SmallVec<[&Arc<Buf<B>>; 4]> = writes.iter().map(|s| &s.0).collect();
        let made: SmallVec<[&Arc<Buf<B>>; 2]> = outs.iter().map(|s| &s.0).collect();
        recorder::record(&ins, &muts, &made, p);
    }
    Ok(outs)
}

/// The whole of a buffer, as a flat contiguous layout.
fn whole<B: Backend>(b: &Buf<B>) -> Layout {
    Layout::contiguous(autograd_core::Shape::from([b.len()]))
}

/// Turns [`call`]'s outputs into what the `Backend` method returns: one
/// function per `returns:` kind of the table.
mod returns {
    use super::*;

    fn count<S>(outs: &[S], n: usize) -> Result<()> {
        if outs.len() == n {
            Ok(())
        } else {
            Err(Error::msg(format!("traced: a primitive returned {} buffers, its method {n}", outs.len())))
        }
    }
    pub(super) fn upload<B: Backend>(r: Result<Made<B>>) -> TracedStorage<B> {
        // An upload reads and writes no buffer: nothing in `call` can fail.
        r.and_then(|mut v| {
            count(&v, 1)?;
            Ok(v.remove(0))
        })
        .expect("an upload cannot fail")
    }
    pub(super) fn one<B: Backend>(r: Result<Made<B>>) -> Result<TracedStorage<B>> {
        let mut v = r?;
        count(&v, 1)?;
        Ok(v.remove(0))
    }
    pub(super) fn two<B: Backend>(r: Result<Made<B>>) -> Result<(TracedStorage<B>, TracedStorage<B>)> {
        let mut v = r?;
        count(&v, 2)?;
        let b = v.remove(1);
        Ok((v.remove(0), b))
    }
    pub(super) fn many<B: Backend>(r: Result<Made<B>>) -> Result<Vec<TracedStorage<B>>> {
        Ok(r?.into_vec())
    }
    pub(super) fn none<B: Backend>(r: Result<Made<B>>) -> Result<()> {
        count(&r?, 0)
    }
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
    fn available() -> Result<()> {
        B::available()
    }
    fn to_host(s: &Self::Storage, layout: &Layout) -> Result<HostData> {
        recorder::refuse_host_read()?;
        B::to_host(&s.0.read(), layout)
    }

    autograd_core::for_each_primitive!(traced_methods);
}
