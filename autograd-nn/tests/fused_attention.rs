//! The fused attention node (`Backend::attention`) against the math path
//! it replaces: values and gradients on random shapes, masks and views
//! (proptest on the CPU backend; seeded cases on every backend), the
//! semantics at the edges (fully masked queries, no query, no key), the
//! memory it keeps, and what still takes the math path.

use autograd_core::{Backend, DType, Result};
use autograd_cpu::Cpu;
use autograd_tensor::Tensor;
use autograd_tensor::autograd::{gradcheck, gradgradcheck};
use autograd_tensor::functional::{SdpaOptions, try_scaled_dot_product_attention, try_scaled_dot_product_attention_math};
use proptest::prelude::*;

/// One random case: batch dims, sizes, which mask, the dtype.
#[derive(Clone, Debug)]
struct Case {
    batch: Vec<usize>,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
    /// 0 none, 1 causal, 2 Bool `[L, S]`, 3 additive with `-inf`s, 4 key padding `[N, 1, 1, S]`-like `[S]`
    mask: u8,
    f32: bool,
    /// Whether k and v are shared across the first batch dim (broadcast).
    shared_kv: bool,
    seed: u64,
}

fn close(got: &[f64], want: &[f64], rtol: f64, what: &str) -> std::result::Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} elements, want {}", got.len(), want.len()));
    }
    let scale = want.iter().fold(1.0f64, |m, w| if w.is_finite() { m.max(w.abs()) } else { m });
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rtol * scale;
        if !ok {
            return Err(format!("{what}: element {i}: got {a}, want {b} (scale {scale})"));
        }
    }
    Ok(())
}

/// Runs the case fused and on the math path; compares outputs and the
/// gradients of q, k and v.
fn run_case<B: Backend>(c: &Case) -> std::result::Result<(), String> {
    let dtype = if c.f32 { DType::F32 } else { DType::F64 };
    let mut rng = autograd_core::rng::Generator::new(c.seed);
    let mut leaf = |dims: Vec<usize>| -> Tensor<B> {
        let n: usize = dims.iter().product();
        let v: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        Tensor::<B>::from_vec(v, dims).to_dtype(dtype).requires_grad_(true)
    };
    let dims = |last: [usize; 2], shared: bool| -> Vec<usize> {
        let mut b = c.batch.clone();
        if shared && !b.is_empty() {
            b[0] = 1;
        }
        b.into_iter().chain(last).collect()
    };
    let (q, k, v) = (leaf(dims([c.l, c.e], false)), leaf(dims([c.s, c.e], c.shared_kv)), leaf(dims([c.s, c.ev], c.shared_kv)));
    // q transposed in storage now and then: the primitive reads strided views
    let q_in = if c.seed.is_multiple_of(2) && c.l > 1 && c.e > 1 { q.transpose(-2, -1).contiguous().transpose(-2, -1) } else { q.clone() };
    let mask: Option<Tensor<B>> = match c.mask {
        2 => {
            let keep: Vec<f64> =
                (0..c.l * c.s).map(|i| if i < c.s || !(i * 7 + c.seed as usize).is_multiple_of(3) { 1.0 } else { 0.0 }).collect();
            Some(Tensor::<B>::from_vec(keep, [c.l, c.s]).gt_scalar(0.5))
        }
        3 => {
            let m: Vec<f64> =
                (0..c.l * c.s).map(|i| if i % 5 == 4 { f64::NEG_INFINITY } else { ((i * 13) % 7) as f64 * 0.3 - 1.0 }).collect();
            Some(Tensor::<B>::from_vec(m, [c.l, c.s]).to_dtype(dtype))
        }
        4 => {
            let m: Vec<f64> = (0..c.s).map(|j| if j % 3 == 2 { f64::NEG_INFINITY } else { 0.0 }).collect();
            Some(Tensor::<B>::from_vec(m, [c.s]).to_dtype(dtype))
        }
        _ => None,
    };
    let o = SdpaOptions { attn_mask: mask.as_ref(), is_causal: c.mask == 1, ..Default::default() };
    let run = |fused: bool| -> Result<(Vec<f64>, Vec<Vec<f64>>)> {
        let y = if fused {
            try_scaled_dot_product_attention(&q_in, &k, &v, o)?
        } else {
            try_scaled_dot_product_attention_math(&q_in, &k, &v, o)?
        };
        let w = Tensor::<B>::from_vec((0..y.numel()).map(|i| ((i % 11) as f64) * 0.2 - 1.0).collect(), y.dims().to_vec()).to_dtype(dtype);
        let grads = autograd_tensor::autograd::grad(&[y.mul(&w).sum()], &[q.clone(), k.clone(), v.clone()], None, Default::default())?;
        Ok((y.to_vec_f64(), grads.into_iter().map(|g| g.map(|g| g.to_vec_f64()).unwrap_or_default()).collect()))
    };
    let ((y, g), (ym, gm)) = (run(true).map_err(|e| e.to_string())?, run(false).map_err(|e| e.to_string())?);
    let tol = if c.f32 { 1e-5 } else { 1e-12 };
    close(&y, &ym, tol, "out")?;
    for (n, (a, b)) in g.iter().zip(&gm).enumerate() {
        close(a, b, 10.0 * tol, ["dq", "dk", "dv"][n])?;
    }
    Ok(())
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let size = prop_oneof![Just(0usize), 1usize..6, 60usize..70, 125usize..135, Just(200)];
    (
        prop::collection::vec(1usize..4, 0..3),
        size.clone(),
        size,
        prop_oneof![Just(1usize), Just(7), Just(16), Just(32)],
        prop_oneof![Just(1usize), Just(5), Just(32), Just(33)],
        0u8..5,
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(batch, l, s, e, ev, mask, f32, shared_kv, seed)| Case { batch, l, s, e, ev, mask, f32, shared_kv, seed })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn fused_matches_the_math_path_on_cpu(c in case_strategy()) {
        run_case::<Cpu>(&c).map_err(|e| TestCaseError::fail(format!("{c:?}: {e}")))?;
    }
}

