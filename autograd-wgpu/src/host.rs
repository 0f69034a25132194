//! The primitives without a WGSL kernel yet, run by the CPU backend's
//! kernels on the storages' contents: read back, computed on the host,
//! uploaded (PyTorch's MPS fallback, made explicit and counted).
//!
//! Generated from the primitive table (`for_each_primitive!`) like the
//! traced backend, so every primitive has a correct path on the device from
//! the first day and a kernel replaces one method at a time; each call is
//! counted by name in [`host_calls`], so a test or a profile sees which
//! primitives still take the trip.

use crate::{Wgpu, WgpuStorage};
use autograd_core::rng::Generator;
use autograd_core::{Backend, Error, HostStorage, Primitive, Result};
use autograd_cpu::Cpu;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::sync::Mutex;

static CALLS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// How many calls of each primitive ran on the host path since the
/// process started (primitive name, count), in name order.
///
/// ```
/// for (name, n) in autograd_wgpu::host_calls() {
///     println!("{name}: {n} calls through the host");
/// }
/// ```
pub fn host_calls() -> Vec<(&'static str, u64)> {
    CALLS.lock().map(|c| c.iter().map(|(k, v)| (*k, *v)).collect()).unwrap_or_default()
}

/// The buffers a host call made (most make one or two).
type Made = SmallVec<[WgpuStorage; 2]>;

/// Runs `primitive` on the CPU backend with the contents of `reads` and
/// `writes` (each read back whole; a buffer both read and written is read
/// from its own copy, as the traced backend does), writes the updated
/// buffers back and uploads the outputs.
fn call(primitive: Primitive<Cpu>, reads: &[&WgpuStorage], writes: &[&WgpuStorage], rng: Option<&mut Generator>) -> Result<Made> {
    if let Ok(mut c) = CALLS.lock() {
        *c.entry(primitive.name()).or_default() += 1;
    }
    let ins: SmallVec<[HostStorage; 4]> = reads.iter().map(|s| s.read_storage()).collect::<Result<_>>()?;
    let mut muts: SmallVec<[HostStorage; 4]> = writes.iter().map(|s| s.read_storage()).collect::<Result<_>>()?;
    let outs = {
        let ins: SmallVec<[&HostStorage; 4]> = ins.iter().collect();
        let mut refs: SmallVec<[&mut HostStorage; 4]> = muts.iter_mut().collect();
        primitive.run(&ins, &mut refs, rng)?
    };
    let g = crate::device::gpu()?;
    for (w, m) in writes.iter().zip(&muts) {
        let data: autograd_core::HostData =
            autograd_core::with_any!(HostStorage: m, |v: T| <T as autograd_core::Element>::into_host(v.to_vec()));
        w.write(g, &crate::storage::host_bytes(&data))?;
    }
    outs.iter().map(WgpuStorage::upload_storage).collect()
}

mod returns {
    use super::*;

    fn count(outs: &Made, n: usize) -> Result<()> {
        if outs.len() == n { Ok(()) } else { Err(Error::msg(format!("wgpu: a host call returned {} buffers, its method {n}", outs.len()))) }
    }
    #[allow(dead_code)] // from_host uploads directly
    pub(super) fn upload(r: Result<Made>) -> WgpuStorage {
        match r.and_then(|mut v| count(&v, 1).map(|_| v.remove(0))) {
            Ok(s) => s,
            Err(e) => WgpuStorage { block: Err(e.to_string().into()), dtype: autograd_core::DType::F32, len: 0 },
        }
    }
    pub(super) fn one(r: Result<Made>) -> Result<WgpuStorage> {
        let mut v = r?;
        count(&v, 1)?;
        Ok(v.remove(0))
    }
    pub(super) fn two(r: Result<Made>) -> Result<(WgpuStorage, WgpuStorage)> {
        let mut v = r?;
        count(&v, 2)?;
        let b = v.remove(1);
        Ok((v.remove(0), b))
    }
    pub(super) fn many(r: Result<Made>) -> Result<Vec<WgpuStorage>> {
        Ok(r?.into_vec())
    }
    pub(super) fn none(r: Result<Made>) -> Result<()> {
        count(&r?, 0)
    }
}

macro_rules! host_methods {
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
        /// Every primitive of the table on the host path, with the
        /// `Backend` method's signature (the `Backend` impl calls these for
        /// the primitives that have no kernel yet).
        #[allow(dead_code)] // the methods with a kernel leave theirs unused
        pub(crate) trait OnHost: Backend<Storage = WgpuStorage> {
            $( fn $method $(<$g: $gb>)? ($($arg: $aty),*) -> $ret; )*
        }

        impl OnHost for Wgpu {
            $(
                fn $method $(<$g: $gb>)? ($($arg: $aty),*) -> $ret {
                    let primitive: Primitive<Cpu> = Primitive::$v { $($field: $fval),* };
                    let mut reads: SmallVec<[&WgpuStorage; 4]> = SmallVec::new();
                    reads.extend($reads);
                    let mut writes: SmallVec<[&WgpuStorage; 4]> = SmallVec::new();
                    writes.extend($writes);
                    let rng: Option<&mut Generator> = None $(.or(Some($rng)))?;
                    returns::$kind(call(primitive, &reads, &writes, rng))
                }
            )*
        }
    };
}

autograd_core::for_each_primitive!(host_methods);
