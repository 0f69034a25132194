//! Checkpointing gives the gradients of the plain run (f64, every policy),
//! on the model-level cases of the autograd suite (MLP, multi-task heads,
//! dropout), plus nesting, retain_graph and the determinism check
//! ([`checkpoint_suite!`](crate::checkpoint_suite)).

use autograd_checkpoint::*;
use autograd_core::{Backend, DType};
use autograd_nn::LinearConfig;
use autograd_nn::{Dropout, Module, ModuleExt, ModuleFields, ReLU, Tanh};
use autograd_tensor::BackwardOptions;
use autograd_tensor::{Tensor, fork_rng};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `n` x (Linear(width, width) + act [+ Dropout]), f64, seeded.
fn blocks<B: Backend>(n: usize, width: usize, dropout: Option<f64>, seed: u64) -> Vec<SharedLayer<B>> {
    fork_rng(seed, || {
        let mut v: Vec<SharedLayer<B>> = Vec::new();
        for i in 0..n {
            v.push(Arc::new(LinearConfig::new(width, width).with_dtype(DType::F64).init()));
            if i % 2 == 0 {
                v.push(Arc::new(Tanh));
            } else {
                v.push(Arc::new(ReLU));
            }
            if let Some(p) = dropout {
                v.push(Arc::new(Dropout::new(p)));
            }
        }
        v
    })
}

/// The parameters of `layers`.
pub fn params<B: Backend>(layers: &[SharedLayer<B>]) -> Vec<Tensor<B>> {
    layers.iter().flat_map(|l| (**l).parameters()).collect()
}

fn grads<B: Backend>(ts: &[Tensor<B>]) -> Vec<f64> {
    ts.iter().flat_map(|t| t.grad().map(|g| g.to_vec_f64()).unwrap_or_default()).collect()
}

/// Clears the gradients of `ts`.
pub fn clear<B: Backend>(ts: &[Tensor<B>]) {
    ts.iter().for_each(|t| t.set_grad(None));
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "same number of gradient entries");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

fn policies() -> Vec<(&'static str, Box<dyn CheckpointPolicy>)> {
    vec![
        ("none", Box::new(NoCheckpoint)),
        ("segments(3)", Box::new(Segments(3))),
        ("every(2)", Box::new(EveryK(2))),
        ("sqrt", Box::new(Sqrt)),
        ("budget(5)", Box::new(MemoryBudget { units: 5, layer_cost: 1 })),
        ("budget(3)", Box::new(MemoryBudget { units: 3, layer_cost: 1 })),
    ]
}

/// Loss and all gradients (parameters and input) with a policy, dropout seeded.
fn run<B: Backend>(layers: &[SharedLayer<B>], policy: &dyn CheckpointPolicy, x: &Tensor<B>, seed: u64) -> (f64, Vec<f64>) {
    let ps = params(layers);
    clear(&ps);
    x.set_grad(None);
    let loss = fork_rng(seed, || {
        let y = checkpoint_sequential_with(layers, policy, x).unwrap();
        (&y * &y).mean()
    });
    loss.backward().unwrap();
    let mut g = grads(&ps);
    g.extend(grads(std::slice::from_ref(x)));
    (loss.item(), g)
}

/// Suite test `mlp_gradients_match_for_every_policy`.
pub fn mlp_gradients_match_for_every_policy<B: Backend>() {
    for dropout in [None, Some(0.3)] {
        let layers = blocks::<B>(8, 6, dropout, 1);
        let x = fork_rng(2, || Tensor::<B>::randn_dtype([5, 6], DType::F64)).requires_grad_(true);
        let (l0, g0) = run(&layers, &NoCheckpoint, &x, 7);
        for (name, p) in policies() {
            let (l, g) = run(&layers, p.as_ref(), &x, 7);
            let d = max_diff(&g, &g0);
            assert!(d <= 1e-12, "{} {name} dropout {dropout:?}: max |grad diff| {d:e}", B::NAME);
            assert_eq!(l, l0, "{name}: same loss");
        }
    }
}

/// Suite test `parameters_get_gradients_when_the_input_does_not_require_grad`.
pub fn parameters_get_gradients_when_the_input_does_not_require_grad<B: Backend>() {
    let layers = blocks::<B>(4, 5, None, 3);
    let x = fork_rng(4, || Tensor::<B>::randn_dtype([3, 5], DType::F64));
    let ps = params(&layers);
    checkpoint_sequential(&layers, 4, &x).unwrap().sum().backward().unwrap();
    let g = grads(&ps);
    assert_eq!(g.len(), ps.iter().map(|p| p.numel()).sum::<usize>(), "every parameter has a gradient");
    clear(&ps);
    layers.iter().fold(x.clone(), |h, l| l.forward(&h)).sum().backward().unwrap();
    assert!(max_diff(&g, &grads(&ps)) <= 1e-12);
}

/// Suite test `multi_task_heads_share_a_checkpointed_encoder`.
pub fn multi_task_heads_share_a_checkpointed_encoder<B: Backend>() {
    let enc = blocks::<B>(4, 6, Some(0.2), 5);
    let (h1, h2) = fork_rng(6, || {
        (LinearConfig::new(6, 2).with_dtype(DType::F64).init::<B>(), LinearConfig::new(6, 1).with_dtype(DType::F64).init::<B>())
    });
    let x = fork_rng(8, || Tensor::<B>::randn_dtype([4, 6], DType::F64));
    let all = || {
        let mut v = params(&enc);
        v.extend(h1.params().into_iter().map(|(_, p)| p.tensor().clone()));
        v.extend(h2.params().into_iter().map(|(_, p)| p.tensor().clone()));
        v
    };
    let step = |policy: &dyn CheckpointPolicy| {
        clear(&all());
        let z = fork_rng(9, || checkpoint_sequential_with(&enc, policy, &x).unwrap());
        let o1 = h1.forward(&z);
        let l1 = (&o1 * &o1).mean();
        let l2 = h2.forward(&z).tanh().sum();
        (&l1 + &l2).backward().unwrap();
        grads(&all())
    };
    let g0 = step(&NoCheckpoint);
    for (name, p) in policies() {
        assert!(max_diff(&step(p.as_ref()), &g0) <= 1e-12, "{name}");
    }
}

