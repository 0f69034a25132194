//! Hooks, retain_grad, anomaly mode, inference mode, custom functions,
//! gradcheck, functional helpers, DOT export and forward mode: the autograd
//! features, for one backend ([`autograd_suite!`](crate::autograd_suite)).

use autograd_core::{Backend, DType, Result};
use autograd_tensor::GradOptions;
use autograd_tensor::autograd::{self, gradcheck, gradgradcheck, hessian, hvp, jacobian, vjp};
use autograd_tensor::{DetectAnomaly, Function, FunctionCtx, InferenceModeGuard, Tensor, to_dot};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn v<B: Backend>(x: &[f64]) -> Tensor<B> {
    Tensor::from_vec(x.to_vec(), [x.len()]).requires_grad_(true)
}

/// Suite test `hooks`.
pub fn hooks<B: Backend>() {
    // a hook on a non-leaf sees and replaces the gradient flowing through it
    let x = v::<B>(&[1.0, 2.0]);
    let h = &x * 3.0;
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let handle = h.register_hook(move |g| {
        s2.fetch_add(1, Ordering::Relaxed);
        Some(g * 2.0)
    });
    h.sum().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![6.0, 6.0]);
    assert_eq!(seen.load(Ordering::Relaxed), 1);
    handle.remove();
    x.set_grad(None);
    (&x * 3.0).sum().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![3.0, 3.0]);
    // post-accumulate hook on a leaf sees the updated .grad
    let w = v::<B>(&[1.0]);
    let got = Arc::new(std::sync::Mutex::new(0.0));
    let g2 = got.clone();
    w.register_post_accumulate_grad_hook(move |t| *g2.lock().unwrap() = t.grad().unwrap().item()).unwrap();
    (&w * 5.0).sum().backward().unwrap();
    (&w * 5.0).sum().backward().unwrap();
    assert_eq!(*got.lock().unwrap(), 10.0);
    // hooks need requires_grad
    assert!(Tensor::<B>::scalar(1.0f64).try_register_hook(|_| None).is_err());
}

/// Suite test `anomaly`.
pub fn anomaly<B: Backend>() {
    // The lesson's trap: where(x > 0, sqrt(x), 0) at x = 0 gives a NaN gradient.
    let x = v::<B>(&[0.0, 4.0]);
    let y = Tensor::where_cond(&x.gt_scalar(0.0), &x.sqrt(), &x.zeros_like());
    y.sum().backward().unwrap();
    assert!(x.grad().unwrap().to_vec::<f64>()[0].is_nan(), "without anomaly mode the NaN flows silently");
    let x = v::<B>(&[0.0, 4.0]);
    let _g = DetectAnomaly::new();
    let line = line!() + 1;
    let y = Tensor::where_cond(&x.gt_scalar(0.0), &x.sqrt(), &x.zeros_like());
    let e = y.sum().backward().unwrap_err().to_string();
    assert!(e.contains("SqrtBackward0") && e.contains(&format!("autograd_features.rs:{line}")), "{e}");
}

/// Suite test `inference`.
pub fn inference<B: Backend>() {
    let w = v::<B>(&[2.0]);
    let y = {
        let _g = InferenceModeGuard::new();
        &w * 3.0
    };
    assert!(y.is_inference() && !y.requires_grad() && y.grad_fn().is_none());
    assert!(y.clone().try_requires_grad_(true).is_err());
    // using an inference tensor in a recorded op fails at backward with a clear error
    let e = (&w * &y).sum().backward().unwrap_err().to_string();
    assert!(e.contains("inference"), "{e}");
}

struct ClampedExp;
impl<B: Backend> Function<B> for ClampedExp {
    fn name(&self) -> &'static str {
        "ClampedExpBackward"
    }
    fn forward(&self, ctx: &mut FunctionCtx<B>, x: &[Tensor<B>]) -> Result<Tensor<B>> {
        let y = x[0].try_exp()?;
        ctx.save_for_backward(&[&y]);
        Ok(y)
    }
    fn backward(&self, ctx: &FunctionCtx<B>, g: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
        let y = &ctx.saved_tensors()?[0];
        Ok(vec![Some(g.try_mul(y)?)])
    }
}

/// Suite test `custom_function`.
pub fn custom_function<B: Backend>() {
    let x = v::<B>(&[0.5, -1.0]);
    let y = ClampedExp.apply(std::slice::from_ref(&x)).unwrap();
    assert_eq!(y.grad_fn().unwrap().name(), "ClampedExpBackward");
    y.sum().backward().unwrap();
    let want: Vec<f64> = [0.5f64, -1.0].iter().map(|v| v.exp()).collect();
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), want);
    let r = gradcheck(|x| ClampedExp.apply(x).unwrap(), &[v::<B>(&[0.3, 1.1])], 1e-6, 1e-8, 1e-6).unwrap();
    assert!(r.abs_error < 1e-7);
}

