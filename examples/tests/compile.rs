//! Compiled and eager runs of the same steps give the same losses and
//! parameters (issue: trace-then-compile). Elementwise fusion does not
//! reorder floating-point operations, so the f64 runs are bit-identical;
//! digits differs only where the captured cross-entropy reads its targets
//! on the device (f32, within 1e-6 relative).

use autograd::jit::Traced;
use autograd::prelude::*;
use examples::compiled::*;

#[test]
fn delivery_time_mlp_300_steps_bit_identical() {
    let eager = bazarghar_eager::<Cpu>(300).unwrap();
    let compiled = bazarghar_compiled::<Cpu>(300).unwrap();
    assert_eq!(eager.losses, compiled.losses);
    assert_eq!(eager.params, compiled.params);
    assert!(eager.losses[299] < eager.losses[0]);
    println!("{}", compiled.programs[0]);
}
