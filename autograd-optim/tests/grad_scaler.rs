//! `GradScaler` against PyTorch's: the scale sequence with injected inf/NaN
//! gradients (`fixtures/autocast/grad_scaler.json`, made with
//! `torch.amp.GradScaler`), skipped steps, state dicts, misuse, and f16
//! training under autocast recovering from a real overflow.

use autograd_core::DType;
use autograd_cpu::Cpu;
use autograd_optim::*;
use autograd_tensor::autocast::autocast;
use autograd_tensor::functional::{Reduction, try_mse_loss};
use autograd_tensor::{Tensor, fork_rng};

type T = Tensor<Cpu>;

fn golden() -> serde_json::Value {
    let text = std::fs::read_to_string(autograd_testkit::fixture("autocast/grad_scaler.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A Linear(3, 1) trained with SGD(0.1) and a scaler of PyTorch's settings
/// from the file, with an inf or NaN written into the weight's gradient at
/// the file's steps: the scale used, whether the step was skipped (the
/// parameters unchanged) and the scale after `update()`, step by step.
#[test]
fn scale_sequence_with_injected_overflows_matches_pytorch() {
    let g = golden();
    let config = GradScalerConfig {
        init_scale: g["init_scale"].as_f64().unwrap(),
        growth_factor: g["growth_factor"].as_f64().unwrap(),
        backoff_factor: g["backoff_factor"].as_f64().unwrap(),
        growth_interval: g["growth_interval"].as_u64().unwrap(),
    };
    let (w, b) = fork_rng(1, || (T::randn([1, 3]).requires_grad_(true), T::randn([1]).requires_grad_(true)));
    let mut opt = Sgd::new(vec![w.clone(), b.clone()], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    let mut scaler = config.init().unwrap();
    let xs = fork_rng(2, || T::randn([12, 4, 3]));
    for step in g["steps"].as_array().unwrap() {
        let i = step["step"].as_u64().unwrap() as usize;
        opt.zero_grad(true);
        let before = (w.to_vec_f64(), b.to_vec_f64());
        let x = xs.select(0, i as isize);
        let loss = autograd_tensor::functional::try_linear(&x, &w, Some(&b)).unwrap().powf(2.0).mean();
        scaler.scale(&loss).unwrap().backward().unwrap();
        match step["injected"].as_str() {
            Some("inf") => w.grad().unwrap().narrow(1, 0, 1).fill_(f64::INFINITY),
            Some("nan") => w.grad().unwrap().narrow(1, 0, 1).fill_(f64::NAN),
            _ => {}
        }
        assert_eq!(scaler.get_scale(), step["scale_used"].as_f64().unwrap(), "step {i}: scale used");
        let stepped = scaler.step(&mut opt).unwrap();
        scaler.update().unwrap();
        let unchanged = before == (w.to_vec_f64(), b.to_vec_f64());
        assert_eq!(!stepped, step["skipped"].as_bool().unwrap(), "step {i}: skipped");
        assert_eq!(unchanged, step["skipped"].as_bool().unwrap(), "step {i}: parameters untouched exactly when skipped");
        assert_eq!(scaler.get_scale(), step["scale_after"].as_f64().unwrap(), "step {i}: scale after update");
    }
}

/// The state dict carries the scale and the growth count: a scaler resumed
/// from it continues the same sequence as the one that kept running.
#[test]
fn state_dict_resumes_the_sequence() {
    let config = GradScalerConfig { growth_interval: 3, ..GradScalerConfig::new() };
    let w = T::from_vec(vec![1.0f32, -2.0], [2]).requires_grad_(true);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.01, ..Default::default() }).unwrap();
    let mut a = config.init().unwrap();
    let run = |s: &mut GradScaler, opt: &mut Sgd<Cpu>, inf: bool| {
        opt.zero_grad(true);
        s.scale(&w.square().sum()).unwrap().backward().unwrap();
        if inf {
            w.grad().unwrap().fill_(f64::INFINITY);
        }
        s.step(opt).unwrap();
        s.update().unwrap();
        s.get_scale()
    };
    for inf in [false, true, false] {
        run(&mut a, &mut opt, inf);
    }
    let saved = a.state_dict();
    assert_eq!(saved.growth_tracker, 1);
    let pairs = saved.to_pairs();
    let restored = GradScalerState::from_pairs(|k| pairs.iter().find(|(n, _)| *n == k).map(|p| p.1)).unwrap();
    assert_eq!(restored, saved);
    let mut b = GradScalerConfig::new().init().unwrap();
    b.load_state_dict(&restored).unwrap();
    for _ in 0..4 {
        let (sa, sb) = (run(&mut a, &mut opt, false), run(&mut b, &mut opt, false));
        assert_eq!(sa, sb);
    }
    assert_eq!(a.get_scale(), 65536.0, "backed off once, grown once after 3 clean steps");
    // a corrupt state is refused and changes nothing
    let bad = GradScalerState { scale: f64::NAN, ..saved };
    assert!(b.load_state_dict(&bad).is_err());
    assert_eq!(b.state_dict(), a.state_dict());
    assert!(GradScalerState::from_pairs(|k| if k == "_growth_tracker" { Some(-1.0) } else { Some(2.0) }).is_err());
}

#[test]
fn misuse_is_an_err() {
    let w = T::from_vec(vec![1.0f32], [1]).requires_grad_(true);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    let mut s = GradScalerConfig::new().init().unwrap();
    assert!(s.update().is_err(), "update before any step");
    s.scale(&w.sum()).unwrap().backward().unwrap();
    s.unscale_(&mut opt).unwrap();
    assert_eq!(w.grad().unwrap().to_vec_f64(), vec![1.0], "unscaled in place");
    assert!(s.unscale_(&mut opt).is_err(), "unscale_ twice");
    // clipping between unscale_ and step sees the true gradients
    clip_grad_norm_(std::slice::from_ref(&w), 0.5, NormType::P(2.0), false).unwrap();
    assert!(s.step(&mut opt).unwrap());
    assert!(s.step(&mut opt).is_err(), "step twice");
    s.update().unwrap();
    assert!((w.to_vec_f64()[0] - 0.95).abs() < 1e-6, "one step of the clipped gradient");
    for bad in [
        GradScalerConfig { growth_factor: 1.0, ..GradScalerConfig::new() },
        GradScalerConfig { backoff_factor: 1.5, ..GradScalerConfig::new() },
        GradScalerConfig { init_scale: 0.0, ..GradScalerConfig::new() },
        GradScalerConfig { growth_interval: 0, ..GradScalerConfig::new() },
    ] {
        assert!(bad.init().is_err(), "{bad:?}");
    }
    // f16 gradients (f16 parameters) are refused, as in PyTorch
    let h = T::from_vec(vec![1.0f32], [1]).to_dtype(DType::F16).requires_grad_(true);
    let mut opt16 = Sgd::new(vec![h.clone()], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    s.scale(&h.sum()).unwrap().backward().unwrap();
    assert!(s.step(&mut opt16).is_err());
}

/// f16 training under autocast with f32 master weights: at the initial
/// scale 2^16 the f16 gradients overflow (65504 is f16's largest value),
/// the step is skipped and the scale halved until they fit; training then
/// converges.
#[test]
fn f16_training_recovers_from_overflow() {
    let (x, w_true) = fork_rng(3, || (T::randn([64, 8]), T::randn([8, 1])));
    let y = x.matmul(&w_true);
    let w = T::zeros([1, 8]).requires_grad_(true);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    let mut s = GradScalerConfig::new().init().unwrap();
    let mut skipped = Vec::new();
    let mut losses = Vec::new();
    for _ in 0..200 {
        opt.zero_grad(true);
        let loss =
            autocast(DType::F16, || try_mse_loss(&autograd_tensor::functional::try_linear(&x, &w, None)?, &y, Reduction::Mean)).unwrap();
        assert_eq!(loss.dtype(), DType::F32);
        let scale = s.get_scale();
        s.scale(&loss).unwrap().backward().unwrap();
        assert_eq!(w.grad().unwrap().dtype(), DType::F32, "master weights get f32 gradients");
        skipped.push((scale, !s.step(&mut opt).unwrap()));
        s.update().unwrap();
        losses.push(loss.item());
    }
    assert!(skipped[0].1, "the first step overflows in f16 at scale 2^16");
    let first_ok = skipped.iter().position(|(_, sk)| !sk).unwrap();
    for (i, (scale, sk)) in skipped[..first_ok].iter().enumerate() {
        assert!(*sk);
        assert_eq!(*scale, 65536.0 / 2f64.powi(i as i32), "halved after every skipped step");
    }
    assert!(losses[199] < 1e-2 * losses[0], "converged after recovering: {} -> {}", losses[0], losses[199]);
}

/// The scaler kept its per-optimizer bookkeeping by the optimizer's address:
/// `unscale_`, then the optimizer moved into a `Box`, then `step` divided
/// by the scale a second time (3 became 4.58e-5). Keyed by the optimizer's
/// id it follows the move: the gradient is unscaled once, as PyTorch's.
#[test]
fn bookkeeping_follows_an_optimizer_that_moved() {
    let w = T::from_vec(vec![1.0f32], [1]).requires_grad_(true);
    let opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    let mut scaler = GradScalerConfig::new().init().unwrap();
    scaler.scale(&(&w * 3.0).sum()).unwrap().backward().unwrap();
    let mut opt = opt;
    scaler.unscale_(&mut opt).unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f32>(), vec![3.0]);
    let mut moved: Box<dyn Optimizer<Cpu>> = Box::new(opt);
    assert!(scaler.step(&mut moved).unwrap());
    assert_eq!(w.grad().unwrap().to_vec::<f32>(), vec![3.0], "unscaled once");
    assert!((w.to_vec::<f32>()[0] - 0.7).abs() < 1e-6);
    // a second unscale_ of the moved optimizer is still refused until update()
    assert!(scaler.unscale_(&mut moved).is_err());
    scaler.update().unwrap();
}