/// Suite test `gradchecks`.
pub fn gradchecks<B: Backend>() {
    let x = v::<B>(&[0.3, -0.7, 1.5]);
    let w = Tensor::<B>::from_vec(vec![0.2f64, -0.4, 0.9, 1.1, 0.5, -0.3], [2, 3]).requires_grad_(true);
    let f = |t: &[Tensor<B>]| (t[1].matmul(&t[0]).tanh() * t[0].narrow(0, 0, 2).sigmoid()).softmax(0);
    let r = gradcheck(f, &[x.clone(), w.clone()], 1e-6, 1e-8, 1e-6).unwrap();
    assert!(r.abs_error < 1e-8, "{r:?}");
    gradgradcheck(f, &[x.clone(), w.clone()], 1e-5, 1e-6, 1e-4).unwrap();
    for g in [
        (|t: &[Tensor<B>]| t[0].gelu()) as fn(&[Tensor<B>]) -> Tensor<B>,
        |t| t[0].gelu_tanh(),
        |t| t[0].silu(),
        |t| t[0].softplus(2.0, 20.0),
        |t| t[0].log_softmax(0),
        |t| t[0].logsumexp(&[0], false),
        |t| t[0].var_dims(&[], 1, false),
        |t| t[0].leaky_relu(0.1),
    ] {
        gradcheck(g, std::slice::from_ref(&x), 1e-6, 1e-8, 1e-6).unwrap();
        gradgradcheck(g, std::slice::from_ref(&x), 1e-5, 1e-6, 1e-4).unwrap();
    }
    // a wrong backward is caught and the worst element reported
    struct Wrong;
    impl<B: Backend> Function<B> for Wrong {
        fn forward(&self, _: &mut FunctionCtx<B>, x: &[Tensor<B>]) -> Result<Tensor<B>> {
            x[0].try_mul(&x[0])
        }
        fn backward(&self, _: &FunctionCtx<B>, g: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
            Ok(vec![Some(g.clone())])
        }
    }
    let e = gradcheck(|t| Wrong.apply(t).unwrap(), std::slice::from_ref(&x), 1e-6, 1e-8, 1e-6).unwrap_err().to_string();
    assert!(e.contains("analytic") && e.contains("numeric"), "{e}");
}

/// Suite test `functional_helpers`.
pub fn functional_helpers<B: Backend>() {
    let x = Tensor::<B>::from_vec(vec![1.0f64, 2.0, 3.0], [3]);
    let j = jacobian(|x| x.powf(2.0) * 0.5, &x).unwrap();
    assert_eq!(j.dims(), &[3, 3]);
    assert_eq!(j.to_vec::<f64>(), vec![1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 3.0]);
    let h = hessian(|x| x.powf(3.0).sum(), &x).unwrap();
    assert_eq!(h.to_vec::<f64>(), vec![6.0, 0.0, 0.0, 0.0, 12.0, 0.0, 0.0, 0.0, 18.0]);
    let (y, hv) = hvp(|x| x.powf(3.0).sum(), &x, &x.ones_like()).unwrap();
    assert_eq!((y.item(), hv.to_vec::<f64>()), (36.0, vec![6.0, 12.0, 18.0]));
    let (_, g) = vjp(|x| x * 2.0, &x, &x).unwrap();
    assert_eq!(g.to_vec::<f64>(), vec![2.0, 4.0, 6.0]);
}

/// Suite test `dot_export`.
pub fn dot_export<B: Backend>() {
    let a = Tensor::<B>::scalar(2.0f64).requires_grad_(true);
    let b = Tensor::<B>::scalar(-1.0f64).requires_grad_(true);
    let c = Tensor::<B>::scalar(1.5f64).requires_grad_(true);
    let l = (&a * &b + &c).tanh();
    l.backward().unwrap();
    let dot = to_dot(&l, true);
    assert!(dot.starts_with("digraph"));
    assert_eq!(dot.matches("AccumulateGrad").count(), 3, "{dot}");
    assert!(dot.contains("grad 0.7864") && dot.contains("value 1.5000") && dot.contains("output\\n-0.4621"), "{dot}");
    assert_eq!(dot.matches(" -> ").count(), 6, "{dot}");
}

