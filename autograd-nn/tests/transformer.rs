//! Attention, Transformer blocks and BatchNorm against PyTorch: each case of
//! `autograd-testkit/fixtures/transformer/transformer.safetensors` (made by
//! `make_fixtures.py` beside it, PyTorch 2.15) rebuilt here with the same
//! configuration, PyTorch's state dict loaded strictly, outputs and every
//! gradient compared (float64 at 1e-10, float32 at 1e-5), on both backends.

use autograd_core::{Backend, DType};
use autograd_nn::{
    Activation, BatchNorm1dConfig, EncoderOptions, MhaOptions, Module, ModuleExt, MultiheadAttentionConfig, TransformerEncoderConfig,
    TransformerEncoderLayerConfig,
};
use autograd_tensor::Tensor;
use autograd_tensor::functional::{SdpaOptions, try_scaled_dot_product_attention};

mod fixture_case;
use fixture_case::Case;

const FILE: &str = "transformer/transformer.safetensors";

fn mha_self<B: Backend>() {
    let c = Case::<B>::load(FILE, "mha_self");
    let mut m = MultiheadAttentionConfig::new(8, 2).with_dtype(DType::F64).init::<B>();
    c.load_into(&mut m);
    let x = c.input("x");
    let (out, w) = m.try_forward_qkv(&x, &x, &x, MhaOptions::default()).unwrap();
    c.check(&m, &[("out", &out), ("weights", &w.unwrap())], &[("x", &x)]);
}

fn mha_cross_masks<B: Backend>() {
    let c = Case::<B>::load(FILE, "mha_cross_masks");
    let mut m = MultiheadAttentionConfig::new(8, 4).with_dtype(DType::F64).init::<B>();
    c.load_into(&mut m);
    let (q, k, v) = (c.input("q"), c.input("k"), c.input("v"));
    let (pad, mask) = (c.get("in/key_padding_mask"), c.get("in/attn_mask"));
    assert_eq!(pad.dtype(), DType::Bool);
    let opts = MhaOptions { key_padding_mask: Some(&pad), attn_mask: Some(&mask), need_weights: false, ..Default::default() };
    let (out, w) = m.try_forward_qkv(&q, &k, &v, opts).unwrap();
    assert!(w.is_none());
    c.check(&m, &[("out", &out)], &[("q", &q), ("k", &k), ("v", &v)]);
}

fn mha_causal_per_head<B: Backend>() {
    let c = Case::<B>::load(FILE, "mha_causal_per_head");
    let mut m = MultiheadAttentionConfig::new(6, 3).with_dtype(DType::F64).init::<B>();
    c.load_into(&mut m);
    let (x, mask) = (c.input("x"), c.get("in/attn_mask"));
    let opts = MhaOptions { attn_mask: Some(&mask), is_causal: true, average_attn_weights: false, ..Default::default() };
    let (out, w) = m.try_forward_qkv(&x, &x, &x, opts).unwrap();
    assert_eq!(w.as_ref().unwrap().dims(), &[2, 3, 4, 4]);
    // is_causal alone builds the same mask
    let (alone, _) = m.try_forward_qkv(&x, &x, &x, MhaOptions { is_causal: true, ..Default::default() }).unwrap();
    c.close("is_causal without a mask", &alone, &c.get("out/out"));
    c.check(&m, &[("out", &out), ("weights", &w.unwrap())], &[("x", &x)]);
}

