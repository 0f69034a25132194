//! `checkpoint(f, inputs)`: run `f` without keeping what its ops save for
//! backward; recompute it when backward first needs one of those tensors.
//!
//! Built on saved-tensor hooks (PyTorch's non-reentrant checkpoint): the
//! forward records the graph as usual, so parameters used inside `f` get
//! gradients whether or not the inputs require grad, but every tensor an op
//! would save is replaced by its position in the region. The first unpack
//! re-runs `f` on the saved inputs (with the RNG state of the first run),
//! collects what the ops save this time, checks it against the first run,
//! and hands the tensors out one by one, freeing each as it is used.

use autograd_core::rng::Generator;
use autograd_core::{Backend, DType, Error, Result, Shape};
use autograd_tensor::autocast::{AutocastState, with_autocast_state};
use autograd_tensor::{
    PackedTensor, SavedTensor, SavedTensorHooks, Tensor, enable_grad, fork_rng_from, is_grad_enabled, rng_state, with_saved_tensor_hooks,
};
use std::sync::{Arc, Mutex};

/// The function a checkpoint runs (and re-runs during backward).
pub type CheckpointFn<B> = dyn Fn(&[Tensor<B>]) -> Result<Vec<Tensor<B>>> + Send + Sync;

/// Options of [`checkpoint_with`].
#[derive(Clone, Copy, Debug)]
pub struct CheckpointOptions {
    /// Capture the RNG state before the forward and replay it in the
    /// recomputation, so dropout draws the same mask (default true).
    pub preserve_rng_state: bool,
    /// Compare the number, shapes and dtypes of the tensors saved by the
    /// recomputation with the first run's; a mismatch is an `Err` (default true).
    pub determinism_check: bool,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions { preserve_rng_state: true, determinism_check: true }
    }
}

/// One checkpointed region: what it needs to run again.
struct Frame<B: Backend> {
    f: Arc<CheckpointFn<B>>,
    /// The inputs, saved (through any enclosing checkpoint's hooks, so nesting
    /// works) with whether each required grad.
    inputs: Vec<(SavedTensor<B>, bool)>,
    rng: Option<Generator>,
    /// The autocast region the first run was in, its dtype and its cache
    /// flag (PyTorch's checkpoint restores both): the recomputation saves
    /// the same dtypes and caches (or not) as the first run did.
    autocast: AutocastState,
    opts: CheckpointOptions,
    /// Shape and dtype of each tensor the first run saved, in order.
    meta: Mutex<Vec<(Shape, DType)>>,
    /// The recomputation's saved tensors; each is taken (freed) when unpacked.
    cache: Mutex<Vec<Option<Tensor<B>>>>,
}

/// The hooks installed while the region first runs: remember the order,
/// drop the tensor.
struct DropSaved<B: Backend>(Arc<Frame<B>>);

impl<B: Backend> SavedTensorHooks<B> for DropSaved<B> {
    fn pack(&self, t: &Tensor<B>) -> PackedTensor {
        let mut meta = self.0.meta.lock().unwrap_or_else(|e| e.into_inner());
        meta.push((t.shape().clone(), t.dtype()));
        Box::new(meta.len() - 1)
    }
    fn unpack(&self, packed: &PackedTensor) -> Result<Tensor<B>> {
        let idx = *packed.downcast_ref::<usize>().expect("checkpoint handles are indices");
        self.0.take(idx)
    }
}

/// The hooks installed while the region is recomputed: keep what is saved.
struct Record<B: Backend>(Mutex<Vec<Tensor<B>>>);

impl<B: Backend> SavedTensorHooks<B> for Record<B> {
    fn pack(&self, t: &Tensor<B>) -> PackedTensor {
        // Detached: the recomputation's own graph is thrown away.
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(t.detach());
        Box::new(())
    }
    fn unpack(&self, _: &PackedTensor) -> Result<Tensor<B>> {
        Err(Error::Autograd("internal: the graph of a checkpoint's recomputation is not differentiated".into()))
    }
}

impl<B: Backend> Frame<B> {
    fn take(&self, idx: usize) -> Result<Tensor<B>> {
        if is_grad_enabled() {
            return Err(Error::Autograd(
                "checkpoint: backward with create_graph through a checkpointed region is not supported; \
                 run the region without checkpoint for higher-order gradients"
                    .into(),
            ));
        }
        if let Some(t) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get_mut(idx).and_then(Option::take) {
            return Ok(t);
        }
        // First unpack of this backward (or a second backward with retain_graph): recompute.
        let mut fresh = self.recompute()?;
        let t = fresh[idx].take().expect("just recomputed");
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(t)
    }

