//! Modules: PyTorch names, PyTorch weights, state dicts that validate first
//! ([`module_suite!`](crate::module_suite)).

use autograd_core::{Backend, DType};
use autograd_nn::LinearConfig;
use autograd_nn::LoadOptions;
use autograd_nn::MlpConfig;
use autograd_nn::{Activation, Dropout, Linear, Module, ModuleExt, ReLU, Sequential, Tanh, load_safetensors};
use autograd_tensor::Tensor;
use autograd_tensor::functional::{Reduction, try_cross_entropy};
use std::path::PathBuf;

fn interop(name: &str) -> PathBuf {
    crate::fixture("interop").join(name)
}

/// PyTorch's `Sequential(Linear(4, 8), ReLU(), Linear(8, 8), Tanh(), Linear(8, 3))`.
fn pytorch_mlp<B: Backend>(dtype: DType) -> Sequential<B> {
    Sequential::new()
        .add(LinearConfig::new(4, 8).with_dtype(dtype).init())
        .add(ReLU)
        .add(LinearConfig::new(8, 8).with_dtype(dtype).init())
        .add(Tanh)
        .add(LinearConfig::new(8, 3).with_dtype(dtype).init())
}

fn assert_close(what: &str, a: &Tensor<impl Backend>, b: &Tensor<impl Backend>, rtol: f64, atol: f64) {
    assert_eq!(a.dims(), b.dims(), "{what}");
    for (i, (x, y)) in a.to_vec_f64().iter().zip(b.to_vec_f64()).enumerate() {
        assert!((x - y).abs() <= atol + rtol * y.abs(), "{what}[{i}]: {x} vs {y}");
    }
}

/// Suite test `names_like_pytorch`.
pub fn names_like_pytorch<B: Backend>() {
    let m = pytorch_mlp::<B>(DType::F32);
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]);
    assert_eq!(m.named_parameters()[0].1.dims(), &[8, 4], "weight is (out, in)");
    let nested =
        Sequential::<B>::new().add(LinearConfig::new(2, 2).with_bias(false).init()).add(Sequential::new().add(ReLU).add(Linear::new(2, 1)));
    let names: Vec<String> = nested.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "1.1.weight", "1.1.bias"]);
    let mods: Vec<String> = nested.named_modules().into_iter().map(|(n, _)| n).collect();
    assert_eq!(mods, ["", "0", "1", "1.0", "1.1"]);
    assert_eq!(MlpConfig::new(&[64, 128, 10]).init::<B>().num_parameters(), 64 * 128 + 128 + 128 * 10 + 10);
}

/// Suite test `pytorch_weights_reproduce_pytorch`.
pub fn pytorch_weights_reproduce_pytorch<B: Backend>() {
    let io = load_safetensors::<B>(interop("mlp_f32_io.safetensors")).unwrap();
    let mut m = pytorch_mlp::<B>(DType::F32);
    m.load_safetensors(interop("mlp_f32.safetensors")).unwrap();
    let logits = m.forward(io.get("x").unwrap());
    assert_close("logits", &logits, io.get("logits").unwrap(), 1e-6, 1e-7);
    let loss = try_cross_entropy(&logits, io.get("targets").unwrap(), Reduction::Mean, &Default::default()).unwrap();
    assert_close("loss", &loss, io.get("loss").unwrap(), 1e-6, 1e-7);
    loss.backward().unwrap();
    for (n, p) in m.named_parameters() {
        assert_close(&format!("grad {n}"), &p.grad().unwrap(), io.get(&format!("grad/{n}")).unwrap(), 1e-5, 1e-7);
    }
    // half-precision files load into the f32 model, converted exactly
    for (file, prefix) in [("mlp_bf16.safetensors", "bf16_as_f32"), ("mlp_f16.safetensors", "f16_as_f32")] {
        let mut h = pytorch_mlp::<B>(DType::F32);
        h.load_safetensors(interop(file)).unwrap();
        for (n, p) in h.named_parameters() {
            if let Some(want) = io.get(&format!("{prefix}/{n}")) {
                assert_eq!(p.to_vec::<f32>(), want.to_vec::<f32>(), "{file} {n}");
            }
        }
    }
}

