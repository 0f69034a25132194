//! The compiler's passes over a recorded step, in the order they run:
//! dead code, constants, elementwise fusion, memory plan.

use crate::program::{Loc, Program};
use crate::recorder::{Op, ValueId};
use crate::run::Env;
use autograd_core::fusion::{ElementwiseProgram, Instr};
use autograd_core::{Backend, DType, Layout, Primitive, Result, Shape};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Largest constant (in elements) kept folded: bigger ones are made anew
/// by each replay rather than held between steps.
const FOLD_MAX_ELEMS: usize = 4096;

/// Removes ops whose results nothing needs. Kept whatever their results:
/// random draws (dropping one would shift every later draw of the
/// generator) and updates of buffers that outlive the step. A value is needed when a kept op reads it, the step returns it, or
/// it lives past the step.
pub(crate) fn eliminate_dead<B: Backend>(p: &mut Program<B>) {
    let mut needed = vec![false; p.locs.len()];
    for (v, _) in &p.outputs {
        needed[*v] = true;
    }
    let lasting = |v: ValueId| !matches!(p.locs[v], Loc::Slot);
    let mut keep = vec![false; p.ops.len()];
    for (i, op) in p.ops.iter().enumerate().rev() {
        // An effect outside the program's buffers (a draw advancing the
        // generator) keeps an op whatever its results.
        let effect_elsewhere = !op.prim.is_pure() && op.mutated.is_empty();
        let live = effect_elsewhere || op.outs.iter().chain(&op.mutated).any(|&v| needed[v] || lasting(v));
        if live {
            keep[i] = true;
            for r in op.reads() {
                needed[r] = true;
            }
        }
    }
    let before = p.ops.len();
    let mut k = keep.into_iter();
    p.ops.retain(|_| k.next().unwrap_or(true));
    p.report.dead_ops = before - p.ops.len();
}

/// Evaluates once, at compile time, every pure op that reads only
/// constants (uploads, fills, and what is computed from them alone), when
/// its results are small and never updated in place.
pub(crate) fn fold_constants<B: Backend>(p: &mut Program<B>) -> Result<()> {
    let mut mutated = vec![false; p.locs.len()];
    for op in &p.ops {
        for &v in &op.mutated {
            mutated[v] = true;
        }
    }
    let ops = std::mem::take(&mut p.ops);
    let mut kept = Vec::with_capacity(ops.len());
    for op in ops {
        let foldable = op.prim.is_pure()
            && op.ins.iter().all(|&v| matches!(p.locs[v], Loc::Const(_)))
            && op.outs.iter().all(|&v| matches!(p.locs[v], Loc::Slot) && !mutated[v])
            && op.outs.iter().map(|&v| p.meta[v].len).sum::<usize>() <= FOLD_MAX_ELEMS
            && !p.outputs.iter().any(|(v, _)| op.outs.contains(v));
        if !foldable {
            kept.push(op);
            continue;
        }
        let mut env = Env { slots: (0..p.locs.len()).map(|_| None).collect(), inputs: &[] };
        p.exec(&op, &mut env)?;
        for &v in &op.outs {
            let s = env.slots[v].take().ok_or_else(|| autograd_core::Error::msg("compiled step: a folded op wrote nothing"))?;
            p.report.const_bytes += p.meta[v].bytes();
            p.locs[v] = Loc::Const(Arc::new(s));
        }
        p.report.folded_ops += 1;
    }
    p.ops = kept;
    Ok(())
}

/// The elementwise ops a fused group may hold: unary and binary ops in one
/// float dtype. Returns the output shape and the operands with their layouts.
/// An elementwise op's output shape, dtype and operands (value, layout).
type Elementwise = (Shape, DType, Vec<(ValueId, Layout)>);

fn elementwise<B: Backend>(p: &Program<B>, op: &Op<B>) -> Option<Elementwise> {
    let (shape, operands) = match &op.prim {
        Primitive::Unary { layout, .. } => (layout.shape().clone(), vec![(op.ins[0], layout.clone())]),
        Primitive::Binary { la, lb, .. } => (la.shape().clone(), vec![(op.ins[0], la.clone()), (op.ins[1], lb.clone())]),
        _ => return None,
    };
    let dtype = p.meta[op.outs[0]].dtype;
    let ok = matches!(dtype, DType::F32 | DType::F64) && operands.iter().all(|(v, _)| p.meta[*v].dtype == dtype);
    ok.then_some((shape, dtype, operands))
}