fn mha_fully_masked<B: Backend>() {
    let c = Case::<B>::load(FILE, "mha_fully_masked");
    let mut m = MultiheadAttentionConfig::new(4, 2).with_dtype(DType::F64).init::<B>();
    c.load_into(&mut m);
    let (x, pad) = (c.get("in/x"), c.get("in/key_padding_mask"));
    let opts = MhaOptions { key_padding_mask: Some(&pad), ..Default::default() };
    let (zeros, _) = m.try_forward_qkv(&x, &x, &x, MhaOptions { need_weights: false, ..opts }).unwrap();
    let (nan, w) = m.try_forward_qkv(&x, &x, &x, opts).unwrap();
    c.close("out", &zeros, &c.get("out/out"));
    c.close("out_with_weights", &nan, &c.get("out/out_with_weights"));
    assert!(nan.narrow(0, 1, 1).to_vec_f64().iter().all(|v| v.is_nan()), "PyTorch 2.15 gives NaN with weights");
    assert!(w.unwrap().narrow(0, 1, 1).to_vec_f64().iter().all(|v| v.is_nan()));
    // the fully masked batch gets no gradient without weights
    let xg = x.detach().requires_grad_(true);
    m.try_forward_qkv(&xg, &xg, &xg, MhaOptions { need_weights: false, ..opts }).unwrap().0.sum().backward().unwrap();
    let g = xg.grad().unwrap().to_vec_f64();
    assert!(g[12..].iter().all(|v| *v == 0.0) && g[..12].iter().any(|v| *v != 0.0), "{g:?}");
}

fn mha_unbatched_f32<B: Backend>() {
    let c = Case::<B>::load(FILE, "mha_unbatched_f32");
    let mut m = MultiheadAttentionConfig::new(8, 2).init::<B>();
    c.load_into(&mut m);
    m.eval();
    let (q, kv, mask) = (c.input("q"), c.input("kv"), c.get("in/attn_mask"));
    let (out, w) = m.try_forward_qkv(&q, &kv, &kv, MhaOptions { attn_mask: Some(&mask), ..Default::default() }).unwrap();
    c.check(&m, &[("out", &out), ("weights", &w.unwrap())], &[("q", &q), ("kv", &kv)]);
}

fn sdpa_bool_mask_scale<B: Backend>() {
    let c = Case::<B>::load(FILE, "sdpa_bool_mask_scale");
    let (q, k, v, mask) = (c.input("q"), c.input("k"), c.input("v"), c.get("in/attn_mask"));
    let out = try_scaled_dot_product_attention(&q, &k, &v, SdpaOptions { attn_mask: Some(&mask), scale: Some(0.3), ..Default::default() })
        .unwrap();
    c.check(&autograd_nn::Identity, &[("out", &out)], &[("q", &q), ("k", &k), ("v", &v)]);
}

fn sdpa_causal_f32<B: Backend>() {
    let c = Case::<B>::load(FILE, "sdpa_causal_f32");
    let (q, k, v) = (c.input("q"), c.input("k"), c.input("v"));
    let out = try_scaled_dot_product_attention(&q, &k, &v, SdpaOptions { is_causal: true, ..Default::default() }).unwrap();
    c.check(&autograd_nn::Identity, &[("out", &out)], &[("q", &q), ("k", &k), ("v", &v)]);
}

fn encoder_post_norm_relu_padding<B: Backend>() {
    let c = Case::<B>::load(FILE, "encoder_post_norm_relu_padding");
    let mut m = TransformerEncoderLayerConfig::new(8, 2).with_dim_feedforward(16).with_dropout(0.0).with_dtype(DType::F64).init::<B>();
    c.load_into(&mut m);
    let (x, pad) = (c.input("x"), c.get("in/src_key_padding_mask"));
    let out = m.try_forward_with(&x, EncoderOptions { src_key_padding_mask: Some(&pad), ..Default::default() }).unwrap();
    c.check(&m, &[("out", &out)], &[("x", &x)]);
}

fn encoder_pre_norm_gelu_causal<B: Backend>() {
    let c = Case::<B>::load(FILE, "encoder_pre_norm_gelu_causal");
    let mut m = TransformerEncoderLayerConfig::new(8, 4)
        .with_dim_feedforward(12)
        .with_dropout(0.0)
        .with_activation(Activation::GELU)
        .with_norm_first(true)
        .with_dtype(DType::F64)
        .init::<B>();
    c.load_into(&mut m);
    let x = c.input("x");
    let out = m.try_forward_with(&x, EncoderOptions { is_causal: true, ..Default::default() }).unwrap();
    c.check(&m, &[("out", &out)], &[("x", &x)]);
}

