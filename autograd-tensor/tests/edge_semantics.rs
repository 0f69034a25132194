//! PyTorch's answers at the edges: NaN propagation, kinks, empty batches,
//! 0-d promotion, norms. Every expected value was computed with PyTorch 2.15
//! by `tests/scripts/edge_semantics.py` (its output is quoted above each
//! assertion); each case runs on both backends.

#![allow(clippy::approx_constant)] // values are PyTorch's printouts, ln 2 among them

use autograd_core::{Backend, DType};
use autograd_tensor::Tensor;
use autograd_tensor::functional::{self as F, CrossEntropyOptions, Reduction};

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

fn t<B: Backend>(v: &[f64], shape: &[usize]) -> Tensor<B> {
    Tensor::from_vec(v.to_vec(), shape.to_vec())
}

fn leaf<B: Backend>(v: &[f64], shape: &[usize]) -> Tensor<B> {
    t::<B>(v, shape).requires_grad_(true)
}

/// Equal within 1e-12 relative, NaN matching NaN.
#[track_caller]
fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length of {got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-12 * w.abs().max(1.0);
        assert!(ok, "{what}[{i}]: got {g}, PyTorch {w} (all: {got:?} vs {want:?})");
    }
}

fn grad<B: Backend>(x: &Tensor<B>) -> Vec<f64> {
    x.grad().expect("a gradient").to_vec_f64()
}

fn bce<B: Backend>() {
    // bce [0.39045243093415133] [-0.125, 0.029800730505529387, -0.011856468294391659, 0.125] 'BinaryCrossEntropyWithLogitsBackward0'
    let x = leaf::<B>(&[0.0, -2.0, 3.0, 0.0], &[4]);
    let tg = t::<B>(&[1.0, 0.0, 1.0, 0.0], &[4]);
    let l = F::try_binary_cross_entropy_with_logits(&x, &tg, None, Reduction::Mean).unwrap();
    assert_eq!(l.grad_fn().unwrap().name(), "BinaryCrossEntropyWithLogitsBackward0");
    close(&l.to_vec_f64(), &[0.39045243093415133], "bce");
    l.backward().unwrap();
    close(&grad(&x), &[-0.125, 0.029800730505529387, -0.011856468294391659, 0.125], "bce grad");
    // bce_pw [2.3521316074440346] x.grad [-1.0, 0.11920292202211755, -0.1422776195326998, 0.5]
    //        target.grad [0.6931471805599453, 0.9365359944785139, -2.902825296852516, 0.3465735902799726]
    let x = leaf::<B>(&[0.0, -2.0, 3.0, 0.0], &[4]);
    let tg = leaf::<B>(&[1.0, 0.0, 1.0, 0.0], &[4]);
    let pw = t::<B>(&[2.0, 0.5, 3.0, 1.5], &[4]);
    let l = F::try_binary_cross_entropy_with_logits(&x, &tg, Some(&pw), Reduction::Sum).unwrap();
    close(&l.to_vec_f64(), &[2.3521316074440346], "bce pos_weight");
    l.backward().unwrap();
    close(&grad(&x), &[-1.0, 0.11920292202211755, -0.1422776195326998, 0.5], "bce pos_weight input grad");
    close(&grad(&tg), &[0.6931471805599453, 0.9365359944785139, -2.902825296852516, 0.3465735902799726], "bce target grad");
}

