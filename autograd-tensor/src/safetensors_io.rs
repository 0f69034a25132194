//! safetensors files in and out.
//!
//! Loading reads the file once, validates the whole header (names unique,
//! dtypes known, shapes agreeing with byte counts, offsets in range and not
//! overlapping) before building any tensor, and reports the file and the
//! offending tensor in the error. Saving writes a temporary file next to the
//! target and renames it over the target, so a crash never leaves a
//! half-written file behind.

use crate::Tensor;
use autograd_core::{Backend, DType, Error, HostData, Result};
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// Tensors by name, in the file's order, plus the header's `__metadata__`.
pub struct NamedTensors<B: Backend> {
    /// `(name, tensor)` pairs.
    pub tensors: Vec<(String, Tensor<B>)>,
    /// String metadata from the header.
    pub metadata: HashMap<String, String>,
}

impl<B: Backend> std::fmt::Debug for NamedTensors<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.tensors.iter().map(|(n, t)| (n, (t.dtype(), t.dims().to_vec())))).finish()
    }
}

impl<B: Backend> NamedTensors<B> {
    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor<B>> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

/// The keys of the header's JSON object, duplicates kept (serde_json's map would drop them).
struct HeaderKeys(Vec<String>);

impl<'de> Deserialize<'de> for HeaderKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = HeaderKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<HeaderKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some(k) = m.next_key::<String>()? {
                    m.next_value::<IgnoredAny>()?;
                    keys.push(k);
                }
                Ok(HeaderKeys(keys))
            }
        }
        d.deserialize_map(V)
    }
}

