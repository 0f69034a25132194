//! Autocast's weight-cast cache: one low-precision copy of a parameter per
//! region, shared by every product that reads it and by their backward
//! passes; the same bits as casting afresh each time; remade after an
//! in-place update; counted apart from activations until the graph that
//! saved it is freed.

use autograd_core::memory::{self, Counters, with_counters};
use autograd_core::{DType, Result};
use autograd_cpu::Cpu;
use autograd_nn::{LinearConfig, Module, ModuleExt, ReLU, Sequential};
use autograd_tensor::autocast::{AutocastGuard, autocast, cache_stats};
use autograd_tensor::functional::{Reduction, try_linear, try_mse_loss};
use autograd_tensor::{Tensor, fork_rng, no_grad};

type T = Tensor<Cpu>;

/// 6 -> hidden -> hidden -> 3 with ReLUs, f32.
fn mlp(hidden: usize) -> Sequential<Cpu> {
    fork_rng(7, || {
        Sequential::new()
            .add(LinearConfig::new(6, hidden).init::<Cpu>())
            .add(ReLU)
            .add(LinearConfig::new(hidden, hidden).init::<Cpu>())
            .add(ReLU)
            .add(LinearConfig::new(hidden, 3).init::<Cpu>())
    })
}

fn bits(t: &T) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}

/// A forward that reads each parameter more than once (the middle layer
/// twice, the last weight also through `matmul`), and its backward: the
/// loss, the output and every parameter's gradient, as bits.
fn step(model: &Sequential<Cpu>, x: &T, cache: bool) -> Result<Vec<Vec<u64>>> {
    let params = model.parameters();
    for p in &params {
        p.set_grad(None);
    }
    let (w1, w2, b2, w3) = (&params[0], &params[2], &params[3], &params[4]);
    let (y, loss) = {
        let _region = AutocastGuard::with_cache(Some(DType::BF16), cache)?;
        let h = try_linear(x, w1, Some(&params[1]))?.try_relu()?;
        let h = try_linear(&h, w2, Some(b2))?.try_relu()?;
        let h = try_linear(&h, w2, Some(b2))?.try_relu()?; // the same layer again
        let y = try_linear(&h, w3, Some(&params[5]))?;
        // the last weight read again by a product of its own (a recorded cast)
        let z = y.try_matmul(w3)?.try_mean()?;
        let loss = try_mse_loss(&y, &T::zeros([x.dims()[0], 3]), Reduction::Mean)?.try_add(&z)?;
        (y, loss)
    };
    loss.backward()?;
    let mut out = vec![bits(&loss), bits(&y)];
    out.extend(params.iter().map(|p| bits(&p.grad().expect("every parameter gets a gradient"))));
    Ok(out)
}

#[test]
fn each_parameter_is_cast_once_per_region_with_the_bits_of_casting_each_time() {
    let model = mlp(16);
    let x = fork_rng(1, || T::randn([5, 6]));
    let uncached = step(&model, &x, false).unwrap();
    let before = cache_stats();
    let cached = step(&model, &x, true).unwrap();
    let after = cache_stats();
    assert_eq!(cached, uncached, "the cache changes no bit of the loss, the output or a gradient");
    // 6 parameters, 9 reads of them in low precision (w2 and b2 twice more, w3 once more)
    assert_eq!(after.misses - before.misses, 6, "one copy per parameter");
    assert_eq!(after.hits - before.hits, 3, "every other read shares it");
    assert_eq!(after.entries, 0, "the cache ends with the region");
    // with the cache off nothing is cached
    let before = cache_stats();
    step(&model, &x, false).unwrap();
    assert_eq!(cache_stats(), before);
}

#[test]
fn only_f32_leaves_that_require_grad_are_cached() {
    let x = T::ones([2, 3]);
    let frozen = T::ones([4, 3]);
    let param = T::ones([4, 3]).requires_grad_(true);
    let wide = T::ones([4, 3]).to_dtype(DType::F64).requires_grad_(true);
    let before = cache_stats();
    autocast(DType::BF16, || {
        try_linear(&x, &frozen, None)?; // a constant: not a parameter
        try_linear(&x, &param.try_mul_scalar(2.0)?, None)?; // not a leaf
        try_linear(&x.to_dtype(DType::F64), &wide, None)?; // f64 is never cast
        assert_eq!(cache_stats().misses, before.misses);
        try_linear(&x, &param, None)?;
        try_linear(&x, &param, None)?;
        Ok(())
    })
    .unwrap();
    let after = cache_stats();
    assert_eq!((after.misses - before.misses, after.hits - before.hits), (1, 1));
    // outside a region nothing is cast at all
    try_linear(&x, &param, None).unwrap();
    assert_eq!(cache_stats(), after);
}

