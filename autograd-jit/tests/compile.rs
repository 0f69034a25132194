//! `compile`: guards, the cache, what is refused while tracing, what a
//! replay repeats (random draws, the optimizer's step counts and learning
//! rates), the passes and the memory plan. Each compiled run is checked
//! against the same step run eagerly on `Cpu`.

use autograd_core::{Backend, DType, Result};
use autograd_cpu::Cpu;
use autograd_jit::{CompileOptions, Traced, WhenFull, compile, compile_with};
use autograd_nn::{Dropout, LinearConfig, Module, ModuleExt, ReLU, Sequential};
use autograd_optim::{Adam, AdamConfig, HyperParams, Optimizer, Scheduler, Sgd, SgdConfig, StepLR};
use autograd_tensor::functional::{Reduction, try_mse_loss};
use autograd_tensor::{Tensor, fork_rng, manual_seed};

type T = Tensor<Traced<Cpu>>;

/// The storage counters are process-wide: the tests of this file run one at
/// a time so that the memory test measures only itself.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn mlp<B: Backend>(dropout: f64) -> Sequential<B> {
    fork_rng(3, || {
        Sequential::new()
            .add(LinearConfig::new(4, 8).with_dtype(DType::F64).init::<B>())
            .add(ReLU)
            .add(Dropout::new(dropout))
            .add(LinearConfig::new(8, 1).with_dtype(DType::F64).init::<B>())
    })
}

fn batch<B: Backend>(n: usize, seed: u64) -> Vec<Tensor<B>> {
    let x: Vec<f64> = (0..n * 4).map(|i| ((i as u64 * 7 + seed * 13) % 11) as f64 / 5.0 - 1.0).collect();
    let y: Vec<f64> = (0..n).map(|i| ((i as u64 + seed) % 3) as f64 - 1.0).collect();
    vec![Tensor::from_vec(x, [n, 4]), Tensor::from_vec(y, [n, 1])]
}

fn step<B: Backend>(model: &Sequential<B>, opt: &mut dyn Optimizer<B>, b: &[Tensor<B>]) -> Result<Vec<Tensor<B>>> {
    opt.zero_grad(true);
    let loss = try_mse_loss(&model.try_forward(&b[0])?, &b[1], Reduction::Mean)?;
    loss.backward()?;
    opt.step()?;
    Ok(vec![loss])
}

fn params<B: Backend>(m: &Sequential<B>) -> Vec<Vec<f64>> {
    m.parameters().iter().map(|p| p.to_vec_f64()).collect()
}

/// Losses and parameters of `steps` eager Adam steps on `Cpu`, with the
/// batch sizes in `sizes` (cycled) and a learning rate halved every 3 steps.
fn eager_adam(sizes: &[usize], steps: usize, dropout: f64) -> (Vec<f64>, Vec<Vec<f64>>, u64) {
    let model = mlp::<Cpu>(dropout);
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 0.05, ..Default::default() }).unwrap();
    let mut sched = Scheduler::new(&mut opt, StepLR { step_size: 3, gamma: 0.5 }).unwrap();
    manual_seed(9);
    let mut losses = Vec::new();
    for i in 0..steps {
        let b = batch::<Cpu>(sizes[i % sizes.len()], i as u64);
        losses.push(step(&model, &mut opt, &b).unwrap()[0].item());
        sched.step(&mut opt).unwrap();
    }
    (losses, params(&model), opt.param_steps(0, 0))
}

#[test]
fn replays_match_eager_with_dropout_scheduler_and_two_shapes() {
    let _serial = serial();
    let (want_losses, want_params, want_steps) = eager_adam(&[16, 5], 14, 0.25);
    let model = mlp::<Traced<Cpu>>(0.25);
    let opt = std::cell::RefCell::new(Adam::new(model.parameters(), AdamConfig { lr: 0.05, ..Default::default() }).unwrap());
    let mut sched = Scheduler::new(&mut *opt.borrow_mut(), StepLR { step_size: 3, gamma: 0.5 }).unwrap();
    let mut compiled = compile(|b: &[T]| step(&model, &mut *opt.borrow_mut(), b));
    manual_seed(9);
    let mut losses = Vec::new();
    for i in 0..14 {
        let b = batch::<Traced<Cpu>>([16, 5][i % 2], i as u64);
        losses.push(compiled.run(&b).unwrap()[0].item());
        sched.step(&mut *opt.borrow_mut()).unwrap();
    }
    // Per shape: one eager call, one traced, five replays; same bits as eager.
    let c = compiled.counts();
    assert_eq!((c.eager, c.traced, c.replayed), (2, 2, 10));
    assert_eq!(compiled.programs().count(), 2);
    assert_eq!(losses, want_losses, "dropout masks, learning rates and bias corrections replayed");
    assert_eq!(params(&model), want_params);
    assert_eq!(opt.borrow().param_steps(0, 0), want_steps, "replays advance the optimizer's step count");
    let p = compiled.programs().next().unwrap();
    let printed = p.to_string();
    assert!(printed.contains("random Uniform"), "dropout's draw is an op of the program:\n{printed}");
    assert!(printed.contains("fused_update Adam"), "the update reads its step count and learning rate from the device: {printed}");
    assert!(printed.contains("fused"), "{printed}");
}

#[test]
fn new_dtype_is_a_new_signature() {
    let _serial = serial();
    let w = T::from_vec(vec![2.0f64], [1]).requires_grad_(true);
    let mut compiled = compile(|b: &[T]| Ok(vec![b[0].try_mul(&w.detach().try_to_dtype(b[0].dtype())?)?.try_exp()?]));
    for _ in 0..3 {
        assert_eq!(compiled.run(&[T::from_vec(vec![1.0f64, 0.0], [2])]).unwrap()[0].to_vec::<f64>(), vec![2f64.exp(), 1.0]);
        assert_eq!(compiled.run(&[T::from_vec(vec![1.0f32, 0.0], [2])]).unwrap()[0].to_vec::<f32>(), vec![2f32.exp(), 1.0]);
    }
    assert_eq!(compiled.programs().count(), 2);
    assert_eq!(compiled.counts().replayed, 2);
}