/// A run of elementwise ops being gathered into one group.
struct Group {
    shape: Shape,
    dtype: DType,
    members: Vec<usize>,
    produced: FxHashMap<ValueId, usize>,
}

/// Fuses each run of consecutive elementwise ops of one shape and dtype
/// into one fused-elementwise op: one pass over memory, the intermediates kept
/// in registers. A member may read a value made inside the group only
/// through the plain contiguous layout it was made with (a transposed or
/// broadcast read of it ends the group); values made inside and read
/// after the group (or returned, or kept past the step) are its outputs.
/// Consecutive ops only: nothing runs between two members, so running
/// them later, together, reorders nothing (same operands, same order of
/// floating-point operations: the same bits).
pub(crate) fn fuse_elementwise<B: Backend>(p: &mut Program<B>) -> Result<()> {
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); p.locs.len()];
    for (i, op) in p.ops.iter().enumerate() {
        for r in op.reads() {
            readers[r].push(i);
        }
    }
    let ops = std::mem::take(&mut p.ops);
    let mut out: Vec<Op<B>> = Vec::with_capacity(ops.len());
    let mut group: Option<Group> = None;
    for (i, op) in ops.iter().enumerate() {
        let Some((shape, dtype, operands)) = elementwise(p, op) else {
            if let Some(g) = group.take() {
                flush(p, &ops, g, &readers, &mut out)?;
            }
            out.push(op.clone());
            continue;
        };
        let joins = group.as_ref().is_some_and(|g| {
            g.shape == shape
                && g.dtype == dtype
                && operands.iter().all(|(v, l)| !g.produced.contains_key(v) || *l == Layout::contiguous(shape.clone()))
        });
        if !joins {
            if let Some(g) = group.take() {
                flush(p, &ops, g, &readers, &mut out)?;
            }
            group = Some(Group { shape, dtype, members: Vec::new(), produced: FxHashMap::default() });
        }
        let g = group.as_mut().expect("just made");
        g.produced.insert(op.outs[0], g.members.len());
        g.members.push(i);
    }
    if let Some(g) = group.take() {
        flush(p, &ops, g, &readers, &mut out)?;
    }
    p.ops = out;
    Ok(())
}

fn flush<B: Backend>(p: &mut Program<B>, ops: &[Op<B>], g: Group, readers: &[Vec<usize>], out: &mut Vec<Op<B>>) -> Result<()> {
    if g.members.len() == 1 {
        out.push(ops[g.members[0]].clone());
        return Ok(());
    }
    // Inputs first (registers 0..n), then one register per member.
    let mut inputs: Vec<(ValueId, Layout)> = Vec::new();
    for &i in &g.members {
        for (v, l) in elementwise(p, &ops[i]).expect("members are elementwise").2 {
            if !g.produced.contains_key(&v) && !inputs.iter().any(|(w, m)| *w == v && *m == l) {
                inputs.push((v, l));
            }
        }
    }
    let n = inputs.len();
    let reg = |v: ValueId, l: &Layout| -> usize {
        match g.produced.get(&v) {
            Some(&k) => n + k,
            None => inputs.iter().position(|(w, m)| *w == v && m == l).expect("collected above"),
        }
    };
    let instrs: Vec<Instr> = g
        .members
        .iter()
        .map(|&i| {
            let op = &ops[i];
            match &op.prim {
                Primitive::Unary { op: u, layout } => Instr::Unary(*u, reg(op.ins[0], layout)),
                Primitive::Binary { op: b, la, lb } => Instr::Binary(*b, reg(op.ins[0], la), reg(op.ins[1], lb)),
                _ => unreachable!("members are elementwise"),
            }
        })
        .collect();
    let mut outs = Vec::new();
    let mut out_regs = Vec::new();
    for (k, &i) in g.members.iter().enumerate() {
        let v = ops[i].outs[0];
        let read_after = readers[v].iter().any(|r| !g.members.contains(r));
        let returned = p.outputs.iter().any(|(w, _)| *w == v);
        if read_after || returned || !matches!(p.locs[v], Loc::Slot) {
            outs.push(v);
            out_regs.push(n + k);
        }
    }
    let program = ElementwiseProgram::new(n, instrs, out_regs)?;
    p.report.fused_groups += 1;
    p.report.fused_ops += g.members.len();
    out.push(Op {
        prim: Primitive::FusedElementwise { program: Arc::new(program), layouts: inputs.iter().map(|(_, l)| l.clone()).collect() },
        ins: inputs.into_iter().map(|(v, _)| v).collect(),
        mutated: Vec::new(),
        outs,
    });
    Ok(())
}