fn cross_entropy_ignored<B: Backend>() {
    // ce_all_ignored [nan] [0.0, 0.0, 0.0, 0.0] 'NllLossBackward0'
    let x = leaf::<B>(&[1.0, 2.0, 0.5, -1.0], &[2, 2]);
    let tg = Tensor::<B>::from_vec(vec![-100i64, -100], [2]);
    let opts = CrossEntropyOptions { ignore_index: Some(-100), ..Default::default() };
    let l = F::try_cross_entropy(&x, &tg, Reduction::Mean, &opts).unwrap();
    assert_eq!(l.grad_fn().unwrap().name(), "NllLossBackward0");
    assert!(l.item().is_nan());
    l.backward().unwrap();
    close(&grad(&x), &[0.0; 4], "all ignored grad");
    // ce_some_ignored_sum [0.31326168751822286] [0.2689414213699951, -0.2689414213699951, 0.0, 0.0]
    let x = leaf::<B>(&[1.0, 2.0, 0.5, -1.0], &[2, 2]);
    let tg = Tensor::<B>::from_vec(vec![1i64, -100], [2]);
    let l = F::try_cross_entropy(&x, &tg, Reduction::Sum, &opts).unwrap();
    close(&l.to_vec_f64(), &[0.31326168751822286], "some ignored");
    l.backward().unwrap();
    close(&grad(&x), &[0.2689414213699951, -0.2689414213699951, 0.0, 0.0], "some ignored grad");
    // targets compare with ignore_index exactly: 2^53 is not 2^53 + 1
    // (through f64 they were equal and the bad target silently ignored);
    // it is out of range for 2 classes, an Err as PyTorch's
    let big = 1i64 << 53;
    let tg = Tensor::<B>::from_vec(vec![big, 1], [2]);
    let opts = CrossEntropyOptions { ignore_index: Some(big + 1), ..Default::default() };
    assert!(F::try_cross_entropy(&x.detach(), &tg, Reduction::Sum, &opts).is_err(), "target 2^53 is out of range");
    let tg = Tensor::<B>::from_vec(vec![big + 1, 1], [2]);
    let l = F::try_cross_entropy(&x.detach(), &tg, Reduction::Sum, &opts).unwrap();
    // row 1 alone: logsumexp(0.5, -1) - (-1)
    close(&l.to_vec_f64(), &[(0.5f64.exp() + (-1f64).exp()).ln() + 1.0], "only the ignored target is ignored");
}

fn nan_propagation<B: Backend>() {
    // relu_nan [nan, 1.0, 0.0] [1.0, 1.0, 0.0]
    let x = leaf::<B>(&[NAN, 1.0, -1.0], &[3]);
    let y = x.relu();
    close(&y.to_vec_f64(), &[NAN, 1.0, 0.0], "relu");
    y.sum().backward().unwrap();
    close(&grad(&x), &[1.0, 1.0, 0.0], "relu grad");
    // max_nan [nan] [0.0, 1.0, 0.0]
    let x = leaf::<B>(&[1.0, NAN, 3.0], &[3]);
    let m = x.max();
    assert!(m.item().is_nan());
    m.backward().unwrap();
    close(&grad(&x), &[0.0, 1.0, 0.0], "max grad");
    // maximum_nan [nan, nan, 2.0] [1.0, 1.0, 0.5] [1.0, 1.0, 0.5]; minimum_nan the same
    for max in [true, false] {
        let a = leaf::<B>(&[1.0, NAN, 2.0], &[3]);
        let b = leaf::<B>(&[NAN, 0.0, 2.0], &[3]);
        let y = if max { a.maximum(&b) } else { a.minimum(&b) };
        close(&y.to_vec_f64(), &[NAN, NAN, 2.0], "maximum/minimum");
        y.sum().backward().unwrap();
        close(&grad(&a), &[1.0, 1.0, 0.5], "maximum/minimum grad a");
        close(&grad(&b), &[1.0, 1.0, 0.5], "maximum/minimum grad b");
    }
}

