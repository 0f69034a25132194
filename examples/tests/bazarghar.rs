//! The numbers the `bazarghar` example prints, against the lesson's
//! trajectories in `data/bazarghar.json` (NumPy/PyTorch, float64).

use autograd::prelude::Cpu;
use autograd::prelude::RefBackend;
use examples::bazarghar::{run, sig};
use serde_json::Value;

fn reference() -> Value {
    serde_json::from_slice(&std::fs::read(examples::data::data_dir().join("bazarghar.json")).unwrap()).unwrap()
}

fn check<B: autograd::prelude::Backend>() {
    let j = reference();
    let r = run::<B>(300, 0.1).unwrap();
    let close = |a: f64, b: f64, atol: f64, rtol: f64| (a - b).abs() <= atol + rtol * b.abs();
    assert!(close(r.initial_loss, j["initial_loss"].as_f64().unwrap(), 1e-12, 1e-10));
    assert!(close(r.baseline, j["y_var"].as_f64().unwrap(), 1e-14, 1e-12));
    let traj = |k: &str| j[k].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect::<Vec<_>>();
    // Run A is well conditioned: the case's f64 tolerance.
    for (i, (a, b)) in r.run_a.iter().zip(traj("losses_run_A_zero_grad")).enumerate() {
        assert!(close(*a, b, 1e-12, 1e-10), "run A step {}: {a} vs {b}", i + 1);
    }
    // Run B amplifies rounding differences (see tolerance_note): atol 1e-9.
    for (k, got) in [("losses_run_B_lesson_stale_grad", &r.run_b_lesson), ("losses_run_B_no_zero_grad", &r.run_b_clean)] {
        for (i, (a, b)) in got.iter().zip(traj(k)).enumerate() {
            assert!(close(*a, b, 1e-9, 0.0), "{k} step {}: {a} vs {b}", i + 1);
        }
    }
    // The lesson's printed numbers.
    let at = |v: &[f64], s: usize| format!("{:.4}", v[s - 1]);
    assert_eq!([1, 10, 50, 300].map(|s| at(&r.run_a, s)), ["2.4065", "0.1082", "0.0153", "0.0046"]);
    assert_eq!([1, 10, 50, 300].map(|s| sig(r.run_b_lesson[s - 1], 4)), ["2.407", "1.081", "0.09604", "0.08253"]);
    assert_eq!([1, 10, 50, 300].map(|s| sig(r.run_b_clean[s - 1], 4)), ["2.407", "1.082", "0.1096", "0.09375"]);
    assert!(r.max_grad_diff < 1e-14, "autograd vs hand-written: {}", r.max_grad_diff);
    // The Sgd optimizer reproduces the manual loop bit for bit, and without zero_grad it stalls like the lesson.
    assert_eq!(r.run_sgd, r.run_a);
    assert_eq!(r.sgd_max_weight_diff, 0.0);
    assert_eq!(r.run_sgd_no_zero, r.run_b_lesson);
    assert_eq!(sig(r.run_sgd_no_zero[299], 3), "0.0825");
}

#[test]
fn bazarghar_cpu() {
    check::<Cpu>();
}

#[test]
fn bazarghar_reference() {
    check::<RefBackend>();
}
