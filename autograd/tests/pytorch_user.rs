//! Written the way a PyTorch user writes, from the README and rustdoc: the
//! lines that did not compile before the API issue, now compiling and
//! checked. One import for everything.

// Written as a user would; `&[x.clone()]` is how a PyTorch user passes one input.
#![allow(clippy::cloned_ref_to_slice_refs)]

use autograd::prelude::*;
use ndarray::{ArrayD, IxDyn, s};

#[derive(Module)]
struct Net<B: Backend> {
    fc1: Linear<B>,
    fc2: Linear<B>,
    drop: Dropout,
}

impl<B: Backend> Module<B> for Net<B> {
    fn try_forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let h = self.fc1.try_forward(x)?.try_relu()?;
        self.fc2.try_forward(&self.drop.try_forward(&h)?)
    }
}

fn net() -> Net<Cpu> {
    Net { fc1: Linear::new(4, 8), fc2: Linear::new(8, 2), drop: Dropout::new(0.0) }
}

#[test]
fn forward_with_question_mark() -> Result<()> {
    let model = net();
    let x = Tensor::<Cpu>::randn([3, 4]);
    let y = model.try_forward(&x)?;
    assert_eq!((y.dims(), y.dtype()), (&[3, 2][..], DType::F32));
    assert!(model.try_forward(&Tensor::randn([3, 5])).is_err());
    Ok(())
}

#[test]
fn operators_on_handles_and_scalars() {
    let x = Tensor::<Cpu>::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
    assert_eq!((&x * &x).to_vec::<f32>(), vec![1.0, 4.0, 9.0]);
    assert_eq!((2 * &x).to_vec::<f32>(), vec![2.0, 4.0, 6.0]);
    assert_eq!((&x * 2.0f32).to_vec::<f32>(), vec![2.0, 4.0, 6.0]);
    assert_eq!((1.0 - &x / 2u8).to_vec::<f32>(), vec![0.5, 0.0, -0.5]);
    assert_eq!((x.clone() + x.clone()).to_vec::<f32>(), vec![2.0, 4.0, 6.0]);
    let i = Tensor::<Cpu>::from_vec(vec![1i64, 2, 3], [3]);
    assert_eq!((&i + &i).to_vec::<i64>(), vec![2, 4, 6]);
    assert_eq!((&i + &x).dtype(), DType::F32);
}

#[test]
fn constructors_default_to_float32() {
    assert_eq!(Tensor::<Cpu>::randn([2, 2]).dtype(), DType::F32);
    assert_eq!(Tensor::<Cpu>::zeros([2]).dtype(), DType::F32);
    assert_eq!(Tensor::<Cpu>::randn_dtype([2, 2], DType::F64).dtype(), DType::F64);
    let m: Sequential<Cpu> = MlpConfig::new(&[2, 32, 1]).with_activation(Activation::Tanh).with_dtype(DType::F64).init();
    assert!(m.parameters().iter().all(|p| p.dtype() == DType::F64));
    let l: Linear<Cpu> = LinearConfig::new(3, 2).with_bias(false).init();
    assert!(l.bias.is_none());
}

#[test]
fn options_instead_of_positional_flags() -> Result<()> {
    let x = Tensor::<Cpu>::scalar(2.0f64).requires_grad_(true);
    let y = x.powf(3.0);
    let g = autograd::grad(&[y], &[x.clone()], None, GradOptions { create_graph: true, ..Default::default() })?;
    let dy = g[0].clone().expect("used");
    assert_eq!(dy.item(), 12.0);
    let g2 = autograd::grad(&[dy], &[x.clone()], None, GradOptions::default())?;
    assert_eq!(g2[0].as_ref().expect("used").item(), 12.0);

    let z = (&x * &x).sum();
    z.backward_with(None, BackwardOptions { retain_graph: true, ..Default::default() })?;
    z.backward()?;
    assert_eq!(x.grad().expect("accumulated").item(), 8.0);

    let model = net();
    let mut sd = model.state_dict();
    sd.remove("fc2.bias");
    let mut other = net();
    assert!(other.load_state_dict(&sd, LoadOptions::default()).is_err());
    let report = other.load_state_dict(&sd, LoadOptions { strict: false, ..Default::default() })?;
    assert_eq!(report.missing, ["fc2.bias"]);
    Ok(())
}