fn encoder_stack_eval_f32<B: Backend>() {
    let c = Case::<B>::load(FILE, "encoder_stack_eval_f32");
    let mut m =
        TransformerEncoderConfig::new(TransformerEncoderLayerConfig::new(8, 2).with_dim_feedforward(16), 2).with_norm(true).init::<B>();
    c.load_into(&mut m);
    m.eval();
    let x = c.input("x");
    let out = m.try_forward(&x).unwrap();
    c.check(&m, &[("out", &out)], &[("x", &x)]);
}

/// Three training steps (outputs, input and parameter gradients, buffers
/// afterwards), then evaluation with the running statistics.
fn batchnorm_case<B: Backend>(name: &'static str, config: BatchNorm1dConfig) {
    let c = Case::<B>::load(FILE, name);
    let mut m = config.with_dtype(DType::F64).init::<B>();
    c.load_into(&mut m);
    for s in 0..3 {
        m.zero_grad(true);
        let x = c.input(&format!("x{s}"));
        let y = m.try_forward(&x).unwrap();
        c.close(&format!("y{s}"), &y, &c.get(&format!("out/y{s}")));
        (&y * &c.get(&format!("gout/y{s}"))).sum().backward().unwrap();
        c.close(&format!("gin x{s}"), &x.grad().unwrap(), &c.get(&format!("gin/x{s}")));
        c.close(&format!("grad weight{s}"), &m.weight.as_ref().unwrap().grad().unwrap(), &c.get(&format!("grad/weight{s}")));
        c.close(&format!("grad bias{s}"), &m.bias.as_ref().unwrap().grad().unwrap(), &c.get(&format!("grad/bias{s}")));
        assert!(!m.running_mean.as_ref().unwrap().requires_grad(), "running statistics stay out of the graph");
    }
    let sd = m.state_dict();
    for (n, want) in c.role("after") {
        c.close(&format!("after/{n}"), &sd[&n], &want);
    }
    m.eval();
    let y = m.try_forward(&c.get("in/x0")).unwrap();
    c.close("eval", &y, &c.get("out/eval"));
    assert_eq!(m.num_batches_tracked.as_ref().unwrap().to_vec::<i64>(), vec![3], "evaluation does not count");
}

fn batchnorm_2d<B: Backend>() {
    batchnorm_case::<B>("batchnorm_2d", BatchNorm1dConfig::new(4));
}

fn batchnorm_3d_cumulative<B: Backend>() {
    batchnorm_case::<B>("batchnorm_3d_cumulative", BatchNorm1dConfig::new(3).with_momentum(None));
}

