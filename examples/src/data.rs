//! Loading tensors from the safetensors files shipped in `examples/data/`.

use autograd::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The folder holding the shipped data sets.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// Every tensor of a safetensors file, by name.
///
/// ```
/// use autograd::prelude::RefBackend;
/// let t = examples::data::load::<RefBackend>(&examples::data::data_dir().join("bazarghar.safetensors")).unwrap();
/// assert_eq!(t["X"].dims(), &[200, 2]);
/// ```
pub fn load<B: Backend>(path: &Path) -> Result<HashMap<String, Tensor<B>>> {
    Ok(autograd::tensor::load_safetensors::<B>(path)?.tensors.into_iter().collect())
}
