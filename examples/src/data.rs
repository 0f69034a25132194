//! Loading tensors from the safetensors files shipped in `examples/data/`.

use autograd_core::{Backend, DType, Error, HostData, Result};
use autograd_tensor::Tensor;
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The folder holding the shipped data sets.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// Every tensor of a safetensors file, by name.
///
/// ```
/// use autograd_core::RefBackend;
/// let t = examples::data::load::<RefBackend>(&examples::data::data_dir().join("bazarghar.safetensors")).unwrap();
/// assert_eq!(t["X"].dims(), &[200, 2]);
/// ```
pub fn load<B: Backend>(path: &Path) -> Result<HashMap<String, Tensor<B>>> {
    let bytes = std::fs::read(path).map_err(|e| Error::Io { context: format!("reading {}", path.display()), source: e })?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| Error::Format(format!("{}: {e}", path.display())))?;
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let dtype = DType::from_safetensors_name(&format!("{:?}", view.dtype()))
            .ok_or_else(|| Error::Format(format!("{}: tensor {name} has unsupported dtype {:?}", path.display(), view.dtype())))?;
        let data = HostData::from_le_bytes(view.data(), dtype)
            .ok_or_else(|| Error::Format(format!("{}: tensor {name}: byte count", path.display())))?;
        out.insert(name.to_string(), Tensor::try_from_host(data, view.shape().to_vec())?);
    }
    Ok(out)
}