/// Frees every temporary after its last reader (one made and never read:
/// right after the op that made it). A buffer that outlives the step and
/// that the program overwrites before reading (a gradient under
/// `zero_grad(set_to_none)`) has dead contents until then: a replay
/// releases them at its start, as eager execution drops the old gradient,
/// so the replay holds no more than eager does.
///
/// The plan's peak counts the bytes a replay allocates and holds at once,
/// relative to what was live when it started (released contents count
/// negative until their replacement is made).
pub(crate) fn plan_memory<B: Backend>(p: &mut Program<B>) {
    let mut last: Vec<Option<usize>> = vec![None; p.locs.len()];
    let mut first_read: Vec<Option<usize>> = vec![None; p.locs.len()];
    let mut producer: Vec<Option<usize>> = vec![None; p.locs.len()];
    for (i, op) in p.ops.iter().enumerate() {
        for &o in &op.outs {
            last[o] = Some(i);
            producer[o].get_or_insert(i);
        }
        for r in op.reads() {
            last[r] = Some(i);
            first_read[r].get_or_insert(i);
        }
    }
    let mut returned = vec![false; p.locs.len()];
    for (v, _) in &p.outputs {
        returned[*v] = true;
    }
    let mut frees = vec![Vec::new(); p.ops.len()];
    for (v, l) in last.iter().enumerate() {
        if let Some(i) = l
            && matches!(p.locs[v], Loc::Slot)
            && !returned[v]
        {
            frees[*i].push(v);
        }
    }
    let released: Vec<ValueId> = (0..p.locs.len())
        .filter(|&v| matches!(p.locs[v], Loc::Persistent(_)))
        .filter(|&v| producer[v].is_some_and(|i| first_read[v].is_none_or(|r| r > i)))
        .collect();
    let mut is_released = vec![false; p.locs.len()];
    for &v in &released {
        is_released[v] = true;
    }
    let mut live: i128 = -released.iter().map(|&v| p.meta[v].bytes() as i128).sum::<i128>();
    let mut peak: i128 = 0;
    for (op, freed) in p.ops.iter().zip(&frees) {
        live += op.outs.iter().map(|&v| p.meta[v].bytes() as i128).sum::<i128>();
        peak = peak.max(live);
        // A buffer that kept its old contents drops them once replaced.
        live -= op
            .outs
            .iter()
            .filter(|&&v| matches!(p.locs[v], Loc::Persistent(_)) && !is_released[v])
            .map(|&v| p.meta[v].bytes() as i128)
            .sum::<i128>();
        live -= freed.iter().map(|&v| p.meta[v].bytes() as i128).sum::<i128>();
    }
    p.frees = frees;
    p.released = released;
    p.parallel = parallel_updates(p);
    p.report.planned_peak_bytes = usize::try_from(peak).unwrap_or(usize::MAX);
    p.report.replay_ops = p.ops.len();
}

/// Total elements from which a run of updates goes to the thread pool (an
/// eager optimizer step's threshold, `autograd-optim`'s `PAR_MIN_TOTAL`).
const PAR_MIN_TOTAL: usize = 1 << 16;

/// Runs of consecutive parameter updates that may run side by side: every
/// buffer they update outlives the step, none is touched by two of them,
/// and together they are big enough to be worth the pool's wake-up.
fn parallel_updates<B: Backend>(p: &Program<B>) -> Vec<Option<usize>> {
    let mut out = vec![None; p.ops.len()];
    let eligible = |op: &Op<B>| {
        matches!(op.prim, Primitive::FusedUpdate { .. })
            && op.mutated.iter().all(|&v| matches!(p.locs[v], Loc::Persistent(_) | Loc::Input(_)))
    };
    let mut i = 0;
    while i < p.ops.len() {
        let mut end = i;
        let mut seen = rustc_hash::FxHashSet::default();
        while end < p.ops.len() && eligible(&p.ops[end]) && p.ops[end].reads().all(|v| seen.insert(v)) {
            end += 1;
        }
        let total: usize = p.ops[i..end].iter().map(|op| p.meta[op.mutated[0]].len).sum();
        if end - i > 1 && total >= PAR_MIN_TOTAL {
            out[i] = Some(end);
            i = end;
        } else {
            i = end.max(i + 1);
        }
    }
    out
}
