//! Loading PyTorch's golden cases (see `golden/README.md`), and running a
//! test in a child process.
#![allow(dead_code)]

use autograd_core::{Backend, DType, HostData};
use autograd_tensor::Tensor;
use safetensors::SafeTensors;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct Family {
    pub cases: Vec<Value>,
    tensors: HashMap<String, (DType, Vec<usize>, Vec<u8>)>,
}

pub fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

pub fn load_family(name: &str) -> Family {
    let dir = golden_dir();
    let manifest: Value = serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.json"))).unwrap()).unwrap();
    let bytes = std::fs::read(dir.join(format!("{name}.safetensors"))).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors = HashMap::new();
    for (k, v) in st.tensors() {
        let dtype = match v.dtype() {
            safetensors::Dtype::F64 => DType::F64,
            safetensors::Dtype::I64 => DType::I64,
            d => panic!("unexpected dtype {d:?} in golden file"),
        };
        tensors.insert(k.to_string(), (dtype, v.shape().to_vec(), v.data().to_vec()));
    }
    Family { cases: manifest["cases"].as_array().unwrap().clone(), tensors }
}

impl Family {
    /// The tensor `key`, with float data converted to `float` (F32 or F64).
    pub fn tensor<B: Backend>(&self, key: &str, float: DType) -> Tensor<B> {
        let (dtype, shape, bytes) = self.tensors.get(key).unwrap_or_else(|| panic!("missing golden tensor {key}"));
        let h = HostData::from_le_bytes(bytes, *dtype).unwrap();
        let h = if *dtype == DType::F64 { h.convert(float) } else { h };
        Tensor::try_from_host(h, shape.clone()).unwrap()
    }
    pub fn f64s(&self, key: &str) -> (Vec<usize>, Vec<f64>) {
        let (dtype, shape, bytes) = &self.tensors[key];
        (shape.clone(), HostData::from_le_bytes(bytes, *dtype).unwrap().to_f64_vec())
    }
}

/// `|a - e| <= atol + rtol |e|` elementwise, shapes equal.
pub fn assert_close_to(what: &str, got_shape: &[usize], got: &[f64], want_shape: &[usize], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got_shape, want_shape, "{what}: shape");
    for (i, (a, e)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - e).abs() <= atol + rtol * e.abs() || (a.is_nan() && e.is_nan()),
            "{what}: element {i}: got {a:e}, want {e:e} (|diff| {:e})",
            (a - e).abs()
        );
    }
}

/// Runs `cmd` (a test binary running one ignored test) with its output on
/// pipes, kills it after `limit` (a hang), and asserts that it exited
/// normally with its one test passed: a signal (abort, segfault) or a
/// failure fails the calling test, with the child's output.
pub fn assert_child_passes(mut cmd: Command, limit: Duration) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!("the child did not finish in {limit:?}: some call hangs");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child ended with {} (a signal means an abort or a segfault)\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("1 passed"), "{stdout}");
}
