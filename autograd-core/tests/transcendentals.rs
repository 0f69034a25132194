//! The float32 `exp` and `erf` every host backend uses (branch-free so that
//! kernels vectorise) against correctly rounded values computed in float64,
//! over the whole range where the result is a normal float, subnormal
//! results and the edges included.

use autograd_core::scalar::FloatElem;

/// Units in the last place between two finite floats of one sign.
fn ulps(a: f32, b: f32) -> u32 {
    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
}

#[test]
fn exp_within_two_ulp_everywhere() {
    let mut worst = (0, 0.0f32);
    // every 97th float from -104 to 88.72: about a million points
    let (lo, hi) = ((-104.0f32).to_bits(), 88.72f32.to_bits());
    let mut check = |x: f32| {
        let (got, want) = (FloatElem::vexp(x), (x as f64).exp() as f32);
        let u = if want < f32::MIN_POSITIVE { ((got - want).abs() / 1.4e-45) as u32 } else { ulps(got, want) };
        if u > worst.0 {
            worst = (u, x);
        }
    };
    // negative floats: bits grow away from zero
    (0..lo).step_by(97).map(f32::from_bits).filter(|x| *x >= -104.0).for_each(&mut check);
    (0..hi).step_by(97).map(f32::from_bits).for_each(&mut check);
    (0..=u32::MAX)
        .step_by(1 << 20)
        .map(|b| f32::from_bits(b | 0x8000_0000))
        .filter(|x| *x < -104.0)
        .for_each(|x| assert_eq!(FloatElem::vexp(x), 0.0, "{x}"));
    assert!(worst.0 <= 2, "exp: {} ulp at {}", worst.0, worst.1);
    assert_eq!(FloatElem::vexp(88.7229f32), f32::INFINITY);
    assert_eq!(FloatElem::vexp(-0.0f32), 1.0);
}

#[test]
fn erf_within_5e7() {
    let mut worst = (0.0f64, 0.0f32);
    for i in -1_000_000..=1_000_000 {
        let x = i as f32 * 6e-6;
        let e = (FloatElem::erf(x) as f64 - libm::erf(x as f64)).abs();
        if e > worst.0 {
            worst = (e, x);
        }
    }
    assert!(worst.0 < 5e-7, "erf: {} at {}", worst.0, worst.1);
    assert_eq!(FloatElem::erf(f32::INFINITY), 1.0);
    assert_eq!(FloatElem::erf(f32::NEG_INFINITY), -1.0);
    assert!(FloatElem::erf(f32::NAN).is_nan());
}