fn pow_and_sign<B: Backend>() {
    // pow_zero [1.0, 1.0] x.grad [0.0, 0.0] e.grad [0.0, 0.6931471805599453]
    let x = leaf::<B>(&[0.0, 2.0], &[2]);
    let e = leaf::<B>(&[0.0, 0.0], &[2]);
    let y = x.pow(&e);
    close(&y.to_vec_f64(), &[1.0, 1.0], "pow");
    y.sum().backward().unwrap();
    close(&grad(&x), &[0.0, 0.0], "pow grad base");
    close(&grad(&e), &[0.0, std::f64::consts::LN_2], "pow grad exponent");
    // sign [-1.0, 0.0, 1.0] [0.0, 0.0, 0.0] 'SignBackward0'
    let x = leaf::<B>(&[-2.0, 0.0, 3.0], &[3]);
    let y = x.sign();
    assert_eq!(y.grad_fn().unwrap().name(), "SignBackward0");
    y.sum().backward().unwrap();
    close(&grad(&x), &[0.0; 3], "sign grad");
}

fn log_softmax_edges<B: Backend>() {
    // log_softmax_inf [nan, nan]; log_softmax_neginf [nan, nan]
    close(&t::<B>(&[INF, 1.0], &[2]).log_softmax(0).to_vec_f64(), &[NAN, NAN], "log_softmax [inf, 1]");
    close(&t::<B>(&[-INF, -INF], &[2]).log_softmax(0).to_vec_f64(), &[NAN, NAN], "log_softmax [-inf, -inf]");
    // log_softmax_empty [0, 3]; ce_empty [nan] grad shape [0, 3]
    let x = Tensor::<B>::zeros_dtype([0, 3], DType::F64).requires_grad_(true);
    assert_eq!(x.log_softmax(1).dims(), &[0, 3]);
    let l = F::try_cross_entropy(&x, &Tensor::from_vec(Vec::<i64>::new(), [0]), Reduction::Mean, &Default::default()).unwrap();
    assert!(l.item().is_nan());
    l.backward().unwrap();
    assert_eq!(x.grad().unwrap().dims(), &[0, 3]);
}

fn zero_dim_promotion<B: Backend>() {
    // promote torch.float32 torch.float32 torch.float32 torch.float64 torch.float64
    let a = Tensor::<B>::ones([2]);
    let s = Tensor::<B>::scalar(2.0f64);
    assert_eq!(a.add(&s).dtype(), DType::F32);
    assert_eq!(a.mul(&s).dtype(), DType::F32);
    assert_eq!(Tensor::where_cond(&t::<B>(&[1.0, 0.0], &[2]), &a, &s).dtype(), DType::F32);
    // an integer tensor is lifted by a 0-d float (integer arithmetic itself comes with the API issue)
    assert_eq!(DType::result_type(DType::I64, false, DType::F64, true), DType::F64);
    assert_eq!(Tensor::<B>::scalar(1.0f32).add(&s).dtype(), DType::F64);
    assert_eq!(a.add(&s).to_vec_f64(), vec![3.0, 3.0]);
}

