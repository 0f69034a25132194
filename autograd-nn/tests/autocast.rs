//! Autocast against PyTorch's CPU autocast (bf16): the output dtype of every
//! op the library shares with PyTorch's lists (`fixtures/autocast/policy.json`,
//! made by `make_autocast_golden.py` beside it), and PyTorch's MLP forward and
//! backward under the region (`mlp_autocast.safetensors`).

use autograd_core::{Backend, DType};
use autograd_cpu::Cpu;
use autograd_nn::{BatchNorm1d, LayerNorm, Module, MultiheadAttention, load_safetensors};
use autograd_tensor::Tensor;
use autograd_tensor::autocast::autocast;
use autograd_tensor::functional::{
    self as F, CrossEntropyOptions, Reduction, SdpaOptions, try_binary_cross_entropy_with_logits, try_cross_entropy, try_huber_loss,
    try_l1_loss, try_linear, try_mse_loss, try_nll_loss, try_smooth_l1_loss,
};

type T = Tensor<Cpu>;

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::I64 => "int64",
        DType::Bool => "bool",
    }
}

/// Our version of each of the script's ops, by its key.
fn run_op(key: &str) -> T {
    let (a, b) = (T::randn([4, 5]), T::randn([5, 3]));
    let (x, w, bias) = (T::randn([4, 5]), T::randn([3, 5]), T::randn([3]));
    let t = T::from_vec(vec![0i64, 2, 1, 0], [4]);
    let p = T::rand([4, 5]);
    let eye = T::from_vec((0..25).map(|i| if i % 6 == 0 { 1.0f32 } else { 0.0 }).collect(), [5, 5]);
    let h = x.matmul(&eye); // bf16 inside the region
    let hp = &p.matmul(&eye).abs() + 0.1;
    let ce = CrossEntropyOptions::default();
    let (base, on_bf16) = match key.strip_suffix("@bf16_input") {
        Some(k) => (k, true),
        None => (key, false),
    };
    let xin = if on_bf16 { &h } else { &x };
    let pin = if on_bf16 { &hp } else { &p };
    match base {
        "matmul" => a.matmul(&b),
        "linear" => try_linear(&x, &w, Some(&bias)).unwrap(),
        "bmm" => a.unsqueeze(0).bmm(&b.unsqueeze(0)),
        "add_f32_f32" => &x + &x,
        "add_bf16_f32" => &a.matmul(&b) + &T::randn([4, 3]),
        "mul_bf16_f32" => &a.matmul(&b) * &T::randn([4, 3]),
        "add_bf16_bf16" => xin + xin,
        "mul_bf16_scalar" => xin * 2.0,
        "relu" => xin.relu(),
        "gelu" => xin.gelu(),
        "silu" => xin.silu(),
        "tanh" => xin.tanh(),
        "sigmoid" => xin.sigmoid(),
        "exp" => xin.exp(),
        "log" => pin.log(),
        "pow" => xin.powf(2.0),
        "sqrt" => pin.sqrt(),
        "sum" => xin.sum(),
        "mean" => xin.mean(),
        "var" => xin.try_var_dims(&[0, 1], 1, false).unwrap(),
        "std" => xin.try_std_dims(&[0, 1], 1, false).unwrap(),
        "norm" => xin.try_norm(2.0, &[], false).unwrap(),
        "amax" => xin.try_amax(&[1], false).unwrap(),
        "logsumexp" => xin.try_logsumexp(&[1], false).unwrap(),
        "softmax" => xin.softmax(1),
        "log_softmax" => xin.log_softmax(1),
        "layer_norm" => F::try_layer_norm(xin, &[5], None, None, 1e-5).unwrap(),
        "cross_entropy" => try_cross_entropy(xin, &t, Reduction::Mean, &ce).unwrap(),
        "nll_loss" if on_bf16 => try_nll_loss(xin, &t, None, None, Reduction::Mean).unwrap(),
        "nll_loss" => try_nll_loss(&x.log_softmax(1), &t, None, None, Reduction::Mean).unwrap(),
        "mse_loss" => try_mse_loss(xin, &p, Reduction::Mean).unwrap(),
        "l1_loss" => try_l1_loss(xin, &p, Reduction::Mean).unwrap(),
        "smooth_l1_loss" => try_smooth_l1_loss(xin, &p, 1.0, Reduction::Mean).unwrap(),
        "huber_loss" => try_huber_loss(xin, &p, 1.0, Reduction::Mean).unwrap(),
        "bce_with_logits" => try_binary_cross_entropy_with_logits(xin, &p, None, Reduction::Mean).unwrap(),
        "embedding" => F::try_embedding(&t, &w).unwrap(),
        "cat_bf16_f32" => T::cat(&[a.matmul(&b), T::randn([4, 3])], 0),
        "matmul_then_softmax" => a.matmul(&b).softmax(1),
        "linear_then_relu" => try_linear(&x, &w, Some(&bias)).unwrap().relu(),
        "dropout" => F::try_dropout(xin, 0.5, true).unwrap(),
        "where" => T::where_cond(&x.gt_scalar(0.0), &a.matmul(&b).matmul(&T::ones([3, 5])), &x),
        "scaled_dot_product_attention" => {
            let q = T::randn([2, 2, 4, 8]);
            F::try_scaled_dot_product_attention(&q, &q, &q, SdpaOptions::default()).unwrap()
        }
        "multi_head_attention" => {
            let xa = T::randn([2, 4, 8]);
            MultiheadAttention::<Cpu>::new(8, 2).forward(&xa)
        }
        "batch_norm" => BatchNorm1d::<Cpu>::new(5).forward(xin),
        "layer_norm_module" => LayerNorm::<Cpu>::new(&[5]).forward(xin),
        other => panic!("policy.json has an op this test does not know: {other}"),
    }
}

