//! A tensor's elements in a device buffer, and the two explicit transfers:
//! an upload when host data becomes a storage, a read back when the host
//! asks for values.
//!
//! Elements are stored as the host lays them out (little-endian, `Bool` one
//! byte each), so every dtype has a device storage; the kernels read the
//! dtypes they are written for and the host path serves the others.

use crate::device::{Gpu, gpu};
use crate::memory::Block;
use autograd_core::{DType, Element, Error, HostData, HostStorage, Result, with_any, with_dtype};
use std::sync::Arc;

/// Writes of at most this many bytes are kept on the host too (see [`read`](WgpuStorage::read)).
const SHADOW_BYTES: usize = 1024;

thread_local! {
    static READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times this thread has waited for the device to read a buffer
/// back since it started (`to_host`, `item`, printing, a host-path call's
/// operands). A read of a small buffer the host wrote itself and no kernel
/// has been given since (an optimizer's step count and learning rate, a
/// dropout seed) is served from the host's copy and not counted: a
/// training step that asks for no value should count none.
///
/// ```
/// let before = autograd_wgpu::device_reads();
/// // ... queue work that reads nothing back ...
/// assert_eq!(autograd_wgpu::device_reads(), before);
/// ```
pub fn device_reads() -> u64 {
    READS.with(std::cell::Cell::get)
}

/// A tensor's elements on the device (shared by views, as host storages are).
///
/// An upload that the device refused (no adapter, out of memory) makes a
/// storage that remembers why: `from_host` cannot return an `Err`, so the
/// first call that uses it does.
#[derive(Clone, Debug)]
pub struct WgpuStorage {
    pub(crate) block: std::result::Result<Option<Arc<Block>>, Arc<str>>,
    pub(crate) dtype: DType,
    pub(crate) len: usize,
}

impl WgpuStorage {
    /// The storage's dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes its elements take (before padding to a multiple of 4).
    pub(crate) fn bytes(dtype: DType, len: usize) -> Result<u64> {
        len.checked_mul(dtype.size_in_bytes())
            .map(|b| b as u64)
            .ok_or_else(|| Error::msg(format!("wgpu: {len} elements of {dtype:?} overflow")))
    }

    /// The device buffer, or `Err` when the upload failed; `None` for no elements.
    pub(crate) fn buffer(&self) -> Result<Option<&wgpu::Buffer>> {
        match &self.block {
            Ok(b) => Ok(b.as_deref().map(Block::buffer)),
            Err(why) => Err(Error::msg(why.to_string())),
        }
    }

    /// A storage of `len` elements whose contents the caller writes.
    pub(crate) fn uninit(gpu: &Gpu, op: &str, dtype: DType, len: usize) -> Result<WgpuStorage> {
        let bytes = Self::bytes(dtype, len)?;
        let block = if bytes == 0 { None } else { Some(Arc::new(Block::take(gpu, op, bytes)?)) };
        Ok(WgpuStorage { block: Ok(block), dtype, len })
    }

    /// Uploads host values.
    pub(crate) fn upload(data: &HostData) -> WgpuStorage {
        let (dtype, len) = (data.dtype(), data.len());
        let made = gpu().and_then(|g| {
            let s = Self::uninit(g, "upload", dtype, len)?;
            s.write(g, &host_bytes(data))?;
            Ok(s)
        });
        made.unwrap_or_else(|e| WgpuStorage { block: Err(e.to_string().into()), dtype, len })
    }

    /// Replaces the contents (the same number of elements): a staging
    /// buffer made with the bytes, copied into this one in recording order
    /// (kernels recorded before read the old contents, those after the new).
    pub(crate) fn write(&self, gpu: &Gpu, bytes: &[u8]) -> Result<()> {
        let Some(buf) = self.buffer()? else { return Ok(()) };
        let size = bytes.len().div_ceil(4) * 4;
        gpu.scoped("upload", || -> Result<()> {
            let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("upload"),
                size: size as u64,
                usage: wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            });
            {
                let mut view = staging.slice(..).get_mapped_range_mut().map_err(|e| Error::msg(format!("upload: {e}")))?;
                if bytes.len() == size {
                    view.copy_from_slice(bytes);
                } else {
                    let mut padded = bytes.to_vec();
                    padded.resize(size, 0);
                    view.copy_from_slice(&padded);
                }
            }
            staging.unmap();
            gpu.record(|enc| enc.copy_buffer_to_buffer(&staging, 0, buf, 0, size as u64))
        })??;
        if let Ok(Some(block)) = &self.block {
            // kept only as the whole contents: a shorter write would leave
            // `read` a copy it cannot serve every element from
            let whole = Self::bytes(self.dtype, self.len).is_ok_and(|b| b == bytes.len() as u64);
            block.set_shadow((whole && bytes.len() <= SHADOW_BYTES).then_some(bytes));
        }
        Ok(())
    }

    /// Reads every element back (waits for the work that writes them),
    /// or, for a small buffer whose contents the host wrote and no kernel
    /// has been given since, returns those contents without waiting.
    pub(crate) fn read(&self) -> Result<HostData> {
        let Some(buf) = self.buffer()? else { return Ok(with_dtype!(self.dtype, |T| T::into_host(Vec::new()))) };
        let n = Self::bytes(self.dtype, self.len)? as usize;
        if let Ok(Some(block)) = &self.block
            && let Some(bytes) = block.shadow()
            && let Some(whole) = bytes.get(..n)
        {
            return Ok(from_bytes(self.dtype, whole));
        }
        READS.with(|r| r.set(r.get() + 1));
        let g = gpu()?;
        let size = Self::bytes(self.dtype, self.len)?.div_ceil(4) * 4;
        let staging = g.scoped("to_host", || {
            g.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("read back"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })?;
        g.scoped("to_host", || g.record(|enc| enc.copy_buffer_to_buffer(buf, 0, &staging, 0, size)))??;
        g.flush("to_host")?;
        let slice = staging.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| drop(tx.send(r)));
        g.wait("to_host")?;
        rx.recv()
            .map_err(|_| Error::msg("to_host: the device never answered the read"))?
            .map_err(|e| Error::msg(format!("to_host: reading the buffer back on {}: {e}", g.info.name)))?;
        let view = slice.get_mapped_range().map_err(|e| Error::msg(format!("to_host: {e}")))?;
        let n = Self::bytes(self.dtype, self.len)? as usize;
        let data = from_bytes(self.dtype, &view[..n]);
        drop(view);
        staging.unmap();
        Ok(data)
    }

    /// Reads every element back as host storage (for the host path).
    pub(crate) fn read_storage(&self) -> Result<HostStorage> {
        self.read().map(HostStorage::from)
    }

    /// Uploads host storage (a host kernel's output).
    pub(crate) fn upload_storage(s: &HostStorage) -> Result<WgpuStorage> {
        let data: HostData = with_any!(HostStorage: s, |v: T| T::into_host(v.to_vec()));
        let up = Self::upload(&data);
        up.buffer()?;
        Ok(up)
    }
}

/// Little-endian bytes of host values (f32 without a per-element copy).
pub(crate) fn host_bytes(data: &HostData) -> Vec<u8> {
    if let HostData::F32(v) = data {
        return bytemuck::cast_slice(v).to_vec();
    }
    let mut out = Vec::with_capacity(data.len() * data.dtype().size_in_bytes());
    with_any!(HostData: data, |v: T| v.iter().for_each(|x| x.write_le(&mut out)));
    out
}

/// Host values from little-endian bytes.
pub(crate) fn from_bytes(dtype: DType, bytes: &[u8]) -> HostData {
    if dtype == DType::F32 {
        return HostData::F32(bytemuck::pod_collect_to_vec(bytes));
    }
    let w = dtype.size_in_bytes();
    with_dtype!(dtype, |T| T::into_host(bytes.chunks_exact(w).map(T::read_le).collect()))
}