#[test]
fn a_full_cache_is_an_error_or_eager() {
    let _serial = serial();
    let f = |b: &[T]| Ok(vec![b[0].try_add(&b[0])?]);
    let mut strict = compile_with(CompileOptions::default().with_cache_size(1), f);
    strict.run(&[T::ones([2])]).unwrap();
    let err = strict.run(&[T::ones([3])]).unwrap_err().to_string();
    assert!(err.contains("new input signature") && err.contains("[3]") && err.contains("[2]"), "{err}");
    let mut lenient = compile_with(CompileOptions::default().with_cache_size(1).with_when_full(WhenFull::Eager), f);
    lenient.run(&[T::ones([2])]).unwrap();
    assert_eq!(lenient.run(&[T::ones([3])]).unwrap()[0].to_vec::<f32>(), vec![2.0; 3]);
    assert_eq!(lenient.counts().eager, 2);
}

#[test]
fn host_reads_while_tracing_are_errors_naming_the_line() {
    let _serial = serial();
    let mut compiled = compile(|b: &[T]| {
        let s = b[0].try_sum()?;
        if s.try_item()? > 0.0 { Ok(vec![s]) } else { Ok(vec![s.try_neg()?]) }
    });
    compiled.run(&[T::ones([2])]).unwrap(); // eager: allowed
    let err = compiled.run(&[T::ones([2])]).unwrap_err().to_string();
    assert!(err.contains("host read") && err.contains("tests/compile.rs"), "{err}");
    // Reading a returned output afterwards is what to do instead.
    let mut fixed = compile(|b: &[T]| Ok(vec![b[0].try_sum()?]));
    for _ in 0..3 {
        assert_eq!(fixed.run(&[T::ones([2])]).unwrap()[0].item(), 2.0);
    }
}

#[test]
fn hooks_and_schedulers_inside_the_step_are_errors() {
    let _serial = serial();
    let w = T::from_vec(vec![1.0f32, 2.0], [2]).requires_grad_(true);
    let _h = w.register_hook(|g| Some(g * 2.0));
    let mut compiled = compile(|_b: &[T]| {
        w.set_grad(None);
        (&w * &w).sum().backward()?;
        Ok(vec![w.grad().unwrap()])
    });
    compiled.run(&[]).unwrap();
    let err = compiled.run(&[]).unwrap_err().to_string();
    assert!(err.contains("tensor hook"), "{err}");

    let v = T::from_vec(vec![1.0f32], [1]).requires_grad_(true);
    let mut opt = Sgd::new(vec![v.clone()], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    let mut sched = Scheduler::new(&mut opt, StepLR { step_size: 1, gamma: 0.5 }).unwrap();
    let mut compiled = compile(|_b: &[T]| {
        sched.step(&mut opt)?;
        Ok(vec![])
    });
    compiled.run(&[]).unwrap();
    let err = compiled.run(&[]).unwrap_err().to_string();
    assert!(err.contains("scheduler"), "{err}");
}

#[test]
fn the_optimizers_first_step_is_not_traced() {
    let _serial = serial();
    let model = mlp::<Traced<Cpu>>(0.0);
    let mut opt = Adam::new(model.parameters(), AdamConfig::default()).unwrap();
    let mut compiled = compile_with(CompileOptions::default().with_warmup_calls(0), |b: &[T]| step(&model, &mut opt, b));
    let err = compiled.run(&batch(4, 0)).unwrap_err().to_string();
    assert!(err.contains("first step creates its state") && err.contains("warmup_calls"), "{err}");
}

#[test]
fn draws_from_a_forked_generator_are_refused() {
    let _serial = serial();
    let mut compiled = compile(|b: &[T]| Ok(vec![fork_rng(1, || b[0].try_add(&T::rand_dtype([2], DType::F32)))?]));
    compiled.run(&[T::ones([2])]).unwrap();
    let err = compiled.run(&[T::ones([2])]).unwrap_err().to_string();
    assert!(err.contains("forked generator"), "{err}");
}

#[test]
fn learning_rates_and_momentum_set_between_replays_reach_them() {
    let _serial = serial();
    let compiled_run = {
        let w = T::from_vec(vec![1.0f64, -1.0], [2]).requires_grad_(true);
        let opt = std::cell::RefCell::new(Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() }).unwrap());
        let mut compiled = compile(|_: &[T]| {
            let mut o = opt.borrow_mut();
            o.zero_grad(true);
            (&w * &w).sum().backward()?;
            o.step()?;
            Ok(vec![])
        });
        for i in 0..6 {
            compiled.run(&[]).unwrap();
            opt.borrow_mut().set_lr(0.1 / (i + 2) as f64);
            opt.borrow_mut().config_mut(0).momentum = 0.5;
        }
        assert_eq!(compiled.counts().replayed, 4);
        w.to_vec_f64()
    };
    let eager_run = {
        let w = Tensor::<Cpu>::from_vec(vec![1.0f64, -1.0], [2]).requires_grad_(true);
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() }).unwrap();
        for i in 0..6 {
            opt.zero_grad(true);
            (&w * &w).sum().backward().unwrap();
            opt.step().unwrap();
            opt.set_lr(0.1 / (i + 2) as f64);
            opt.config_mut(0).momentum = 0.5;
        }
        w.to_vec_f64()
    };
    assert_eq!(compiled_run, eager_run);
}