/// Central differences in float64: SDPA with a float mask (its gradient
/// too), safe softmax to second order, MHA and BatchNorm through their
/// composite nodes.
fn gradients_match_central_differences<B: Backend>() {
    use autograd_tensor::autograd::{gradcheck, gradgradcheck};
    let leaf = |shape: &[usize], seed: u64| {
        autograd_tensor::fork_rng(seed, || Tensor::<B>::randn_dtype(shape.to_vec(), DType::F64)).requires_grad_(true)
    };
    let (q, k, v, mask) = (leaf(&[2, 3, 4], 1), leaf(&[2, 5, 4], 2), leaf(&[2, 5, 2], 3), leaf(&[3, 5], 4));
    let sdpa = |x: &[Tensor<B>]| {
        try_scaled_dot_product_attention(&x[0], &x[1], &x[2], SdpaOptions { attn_mask: Some(&x[3]), ..Default::default() }).unwrap()
    };
    gradcheck(sdpa, &[q.clone(), k.clone(), v.clone(), mask], 1e-6, 1e-8, 1e-6).unwrap();
    let causal = |x: &[Tensor<B>]| {
        try_scaled_dot_product_attention(&x[0], &x[1], &x[2], SdpaOptions { is_causal: true, ..Default::default() }).unwrap()
    };
    gradgradcheck(causal, &[q.clone(), k.narrow(1, 0, 3), v.narrow(1, 0, 3)], 1e-6, 1e-7, 1e-5).unwrap();
    let masked = Tensor::<B>::from_vec(vec![0.0f64, f64::NEG_INFINITY, f64::NEG_INFINITY, 0.0, 0.0, 0.0], [2, 3]);
    let x = leaf(&[2, 3], 5);
    gradgradcheck(|x| (&x[0] + &masked).safe_softmax(1).powf(2.0), &[x], 1e-6, 1e-7, 1e-5).unwrap();
    let mha = MultiheadAttentionConfig::new(4, 2).with_dtype(DType::F64).init::<B>();
    let x = leaf(&[2, 3, 4], 6);
    gradcheck(|x| mha.try_forward_qkv(&x[0], &x[0], &x[0], MhaOptions::default()).unwrap().0, &[x], 1e-6, 1e-8, 1e-6).unwrap();
    let (x, w, b) = (leaf(&[4, 3, 2], 7), leaf(&[3], 8), leaf(&[3], 9));
    let bn =
        |x: &[Tensor<B>]| autograd_tensor::functional::try_batch_norm(&x[0], None, Some(&x[1]), Some(&x[2]), true, 1e-5).unwrap().powf(3.0);
    gradcheck(bn, &[x.clone(), w.clone(), b.clone()], 1e-6, 1e-7, 1e-5).unwrap();
    gradgradcheck(bn, &[x, w, b], 1e-6, 1e-6, 1e-4).unwrap();
}

/// Bad arguments are errors naming the op and the shapes, never panics.
fn errors_name_the_op<B: Backend>() {
    let x = Tensor::<B>::randn([2, 3, 4]);
    let err = |r: autograd_core::Result<Tensor<B>>| r.map(|_| ()).unwrap_err().to_string();
    let e = err(try_scaled_dot_product_attention(&x, &x.narrow(2, 0, 3), &x, SdpaOptions::default()));
    assert!(e.contains("scaled_dot_product_attention") && e.contains("[2, 3, 3]"), "{e}");
    let m = Tensor::<B>::ones([3, 3]).gt_scalar(0.0);
    let e = err(try_scaled_dot_product_attention(&x, &x, &x, SdpaOptions { attn_mask: Some(&m), is_causal: true, ..Default::default() }));
    assert!(e.contains("is_causal"), "{e}");
    let e = err(try_scaled_dot_product_attention(
        &x,
        &x,
        &x,
        SdpaOptions { attn_mask: Some(&Tensor::zeros_dtype([3, 3], DType::F64)), ..Default::default() },
    ));
    assert!(e.contains("dtype"), "{e}");
    let mha = MultiheadAttentionConfig::new(4, 2).init::<B>();
    let bad = Tensor::<B>::ones([2, 4]).gt_scalar(0.0);
    let e = mha.try_forward_qkv(&x, &x, &x, MhaOptions { key_padding_mask: Some(&bad), ..Default::default() }).unwrap_err().to_string();
    assert!(e.contains("key_padding_mask") && e.contains("[2, 3]"), "{e}");
    let e = mha.try_forward_qkv(&x, &x, &x, MhaOptions { attn_mask: Some(&bad), ..Default::default() }).unwrap_err().to_string();
    assert!(e.contains("attn_mask") && e.contains("(3, 3)"), "{e}");
    let e = err(mha.try_forward(&Tensor::randn([2, 3, 5])));
    assert!(e.contains("MultiheadAttention") && e.contains("[2, 3, 5]"), "{e}");
    let bn = BatchNorm1dConfig::new(3).init::<B>();
    let e = err(bn.try_forward(&Tensor::randn([1, 3])));
    assert!(e.contains("more than 1 value per channel"), "{e}");
    let e = err(bn.try_forward(&Tensor::randn([2, 3, 2, 2])));
    assert!(e.contains("BatchNorm1d") && e.contains("[2, 3, 2, 2]"), "{e}");
    assert!(BatchNorm1dConfig::new(3).with_momentum(Some(1.5)).try_init::<B>().is_err());
    bn.eval();
    assert_eq!(bn.try_forward(&Tensor::randn([1, 3])).unwrap().dims(), &[1, 3], "one sample is fine in evaluation");
    assert!(TransformerEncoderLayerConfig::new(6, 4).try_init::<B>().is_err());
}