/// Suite test `nested_checkpoints_and_retain_graph`.
pub fn nested_checkpoints_and_retain_graph<B: Backend>() {
    let layers = blocks::<B>(6, 4, None, 10);
    let x = fork_rng(11, || Tensor::<B>::randn_dtype([3, 4], DType::F64)).requires_grad_(true);
    let (_, g0) = run(&layers, &NoCheckpoint, &x, 0);
    // A hand-written two-level plan: checkpoints inside a checkpoint.
    let plan = Plan {
        segments: vec![
            Segment { len: 6, checkpoint: true, inner: Some(Plan::segments(6, 3)) },
            Segment { len: 6, checkpoint: false, inner: None },
        ],
    };
    assert_eq!(plan.depth(), 1);
    let ps = params(&layers);
    clear(&ps);
    x.set_grad(None);
    let y = run_plan(&layers, &plan, &x).unwrap();
    let loss = (&y * &y).mean();
    // retain_graph: a second backward recomputes again and accumulates.
    loss.backward_with(None, BackwardOptions { retain_graph: true, ..Default::default() }).unwrap();
    let mut once = grads(&ps);
    once.extend(grads(std::slice::from_ref(&x)));
    assert!(max_diff(&once, &g0) <= 1e-12, "nested: {}", max_diff(&once, &g0));
    loss.backward().unwrap();
    let mut twice = grads(&ps);
    twice.extend(grads(std::slice::from_ref(&x)));
    let doubled: Vec<f64> = g0.iter().map(|v| 2.0 * v).collect();
    assert!(max_diff(&twice, &doubled) <= 1e-12);
    // Without retain_graph the graph is freed: a third backward is refused.
    assert!(loss.backward().is_err());
}

/// Suite test `non_deterministic_functions_are_reported`.
pub fn non_deterministic_functions_are_reported<B: Backend>() {
    let w = Tensor::<B>::from_vec(vec![1.0f64, 2.0, 3.0], [3]).requires_grad_(true);
    let calls = Arc::new(AtomicUsize::new(0));
    let (w2, c2) = (w.clone(), calls.clone());
    // Saves a different number of tensors when run again.
    let y = checkpoint(
        move |i: &[Tensor<B>]| {
            let k = c2.fetch_add(1, Ordering::Relaxed);
            let mut h = &i[0] * &w2;
            if k > 0 {
                h = h.exp();
            }
            Ok(vec![h.tanh()])
        },
        &[Tensor::<B>::ones_dtype([3], DType::F64)],
    )
    .unwrap();
    let e = y[0].sum().backward().unwrap_err().to_string();
    assert!(e.contains("checkpoint") && e.contains("saved"), "{e}");

    // Same count, different shapes: the determinism check names both.
    let flip = Arc::new(AtomicUsize::new(0));
    let (w3, f3) = (w.clone(), flip.clone());
    let y = checkpoint(
        move |i: &[Tensor<B>]| {
            let first = f3.fetch_add(1, Ordering::Relaxed) == 0;
            let h = &i[0] * &w3;
            let h = if first { h } else { h.narrow(0, 0, 2) };
            Ok(vec![h.tanh().sum()])
        },
        &[Tensor::<B>::ones_dtype([3], DType::F64)],
    )
    .unwrap();
    let e = y[0].backward().unwrap_err().to_string();
    assert!(e.contains("not deterministic") && e.contains("[2]") && e.contains("[3]"), "{e}");
}

/// Suite test `modified_input_and_create_graph_are_errors`.
pub fn modified_input_and_create_graph_are_errors<B: Backend>() {
    let w = Tensor::<B>::from_vec(vec![0.5f64, 1.5], [2]).requires_grad_(true);
    let x = Tensor::<B>::from_vec(vec![1.0f64, 2.0], [2]);
    let w2 = w.clone();
    let y = checkpoint(move |i: &[Tensor<B>]| Ok(vec![(&i[0] * &w2).sin()]), std::slice::from_ref(&x)).unwrap();
    x.add_(&Tensor::scalar(1.0f64)); // the recomputation would see other values
    let e = y[0].sum().backward().unwrap_err().to_string();
    assert!(e.contains("inplace"), "{e}");

    let w2 = w.clone();
    let y = checkpoint(move |i: &[Tensor<B>]| Ok(vec![(&i[0] * &w2).sin()]), std::slice::from_ref(&x)).unwrap();
    let e = y[0].sum().backward_with(None, BackwardOptions { create_graph: true, ..Default::default() }).unwrap_err().to_string();
    assert!(e.contains("create_graph"), "{e}");
}

/// The suite as `#[test]`s for one backend.
#[macro_export]
macro_rules! checkpoint_suite {
    ($backend:ty) => {
        $crate::instantiate!(
            $backend,
            checkpointing,
            [
                mlp_gradients_match_for_every_policy,
                parameters_get_gradients_when_the_input_does_not_require_grad,
                multi_task_heads_share_a_checkpointed_encoder,
                nested_checkpoints_and_retain_graph,
                non_deterministic_functions_are_reported,
                modified_input_and_create_graph_are_errors
            ]
        );
    };
}