#[test]
fn ops_from_worker_threads_are_recorded() {
    let _serial = serial();
    let w = T::from_vec(vec![1.0f32, 2.0, 3.0], [3]);
    let mut compiled = compile(|b: &[T]| {
        let x = b[0].try_mul(&w)?;
        // A worker thread computes from a value made in the step: the recorder sees it.
        let (y, z) = rayon::join(|| x.try_exp(), || x.try_neg());
        Ok(vec![y?.try_add(&z?)?])
    });
    for k in 0..4 {
        let x = T::from_vec(vec![k as f32, 1.0, -1.0], [3]);
        let got = compiled.run(std::slice::from_ref(&x)).unwrap()[0].to_vec::<f32>();
        let want: Vec<f32> = [k as f32, 2.0, -3.0].iter().map(|v| v.exp() - v).collect();
        assert_eq!(got, want);
    }
    assert_eq!(compiled.counts().replayed, 2);
}

#[test]
fn passes_remove_dead_code_fold_constants_and_fuse() {
    let _serial = serial();
    let mut compiled = compile(|b: &[T]| {
        let _unused = b[0].try_exp()?.try_sum()?; // dead
        let c = T::full_dtype([3], 2.0, DType::F32).try_mul(&T::scalar(3.0f32))?; // constant
        let y = b[0].try_add(&c)?.try_relu()?.try_mul_scalar(0.5)?.try_tanh()?; // one fused group
        Ok(vec![y])
    });
    let x = T::from_vec(vec![-7.0f32, 0.0, 1.0], [3]);
    for _ in 0..3 {
        let got = compiled.run(std::slice::from_ref(&x)).unwrap()[0].to_vec::<f32>();
        let want: Vec<f32> = [-7.0f32, 0.0, 1.0].iter().map(|v| ((v + 6.0f32).max(0.0) * 0.5).tanh()).collect();
        assert_eq!(got, want);
    }
    let r = compiled.programs().next().unwrap().report().clone();
    assert_eq!(r.dead_ops, 2, "{r:?}");
    assert!(r.folded_ops >= 2, "{r:?}");
    assert_eq!((r.fused_groups, r.fused_ops), (1, 4), "{r:?}");
    assert_eq!(r.replay_ops, 1, "{r:?}");
}

#[test]
fn memory_plan_peak_is_at_most_eagers_and_replays_stay_under_it() {
    let _serial = serial();
    let model = fork_rng(4, || {
        Sequential::<Traced<Cpu>>::new()
            .add(LinearConfig::new(64, 256).init::<Traced<Cpu>>())
            .add(ReLU)
            .add(LinearConfig::new(256, 256).init::<Traced<Cpu>>())
            .add(ReLU)
            .add(LinearConfig::new(256, 1).init::<Traced<Cpu>>())
    });
    let mut opt = Adam::new(model.parameters(), AdamConfig::default()).unwrap();
    let mut compiled = compile(|b: &[T]| {
        opt.zero_grad(true);
        let loss = try_mse_loss(&model.try_forward(&b[0])?, &b[1], Reduction::Mean)?;
        loss.backward()?;
        opt.step()?;
        Ok(vec![loss])
    });
    let b = vec![T::ones([128, 64]), T::zeros([128, 1])];
    compiled.run(&b).unwrap();
    compiled.run(&b).unwrap();
    let planned = compiled.programs().next().unwrap().report().clone();
    assert!(planned.planned_peak_bytes <= planned.eager_peak_bytes, "{planned:?}");
    let base = autograd_core::memory::live_bytes();
    autograd_core::memory::reset_peak();
    compiled.run(&b).unwrap();
    let replay_peak = autograd_core::memory::peak_bytes().saturating_sub(base);
    // Other tests allocate concurrently; the replay's own peak is far below eager's.
    assert!(replay_peak <= planned.eager_peak_bytes, "replay {replay_peak} vs eager {}", planned.eager_peak_bytes);
}

#[test]
fn gradient_clipping_is_computed_on_the_device_and_traces() {
    let _serial = serial();
    use autograd_optim::{NormType, clip_grad_norm_};
    fn run<B: Backend>(mut call: impl FnMut(&[Tensor<B>]) -> Result<Vec<Tensor<B>>>) -> Vec<f64> {
        (0..6).map(|i| call(&batch::<B>(8, i)).unwrap()[0].item()).collect()
    }
    fn clipped_step<B: Backend>(model: &Sequential<B>, opt: &mut Sgd<B>, b: &[Tensor<B>]) -> Result<Vec<Tensor<B>>> {
        opt.zero_grad(true);
        try_mse_loss(&model.try_forward(&b[0])?, &b[1], Reduction::Mean)?.backward()?;
        let total = clip_grad_norm_(&model.parameters(), 0.1, NormType::P(2.0), false)?;
        opt.step()?;
        Ok(vec![total])
    }
    let eager_model = mlp::<Cpu>(0.0);
    let mut eager_opt = Sgd::new(eager_model.parameters(), SgdConfig { lr: 0.5, ..Default::default() }).unwrap();
    let want = run::<Cpu>(|b| clipped_step(&eager_model, &mut eager_opt, b));
    let model = mlp::<Traced<Cpu>>(0.0);
    let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.5, ..Default::default() }).unwrap();
    let mut compiled = compile(|b: &[T]| clipped_step(&model, &mut opt, b));
    let got = run::<Traced<Cpu>>(|b| compiled.run(b));
    assert_eq!(got, want, "the total norms before clipping");
    assert_eq!(params(&model), params(&eager_model));
    assert!(want.iter().all(|&n| n > 0.1), "every step clips: {want:?}");
    assert_eq!(compiled.counts().replayed, 4);
}

