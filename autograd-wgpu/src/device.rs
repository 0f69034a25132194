//! The process's GPU: one adapter, its device and queue, opened on first
//! use and kept for the life of the process, with the compiled kernels.
//!
//! Every error the device reports becomes an `Err` of the call that caused
//! it: buffer creation and kernel compilation run inside error scopes, and
//! an error reported later (a lost device) is kept and returned by the
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
}

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
    Ok(Gpu { device, queue, info, limits, pipelines: Mutex::new(HashMap::new()), fault })
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

    /// Waits until the queue's work is done (a read needs its producers).
    pub(crate) fn wait(&self, op: &str) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| Error::msg(format!("{op}: waiting for the device on {}: {e}", self.info.name)))
    }
}
