//! The numbers the greeks, inverse_kinematics and forward_vs_reverse examples print.

use autograd::prelude::Cpu;
use autograd::prelude::RefBackend;
use examples::{forward_vs_reverse, greeks, kinematics};

#[test]
fn greeks_match_closed_forms() {
    let m = greeks::Market { s: 100.0, k: 105.0, r: 0.05, sigma: 0.2, t: 1.0 };
    let c = greeks::closed_form(m);
    // Known value of this textbook case.
    assert!((c.price - 8.021352235143176).abs() < 1e-12, "{}", c.price);
    for a in [greeks::by_autograd::<Cpu>(m).unwrap(), greeks::by_autograd::<RefBackend>(m).unwrap()] {
        for ((name, x), (_, y)) in a.named().into_iter().zip(c.named()) {
            assert!((x - y).abs() <= 1e-10 * (1.0 + y.abs()), "{name}: autograd {x} vs closed form {y}");
        }
    }
}

#[test]
fn arm_reaches_target() {
    let (errors, theta) = kinematics::solve::<Cpu>([1.2, 1.0], [1.0, 0.8, 0.6], [0.3, 0.3, 0.3], 0.1, 100).unwrap();
    assert!(errors[0] > 0.5, "starts away from the target: {}", errors[0]);
    assert!(errors[100] < 1e-4, "reaches it: {}", errors[100]);
    // the reached point is the target, checked independently of autograd
    let (mut a, mut x, mut y) = (0.0, 0.0, 0.0);
    for (t, l) in theta.iter().zip([1.0, 0.8, 0.6]) {
        a += t;
        x += l * f64::cos(a);
        y += l * f64::sin(a);
    }
    assert!(((x - 1.2f64).powi(2) + (y - 1.0f64).powi(2)).sqrt() < 1e-4);
}

#[test]
fn forward_and_reverse_agree() {
    let r = forward_vs_reverse::compare::<Cpu>(50).unwrap();
    assert!(r.max_diff_forward < 1e-14, "reverse vs forward: {}", r.max_diff_forward);
    assert!(r.max_diff_central < 1e-8 && r.max_diff_central > 0.0, "reverse vs central differences: {}", r.max_diff_central);
    assert_eq!(r.forward_passes, 50);
}
