//! `compile`: the user's entry point, its guards and its cache.

use crate::buffer::{Buf, TracedStorage};
use crate::guards::{Guards, Observed, ThreadMode, Verdict};
use crate::program::Program;
use crate::recorder::{self, TRACE_LOCK};
use crate::traced::Traced;
use autograd_core::{Backend, DType, Error, Layout, Result};
use autograd_tensor::Tensor;
use autograd_tensor::capture;
use std::rc::Rc;
use std::sync::Arc;

/// What a compiled step does when a new input signature arrives and its
/// cache is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhenFull {
    /// Answer `Err` naming the signatures held (the default: shapes that
    /// change every step are a bug to fix, not a slow path to hide).
    #[default]
    Error,
    /// Run the step eagerly, uncompiled.
    Eager,
}

/// How a step is compiled.
///
/// ```
/// use autograd_jit::{CompileOptions, WhenFull};
/// let o = CompileOptions::default().with_cache_size(2).with_when_full(WhenFull::Eager);
/// assert_eq!((o.cache_size, o.warmup_calls), (2, 1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// Compiled programs kept, one per input signature (shapes, strides,
    /// dtypes). Default 8.
    pub cache_size: usize,
    /// What a new signature does when the cache is full.
    pub when_full: WhenFull,
    /// Calls per signature run eagerly before the one that is traced
    /// (default 1): the first call of a training step creates the
    /// optimizer's state, which later calls read and update in place.
    pub warmup_calls: usize,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions { cache_size: 8, when_full: WhenFull::Error, warmup_calls: 1 }
    }
}

impl CompileOptions {
    /// Sets [`CompileOptions::cache_size`].
    pub fn with_cache_size(mut self, n: usize) -> Self {
        self.cache_size = n;
        self
    }
    /// Sets [`CompileOptions::when_full`].
    pub fn with_when_full(mut self, w: WhenFull) -> Self {
        self.when_full = w;
        self
    }
    /// Sets [`CompileOptions::warmup_calls`].
    pub fn with_warmup_calls(mut self, n: usize) -> Self {
        self.warmup_calls = n;
        self
    }
}

/// How a compiled step's calls were run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Run eagerly (warm-up calls, and signatures past a full cache with [`WhenFull::Eager`]).
    pub eager: usize,
    /// Traced (run eagerly while recording), then compiled.
    pub traced: usize,
    /// Replayed from a compiled program.
    pub replayed: usize,
}

/// What a program is compiled for, compared as data: each input's layout,
/// dtype, the first input it shares storage with (itself if none, so that a
/// batch passing one tensor twice is not replayed as two), whether it
/// requires grad and whether it holds a gradient (the program creates the
/// input's gradient or accumulates into it); and the thread's modes.
#[derive(Clone, Debug, PartialEq)]
struct Signature {
    inputs: Vec<InputSig>,
    mode: ThreadMode,
}

#[derive(Clone, Debug, PartialEq)]
struct InputSig {
    layout: Layout,
    dtype: DType,
    alias: usize,
    requires_grad: bool,
    has_grad: bool,
}

/// A compiled program, the guards a replay checks, and which inputs get a
/// gradient from it (the program's extra outputs after the step's own).
struct Compiled<B: Backend> {
    program: Program<B>,
    guards: Guards<B>,
    input_grads: Vec<usize>,
}

struct Entry<B: Backend> {
    key: Signature,
    calls: usize,
    compiled: Option<Compiled<B>>,
}

/// The step function a [`CompiledStep`] wraps.
pub trait StepFn<B: Backend>: FnMut(&[Tensor<Traced<B>>]) -> Result<Vec<Tensor<Traced<B>>>> {}
impl<B: Backend, F: FnMut(&[Tensor<Traced<B>>]) -> Result<Vec<Tensor<Traced<B>>>>> StepFn<B> for F {}

/// A step compiled on demand: see [`compile`].
pub struct CompiledStep<B: Backend, F: StepFn<B>> {
    f: F,
    options: CompileOptions,
    entries: Vec<Entry<B>>,
    counts: CallCounts,
}

/// Wraps a step (zero_grad, forward, loss, backward, optimizer step, or any
/// part of it) so that it is traced once per input signature and then
/// replayed as a compiled program.
///
/// For each signature (the inputs' shapes, strides, dtypes, aliasing,
/// `requires_grad` and gradients, and the thread's grad mode and autocast
/// region): the first call runs eagerly ([`CompileOptions::warmup_calls`]),
/// the next runs eagerly while recording every backend primitive, and is
/// compiled (dead code removed, constants folded, elementwise chains fused,
/// temporaries freed after their last use); later calls replay the program
/// on `B` directly. Outputs come back as fresh tensors without a graph;
/// inputs that require grad get their gradients.
///
/// Before each replay the program's guards are checked: the
/// `requires_grad` of every tensor the step read that outlives it (a layer
/// frozen or unfrozen), the gradients it accumulates into, and the training
/// mode of every module whose forward read it. A change traces the step
/// afresh into a new cache entry; the first program serves again when the
/// facts flip back.
///
/// What a replay repeats: every primitive on the device, random draws
/// (fresh values from the global generator, in eager order), and so the
/// optimizer's updates with the step counts and learning rates in force
/// (they live in device scalars the update reads and advances). What it
/// does not: host code in the closure (baked as it ran when
/// traced: control flow must not depend on values or change between
/// calls). Reading values on the host while tracing, tensor hooks, and
/// draws from a forked generator are an `Err` rather than silently baked.
pub fn compile<B: Backend, F: StepFn<B>>(f: F) -> CompiledStep<B, F> {
    compile_with(CompileOptions::default(), f)
}

