//! PyTorch's float64 optimizer trajectories, scheduler sequences and
//! clipping results (`fixtures/golden/optim.*`, generated with PyTorch 2.15)
//! ([`optim_suite!`](crate::optim_suite)).

use autograd_core::Backend;
use autograd_optim::*;
use autograd_tensor::{NamedTensors, Tensor, load_safetensors};
use serde_json::Value;

const RTOL: f64 = 1e-12;

fn golden<B: Backend>() -> (NamedTensors<B>, Value) {
    let t = load_safetensors::<B>(crate::fixture("golden/optim.safetensors")).unwrap();
    let j: Value = serde_json::from_str(&std::fs::read_to_string(crate::fixture("golden/optim.json")).unwrap()).unwrap();
    (t, j)
}

fn get<B: Backend>(t: &NamedTensors<B>, name: &str) -> Tensor<B> {
    t.get(name).unwrap_or_else(|| panic!("golden tensor {name} missing")).clone()
}

/// Largest |a - b| / max(|b|, 1e-3): relative where values are O(1e-3) and up.
fn rel_dev(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / y.abs().max(1e-3)).fold(0.0, f64::max)
}

fn loss<B: Backend>(x: &Tensor<B>, y: &Tensor<B>, w: &Tensor<B>, b: &Tensor<B>) -> Tensor<B> {
    let d = &(x.matmul(w) + b).tanh() - y;
    (&d * &d).mean()
}

fn build<B: Backend>(class: &str, kw: &Value, params: Vec<Tensor<B>>) -> Box<dyn Optimizer<B>> {
    let f = |k: &str, d: f64| kw.get(k).and_then(Value::as_f64).unwrap_or(d);
    let flag = |k: &str| kw.get(k).and_then(Value::as_bool).unwrap_or(false);
    let known =
        ["lr", "momentum", "nesterov", "dampening", "weight_decay", "maximize", "betas", "eps", "amsgrad", "alpha", "centered", "lr_decay"];
    for k in kw.as_object().unwrap().keys() {
        assert!(known.contains(&k.as_str()), "golden config uses {k}, not mapped by this test");
    }
    let betas = kw.get("betas").map(|b| (b[0].as_f64().unwrap(), b[1].as_f64().unwrap())).unwrap_or((0.9, 0.999));
    match class {
        "SGD" => Box::new(
            Sgd::new(
                params,
                SgdConfig {
                    lr: f("lr", 1e-3),
                    momentum: f("momentum", 0.0),
                    dampening: f("dampening", 0.0),
                    weight_decay: f("weight_decay", 0.0),
                    nesterov: flag("nesterov"),
                    maximize: flag("maximize"),
                },
            )
            .unwrap(),
        ),
        "Adam" => Box::new(
            Adam::new(
                params,
                AdamConfig {
                    lr: f("lr", 1e-3),
                    betas,
                    eps: f("eps", 1e-8),
                    weight_decay: f("weight_decay", 0.0),
                    amsgrad: flag("amsgrad"),
                    maximize: flag("maximize"),
                },
            )
            .unwrap(),
        ),
        "AdamW" => Box::new(
            AdamW::new(
                params,
                AdamWConfig {
                    lr: f("lr", 1e-3),
                    betas,
                    eps: f("eps", 1e-8),
                    weight_decay: f("weight_decay", 1e-2),
                    amsgrad: flag("amsgrad"),
                    maximize: flag("maximize"),
                },
            )
            .unwrap(),
        ),
        "RMSprop" => Box::new(
            RmsProp::new(
                params,
                RmsPropConfig {
                    lr: f("lr", 1e-2),
                    alpha: f("alpha", 0.99),
                    eps: f("eps", 1e-8),
                    weight_decay: f("weight_decay", 0.0),
                    momentum: f("momentum", 0.0),
                    centered: flag("centered"),
                    maximize: flag("maximize"),
                },
            )
            .unwrap(),
        ),
        "Adagrad" => Box::new(
            Adagrad::new(
                params,
                AdagradConfig {
                    lr: f("lr", 1e-2),
                    lr_decay: f("lr_decay", 0.0),
                    weight_decay: f("weight_decay", 0.0),
                    eps: f("eps", 1e-10),
                    maximize: flag("maximize"),
                },
            )
            .unwrap(),
        ),
        other => panic!("unknown optimizer {other}"),
    }
}