fn dtype_of(d: safetensors::Dtype) -> Option<DType> {
    Some(match d {
        safetensors::Dtype::F16 => DType::F16,
        safetensors::Dtype::BF16 => DType::BF16,
        safetensors::Dtype::F32 => DType::F32,
        safetensors::Dtype::F64 => DType::F64,
        safetensors::Dtype::I64 => DType::I64,
        safetensors::Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

fn st_dtype(d: DType) -> safetensors::Dtype {
    match d {
        DType::F16 => safetensors::Dtype::F16,
        DType::BF16 => safetensors::Dtype::BF16,
        DType::F32 => safetensors::Dtype::F32,
        DType::F64 => safetensors::Dtype::F64,
        DType::I64 => safetensors::Dtype::I64,
        DType::Bool => safetensors::Dtype::BOOL,
    }
}

/// The safetensors crate's error in words (its variant names alone say
/// little to a user).
fn describe(e: &safetensors::SafeTensorError) -> String {
    use safetensors::SafeTensorError as E;
    match e {
        E::InvalidHeader(e) => format!("the header is not valid UTF-8 ({e})"),
        E::InvalidHeaderDeserialization(e) | E::JsonError(e) => format!("the header is not valid safetensors JSON ({e})"),
        E::HeaderTooLarge => "the header is larger than the 100 MB the format allows".into(),
        E::HeaderTooSmall => "the file is too short to hold a header".into(),
        E::InvalidHeaderLength => "the header length does not fit in the file".into(),
        E::TensorNotFound(n) => format!("tensor {n:?} is not in the file"),
        E::TensorInvalidInfo => "a tensor's shape, dtype and data offsets disagree".into(),
        E::InvalidOffset(n) => format!("the data offsets of tensor {n:?} are out of order, overlap or leave a gap"),
        E::IoError(e) => format!("I/O error: {e}"),
        E::InvalidTensorView(d, shape, len) => format!("a {d:?} tensor of shape {shape:?} cannot be {len} bytes long"),
        E::MetadataIncompleteBuffer => "the tensors' data do not cover the data section exactly (bytes left over or missing)".into(),
        E::ValidationOverflow => "a tensor's shape or byte size overflows".into(),
        E::MisalignedSlice => "a sub-byte dtype is sliced off a byte boundary".into(),
    }
}

/// Checks every header entry against the data section of `data_len` bytes:
/// known fields, byte counts that match shape and dtype (checked
/// arithmetic), offsets in order, without gaps or overlaps, covering the
/// section exactly. Each message names the tensor.
fn check_entries(header: &[u8], data_len: usize) -> std::result::Result<(), String> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(header).map_err(|e| format!("the header is not a JSON object ({e})"))?;
    let mut spans = Vec::new();
    for (name, entry) in map.iter().filter(|(k, _)| *k != "__metadata__") {
        let field = |f: &str| entry.get(f).ok_or_else(|| format!("tensor {name:?}: the header entry has no {f:?} field"));
        let dtype = field("dtype")?.as_str().ok_or_else(|| format!("tensor {name:?}: \"dtype\" is not a string"))?;
        let shape: Vec<u64> = serde_json::from_value(field("shape")?.clone())
            .map_err(|_| format!("tensor {name:?}: \"shape\" is not a list of non-negative integers"))?;
        let offsets: [u64; 2] = serde_json::from_value(field("data_offsets")?.clone())
            .map_err(|_| format!("tensor {name:?}: \"data_offsets\" is not a pair of non-negative integers"))?;
        if let Some(d) = DType::from_safetensors_name(dtype) {
            let need = shape.iter().try_fold(d.size_in_bytes() as u64, |acc, &x| acc.checked_mul(x));
            let have = offsets[1].checked_sub(offsets[0]);
            match (need, have) {
                (None, _) => return Err(format!("tensor {name:?}: shape {shape:?} of {dtype} has more bytes than fit in memory")),
                (_, None) => return Err(format!("tensor {name:?}: data offsets {offsets:?} end before they begin")),
                (Some(n), Some(h)) if n != h => {
                    return Err(format!(
                        "tensor {name:?}: shape {shape:?} of {dtype} needs {n} bytes, its data offsets {offsets:?} give {h}"
                    ));
                }
                _ => {}
            }
        }
        spans.push((offsets[0], offsets[1], name));
    }
    spans.sort();
    let mut at = 0u64;
    for (begin, end, name) in spans {
        if begin != at {
            let what = if begin > at { "leaves a gap before it" } else { "overlaps the tensor before it" };
            return Err(format!("tensor {name:?}: data offsets [{begin}, {end}] {what} (expected it to start at byte {at})"));
        }
        at = end;
    }
    if at != data_len as u64 {
        return Err(format!("the tensors' data end at byte {at} but the data section is {data_len} bytes long"));
    }
    Ok(())
}

/// Parses safetensors bytes; `source` names them in errors.
///
/// ```
/// use autograd_core::RefBackend;
/// let e = autograd_tensor::load_safetensors_bytes::<RefBackend>(b"\x05\0\0\0\0\0\0\0{", "mem").unwrap_err();
/// assert!(e.to_string().contains("mem"));
/// ```
pub fn load_safetensors_bytes<B: Backend>(bytes: &[u8], source: &str) -> Result<NamedTensors<B>> {
    let bad = |msg: String| Error::Format(format!("{source}: {msg}"));
    if bytes.len() < 8 {
        return Err(bad(format!("file is {} bytes long, too short for the 8-byte header length", bytes.len())));
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if n > (bytes.len() - 8) as u64 {
        return Err(bad(format!("header length {n} is larger than the {} bytes that follow it", bytes.len() - 8)));
    }
    let header = &bytes[8..8 + n as usize];
    let keys: HeaderKeys = serde_json::from_slice(header).map_err(|e| bad(format!("invalid JSON header: {e}")))?;
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = keys.0.iter().find(|k| !seen.insert(k.as_str())) {
        return Err(bad(format!("tensor name {dup:?} appears twice in the header")));
    }
    // Our own pass first, so that every problem is said in words naming the tensor;
    // the crate's checks below are a second line.
    check_entries(header, bytes.len() - 8 - n as usize).map_err(bad)?;
    let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| bad(describe(&e)))?;
    let metadata = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| bad(describe(&e)))?.1.metadata().clone().unwrap_or_default();
    let mut views = Vec::new();
    for name in keys.0.iter().filter(|k| *k != "__metadata__") {
        let v = st.tensor(name).map_err(|e| bad(format!("tensor {name:?}: {}", describe(&e))))?;
        let dtype = dtype_of(v.dtype()).ok_or_else(|| {
            bad(format!("tensor {name:?} has dtype {:?}, which this library cannot hold (F16, BF16, F32, F64, I64)", v.dtype()))
        })?;
        let need = v.shape().iter().try_fold(dtype.size_in_bytes(), |acc, &d| acc.checked_mul(d));
        if need != Some(v.data().len()) {
            return Err(bad(format!(
                "tensor {name:?}: shape {:?} of {dtype:?} needs {} bytes, the file gives {}",
                v.shape(),
                need.map_or_else(|| "more than usize::MAX".to_string(), |b| b.to_string()),
                v.data().len()
            )));
        }
        views.push((name.clone(), dtype, v));
    }
    let mut tensors = Vec::with_capacity(views.len());
    for (name, dtype, v) in views {
        let data = HostData::from_le_bytes(v.data(), dtype).ok_or_else(|| bad(format!("tensor {name:?}: byte count")))?;
        tensors.push((name, Tensor::try_from_host(data, v.shape().to_vec())?));
    }
    Ok(NamedTensors { tensors, metadata })
}

/// Reads a safetensors file (one read of the whole file).
pub fn load_safetensors<B: Backend>(path: impl AsRef<Path>) -> Result<NamedTensors<B>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::Io { context: format!("reading {}", path.display()), source: e })?;
    load_safetensors_bytes(&bytes, &path.display().to_string())
}

