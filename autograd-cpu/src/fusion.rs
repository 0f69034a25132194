//! Fused elementwise programs ([`autograd_core::fusion`]) in one pass.
//!
//! The output is walked in chunks small enough for L1; per chunk every
//! input is gathered once into a register (a chunk-sized buffer), each step
//! runs the same slice kernel as the unfused op (`elementwise::unary_slice`,
//! `binary_slice`: the same formula, the same bits) from registers into a
//! register, and the outputs are copied out. Registers are reused once
//! their last reader has run, so a long chain needs only a few. Large
//! outputs are split across the rayon pool, each task with its own registers.

use crate::elementwise::{binary_slice, is_heavy, unary_slice};
use crate::{PAR_MIN_ELEMS, PAR_MIN_ELEMS_HEAVY};
use autograd_core::fusion::{ElementwiseProgram, Instr};
use autograd_core::memory::{Buffer, scratch};
use autograd_core::scalar::FloatElem;
use autograd_core::{Error, HostStorage, Layout, Result};
use rayon::prelude::*;

/// Elements per chunk: a few registers of this many f64 stay in L1.
const CHUNK: usize = 256;

/// Runs `program` over `inputs` (checked by the caller's `program.check`).
pub(crate) fn fused_elementwise(program: &ElementwiseProgram, inputs: &[(&HostStorage, &Layout)]) -> Result<Vec<HostStorage>> {
    macro_rules! go {
        ($var:ident) => {{
            let mut typed = Vec::with_capacity(inputs.len());
            for (s, l) in inputs {
                match s {
                    HostStorage::$var(v) => typed.push((&v[..], *l)),
                    other => return Err(Error::msg(format!("fused elementwise: mixed dtypes ({:?})", other.dtype()))),
                }
            }
            run(program, &typed).into_iter().map(|v| HostStorage::$var(autograd_core::memory::Buffer::from_vec(v))).collect()
        }};
    }
    Ok(match inputs.first().map(|(s, _)| *s) {
        Some(HostStorage::F32(_)) => go!(F32),
        Some(HostStorage::F64(_)) => go!(F64),
        _ => return Err(Error::msg("fused elementwise: inputs must be F32 or F64")),
    })
}

/// Which physical register each program register uses: a step's result
/// takes a free one, and a register is freed after its last reader.
fn allocate(program: &ElementwiseProgram) -> (Vec<usize>, usize) {
    let n_in = program.inputs();
    let mut phys = vec![0usize; n_in + program.instrs().len()];
    let mut free: Vec<usize> = Vec::new();
    let mut count = n_in;
    for (r, p) in phys.iter_mut().enumerate().take(n_in) {
        *p = r;
    }
    // Inputs nothing reads are free from the start.
    for r in 0..n_in {
        if program.last_use(r) == 0 && !program.instrs().first().is_some_and(|i| i.operands().any(|o| o == r)) {
            free.push(r);
        }
    }
    for (i, ins) in program.instrs().iter().enumerate() {
        let out = free.pop().unwrap_or_else(|| {
            count += 1;
            count - 1
        });
        phys[n_in + i] = out;
        for r in ins.operands() {
            if program.last_use(r) == i && !free.contains(&phys[r]) {
                free.push(phys[r]);
            }
        }
        // A result nothing reads (not an output either) frees at once.
        if program.last_use(n_in + i) == 0 {
            free.push(out);
        }
    }
    (phys, count)
}

fn run<T: FloatElem>(program: &ElementwiseProgram, inputs: &[(&[T], &Layout)]) -> Vec<Vec<T>> {
    let n = inputs[0].1.numel();
    // Every element of every output is written below.
    let mut outs: Vec<Vec<T>> = program.outputs().iter().map(|_| scratch(n, T::zero())).collect();
    if n == 0 {
        return outs;
    }
    let (phys, nregs) = allocate(program);
    let heavy = program.instrs().iter().any(|i| matches!(i, Instr::Unary(op, _) if is_heavy(*op)));
    let par_min = if heavy { PAR_MIN_ELEMS_HEAVY } else { PAR_MIN_ELEMS };
    let threads = rayon::current_num_threads();
    if n >= par_min && threads > 1 {
        // One task per range of whole chunks; each writes its own slices of every output.
        let per_task = n.div_ceil(threads * 4).next_multiple_of(CHUNK);
        let mut tasks: Vec<(usize, Vec<&mut [T]>)> = Vec::new();
        let mut iters: Vec<_> = outs.iter_mut().map(|o| o.chunks_mut(per_task)).collect();
        let mut start = 0;
        while start < n {
            let slices: Vec<&mut [T]> = iters.iter_mut().map(|it| it.next().expect("same length")).collect();
            let len = slices.first().map_or(per_task.min(n - start), |s| s.len());
            tasks.push((start, slices));
            start += len;
        }
        tasks.into_par_iter().for_each(|(start, mut slices)| range(program, inputs, &phys, nregs, start, &mut slices));
    } else {
        let mut slices: Vec<&mut [T]> = outs.iter_mut().map(|o| &mut o[..]).collect();
        range(program, inputs, &phys, nregs, 0, &mut slices);
    }
    outs
}