#[test]
fn a_warm_replay_allocates_storage_only_for_what_it_returns() {
    let _serial = serial();
    let model = mlp::<Traced<Cpu>>(0.0);
    let mut opt = Adam::new(model.parameters(), AdamConfig::default()).unwrap();
    let mut compiled = compile(|b: &[T]| step(&model, &mut opt, b));
    let b = batch::<Traced<Cpu>>(32, 1);
    for _ in 0..4 {
        compiled.run(&b).unwrap();
    }
    let (_, hits0, misses0) = compiled.programs().next().unwrap().pool_stats();
    for _ in 0..5 {
        compiled.run(&b).unwrap();
    }
    let (held, hits, misses) = compiled.programs().next().unwrap().pool_stats();
    // The kernels' output buffers come from the pool; at most the loss each
    // replay hands back needs a new one.
    assert!(misses - misses0 <= 5, "pool misses: {misses0} -> {misses}");
    assert!(hits - hits0 >= 5 * 10, "pool hits: {hits0} -> {hits}");
    assert!(held > 0);
}

#[test]
fn every_optimizer_replays_as_it_runs_eagerly() {
    use autograd_optim::{Adagrad, AdagradConfig, AdamW, AdamWConfig, RmsProp, RmsPropConfig};
    let _serial = serial();
    fn run<B: Backend>(
        model: &Sequential<B>,
        opt: &mut dyn Optimizer<B>,
        mut call: impl FnMut(&mut dyn Optimizer<B>, &[Tensor<B>]) -> Vec<f64>,
    ) -> Vec<f64> {
        (0..7).flat_map(|i| call(&mut *opt, &batch::<B>(8, i))).chain(params(model).concat()).collect()
    }
    fn both(
        make: &dyn Fn(Vec<Tensor<Cpu>>) -> Box<dyn Optimizer<Cpu>>,
        make_t: &dyn Fn(Vec<T>) -> Box<dyn Optimizer<Traced<Cpu>>>,
        name: &str,
    ) {
        let m = mlp::<Cpu>(0.0);
        let mut o = make(m.parameters());
        let want = run(&m, &mut *o, |o, b| vec![step(&m, o, b).unwrap()[0].item()]);
        let mt = mlp::<Traced<Cpu>>(0.0);
        let ot = std::cell::RefCell::new(make_t(mt.parameters()));
        let mut compiled = compile(|b: &[T]| step(&mt, &mut **ot.borrow_mut(), b));
        let got: Vec<f64> =
            (0..7).map(|i| compiled.run(&batch::<Traced<Cpu>>(8, i)).unwrap()[0].item()).chain(params(&mt).concat()).collect();
        assert_eq!(got, want, "{name}");
        assert_eq!(compiled.counts().replayed, 5, "{name}");
    }
    both(
        &|p| {
            Box::new(Sgd::new(p, SgdConfig { lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 1e-3, ..Default::default() }).unwrap())
        },
        &|p| {
            Box::new(Sgd::new(p, SgdConfig { lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 1e-3, ..Default::default() }).unwrap())
        },
        "SGD",
    );
    both(
        &|p| Box::new(Adam::new(p, AdamConfig { lr: 0.01, amsgrad: true, ..Default::default() }).unwrap()),
        &|p| Box::new(Adam::new(p, AdamConfig { lr: 0.01, amsgrad: true, ..Default::default() }).unwrap()),
        "Adam (amsgrad)",
    );
    both(
        &|p| Box::new(AdamW::new(p, AdamWConfig { lr: 0.01, ..Default::default() }).unwrap()),
        &|p| Box::new(AdamW::new(p, AdamWConfig { lr: 0.01, ..Default::default() }).unwrap()),
        "AdamW",
    );
    both(
        &|p| Box::new(RmsProp::new(p, RmsPropConfig { lr: 0.01, momentum: 0.5, centered: true, ..Default::default() }).unwrap()),
        &|p| Box::new(RmsProp::new(p, RmsPropConfig { lr: 0.01, momentum: 0.5, centered: true, ..Default::default() }).unwrap()),
        "RMSprop",
    );
    both(
        &|p| Box::new(Adagrad::new(p, AdagradConfig { lr: 0.05, ..Default::default() }).unwrap()),
        &|p| Box::new(Adagrad::new(p, AdagradConfig { lr: 0.05, ..Default::default() }).unwrap()),
        "Adagrad",
    );
}

#[test]
fn inputs_aliasing_each_other_or_the_models_state_are_guarded() {
    let _serial = serial();
    let w = T::from_vec(vec![1.0f32, 2.0], [2]).requires_grad_(true);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    let mut compiled = compile(|b: &[T]| {
        opt.zero_grad(true);
        b[0].try_mul(&w)?.try_add(&b[1])?.try_sum()?.backward()?;
        opt.step()?;
        Ok(vec![])
    });
    let (a, c) = (T::ones([2]), T::ones([2]));
    for _ in 0..3 {
        compiled.run(&[a.clone(), c.clone()]).unwrap();
    }
    // The same tensor twice is another signature (traced anew), not a replay of the distinct one.
    compiled.run(&[a.clone(), a.clone()]).unwrap();
    assert_eq!(compiled.programs().count(), 1);
    assert_eq!(compiled.counts().eager, 2);
    // A parameter passed as an input would be read and written by one op: refused.
    let err = compiled.run(&[w.detach(), c.clone()]).unwrap_err().to_string();
    assert!(err.contains("shares storage"), "{err}");
}