#[test]
fn every_op_has_pytorchs_output_dtype_under_bf16_autocast() {
    let text = std::fs::read_to_string(autograd_testkit::fixture("autocast/policy.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let table = json["output_dtype"].as_object().unwrap();
    assert!(table.len() >= 70, "the whole table: {} ops", table.len());
    let mut wrong = Vec::new();
    for (key, want) in table {
        let got = autocast(DType::BF16, || Ok(run_op(key))).unwrap();
        if dtype_name(got.dtype()) != want.as_str().unwrap() {
            wrong.push(format!("{key}: got {}, PyTorch {want}", dtype_name(got.dtype())));
        }
    }
    assert!(wrong.is_empty(), "output dtypes that differ from PyTorch's:\n{}", wrong.join("\n"));
    // outside the region nothing is cast
    assert_eq!(run_op("linear").dtype(), DType::F32);
}

#[test]
fn f16_follows_the_same_lists() {
    for (key, want) in [("matmul", DType::F16), ("linear_then_relu", DType::F16), ("mse_loss@bf16_input", DType::F32), ("relu", DType::F32)]
    {
        assert_eq!(autocast(DType::F16, || Ok(run_op(key))).unwrap().dtype(), want, "{key}");
    }
    assert!(autocast(DType::F64, || Ok(())).is_err(), "autocast runs in a low dtype");
}

/// PyTorch's `Sequential(Linear, ReLU, Linear, Tanh, Linear)` under
/// autocast, then cross-entropy in the region and backward outside it:
/// each module's output dtype, the logits and loss within bf16 tolerance,
/// and f32 gradients of the f32 parameters within the tolerance that
/// follows (1e-2 relative plus two bf16 ulps of the largest element).
#[test]
fn pytorch_mlp_under_bf16_autocast() {
    let golden = load_safetensors::<Cpu>(autograd_testkit::fixture("autocast/mlp_autocast.safetensors")).unwrap();
    let g = |n: &str| golden.get(n).unwrap_or_else(|| panic!("missing {n}")).clone();
    let w = load_safetensors::<Cpu>(autograd_testkit::fixture("interop/mlp_f32.safetensors")).unwrap();
    let params: Vec<(String, T)> = w.tensors.iter().map(|(n, t)| (n.clone(), t.detach().requires_grad_(true))).collect();
    let p = |n: &str| params.iter().find(|(k, _)| k == n).map(|(_, t)| t.clone()).unwrap();
    let (x, targets) = (g("x"), g("targets"));
    let (acts, loss) = autocast(DType::BF16, || {
        let a0 = try_linear(&x, &p("0.weight"), Some(&p("0.bias"))).unwrap();
        let a1 = a0.relu();
        let a2 = try_linear(&a1, &p("2.weight"), Some(&p("2.bias"))).unwrap();
        let a3 = a2.tanh();
        let a4 = try_linear(&a3, &p("4.weight"), Some(&p("4.bias"))).unwrap();
        let loss = try_cross_entropy(&a4, &targets, Reduction::Mean, &Default::default()).unwrap();
        Ok((vec![a0, a1, a2, a3, a4], loss))
    })
    .unwrap();
    let close = |what: &str, got: &T, want: &T, rtol: f64| {
        let want_v = want.to_vec_f64();
        let scale = want_v.iter().fold(0f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in got.to_vec_f64().iter().zip(&want_v).enumerate() {
            // relative to the element, plus two bf16 ulps of the tensor's largest
            // element (sums that cancel lose bits relative to their terms)
            assert!((a - b).abs() <= rtol * b.abs() + 2f64.powi(-7) * scale, "{what}[{i}]: {a} vs PyTorch {b}");
        }
    };
    for (i, a) in acts.iter().enumerate() {
        let is_bf16 = g(&format!("act_dtype_is_bf16/{i}")).to_vec_f64()[0] == 1.0;
        assert_eq!(a.dtype() == DType::BF16, is_bf16, "module {i}'s output dtype");
        // a few bf16 ulps (2^-8 relative each)
        close(&format!("act {i}"), &a.to_dtype(DType::F32), &g(&format!("act/{i}")), 3.0 * 2f64.powi(-8));
    }
    assert_eq!(acts[4].dtype(), DType::BF16);
    assert_eq!(loss.dtype(), DType::F32, "the loss is widened");
    close("loss", &loss, &g("loss"), 1e-2);
    loss.backward().unwrap();
    for (n, t) in &params {
        let grad = t.grad().unwrap();
        assert_eq!(grad.dtype(), DType::F32, "{n}: gradients in the parameter's own dtype");
        close(&format!("grad {n}"), &grad, &g(&format!("grad/{n}")), 2e-2);
    }
}

#[test]
fn the_region_is_thread_local_and_backward_runs_outside_it() {
    let x = T::randn([3, 4]);
    let w = T::randn([4, 4]).requires_grad_(true);
    autocast(DType::BF16, || {
        let other = std::thread::spawn(|| T::ones([2, 2]).matmul(&T::ones([2, 2])).dtype()).join().unwrap();
        assert_eq!(other, DType::F32, "another thread is outside the region");
        let y = x.matmul(&w);
        assert_eq!(y.dtype(), DType::BF16);
        // backward inside the region: the products of backward keep the forward's dtypes
        y.to_dtype(DType::F32).sum().backward()
    })
    .unwrap();
    assert_eq!(w.grad().unwrap().dtype(), DType::F32);
    let want = x.to_dtype(DType::BF16).to_dtype(DType::F32).t().matmul(&T::ones([3, 4]));
    for (a, b) in w.grad().unwrap().to_vec_f64().iter().zip(want.to_vec_f64()) {
        assert!((a - b).abs() <= 2f64.powi(-7) * b.abs() + 1e-6, "{a} vs {b}");
    }
    // f64 tensors are never cast (PyTorch's rule)
    let d = T::ones([2, 2]).to_dtype(DType::F64);
    assert_eq!(autocast(DType::BF16, || d.try_matmul(&d)).unwrap().dtype(), DType::F64);
}

fn _assert_backend<B: Backend>() {}