/// A fixed set of cases on every backend (the reference's composite
/// default, the CPU's kernel, a recording of it).
fn seeded_cases<B: Backend>() {
    let cases = [
        Case { batch: vec![2, 3], l: 65, s: 130, e: 16, ev: 32, mask: 1, f32: false, shared_kv: true, seed: 2 },
        Case { batch: vec![2], l: 7, s: 129, e: 7, ev: 5, mask: 2, f32: true, shared_kv: false, seed: 3 },
        Case { batch: vec![], l: 64, s: 64, e: 32, ev: 33, mask: 3, f32: false, shared_kv: false, seed: 4 },
        Case { batch: vec![3], l: 130, s: 5, e: 1, ev: 1, mask: 4, f32: true, shared_kv: true, seed: 5 },
        Case { batch: vec![2], l: 0, s: 9, e: 4, ev: 4, mask: 0, f32: false, shared_kv: false, seed: 6 },
        Case { batch: vec![2], l: 9, s: 0, e: 4, ev: 4, mask: 1, f32: false, shared_kv: false, seed: 7 },
        // no query width (every score 0, the scale infinite) and no value width
        Case { batch: vec![2], l: 9, s: 7, e: 0, ev: 3, mask: 2, f32: false, shared_kv: false, seed: 8 },
        Case { batch: vec![], l: 5, s: 6, e: 3, ev: 0, mask: 0, f32: true, shared_kv: false, seed: 9 },
    ];
    for c in &cases {
        run_case::<B>(c).unwrap_or_else(|e| panic!("{c:?}: {e}"));
    }
}

