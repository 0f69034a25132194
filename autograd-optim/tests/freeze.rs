//! Freezing a sub-module (`requires_grad_(false)` on its parameters):
//! backward gives it no gradient, and every optimizer and clipping function
//! leaves it as it was, also with a stale gradient attached from before the
//! freeze, while the rest of the model trains.

use autograd_core::Backend;
use autograd_nn::{Linear, Module, ModuleExt, Sequential};
use autograd_optim::{
    Adagrad, Adam, AdamW, AdamWConfig, NormType, Optimizer, RmsProp, Sgd, SgdConfig, clip_grad_norm_, clip_grad_value_, grad_norm,
};
use autograd_tensor::{Tensor, fork_rng};

fn model<B: Backend>() -> Sequential<B> {
    fork_rng(3, || Sequential::new().add(Linear::<B>::new(3, 4)).add(autograd_nn::Tanh).add(Linear::<B>::new(4, 2)))
}

fn step<B: Backend>(m: &Sequential<B>, opt: &mut dyn Optimizer<B>) {
    let x = fork_rng(4, || Tensor::<B>::randn([5, 3]));
    opt.zero_grad(false); // zeros in place: a frozen parameter's stale gradient stays attached
    m.try_forward(&x).unwrap().powf(2.0).sum().backward().unwrap();
    opt.step().unwrap();
}

/// Builds an optimizer over the given parameters.
type MakeOptimizer<B> = Box<dyn Fn(Vec<Tensor<B>>) -> Box<dyn Optimizer<B>>>;

fn frozen_first_layer_stays_put<B: Backend>() {
    let makers: Vec<(&str, MakeOptimizer<B>)> = vec![
        (
            "sgd",
            Box::new(|p| Box::new(Sgd::new(p, SgdConfig { lr: 0.1, momentum: 0.9, weight_decay: 0.01, ..Default::default() }).unwrap())),
        ),
        ("adam", Box::new(|p| Box::new(Adam::new(p, Default::default()).unwrap()))),
        ("adamw", Box::new(|p| Box::new(AdamW::new(p, AdamWConfig { weight_decay: 0.1, ..Default::default() }).unwrap()))),
        ("rmsprop", Box::new(|p| Box::new(RmsProp::new(p, Default::default()).unwrap()))),
        ("adagrad", Box::new(|p| Box::new(Adagrad::new(p, Default::default()).unwrap()))),
    ];
    for (name, make) in makers {
        let m = model::<B>();
        let mut opt = make(m.parameters());
        step(&m, opt.as_mut()); // every parameter has a gradient now
        let first = &m.layers()[0];
        first.requires_grad_(false);
        let before: Vec<Vec<f64>> = first.parameters().iter().map(|p| p.to_vec_f64()).collect();
        let head_before = m.layers()[2].parameters()[0].to_vec_f64();
        for _ in 0..3 {
            step(&m, opt.as_mut());
        }
        let after: Vec<Vec<f64>> = first.parameters().iter().map(|p| p.to_vec_f64()).collect();
        assert_eq!(before, after, "{name}: the frozen layer moved");
        assert_ne!(head_before, m.layers()[2].parameters()[0].to_vec_f64(), "{name}: the trainable layer did not move");
        assert!(first.parameters().iter().all(|p| p.grad().is_some()), "{name}: the stale gradient is still attached");
    }
}

fn clipping_ignores_frozen<B: Backend>() {
    let m = model::<B>();
    let x = fork_rng(4, || Tensor::<B>::randn([5, 3]));
    m.try_forward(&x).unwrap().powf(2.0).sum().backward().unwrap();
    let params = m.parameters();
    let total = grad_norm(&params, NormType::P(2.0)).unwrap();
    m.layers()[0].requires_grad_(false);
    let frozen: Vec<Tensor<B>> = m.layers()[0].parameters();
    let stale: Vec<Vec<f64>> = frozen.iter().map(|p| p.grad().unwrap().to_vec_f64()).collect();
    let trainable = grad_norm(&m.layers()[2].parameters(), NormType::P(2.0)).unwrap();
    let seen = grad_norm(&params, NormType::P(2.0)).unwrap();
    assert!((seen - trainable).abs() < 1e-5 * trainable && seen < total, "norm {seen}, trainable {trainable}, all {total}");
    clip_grad_norm_(&params, 1e-3, NormType::P(2.0), false).unwrap();
    clip_grad_value_(&params, 1e-4).unwrap();
    let kept: Vec<Vec<f64>> = frozen.iter().map(|p| p.grad().unwrap().to_vec_f64()).collect();
    assert_eq!(stale, kept, "clipping touched a frozen parameter's gradient");
    assert!(grad_norm(&m.layers()[2].parameters(), NormType::P(2.0)).unwrap() <= 1e-3 * (1.0 + 1e-5));
    // unfreezing brings the stale gradient back into the norm
    m.layers()[0].requires_grad_(true);
    let clipped = grad_norm(&m.layers()[2].parameters(), NormType::P(2.0)).unwrap();
    let stale_norm = stale.iter().flatten().map(|v| v * v).sum::<f64>().sqrt();
    let all = grad_norm(&params, NormType::P(2.0)).unwrap();
    assert!((all - (clipped * clipped + stale_norm * stale_norm).sqrt()).abs() < 1e-5 * all, "{all}");
}

autograd_testkit::for_backends!(frozen_first_layer_stays_put, clipping_ignores_frozen);
