//! Measured memory against each checkpointing plan's prediction (the CPU
//! backend's allocation counters). The gradient suite, written once for
//! every backend, is `autograd_testkit::checkpoint_suite!`, run by
//! `autograd-core/tests/suites.rs` and `autograd-cpu/tests/suites.rs`.

use autograd_checkpoint::*;
use autograd_cpu::Cpu;
use autograd_nn::{Linear, ReLU, Sequential};
use autograd_tensor::{Tensor, fork_rng};
use autograd_testkit::checkpointing::{clear, params};
use std::sync::Arc;

/// Held by the tests that read the process-wide counters and allocate MiB:
/// one at a time, so that neither sees the other's buffers.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Peak activation bytes of forward + backward (gradients left out).
fn measure(layers: &[SharedLayer<Cpu>], policy: &dyn CheckpointPolicy, x: &Tensor<Cpu>) -> usize {
    let ps = params(layers);
    let r = activation_peak(&ps, || checkpoint_sequential_with(layers, policy, x)?.sum().backward()).unwrap();
    assert_eq!(r.grad_bytes, ps.iter().map(|p| p.numel() * 4).sum::<usize>());
    clear(&ps);
    r.peak_bytes
}

/// Memory falls as the plans predict. The counters are process-wide and the
/// other tests in this binary allocate a few KiB at a time, against MiB here.
#[test]
fn memory_follows_the_plans() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    // 24 blocks of Linear(256, 256) + ReLU, batch 256, f32: each block keeps
    // one activation (its ReLU output, which is also the next Linear's saved input).
    let (depth, width, batch) = (24usize, 256usize, 256usize);
    let layers: Vec<SharedLayer<Cpu>> = fork_rng(1, || {
        (0..depth).map(|_| Arc::new(Sequential::new().add(Linear::<Cpu>::new(width, width)).add(ReLU)) as SharedLayer<Cpu>).collect()
    });
    let x = fork_rng(2, || Tensor::<Cpu>::randn([batch, width]));
    let unit = (batch * width * 4) as f64; // one activation
    let none = measure(&layers, &NoCheckpoint, &x) as f64;
    let seg4 = measure(&layers, &Segments(4), &x) as f64;
    let sqrt = measure(&layers, &Sqrt, &x) as f64;
    let budget_policy = MemoryBudget { units: 7, layer_cost: 1 };
    let plan = budget_policy.plan(depth).unwrap();
    let budget = measure(&layers, &budget_policy, &x) as f64;
    let units = |b: f64| b / unit;
    eprintln!(
        "peak in activations: none {:.1}, segments(4) {:.1}, sqrt {:.1}, budget(7) {:.1} (plan: peak {} units, recompute {} layers, depth {})",
        units(none),
        units(seg4),
        units(sqrt),
        units(budget),
        plan.peak_units(1.0),
        plan.recomputed_layers(),
        plan.depth()
    );
    // Measured = the plan's kept activations + a few temporaries (incoming
    // gradients, the weight gradient being computed).
    let plain = Plan::plain(depth).peak_units(1.0);
    assert!(units(none) >= plain && units(none) <= plain + 6.0, "none: {} units", units(none));
    for (name, got, policy) in [("segments(4)", seg4, Box::new(Segments(4)) as Box<dyn CheckpointPolicy>), ("sqrt", sqrt, Box::new(Sqrt))] {
        let predicted = policy.plan(depth).unwrap().peak_units(1.0);
        assert!(
            units(got) <= predicted + 6.0 && units(got) >= predicted - 1.0,
            "{name}: {} units measured, {predicted} predicted",
            units(got)
        );
    }
    assert!(sqrt < 0.5 * none && seg4 < 0.6 * none);
    assert!(budget < sqrt, "the budget plan nests to go below sqrt: {budget} vs {sqrt}");
}

/// Switching modes needs no exclusive access to the layers, so a
/// checkpointed model whose layers a pending graph still holds switches
/// (before, `eval()` panicked until the graph was freed).
#[test]
fn eval_while_a_graph_holds_the_layers() {
    use autograd_checkpoint::{CheckpointedSequential, Sqrt};
    use autograd_nn::{Dropout, Linear, Module, ModuleExt, Sequential};
    let seq = Sequential::<Cpu>::new().add(Linear::new(4, 4)).add(Dropout::new(0.5)).add(Linear::new(4, 4));
    let model = CheckpointedSequential::new(seq, Sqrt);
    let x = Tensor::<Cpu>::ones([2, 4]);
    let pending = model.forward(&x).sum(); // its graph holds the layers
    model.eval();
    let dropout_training = || model.named_modules().iter().filter(|(_, m)| m.type_name() == "Dropout").all(|(_, m)| m.is_training());
    assert!(!dropout_training() && !model.is_training());
    let a = model.forward(&x).to_vec::<f32>();
    assert_eq!(a, model.forward(&x).to_vec::<f32>()); // no dropout in eval mode
    model.train();
    assert!(dropout_training() && model.is_training());
    pending.backward().unwrap();
}

