//! `compile`: the user's entry point, its guards and its cache.

use crate::program::Program;
use crate::recorder::{self, TRACE_LOCK};
use crate::traced::{Buf, Traced, TracedStorage};
use autograd_core::{Backend, DType, Error, Layout, Result};
use autograd_tensor::Tensor;
use autograd_tensor::capture::{self, HostOpSink};
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

/// The input signature a program is compiled for: each input's layout and
/// dtype, and the first input it shares storage with (itself if none), so
/// that a batch passing one tensor twice is not replayed as two.
type Signature = Vec<(Layout, DType, usize)>;

struct Entry<B: Backend> {
    key: Signature,
    calls: usize,
    program: Option<Program<B>>,
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
/// For each signature (the inputs' shapes, strides and dtypes): the first
/// call runs eagerly ([`CompileOptions::warmup_calls`]), the next runs
/// eagerly while recording every backend primitive, and is compiled (dead
/// code removed, constants folded, elementwise chains fused, temporaries
/// freed after their last use); later calls replay the program on `B`
/// directly. Outputs come back as fresh tensors without a graph.
///
/// What a replay repeats: every primitive on the device, random draws
/// (fresh values from the global generator, in eager order), and the
/// optimizer's host bookkeeping (step counts, learning rates set between
/// steps). What it does not: host code in the closure (baked as it ran when
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
    batch
        .iter()
        .enumerate()
        .map(|(i, t)| (t.layout().clone(), t.dtype(), batch[..i].iter().position(|u| u.shares_storage(t)).unwrap_or(i)))
        .collect()
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
        let key = signature(batch);
        let idx = match self.entries.iter().position(|e| e.key == key) {
            Some(i) => i,
            None if self.entries.len() >= self.options.cache_size => match self.options.when_full {
                WhenFull::Eager => {
                    self.counts.eager += 1;
                    return (self.f)(batch);
                }
                WhenFull::Error => {
                    let held: Vec<String> = self.entries.iter().map(|e| describe(&e.key)).collect();
                    return Err(Error::msg(format!(
                        "compiled step: a new input signature {} but the cache already holds {} ({}); inputs whose shapes change every step need padding to a few shapes, a larger cache_size, or WhenFull::Eager",
                        describe(&key),
                        self.options.cache_size,
                        held.join(", ")
                    )));
                }
            },
            None => {
                self.entries.push(Entry { key, calls: 0, program: None });
                self.entries.len() - 1
            }
        };
        let entry = &mut self.entries[idx];
        if let Some(p) = &entry.program {
            let _span = tracing::debug_span!("jit_replay", ops = p.ops.len()).entered();
            self.counts.replayed += 1;
            return p.replay(&bufs(batch));
        }
        if entry.calls < self.options.warmup_calls {
            entry.calls += 1;
            self.counts.eager += 1;
            return (self.f)(batch);
        }
        let (program, outputs) = trace(&mut self.f, batch)?;
        self.counts.traced += 1;
        self.entries[idx].program = Some(program);
        Ok(outputs)
    }

    /// How the calls so far were run.
    pub fn counts(&self) -> CallCounts {
        self.counts
    }

    /// The compiled program for `batch`'s signature, once traced.
    pub fn program_for(&self, batch: &[Tensor<Traced<B>>]) -> Option<&Program<B>> {
        let key = signature(batch);
        self.entries.iter().find(|e| e.key == key).and_then(|e| e.program.as_ref())
    }

    /// Every compiled program, in the order their signatures arrived.
    pub fn programs(&self) -> impl Iterator<Item = &Program<B>> {
        self.entries.iter().filter_map(|e| e.program.as_ref())
    }
}

fn describe(key: &Signature) -> String {
    let parts: Vec<String> = key.iter().map(|(l, d, _)| format!("{:?} {d:?}", l.shape().dims())).collect();
    format!("[{}]", parts.join(", "))
}

/// A compiled program and the outputs of the traced call.
type TraceResult<B> = (Program<B>, Vec<Tensor<Traced<B>>>);

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
    let result = {
        let sink: HostOpSink = Box::new(|op| recorder::record_host::<B>(op));
        let _capture = capture::begin_capture(Some(sink));
        f(batch)
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
    let _span = tracing::info_span!("jit_compile", ops = rec.ops.len()).entered();
    let program = Program::build(rec, &bufs(batch), out_values, eager_peak)?;
    tracing::debug!(report = ?program.report(), "compiled");
    Ok((program, returned))
}
