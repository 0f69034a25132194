//! Optimizer behaviour beyond the golden trajectories: zero_grad modes,
//! skipped parameters, groups, state dicts and resuming, accumulation,
//! clipping errors, and the fused CPU kernel against the
//! reference backend.

use autograd_core::{Backend, DType, RefBackend};
use autograd_cpu::Cpu;
use autograd_nn::MlpConfig;
use autograd_nn::{Activation, ModuleExt, Sequential};
use autograd_optim::*;
use autograd_tensor::BackwardOptions;
use autograd_tensor::functional::{Reduction, try_cross_entropy};
use autograd_tensor::{Tensor, fork_rng};
use proptest::prelude::*;

fn model<B: Backend>(seed: u64) -> Sequential<B> {
    fork_rng(seed, || MlpConfig::new(&[5, 8, 3]).with_activation(Activation::Tanh).with_dtype(DType::F64).init::<B>())
}

fn data<B: Backend>(n: usize, seed: u64) -> (Tensor<B>, Tensor<B>) {
    fork_rng(seed, || {
        let x = Tensor::<B>::randn_dtype([n, 5], DType::F64);
        let y: Vec<i64> = (0..n as i64).map(|i| (i * 7 + seed as i64) % 3).collect();
        (x, Tensor::from_vec(y, [n]))
    })
}

fn loss<B: Backend>(m: &Sequential<B>, x: &Tensor<B>, y: &Tensor<B>) -> Tensor<B> {
    use autograd_nn::Module;
    try_cross_entropy(&m.forward(x), y, Reduction::Mean, &Default::default()).unwrap()
}

