//! What a compiled program assumes besides its inputs' layouts, and the
//! checks a replay makes before trusting it.
//!
//! A trace bakes in every decision the step's host code took: which
//! tensors required grad (so which backward ops exist), whether a gradient
//! was accumulated into or created, which mode each module was in, whether
//! grad mode and autocast were on. A replay that ran with any of these
//! changed would compute the other program's answer silently (a frozen
//! layer still updated; an input's gradient never written). So each is
//! either part of the cache key ([`ThreadMode`] and the per-input facts of
//! the signature, compared as data) or a guard checked before a replay
//! ([`Guards::check`]): a failed check traces the step afresh, and the old
//! program stays cached for when the facts flip back.

use crate::buffer::Buf;
use crate::traced::Traced;
use autograd_core::{Backend, DType, Layout};
use autograd_tensor::capture::{CaptureObserver, ReplayGuard};
use autograd_tensor::{Tensor, WeakTensor};
use rustc_hash::FxHashSet;
use std::cell::RefCell;
use std::sync::Arc;

/// Thread-wide modes a trace depends on, part of the cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ThreadMode {
    grad_enabled: bool,
    inference: bool,
    autocast: Option<DType>,
}

impl ThreadMode {
    pub(crate) fn now() -> Self {
        ThreadMode {
            grad_enabled: autograd_tensor::is_grad_enabled(),
            inference: autograd_tensor::is_inference_mode(),
            autocast: autograd_tensor::autocast::autocast_dtype(),
        }
    }
}

/// What the capture observed while a step was traced (the tensor layer's
/// [`CaptureObserver`]): each leaf an op read, with its `requires_grad`
/// then, and each gradient backward accumulated into in place.
pub(crate) struct Observed<B: Backend> {
    seen: RefCell<FxHashSet<usize>>,
    leaves: RefCell<Vec<(WeakTensor<Traced<B>>, bool)>>,
    grad_reads: RefCell<Vec<(WeakTensor<Traced<B>>, u64)>>,
}

impl<B: Backend> Default for Observed<B> {
    fn default() -> Self {
        Observed { seen: Default::default(), leaves: Default::default(), grad_reads: Default::default() }
    }
}

pub(crate) fn buf_id<B: Backend>(t: &Tensor<Traced<B>>) -> u64 {
    t.storage().0.id
}

impl<B: Backend> CaptureObserver<Traced<B>> for Observed<B> {
    fn leaf_read(&self, leaf: &Tensor<Traced<B>>) {
        if self.seen.borrow_mut().insert(leaf.id()) {
            self.leaves.borrow_mut().push((leaf.downgrade(), leaf.requires_grad()));
        }
    }
    fn grad_accumulated(&self, leaf: &Tensor<Traced<B>>, grad: &Tensor<Traced<B>>) {
        self.grad_reads.borrow_mut().push((leaf.downgrade(), buf_id(grad)));
    }
}

/// Whose gradient a program reads: a tensor that outlives the step (a
/// parameter), or the step's `k`-th input (a new tensor every call).
enum GradOwner<B: Backend> {
    Leaf(WeakTensor<Traced<B>>),
    Input(usize),
}

/// The checks a replay makes (see the module docs).
pub(crate) struct Guards<B: Backend> {
    /// Tensors that outlive the step, read by its ops, with their
    /// `requires_grad` when traced.
    leaves: Vec<(WeakTensor<Traced<B>>, bool)>,
    /// Gradients the program accumulates into in place: the owner must
    /// still hold a gradient in that buffer.
    grads: Vec<(GradOwner<B>, u64)>,
    /// Host facts the step registered (modules' training flags).
    flags: Vec<Arc<dyn ReplayGuard>>,
    /// Gradients the program writes anew, which their tensors hold after
    /// the traced call: handed back to a tensor that let go of its own
    /// (`zero_grad(set_to_none)` between replays), as eager backward would.
    reattach: Vec<Reattach<B>>,
}