#[test]
fn compiled_steps_do_not_nest_and_a_panicking_trace_stops_recording() {
    let _serial = serial();
    let inner = std::cell::RefCell::new(compile(|b: &[T]| Ok(vec![b[0].try_exp()?])));
    let mut outer = compile(|b: &[T]| inner.borrow_mut().run(b));
    outer.run(&[T::ones([2])]).unwrap(); // eager: the inner step runs eagerly too
    let err = outer.run(&[T::ones([2])]).unwrap_err().to_string();
    assert!(err.contains("do not nest"), "{err}");

    let calls = std::cell::Cell::new(0);
    let mut panicking = compile(|b: &[T]| -> Result<Vec<T>> {
        let y = b[0].try_neg()?;
        calls.set(calls.get() + 1);
        if calls.get() == 2 {
            panic!("inside the traced call");
        }
        Ok(vec![y])
    });
    let x = T::ones([3]);
    panicking.run(std::slice::from_ref(&x)).unwrap(); // eager
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| panicking.run(std::slice::from_ref(&x)))).is_err());
    // Recording stopped: tracing works again, and what follows is not recorded into the dead trace.
    let mut fine = compile(|b: &[T]| Ok(vec![b[0].try_add(&b[0])?]));
    for _ in 0..3 {
        assert_eq!(fine.run(&[T::ones([2])]).unwrap()[0].to_vec::<f32>(), vec![2.0, 2.0]);
    }
    assert_eq!(fine.counts().replayed, 1);
}

#[test]
fn captured_cross_entropy_with_weights_ignore_index_and_smoothing_matches_eager() {
    use autograd_tensor::functional::{CrossEntropyOptions, try_cross_entropy};
    let _serial = serial();
    fn ce<B: Backend>(x: &Tensor<B>, t: &Tensor<B>, reduction: Reduction) -> Result<Tensor<B>> {
        let w = Tensor::<B>::from_vec(vec![0.5f64, 2.0, 1.0], [3]);
        let opts = CrossEntropyOptions { weight: Some(w), ignore_index: Some(1), label_smoothing: 0.1 };
        try_cross_entropy(x, t, reduction, &opts)
    }
    let x: Vec<f64> = (0..15).map(|i| ((i * 5) % 7) as f64 / 3.0 - 1.0).collect();
    let t = vec![0i64, 1, 2, 2, 0];
    for reduction in [Reduction::Mean, Reduction::Sum, Reduction::None] {
        let want = ce(&Tensor::<Cpu>::from_vec(x.clone(), [5, 3]), &Tensor::from_vec(t.clone(), [5]), reduction).unwrap().to_vec_f64();
        let mut compiled = compile(|b: &[T]| Ok(vec![ce(&b[0], &b[1], reduction)?]));
        for _ in 0..3 {
            let got = compiled.run(&[T::from_vec(x.clone(), [5, 3]), T::from_vec(t.clone(), [5])]).unwrap()[0].to_vec_f64();
            // f64: the device sums the weights in another order than the host does.
            assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-14 * b.abs().max(1.0)), "{reduction:?}: {got:?} vs {want:?}");
        }
        assert_eq!(compiled.counts().replayed, 1);
    }
}

fn mlp_f32<B: Backend>() -> Sequential<B> {
    fork_rng(3, || Sequential::new().add(LinearConfig::new(4, 16).init::<B>()).add(ReLU).add(LinearConfig::new(16, 1).init::<B>()))
}

fn batch_f32<B: Backend>(n: usize, seed: u64) -> Vec<Tensor<B>> {
    batch::<B>(n, seed).iter().map(|t| t.to_dtype(DType::F32)).collect()
}

/// Autocast composes with compile: its casts are backend ops like any
/// other, recorded and replayed, so a compiled bf16 step gives eager's
/// bits. A `GradScaler` does not: its skip decision reads the gradients'
/// finiteness on the host, which tracing refuses, naming the line.
#[test]
fn autocast_compiles_and_a_grad_scaler_is_refused_while_tracing() {
    let _serial = serial();
    use autograd_optim::GradScalerConfig;
    use autograd_tensor::autocast::autocast;
    fn amp_step<B: Backend>(model: &Sequential<B>, opt: &mut Sgd<B>, b: &[Tensor<B>]) -> Result<Vec<Tensor<B>>> {
        opt.zero_grad(true);
        let loss = autocast(DType::BF16, || try_mse_loss(&model.try_forward(&b[0])?, &b[1], Reduction::Mean))?;
        loss.backward()?;
        opt.step()?;
        Ok(vec![loss])
    }
    let eager_model = mlp_f32::<Cpu>();
    let mut eager_opt = Sgd::new(eager_model.parameters(), SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    let want: Vec<f64> = (0..6).map(|i| amp_step(&eager_model, &mut eager_opt, &batch_f32::<Cpu>(8, i)).unwrap()[0].item()).collect();
    let model = mlp_f32::<Traced<Cpu>>();
    let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    let mut compiled = compile(|b: &[T]| amp_step(&model, &mut opt, b));
    let got: Vec<f64> = (0..6).map(|i| compiled.run(&batch_f32::<Traced<Cpu>>(8, i)).unwrap()[0].item()).collect();
    assert_eq!(got, want, "compiled bf16 losses");
    assert_eq!(params(&model), params(&eager_model), "compiled bf16 steps update the f32 master weights as eager");
    assert_eq!(compiled.counts().replayed, 4);

    let model = mlp_f32::<Traced<Cpu>>();
    let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
    let mut scaler = GradScalerConfig::new().init().unwrap();
    let mut compiled = compile(|b: &[T]| {
        opt.zero_grad(true);
        let loss = autocast(DType::F16, || try_mse_loss(&model.try_forward(&b[0])?, &b[1], Reduction::Mean))?;
        scaler.scale(&loss)?.backward()?;
        scaler.step(&mut opt)?;
        scaler.update()?;
        Ok(vec![loss])
    });
    compiled.run(&batch_f32::<Traced<Cpu>>(8, 0)).unwrap(); // the first call runs eagerly
    let err = compiled.run(&batch_f32::<Traced<Cpu>>(8, 1)).unwrap_err().to_string();
    assert!(err.contains("grad_scaler.rs"), "the host read is named: {err}");
}

/// A replay updates the parameters without advancing their version
/// counters, so a parameter's bf16 copy cached by an autocast region around
/// the calls would look current after it. A compiled step drops the
/// region's cached copies when it runs: an eager forward between replays,
/// in one region that spans them all, gives the bits of the same forward
/// in a region of its own.
#[test]
fn an_autocast_region_around_compiled_steps_never_serves_a_copy_a_replay_made_stale() {
    let _serial = serial();
    use autograd_tensor::autocast::{autocast, cache_stats};
    let scenario = |one_region: bool| -> Vec<Vec<u64>> {
        let model = mlp_f32::<Traced<Cpu>>();
        let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.1, ..Default::default() }).unwrap();
        let probe = batch_f32::<Traced<Cpu>>(8, 99);
        let mut compiled = compile(|b: &[T]| {
            opt.zero_grad(true);
            let loss = try_mse_loss(&model.try_forward(&b[0])?, &b[1], Reduction::Mean)?;
            loss.backward()?;
            opt.step()?;
            Ok(vec![loss])
        });
        let mut seen = Vec::new();
        let mut calls = |seen: &mut Vec<Vec<u64>>| -> Result<()> {
            for i in 0..5 {
                let loss = autocast(DType::BF16, || compiled.run(&batch_f32::<Traced<Cpu>>(8, i)))?;
                assert_eq!(cache_stats().entries, 0, "no copy carried out of a compiled step");
                // the forward caches copies of the parameters as they are now
                let y = autocast(DType::BF16, || model.try_forward(&probe[0]))?;
                seen.push(loss[0].to_vec_f64().iter().chain(&y.to_vec_f64()).map(|v| v.to_bits()).collect());
            }
            Ok(())
        };
        if one_region {
            autocast(DType::BF16, || calls(&mut seen)).unwrap();
        } else {
            calls(&mut seen).unwrap();
        }
        assert_eq!(compiled.counts().replayed, 3);
        seen
    };
    assert_eq!(scenario(true), scenario(false));
}

