//! safetensors interop with PyTorch's files and robustness against bad files.

use autograd_core::{Backend, DType};
use autograd_nn::{load_safetensors, load_safetensors_bytes, save_safetensors};
use autograd_tensor::Tensor;
use autograd_tensor::functional::{Reduction, try_cross_entropy, try_linear};
use std::path::PathBuf;

fn interop(name: &str) -> PathBuf {
    autograd_testkit::fixture("interop").join(name)
}

fn close(what: &str, got: &Tensor<impl Backend>, want: &Tensor<impl Backend>, rtol: f64, atol: f64) {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    for (i, (a, b)) in got.to_vec_f64().iter().zip(want.to_vec_f64()).enumerate() {
        assert!((a - b).abs() <= atol + rtol * b.abs(), "{what}[{i}]: {a} vs {b}");
    }
}

/// PyTorch's `Sequential(Linear, ReLU, Linear, Tanh, Linear)` written with functional ops.
fn mlp<B: Backend>(w: &autograd_nn::NamedTensors<B>, x: &Tensor<B>) -> Tensor<B> {
    let p = |n: &str| w.get(n).unwrap_or_else(|| panic!("missing {n}"));
    let h = try_linear(x, p("0.weight"), Some(p("0.bias"))).unwrap().relu();
    let h = try_linear(&h, p("2.weight"), Some(p("2.bias"))).unwrap().tanh();
    try_linear(&h, p("4.weight"), Some(p("4.bias"))).unwrap()
}

fn pytorch_mlp<B: Backend>() {
    let w = load_safetensors::<B>(interop("mlp_f32.safetensors")).unwrap();
    assert_eq!(
        w.tensors.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight"]
    );
    assert_eq!(w.metadata.get("format").map(String::as_str), Some("pt"));
    let io = load_safetensors::<B>(interop("mlp_f32_io.safetensors")).unwrap();
    let x = io.get("x").unwrap();
    let params: Vec<(String, Tensor<B>)> = w.tensors.iter().map(|(n, t)| (n.clone(), t.detach().requires_grad_(true))).collect();
    let w = autograd_nn::NamedTensors { tensors: params, metadata: w.metadata };
    let logits = mlp(&w, x);
    close("logits", &logits, io.get("logits").unwrap(), 1e-6, 1e-7);
    let loss = try_cross_entropy(&logits, io.get("targets").unwrap(), Reduction::Mean, &Default::default()).unwrap();
    close("loss", &loss, io.get("loss").unwrap(), 1e-6, 1e-7);
    loss.backward().unwrap();
    for (n, t) in &w.tensors {
        close(&format!("grad {n}"), &t.grad().unwrap(), io.get(&format!("grad/{n}")).unwrap(), 1e-5, 1e-7);
    }
    // the same in f64 against PyTorch's f64 recomputation
    let w64 = autograd_nn::NamedTensors {
        tensors: w.tensors.iter().map(|(n, t)| (n.clone(), t.to_dtype(DType::F64).detach().requires_grad_(true))).collect(),
        metadata: Default::default(),
    };
    let logits = mlp(&w64, &x.to_dtype(DType::F64));
    close("f64 logits", &logits, io.get("f64/logits").unwrap(), 1e-12, 1e-14);
    let loss = try_cross_entropy(&logits, io.get("targets").unwrap(), Reduction::Mean, &Default::default()).unwrap();
    close("f64 loss", &loss, io.get("f64/loss").unwrap(), 1e-12, 1e-14);
    loss.backward().unwrap();
    for (n, t) in &w64.tensors {
        close(&format!("f64 grad {n}"), &t.grad().unwrap(), io.get(&format!("f64/grad/{n}")).unwrap(), 1e-10, 1e-13);
    }
}