fn flat<B: Backend>(m: &Sequential<B>) -> Vec<f64> {
    m.parameters().iter().flat_map(|p| p.to_vec_f64()).collect()
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[test]
fn zero_grad_set_to_none_and_in_place() {
    let m = model::<Cpu>(1);
    let (x, y) = data::<Cpu>(6, 1);
    let opt = Sgd::new(m.parameters(), SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    loss(&m, &x, &y).backward().unwrap();
    let p0 = m.parameters()[0].clone();
    let g_before = p0.grad().unwrap();
    assert!(g_before.to_vec_f64().iter().any(|v| *v != 0.0));
    opt.zero_grad(false);
    let g_after = p0.grad().expect("zeroed in place, not dropped");
    assert!(g_after.shares_storage(&g_before), "the same gradient tensor is zeroed");
    assert!(g_after.to_vec_f64().iter().all(|v| *v == 0.0));
    opt.zero_grad(true);
    assert!(m.parameters().iter().all(|p| p.grad().is_none()));
}

#[test]
fn parameters_without_gradient_are_skipped() {
    let a = Tensor::<Cpu>::from_vec(vec![1.0f64, 2.0], [2]).requires_grad_(true);
    let b = Tensor::<Cpu>::from_vec(vec![3.0f64], [1]).requires_grad_(true);
    let mut opt = Adam::new(vec![a.clone(), b.clone()], AdamConfig { lr: 0.1, ..Default::default() }).unwrap();
    (&a * &a).sum().backward().unwrap();
    opt.step().unwrap();
    assert_eq!(b.to_vec_f64(), vec![3.0], "no gradient: untouched");
    assert_eq!(opt.param_steps(0, 1), 0);
    assert!(opt.state_buffer(0, 1, "exp_avg").is_none(), "no state is created for it");
    assert_eq!(opt.param_steps(0, 0), 1);
    // Adam's first step moves each element by lr (sign of the gradient).
    let got = a.to_vec_f64();
    assert!((got[0] - 0.9).abs() < 1e-7 && (got[1] - 1.9).abs() < 1e-7, "{got:?}");
}

#[test]
fn groups_have_their_own_hyper_parameters() {
    let a = Tensor::<Cpu>::from_vec(vec![1.0f64], [1]).requires_grad_(true);
    let b = Tensor::<Cpu>::from_vec(vec![1.0f64], [1]).requires_grad_(true);
    let mut opt = Sgd::with_groups(vec![
        ParamGroup::new(vec![a.clone()], SgdConfig { lr: 0.1, ..Default::default() }),
        ParamGroup::new(vec![b.clone()], SgdConfig { lr: 0.01, ..Default::default() }),
    ])
    .unwrap();
    (&a + &b).sum().backward().unwrap();
    opt.step().unwrap();
    assert_eq!((a.to_vec_f64()[0], b.to_vec_f64()[0]), (0.9, 0.99));
    opt.set_lr(0.5);
    assert_eq!((opt.group_lr(0), opt.group_lr(1)), (0.5, 0.5));
    // A parameter in two groups, a non-leaf and a negative lr are refused.
    assert!(
        Sgd::with_groups(vec![
            ParamGroup::new(vec![a.clone()], SgdConfig::default()),
            ParamGroup::new(vec![a.clone()], SgdConfig::default())
        ])
        .is_err()
    );
    let err = Sgd::new(vec![&a * 2.0], SgdConfig::default()).err().unwrap().to_string();
    assert!(err.contains("non-leaf") && err.contains("MulBackward0"), "{err}");
    assert!(Sgd::new(vec![a.clone()], SgdConfig { lr: -1.0, ..Default::default() }).is_err());
    assert!(Adam::new(vec![a], AdamConfig { betas: (1.0, 0.999), ..Default::default() }).is_err());
}

/// Runs `steps` steps from the model state and returns its parameters.
fn train<O: Optimizer<Cpu>>(m: &Sequential<Cpu>, opt: &mut O, steps: std::ops::Range<u64>) {
    for s in steps {
        let (x, y) = data::<Cpu>(8, 100 + s);
        opt.zero_grad(true);
        loss(m, &x, &y).backward().unwrap();
        opt.step().unwrap();
    }
}

#[test]
fn resuming_from_a_state_dict_gives_the_same_trajectory() {
    let cfg = AdamConfig { lr: 0.01, amsgrad: true, weight_decay: 0.01, ..Default::default() };
    // Uninterrupted: 10 steps.
    let m_full = model::<Cpu>(3);
    let mut opt_full = Adam::new(m_full.parameters(), cfg.clone()).unwrap();
    train(&m_full, &mut opt_full, 0..10);

    // Interrupted after 4 steps: save model and optimizer, rebuild both from files, continue.
    let dir = std::env::temp_dir().join(format!("autograd_optim_resume_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m = model::<Cpu>(3);
    let mut opt = Adam::new(m.parameters(), cfg.clone()).unwrap();
    train(&m, &mut opt, 0..4);
    m.save_safetensors(dir.join("model.safetensors")).unwrap();
    opt.state_dict().save(dir.join("optim.safetensors")).unwrap();

    let mut m2 = model::<Cpu>(99); // different init, overwritten by the load
    m2.load_safetensors(dir.join("model.safetensors")).unwrap();
    let mut opt2 = Adam::new(m2.parameters(), AdamConfig::default()).unwrap();
    opt2.load_state_dict(&OptimizerState::load(dir.join("optim.safetensors")).unwrap()).unwrap();
    assert_eq!(opt2.group_lr(0), 0.01, "hyper-parameters come from the state");
    assert_eq!(opt2.param_steps(0, 0), 4);
    train(&m2, &mut opt2, 4..10);
    assert_eq!(max_diff(&flat(&m2), &flat(&m_full)), 0.0, "bit-identical to the uninterrupted run");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn state_dict_is_a_snapshot_and_bad_states_change_nothing() {
    let m = model::<Cpu>(4);
    let mut opt = Sgd::new(m.parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() }).unwrap();
    train(&m, &mut opt, 0..2);
    let sd = opt.state_dict();
    let buf_before = opt.state_buffer(0, 0, "momentum_buffer").unwrap().to_vec_f64();
    train(&m, &mut opt, 2..3);
    assert_eq!(sd.tensors["state.0.momentum_buffer"].to_vec_f64(), buf_before, "later steps don't write into the snapshot");

    // Wrong optimizer kind, wrong parameter count, a missing buffer, a wrong shape: each an Err, state unchanged.
    let now = opt.state_buffer(0, 0, "momentum_buffer").unwrap().to_vec_f64();
    let adam = Adam::new(m.parameters(), AdamConfig::default()).unwrap();
    assert!(opt.load_state_dict(&adam.state_dict()).unwrap_err().to_string().contains("Adam"));
    let fewer = Sgd::new(m.parameters()[..2].to_vec(), SgdConfig::default()).unwrap();
    assert!(opt.load_state_dict(&fewer.state_dict()).is_err());
    let mut missing = sd.clone();
    missing.tensors.remove("state.3.momentum_buffer");
    assert!(opt.load_state_dict(&missing).unwrap_err().to_string().contains("state.3.momentum_buffer"));
    let mut wrong = sd.clone();
    wrong.tensors.insert("state.0.momentum_buffer".into(), Tensor::zeros_dtype([2, 2], DType::F64));
    assert!(opt.load_state_dict(&wrong).is_err());
    assert_eq!(opt.state_buffer(0, 0, "momentum_buffer").unwrap().to_vec_f64(), now);
    assert_eq!(opt.param_steps(0, 0), 3);
    // A good one restores exactly.
    opt.load_state_dict(&sd).unwrap();
    assert_eq!(opt.state_buffer(0, 0, "momentum_buffer").unwrap().to_vec_f64(), buf_before);
    assert_eq!(opt.param_steps(0, 0), 2);
}

#[test]
fn corrupt_optimizer_file_is_an_error() {
    let dir = std::env::temp_dir().join(format!("autograd_optim_corrupt_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("m.safetensors");
    // A model file is a valid safetensors file but not an optimizer state.
    model::<Cpu>(1).save_safetensors(&p).unwrap();
    let e = OptimizerState::<Cpu>::load(&p).unwrap_err().to_string();
    assert!(e.contains("not an optimizer state"), "{e}");
    std::fs::write(&p, b"garbage").unwrap();
    assert!(OptimizerState::<Cpu>::load(&p).is_err());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn k_micro_batches_equal_one_batch() {
    let (x, y) = data::<Cpu>(12, 5);
    for k in [2usize, 3, 4] {
        // One batch of 12.
        let m1 = model::<Cpu>(6);
        let mut o1 = Sgd::new(m1.parameters(), SgdConfig { lr: 0.3, momentum: 0.9, ..Default::default() }).unwrap();
        // k micro-batches of 12 / k, accumulated.
        let m2 = model::<Cpu>(6);
        let mut o2 = Sgd::new(m2.parameters(), SgdConfig { lr: 0.3, momentum: 0.9, ..Default::default() }).unwrap();
        let mut acc = GradAccumulator::new(k).unwrap();
        let b = 12 / k;
        for _ in 0..3 {
            o1.zero_grad(true);
            loss(&m1, &x, &y).backward().unwrap();
            o1.step().unwrap();
            let mut stepped = vec![];
            for i in 0..k {
                stepped.push(acc.backward_step(&loss(&m2, &x.narrow(0, i * b, b), &y.narrow(0, i * b, b)), &mut o2).unwrap());
            }
            assert_eq!(stepped.iter().filter(|s| **s).count(), 1, "exactly one step per k micro-batches");
            assert!(*stepped.last().unwrap());
            assert!(m2.parameters().iter().all(|p| p.grad().is_none()), "zeroed after the step");
        }
        let d = max_diff(&flat(&m1), &flat(&m2));
        assert!(d <= 1e-12, "k = {k}: max |diff| {d:e}");
    }
}

#[test]
fn flush_steps_a_partial_window_with_the_mean_gradient() {
    let (x, y) = data::<Cpu>(6, 8);
    let m1 = model::<Cpu>(9);
    let mut o1 = Sgd::new(m1.parameters(), SgdConfig { lr: 0.5, ..Default::default() }).unwrap();
    loss(&m1, &x, &y).backward().unwrap();
    o1.step().unwrap();
    let m2 = model::<Cpu>(9);
    let mut o2 = Sgd::new(m2.parameters(), SgdConfig { lr: 0.5, ..Default::default() }).unwrap();
    let mut acc = GradAccumulator::new(4).unwrap();
    for i in 0..2 {
        assert!(!acc.backward_step(&loss(&m2, &x.narrow(0, 3 * i, 3), &y.narrow(0, 3 * i, 3)), &mut o2).unwrap());
    }
    assert_eq!(acc.pending(), 2);
    assert!(acc.flush(&mut o2).unwrap());
    assert!(max_diff(&flat(&m1), &flat(&m2)) <= 1e-12);
    assert!(!acc.flush(&mut o2).unwrap(), "nothing pending");
}

#[test]
fn clip_norm_handles_p_and_non_finite() {
    let w = Tensor::<Cpu>::zeros_dtype([3], DType::F64).requires_grad_(true);
    let v = Tensor::<Cpu>::zeros_dtype([1], DType::F64).requires_grad_(true);
    let set = |g: Vec<f64>, h: f64| {
        w.set_grad(Some(Tensor::from_vec(g, [3])));
        v.set_grad(Some(Tensor::from_vec(vec![h], [1])));
    };
    let ps = [w.clone(), v.clone()];
    set(vec![1.0, -2.0, 2.0], 4.0);
    assert_eq!(grad_norm(&ps, NormType::P(1.0)).unwrap(), 9.0);
    assert!((grad_norm(&ps, NormType::P(3.0)).unwrap() - (1.0f64 + 8.0 + 8.0 + 64.0).powf(1.0 / 3.0)).abs() < 1e-12);
    assert_eq!(grad_norm(&ps, NormType::Inf).unwrap(), 4.0);
    // Below the threshold: unchanged (the factor is capped at 1).
    assert_eq!(clip_grad_norm_(&ps, 100.0, NormType::P(2.0), true).unwrap().item(), 5.0);
    assert_eq!(w.grad().unwrap().to_vec_f64(), vec![1.0, -2.0, 2.0]);
    // Non-finite: an Err with error_if_nonfinite, gradients untouched.
    set(vec![1.0, f64::NAN, 2.0], 4.0);
    let e = clip_grad_norm_(&ps, 1.0, NormType::P(2.0), true).unwrap_err().to_string();
    assert!(e.contains("NaN"), "{e}");
    assert_eq!(v.grad().unwrap().to_vec_f64(), vec![4.0]);
    set(vec![1.0, f64::INFINITY, 2.0], 4.0);
    assert!(clip_grad_norm_(&ps, 1.0, NormType::Inf, true).is_err());
    assert!(grad_norm(&ps, NormType::P(0.0)).is_err());
    assert!(clip_grad_value_(&ps, -1.0).is_err());
}

#[test]
fn one_cycle_cycles_momentum_and_refuses_optimizers_without_one() {
    let w = Tensor::<Cpu>::zeros_dtype([1], DType::F64).requires_grad_(true);
    let mut sgd = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() }).unwrap();
    let mut s = Scheduler::new(&mut sgd, OneCycleLR::new(1.0, 10)).unwrap();
    assert!((sgd.group_momentum(0).unwrap() - 0.95).abs() < 1e-15);
    for _ in 0..9 {
        s.step(&mut sgd).unwrap();
    }
    assert!((sgd.group_momentum(0).unwrap() - 0.95).abs() < 1e-12);
    // PyTorch 2.15 accepts step 10 of 10 (its check is `step_num > total_steps`)
    // and anneals one point past the cycle: pct = (10 - 2) / (9 - 2).
    s.step(&mut sgd).unwrap();
    let min = 1.0 / 25.0 / 1e4;
    let want = min + (1.0 - min) / 2.0 * ((std::f64::consts::PI * 8.0 / 7.0).cos() + 1.0);
    assert!((sgd.lr() - want).abs() < 1e-15, "{} vs {want}", sgd.lr());
    let e = s.step(&mut sgd).unwrap_err().to_string();
    assert!(e.contains("tried to step 11 times") && e.contains("10"), "{e}");
    assert_eq!(s.epoch(), 10, "a refused step changes nothing");
    let mut ada = Adagrad::new(vec![w], AdagradConfig::default()).unwrap();
    assert!(Scheduler::new(&mut ada, OneCycleLR::new(1.0, 10)).is_err());
    let mut o = OneCycleLR::new(1.0, 10);
    o.cycle_momentum = false;
    assert!(Scheduler::new(&mut ada, o).is_ok());
}

#[test]
fn sequential_warmup_then_cosine() {
    let w = Tensor::<Cpu>::zeros_dtype([1], DType::F64).requires_grad_(true);
    let mut opt = Sgd::new(vec![w], SgdConfig { lr: 0.2, ..Default::default() }).unwrap();
    let seq = SequentialLR::new(
        vec![
            Box::new(LinearLR { start_factor: 0.5, end_factor: 1.0, total_iters: 2 }),
            Box::new(CosineAnnealingLR { t_max: 4, eta_min: 0.0 }),
        ],
        vec![2],
    )
    .unwrap();
    let mut s = Scheduler::new(&mut opt, seq).unwrap();
    let mut lrs = vec![opt.lr()];
    for _ in 0..6 {
        s.step(&mut opt).unwrap();
        lrs.push(opt.lr());
    }
    let want = [
        0.1,
        0.15,
        0.2,
        0.2 * (1.0 + (std::f64::consts::PI / 4.0).cos()) / 2.0,
        0.1,
        0.2 * (1.0 + (3.0 * std::f64::consts::PI / 4.0).cos()) / 2.0,
        0.0,
    ];
    assert!(max_diff(&lrs, &want) < 1e-15, "{lrs:?}");
    assert!(SequentialLR::new(vec![Box::new(StepLR { step_size: 1, gamma: 0.5 })], vec![3]).is_err());
}

/// Random f32 parameters, gradients and state through every rule: the fused
/// CPU kernel (parallel above 64K elements) against the reference backend's
/// f64 host path.
fn rules() -> impl Strategy<Value = UpdateRule> {
    let f = |lo: f64, hi: f64| lo..hi;
    prop_oneof![
        (f(1e-3, 0.5), f(0.0, 0.99), f(0.0, 0.5), any::<bool>(), f(0.0, 0.1), any::<bool>(), any::<bool>()).prop_map(
            |(lr, momentum, dampening, nesterov, weight_decay, maximize, init_buffer)| UpdateRule::Sgd {
                lr,
                momentum,
                dampening: if nesterov { 0.0 } else { dampening },
                nesterov,
                weight_decay,
                maximize,
                init_buffer
            }
        ),
        (f(1e-3, 0.1), f(0.5, 0.95), f(0.9, 0.999), f(0.0, 0.1), any::<bool>(), any::<bool>(), 1u64..50).prop_map(
            |(lr, beta1, beta2, weight_decay, decoupled_weight_decay, amsgrad, step)| UpdateRule::Adam {
                lr,
                beta1,
                beta2,
                eps: 1e-8,
                weight_decay,
                decoupled_weight_decay,
                amsgrad,
                maximize: false,
                step
            }
        ),
        (f(1e-3, 0.1), f(0.8, 0.99), f(0.0, 0.9), any::<bool>(), f(0.0, 0.1)).prop_map(|(lr, alpha, momentum, centered, weight_decay)| {
            UpdateRule::RmsProp { lr, alpha, eps: 1e-8, weight_decay, momentum, centered, maximize: false }
        }),
        (f(1e-3, 0.5), f(0.0, 0.1), 1u64..20, any::<bool>()).prop_map(|(lr, lr_decay, step, maximize)| UpdateRule::Adagrad {
            lr,
            lr_decay,
            eps: 1e-10,
            weight_decay: 0.01,
            maximize,
            step
        }),
    ]
}

fn run_rule<B: Backend>(rule: &UpdateRule, p: &[f32], g: &[f32], states: &[Vec<f32>], transposed: bool) -> (Vec<f32>, Vec<Vec<f32>>) {
    let n = p.len();
    let (r, c) = (n / 4, 4);
    let param = Tensor::<B>::from_slice(p, [r, c]).requires_grad_(true);
    // A strided parameter view exercises the copy-update-write-back path.
    let param = if transposed { Tensor::<B>::from_slice(p, [c, r]).t().requires_grad_(true) } else { param };
    let grad = Tensor::<B>::from_slice(g, param.shape().clone());
    let st: Vec<Tensor<B>> = states.iter().map(|s| Tensor::<B>::from_slice(s, param.shape().clone())).collect();
    let refs: Vec<&Tensor<B>> = st.iter().collect();
    // The rule's own numbers, on the device: the update resolves back to `rule`.
    let scalars = Tensor::<B>::from_vec(rule.scalars(), [rule.scalars().len()]);
    param.fused_update_(&grad, &refs, Some(&scalars), rule).unwrap();
    let mut counted = rule.scalars();
    counted[0] += 1.0;
    counted[1] = 0.0;
    assert_eq!(scalars.to_vec::<f64>(), counted, "the update counts its step");
    (param.contiguous().to_vec::<f32>(), st.iter().map(|t| t.to_vec::<f32>()).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn fused_cpu_kernel_matches_reference(rule in rules(), rows in prop_oneof![1usize..40, 20_000usize..40_000], seed in any::<u64>(), transposed in any::<bool>()) {
        let n = rows * 4;
        let mut rng = autograd_core::rng::Generator::new(seed);
        let mut draw = |scale: f64, positive: bool| -> Vec<f32> {
            (0..n).map(|_| { let v = rng.normal() * scale; (if positive { v.abs() } else { v }) as f32 }).collect()
        };
        let p = draw(1.0, false);
        let g = draw(0.5, false);
        let k = rule.state_names().len();
        let mut states: Vec<Vec<f32>> = Vec::new();
        for name in rule.state_names() {
            // Second moments and sums are non-negative; centered RMSprop keeps grad_avg^2 below square_avg.
            let positive = matches!(name, "exp_avg_sq" | "max_exp_avg_sq" | "square_avg" | "sum");
            states.push(draw(if positive { 1.0 } else { 0.1 }, positive));
        }
        prop_assert_eq!(states.len(), k);
        if let Some(ga) = rule.state_names().iter().position(|n| *n == "grad_avg") {
            // A variance estimate is non-negative: square_avg >= grad_avg^2. Keep it
            // away from 0 too: sqrt(square_avg - grad_avg^2) cancels catastrophically
            // in f32 there, and the comparison would measure f32 rounding.
            let m = states[ga].clone();
            for (s, m) in states[0].iter_mut().zip(m) {
                *s += 0.5 + m * m;
            }
        }
        let (pc, sc) = run_rule::<Cpu>(&rule, &p, &g, &states, transposed);
        let (pr, sr) = run_rule::<RefBackend>(&rule, &p, &g, &states, transposed);
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 2e-5 * (1.0 + y.abs()));
        prop_assert!(close(&pc, &pr), "param differs for {:?}", rule);
        for (a, b) in sc.iter().zip(&sr) {
            prop_assert!(close(a, b), "state differs for {:?}", rule);
        }
        prop_assert!(pc.iter().zip(&p).any(|(a, b)| a != b), "the parameter moved");
    }
}

#[test]
fn many_tensors_step_in_parallel_like_one_by_one() {
    // 40 tensors of 5000 elements: above the parallel threshold in total.
    let make = || -> Vec<Tensor<Cpu>> { fork_rng(11, || (0..40).map(|_| Tensor::<Cpu>::randn([50, 100]).requires_grad_(true)).collect()) };
    let (a, b) = (make(), make());
    let set_grads = |ps: &[Tensor<Cpu>]| {
        fork_rng(12, || {
            for p in ps {
                p.set_grad(Some(Tensor::randn([50, 100])));
            }
        })
    };
    let mut together = Adam::new(a.clone(), AdamConfig { lr: 0.01, ..Default::default() }).unwrap();
    let mut singles: Vec<Adam<Cpu>> =
        b.iter().map(|p| Adam::new(vec![p.clone()], AdamConfig { lr: 0.01, ..Default::default() }).unwrap()).collect();
    for _ in 0..3 {
        set_grads(&a);
        set_grads(&b);
        together.step().unwrap();
        for o in &mut singles {
            o.step().unwrap();
        }
    }
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.to_vec::<f32>(), y.to_vec::<f32>());
    }
}

#[test]
fn optimizer_updates_bump_the_version_counter() {
    let w = Tensor::<Cpu>::from_vec(vec![1.0f64, 2.0], [2]).requires_grad_(true);
    let y = (&w * &w).sum();
    let v0 = w.version();
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    y.backward_with(None, BackwardOptions { retain_graph: true, ..Default::default() }).unwrap();
    opt.step().unwrap();
    assert!(w.version() > v0);
    // The graph saved w before the update: a second backward through it is refused.
    let e = y.backward().unwrap_err().to_string();
    assert!(e.contains("modified by an inplace operation") || e.contains("version"), "{e}");
}

/// The step count and every hyper-parameter live in the parameter's device
/// scalars (PyTorch's capturable optimizers): the update counts its step
/// there, `set_lr` writes the new rate there, and eager and compiled steps
/// read the same numbers. SGD's closed form: `w -= lr * g` with `g = 2`.
#[test]
fn learning_rate_and_step_count_live_on_the_device() {
    let w = Tensor::<RefBackend>::from_vec(vec![1.0f64], [1]).requires_grad_(true);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.5, ..Default::default() }).unwrap();
    let step = |opt: &mut Sgd<RefBackend>| {
        opt.zero_grad(true);
        (&w * 2.0).sum().backward().unwrap();
        opt.step().unwrap();
    };
    step(&mut opt);
    step(&mut opt);
    opt.set_lr(0.25);
    step(&mut opt);
    assert_eq!(w.to_vec_f64(), vec![1.0 - 0.5 * 2.0 * 2.0 - 0.25 * 2.0]);
    assert_eq!(opt.param_steps(0, 0), 3);
    // A hyper-parameter that decides the state (momentum turned on after
    // state without a buffer exists) is an Err that changes nothing.
    opt.config_mut(0).momentum = 0.9;
    (&w * 2.0).sum().backward().unwrap();
    let before = w.to_vec_f64();
    assert!(opt.step().is_err());
    assert_eq!(w.to_vec_f64(), before);
    assert_eq!(opt.param_steps(0, 0), 3);
}

/// `resolve` refuses scalars it cannot read (too few, a step count that is
/// not a whole number in range) with an `Err` and leaves them as they were.
#[test]
fn scalars_that_hold_no_step_count_are_refused() {
    use autograd_core::fused_update::FusedUpdate;
    let rule = SgdConfig::default().rule(1, false);
    assert!(rule.resolve(&mut []).is_err(), "no scalars");
    assert!(rule.resolve(&mut [0.0]).is_err(), "too few");
    for bad in [-1.0, 0.5, f64::NAN, 2f64.powi(53)] {
        let mut s = rule.scalars();
        s[0] = bad;
        let before = s.clone();
        assert!(rule.resolve(&mut s).is_err(), "step {bad}");
        assert!(s.iter().zip(&before).all(|(a, b)| a == b || (a.is_nan() && b.is_nan())), "unchanged");
    }
    let mut s = rule.scalars();
    assert_eq!(rule.resolve(&mut s).unwrap(), rule);
}