/// Suite test `split_chunk`.
pub fn split_chunk<B: Backend>() {
    let x = Tensor::<B>::arange_dtype(0.0, 7.0, 1.0, DType::F64).requires_grad_(true);
    let parts = x.split(3, 0);
    assert_eq!(parts.iter().map(|p| p.numel()).collect::<Vec<_>>(), vec![3, 3, 1]);
    assert_eq!(x.chunk(3, 0).len(), 3);
    (&parts[1] * 2.0).sum().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>(), vec![0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]);
}

/// Forward mode equals reverse mode for every op family: J t by dual
/// tensors against the Jacobian (by reverse mode) times t.
pub fn forward_matches_reverse<B: Backend>() {
    use autograd_tensor::autograd::jvp;
    use autograd_tensor::functional as F;
    autograd_tensor::manual_seed(11);
    let x = Tensor::<B>::randn_dtype([3, 4], DType::F64);
    let w = Tensor::<B>::randn_dtype([4, 2], DType::F64);
    let row = Tensor::<B>::randn_dtype([4], DType::F64);
    let idx = Tensor::<B>::from_vec(vec![2i64, 0, 1, 1], [4]);
    let gidx = Tensor::<B>::from_vec(vec![3i64, 0, 2], [3, 1]);
    let cls = Tensor::<B>::from_vec(vec![1i64, 3, 0], [3]);
    type Case<'a, B> = (&'a str, Box<dyn Fn(&Tensor<B>) -> Tensor<B> + 'a>);
    let fs: Vec<Case<'_, B>> = vec![
        ("add_bcast", Box::new(|x| x + &row)),
        ("mul_bcast", Box::new(|x| x * &x.sum_dims(&[1], true))),
        ("div", Box::new(|x| &row / (x * x + 1.0))),
        ("pow", Box::new(|x| (x * x + 1.0).pow(&(x * 0.5)))),
        ("maximum", Box::new(|x| x.maximum(&x.t().matmul(x).narrow(0, 0, 3)))),
        ("matmul", Box::new(|x| x.matmul(&w).matmul(&w.t()))),
        ("batched_matmul", Box::new(|x| x.reshape(&[3, 2, 2]).matmul(&x.reshape(&[3, 2, 2]).transpose(1, 2)))),
        ("reductions", Box::new(|x| x.sum_dims(&[0], false) + x.mean() + x.amax(&[0], false) + x.max_dim(0, false).0)),
        ("var_std", Box::new(|x| x.var_dims(&[1], 1, false) + x.std_dims(&[0, 1], 0, false))),
        (
            "views",
            Box::new(|x| {
                x.t().reshape(&[2, 6]).permute(&[1, 0]).unsqueeze(0).expand(&[2, 6, 2]).narrow(1, 1, 3).select(0, 1).slice(0, 0, None, 2)
            }),
        ),
        ("gather_index", Box::new(|x| x.gather(1, &gidx) * x.index_select(1, &idx).sum())),
        ("scatter_add", Box::new(|x| x.scatter_add(1, &gidx, &x.narrow(1, 0, 1).exp()))),
        (
            "cat_stack",
            Box::new(|x| {
                Tensor::cat(&[x.clone(), x.exp()], 0) + Tensor::stack(&[x.clone(), x.clone()], 0).sum_dims(&[0], false).repeat_rows(2)
            }),
        ),
        ("softmax_family", Box::new(|x| x.softmax(1) + x.log_softmax(0) + x.logsumexp(&[1], true))),
        (
            "unary",
            Box::new(|x| {
                x.tanh()
                    + x.sigmoid()
                    + x.exp()
                    + (x * x + 1.0).log()
                    + (x * x + 1.0).sqrt()
                    + x.abs()
                    + x.relu()
                    + x.gelu()
                    + x.gelu_tanh()
                    + x.silu()
                    + x.softplus(1.0, 20.0)
                    + x.leaky_relu(0.1)
                    + x.clamp(Some(-0.5), Some(0.5))
                    + x.erf()
                    + x.powf(3.0)
                    + (x * x).log1p()
            }),
        ),
        ("where_cast", Box::new(|x| Tensor::where_cond(&x.gt_scalar(0.0), &x.to_dtype(DType::F32).to_dtype(DType::F64), &(x * 2.0)))),
        (
            "layer_norm_ce",
            Box::new(|x| {
                F::try_layer_norm(x, &[4], None, None, 1e-5).unwrap()
                    + F::try_cross_entropy(x, &cls, F::Reduction::Mean, &Default::default()).unwrap()
            }),
        ),
    ];
    for (name, f) in &fs {
        let t = x.randn_like();
        let (y, dy) = jvp(|p| f(&p[0]), std::slice::from_ref(&x), std::slice::from_ref(&t)).unwrap();
        let j = autograd_tensor::autograd::jacobian(|v| f(v), &x).unwrap();
        let jt = j.reshape(&[y.numel() as isize, x.numel() as isize]).matmul(&t.reshape(&[-1]));
        let (a, b) = (dy.to_vec_f64(), jt.to_vec_f64());
        // the f32 round trip rounds tangent and gradient separately
        let tol = if *name == "where_cast" { 1e-6 } else { 1e-10 };
        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
            assert!((p - q).abs() <= tol * (1.0 + q.abs()), "{name}: element {i}: forward {p} vs reverse {q}");
        }
    }
}

