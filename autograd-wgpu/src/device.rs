//! The process's GPU: one adapter, its device and queue, opened on first
//! use and kept for the life of the process, with the compiled kernels.
//!
//! Work is recorded into one pending command encoder and submitted in
//! batches: when [`BATCH`] launches have accumulated, or when the host needs
//! a result (a read waits for everything recorded before it). Uploads are
//! recorded as copies from a staging buffer into the same encoder, so every
//! kernel sees exactly the writes recorded before it, as on a stream.
//!
//! Every error the device reports becomes an `Err` of the call that caused
//! it: buffer creation, kernel compilation and submission run inside error
//! scopes (an error in a batch is the `Err` of the call that submits it),
//! and an error reported later (a lost device) is kept and returned by the
//! next call, never a panic.

use autograd_core::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The opened device and what every kernel launch needs.
pub(crate) struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    /// Compiled kernels by their WGSL source (one per op and dtype family).
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    /// The first error the device reported outside a scope (device lost).
    pub(crate) fault: Arc<Mutex<Option<String>>>,
    /// Recorded work not yet submitted, and how many launches it holds.
    pending: Mutex<(Option<wgpu::CommandEncoder>, usize)>,
}

/// Launches recorded before a submission (enough to amortise a submit,
/// few enough that the device starts on a long chain before it is read).
pub(crate) const BATCH: usize = 64;

static GPU: OnceLock<std::result::Result<Gpu, String>> = OnceLock::new();

/// The device, opened on the first call; `Err` naming why when there is none.
pub(crate) fn gpu() -> Result<&'static Gpu> {
    let g = GPU.get_or_init(open).as_ref().map_err(|e| Error::msg(format!("wgpu: {e}")))?;
    if let Some(f) = g.fault.lock().map_err(|_| Error::msg("wgpu: the device's error slot is poisoned"))?.as_ref() {
        return Err(Error::msg(format!("wgpu: the device on {} failed earlier: {f}", g.info.name)));
    }
    Ok(g)
}

fn open() -> std::result::Result<Gpu, String> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::PRIMARY,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let options = wgpu::RequestAdapterOptions { power_preference: wgpu::PowerPreference::HighPerformance, ..Default::default() };
    let adapter = pollster::block_on(instance.request_adapter(&options)).map_err(|e| {
        format!(
            "no GPU adapter ({e}); without a GPU on Linux, Mesa's software Vulkan driver provides one \
             (apt-get install mesa-vulkan-drivers libvulkan1)"
        )
    })?;
    let info = adapter.get_info();
    // the adapter's own limits (the defaults cap storage bindings at 128 MiB)
    let limits = adapter.limits();
    let desc = wgpu::DeviceDescriptor { label: Some("autograd"), required_limits: limits.clone(), ..Default::default() };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc)).map_err(|e| format!("{}: no device: {e}", info.name))?;
    let fault: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let slot = fault.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        if let Ok(mut s) = slot.lock() {
            s.get_or_insert_with(|| e.to_string());
        }
    }));
    Ok(Gpu { device, queue, info, limits, pipelines: Mutex::new(HashMap::new()), fault, pending: Mutex::new((None, 0)) })
}

/// The adapter the backend runs on (name, driver, device type), or `Err`
/// saying why there is none.
///
/// ```
/// match autograd_wgpu::adapter() {
///     Ok(info) => println!("running on {} ({:?})", info.name, info.device_type),
///     Err(e) => println!("no GPU: {e}"),
/// }
/// ```
pub fn adapter() -> Result<wgpu::AdapterInfo> {
    gpu().map(|g| g.info.clone())
}

impl Gpu {
    /// Runs `f` inside a validation and an out-of-memory error scope: what
    /// the device reports there is the call's `Err`, naming `op`.
    pub(crate) fn scoped<R>(&self, op: &str, f: impl FnOnce() -> R) -> Result<R> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let r = f();
        let errors = [pollster::block_on(validation.pop()), pollster::block_on(oom.pop())];
        match errors.into_iter().flatten().next() {
            None => Ok(r),
            Some(wgpu::Error::OutOfMemory { .. }) => Err(Error::msg(format!("{op}: out of device memory on {}", self.info.name))),
            Some(e) => Err(Error::msg(format!("{op}: the device refused the call on {}: {e}", self.info.name))),
        }
    }

    /// The compute pipeline of a WGSL source (entry point `main`), compiled
    /// on first use.
    pub(crate) fn pipeline(&self, op: &str, source: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        let cached = self.pipelines.lock().map_err(|_| Error::msg("wgpu: the kernel cache is poisoned"))?.get(source).cloned();
        if let Some(p) = cached {
            return Ok(p);
        }
        let p = Arc::new(self.scoped(op, || {
            let module = self
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(op), source: wgpu::ShaderSource::Wgsl(source.into()) });
            self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(op),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            })
        })?);
        self.pipelines.lock().map_err(|_| Error::msg("wgpu: the kernel cache is poisoned"))?.insert(source.to_string(), p.clone());
        Ok(p)
    }

    /// Records `f`'s commands after everything recorded so far, submitting
    /// the batch once it holds [`BATCH`] launches (call inside [`Gpu::scoped`]).
    pub(crate) fn record(&self, f: impl FnOnce(&mut wgpu::CommandEncoder)) -> Result<()> {
        let mut pending = self.pending.lock().map_err(|_| Error::msg("wgpu: the pending work is poisoned"))?;
        let enc =
            pending.0.get_or_insert_with(|| self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("batch") }));
        f(enc);
        pending.1 += 1;
        if pending.1 >= BATCH {
            // submitted under the lock: batches reach the queue in the order
            // they were recorded (a pooled buffer's next owner writes after
            // its last owner's kernels, whatever the threads)
            pending.1 = 0;
            if let Some(enc) = pending.0.take() {
                self.queue.submit([enc.finish()]);
            }
        }
        Ok(())
    }

    /// Submits the recorded work (before the host waits on any of it).
    pub(crate) fn flush(&self, op: &str) -> Result<()> {
        self.scoped(op, || -> Result<()> {
            let mut pending = self.pending.lock().map_err(|_| Error::msg("wgpu: the pending work is poisoned"))?;
            pending.1 = 0;
            if let Some(enc) = pending.0.take() {
                self.queue.submit([enc.finish()]);
            }
            Ok(())
        })?
    }

    /// Waits until the queue's work is done (a read needs its producers).
    pub(crate) fn wait(&self, op: &str) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| Error::msg(format!("{op}: waiting for the device on {}: {e}", self.info.name)))
    }
}