fn norms<B: Backend>() {
    let rows = [3.0, -4.0, 0.0, 0.0, 0.0, 0.0];
    #[rustfmt::skip]
    let cases: [(f64, [f64; 2], [f64; 6]); 8] = [
        (2.0, [5.0, 0.0], [0.6, -0.8, 0.0, 0.0, 0.0, 0.0]),
        (1.0, [7.0, 0.0], [1.0, -1.0, 0.0, 0.0, 0.0, 0.0]),
        (INF, [4.0, 0.0], [0.0, -1.0, 0.0, 0.0, 0.0, 0.0]),
        (-INF, [0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        // PyTorch leaves the gradient of the 0-"norm" undefined (None); ours is zeros
        (0.0, [2.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        (3.0, [4.497941445275415, 0.0], [0.4448513517305356, -0.7908468475209521, 0.0, 0.0, 0.0, 0.0]),
        (0.5, [13.928203230275509, 0.0], [2.154700538379252, -1.8660254037844386, 0.0, 0.0, 0.0, 0.0]),
        (1.5, [5.584250376480029, 0.0], [0.7329564758289748, -0.8463452372482761, 0.0, 0.0, 0.0, 0.0]),
    ];
    for (p, value, g) in cases {
        let x = leaf::<B>(&rows, &[2, 3]);
        let n = x.norm(p, &[1], false);
        assert_eq!(n.grad_fn().unwrap().name(), "LinalgVectorNormBackward0");
        close(&n.to_vec_f64(), &value, &format!("norm p={p}"));
        n.mul(&t::<B>(&[1.0, 2.0], &[2])).sum().backward().unwrap();
        close(&grad(&x), &g, &format!("norm p={p} grad"));
    }
    // norm_all [5.477225575051661] [0.18257418583505536, -0.3651483716701107, 0.5477225575051661, 0.7302967433402214]
    let x = leaf::<B>(&[1.0, -2.0, 3.0, 4.0], &[2, 2]);
    let n = x.norm(2.0, &[], false);
    assert_eq!(n.dims(), &[] as &[usize]);
    close(&n.to_vec_f64(), &[5.477225575051661], "norm over all");
    n.backward().unwrap();
    close(&grad(&x), &[0.18257418583505536, -0.3651483716701107, 0.5477225575051661, 0.7302967433402214], "norm over all grad");
    assert_eq!(x.norm(2.0, &[1], true).dims(), &[2, 1]);
}

fn argmax_argmin<B: Backend>() {
    // argmax [3] [1, 0] [0, 0] [0]  (argmax, argmax dim 1, argmin dim 1, argmin of row 0)
    let x = t::<B>(&[1.0, 5.0, 5.0, NAN, 2.0, 0.0], &[2, 3]);
    assert_eq!(x.argmax(None, false).to_vec::<i64>(), vec![3]);
    assert_eq!(x.argmax(Some(1), false).to_vec::<i64>(), vec![1, 0]);
    assert_eq!(x.argmin(Some(1), false).to_vec::<i64>(), vec![0, 0]);
    assert_eq!(x.select(0, 0).argmin(None, false).to_vec::<i64>(), vec![0]);
    assert_eq!(x.argmax(Some(1), true).dims(), &[2, 1]);
    assert_eq!(x.argmax(None, true).dims(), &[1, 1]);
    assert!(Tensor::<B>::zeros([0]).try_argmax(None, false).is_err());
}

fn kinked_losses<B: Backend>() {
    let zeros = Tensor::<B>::zeros_dtype([6], DType::F64);
    let pts = [-3.0, -1.0, 0.0, 0.5, 1.0, 2.0];
    // huber [0.8541666666666666] [-1/6, -1/6, 0, 1/12, 1/6, 1/6] 'HuberLossBackward0'
    let x = leaf::<B>(&pts, &[6]);
    let l = F::try_huber_loss(&x, &zeros, 1.0, Reduction::Mean).unwrap();
    assert_eq!(l.grad_fn().unwrap().name(), "HuberLossBackward0");
    close(&l.to_vec_f64(), &[0.8541666666666666], "huber");
    l.backward().unwrap();
    close(
        &grad(&x),
        &[-0.16666666666666666, -0.16666666666666666, 0.0, 0.08333333333333333, 0.16666666666666666, 0.16666666666666666],
        "huber grad",
    );
    // smooth_l1 [5.125] [-1.0, -1.0, 0.0, 0.5, 1.0, 1.0] 'SmoothL1LossBackward0'
    let x = leaf::<B>(&pts, &[6]);
    let l = F::try_smooth_l1_loss(&x, &zeros, 1.0, Reduction::Sum).unwrap();
    assert_eq!(l.grad_fn().unwrap().name(), "SmoothL1LossBackward0");
    close(&l.to_vec_f64(), &[5.125], "smooth_l1");
    l.backward().unwrap();
    close(&grad(&x), &[-1.0, -1.0, 0.0, 0.5, 1.0, 1.0], "smooth_l1 grad");
    // smooth_l1_beta0 [7.5] [-1.0, -1.0, 0.0, 1.0, 1.0, 1.0]
    let x = leaf::<B>(&pts, &[6]);
    let l = F::try_smooth_l1_loss(&x, &zeros, 0.0, Reduction::Sum).unwrap();
    close(&l.to_vec_f64(), &[7.5], "smooth_l1 beta 0");
    l.backward().unwrap();
    close(&grad(&x), &[-1.0, -1.0, 0.0, 1.0, 1.0, 1.0], "smooth_l1 beta 0 grad");
    // softplus [...] [0.2689414213699951, 0.5, 0.9999999977220729, 0.9999999979388464, 1.0] 'SoftplusBackward0'
    let x = leaf::<B>(&[-1.0, 0.0, 19.9, 20.0, 20.1], &[5]);
    let y = x.softplus(1.0, 20.0);
    assert_eq!(y.grad_fn().unwrap().name(), "SoftplusBackward0");
    close(&y.to_vec_f64(), &[0.31326168751822286, 0.6931471805599453, 19.900000002277924, 20.000000002061153, 20.1], "softplus");
    y.sum().backward().unwrap();
    close(&grad(&x), &[0.2689414213699951, 0.5, 0.9999999977220729, 0.9999999979388464, 1.0], "softplus grad");
}

fn f32_sums<B: Backend>() {
    // sum_f32_tenth 999999.5625 (PyTorch); the exact sum of 10^7 copies of 0.1f32 is 1000000.0149...
    let exact = 1e7 * 0.1f32 as f64;
    let s = Tensor::<B>::full([10_000_000], 0.1).sum().item();
    assert!((s - exact).abs() <= 1e-6 * exact, "sum of 10^7 x 0.1f32 = {s}, exact {exact}");
    // sum_f32_ones 20000000.0
    assert_eq!(Tensor::<B>::ones([20_000_000]).sum().item(), 2e7);
    // the mean and a sum over a leading dim inherit it
    let m = Tensor::<B>::full([4_000_000, 2], 0.1).sum_dims(&[0], false).to_vec_f64();
    for v in m {
        assert!((v - 4e6 * 0.1f32 as f64).abs() <= 1e-6 * 4e5, "column sum {v}");
    }
}

/// Relu's backward is one `threshold_backward` node; differentiating it
/// again follows PyTorch's ThresholdBackwardBackward0: the upstream
/// gradient's derivative is the mask `y > 0` (NaN passing), relu'' is 0.
/// PyTorch 2.15: gx [0, 0, 0.5, 0.5] (ThresholdBackwardBackward0);
/// grad(gx.sum(), [w, x]) = ([0, 0, 1, 1], [0, 0, 0, 0]).
fn relu_double_backward<B: Backend>() {
    use autograd_tensor::autograd::{GradOptions, grad as autograd_grad};
    let x = leaf::<B>(&[-1.0, 0.0, 2.0, NAN], &[4]);
    let w = leaf::<B>(&[0.5, 0.5, 0.5, 0.5], &[4]);
    let y = x.relu();
    let create = GradOptions { create_graph: true, ..Default::default() };
    let gx = autograd_grad(&[y], std::slice::from_ref(&x), Some(std::slice::from_ref(&w)), create).unwrap()[0].clone().unwrap();
    close(&gx.to_vec_f64(), &[0.0, 0.0, 0.5, 0.5], "relu backward");
    assert_eq!(gx.grad_fn().unwrap().name(), "ThresholdBackwardBackward0");
    let allow = GradOptions { allow_unused: true, ..Default::default() };
    let g2 = autograd_grad(&[gx.sum()], &[w, x], None, allow).unwrap();
    close(&g2[0].as_ref().unwrap().to_vec_f64(), &[0.0, 0.0, 1.0, 1.0], "d/dw");
    close(&g2[1].as_ref().expect("x is reached").to_vec_f64(), &[0.0; 4], "relu''");
}

autograd_testkit::for_backends!(
    relu_double_backward,
    bce,
    cross_entropy_ignored,
    nan_propagation,
    pow_and_sign,
    log_softmax_edges,
    zero_dim_promotion,
    norms,
    argmax_argmin,
    kinked_losses,
    f32_sums
);