trait TestExt {
    fn repeat_rows(&self, n: usize) -> Self;
    fn randn_like(&self) -> Self;
}
impl<B: Backend> TestExt for Tensor<B> {
    fn repeat_rows(&self, n: usize) -> Self {
        Tensor::cat(&vec![self.clone(); n], 0).narrow(0, 0, self.dims()[0] * n)
    }
    fn randn_like(&self) -> Self {
        Tensor::randn_dtype(self.shape().clone(), self.dtype())
    }
}

/// `autograd::grad` runs only the nodes on a path to the requested inputs
/// (counted with a custom function), and `backward()` runs them all; leaves
/// receive the sum of their paths' gradients once, hooks included.
pub fn grad_prunes_to_requested_inputs<B: Backend>() {
    /// `2 x`, counting its backward calls.
    struct Counted(Arc<AtomicUsize>);
    impl<B: Backend> Function<B> for Counted {
        fn forward(&self, _: &mut FunctionCtx<B>, x: &[Tensor<B>]) -> Result<Tensor<B>> {
            x[0].try_mul_scalar(2.0)
        }
        fn backward(&self, _: &FunctionCtx<B>, g: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(vec![Some(g.try_mul_scalar(2.0)?)])
        }
    }
    let (on_path, off_path) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (x, y) = (v::<B>(&[1.0, 2.0]), v::<B>(&[3.0, 4.0]));
    let graph = || {
        let a = Counted(on_path.clone()).apply(std::slice::from_ref(&x)).unwrap();
        // a chain of three counted nodes that only y feeds
        let mut b = y.clone();
        for _ in 0..3 {
            b = Counted(off_path.clone()).apply(std::slice::from_ref(&b)).unwrap();
        }
        (&a * &b).sum()
    };
    let g = autograd::grad(&[graph()], std::slice::from_ref(&x), None, GradOptions::default()).unwrap();
    assert_eq!(g[0].as_ref().unwrap().to_vec_f64(), vec![2.0 * 24.0, 2.0 * 32.0]);
    assert_eq!((on_path.load(Ordering::Relaxed), off_path.load(Ordering::Relaxed)), (1, 0), "only the path to x ran");
    assert!(x.grad().is_none() && y.grad().is_none());
    let g = autograd::grad(&[graph()], std::slice::from_ref(&y), None, GradOptions::default()).unwrap();
    assert_eq!(g[0].as_ref().unwrap().to_vec_f64(), vec![8.0 * 2.0, 8.0 * 4.0]);
    assert_eq!((on_path.load(Ordering::Relaxed), off_path.load(Ordering::Relaxed)), (1, 3), "only the path to y ran");
    graph().backward().unwrap();
    assert_eq!((on_path.load(Ordering::Relaxed), off_path.load(Ordering::Relaxed)), (2, 6), "backward runs every node");
    // A leaf used on two paths receives their sum once: its hook runs once.
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = calls.clone();
    let z = v::<B>(&[1.0]);
    let _h = z.register_hook(move |g| {
        c2.fetch_add(1, Ordering::Relaxed);
        Some(g.clone())
    });
    (&z * 3.0 + &z * 4.0).sum().backward().unwrap();
    assert_eq!(z.grad().unwrap().to_vec_f64(), vec![7.0]);
    assert_eq!(calls.load(Ordering::Relaxed), 1, "AccumulateGrad runs once, on the summed gradient");
}