/// PyTorch's cache would hand back the copy made before an in-place
/// update in the same region (it keys on the tensor alone); here the
/// version counter says the copy is stale and it is made again.
#[test]
fn an_in_place_update_inside_the_region_remakes_the_copy() {
    let x = fork_rng(2, || T::randn([3, 4]));
    let w = fork_rng(3, || T::randn([5, 4])).requires_grad_(true);
    let before = cache_stats();
    let (first, second) = autocast(DType::BF16, || {
        let first = try_linear(&x, &w, None)?;
        no_grad(|| w.try_add_(&T::full([5, 4], 0.5)))?;
        let second = try_linear(&x, &w, None)?;
        Ok((first, second))
    })
    .unwrap();
    assert_eq!(cache_stats().misses - before.misses, 2, "a second copy after the update");
    let fresh = autocast(DType::BF16, || try_linear(&x, &w, None)).unwrap();
    assert_eq!(bits(&second), bits(&fresh), "the updated weight's values");
    assert_ne!(bits(&first), bits(&second));
}

/// The copies' bytes are counted as `cast_cache_bytes` and left out of the
/// activation peak from before they are allocated; the weights' copies stay
/// alive after the region while the graph keeps them for backward, and are
/// freed with it.
#[test]
fn copies_are_counted_apart_from_activations_and_freed_with_the_graph() {
    let mine = Counters::leak();
    with_counters(mine, || {
        let model = mlp(512);
        let x = fork_rng(4, || T::randn([8, 6]));
        let copies: usize = model.parameters().iter().map(|p| p.numel() * 2).sum();
        let weights: usize = model.parameters().iter().filter(|p| p.rank() == 2).map(|p| p.numel() * 2).sum();
        // forward's activation peak with the cache off (each copy made and
        // dropped inside its product, counted like any temporary) and on
        let forward = |cache: bool| -> Result<(T, usize)> {
            memory::reset_peak();
            let net_before = memory::peak_net_bytes();
            let _region = AutocastGuard::with_cache(Some(DType::BF16), cache)?;
            let y = model.try_forward(&x)?;
            if cache {
                assert_eq!(mine.stats().cast_cache_bytes, copies, "one bf16 copy of each parameter");
            }
            let loss = try_mse_loss(&y, &T::zeros([8, 3]), Reduction::Mean)?;
            Ok((loss, memory::peak_net_bytes() - net_before))
        };
        let (loss, off) = forward(false).unwrap();
        drop(loss);
        let (loss, on) = forward(true).unwrap();
        // the middle weight's copy (512 KiB) is the largest temporary of
        // the uncached forward; cached, it is not an activation
        let middle = 512 * 512 * 2;
        assert!(on + middle <= off, "forward's activation peak: {on} B cached, {off} B uncached");
        assert_eq!(cache_stats().entries, 0);
        // backward reads a weight's copy for its input's gradient: the data
        // fed to the first layer needs none, nor do the biases
        let first = 512 * 6 * 2;
        assert_eq!(mine.stats().cast_cache_bytes, weights - first, "the graph keeps the copies its backward reads");
        loss.backward().unwrap();
        drop(loss);
        assert_eq!(mine.stats().cast_cache_bytes, 0, "freed with the graph");
        for p in model.parameters() {
            p.set_grad(None);
        }
        drop((model, x));
        assert_eq!(mine.stats().live_bytes, 0);
    });
}

/// A region that outlives its parameters (a loop of models built and
/// dropped inside one region) keeps a bounded cache: entries of dropped
/// parameters are purged as new ones come in.
#[test]
fn entries_of_dropped_parameters_do_not_pile_up() {
    let x = T::ones([2, 3]);
    autocast(DType::BF16, || {
        for _ in 0..300 {
            let w = T::ones([4, 3]).requires_grad_(true);
            try_linear(&x, &w, None)?;
        }
        let held = cache_stats().entries;
        assert!((1..=64).contains(&held), "{held} entries held after 300 parameters came and went");
        Ok(())
    })
    .unwrap();
}
