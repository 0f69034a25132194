//! The examples' models on the GPU backend (Mesa's lavapipe in CI): the
//! digits recipe trains to the CPU backend's numbers, models and tensors
//! move between backends through state dicts and safetensors, and a
//! training run gives every device byte back.

use autograd::prelude::*;
use autograd_testkit::backend_available;
use autograd_wgpu::Wgpu;
use examples::digits::{Recipe, load_digits, train};

/// Six epochs of the digits recipe on Wgpu: the same training losses as
/// on the CPU within f32 rounding, the same test accuracy within one
/// image of 360; the device memory the run held is all given back; the
/// model's primitives and the optimizer's updates ran on the device.
#[test]
fn digits_trains_on_wgpu_as_on_cpu() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let recipe = Recipe { epochs: 6, ..Recipe::default() };
    let cpu = train(&load_digits::<Cpu>().unwrap(), &recipe, |_, _, _| {}, |_, _| {}).unwrap();
    let mine = autograd::core::memory::Counters::leak();
    let gpu = autograd::core::memory::with_counters(mine, || {
        let data = load_digits::<Wgpu>().unwrap();
        let t = train(&data, &recipe, |_, _, _| {}, |_, _| {}).unwrap();
        assert!(mine.stats().device_bytes > 0, "the model's parameters are on the device");
        (t.epochs, t.test_accuracy)
    });
    for (e, (c, g)) in cpu.epochs.iter().zip(&gpu.0).enumerate() {
        assert!((c.train_loss - g.train_loss).abs() < 1e-4 * (1.0 + c.train_loss), "epoch {e}: {} vs {}", c.train_loss, g.train_loss);
    }
    assert!((cpu.test_accuracy - gpu.1).abs() <= 1.0 / 360.0 + 1e-12, "{} vs {}", cpu.test_accuracy, gpu.1);
    assert!(gpu.1 > 0.9, "{}", gpu.1);
    let s = mine.stats();
    assert_eq!((s.live_bytes, s.device_bytes, s.live_buffers), (0, 0, 0), "the run's buffers came back");
    // the whole step stays on the device, cross-entropy's target
    // arithmetic included (int64, no f64: WGSL has none); the count is
    // global, and this file's other tests take no host path either
    let hosted = autograd_wgpu::host_calls();
    assert!(hosted.is_empty(), "through the host: {hosted:?}");
}

/// The digits recipe under `autocast` (bf16 and f16 products, f32
/// weights) trains on Wgpu as on the CPU: every low-precision op runs on
/// the device in f32 and rounds once where the CPU's rounds, so the
/// losses agree to within the halves' rounding flips, and no primitive
/// takes the host path.
#[test]
fn digits_trains_under_autocast_on_wgpu_as_on_cpu() {
    if !backend_available::<Wgpu>() {
        return;
    }
    for dtype in [DType::BF16, DType::F16] {
        let recipe = Recipe { epochs: 2, autocast: Some(dtype), ..Recipe::default() };
        let cpu = train(&load_digits::<Cpu>().unwrap(), &recipe, |_, _, _| {}, |_, _| {}).unwrap();
        let gpu = train(&load_digits::<Wgpu>().unwrap(), &recipe, |_, _, _| {}, |_, _| {}).unwrap();
        for (e, (c, g)) in cpu.epochs.iter().zip(&gpu.epochs).enumerate() {
            assert!(
                (c.train_loss - g.train_loss).abs() < 1e-3 * (1.0 + c.train_loss),
                "{dtype:?} epoch {e}: {} vs {}",
                c.train_loss,
                g.train_loss
            );
        }
        assert!((cpu.test_accuracy - gpu.test_accuracy).abs() <= 1.0 / 360.0 + 1e-12, "{} vs {}", cpu.test_accuracy, gpu.test_accuracy);
        assert!(gpu.test_accuracy > 0.85, "{}", gpu.test_accuracy);
    }
    let hosted = autograd_wgpu::host_calls();
    assert!(hosted.is_empty(), "through the host: {hosted:?}");
}