// ----- guards: every fact a replay depends on, flipped between replays -----

/// Every call eager (a cache of 0 that runs eagerly when full): the
/// reference each compiled scenario is compared with, bit for bit.
fn eager_only() -> CompileOptions {
    CompileOptions::default().with_cache_size(0).with_when_full(WhenFull::Eager)
}

/// Values of tensors as bits, `None` for a missing gradient.
fn bits(ts: &[Option<T>]) -> Vec<Option<Vec<u64>>> {
    ts.iter().map(|t| t.as_ref().map(|t| t.to_vec_f64().iter().map(|v| v.to_bits()).collect())).collect()
}

/// Reproduction 1: after tracing with `x` not requiring grad, a replay with
/// an `x` that does left `x.grad` as `None`. PyTorch (eager and
/// `torch.compile`) gives `x.grad = [2, -3]` for `((x * w).sum()).backward()`
/// with `w = [2, -3]`. Fresh inputs get their gradient, and an input passed
/// again accumulates into the one it holds, as eagerly.
#[test]
fn an_input_that_requires_grad_on_a_replay_gets_its_gradient() {
    let _serial = serial();
    let scenario = |options: CompileOptions| {
        let w = T::from_vec(vec![2.0f64, -3.0], [2]).requires_grad_(true);
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.0, ..Default::default() }).unwrap();
        let mut step = compile_with(options, |b: &[T]| {
            opt.zero_grad(true);
            let loss = b[0].try_mul(&w)?.try_sum()?;
            loss.backward()?;
            opt.step()?;
            Ok(vec![loss])
        });
        let x = || T::from_vec(vec![1.0f64, 1.0], [2]);
        let mut seen = Vec::new();
        for _ in 0..3 {
            step.run(&[x()]).unwrap();
        }
        for _ in 0..4 {
            let xr = x().requires_grad_(true);
            step.run(std::slice::from_ref(&xr)).unwrap();
            seen.push(xr.grad());
        }
        let kept = x().requires_grad_(true);
        for _ in 0..4 {
            step.run(std::slice::from_ref(&kept)).unwrap(); // accumulates: 1x, 2x, 3x, 4x
            seen.push(kept.grad());
        }
        (bits(&seen), step.counts())
    };
    let (compiled, counts) = scenario(CompileOptions::default());
    let (eager, _) = scenario(eager_only());
    assert_eq!(compiled, eager);
    assert!(counts.replayed >= 3, "{counts:?}");
    let two_minus_three = Some(vec![2f64.to_bits(), (-3f64).to_bits()]);
    assert!(compiled[..4].iter().all(|g| *g == two_minus_three), "PyTorch: x.grad = [2, -3]");
    assert_eq!(compiled[7], Some(vec![8f64.to_bits(), (-12f64).to_bits()]));
}

