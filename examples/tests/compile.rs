//! Compiled and eager runs of the same steps give the same losses and
//! parameters (trace-then-compile). Elementwise fusion does not reorder
//! floating-point operations, so the runs are bit-identical; digits too
//! (its test says why the captured cross-entropy agrees exactly).

use autograd::checkpoint::CheckpointedSequential;
use autograd::jit::{Traced, compile};
use autograd::prelude::*;
use examples::compiled::*;
use examples::digits::{Recipe, load_digits};
use examples::greeks::{Market, by_autograd};

#[test]
fn delivery_time_mlp_300_steps_bit_identical() {
    let eager = bazarghar_eager::<Cpu>(300).unwrap();
    let compiled = bazarghar_compiled::<Cpu>(300).unwrap();
    assert_eq!(eager.losses, compiled.losses);
    assert_eq!(eager.params, compiled.params);
    assert!(eager.losses[299] < eager.losses[0]);
    assert!(compiled.programs[0].contains("fused"), "{}", compiled.programs[0]);
}

#[test]
fn digits_with_dropout_30_epochs_matches_eager() {
    let recipe = Recipe::default();
    let eager = digits_eager(&load_digits::<Cpu>().unwrap(), &recipe).unwrap();
    let compiled = digits_compiled(&load_digits::<Traced<Cpu>>().unwrap(), &recipe).unwrap();
    assert_eq!(eager.losses.len(), 30 * 45);
    // The captured cross-entropy computes its mean's coefficients on the
    // device in f32 (-1/N, and the sum over N of weight 1) where eager
    // computes them in f64 and rounds once: for these unweighted batches
    // both are the correctly rounded f32 values, so the runs agree exactly.
    assert_eq!(eager.losses, compiled.losses);
    assert_eq!(eager.params, compiled.params);
    // Full batches and the last, shorter one: two programs, each drawing dropout's mask.
    assert_eq!(compiled.programs.len(), 2);
    assert!(compiled.programs.iter().all(|p| p.contains("random Uniform")));
    assert!(eager.losses.last().unwrap() < &0.2, "it learned: {:?}", eager.losses.last());
}

#[test]
fn greeks_compiled_equal_eager_at_every_market() {
    let mut step = compile(|m: &[Tensor<Traced<Cpu>>]| greeks_step(m));
    for (i, s) in [90.0, 100.0, 105.0, 110.0, 120.0].into_iter().enumerate() {
        let m = Market { s, k: 105.0, r: 0.05 + 0.01 * i as f64, sigma: 0.2, t: 1.0 };
        let got: Vec<f64> = step.run(&market_inputs::<Traced<Cpu>>(m)).unwrap().iter().map(|t| t.item()).collect();
        let want = by_autograd::<Cpu>(m).unwrap();
        let want: Vec<f64> = want.named().iter().map(|(_, v)| *v).collect();
        assert_eq!(got, want, "market {i}");
    }
    assert_eq!(step.counts().replayed, 3, "the second-order graph is replayed, not rebuilt");
}

#[test]
fn checkpointed_mlp_matches_eager_and_recomputes_in_the_program() {
    fn run<B: Backend>(steps: usize, mut step: impl FnMut(&[Tensor<B>]) -> Result<Vec<Tensor<B>>>) -> Vec<f64> {
        (0..steps)
            .map(|i| {
                let x = Tensor::<B>::from_vec((0..64 * 8).map(|k| ((k * 7 + i) % 13) as f64 / 6.0 - 1.0).collect::<Vec<_>>(), [64, 8]);
                let y = Tensor::<B>::from_vec((0..64).map(|k| ((k + i) % 5) as f64 / 2.0 - 1.0).collect::<Vec<_>>(), [64, 1]);
                step(&[x, y]).unwrap()[0].item()
            })
            .collect()
    }
    let eager_model = checkpointed_model::<Cpu>(5);
    let mut eager_opt = Adam::new(eager_model.parameters(), AdamConfig { lr: 1e-2, ..Default::default() }).unwrap();
    let eager = run::<Cpu>(12, |b| Ok(vec![checkpointed_step(&eager_model, &mut eager_opt, &b[0], &b[1])?]));

    let model: CheckpointedSequential<Traced<Cpu>> = checkpointed_model(5);
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-2, ..Default::default() }).unwrap();
    let mut step = compile(|b: &[Tensor<Traced<Cpu>>]| Ok(vec![checkpointed_step(&model, &mut opt, &b[0], &b[1])?]));
    let compiled = run::<Traced<Cpu>>(12, |b| step.run(b));
    assert_eq!(compiled, eager);
    let pe: Vec<Vec<f64>> = eager_model.parameters().iter().map(|p| p.to_vec_f64()).collect();
    let pc: Vec<Vec<f64>> = model.parameters().iter().map(|p| p.to_vec_f64()).collect();
    assert_eq!(pc, pe);
    // Each segment's forward is recorded twice (forward, and recomputed in
    // backward): the recomputed activations are in the program, while the
    // recomputed products, whose values no backward formula reads (a linear
    // layer's backward needs its input, saved at the segment boundary), are
    // dead code and removed.
    let p = step.programs().next().unwrap();
    let program = p.to_string();
    assert_eq!(program.matches("Tanh").count(), 6, "{program}");
    assert_eq!(program.matches("addmm").count(), 4, "{program}");
    assert!(p.report().dead_ops >= 3, "{:?}", p.report());
}
