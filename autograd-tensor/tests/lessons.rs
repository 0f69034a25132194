//! The lessons' worked examples and the autograd protocol, run on every backend.

use autograd_core::{Backend, DType};
use autograd_tensor::BackwardOptions;
use autograd_tensor::GradOptions;
use autograd_tensor::{Tensor, autograd, no_grad};

fn s<B: Backend>(v: f64) -> Tensor<B> {
    Tensor::scalar(v).requires_grad_(true)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

fn neuron<B: Backend>() {
    let (a, b, c) = (s::<B>(2.0), s::<B>(-1.0), s::<B>(1.5));
    let l = (&a * &b + &c).tanh();
    assert!(close(l.item(), -0.4621, 1e-4), "{}", l.item());
    let f = l.grad_fn().unwrap();
    assert_eq!(f.name(), "TanhBackward0");
    let add = f.next_functions()[0].clone().unwrap();
    assert_eq!(add.name(), "AddBackward0");
    let nx = add.next_functions();
    assert_eq!(nx[0].as_ref().unwrap().name(), "MulBackward0");
    assert_eq!(nx[1].as_ref().unwrap().name(), "AccumulateGrad");
    assert_eq!(nx[1].as_ref().unwrap().variable().unwrap().id(), c.id());
    // the node remembers where the forward op was written
    assert!(f.location().unwrap().file().ends_with("lessons.rs"));
    l.backward().unwrap();
    let g = |t: &Tensor<B>| t.grad().unwrap().item();
    assert!(close(g(&a), -0.7864, 1e-4) && close(g(&b), 1.5729, 1e-4) && close(g(&c), 0.7864, 1e-4));
    // exact: dL/dc = 1 - tanh(0.5)^2
    assert!(close(g(&c), 1.0 - 0.5f64.tanh().powi(2), 1e-6));
}

fn small_graphs<B: Backend>() {
    let x = s::<B>(3.0);
    let y = &x * &x + &x;
    assert_eq!(y.item(), 12.0);
    y.backward().unwrap();
    assert_eq!(x.grad().unwrap().item(), 7.0);

    let (x, y) = (s::<B>(2.0), s::<B>(-1.0));
    let f = (&x * &y + &y).powf(2.0);
    f.backward().unwrap();
    assert_eq!((f.item(), x.grad().unwrap().item(), y.grad().unwrap().item()), (9.0, 6.0, -18.0));

    let (x, y) = (s::<B>(2.0), s::<B>(3.0));
    let z = &x * &y + x.powf(2.0);
    z.backward().unwrap();
    assert_eq!((x.grad().unwrap().item(), y.grad().unwrap().item()), (7.0, 2.0));
}

fn retain_graph<B: Backend>() {
    let x = s::<B>(3.0);
    let y = &x * &x;
    y.backward().unwrap();
    let e = y.backward().unwrap_err().to_string();
    assert!(e.contains("second time") && e.contains("retain_graph") && e.contains("MulBackward0"), "{e}");

    let x = s::<B>(3.0);
    let y = &x * &x;
    for _ in 0..3 {
        y.backward_with(None, BackwardOptions { retain_graph: true, ..Default::default() }).unwrap();
    }
    assert_eq!(x.grad().unwrap().item(), 18.0, "three backwards accumulate 3 x 6");

    // a graph without saved tensors can be run again, as in PyTorch
    let x = s::<B>(1.0);
    let y = &x + 2.0;
    y.backward().unwrap();
    y.backward().unwrap();
    assert_eq!(x.grad().unwrap().item(), 2.0);
}

fn detach<B: Backend>() {
    let x = s::<B>(3.0);
    let hidden = x.powf(2.0);
    let out = hidden.detach() * &x;
    out.backward().unwrap();
    assert_eq!(x.grad().unwrap().item(), 9.0);
    let d = hidden.detach();
    assert!(d.shares_storage(&hidden) && !d.requires_grad() && d.is_leaf());
}

fn errors<B: Backend>() {
    let x = Tensor::<B>::from_vec(vec![1.0f64, 2.0], [2]).requires_grad_(true);
    let y = &x * 2.0;
    let e = y.backward().unwrap_err().to_string();
    assert!(e.contains("grad can be implicitly created only for scalar outputs"), "{e}");
    let a = Tensor::<B>::zeros([2, 3]);
    let b = Tensor::<B>::zeros([4]);
    let e = a.try_add(&b).unwrap_err().to_string();
    assert!(e.contains("[2, 3]") && e.contains("[4]") && e.contains("lessons.rs"), "{e}");
    let r = std::panic::catch_unwind(|| a.matmul(&b));
    let msg = r.unwrap_err().downcast::<String>().map(|s| *s).unwrap_or_default();
    assert!(msg.contains("matmul") && msg.contains("[2, 3]") && msg.contains("[4]") && msg.contains("lessons.rs"), "{msg}");
    let e = Tensor::<B>::scalar(0.0f32).backward().unwrap_err().to_string();
    assert!(e.contains("does not require grad"), "{e}");
    assert!(Tensor::<B>::zeros_dtype([2], DType::I64).try_requires_grad_(true).is_err());
}

fn grad_mode<B: Backend>() {
    let x = s::<B>(2.0);
    let y = no_grad(|| &x * &x);
    assert!(!y.requires_grad() && y.grad_fn().is_none());
    let z = &x * &Tensor::scalar(3.0f64);
    assert!(z.requires_grad() && !z.is_leaf());
    let w = Tensor::<B>::scalar(1.0f64) + Tensor::scalar(2.0f64);
    assert!(!w.requires_grad());
}

fn higher_order<B: Backend>() {
    let x = s::<B>(2.0);
    let y = x.powf(3.0);
    let g = autograd::grad(&[y], std::slice::from_ref(&x), None, GradOptions { create_graph: true, ..Default::default() }).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(g.item(), 12.0);
    let g2 = autograd::grad(&[g], std::slice::from_ref(&x), None, GradOptions::default()).unwrap()[0].clone().unwrap();
    assert_eq!(g2.item(), 12.0);
    // tanh'' = -2 tanh (1 - tanh^2), through the saved output re-attached to its node
    let x = s::<B>(0.7);
    let g = autograd::grad(&[x.tanh()], std::slice::from_ref(&x), None, GradOptions { create_graph: true, ..Default::default() }).unwrap()
        [0]
    .clone()
    .unwrap();
    let g2 = autograd::grad(&[g], std::slice::from_ref(&x), None, GradOptions::default()).unwrap()[0].clone().unwrap();
    let t = 0.7f64.tanh();
    assert!(close(g2.item(), -2.0 * t * (1.0 - t * t), 1e-12), "{}", g2.item());
    // unused input
    let (a, b) = (s::<B>(1.0), s::<B>(1.0));
    assert!(autograd::grad(&[&a * 2.0], std::slice::from_ref(&b), None, GradOptions::default()).is_err());
    assert!(autograd::grad(&[&a * 2.0], &[b], None, GradOptions { allow_unused: true, ..Default::default() }).unwrap()[0].is_none());
}

fn max_dim_and_retain<B: Backend>() {
    let x = Tensor::<B>::from_vec(vec![1.0f64, 5.0, 3.0, 2.0, 0.0, 4.0], [2, 3]).requires_grad_(true);
    let (v, i) = x.max_dim(1, false);
    assert_eq!(i.to_vec::<i64>(), vec![1, 2]);
    let h = &v * 2.0;
    h.retain_grad();
    h.sum().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![0.0, 2.0, 0.0, 0.0, 0.0, 2.0]);
    assert_eq!(h.grad().unwrap().to_vec::<f64>(), vec![1.0, 1.0]);
}