/// Reproduction 2: `layer.requires_grad_(false)` between replays kept
/// updating the frozen layer (changes up to 1.8e-2) and the next layer
/// drifted from eager. PyTorch leaves it unchanged. Also unfrozen again.
#[test]
fn a_layer_frozen_between_replays_is_not_updated() {
    let _serial = serial();
    let scenario = |options: CompileOptions| {
        let model = mlp::<Traced<Cpu>>(0.0);
        let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 0.05, ..Default::default() }).unwrap();
        let mut run = compile_with(options, |b: &[T]| step(&model, &mut opt, b));
        let mut snapshots = Vec::new();
        for i in 0..3 {
            run.run(&batch(8, i)).unwrap();
        }
        model.layers()[0].requires_grad_(false);
        let frozen: Vec<Vec<f64>> = model.layers()[0].parameters().iter().map(|p| p.to_vec_f64()).collect();
        for i in 3..7 {
            run.run(&batch(8, i)).unwrap();
            let now: Vec<Vec<f64>> = model.layers()[0].parameters().iter().map(|p| p.to_vec_f64()).collect();
            assert_eq!(now, frozen, "the frozen layer moved at call {i}");
            snapshots.push(params(&model));
        }
        model.layers()[0].requires_grad_(true);
        for i in 7..11 {
            run.run(&batch(8, i)).unwrap();
            snapshots.push(params(&model));
        }
        (snapshots, run.counts())
    };
    let (compiled, counts) = scenario(CompileOptions::default());
    assert_eq!(compiled, scenario(eager_only()).0);
    assert!(counts.replayed >= 4 && counts.traced == 2, "{counts:?}");
}

/// The other facts a program bakes in, each flipped between replays: the
/// input's shape and strides, a module's training mode, the autocast region, the
/// gradients set to `None` outside the step, and gradients accumulated over
/// calls without `zero_grad` in the step. Each call either replays a
/// program traced for the facts in force or traces anew; every result is
/// eager's, bit for bit.
#[test]
fn flipping_what_a_replay_depends_on_retraces_instead_of_replaying_stale() {
    let _serial = serial();
    let scenario = |options: CompileOptions| {
        let model = mlp::<Traced<Cpu>>(0.5);
        let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.05, momentum: 0.9, ..Default::default() }).unwrap();
        let mut run = compile_with(options, |b: &[T]| {
            let loss = try_mse_loss(&model.try_forward(&b[0])?, &b[1], Reduction::Mean)?;
            loss.backward()?;
            opt.step()?;
            Ok(vec![loss])
        });
        manual_seed(5);
        let mut seen: Vec<Vec<f64>> = Vec::new();
        let mut record = |out: Vec<T>, model: &Sequential<Traced<Cpu>>| {
            seen.push(out[0].to_vec_f64());
            seen.extend(params(model));
            seen.extend(model.parameters().iter().map(|p| p.grad().map_or(vec![f64::NAN], |g| g.to_vec_f64())));
        };
        for i in 0..15u64 {
            // one call of another shape (a signature of its own) in between
            let b = batch::<Traced<Cpu>>(if i == 3 { 5 } else { 6 }, i);
            // fresh gradients from outside the step, then calls that
            // accumulate into the gradients the last one left
            if i < 10 {
                model.zero_grad(true);
            }
            match i {
                4 | 5 => model.eval(),
                6 => model.train(),
                _ => {}
            }
            let out = if (8..10).contains(&i) {
                autograd_tensor::autocast::autocast(DType::BF16, || run.run(&b)).unwrap()
            } else if i >= 10 {
                // the same values through a transposed (strided) view
                let xt = b[0].transpose(0, 1).contiguous().transpose(0, 1);
                run.run(&[xt, b[1].clone()]).unwrap()
            } else {
                run.run(&b).unwrap()
            };
            record(out, &model);
        }
        (seen, run.counts())
    };
    let (compiled, counts) = scenario(CompileOptions::default().with_cache_size(16));
    let (eager, _) = scenario(eager_only());
    assert_eq!(compiled.len(), eager.len());
    for (i, (c, e)) in compiled.iter().zip(&eager).enumerate() {
        let same = c.iter().zip(e).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same && c.len() == e.len(), "record {i}: compiled {c:?} vs eager {e:?}");
    }
    // replays before, between and after the flips (eval -> train returns
    // to the first program), and while gradients accumulate over calls
    assert!(counts.replayed >= 6, "{counts:?}");
}

/// Reproduction 3: a model with `BatchNorm1d` was refused (the running
/// statistics' count was read on the host while tracing). PyTorch compiles
/// it. Its running statistics and count now update on the device: the
/// compiled run equals eager bit for bit (parameters, running mean and
/// variance, `num_batches_tracked`), through an `eval()` and back.
#[test]
fn batch_norm_compiles_and_replays_as_eager() {
    batch_norm_case(Some(0.1));
}

/// The cumulative average (`momentum = None`, factor `1 / n`) on the device too.
#[test]
fn batch_norm_with_a_cumulative_average_compiles() {
    batch_norm_case(None);
}

fn batch_norm_case(momentum: Option<f64>) {
    let _serial = serial();
    use autograd_nn::BatchNorm1dConfig;
    let scenario = |options: CompileOptions| {
        let model = fork_rng(4, || {
            Sequential::new()
                .add(LinearConfig::new(4, 8).with_dtype(DType::F64).init::<Traced<Cpu>>())
                .add(BatchNorm1dConfig::new(8).with_momentum(momentum).with_dtype(DType::F64).init::<Traced<Cpu>>())
                .add(ReLU)
                .add(LinearConfig::new(8, 1).with_dtype(DType::F64).init::<Traced<Cpu>>())
        });
        let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 0.05, ..Default::default() }).unwrap();
        let mut run = compile_with(options, |b: &[T]| step(&model, &mut opt, b));
        let mut seen = Vec::new();
        for i in 0..8u64 {
            if i == 5 {
                model.eval();
            }
            if i == 6 {
                model.train();
            }
            let out = run.run(&batch(8, i)).unwrap();
            seen.push(out[0].to_vec_f64());
            seen.extend(model.named_buffers().iter().map(|(_, b)| b.to_vec_f64()));
            seen.extend(params(&model));
        }
        (seen, run.counts())
    };
    let (compiled, counts) = scenario(CompileOptions::default());
    let (eager, _) = scenario(eager_only());
    let as_bits = |v: &[Vec<f64>]| v.iter().map(|r| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>()).collect::<Vec<_>>();
    assert_eq!(as_bits(&compiled), as_bits(&eager));
    // the eval() call is a new (warming) entry; train() finds the first program again
    assert_eq!((counts.eager, counts.traced, counts.replayed), (2, 1, 5), "{counts:?}");
}