    fn recompute(&self) -> Result<Vec<Option<Tensor<B>>>> {
        let _span = tracing::debug_span!("checkpoint_recompute").entered();
        let inputs =
            self.inputs.iter().map(|(s, rg)| Ok(s.get("checkpoint")?.detach().requires_grad_(*rg))).collect::<Result<Vec<Tensor<B>>>>()?;
        let rec = Arc::new(Record(Mutex::new(Vec::new())));
        let forward = || with_saved_tensor_hooks(rec.clone() as Arc<dyn SavedTensorHooks<B>>, || (self.f)(&inputs));
        let run = || with_autocast_state(self.autocast, || enable_grad(forward))?.map(drop);
        match &self.rng {
            // A private generator in the first run's state: the same draws,
            // and nothing else (other threads, the global state) is disturbed.
            Some(state) => fork_rng_from(state.clone(), run)?,
            None => run()?,
        }
        let saved = std::mem::take(&mut *rec.0.lock().unwrap_or_else(|e| e.into_inner()));
        let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
        if saved.len() != meta.len() {
            return Err(Error::Autograd(format!(
                "checkpoint: the recomputed forward saved {} tensors for backward, the original forward saved {}; \
                 the checkpointed function must do the same ops when run again (data-dependent control flow or global state?)",
                saved.len(),
                meta.len()
            )));
        }
        if self.opts.determinism_check {
            for (i, (t, (shape, dtype))) in saved.iter().zip(meta.iter()).enumerate() {
                if t.shape() != shape || t.dtype() != *dtype {
                    return Err(Error::Autograd(format!(
                        "checkpoint: recomputed tensor #{i} is {:?} {:?}, the original forward saved {:?} {:?}; \
                         the checkpointed function is not deterministic",
                        t.dtype(),
                        t.dims(),
                        dtype,
                        shape.dims()
                    )));
                }
            }
        }
        Ok(saved.into_iter().map(Some).collect())
    }
}

/// Runs `f(inputs)` keeping only `inputs` for backward instead of every
/// activation inside `f`; backward recomputes `f` once. Parameters used
/// inside `f` receive gradients even if no input requires grad. Nesting
/// works (an inner checkpoint's inputs are themselves dropped and
/// recomputed by the outer one), and so does `retain_graph` (a second
/// backward recomputes again). Under `no_grad` it just runs `f`.
///
/// ```
/// use autograd_checkpoint::checkpoint;
/// use autograd_core::RefBackend;
/// use autograd_tensor::Tensor;
/// let w = Tensor::<RefBackend>::from_vec(vec![0.5f64, -1.0], [2]).requires_grad_(true);
/// let x = Tensor::<RefBackend>::from_vec(vec![1.0f64, 2.0], [2]);
/// let w2 = w.clone();
/// let y = checkpoint(move |i: &[Tensor<RefBackend>]| Ok(vec![(&i[0] * &w2).tanh().exp()]), &[x.clone()]).unwrap();
/// y[0].sum().backward().unwrap();
/// // same gradient as without checkpointing
/// let w3 = w.detach().requires_grad_(true);
/// (&x * &w3).tanh().exp().sum().backward().unwrap();
/// assert_eq!(w.grad().unwrap().to_vec_f64(), w3.grad().unwrap().to_vec_f64());
/// ```
pub fn checkpoint<B: Backend>(
    f: impl Fn(&[Tensor<B>]) -> Result<Vec<Tensor<B>>> + Send + Sync + 'static,
    inputs: &[Tensor<B>],
) -> Result<Vec<Tensor<B>>> {
    checkpoint_with(Arc::new(f), inputs, CheckpointOptions::default())
}

/// [`checkpoint`] with options and a shared function.
pub fn checkpoint_with<B: Backend>(f: Arc<CheckpointFn<B>>, inputs: &[Tensor<B>], opts: CheckpointOptions) -> Result<Vec<Tensor<B>>> {
    if !is_grad_enabled() {
        return f(inputs);
    }
    let frame = Arc::new(Frame {
        // Saved before our hooks go on: an enclosing checkpoint drops these too.
        inputs: inputs.iter().map(|t| (SavedTensor::new(t), t.requires_grad())).collect(),
        rng: opts.preserve_rng_state.then(rng_state),
        autocast: AutocastState::current(),
        f: f.clone(),
        opts,
        meta: Mutex::new(Vec::new()),
        cache: Mutex::new(Vec::new()),
    });
    with_saved_tensor_hooks(Arc::new(DropSaved(frame)) as Arc<dyn SavedTensorHooks<B>>, || f(inputs))
}