/// [`compile`] with options.
pub fn compile_with<B: Backend, F: StepFn<B>>(options: CompileOptions, f: F) -> CompiledStep<B, F> {
    CompiledStep { f, options, entries: Vec::new(), counts: CallCounts::default() }
}

fn signature<B: Backend>(batch: &[Tensor<Traced<B>>]) -> Signature {
    let inputs = batch
        .iter()
        .enumerate()
        .map(|(i, t)| InputSig {
            layout: t.layout().clone(),
            dtype: t.dtype(),
            alias: batch[..i].iter().position(|u| u.shares_storage(t)).unwrap_or(i),
            requires_grad: t.requires_grad(),
            has_grad: t.grad().is_some(),
        })
        .collect();
    Signature { inputs, mode: ThreadMode::now() }
}

fn bufs<B: Backend>(batch: &[Tensor<Traced<B>>]) -> Vec<Arc<Buf<B>>> {
    batch.iter().map(|t| t.storage().0.clone()).collect()
}

impl<B: Backend, F: StepFn<B>> CompiledStep<B, F> {
    /// Runs the step on `batch`: eagerly, traced, or replayed (see [`compile`]).
    pub fn run(&mut self, batch: &[Tensor<Traced<B>>]) -> Result<Vec<Tensor<Traced<B>>>> {
        if capture::is_capturing() {
            // A replay inside a trace would run unseen by the recorder, and a
            // trace inside a trace would wait on itself.
            return Err(Error::msg(
                "compiled step: run inside another step being traced; compiled steps do not nest (call the inner step's function directly)",
            ));
        }
        // A replay writes parameters without advancing their version
        // counters: copies cached by an enclosing autocast region would go
        // stale unseen, so none is carried into or out of a step.
        autograd_tensor::autocast::clear_cache();
        let out = self.run_uncached(batch);
        autograd_tensor::autocast::clear_cache();
        out
    }

    fn run_uncached(&mut self, batch: &[Tensor<Traced<B>>]) -> Result<Vec<Tensor<Traced<B>>>> {
        let key = signature(batch);
        // A program for this signature whose guards hold; programs whose
        // guarded tensors are gone can never run again and leave the cache.
        let mut changed = None;
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            if let (true, Some(c)) = (e.key == key, &e.compiled) {
                match c.guards.check(batch) {
                    Verdict::Holds => return self.replay(i, batch),
                    Verdict::Changed(why) => changed = Some(why),
                    Verdict::Dead => {
                        self.entries.remove(i);
                        continue;
                    }
                }
            }
            i += 1;
        }
        if let Some(why) = &changed {
            tracing::debug!(why, "compiled step: a guard failed; tracing again");
        }
        let idx = match self.entries.iter().position(|e| e.key == key && e.compiled.is_none()) {
            Some(i) => i,
            None if self.entries.len() >= self.options.cache_size => match self.options.when_full {
                WhenFull::Eager => {
                    self.counts.eager += 1;
                    return (self.f)(batch);
                }
                WhenFull::Error => {
                    let held: Vec<String> = self.entries.iter().map(|e| describe(&e.key)).collect();
                    return Err(Error::msg(format!(
                        "compiled step: a new input signature {}{} but the cache already holds {} ({}); inputs whose shapes change every step need padding to a few shapes, a larger cache_size, or WhenFull::Eager",
                        describe(&key),
                        changed.map(|w| format!(" (or the same one after {w})")).unwrap_or_default(),
                        self.options.cache_size,
                        held.join(", ")
                    )));
                }
            },
            None => {
                self.entries.push(Entry { key, calls: 0, compiled: None });
                self.entries.len() - 1
            }
        };
        let entry = &mut self.entries[idx];
        if entry.calls < self.options.warmup_calls {
            entry.calls += 1;
            self.counts.eager += 1;
            return (self.f)(batch);
        }
        let (compiled, outputs) = trace(&mut self.f, batch)?;
        self.counts.traced += 1;
        self.entries[idx].compiled = Some(compiled);
        Ok(outputs)
    }

    /// Replays entry `i`'s program, then gives the inputs their gradients
    /// and the guarded tensors back the gradients the program wrote.
    fn replay(&mut self, i: usize, batch: &[Tensor<Traced<B>>]) -> Result<Vec<Tensor<Traced<B>>>> {
        let c = self.entries[i].compiled.as_ref().expect("a compiled entry");
        let _span = tracing::debug_span!("jit_replay", ops = c.program.ops.len()).entered();
        self.counts.replayed += 1;
        let mut outs = c.program.replay(&bufs(batch))?;
        let grads = outs.split_off(outs.len() - c.input_grads.len());
        for (&k, g) in c.input_grads.iter().zip(grads) {
            batch[k].set_grad(Some(g));
        }
        c.guards.reattach_grads()?;
        Ok(outs)
    }

    /// How the calls so far were run.
    pub fn counts(&self) -> CallCounts {
        self.counts
    }

    /// The compiled program for `batch`'s signature, once traced.
    /// (the one a replay would run now, when several are cached for it).
    pub fn program_for(&self, batch: &[Tensor<Traced<B>>]) -> Option<&Program<B>> {
        let key = signature(batch);
        let held = || self.entries.iter().filter(|e| e.key == key).filter_map(|e| e.compiled.as_ref());
        held().find(|c| matches!(c.guards.check(batch), Verdict::Holds)).or_else(|| held().next()).map(|c| &c.program)
    }

    /// Every compiled program, in the order their signatures arrived.
    pub fn programs(&self) -> impl Iterator<Item = &Program<B>> {
        self.entries.iter().filter_map(|e| e.compiled.as_ref().map(|c| &c.program))
    }
}