/// Computes output elements `start..start + outs[0].len()` chunk by chunk.
fn range<T: FloatElem>(
    program: &ElementwiseProgram,
    inputs: &[(&[T], &Layout)],
    phys: &[usize],
    nregs: usize,
    start: usize,
    outs: &mut [&mut [T]],
) {
    let len = outs.first().map_or(0, |o| o.len());
    let width = CHUNK.min(len.max(1));
    // One buffer for every register, `width` elements each; every element is
    // written before it is read. Dropped as a `Buffer`, it returns to the
    // replay's pool (when one is installed) for the next call.
    let mut space = Buffer::from_vec(scratch(nregs * width, T::zero()));
    let mut regs: Vec<&mut [T]> = space.chunks_mut(width).collect();
    let n_in = program.inputs();
    let mut done = 0;
    while done < len {
        let c = CHUNK.min(len - done);
        for (r, (v, l)) in inputs.iter().enumerate() {
            gather(v, l, start + done, &mut regs[phys[r]][..c]);
        }
        for (i, ins) in program.instrs().iter().enumerate() {
            let out = phys[n_in + i];
            // Take the result register out so operands can be borrowed beside it.
            let y = std::mem::take(&mut regs[out]);
            match *ins {
                Instr::Unary(op, a) => unary_slice(op, &regs[phys[a]][..c], &mut y[..c]),
                Instr::Binary(op, a, b) => binary_slice(op, &regs[phys[a]][..c], &regs[phys[b]][..c], &mut y[..c]),
            }
            regs[out] = y;
        }
        for (o, &r) in outs.iter_mut().zip(program.outputs()) {
            o[done..done + c].copy_from_slice(&regs[phys[r]][..c]);
        }
        done += c;
    }
}

/// Copies the elements `start..start + out.len()` (row-major over the
/// layout's shape) of a strided view into `out`.
fn gather<T: Copy>(v: &[T], l: &Layout, start: usize, out: &mut [T]) {
    if l.is_contiguous() {
        let o = l.offset() + start;
        out.copy_from_slice(&v[o..o + out.len()]);
        return;
    }
    let (dims, strides) = (l.dims(), l.strides());
    if strides.iter().all(|&s| s == 0) {
        out.fill(v[l.offset()]);
        return;
    }
    // Runs along the last dim: copied when contiguous (a broadcast bias
    // row), filled when broadcast (a per-row scalar), else element by element.
    // An odometer over the index, started at `start`, moving along the last dim in runs.
    let last = dims.len() - 1;
    // inline up to 6 dims: this runs once per chunk of every strided input
    let mut idx = autograd_core::shape::DimVec::from_elem(0, dims.len());
    let mut rem = start;
    let mut off = l.offset();
    for d in (0..dims.len()).rev() {
        idx[d] = rem % dims[d];
        rem /= dims[d];
        off += idx[d] * strides[d];
    }
    let mut k = 0;
    while k < out.len() {
        let run = (dims[last] - idx[last]).min(out.len() - k);
        let s = strides[last];
        match s {
            0 => out[k..k + run].fill(v[off]),
            1 => out[k..k + run].copy_from_slice(&v[off..off + run]),
            _ => {
                for (y, x) in out[k..k + run].iter_mut().zip(v[off..].iter().step_by(s)) {
                    *y = *x;
                }
            }
        }
        k += run;
        idx[last] += run;
        off += run * s;
        let mut d = last;
        while d > 0 && idx[d] == dims[d] {
            off -= dims[d] * strides[d];
            idx[d] = 0;
            d -= 1;
            idx[d] += 1;
            off += strides[d];
        }
    }
}