/// Suite test `trajectories`.
pub fn trajectories<B: Backend>() {
    let (t, j) = golden::<B>();
    let (x, y) = (get(&t, "X"), get(&t, "Y"));
    let steps = j["steps"].as_u64().unwrap() as usize;
    let mut worst_all = 0.0f64;
    let configs = j["optimizers"].as_object().unwrap();
    assert_eq!(configs.len(), 11);
    for (name, cfg) in configs {
        let w = get(&t, "W0").deep_clone().requires_grad_(true);
        let b = get(&t, "b0").deep_clone().requires_grad_(true);
        let mut opt = build::<B>(cfg["class"].as_str().unwrap(), &cfg["kwargs"], vec![w.clone(), b.clone()]);
        let losses: Vec<f64> = cfg["loss_before_step"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let mut worst = 0.0f64;
        for k in 1..=steps {
            opt.zero_grad(true);
            let l = loss(&x, &y, &w, &b);
            worst = worst.max(rel_dev(&[l.item()], &[losses[k - 1]]));
            l.backward().unwrap();
            opt.step().unwrap();
            worst = worst.max(rel_dev(&w.to_vec_f64(), &get(&t, &format!("{name}/step{k}/W")).to_vec_f64()));
            worst = worst.max(rel_dev(&b.to_vec_f64(), &get(&t, &format!("{name}/step{k}/b")).to_vec_f64()));
        }
        eprintln!("{} {name}: worst relative deviation over {steps} steps {worst:.2e}", B::NAME);
        assert!(worst <= RTOL, "{name}: deviation {worst:e} > {RTOL:e}");
        worst_all = worst_all.max(worst);
    }
    eprintln!("{}: worst over all optimizer configurations {worst_all:.2e}", B::NAME);
}

/// Suite test `schedulers`.
pub fn schedulers<B: Backend>() {
    let (_, j) = golden::<B>();
    let scheds = j["schedulers"].as_object().unwrap();
    assert_eq!(scheds.len(), 6);
    for (name, rec) in scheds {
        let sched: Box<dyn LrScheduler> = match name.as_str() {
            "StepLR(step_size=3, gamma=0.5)" => Box::new(StepLR { step_size: 3, gamma: 0.5 }),
            "MultiStepLR(milestones=[2,5,9], gamma=0.1)" => Box::new(MultiStepLR { milestones: vec![2, 5, 9], gamma: 0.1 }),
            "ExponentialLR(gamma=0.9)" => Box::new(ExponentialLR { gamma: 0.9 }),
            "CosineAnnealingLR(T_max=10, eta_min=0.001)" => Box::new(CosineAnnealingLR { t_max: 10, eta_min: 0.001 }),
            "LinearLR(start_factor=0.25, end_factor=1.0, total_iters=4)" => {
                Box::new(LinearLR { start_factor: 0.25, end_factor: 1.0, total_iters: 4 })
            }
            "OneCycleLR(max_lr=1.0, total_steps=12)" => Box::new(OneCycleLR::new(1.0, 12)),
            other => panic!("unmapped scheduler {other}"),
        };
        let base = rec["base_lr"].as_f64().unwrap();
        let want: Vec<f64> = rec["lr_per_epoch"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let w = Tensor::<B>::zeros_dtype([1], autograd_core::DType::F64).requires_grad_(true);
        let mut opt = Sgd::new(vec![w], SgdConfig { lr: base, ..Default::default() }).unwrap();
        let mut s = Scheduler::new(&mut opt, sched).unwrap();
        let mut got = vec![opt.lr()];
        for _ in 1..want.len() {
            s.step(&mut opt).unwrap();
            got.push(opt.lr());
        }
        let dev = rel_dev(&got, &want);
        eprintln!("{name}: worst relative deviation {dev:.2e}");
        assert!(dev <= RTOL, "{name}: got {got:?}, PyTorch {want:?}");
    }
}

/// Suite test `clipping`.
pub fn clipping<B: Backend>() {
    let (t, j) = golden::<B>();
    for (name, call) in j["clip"].as_object().unwrap() {
        let w = get(&t, "W0").deep_clone().requires_grad_(true);
        let b = get(&t, "b0").deep_clone().requires_grad_(true);
        w.set_grad(Some(get(&t, &format!("{name}/grad_before/W")).deep_clone()));
        b.set_grad(Some(get(&t, &format!("{name}/grad_before/b")).deep_clone()));
        let params = [w.clone(), b.clone()];
        let returned = match name.as_str() {
            "clip_norm" => Some(clip_grad_norm_(&params, 0.05, NormType::P(2.0), true).unwrap().item()),
            "clip_norm_inf" => Some(clip_grad_norm_(&params, 0.05, NormType::Inf, true).unwrap().item()),
            "clip_value" => {
                clip_grad_value_(&params, 0.01).unwrap();
                None
            }
            other => panic!("unmapped {other}"),
        };
        if let Some(total) = returned {
            let want = call["returned_total_norm"].as_f64().unwrap();
            assert!(rel_dev(&[total], &[want]) <= RTOL, "{name}: total norm {total} vs {want}");
        }
        let dw = rel_dev(&w.grad().unwrap().to_vec_f64(), &get(&t, &format!("{name}/grad_after/W")).to_vec_f64());
        let db = rel_dev(&b.grad().unwrap().to_vec_f64(), &get(&t, &format!("{name}/grad_after/b")).to_vec_f64());
        assert!(dw.max(db) <= RTOL, "{name}: clipped gradients deviate by {dw:e} / {db:e}");
    }
}

/// The golden gradients at W0 are what our backward computes (ties the clip
/// inputs to the problem, not only to the stored arrays).
pub fn clip_inputs_are_the_problem_gradients<B: Backend>() {
    let (t, _) = golden::<B>();
    let w = get(&t, "W0").deep_clone().requires_grad_(true);
    let b = get(&t, "b0").deep_clone().requires_grad_(true);
    loss(&get(&t, "X"), &get(&t, "Y"), &w, &b).backward().unwrap();
    assert!(rel_dev(&w.grad().unwrap().to_vec_f64(), &get(&t, "clip_norm/grad_before/W").to_vec_f64()) <= RTOL);
    assert!(rel_dev(&b.grad().unwrap().to_vec_f64(), &get(&t, "clip_norm/grad_before/b").to_vec_f64()) <= RTOL);
}

/// The suite as `#[test]`s for one backend.
#[macro_export]
macro_rules! optim_suite {
    ($backend:ty) => {
        $crate::instantiate!($backend, optim, [trajectories, schedulers, clipping, clip_inputs_are_the_problem_gradients]);
    };
}