/// Suite test `save_load_round_trip`.
pub fn save_load_round_trip<B: Backend>() {
    autograd_tensor::manual_seed(1);
    let a = MlpConfig::new(&[3, 5, 2]).with_activation(Activation::Tanh).with_dtype(DType::F64).init::<B>();
    let dir = std::env::temp_dir().join(format!("autograd_nn_modules_{}_{}", B::NAME, std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("m.safetensors");
    a.save_safetensors(&p).unwrap();
    let mut b = MlpConfig::new(&[3, 5, 2]).with_activation(Activation::Tanh).with_dtype(DType::F64).init::<B>();
    let x = Tensor::<B>::randn_dtype([4, 3], DType::F64);
    assert_ne!(a.forward(&x).to_vec_f64(), b.forward(&x).to_vec_f64());
    b.load_safetensors(&p).unwrap();
    assert_eq!(a.forward(&x).to_vec_f64(), b.forward(&x).to_vec_f64(), "identical predictions after reload");
    let file = load_safetensors::<B>(&p).unwrap();
    assert_eq!(file.metadata.get("format").map(String::as_str), Some("pt"));
    assert_eq!(file.tensors.len(), 4);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Suite test `bad_state_dicts_leave_model_unchanged`.
pub fn bad_state_dicts_leave_model_unchanged<B: Backend>() {
    let mut m = pytorch_mlp::<B>(DType::F32);
    let before: Vec<Vec<f64>> = m.parameters().iter().map(|t| t.to_vec_f64()).collect();
    let mut sd = m.state_dict();
    sd.insert("0.weight".into(), Tensor::zeros([8, 5])); // wrong shape
    sd.remove("4.bias"); // missing
    sd.insert("extra.weight".into(), Tensor::zeros([1])); // unexpected
    sd.insert("2.bias".into(), Tensor::zeros_dtype([8], DType::F64)); // wrong dtype
    let e = m.load_state_dict(&sd, LoadOptions::default()).unwrap_err().to_string();
    for needle in ["4.bias", "extra.weight", "0.weight", "[8, 4]", "[8, 5]", "2.bias", "F64"] {
        assert!(e.contains(needle), "{needle} not in: {e}");
    }
    let after: Vec<Vec<f64>> = m.parameters().iter().map(|t| t.to_vec_f64()).collect();
    assert_eq!(before, after, "model unchanged");
    // non-strict loading reports what it skipped and loads the rest
    let mut sd = m.state_dict();
    sd.remove("4.bias");
    let zeros = Tensor::<B>::zeros([8]);
    sd.insert("0.bias".into(), zeros);
    let r = m.load_state_dict(&sd, LoadOptions { strict: false, ..Default::default() }).unwrap();
    assert_eq!(r.missing, vec!["4.bias".to_string()]);
    assert_eq!(m.named_parameters()[1].1.to_vec_f64(), vec![0.0; 8]);
    // a corrupt file is an Err and the model stays as it was
    let dir = std::env::temp_dir().join(format!("autograd_nn_bad_{}_{}", B::NAME, std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.safetensors");
    let good = std::fs::read(interop("mlp_f32.safetensors")).unwrap();
    std::fs::write(&p, &good[..good.len() / 2]).unwrap();
    let before: Vec<Vec<f64>> = m.parameters().iter().map(|t| t.to_vec_f64()).collect();
    assert!(m.load_safetensors(&p).is_err());
    assert_eq!(before, m.parameters().iter().map(|t| t.to_vec_f64()).collect::<Vec<_>>());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Suite test `train_eval_zero_grad_dtype`.
pub fn train_eval_zero_grad_dtype<B: Backend>() {
    let mut m = Sequential::<B>::new().add(Linear::new(4, 4)).add(Dropout::new(0.5));
    let x = Tensor::<B>::ones([2, 4]);
    assert!(m.is_training());
    m.eval();
    assert!(!m.is_training());
    assert_eq!(m.forward(&x).to_vec_f64(), m.forward(&x).to_vec_f64(), "no dropout in eval");
    m.forward(&x).sum().backward().unwrap();
    let w = m.parameters()[0].clone();
    let g = w.grad().unwrap();
    m.zero_grad(false);
    assert_eq!(w.grad().unwrap().to_vec_f64(), vec![0.0; 16], "zeroed in place");
    assert_eq!(g.to_vec_f64(), vec![0.0; 16], "same gradient tensor");
    m.zero_grad(true);
    assert!(w.grad().is_none());
    m.to_dtype(DType::F64);
    assert!(m.parameters().iter().all(|p| p.dtype() == DType::F64 && p.requires_grad() && p.is_leaf()));
    assert_eq!(m.forward(&x.to_dtype(DType::F64)).dtype(), DType::F64);
}

/// Suite test `initializers`.
pub fn initializers<B: Backend>() {
    use autograd_nn::init::{self, FanMode};
    // fork_rng: tests run in parallel threads and share the global generator
    let a = autograd_tensor::fork_rng(9, || init::kaiming_uniform::<B>(&[256, 128], 0.0, FanMode::FanIn, DType::F64).to_vec_f64());
    let b = autograd_tensor::fork_rng(9, || init::kaiming_uniform::<B>(&[256, 128], 0.0, FanMode::FanIn, DType::F64).to_vec_f64());
    assert_eq!(a, b, "seeded: reproducible");
    let bound = (6.0f64 / 128.0).sqrt();
    assert!(a.iter().all(|v| v.abs() <= bound) && a.iter().any(|v| v.abs() > 0.95 * bound));
    let std = |v: &[f64]| (v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64).sqrt();
    let x = init::xavier_normal::<B>(&[200, 300], 1.0, DType::F64).to_vec_f64();
    assert!((std(&x) - (2.0f64 / 500.0).sqrt()).abs() < 0.003, "xavier normal std {}", std(&x));
    let k = init::kaiming_normal::<B>(&[300, 200], 0.0, FanMode::FanOut, DType::F64).to_vec_f64();
    assert!((std(&k) - (2.0f64 / 300.0).sqrt()).abs() < 0.003, "kaiming normal std {}", std(&k));
    let u = init::xavier_uniform::<B>(&[10, 30], 2.0, DType::F64).to_vec_f64();
    assert!(u.iter().all(|v| v.abs() <= 2.0 * (6.0f64 / 40.0).sqrt()));
    assert_eq!(init::constant::<B>(&[2], 0.5, DType::F32).to_vec_f64(), vec![0.5, 0.5]);
    assert_eq!(init::fans(&[16, 8, 3, 3]), (72, 144));
}

/// The suite as `#[test]`s for one backend.
#[macro_export]
macro_rules! module_suite {
    ($backend:ty) => {
        $crate::instantiate!(
            $backend,
            modules,
            [
                names_like_pytorch,
                pytorch_weights_reproduce_pytorch,
                save_load_round_trip,
                bad_state_dicts_leave_model_unchanged,
                train_eval_zero_grad_dtype,
                initializers
            ]
        );
    };
}
