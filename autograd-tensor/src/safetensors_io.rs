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
    }
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
    // The crate checks offsets (in range, contiguous, no overlap) and byte counts against shapes.
    let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| bad(format!("{e:?}")))?;
    let metadata =
        safetensors::SafeTensors::read_metadata(bytes).map_err(|e| bad(format!("{e:?}")))?.1.metadata().clone().unwrap_or_default();
    let mut views = Vec::new();
    for name in keys.0.iter().filter(|k| *k != "__metadata__") {
        let v = st.tensor(name).map_err(|e| bad(format!("tensor {name:?}: {e:?}")))?;
        let dtype = dtype_of(v.dtype()).ok_or_else(|| {
            bad(format!("tensor {name:?} has dtype {:?}, which this library cannot hold (F16, BF16, F32, F64, I64)", v.dtype()))
        })?;
        let numel: usize = v.shape().iter().product();
        if numel * dtype.size_in_bytes() != v.data().len() {
            return Err(bad(format!(
                "tensor {name:?}: shape {:?} of {dtype:?} needs {} bytes, the file gives {}",
                v.shape(),
                numel * dtype.size_in_bytes(),
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
        views.push((name.to_string(), View { dtype: st_dtype(t.dtype()), shape: t.dims().to_vec(), data: t.to_host().to_le_bytes() }));
    }
    let meta = if metadata.is_empty() { None } else { Some(metadata.clone()) };
    let bytes = safetensors::tensor::serialize(views.iter().map(|(n, v)| (n.clone(), v)), meta)
        .map_err(|e| Error::Format(format!("{}: {e:?}", path.display())))?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("weights"), std::process::id()));
    let io = |e: std::io::Error, what: &str| Error::Io { context: format!("{what} {}", path.display()), source: e };
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(e, "creating a temporary file for"))?;
        f.write_all(&bytes).map_err(|e| io(e, "writing"))?;
        f.sync_all().map_err(|e| io(e, "syncing"))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e, "renaming the temporary file onto")
    })
}
