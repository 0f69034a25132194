//! Running a compiled program: one replay runs every op on `B` directly
//! (no `Tensor`, no graph nodes), frees temporaries after their last
//! reader, and hands the outputs back as fresh tensors.

use crate::buffer::{Buf, TracedStorage};
use crate::program::{Loc, Program, internal};
use crate::recorder::{Op, ValueId};
use crate::traced::Traced;
use autograd_core::primitive::Outputs;
use autograd_core::{Backend, Error, Layout, Primitive, Result, Shape};
use autograd_tensor::Tensor;
use rayon::prelude::*;
use smallvec::SmallVec;
use std::ops::Deref;
use std::sync::{Arc, RwLockReadGuard, RwLockWriteGuard};

/// The state of one replay.
pub(crate) struct Env<'a, B: Backend> {
    pub(crate) slots: Vec<Option<B::Storage>>,
    pub(crate) inputs: &'a [Arc<Buf<B>>],
}

enum Val<'a, B: Backend> {
    Ref(&'a B::Storage),
    Guard(RwLockReadGuard<'a, B::Storage>),
}

impl<B: Backend> Deref for Val<'_, B> {
    type Target = B::Storage;
    fn deref(&self) -> &B::Storage {
        match self {
            Val::Ref(s) => s,
            Val::Guard(g) => g,
        }
    }
}

/// A buffer an op updates in place: taken out of its slot, or locked.
enum Mut<'a, B: Backend> {
    Owned(ValueId, B::Storage),
    Guard(RwLockWriteGuard<'a, B::Storage>),
}

impl<B: Backend> Mut<'_, B> {
    fn get(&mut self) -> &mut B::Storage {
        match self {
            Mut::Owned(_, s) => s,
            Mut::Guard(g) => g,
        }
    }
}