struct View {
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl safetensors::View for &View {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Writes named tensors (any layout; stored row-major) with string metadata,
/// atomically: a temporary file in the same folder, then a rename.
///
/// ```
/// use autograd_core::RefBackend;
/// use autograd_tensor::Tensor;
/// let dir = std::env::temp_dir().join("autograd_nn_doc_save");
/// std::fs::create_dir_all(&dir).unwrap();
/// let p = dir.join("w.safetensors");
/// let w = Tensor::<RefBackend>::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]);
/// autograd_tensor::save_safetensors(&[("w", &w.t())], &Default::default(), &p).unwrap();
/// let back = autograd_tensor::load_safetensors::<RefBackend>(&p).unwrap();
/// assert_eq!(back.get("w").unwrap().to_vec::<f32>(), vec![1.0, 3.0, 2.0, 4.0]);
/// ```
pub fn save_safetensors<B: Backend>(
    tensors: &[(&str, &Tensor<B>)],
    metadata: &HashMap<String, String>,
    path: impl AsRef<Path>,
) -> Result<()> {
    let path = path.as_ref();
    let mut seen = std::collections::HashSet::new();
    let mut views = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if !seen.insert(*name) {
            return Err(Error::Format(format!("{}: tensor name {name:?} given twice", path.display())));
        }
        views.push((name.to_string(), View { dtype: st_dtype(t.dtype()), shape: t.dims().to_vec(), data: t.try_to_host()?.to_le_bytes() }));
    }
    let meta = if metadata.is_empty() { None } else { Some(metadata.clone()) };
    let bytes = safetensors::tensor::serialize(views.iter().map(|(n, v)| (n.clone(), v)), meta)
        .map_err(|e| Error::Format(format!("{}: {}", path.display(), describe(&e))))?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    // Unique per process and per call, so concurrent saves of one path never share a temporary.
    static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nth = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.tmp{}-{nth}", path.file_name().and_then(|n| n.to_str()).unwrap_or("weights"), std::process::id()));
    let io = |e: std::io::Error, what: &str| Error::Io { context: format!("{what} {}", path.display()), source: e };
    // Removes the temporary on every path that does not end in the rename (a failed
    // write, sync or rename, or a panic); the target is untouched until the rename.
    struct RemoveOnDrop<'a>(&'a Path, bool);
    impl Drop for RemoveOnDrop<'_> {
        fn drop(&mut self) {
            if self.1 {
                let _ = std::fs::remove_file(self.0);
            }
        }
    }
    let mut guard = RemoveOnDrop(&tmp, false);
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(e, "creating a temporary file for"))?;
        guard.1 = true;
        f.write_all(&bytes).map_err(|e| io(e, "writing"))?;
        f.sync_all().map_err(|e| io(e, "syncing"))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| io(e, "renaming the temporary file onto"))?;
    guard.1 = false;
    Ok(())
}