#[test]
fn adamw_is_decoupled_by_construction() -> Result<()> {
    // One step from p = 1 with gradient 0.5: AdamW shrinks p by lr * wd first,
    // then moves it by lr * m_hat / (sqrt(v_hat) + eps) = lr * 0.5 / (0.5 + eps).
    let (lr, wd, eps) = (0.1, 0.05, 1e-8);
    let p = Tensor::<Cpu>::ones_dtype([1], DType::F64).requires_grad_(true);
    let mut opt = AdamW::new(vec![p.clone()], AdamWConfig { lr, weight_decay: wd, ..Default::default() })?;
    (&p * 0.5).sum().backward()?;
    opt.step()?;
    let want = 1.0 * (1.0 - lr * wd) - lr * 0.5 / (0.5 + eps);
    assert!((p.item() - want).abs() < 1e-15, "{} vs {want}", p.item());
    // Adam with the same weight decay adds it to the gradient instead: another trajectory.
    let q = Tensor::<Cpu>::ones_dtype([1], DType::F64).requires_grad_(true);
    let mut adam = Adam::new(vec![q.clone()], AdamConfig { lr, weight_decay: wd, ..Default::default() })?;
    (&q * 0.5).sum().backward()?;
    adam.step()?;
    assert!((q.item() - p.item()).abs() > 1e-3);
    Ok(())
}

#[test]
fn indexing_and_products() {
    let x = Tensor::<Cpu>::arange(0.0, 6.0, 1.0).reshape(&[2, 3]);
    assert_eq!(x.index(idx![0]).to_vec::<f32>(), vec![0.0, 1.0, 2.0]); // x[0]
    assert_eq!(x.index(idx![.., 1]).to_vec::<f32>(), vec![1.0, 4.0]); // x[:, 1]
    let mask = x.gt_scalar(3.0);
    assert_eq!(mask.dtype(), DType::Bool);
    assert_eq!(x.index(idx![&mask]).to_vec::<f32>(), vec![4.0, 5.0]); // x[x > 3]
    assert_eq!(x.index(idx![.., TensorIndex::step(.., 2)]).dims(), &[2, 2]); // x[:, ::2]
    assert_eq!(x.mm(&x.t()).dims(), &[2, 2]);
    assert_eq!(x.unsqueeze(0).bmm(&x.t().unsqueeze(0)).dims(), &[1, 2, 2]);
}

#[test]
fn training_loop_with_one_import() -> Result<()> {
    let model = net();
    let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() })?;
    let x = Tensor::<Cpu>::randn([16, 4]);
    let target = Tensor::<Cpu>::from_vec((0..16).map(|i| i % 2).collect::<Vec<i64>>(), [16]);
    let loss0 = F::try_cross_entropy(&model.try_forward(&x)?, &target, Reduction::Mean, &Default::default())?.item();
    for _ in 0..50 {
        opt.zero_grad(true);
        let loss = F::try_cross_entropy(&model.try_forward(&x)?, &target, Reduction::Mean, &Default::default())?;
        loss.backward()?;
        opt.step()?;
    }
    let loss1 = F::try_cross_entropy(&model.try_forward(&x)?, &target, Reduction::Mean, &Default::default())?.item();
    assert!(loss1 < loss0 * 0.8, "{loss0} -> {loss1}");
    Ok(())
}

