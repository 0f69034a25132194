//! Device memory: buffers recycled by size class, as PyTorch's CUDA caching
//! allocator: a storage's buffer goes back to the pool when its last
//! handle is dropped and the next request of its class takes it, so a
//! training loop's steady state creates no buffer.
//!
//! Classes: powers of two from 256 bytes to 1 MiB, then whole MiB (a large
//! tensor wastes at most 1 MiB, a small one at most half its class). The
//! pool keeps at most [`set_cache_limit`] bytes (1 GiB by default); a
//! buffer returned above it is freed.

use crate::device::Gpu;
use autograd_core::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const MIB: u64 = 1 << 20;

static LIVE: AtomicU64 = AtomicU64::new(0);
static POOLED: AtomicU64 = AtomicU64::new(0);
static LIMIT: AtomicU64 = AtomicU64::new(1 << 30);

fn free_lists() -> &'static Mutex<HashMap<u64, Vec<wgpu::Buffer>>> {
    static FREE: OnceLock<Mutex<HashMap<u64, Vec<wgpu::Buffer>>>> = OnceLock::new();
    FREE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The class (the buffer size actually made) for `bytes`.
pub(crate) fn class_of(bytes: u64) -> u64 {
    if bytes <= MIB { bytes.max(256).next_power_of_two() } else { bytes.div_ceil(MIB) * MIB }
}

/// One device buffer, owned by one storage; back to the pool on drop.
/// Its elements' bytes are counted in the library's memory counters
/// (`autograd_core::memory`) while it is in use.
#[derive(Debug)]
pub(crate) struct Block {
    buffer: Option<wgpu::Buffer>,
    class: u64,
    _counted: autograd_core::memory::DeviceBytes,
    /// A small block's contents as the host last wrote them (an
    /// optimizer's scalars, a dropout seed), so that reading them back does
    /// not wait for the device; dropped as soon as a kernel binds the block.
    shadow: Mutex<Option<Arc<[u8]>>>,
}

impl Block {
    /// A buffer for `bytes` bytes of elements (rounded up to a multiple of
    /// 4, then to its class), reused when one is pooled.
    pub(crate) fn take(gpu: &Gpu, op: &str, bytes: u64) -> Result<Block> {
        let class = class_of(bytes.div_ceil(4) * 4);
        if class > gpu.limits.max_buffer_size || class > gpu.limits.max_storage_buffer_binding_size {
            return Err(Error::msg(format!(
                "{op}: {bytes} bytes is over the device's limit for one buffer ({} bytes on {})",
                gpu.limits.max_buffer_size.min(gpu.limits.max_storage_buffer_binding_size),
                gpu.info.name
            )));
        }
        let reused = free_lists().lock().map_err(|_| Error::msg("wgpu: the buffer pool is poisoned"))?.get_mut(&class).and_then(Vec::pop);
        let buffer = match reused {
            Some(b) => {
                POOLED.fetch_sub(class, Ordering::Relaxed);
                b
            }
            None => {
                let make = || {
                    gpu.scoped(op, || {
                        gpu.device.create_buffer(&wgpu::BufferDescriptor {
                            label: None,
                            size: class,
                            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                            mapped_at_creation: false,
                        })
                    })
                };
                // out of memory with buffers pooled: free them and try once more
                make().or_else(|e| if POOLED.load(Ordering::Relaxed) > 0 { empty_cache().and_then(|_| make()) } else { Err(e) })?
            }
        };
        LIVE.fetch_add(class, Ordering::Relaxed);
        let counted = autograd_core::memory::DeviceBytes::new(usize::try_from(bytes).unwrap_or(usize::MAX));
        Ok(Block { buffer: Some(buffer), class, _counted: counted, shadow: Mutex::new(None) })
    }

    /// The buffer.
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("a block holds its buffer until dropped")
    }

    /// The contents as the host last wrote them, if it wrote them whole and
    /// no kernel has been given the buffer since.
    pub(crate) fn shadow(&self) -> Option<Arc<[u8]>> {
        self.shadow.lock().ok().and_then(|s| s.clone())
    }

    /// Keeps `bytes` as the contents the host wrote, or forgets them
    /// (`None`: a kernel may write the buffer).
    pub(crate) fn set_shadow(&self, bytes: Option<&[u8]>) {
        if let Ok(mut s) = self.shadow.lock() {
            *s = bytes.map(Arc::from);
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        let Some(b) = self.buffer.take() else { return };
        LIVE.fetch_sub(self.class, Ordering::Relaxed);
        if POOLED.load(Ordering::Relaxed) + self.class > LIMIT.load(Ordering::Relaxed) {
            return; // over the limit: the buffer is freed
        }
        if let Ok(mut free) = free_lists().lock() {
            POOLED.fetch_add(self.class, Ordering::Relaxed);
            free.entry(self.class).or_default().push(b);
        }
    }
}

/// Device bytes held by live storages (their classes' sizes).
///
/// ```
/// let before = autograd_wgpu::memory::live_bytes();
/// # let _ = before;
/// ```
pub fn live_bytes() -> u64 {
    LIVE.load(Ordering::Relaxed)
}

/// Device bytes kept in the pool for reuse.
///
/// ```
/// assert!(autograd_wgpu::memory::pooled_bytes() <= autograd_wgpu::memory::cache_limit());
/// ```
pub fn pooled_bytes() -> u64 {
    POOLED.load(Ordering::Relaxed)
}

/// Frees every pooled buffer (PyTorch's `torch.cuda.empty_cache()`).
///
/// ```
/// autograd_wgpu::memory::empty_cache().unwrap();
/// assert_eq!(autograd_wgpu::memory::pooled_bytes(), 0);
/// ```
pub fn empty_cache() -> Result<()> {
    let mut free = free_lists().lock().map_err(|_| Error::msg("wgpu: the buffer pool is poisoned"))?;
    for (class, list) in free.drain() {
        POOLED.fetch_sub(class * list.len() as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// The most bytes the pool keeps; returns the previous limit.
///
/// ```
/// let old = autograd_wgpu::memory::set_cache_limit(0); // pool nothing
/// autograd_wgpu::memory::set_cache_limit(old);
/// ```
pub fn set_cache_limit(bytes: u64) -> u64 {
    LIMIT.swap(bytes, Ordering::Relaxed)
}

/// The pool's current limit in bytes.
///
/// ```
/// assert!(autograd_wgpu::memory::cache_limit() > 0);
/// ```
pub fn cache_limit() -> u64 {
    LIMIT.load(Ordering::Relaxed)
}