/// A tensor copied to the device and back keeps its values and dtype; a
/// model trained on the CPU loads into the same model built on Wgpu and
/// predicts the same; a device tensor saved as safetensors loads on the CPU.
#[test]
fn tensors_and_models_move_between_backends() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let x = Tensor::<Cpu>::from_vec(vec![1.5f32, -2.0, 3.25, 0.0, 7.0, -0.5], [2, 3]).requires_grad_(true);
    let d = x.to_backend::<Wgpu>();
    assert!(d.requires_grad() && d.is_leaf());
    assert_eq!((d.dims(), d.dtype()), (x.dims(), x.dtype()));
    let back = (&d * 2.0).to_backend::<Cpu>();
    assert_eq!(back.to_vec::<f32>(), vec![3.0, -4.0, 6.5, 0.0, 14.0, -1.0]);
    let i = Tensor::<Cpu>::from_vec(vec![3i64, -1, 5], [3]).to_backend::<Wgpu>();
    assert_eq!(i.to_vec::<i64>(), vec![3, -1, 5]);

    let data = load_digits::<Cpu>().unwrap();
    let trained = train(&data, &Recipe { epochs: 1, ..Recipe::default() }, |_, _, _| {}, |_, _| {}).unwrap();
    let state = trained.model.state_dict();
    let moved: std::collections::BTreeMap<String, Tensor<Wgpu>> = state.iter().map(|(k, t)| (k.clone(), t.to_backend())).collect();
    let mut on_gpu = MlpConfig::new(&[64, 128, 10]).init::<Wgpu>();
    on_gpu.load_state_dict(&moved, LoadOptions::default()).unwrap();
    let xs = data.test.0.to_backend::<Wgpu>();
    let (a, b) = (trained.model.forward(&data.test.0).to_vec::<f32>(), on_gpu.forward(&xs).to_vec::<f32>());
    assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 1e-4 * (1.0 + p.abs())));

    let path = std::env::temp_dir().join(format!("wgpu-state-{}.safetensors", std::process::id()));
    let on_device = on_gpu.state_dict();
    let named: Vec<(&str, &Tensor<Wgpu>)> = on_device.iter().map(|(k, t)| (k.as_str(), t)).collect();
    autograd::tensor::save_safetensors(&named, &Default::default(), &path).unwrap();
    let loaded = autograd::tensor::load_safetensors::<Cpu>(&path).unwrap();
    std::fs::remove_file(&path).ok();
    for (k, t) in &state {
        assert_eq!(loaded.get(k).unwrap().to_vec::<f32>(), t.to_vec::<f32>(), "{k}");
    }
}

/// Every optimizer rule with a program runs on the device as one in-place
/// kernel and gives the CPU's f32 update (parameter, states and the step
/// count in the scalars); on bf16 and f16 buffers (updated in f32 and
/// rounded, where the CPU's generic path computes in f64) the CPU's within
/// one ulp of the dtype and f32's rounding; none takes the host path.
#[test]
fn update_rules_run_on_the_device_as_on_the_cpu() {
    use autograd::core::{HostData, Layout, Shape};
    use autograd::optim::UpdateRule;
    if !backend_available::<Wgpu>() {
        return;
    }
    let rules = [
        UpdateRule::Sgd {
            lr: 0.1,
            momentum: 0.9,
            dampening: 0.1,
            nesterov: false,
            weight_decay: 0.01,
            maximize: false,
            init_buffer: false,
        },
        UpdateRule::Sgd { lr: 0.1, momentum: 0.0, dampening: 0.0, nesterov: false, weight_decay: 0.0, maximize: true, init_buffer: false },
        UpdateRule::Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            decoupled_weight_decay: true,
            amsgrad: false,
            maximize: false,
            step: 3,
        },
        UpdateRule::Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            decoupled_weight_decay: false,
            amsgrad: true,
            maximize: false,
            step: 5,
        },
        UpdateRule::RmsProp { lr: 0.01, alpha: 0.9, eps: 1e-8, weight_decay: 0.0, momentum: 0.5, centered: true, maximize: false },
        UpdateRule::Adagrad { lr: 0.1, lr_decay: 0.01, eps: 1e-10, weight_decay: 0.1, maximize: false, step: 2 },
    ];
    let n = 1000;
    let vals = |k: f32, offset: f32, scale: f32| {
        HostData::from((0..n).map(|i| ((i as f32 + k) * 0.37).sin() * scale + offset).collect::<Vec<f32>>())
    };
    // states not negative (second moments), the first above the others'
    // squares (centered RMSprop's variance stays positive): no NaN
    let state = |k: usize| if k == 0 { vals(3.0, 2.0, 1.0) } else { vals(3.0 + k as f32, 0.3, 0.3) };
    // the gradient read through a strided view (every other element)
    let lg = Layout::new(Shape::from([n]), vec![2], 1);
    let grad = HostData::from((0..2 * n + 1).map(|i| ((i as f32) * 0.11).cos()).collect::<Vec<f32>>());
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        // halves: one ulp of the dtype, plus f32's error on O(1) operands
        // where the update cancels (a centred average near 0: 0 in f32,
        // 7e-18 in f64, which bf16 keeps)
        let tolerance = |y: f64| match dtype {
            DType::F32 => 1e-6 * (1.0 + y.abs()),
            low => autograd_testkit::conformance::low_precision_ulp(y, low) + 1e-6,
        };
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tolerance(*y));
        let (param, grad) = (vals(1.0, 0.0, 1.0).convert(dtype), grad.convert(dtype));
        for rule in &rules {
            let states: Vec<HostData> = (0..rule.state_names().len()).map(|k| state(k).convert(dtype)).collect();
            let (dev, cpu) = (step::<Wgpu>(rule, &param, &grad, &lg, &states), step::<Cpu>(rule, &param, &grad, &lg, &states));
            assert!(close(&dev.0, &cpu.0), "{rule:?} {dtype:?}: parameter");
            for (a, b) in dev.1.iter().zip(&cpu.1) {
                assert!(close(a, b), "{rule:?} {dtype:?}: state");
            }
            assert_eq!(dev.2, cpu.2, "{rule:?} {dtype:?}: scalars");
        }
    }
    assert!(!autograd_wgpu::host_calls().iter().any(|(n, _)| *n == "fused_update"), "{:?}", autograd_wgpu::host_calls());
}