/// A tensor, the buffer of the gradient the program writes for it, and
/// that gradient's layout.
type Reattach<B> = (WeakTensor<Traced<B>>, Arc<Buf<B>>, Layout);

/// What [`Guards::check`] found.
pub(crate) enum Verdict {
    Holds,
    /// A fact changed (the description says which): trace again.
    Changed(String),
    /// A guarded tensor is gone: this program can never be replayed again.
    Dead,
}

impl<B: Backend> Guards<B> {
    /// The guards of a finished trace: `observed` during it, the `flags`
    /// it registered, and the step's `inputs` (their gradients are
    /// positional: each call passes new tensors). Leaves no longer alive
    /// were made inside the step (their successors are made anew by each
    /// replay's own program) and are not guarded.
    pub(crate) fn new(observed: &Observed<B>, flags: Vec<Arc<dyn ReplayGuard>>, inputs: &[Tensor<Traced<B>>], persistent: &[u64]) -> Self {
        let input_ids: Vec<u64> = inputs.iter().map(buf_id).collect();
        let is_input = |t: &Tensor<Traced<B>>| input_ids.contains(&buf_id(t));
        let mut leaves = Vec::new();
        let mut reattach = Vec::new();
        for (w, requires_grad) in observed.leaves.borrow().iter() {
            let Some(t) = w.upgrade() else { continue };
            if is_input(&t) {
                continue; // the signature holds each input's requires_grad
            }
            leaves.push((w.clone(), *requires_grad));
            if let Some(g) = t.grad() {
                let buf = g.storage().0.clone();
                if persistent.binary_search(&buf.id).is_ok() {
                    reattach.push((w.clone(), buf, g.layout().clone()));
                }
            }
        }
        let grads = observed
            .grad_reads
            .borrow()
            .iter()
            .filter_map(|(w, id)| {
                let t = w.upgrade()?;
                let owner = match input_ids.iter().position(|&i| i == buf_id(&t)) {
                    Some(k) => GradOwner::Input(k),
                    None => GradOwner::Leaf(w.clone()),
                };
                Some((owner, *id))
            })
            .collect();
        Guards { leaves, grads, flags, reattach }
    }

    /// Whether a replay with `inputs` would compute what the traced call computed.
    pub(crate) fn check(&self, inputs: &[Tensor<Traced<B>>]) -> Verdict {
        for (w, requires_grad) in &self.leaves {
            match w.upgrade() {
                None => return Verdict::Dead,
                Some(t) if t.requires_grad() != *requires_grad => {
                    return Verdict::Changed(format!("a tensor of shape {:?} traced with requires_grad={requires_grad}", t.dims()));
                }
                Some(_) => {}
            }
        }
        for (owner, id) in &self.grads {
            let t = match owner {
                GradOwner::Leaf(w) => match w.upgrade() {
                    Some(t) => t,
                    None => return Verdict::Dead,
                },
                GradOwner::Input(k) => match inputs.get(*k) {
                    Some(t) => t.clone(),
                    None => return Verdict::Changed(format!("input {k} is missing")),
                },
            };
            if t.grad().is_none_or(|g| buf_id(&g) != *id) {
                return Verdict::Changed(format!("the gradient a tensor of shape {:?} held when traced was replaced", t.dims()));
            }
        }
        if let Some(f) = self.flags.iter().find(|f| !f.holds()) {
            return Verdict::Changed(format!("{} no longer holds", f.describe()));
        }
        Verdict::Holds
    }

    /// After a replay: every tensor whose gradient the program wrote holds it.
    pub(crate) fn reattach_grads(&self) -> autograd_core::Result<()> {
        for (w, buf, layout) in &self.reattach {
            let Some(t) = w.upgrade() else { continue };
            if t.grad().is_none_or(|g| buf_id(&g) != buf.id) {
                let storage = crate::buffer::TracedStorage(buf.clone());
                t.set_grad(Some(Tensor::try_from_storage(storage, layout.clone())?));
            }
        }
        Ok(())
    }
}