/// The node PyTorch names, and the cases that keep the math path: dropout
/// of every weight, a mask that needs a gradient.
fn which_path<B: Backend>() {
    let x = Tensor::<B>::randn([2, 4, 8]).requires_grad_(true);
    let y = try_scaled_dot_product_attention(&x, &x, &x, SdpaOptions { is_causal: true, ..Default::default() }).unwrap();
    assert_eq!(y.grad_fn().map(|f| f.name()), Some("ScaledDotProductFlashAttentionBackward0"));
    let dropped = try_scaled_dot_product_attention(&x, &x, &x, SdpaOptions { dropout_p: 0.5, ..Default::default() }).unwrap();
    assert_eq!(dropped.grad_fn().map(|f| f.name()), Some("ScaledDotProductFlashAttentionBackward0"));
    // p = 1 drops every weight: the math path's zeros, no kernel
    let all = try_scaled_dot_product_attention(&x, &x, &x, SdpaOptions { dropout_p: 1.0, ..Default::default() }).unwrap();
    assert_ne!(all.grad_fn().map(|f| f.name()), Some("ScaledDotProductFlashAttentionBackward0"));
    assert!(all.to_vec_f64().iter().all(|&y| y == 0.0));
    let m = Tensor::<B>::zeros([4, 4]).requires_grad_(true);
    let masked = try_scaled_dot_product_attention(&x, &x, &x, SdpaOptions { attn_mask: Some(&m), ..Default::default() }).unwrap();
    assert_ne!(masked.grad_fn().map(|f| f.name()), Some("ScaledDotProductFlashAttentionBackward0"));
    // and the mask still gets its gradient there
    masked.sum().backward().unwrap();
    assert!(m.grad().is_some());
}

/// A query whose every key is masked: a zero row and zero gradients, as
/// PyTorch's `_safe_softmax`; the others as the math path.
fn fully_masked_queries<B: Backend>() {
    let x = Tensor::<B>::from_vec((0..24).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<f64>>(), [3, 8]).requires_grad_(true);
    let keep = Tensor::<B>::from_vec(vec![0.0f64, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0], [3, 3]).gt_scalar(0.5);
    let y = try_scaled_dot_product_attention(&x, &x, &x, SdpaOptions { attn_mask: Some(&keep), ..Default::default() }).unwrap();
    assert_eq!(&y.to_vec::<f64>()[..8], &[0.0; 8]);
    y.sum().backward().unwrap();
    let g = x.grad().unwrap().to_vec::<f64>();
    assert!(g.iter().all(|v| v.is_finite()));
    let ym = try_scaled_dot_product_attention_math(&x, &x, &x, SdpaOptions { attn_mask: Some(&keep), ..Default::default() }).unwrap();
    close(&y.to_vec_f64(), &ym.to_vec_f64(), 1e-12, "out").unwrap();
}

/// Finite differences through the fused node (first and second order;
/// the second recomputes the math path under `create_graph`), with k and
/// v broadcast over heads and a Bool mask.
fn derivatives<B: Backend>() {
    let leaf = |dims: &[usize], seed: u64| {
        let n: usize = dims.iter().product();
        let mut g = autograd_core::rng::Generator::new(seed);
        Tensor::<B>::from_vec((0..n).map(|_| g.normal()).collect::<Vec<f64>>(), dims.to_vec()).requires_grad_(true)
    };
    let (q, k, v) = (leaf(&[2, 2, 3, 4], 1), leaf(&[2, 1, 5, 4], 2), leaf(&[2, 1, 5, 3], 3));
    let mask = Tensor::<B>::from_vec((0..15).map(|i| if i % 4 == 1 { 0.0 } else { 1.0 }).collect::<Vec<f64>>(), [3, 5]).gt_scalar(0.5);
    let f = |x: &[Tensor<B>]| {
        try_scaled_dot_product_attention(
            &x[0],
            &x[1],
            &x[2],
            SdpaOptions { attn_mask: Some(&mask), scale: Some(0.7), ..Default::default() },
        )
        .unwrap()
    };
    assert_eq!(f(&[q.clone(), k.clone(), v.clone()]).grad_fn().map(|f| f.name()), Some("ScaledDotProductFlashAttentionBackward0"));
    gradcheck(f, &[q.clone(), k.clone(), v.clone()], 1e-6, 1e-8, 1e-6).unwrap();
    let causal = |x: &[Tensor<B>]| {
        try_scaled_dot_product_attention(&x[0], &x[1], &x[2], SdpaOptions { is_causal: true, ..Default::default() }).unwrap()
    };
    gradgradcheck(causal, &[q, k, v], 1e-6, 1e-7, 1e-5).unwrap();
}