fn describe(key: &Signature) -> String {
    let parts: Vec<String> = key
        .inputs
        .iter()
        .map(|i| format!("{:?} {:?}{}", i.layout.shape().dims(), i.dtype, if i.requires_grad { " requires_grad" } else { "" }))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// A compiled program and the outputs of the traced call.
type TraceResult<B> = (Compiled<B>, Vec<Tensor<Traced<B>>>);

/// Runs `f` eagerly while recording, then compiles what it ran.
fn trace<B: Backend, F: StepFn<B>>(f: &mut F, batch: &[Tensor<Traced<B>>]) -> Result<TraceResult<B>> {
    let _one_trace_at_a_time = TRACE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let span = tracing::info_span!("jit_trace", inputs = batch.len()).entered();
    let base = autograd_core::memory::live_bytes();
    autograd_core::memory::reset_peak();
    recorder::start::<B>();
    // Stops the recording however the step ends (a panic included), so no
    // later op is recorded into a trace nobody will read.
    struct Stop<B: Backend>(std::marker::PhantomData<B>);
    impl<B: Backend> Drop for Stop<B> {
        fn drop(&mut self) {
            if recorder::is_active() {
                drop(recorder::finish::<B>());
            }
        }
    }
    let stop = Stop::<B>(std::marker::PhantomData);
    let observed = Rc::new(Observed::<B>::default());
    let (result, flags) = {
        let capture = capture::begin_capture_observed::<Traced<B>>(observed.clone());
        let result = f(batch);
        (result, capture.take_guards())
    };
    let rec = recorder::finish::<B>();
    drop(stop);
    let outputs = result?;
    let eager_peak = autograd_core::memory::peak_bytes().saturating_sub(base);
    let mut rec = rec.ok_or_else(|| Error::msg("compiled step: the recording was lost (another trace ran at the same time)"))?;
    if let Some(why) = rec.poisoned.take() {
        return Err(Error::msg(format!("compiled step: the traced call ran, but cannot be replayed faithfully: {why}")));
    }
    drop(span);
    // The caller gets copies (no graph); the program's outputs are the values.
    let mut out_values = Vec::with_capacity(outputs.len());
    let mut returned = Vec::with_capacity(outputs.len());
    for t in &outputs {
        let buf = t.storage().0.clone();
        out_values.push((rec.value(&buf), t.layout().clone()));
        let copy = B::copy_strided(&buf.read(), t.layout())?;
        returned.push(Tensor::try_from_storage(TracedStorage::new(copy), Layout::contiguous(t.layout().shape().clone()))?);
    }
    // Whatever is still alive once the step's own results are gone
    // outlives the step (a gradient the parameter keeps).
    drop(outputs);
    // An input's gradient made by this call is made anew by every replay
    // (each call passes new tensors): an extra output, handed to the input.
    let mut input_grads = Vec::new();
    let mut fresh = Vec::new();
    for (k, t) in batch.iter().enumerate() {
        if let Some(g) = t.grad()
            && let Some(v) = rec.produced(&g.storage().0)
        {
            input_grads.push(k);
            fresh.push(v);
            out_values.push((v, g.layout().clone()));
        }
    }
    let _span = tracing::info_span!("jit_compile", ops = rec.ops.len()).entered();
    let program = Program::build(rec, &bufs(batch), out_values, &fresh, eager_peak)?;
    tracing::debug!(report = ?program.report(), "compiled");
    let guards = Guards::new(&observed, flags, batch, &program.persistent_ids);
    Ok((Compiled { program, guards, input_grads }, returned))
}
