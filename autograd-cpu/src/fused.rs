//! Fused updates (optimizer steps) on host slices: one pass over parameter,
//! gradient and state, split over the rayon pool for large tensors. The
//! update itself is opaque here: any [`FusedUpdate`] runs the same way.

use autograd_core::fused_update::{FusedUpdate, check, host_fallback, resolve};
use autograd_core::{HostStorage, Layout, Result};
use rayon::prelude::*;

use crate::Cpu;

/// A fused update streams 3-5 buffers and does a sqrt and a division per
/// element (Adam), so it is heavier than an add but still memory bound:
/// split it from 64K elements on. Chunks stay large enough that each rayon
/// task streams a few hundred KiB.
const PAR_MIN: usize = 1 << 16;
const CHUNK: usize = 1 << 15;

/// One task's share: a chunk of the parameter, of the gradient and of each state buffer.
type Chunk<'a, T> = (&'a mut [T], &'a [T], Vec<&'a mut [T]>);

/// Runs `apply` over the buffers, in chunks on the rayon pool when they are large.
fn run<T: Send + Sync>(apply: impl Fn(&mut [T], &[T], &mut [&mut [T]]) + Sync, p: &mut [T], g: &[T], states: Vec<&mut [T]>) {
    let n = p.len();
    if n < PAR_MIN || rayon::current_num_threads() == 1 {
        let mut states = states;
        apply(p, g, &mut states);
        return;
    }
    // Cut every buffer at the same boundaries; each task owns one chunk of each.
    let mut tasks: Vec<Chunk<'_, T>> = Vec::with_capacity(n.div_ceil(CHUNK));
    let (mut p, mut g, mut states) = (p, g, states);
    while !p.is_empty() {
        let k = CHUNK.min(p.len());
        let (ph, pt) = p.split_at_mut(k);
        let (gh, gt) = g.split_at(k);
        let mut heads = Vec::with_capacity(states.len());
        let mut tails = Vec::with_capacity(states.len());
        for s in states {
            let (h, t) = s.split_at_mut(k);
            heads.push(h);
            tails.push(t);
        }
        tasks.push((ph, gh, heads));
        (p, g, states) = (pt, gt, tails);
    }
    tasks.into_par_iter().for_each(|(p, g, mut s)| apply(p, g, &mut s));
}

pub(crate) fn fused_update<U: FusedUpdate>(
    update: &U,
    param: &mut HostStorage,
    grad: &HostStorage,
    lg: &Layout,
    states: &mut [&mut HostStorage],
    scalars: &mut HostStorage,
) -> Result<()> {
    check::<crate::Cpu, U>(update, param, lg, states, scalars)?;
    let nstates = states.len();
    // The scalars are host memory here: resolved in place, no copy out.
    let HostStorage::F64(values) = &mut *scalars else { return Err(autograd_core::Error::msg("fused update: the scalars are not f64")) };
    let contiguous_grad = lg.is_contiguous() && lg.offset() == 0 && lg.shape().numel() == grad.len();
    macro_rules! fused {
        ($var:ident, $apply:ident) => {{
            if let (HostStorage::$var(p), HostStorage::$var(g)) = (&mut *param, grad) {
                let mut typed = Vec::with_capacity(nstates);
                for s in states.iter_mut() {
                    match &mut **s {
                        HostStorage::$var(b) if b.len() == p.len() => typed.push(&mut b[..]),
                        _ => break,
                    }
                }
                if typed.len() == nstates && contiguous_grad && g.len() == p.len() {
                    let (update, written) = resolve(update, values, nstates)?;
                    values.copy_from_slice(&written);
                    run(|p, g, s| update.$apply(p, g, s), &mut p[..], &g[..], typed);
                    return Ok(());
                }
            }
        }};
    }
    fused!(F32, apply_f32);
    fused!(F64, apply_f64);
    // Half precision, mixed dtypes or a strided gradient: the generic path.
    host_fallback::<Cpu, U>(update, param, grad, lg, states, scalars)
}