/// Dropout inside the fused node: the same function as the math path with
/// the mask the seed gives (values and gradients at 1e-12 in f64), drawn
/// from the library's generator (reproducible with `manual_seed`, new on
/// every call), keeping `1 - p` of the weights, with finite-difference
/// first and second derivatives for a fixed seed. On this thread's own
/// generator: the backends' copies of this test run in parallel, and a
/// draw of another thread between a `manual_seed` and the call it seeds
/// would change the mask.
fn dropout<B: Backend>() {
    autograd_tensor::with_own_generator(dropout_on_this_thread::<B>);
}

fn dropout_on_this_thread<B: Backend>() {
    use autograd_core::attention::Dropout;
    let leaf = |dims: &[usize], seed: u64| {
        let n: usize = dims.iter().product();
        let mut g = autograd_core::rng::Generator::new(seed);
        Tensor::<B>::from_vec((0..n).map(|_| g.normal()).collect::<Vec<f64>>(), dims.to_vec()).requires_grad_(true)
    };
    let (b, h, l, s, e) = (2usize, 3usize, 70usize, 70usize, 8usize);
    let (q, k, v) = (leaf(&[b, h, l, e], 1), leaf(&[b, h, s, e], 2), leaf(&[b, h, s, 5], 3));
    let p = 0.3;
    let o = SdpaOptions { dropout_p: p, is_causal: true, ..Default::default() };
    autograd_tensor::manual_seed(42);
    let y = try_scaled_dot_product_attention(&q, &k, &v, o).unwrap();
    assert_eq!(y.grad_fn().map(|f| f.name()), Some("ScaledDotProductFlashAttentionBackward0"));
    // the mask by hand: the seed is the call's first draw after the seeding
    autograd_tensor::manual_seed(42);
    let draw = Tensor::<B>::rand_dtype([2], DType::F64).to_vec::<f64>();
    let d = Dropout::new(p, [draw[0], draw[1]]).unwrap();
    let scales: Vec<f64> =
        (0..b * h).flat_map(|bi| (0..l).flat_map(move |i| (0..s).map(move |j| d.scale_at(Dropout::index(bi, i, j, l, s))))).collect();
    let keep = Tensor::<B>::from_vec(scales, [b, h, l, s]);
    let causal =
        Tensor::<B>::from_vec((0..l * s).map(|x| if x % s <= x / s { 0.0 } else { f64::NEG_INFINITY }).collect::<Vec<f64>>(), [l, s]);
    let by_hand =
        q.try_mul_scalar(1.0 / (e as f64).sqrt()).unwrap().matmul(&k.transpose(-2, -1)).add(&causal).softmax(-1).mul(&keep).matmul(&v);
    close(&y.to_vec_f64(), &by_hand.to_vec_f64(), 1e-12, "out with dropout").unwrap();
    let w = Tensor::<B>::from_vec((0..y.numel()).map(|i| ((i % 7) as f64) * 0.3 - 1.0).collect::<Vec<f64>>(), y.dims().to_vec());
    let grads = |t: &Tensor<B>| {
        autograd_tensor::autograd::grad(&[t.mul(&w).sum()], &[q.clone(), k.clone(), v.clone()], None, Default::default()).unwrap()
    };
    for (n, (a, c)) in grads(&y).into_iter().zip(grads(&by_hand)).enumerate() {
        close(&a.unwrap().to_vec_f64(), &c.unwrap().to_vec_f64(), 1e-12, ["dq", "dk", "dv"][n]).unwrap();
    }
    // reproducible, and a new mask per call
    autograd_tensor::manual_seed(42);
    let again = try_scaled_dot_product_attention(&q, &k, &v, o).unwrap();
    assert_eq!(again.to_vec_f64(), y.to_vec_f64());
    let next = try_scaled_dot_product_attention(&q, &k, &v, o).unwrap();
    assert_ne!(next.to_vec_f64(), y.to_vec_f64());
    // uniform weights over S keys and values of ones: each output is
    // (kept keys) / (S (1 - p)), so the fraction kept is read off it
    let (n, s1) = (4 * 50, 50usize);
    let zeros = Tensor::<B>::zeros_dtype([n, s1, 4], DType::F64);
    let ones = Tensor::<B>::ones([n, s1, 1]).to_dtype(DType::F64);
    let y = try_scaled_dot_product_attention(&zeros, &zeros, &ones, SdpaOptions { dropout_p: p, ..Default::default() }).unwrap();
    let counts: Vec<f64> = y.to_vec_f64().iter().map(|y| y * s1 as f64 * (1.0 - p)).collect();
    assert!(counts.iter().all(|c| (c - c.round()).abs() < 1e-9), "a whole number of keys kept per query");
    let kept = counts.iter().sum::<f64>() / (n * s1 * s1) as f64;
    // 500,000 weights: one standard deviation of the fraction is 0.00065
    assert!((kept - (1.0 - p)).abs() < 0.004, "kept {kept} of the weights, want {}", 1.0 - p);
    // derivatives for one seed: every evaluation draws the same mask
    let (q, k, v) = (leaf(&[2, 3, 4], 4), leaf(&[2, 5, 4], 5), leaf(&[2, 5, 3], 6));
    let f = |x: &[Tensor<B>]| {
        autograd_tensor::manual_seed(9);
        try_scaled_dot_product_attention(&x[0], &x[1], &x[2], SdpaOptions { dropout_p: 0.4, ..Default::default() }).unwrap()
    };
    gradcheck(f, &[q.clone(), k.clone(), v.clone()], 1e-6, 1e-8, 1e-6).unwrap();
    gradgradcheck(f, &[q, k, v], 1e-6, 1e-7, 1e-5).unwrap();
}

