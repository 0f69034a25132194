//! Each update rule's elementwise program (what a GPU backend runs as one
//! kernel) gives the bits of the rule's own `apply` in f64 on the
//! reference backend, for every variant of every optimizer; AMSGrad has no
//! program and says so.

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
    let ams = UpdateRule::Adam {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        decoupled_weight_decay: false,
        amsgrad: true,
        maximize: false,
        step: 1,
    };
    assert!(ams.program().is_none());
}