fn half_precision_files<B: Backend>() {
    let io = load_safetensors::<B>(interop("mlp_f32_io.safetensors")).unwrap();
    for (file, dtype, prefix) in [("mlp_bf16.safetensors", DType::BF16, "bf16_as_f32"), ("mlp_f16.safetensors", DType::F16, "f16_as_f32")] {
        let w = load_safetensors::<B>(interop(file)).unwrap();
        for (n, t) in &w.tensors {
            assert_eq!(t.dtype(), dtype, "{file} {n}");
            if let Some(want) = io.get(&format!("{prefix}/{n}")) {
                assert_eq!(t.to_dtype(DType::F32).to_vec::<f32>(), want.to_vec::<f32>(), "{file} {n}: widened exactly");
            }
        }
    }
}

fn round_trip<B: Backend>() {
    let dir = std::env::temp_dir().join(format!("autograd_nn_rt_{}_{}", B::NAME, std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = interop("mlp_f32.safetensors");
    let w = load_safetensors::<B>(&src).unwrap();
    let out = dir.join("copy.safetensors");
    let named: Vec<(&str, &Tensor<B>)> = w.tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    save_safetensors(&named, &w.metadata, &out).unwrap();
    let back = load_safetensors::<B>(&out).unwrap();
    assert_eq!(back.metadata, w.metadata);
    for ((n1, a), (n2, b)) in w.tensors.iter().zip(&back.tensors) {
        assert_eq!(n1, n2);
        assert_eq!(a.to_host().to_le_bytes(), b.to_host().to_le_bytes(), "{n1}: bytes");
    }
    // every dtype survives
    let mixed = [
        ("a", Tensor::<B>::from_vec(vec![1.5f64, -2.0], [2])),
        ("b", Tensor::<B>::from_vec(vec![7i64, -9, 3], [3, 1])),
        ("c", Tensor::<B>::from_vec(vec![0.1f32; 6], [2, 3]).to_dtype(DType::BF16)),
        ("d", Tensor::<B>::scalar(3.0f32).to_dtype(DType::F16)),
    ];
    let named: Vec<(&str, &Tensor<B>)> = mixed.iter().map(|(n, t)| (*n, t)).collect();
    save_safetensors(&named, &Default::default(), &out).unwrap();
    let back = load_safetensors::<B>(&out).unwrap();
    for (n, t) in &mixed {
        let b = back.get(n).unwrap();
        assert_eq!((b.dtype(), b.dims(), b.to_host()), (t.dtype(), t.dims(), t.to_host()), "{n}");
    }
    // no temporary file left behind
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn header(json: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (json.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(json.as_bytes());
    v.extend_from_slice(data);
    v
}

fn bad_files<B: Backend>() {
    let good = std::fs::read(interop("mlp_f32.safetensors")).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "too short"),
        ("truncated data", good[..good.len() - 5].to_vec(), ""),
        (
            "header longer than file",
            {
                let mut b = good.clone();
                b[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
                b
            },
            "larger than",
        ),
        ("invalid JSON", header("{\"a\": [", &[]), "invalid JSON"),
        ("not an object", header("[1, 2]", &[]), "invalid JSON"),
        (
            "duplicate names",
            header(
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
                &[0; 8],
            ),
            "twice",
        ),
        ("offset out of range", header(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, &[0; 4]), ""),
        (
            "overlapping offsets",
            header(
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
                &[0; 8],
            ),
            "",
        ),
        ("shape disagrees with bytes", header(r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#, &[0; 8]), ""),
        ("unknown dtype", header(r#"{"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}"#, &[0; 1]), ""),
        ("unsupported dtype", header(r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#, &[0; 1]), "cannot hold"),
    ];
    for (what, bytes, needle) in cases {
        let r = std::panic::catch_unwind(|| load_safetensors_bytes::<B>(&bytes, "test.safetensors"));
        let e = r.unwrap_or_else(|_| panic!("{what}: panicked")).err().unwrap_or_else(|| panic!("{what}: accepted"));
        let msg = e.to_string();
        assert!(msg.contains("test.safetensors") && msg.contains(needle), "{what}: {msg}");
    }
    assert!(load_safetensors::<B>("/nonexistent/w.safetensors").unwrap_err().to_string().contains("/nonexistent/w.safetensors"));
}

autograd_testkit::for_backends!(with_traced: pytorch_mlp, half_precision_files, round_trip, bad_files);