fn display<B: Backend>() {
    let x = s::<B>(3.0);
    let y = &x * &x + &x;
    assert_eq!(format!("{y}"), "tensor(12., dtype=torch.float64, grad_fn=<AddBackward0>)");
    assert_eq!(format!("{x}"), "tensor(3., dtype=torch.float64, requires_grad=True)");
    let m = Tensor::<B>::from_vec(vec![1.0f32, 2.5, -3.0, 4.0], [2, 2]);
    assert_eq!(format!("{m}"), "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  4.0000]])");
    assert_eq!(format!("{}", Tensor::<B>::arange_dtype(0.0, 3.0, 1.0, DType::I64)), "tensor([0, 1, 2])");
}

fn constructors<B: Backend>() {
    assert_eq!(Tensor::<B>::linspace_dtype(0.0, 1.0, 5, DType::F64).to_vec::<f64>(), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    // fork_rng: tests run in parallel threads and share the global generator
    let a = autograd_tensor::fork_rng(3, || Tensor::<B>::rand([100]).to_vec::<f32>());
    assert!(a.iter().all(|&v| (0.0..1.0).contains(&v)));
    assert_eq!(a, autograd_tensor::fork_rng(3, || Tensor::<B>::rand([100]).to_vec::<f32>()));
    let n = Tensor::<B>::randn_dtype([20000], DType::F64);
    assert!(n.mean().item().abs() < 0.03 && (n.std_dims(&[], 1, false).item() - 1.0).abs() < 0.03);
    let h = Tensor::<B>::from_vec(vec![1.5f64, -2.0], [2]).to_dtype(DType::BF16);
    assert_eq!(h.to_dtype(DType::F32).to_vec::<f32>(), vec![1.5, -2.0]);
    assert!(Tensor::<B>::try_from_vec(vec![1.0f32; 5], [2, 2]).is_err());
    assert_eq!(Tensor::<B>::full([2], 7.0).ones_like().to_vec::<f32>(), vec![1.0, 1.0]);
}

/// Mixed dtypes promote as in PyTorch, and gradients come back in each input's dtype.
fn promotion<B: Backend>() {
    let a = Tensor::<B>::from_vec(vec![1.0f32, 2.0], [2]).requires_grad_(true);
    let b = Tensor::<B>::from_vec(vec![3.0f64, 4.0], [2]).requires_grad_(true);
    let c = &a * &b;
    assert_eq!(c.dtype(), DType::F64);
    c.sum().backward().unwrap();
    assert_eq!(a.grad().unwrap().dtype(), DType::F32);
    assert_eq!(a.grad().unwrap().to_vec::<f32>(), vec![3.0, 4.0]);
    assert_eq!((&a * 2.0).dtype(), DType::F32, "a Rust scalar adopts the tensor's dtype");
}

fn inplace_version_check<B: Backend>() {
    let x = s::<B>(2.0);
    let y = x.exp();
    let one = Tensor::<B>::scalar(1.0f64);
    no_grad(|| y.add_(&one));
    assert_eq!(y.version(), 1);
    let e = y.sum().backward().unwrap_err().to_string();
    assert!(e.contains("ExpBackward0") && e.contains("version 1") && e.contains("expected version 0"), "{e}");
    // a leaf that requires grad cannot be modified in place outside no_grad
    let e = x.try_add_(&one).unwrap_err().to_string();
    assert!(e.contains("leaf"), "{e}");
    // views share the version counter and the data
    let m = Tensor::<B>::zeros_dtype([2, 3], DType::F64);
    let row = m.select(0, 1);
    row.fill_(5.0);
    assert_eq!(m.to_vec::<f64>(), vec![0.0, 0.0, 0.0, 5.0, 5.0, 5.0]);
    assert_eq!(m.version(), 1);
    m.t().narrow(0, 0, 1).copy_(&Tensor::from_vec(vec![7.0f64, 8.0], [1, 2]));
    assert_eq!(m.to_vec::<f64>(), vec![7.0, 0.0, 0.0, 8.0, 5.0, 5.0]);
    m.clamp_(Some(1.0), Some(6.0));
    m.mul_(&Tensor::scalar(2.0f64));
    m.div_(&Tensor::from_vec(vec![1.0f64, 2.0, 4.0], [3]));
    assert_eq!(m.to_vec::<f64>(), vec![12.0, 1.0, 0.5, 12.0, 5.0, 2.5]);
    m.zero_();
    assert_eq!(m.to_vec::<f64>(), vec![0.0; 6]);
    assert_eq!(m.version(), 6);
}

fn dropout<B: Backend>() {
    use autograd_tensor::functional::try_dropout;
    let x = Tensor::<B>::ones_dtype([10000], DType::F64).requires_grad_(true);
    let y = autograd_tensor::fork_rng(5, || try_dropout(&x, 0.3, true).unwrap());
    let v = y.to_vec::<f64>();
    let kept = v.iter().filter(|&&e| e != 0.0).count();
    assert!((kept as f64 / 10000.0 - 0.7).abs() < 0.02, "kept {kept}");
    assert!(v.iter().all(|&e| e == 0.0 || (e - 1.0 / 0.7).abs() < 1e-12), "survivors scaled by 1/(1-p)");
    y.sum().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), v, "gradient uses the same mask");
    assert_eq!(autograd_tensor::fork_rng(5, || try_dropout(&x, 0.3, true).unwrap()).to_vec::<f64>(), v, "seeded: same mask");
    assert_eq!(try_dropout(&x, 0.3, false).unwrap().to_vec::<f64>(), vec![1.0; 10000], "identity in eval");
}

autograd_testkit::for_backends!(
    neuron,
    small_graphs,
    retain_graph,
    detach,
    errors,
    grad_mode,
    higher_order,
    max_dim_and_retain,
    display,
    constructors,
    promotion,
    inplace_version_check,
    dropout
);
