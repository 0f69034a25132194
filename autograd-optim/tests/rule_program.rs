//! Each update rule's elementwise program (what a GPU backend runs as one
//! kernel) gives the bits of the rule's own `apply` in f64 on the
//! reference backend, for every variant of every optimizer; AMSGrad's
//! running maximum propagates NaN as `torch.maximum` does.

use autograd_core::fused_update::{FusedUpdate, run_program};
use autograd_core::{Backend, HostData, Layout, RefBackend, Shape};
use autograd_optim::UpdateRule;

fn check(rule: UpdateRule) {
    let n = 37;
    let v = |k: f64| (0..n).map(|i| ((i as f64 + k) * 0.37).sin() * 1.5).collect::<Vec<f64>>();
    let (p0, g) = (v(1.0), v(2.0));
    // the first state (a second moment, a square average) well above the
    // others' squares: centered RMSprop's variance stays positive
    let states0: Vec<Vec<f64>> =
        (0..rule.num_states()).map(|s| v(3.0 + s as f64).iter().map(|x| x.abs() + if s == 0 { 3.0 } else { 0.0 }).collect()).collect();
    let (mut p, mut states) = (p0.clone(), states0.clone());
    {
        let mut refs: Vec<&mut [f64]> = states.iter_mut().map(|s| s.as_mut_slice()).collect();
        rule.apply_f64(&mut p, &g, &mut refs);
    }
    let program = rule.program().unwrap_or_else(|| panic!("{rule:?} has a program"));
    let l = Layout::contiguous(Shape::from([n]));
    let mut dp = RefBackend::from_host(HostData::from(p0));
    let dg = RefBackend::from_host(HostData::from(g));
    let mut ds: Vec<_> = states0.into_iter().map(|s| RefBackend::from_host(HostData::from(s))).collect();
    let mut refs: Vec<_> = ds.iter_mut().collect();
    run_program::<RefBackend>(&program, &mut dp, &dg, &l, &mut refs).unwrap();
    assert_eq!(RefBackend::to_host(&dp, &l).unwrap().to_f64_vec(), p, "{rule:?}: parameter");
    for (k, (d, want)) in ds.iter().zip(&states).enumerate() {
        assert_eq!(&RefBackend::to_host(d, &l).unwrap().to_f64_vec(), want, "{rule:?}: state {k}");
    }
}

#[test]
fn every_rule_program_matches_apply() {
    for (momentum, dampening, nesterov, weight_decay, maximize, init_buffer) in [
        (0.0, 0.0, false, 0.0, false, false),
        (0.0, 0.0, false, 0.1, true, false),
        (0.9, 0.1, false, 0.0, false, false),
        (0.9, 0.0, true, 0.01, false, false),
        (0.9, 0.0, false, 0.0, false, true),
        (0.9, 0.0, true, 0.0, true, true),
    ] {
        check(UpdateRule::Sgd { lr: 0.1, momentum, dampening, nesterov, weight_decay, maximize, init_buffer });
    }
    for (weight_decay, decoupled_weight_decay, maximize, step, beta1) in
        [(0.0, false, false, 1, 0.9), (0.1, false, true, 7, 0.9), (0.1, true, false, 3, 0.3), (0.01, true, true, 100, 0.6)]
    {
        check(UpdateRule::Adam {
            lr: 1e-3,
            beta1,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
            decoupled_weight_decay,
            amsgrad: false,
            maximize,
            step,
        });
    }
    for (momentum, centered, weight_decay, maximize, alpha) in
        [(0.0, false, 0.0, false, 0.99), (0.9, false, 0.1, true, 0.99), (0.0, true, 0.0, false, 0.3), (0.5, true, 0.01, false, 0.9)]
    {
        check(UpdateRule::RmsProp { lr: 0.01, alpha, eps: 1e-8, weight_decay, momentum, centered, maximize });
    }
    for (lr_decay, weight_decay, maximize, step) in [(0.0, 0.0, false, 1), (0.01, 0.1, true, 5)] {
        check(UpdateRule::Adagrad { lr: 0.1, lr_decay, eps: 1e-10, weight_decay, maximize, step });
    }
    for (weight_decay, decoupled_weight_decay, maximize, step) in [(0.0, false, false, 1), (0.1, false, true, 4), (0.1, true, false, 9)] {
        check(amsgrad(weight_decay, decoupled_weight_decay, maximize, step));
    }
}

fn amsgrad(weight_decay: f64, decoupled_weight_decay: bool, maximize: bool, step: u64) -> UpdateRule {
    UpdateRule::Adam { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay, decoupled_weight_decay, amsgrad: true, maximize, step }
}

/// PyTorch's Adam keeps `torch.maximum(max_exp_avg_sq, exp_avg_sq)`: a NaN
/// on either side makes the maximum NaN (f64::max would keep the other
/// side and hide it), in `apply` and in the program alike.
#[test]
fn amsgrad_maximum_propagates_nan_as_torch_maximum() {
    let rule = amsgrad(0.0, false, false, 1);
    let l = Layout::contiguous(Shape::from([3]));
    // element 0: the old maximum NaN; 1: the new second moment NaN (a NaN
    // gradient); 2: finite, the old maximum larger and kept
    let (p0, g) = (vec![1.0, 2.0, 3.0], vec![0.5, f64::NAN, -0.5]);
    let states0 = [vec![0.0; 3], vec![1.0, 1.0, 1.0], vec![f64::NAN, 0.5, 4.0]];
    let (mut p, mut states) = (p0.clone(), states0.clone());
    {
        let mut refs: Vec<&mut [f64]> = states.iter_mut().map(|s| s.as_mut_slice()).collect();
        rule.apply_f64(&mut p, &g, &mut refs);
    }
    let vmax = &states[2];
    assert!(vmax[0].is_nan() && vmax[1].is_nan(), "{vmax:?}");
    assert_eq!(vmax[2], 4.0);
    assert!(p[0].is_nan() && p[1].is_nan() && p[2].is_finite(), "{p:?}");
    let program = rule.program().expect("AMSGrad has a program");
    let mut dp = RefBackend::from_host(HostData::from(p0));
    let dg = RefBackend::from_host(HostData::from(g));
    let mut ds: Vec<_> = states0.into_iter().map(|s| RefBackend::from_host(HostData::from(s))).collect();
    let mut refs: Vec<_> = ds.iter_mut().collect();
    run_program::<RefBackend>(&program, &mut dp, &dg, &l, &mut refs).unwrap();
    let same = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()));
    assert!(same(&RefBackend::to_host(&dp, &l).unwrap().to_f64_vec(), &p), "parameter");
    for (d, want) in ds.iter().zip(&states) {
        assert!(same(&RefBackend::to_host(d, &l).unwrap().to_f64_vec(), want), "state");
    }
}