/// Attention dropout: active in training (the returned weights are the
/// dropped, rescaled ones, as in PyTorch), off in evaluation.
fn attention_dropout_follows_the_mode<B: Backend>() {
    let mha = MultiheadAttentionConfig::new(4, 1).with_dropout(0.5).init::<B>();
    let x = Tensor::<B>::randn([1, 64, 4]);
    let (_, w) = mha.forward_qkv(&x, &x, &x, MhaOptions::default());
    let w = w.unwrap().to_vec::<f32>();
    let zeros = w.iter().filter(|v| **v == 0.0).count();
    assert!(zeros > 64 * 64 / 4 && zeros < 64 * 64 * 3 / 4, "{zeros} of {} dropped", w.len());
    mha.eval();
    let (y1, w1) = mha.forward_qkv(&x, &x, &x, MhaOptions::default());
    let (y2, _) = mha.forward_qkv(&x, &x, &x, MhaOptions::default());
    assert_eq!(y1.to_vec::<f32>(), y2.to_vec::<f32>());
    let rows = w1.unwrap().sum_dims(&[2], false).to_vec::<f32>();
    assert!(rows.iter().all(|r| (r - 1.0).abs() < 1e-5), "{rows:?}");
}

/// BatchNorm's buffers travel in safetensors (`num_batches_tracked` as
/// int64, as PyTorch stores it) and survive a dtype change.
fn batchnorm_buffers_round_trip<B: Backend>() {
    let bn = BatchNorm1dConfig::new(2).init::<B>();
    for _ in 0..2 {
        bn.forward(&Tensor::randn([5, 2]));
    }
    let path = std::env::temp_dir().join(format!("bn-{}-{}.safetensors", std::process::id(), std::any::type_name::<B>().len()));
    bn.save_safetensors(&path).unwrap();
    let mut fresh = BatchNorm1dConfig::new(2).init::<B>();
    fresh.load_safetensors(&path).unwrap();
    std::fs::remove_file(&path).ok();
    for (n, t) in bn.state_dict() {
        assert_eq!(fresh.state_dict()[&n].to_vec_f64(), t.to_vec_f64(), "{n}");
    }
    assert_eq!(fresh.num_batches_tracked.as_ref().unwrap().dtype(), DType::I64);
    fresh.to_dtype(DType::F64);
    assert_eq!(fresh.running_mean.as_ref().unwrap().dtype(), DType::F64);
    assert_eq!(fresh.num_batches_tracked.as_ref().unwrap().to_vec::<i64>(), vec![2]);
}

autograd_testkit::for_backends!(
    gradients_match_central_differences,
    errors_name_the_op,
    attention_dropout_follows_the_mode,
    batchnorm_buffers_round_trip,
    mha_self,
    mha_cross_masks,
    mha_causal_per_head,
    mha_fully_masked,
    mha_unbatched_f32,
    sdpa_bool_mask_scale,
    sdpa_causal_f32,
    encoder_post_norm_relu_padding,
    encoder_pre_norm_gelu_causal,
    encoder_stack_eval_f32,
    batchnorm_2d,
    batchnorm_3d_cumulative
);