/// The fused node keeps O(L) per query row, not the `L x S` attention
/// matrix the math path saves: the bytes alive after a forward with
/// `L = S = 512`, 4 heads, f32.
#[test]
fn the_fused_node_keeps_no_score_matrix() {
    let x = Tensor::<Cpu>::randn([4, 512, 32]).requires_grad_(true);
    let o = SdpaOptions { is_causal: true, ..Default::default() };
    // counted on this thread's own counters: other tests run beside this one
    let kept = |f: &dyn Fn() -> Tensor<Cpu>| {
        let counters = autograd_core::memory::Counters::leak();
        let y = autograd_core::memory::with_counters(counters, f);
        let live = counters.stats().live_bytes;
        drop(y);
        live
    };
    let fused = kept(&|| try_scaled_dot_product_attention(&x, &x, &x, o).unwrap());
    let math = kept(&|| try_scaled_dot_product_attention_math(&x, &x, &x, o).unwrap());
    let scores = 4 * 512 * 512 * 4;
    // the output (256 KiB) and the log-sum-exp; the math path keeps at least the probabilities
    assert!(fused < 4 * 512 * 32 * 4 + 4 * 512 * 4 + 4096, "fused kept {fused} bytes");
    assert!(math >= scores, "math kept {math} bytes");
}

autograd_testkit::for_backends!(with_traced: seeded_cases, which_path, fully_masked_queries, derivatives, dropout);