#[test]
fn ndarray_in_and_out() {
    let a = ndarray::ArrayD::from_shape_vec(vec![2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let t: Tensor<Cpu> = Tensor::from(a.clone());
    assert_eq!((&t * 2).to_ndarray::<f32>(), a.mapv(|v| v * 2.0));
}

/// Every layout ndarray produces, both ways.
#[test]
fn round_trips_standard_sliced_and_transposed_arrays() {
    let a = ArrayD::from_shape_vec(IxDyn(&[3, 4]), (0..12).map(|i| i as f64).collect()).unwrap();
    // Standard layout, offset 0: the buffer is handed over.
    let t = Tensor::<Cpu>::from(a.clone());
    assert_eq!((t.dims(), t.dtype()), (&[3, 4][..], DType::F64));
    assert_eq!(t.to_ndarray::<f64>(), a);
    // Standard layout with an offset (rows 1..): only the logical elements.
    let rows = a.clone().slice_move(s![1.., ..]).into_dyn();
    assert!(rows.is_standard_layout());
    assert_eq!(Tensor::<Cpu>::from_ndarray(rows.clone()).to_ndarray::<f64>(), rows);
    // Non-standard layouts (transposed, strided columns) are copied in logical order.
    let tr = a.clone().reversed_axes();
    assert_eq!(Tensor::<Cpu>::from_ndarray(tr.clone()).to_vec::<f64>(), tr.iter().copied().collect::<Vec<_>>());
    let cols = a.slice(s![.., ..;2]).to_owned().into_dyn();
    assert_eq!(Tensor::<Cpu>::from_ndarray(cols.clone()).to_ndarray::<f64>(), cols);
    // Integers and 0-d arrays.
    let i = ArrayD::from_shape_vec(IxDyn(&[]), vec![7i64]).unwrap();
    let ti = Tensor::<Cpu>::from_ndarray(i.clone());
    assert_eq!((ti.rank(), ti.dtype()), (0, DType::I64));
    assert_eq!(ti.to_ndarray::<i64>(), i);
    // Out of a view: a transposed tensor comes out in its logical order.
    let tt = t.t();
    assert_eq!(tt.to_ndarray::<f64>(), a.t().to_owned().into_dyn());
}

/// The README's Transformer lines, as a PyTorch user writes them.
#[test]
fn transformer_blocks_with_one_import() -> Result<()> {
    manual_seed(0);
    let x = Tensor::<Cpu>::randn([2, 5, 8]);
    // mha = nn.MultiheadAttention(8, 2, batch_first=True); mha(x, x, x, key_padding_mask=pad, need_weights=False)
    let mha = MultiheadAttentionConfig::new(8, 2).init::<Cpu>();
    let pad = Tensor::<Cpu>::from_vec(vec![0.0f32, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0], [2, 5]).gt_scalar(0.5);
    let (y, w) = mha.try_forward_qkv(&x, &x, &x, MhaOptions { key_padding_mask: Some(&pad), need_weights: false, ..Default::default() })?;
    assert_eq!((y.dims(), w.is_none()), (&[2, 5, 8][..], true));
    // F.scaled_dot_product_attention(q, k, v, is_causal=True)
    let a = F::try_scaled_dot_product_attention(&x, &x, &x, SdpaOptions { is_causal: true, ..Default::default() })?;
    assert_eq!(a.index(idx![.., 0]).to_vec::<f32>(), x.index(idx![.., 0]).to_vec::<f32>(), "the first query sees only itself");
    // nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, norm_first=True, batch_first=True), 2)
    let enc = TransformerEncoderConfig::new(TransformerEncoderLayerConfig::new(8, 2).with_norm_first(true), 2).init::<Cpu>();
    enc.eval();
    let causal = enc.try_forward_with(&x, EncoderOptions { is_causal: true, ..Default::default() })?;
    assert_eq!(causal.dims(), &[2, 5, 8]);
    // bn = nn.BatchNorm1d(8); freeze the encoder: enc.requires_grad_(False)
    let bn = BatchNorm1d::<Cpu>::new(8);
    enc.requires_grad_(false);
    let loss = bn.try_forward(&enc.try_forward(&x)?.reshape(&[10, 8]))?.powf(2.0).mean();
    loss.backward()?;
    assert!(enc.parameters().iter().all(|p| p.grad().is_none()) && bn.parameters().iter().all(|p| p.grad().is_some()));
    Ok(())
}

/// The frictions found trying the API as a PyTorch user (issue 28, item 6):
/// `ModuleExt` on a `&dyn Module<B>` parameter, `autocast` with a fallible
/// closure and one `?`, loading a state dict saved under `module.`, and
/// PyTorch's name for the square causal mask.
#[test]
fn frictions_of_a_first_day() -> Result<()> {
    fn describe<B: Backend>(m: &dyn Module<B>) -> Vec<String> {
        m.named_parameters().into_iter().map(|(n, _)| n).collect()
    }
    let model = net();
    assert_eq!(describe(&model), ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);

    let x = Tensor::<Cpu>::randn([3, 4]);
    let y = autocast(DType::BF16, || model.try_forward(&x))?;
    assert_eq!(y.dtype(), DType::BF16);
    assert!(autocast(DType::BF16, || model.try_forward(&Tensor::randn([3, 5]))).is_err(), "the closure's Err, once");

    // a state dict saved from a DDP-wrapped model: every name under `module.`
    let saved: std::collections::BTreeMap<String, Tensor<Cpu>> =
        model.state_dict().into_iter().map(|(k, v)| (format!("module.{k}"), v)).collect();
    let mut other = net();
    assert!(other.load_state_dict(&saved, LoadOptions::default()).is_err());
    other.load_state_dict(&saved, LoadOptions::default().with_prefix("module."))?;
    assert_eq!(other.forward(&x).to_vec::<f32>(), model.forward(&x).to_vec::<f32>());
    // an entry outside the prefix is unexpected (strict), reported by its full name
    let mut extra = saved.clone();
    extra.insert("step".into(), Tensor::scalar(1.0f32));
    let e = other.load_state_dict(&extra, LoadOptions::default().with_prefix("module.")).unwrap_err().to_string();
    assert!(e.contains("step"), "{e}");
    let report = other.load_state_dict(&extra, LoadOptions { strict: false, ..LoadOptions::default().with_prefix("module.") })?;
    assert_eq!(report.unexpected, ["step"]);

    let m = F::try_generate_square_subsequent_mask::<Cpu>(3, DType::F32)?;
    assert_eq!(m.to_vec::<f32>(), F::try_causal_mask::<Cpu>(3, 3, DType::F32)?.to_vec::<f32>());
    assert_eq!(m.to_vec::<f32>()[1], f32::NEG_INFINITY);
    Ok(())
}