/// The composites PyTorch records as one node are one node here, with
/// PyTorch's `grad_fn` name and the inputs as its next functions; their
/// hand-written backward passes gradcheck and gradgradcheck (f64 central
/// differences), and forward mode agrees with reverse mode.
pub fn composites_are_single_nodes<B: Backend>() {
    use autograd_tensor::functional::{self as F, Reduction};
    let t = |v: &[f64], shape: &[usize]| Tensor::<B>::from_vec(v.to_vec(), shape.to_vec()).requires_grad_(true);
    let x = t(&[0.3, -1.2, 2.0, 0.7, -0.4, 1.5], &[2, 3]);
    let w = t(&[0.5, -0.3, 0.8, 0.1, 0.9, -0.6, 0.2, 0.4, -0.7, 1.1, -0.2, 0.3], &[4, 3]);
    let b = t(&[0.1, -0.2, 0.3, 0.05], &[4]);
    let (lw, lb) = (t(&[1.2, 0.7, -0.5], &[3]), t(&[0.3, -0.1, 0.2], &[3]));
    let target = Tensor::<B>::from_vec(vec![0.5f64, 0.0, 1.0, -1.0, 0.25, 2.0], [2, 3]);
    let idx = Tensor::<B>::from_vec(vec![3i64, 0, 3, 1, 2], [5]);
    type Case<B> = (&'static str, Box<dyn Fn(&[Tensor<B>]) -> Tensor<B>>, Vec<Tensor<B>>);
    let cases: Vec<Case<B>> = vec![
        ("VarBackward0", Box::new(|i: &[Tensor<B>]| i[0].var_dims(&[1], 1, false)), vec![x.clone()]),
        ("StdBackward0", Box::new(|i: &[Tensor<B>]| i[0].std_dims(&[], 0, false)), vec![x.clone()]),
        ("MseLossBackward0", Box::new(move |i: &[Tensor<B>]| F::try_mse_loss(&i[0], &target, Reduction::Mean).unwrap()), vec![x.clone()]),
        (
            "NativeLayerNormBackward0",
            Box::new(|i: &[Tensor<B>]| F::try_layer_norm(&i[0], &[3], Some(&i[1]), Some(&i[2]), 1e-5).unwrap()),
            vec![x.clone(), lw, lb],
        ),
        ("AddmmBackward0", Box::new(|i: &[Tensor<B>]| F::try_linear(&i[0], &i[1], Some(&i[2])).unwrap()), vec![x.clone(), w.clone(), b]),
        ("MmBackward0", Box::new(|i: &[Tensor<B>]| F::try_linear(&i[0], &i[1], None).unwrap()), vec![x.clone(), w.clone()]),
        ("EmbeddingBackward0", Box::new(move |i: &[Tensor<B>]| F::try_embedding(&idx, &i[0]).unwrap()), vec![w]),
    ];
    for (name, f, inputs) in &cases {
        let y = f(inputs);
        let node = y.grad_fn().unwrap_or_else(|| panic!("{name}: no grad_fn"));
        assert_eq!(node.name(), *name);
        let next = node.next_functions();
        assert!(next.iter().flatten().all(|n| n.name() == "AccumulateGrad"), "{name}: one node straight onto the leaves");
        gradcheck(|i| f(i), inputs, 1e-6, 1e-8, 1e-6).unwrap_or_else(|e| panic!("{name}: {e}"));
        gradgradcheck(|i| f(i), inputs, 1e-5, 1e-6, 1e-4).unwrap_or_else(|e| panic!("{name}: {e}"));
        // forward mode: <J t, 1> against <t, J^T 1>
        let tangents: Vec<Tensor<B>> = inputs.iter().map(|p| p.detach().sin()).collect();
        let (yv, dy) = autograd::jvp(|p| f(p), inputs, &tangents).unwrap();
        let leaves: Vec<Tensor<B>> = inputs.iter().map(|p| p.detach().requires_grad_(true)).collect();
        let gs = autograd::grad(&[f(&leaves)], &leaves, Some(&[yv.ones_like()]), GradOptions { allow_unused: true, ..Default::default() })
            .unwrap();
        let rev: f64 = gs.iter().zip(&tangents).map(|(g, t)| (g.clone().unwrap() * t).sum().item()).sum();
        let fwd = dy.sum().item();
        assert!((rev - fwd).abs() <= 1e-9 * (1.0 + fwd.abs()), "{name}: forward {fwd} vs reverse {rev}");
    }
}

/// The suite as `#[test]`s for one backend.
#[macro_export]
macro_rules! autograd_suite {
    ($backend:ty) => {
        $crate::instantiate!(
            $backend,
            autograd_features,
            [
                hooks,
                anomaly,
                inference,
                custom_function,
                gradchecks,
                functional_helpers,
                dot_export,
                split_chunk,
                forward_matches_reverse,
                grad_prunes_to_requested_inputs,
                composites_are_single_nodes
            ]
        );
    };
}