impl<B: Backend> Program<B> {
    fn read<'a>(&'a self, env: &'a Env<'a, B>, v: ValueId) -> Result<Val<'a, B>> {
        Ok(match &self.locs[v] {
            Loc::Slot => Val::Ref(env.slots[v].as_ref().ok_or_else(|| internal(&format!("%{v} read before it was written")))?),
            Loc::Input(k) => Val::Guard(env.inputs.get(*k).ok_or_else(|| internal("missing input"))?.read()),
            Loc::Persistent(b) => Val::Guard(b.read()),
            Loc::Const(s) => Val::Ref(s.as_ref()),
        })
    }

    fn take_mut<'a>(&'a self, slots: &mut [Option<B::Storage>], inputs: &'a [Arc<Buf<B>>], v: ValueId) -> Result<Mut<'a, B>> {
        Ok(match &self.locs[v] {
            Loc::Slot => Mut::Owned(v, slots[v].take().ok_or_else(|| internal(&format!("%{v} updated before it was written")))?),
            Loc::Input(k) => Mut::Guard(inputs.get(*k).ok_or_else(|| internal("missing input"))?.write()),
            Loc::Persistent(b) => Mut::Guard(b.write()),
            Loc::Const(_) => return Err(internal("a constant is updated in place")),
        })
    }

    fn put_back(slots: &mut [Option<B::Storage>], m: Mut<'_, B>) {
        if let Mut::Owned(v, s) = m {
            slots[v] = Some(s);
        }
    }

    pub(crate) fn store(&self, env: &mut Env<'_, B>, v: ValueId, s: B::Storage) -> Result<()> {
        match &self.locs[v] {
            Loc::Slot => env.slots[v] = Some(s),
            Loc::Persistent(b) => b.replace(s)?,
            Loc::Input(_) | Loc::Const(_) => return Err(internal("an op writes an input or a constant")),
        }
        Ok(())
    }

    /// Runs one op.
    pub(crate) fn exec(&self, op: &Op<B>, env: &mut Env<'_, B>) -> Result<()> {
        let outs = if op.mutated.is_empty() { self.run_pure(op, env)? } else { self.run_mutating(op, env)? };
        if outs.len() != op.outs.len() {
            return Err(internal("an op returned another number of outputs than recorded"));
        }
        for (v, s) in op.outs.iter().zip(outs) {
            self.store(env, *v, s)?;
        }
        Ok(())
    }

    /// An op that updates nothing in place (most of them): its inputs read
    /// where they live, no copies.
    fn run_pure(&self, op: &Op<B>, env: &Env<'_, B>) -> Result<Outputs<B>> {
        let p = &op.prim;
        // The common arities without a list of guards (the replay's hot path).
        match *op.ins.as_slice() {
            [] => return Self::run_prim(p, &[], &mut []),
            [a] => return Self::run_prim(p, &[&*self.read(env, a)?], &mut []),
            [a, b] => return Self::run_prim(p, &[&*self.read(env, a)?, &*self.read(env, b)?], &mut []),
            [a, b, c] => return Self::run_prim(p, &[&*self.read(env, a)?, &*self.read(env, b)?, &*self.read(env, c)?], &mut []),
            _ => {}
        }
        let mut vals: SmallVec<[Val<'_, B>; 4]> = SmallVec::with_capacity(op.ins.len());
        for &v in &op.ins {
            vals.push(self.read(env, v)?);
        }
        let ins: SmallVec<[&B::Storage; 4]> = vals.iter().map(|v| &**v).collect();
        Self::run_prim(&op.prim, &ins, &mut [])
    }

    /// An op that updates buffers in place: they are taken out of their
    /// slots (or write-locked) for the call and put back whatever happens.
    fn run_mutating(&self, op: &Op<B>, env: &mut Env<'_, B>) -> Result<Outputs<B>> {
        // A buffer both read and updated (copied onto itself through other
        // views) is read from a copy of itself, taken first.
        let mut copies: SmallVec<[Option<B::Storage>; 4]> = SmallVec::with_capacity(op.ins.len());
        for v in &op.ins {
            copies.push(if op.mutated.contains(v) {
                let s = self.read(env, *v)?;
                Some(B::copy_strided(&s, &Layout::contiguous(Shape::from([B::len(&s)])))?)
            } else {
                None
            });
        }
        let mut taken: SmallVec<[Mut<'_, B>; 4]> = SmallVec::with_capacity(op.mutated.len());
        for &v in &op.mutated {
            match self.take_mut(&mut env.slots, env.inputs, v) {
                Ok(m) => taken.push(m),
                Err(e) => {
                    for m in taken {
                        Self::put_back(&mut env.slots, m);
                    }
                    return Err(e);
                }
            }
        }
        let outs = (|| {
            let mut vals: SmallVec<[Val<'_, B>; 4]> = SmallVec::with_capacity(op.ins.len());
            for (&v, c) in op.ins.iter().zip(&copies) {
                vals.push(match c {
                    Some(c) => Val::Ref(c),
                    None => self.read(env, v)?,
                });
            }
            let ins: SmallVec<[&B::Storage; 4]> = vals.iter().map(|v| &**v).collect();
            let mut muts: SmallVec<[&mut B::Storage; 4]> = taken.iter_mut().map(|m| m.get()).collect();
            Self::run_prim(&op.prim, &ins, &mut muts)
        })();
        for m in taken {
            Self::put_back(&mut env.slots, m);
        }
        outs
    }

    /// Runs a primitive, with the global generator if it draws.
    fn run_prim(prim: &Primitive<B>, ins: &[&B::Storage], muts: &mut [&mut B::Storage]) -> Result<Outputs<B>> {
        if prim.draws() { autograd_tensor::with_rng(|g| prim.run(ins, muts, Some(g))) } else { prim.run(ins, muts, None) }
    }

    /// A parameter update whose buffers all outlive the step, from any thread
    /// (see [`Program::parallel`]).
    fn exec_update(&self, op: &Op<B>, env: &Env<'_, B>) -> Result<()> {
        let prim @ Primitive::FusedUpdate { .. } = &op.prim else { return Err(internal("a parallel run holds another op")) };
        let mut guards = op
            .mutated
            .iter()
            .map(|&v| match &self.locs[v] {
                Loc::Persistent(b) => Ok(b.write()),
                Loc::Input(k) => Ok(env.inputs.get(*k).ok_or_else(|| internal("missing input"))?.write()),
                _ => Err(internal("a parallel update of a temporary")),
            })
            .collect::<Result<Vec<_>>>()?;
        let grad = self.read(env, op.ins[0])?;
        let mut muts: SmallVec<[&mut B::Storage; 4]> = guards.iter_mut().map(|g| &mut **g).collect();
        prim.run(&[&grad], &mut muts, None).map(drop)
    }

    /// One replay: runs every op on `B` with `inputs` (the batch's buffers),
    /// frees temporaries after their last reader, and returns the outputs as
    /// fresh tensors.
    pub(crate) fn replay(&self, inputs: &[Arc<Buf<B>>]) -> Result<Vec<Tensor<Traced<B>>>> {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        autograd_core::memory::with_pool(&mut pool, || self.replay_pooled(inputs))
    }

    fn replay_pooled(&self, inputs: &[Arc<Buf<B>>]) -> Result<Vec<Tensor<Traced<B>>>> {
        // An input that is one of the program's lasting buffers would be read
        // and written under one lock: refused before anything runs.
        if let Some(k) = inputs.iter().position(|i| self.persistent_ids.binary_search(&i.id).is_ok()) {
            return Err(Error::msg(format!(
                "compiled step: input {k} shares storage with a buffer the step keeps or updates (a parameter, a gradient, optimizer state); pass a copy"
            )));
        }
        let mut env = Env { slots: (0..self.locs.len()).map(|_| None).collect(), inputs };
        for &v in &self.released {
            if let Loc::Persistent(b) = &self.locs[v] {
                b.release()?;
            }
        }
        let mut i = 0;
        while i < self.ops.len() {
            let end = match self.parallel.get(i).copied().flatten() {
                Some(end) => {
                    let shared = &env;
                    self.ops[i..end].par_iter().map(|op| self.exec_update(op, shared)).collect::<Result<Vec<()>>>()?;
                    end
                }
                None => {
                    self.exec(&self.ops[i], &mut env)?;
                    i + 1
                }
            };
            for frees in &self.frees[i..end] {
                for &v in frees {
                    env.slots[v] = None;
                }
            }
            i = end;
        }
        let mut out = Vec::with_capacity(self.outputs.len());
        for (i, (v, layout)) in self.outputs.iter().enumerate() {
            // A temporary is handed over as it is, unless it is returned again later.
            let last = !self.outputs[i + 1..].iter().any(|(w, _)| w == v);
            let (s, l) = match &self.locs[*v] {
                Loc::Slot if last => (env.slots[*v].take().ok_or_else(|| internal("an output was never written"))?, layout.clone()),
                _ => (B::copy_strided(&*self.read(&env, *v)?, layout)?, Layout::contiguous(layout.shape().clone())),
            };
            out.push(Tensor::try_from_storage(TracedStorage::new(s), l)?);
        }
        Ok(out)
    }
}