/// `Plan::tapered` covers every layer, keeps the peak it is given, runs its
/// last segment without checkpointing, and recomputes no more than any even
/// split (`Plan::every`) that fits the same peak, nor less than the
/// nested optimum of `MemoryBudget` at that peak.
#[test]
fn tapered_plans_keep_the_peak_with_the_least_recomputation() {
    for n in 1..=60usize {
        for peak in 2..=16usize {
            let p = Plan::tapered(n, peak);
            assert_eq!(p.num_layers(), n, "n {n} peak {peak}");
            assert!(!p.segments.last().unwrap().checkpoint, "n {n} peak {peak}: last segment checkpointed");
            if n > peak * (peak + 1) / 2 {
                continue; // beyond one level's reach at this peak (an even fallback)
            }
            assert!(p.peak_units(1.0) <= peak as f64, "n {n} peak {peak}: {p:?}");
            for k in 1..=n {
                let even = Plan::every(n, k);
                if even.peak_units(1.0) <= peak as f64 {
                    assert!(p.recomputed_layers() <= even.recomputed_layers(), "n {n} peak {peak} k {k}");
                }
            }
            if n <= 30 {
                let best = MemoryBudget { units: peak, layer_cost: 1 }.plan(n).unwrap();
                assert!(best.recomputed_layers() <= p.recomputed_layers(), "n {n} peak {peak}");
            }
        }
    }
}

/// A layer as a shared function of its input.
type Layer = Arc<dyn Fn(&Tensor<Cpu>) -> Tensor<Cpu> + Send + Sync>;

/// A fused layer inside a checkpointed region (an LSTM, whose node keeps
/// every step's activations; a convolution, which keeps its columns) holds
/// nothing of its own after the forward: its work goes through the
/// saved-tensor hooks like any node's, is dropped, and is recomputed in
/// backward, with the plain run's gradients.
#[test]
fn fused_layers_keep_nothing_in_a_checkpoint() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    use autograd_nn::{Conv2dConfig, Module, ModuleExt, RecurrentConfig};
    let lstm = Arc::new(fork_rng(2, || RecurrentConfig::lstm(64, 128).init::<Cpu>()));
    let conv = Arc::new(fork_rng(3, || Conv2dConfig::new(16, 16, [3, 3]).with_padding([1, 1]).init::<Cpu>()));
    let cases: Vec<(&str, Layer, Tensor<Cpu>, Tensor<Cpu>)> = vec![
        (
            "lstm",
            {
                let l = lstm.clone();
                Arc::new(move |x: &Tensor<Cpu>| l.forward(x))
            },
            fork_rng(4, || Tensor::randn([32, 16, 64])),
            lstm.parameters()[0].clone(),
        ),
        (
            "conv",
            {
                let c = conv.clone();
                Arc::new(move |x: &Tensor<Cpu>| c.forward(x))
            },
            fork_rng(5, || Tensor::randn([8, 16, 16, 16])),
            conv.weight.tensor().clone(),
        ),
    ];
    for (name, f, x, w) in cases {
        let x = x.requires_grad_(true);
        let run = |checkpointed: bool| {
            let before = autograd_core::memory::live_bytes();
            let y = if checkpointed {
                let f = f.clone();
                checkpoint(move |v: &[Tensor<Cpu>]| Ok(vec![f(&v[0])]), std::slice::from_ref(&x)).unwrap().remove(0)
            } else {
                f(&x)
            };
            let held = autograd_core::memory::live_bytes().saturating_sub(before);
            y.sum().backward().unwrap();
            let grads = (x.grad().unwrap().to_vec_f64(), w.grad().unwrap().to_vec_f64());
            x.set_grad(None);
            w.set_grad(None);
            (held, grads)
        };
        let ((plain, gp), (ck, gc)) = (run(false), run(true));
        assert!(ck * 3 < plain, "{name}: {ck} bytes held after a checkpointed forward, {plain} after a plain one");
        for (a, b) in gp.0.iter().chain(&gp.1).zip(gc.0.iter().chain(&gc.1)) {
            assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{name}: {a} vs {b}");
        }
    }
}

/// A checkpointed forward run in a region with the weight-cast cache off
/// is recomputed with it off too (PyTorch's checkpoint restores
/// `cache_enabled` with the dtype): the backward (outside any region)
/// makes no cached copy, and the gradients equal the uncheckpointed
/// region's. Before, the recomputation took the cache flag of wherever
/// backward ran and cached the weight.
#[test]
fn recomputation_keeps_the_regions_cache_flag() {
    use autograd_core::DType;
    use autograd_tensor::autocast::{AutocastGuard, cache_stats};
    use autograd_tensor::functional::try_linear;
    let w = fork_rng(3, || Tensor::<Cpu>::randn([8, 6])).requires_grad_(true);
    let x = fork_rng(4, || Tensor::<Cpu>::randn([5, 6])).requires_grad_(true);
    let grads = |checkpointed: bool| {
        w.set_grad(None);
        x.set_grad(None);
        let y = {
            let _region = AutocastGuard::with_cache(Some(DType::BF16), false).unwrap();
            let w2 = w.clone();
            let f = move |i: &[Tensor<Cpu>]| Ok(vec![try_linear(&i[0], &w2, None)?]);
            if checkpointed {
                checkpoint(f, std::slice::from_ref(&x)).unwrap().remove(0)
            } else {
                f(std::slice::from_ref(&x)).unwrap().remove(0)
            }
        };
        let before = cache_stats().misses;
        y.to_dtype(DType::F32).sum().backward().unwrap();
        let copies = cache_stats().misses - before;
        (w.grad().unwrap().to_vec::<f32>(), x.grad().unwrap().to_vec::<f32>(), copies)
    };
    let (gw, gx, copies) = grads(true);
    assert_eq!(copies, 0, "the recomputation cached a copy with the region's cache off");
    let (rw, rx, _) = grads(false);
    assert_eq!((gw, gx), (rw, rx));
}