/// One update of `rule` on backend `B` from the given values: the new
/// parameter, states and scalars.
fn step<B: autograd::core::Backend>(
    rule: &autograd::optim::UpdateRule,
    param: &autograd::core::HostData,
    grad: &autograd::core::HostData,
    lg: &autograd::core::Layout,
    states: &[autograd::core::HostData],
) -> (Vec<f64>, Vec<Vec<f64>>, Vec<f64>) {
    use autograd::core::{HostData, Layout, Shape};
    let scalars = HostData::from(rule.scalars());
    let (l, ls) = (Layout::contiguous(Shape::from([param.len()])), Layout::contiguous(Shape::from([scalars.len()])));
    let (mut p, g, mut sc) = (B::from_host(param.clone()), B::from_host(grad.clone()), B::from_host(scalars));
    let mut st: Vec<B::Storage> = states.iter().map(|s| B::from_host(s.clone())).collect();
    let mut refs: Vec<&mut B::Storage> = st.iter_mut().collect();
    B::fused_update(rule, &mut p, &g, lg, &mut refs, &mut sc).unwrap();
    let host = |s: &B::Storage| B::to_host(s, &l).unwrap().to_f64_vec();
    (host(&p), st.iter().map(host).collect(), B::to_host(&sc, &ls).unwrap().to_f64_vec())
}

/// A training step that asks for no value never waits for the device:
/// the optimizers read their step count and learning rate from the host's
/// copy of the scalars they wrote (before: one read-back per parameter per
/// step, each waiting for all queued work); only the loss read at the end
/// waits. Adam with AMSGrad and SGD with momentum, both on the device.
#[test]
fn a_training_step_waits_for_the_device_only_when_a_value_is_asked_for() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let (a, b) = (Linear::<Wgpu>::new(6, 16), Linear::<Wgpu>::new(16, 3));
    let mut adam = Adam::new(a.parameters(), AdamConfig { lr: 0.01, amsgrad: true, ..Default::default() }).unwrap();
    let mut sgd = Sgd::new(b.parameters(), SgdConfig { lr: 0.05, momentum: 0.9, ..Default::default() }).unwrap();
    let x = Tensor::<Wgpu>::from_vec((0..48).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(), [8, 6]);
    let y = Tensor::<Wgpu>::from_vec((0..24).map(|i| (i as f32 * 0.11).cos()).collect::<Vec<_>>(), [8, 3]);
    let before = autograd_wgpu::device_reads();
    let mut losses = Vec::new();
    for _ in 0..4 {
        adam.zero_grad(true);
        sgd.zero_grad(true);
        let loss = F::try_mse_loss(&b.forward(&a.forward(&x).relu()), &y, Reduction::Mean).unwrap();
        loss.backward().unwrap();
        adam.step().unwrap();
        sgd.step().unwrap();
        losses.push(loss);
    }
    assert_eq!(autograd_wgpu::device_reads(), before, "four steps read nothing back");
    let (first, last) = (losses[0].item(), losses[3].item());
    assert_eq!(autograd_wgpu::device_reads(), before + 2, "each value asked for is one read");
    assert!(last < first, "{first} -> {last}");
}