/// Fused attention with dropout, compiled: the seed is a `random` op of the
/// program, so each replay draws a new mask, as the eager steps do (a seed
/// frozen into the program would repeat the first step's mask).
#[test]
fn attention_dropout_draws_a_new_mask_per_replay() {
    use autograd_tensor::functional::{SdpaOptions, try_scaled_dot_product_attention};
    let _serial = serial();
    fn run<B: Backend>(steps: usize, mut f: impl FnMut(&[Tensor<B>]) -> Vec<Tensor<B>>) -> Vec<f64> {
        manual_seed(5);
        (0..steps)
            .map(|i| {
                let x: Vec<f64> = (0..2 * 6 * 4).map(|j| ((j * 5 + i) % 9) as f64 / 4.0 - 1.0).collect();
                f(&[Tensor::from_vec(x, [2, 6, 4])])[0].item()
            })
            .collect()
    }
    fn step<B: Backend>(w: &Tensor<B>, b: &[Tensor<B>]) -> Result<Vec<Tensor<B>>> {
        let h = b[0].try_matmul(w)?;
        let o = SdpaOptions { dropout_p: 0.4, is_causal: true, ..Default::default() };
        let y = try_scaled_dot_product_attention(&h, &h, &h, o)?;
        let loss = y.try_mul(&y)?.try_sum()?;
        let g = autograd_tensor::autograd::grad(std::slice::from_ref(&loss), std::slice::from_ref(w), None, Default::default())?;
        Ok(vec![loss, g.into_iter().next().flatten().expect("a gradient")])
    }
    let weight = || (0..16).map(|i| (i as f64 * 0.7).sin()).collect::<Vec<f64>>();
    let we = Tensor::<Cpu>::from_vec(weight(), [4, 4]).requires_grad_(true);
    let eager = run::<Cpu>(6, |b| step(&we, b).unwrap());
    let wt = T::from_vec(weight(), [4, 4]).requires_grad_(true);
    let mut compiled = compile(|b: &[T]| step(&wt, b));
    let replayed = run::<Traced<Cpu>>(6, |b| compiled.run(b).unwrap());
    assert_eq!(compiled.counts().replayed, 4);
    assert_eq!(replayed, eager, "each replay's dropout mask is the eager step's");
    assert!(eager.windows(2).all(|w| w[0] != w[1]));
    let printed = compiled.programs().next().unwrap().to_string();
    assert!(printed.contains("random Uniform") && printed.contains("dropout 0.4"), "{printed}");
}

/// A gradient penalty through attention with dropout: the `create_graph`
/// backward of the fused node rebuilds its dropout mask from the call's
/// seed. That mask is a primitive (`attention_dropout`), so the step is
/// captured (it used to read the seed on the host and be refused) and
/// each replay rebuilds the mask from its own draw: the eager run's bits.
#[test]
fn a_double_backward_through_dropout_attention_compiles_and_replays_as_eager() {
    use autograd_tensor::functional::{SdpaOptions, try_scaled_dot_product_attention};
    use autograd_tensor::{GradOptions, autograd};
    let _serial = serial();
    type Step<'a, B> = dyn FnMut(&[Tensor<B>]) -> Result<Vec<Tensor<B>>> + 'a;
    fn run<B: Backend>(step: &mut Step<'_, B>) -> Vec<Vec<f64>> {
        manual_seed(21);
        (0..5)
            .map(|_| {
                // the same input each call: only the dropout masks differ
                let x = Tensor::<B>::from_vec((0..24).map(|j| (j as f64 * 0.7).cos()).collect::<Vec<_>>(), [2, 3, 4]);
                step(&[x]).unwrap().iter().flat_map(|t| t.to_vec_f64()).collect()
            })
            .collect()
    }
    fn penalised<B: Backend>(w: &Tensor<B>, x: &Tensor<B>) -> Result<Vec<Tensor<B>>> {
        let q = x.try_mul(w)?;
        let y = try_scaled_dot_product_attention(&q, &q, &q, SdpaOptions { dropout_p: 0.3, ..Default::default() })?;
        let loss = y.try_mul(&y)?.try_sum()?;
        let opts = GradOptions { create_graph: true, ..Default::default() };
        let g = autograd::grad(std::slice::from_ref(&loss), std::slice::from_ref(w), None, opts)?;
        let g = g[0].clone().expect("w is used");
        let total = loss.try_add(&g.try_mul(&g)?.try_sum()?)?;
        w.set_grad(None);
        total.backward()?;
        Ok(vec![total, w.grad().expect("w's gradient")])
    }
    let init = || (0..24).map(|i| (i as f64 * 0.3).sin()).collect::<Vec<_>>();
    let w_cpu = Tensor::<Cpu>::from_vec(init(), [2, 3, 4]).requires_grad_(true);
    let want = run::<Cpu>(&mut |b| penalised(&w_cpu, &b[0]));
    let w = T::from_vec(init(), [2, 3, 4]).requires_grad_(true);
    let mut compiled = compile(|b: &[T]| penalised(&w, &b[0]));
    let got = run::<Traced<Cpu>>(&mut |b| compiled.run(b));
    assert_eq!(compiled.counts().replayed, 3, "one eager call, one traced, then replays");
    assert_eq!(got, want, "each replay draws its own seed and rebuilds its mask from it");
    assert!(want.windows(2).all(|w| w[0] != w[1]), "the masks differ from call to call");
    let printed = compiled.programs().next().unwrap().to_string();
    assert!(printed.contains("attention_dropout"), "{printed}");
}
