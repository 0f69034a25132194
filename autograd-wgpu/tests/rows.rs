//! The row kernels (softmax and layer norm, forward and backward) against
//! the reference backend on random shapes, strides, offsets and dims (0-size
//! dims included), rows short enough for one invocation each and long
//! enough for the workgroup tree, grids past one dimension's limit, and the
//! values that make a row NaN; none of them takes the host path.

use autograd_core::rng::Generator;
use autograd_core::{Backend, DType, HostData, Layout, RefBackend, Shape};
use autograd_testkit::backend_available;
use autograd_testkit::conformance::{assert_close, random_view};
use autograd_wgpu::Wgpu;
use proptest::prelude::*;

fn host<B: Backend>(s: &B::Storage, shape: &Shape) -> HostData {
    B::to_host(s, &Layout::contiguous(shape.clone())).unwrap()
}

/// The shape of a layer norm's statistics: `shape` with its last `k` dims 1.
fn stats(shape: &Shape, k: usize) -> Shape {
    let r = shape.rank();
    Shape::new(shape.dims().iter().enumerate().map(|(d, &n)| if d >= r - k { 1 } else { n }).collect())
}

fn check_softmax(data: HostData, l: &Layout, dim: usize) {
    let got = host::<Wgpu>(&Wgpu::softmax(&Wgpu::from_host(data.clone()), l, dim).unwrap(), l.shape());
    let want = host::<RefBackend>(&RefBackend::softmax(&RefBackend::from_host(data), l, dim).unwrap(), l.shape());
    assert_close(&got, &want, 2e-6, &format!("softmax along {dim} of {:?}", l.dims()));
}

fn check_softmax_backward(g: &mut Generator, shape: &Shape, dim: usize, log: bool) {
    // y as a softmax gives it (positive, rows summing to about 1) or a log
    // softmax (its exponentials summing to at most about 1): the sums then
    // cancel no more than in training
    let (dy, ly) = random_view(g, shape, DType::F32);
    let n = shape.dims()[dim].max(1) as f64;
    let dy = HostData::from(dy.to_f64_vec().iter().map(|v| if log { -v.abs() - n.ln() } else { v.abs() / n } as f32).collect::<Vec<f32>>());
    let (dg, lg) = random_view(g, shape, DType::F32);
    let got = Wgpu::softmax_backward(&Wgpu::from_host(dy.clone()), &ly, &Wgpu::from_host(dg.clone()), &lg, dim, log).unwrap();
    let want = RefBackend::softmax_backward(&RefBackend::from_host(dy), &ly, &RefBackend::from_host(dg), &lg, dim, log).unwrap();
    let what = format!("softmax_backward (log {log}) along {dim} of {:?}", shape.dims());
    assert_close(&host::<Wgpu>(&got, shape), &host::<RefBackend>(&want, shape), 5e-6, &what);
}

fn check_layer_norm(g: &mut Generator, shape: &Shape, k: usize) {
    let (dx, lx) = random_view(g, shape, DType::F32);
    let (xhat, rstd) = Wgpu::layer_norm(&Wgpu::from_host(dx.clone()), &lx, k, 1e-5).unwrap();
    let (rx, rr) = RefBackend::layer_norm(&RefBackend::from_host(dx), &lx, k, 1e-5).unwrap();
    let what = format!("layer_norm over the last {k} dims of {:?}", shape.dims());
    let st = stats(shape, k);
    // a row of one element normalises to exactly 0 on both; long rows sum in another order
    assert_close(&host::<Wgpu>(&xhat, shape), &host::<RefBackend>(&rx, shape), 1e-5, &what);
    assert_close(&host::<Wgpu>(&rstd, &st), &host::<RefBackend>(&rr, &st), 1e-5, &what);
    // backward from a strided gradient and the forward's own xhat and rstd
    let (dg, lg) = random_view(g, shape, DType::F32);
    let (lxh, lst) = (Layout::contiguous(shape.clone()), Layout::contiguous(st.clone()));
    let got = Wgpu::layer_norm_backward(&Wgpu::from_host(dg.clone()), &lg, &xhat, &lxh, &rstd, &lst, k).unwrap();
    let want = RefBackend::layer_norm_backward(&RefBackend::from_host(dg), &lg, &rx, &lxh, &rr, &lst, k).unwrap();
    assert_close(&host::<Wgpu>(&got, shape), &host::<RefBackend>(&want, shape), 2e-5, &format!("{what}, backward"));
}

/// Rows past one workgroup's 256 invocations (each invocation folds a
/// strided share), rows of exactly the switch length, and 66,000 rows:
/// past the 65,535 workgroups of one grid dimension.
#[test]
fn long_rows_and_many_rows() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let mut g = Generator::new(5);
    for dims in [vec![3, 1000], vec![1000, 3], vec![2, 63, 5], vec![2, 64, 5], vec![4, 257], vec![9, 4097], vec![2, 5000]] {
        let shape = Shape::new(dims.clone());
        for dim in 0..dims.len() {
            let (data, l) = random_view(&mut g, &shape, DType::F32);
            check_softmax(data, &l, dim);
            check_softmax_backward(&mut g, &shape, dim, false);
            check_softmax_backward(&mut g, &shape, dim, true);
        }
        for k in 0..=dims.len() {
            check_layer_norm(&mut g, &shape, k);
        }
    }
    // one workgroup per row, 66,000 rows: every row of equal values is uniform
    let l = Layout::contiguous(Shape::from([66_000, 64]));
    let s = Wgpu::softmax(&Wgpu::full(l.shape(), 0.5, DType::F32).unwrap(), &l, 1).unwrap();
    let HostData::F32(v) = host::<Wgpu>(&s, l.shape()) else { panic!("f32 out") };
    assert!(v.iter().all(|&x| x == 1.0 / 64.0), "{:?}", v.iter().position(|&x| x != 1.0 / 64.0));
    let (xhat, rstd) = Wgpu::layer_norm(&Wgpu::full(l.shape(), 0.5, DType::F32).unwrap(), &l, 1, 0.25).unwrap();
    let HostData::F32(x) = host::<Wgpu>(&xhat, l.shape()) else { panic!("f32 out") };
    let HostData::F32(r) = host::<Wgpu>(&rstd, &Shape::from([66_000, 1])) else { panic!("f32 out") };
    assert!(x.iter().all(|&v| v == 0.0) && r.iter().all(|&v| v == 2.0), "constant rows: xhat 0, rstd 1 / sqrt(0 + 0.25)");
}

/// A NaN anywhere in a row, a row of `-inf` or one holding `+inf` makes
/// the row NaN; a `-inf` among finite values weighs 0. Layer norm of rows
/// of no elements gives NaN statistics (0 / 0), as the reference.
#[test]
fn special_values_and_empty_rows() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let rows = [[1.0, nan, 2.0, 3.0], [-inf; 4], [1.0, inf, 2.0, 3.0], [1.0, -inf, 2.0, 0.5]];
    for n in [4, 100] {
        // short rows run one invocation each, long ones a workgroup: pad the
        // rows to `n` with -inf, which changes none of the four answers
        let mut v: Vec<f32> = Vec::new();
        for r in &rows {
            v.extend(r);
            v.extend(std::iter::repeat_n(-inf, n - 4));
        }
        let l = Layout::contiguous(Shape::from([4, n]));
        check_softmax(HostData::from(v), &l, 1);
    }
    let mut g = Generator::new(1);
    for dims in [vec![3, 0], vec![0, 5], vec![2, 0, 3]] {
        let shape = Shape::new(dims.clone());
        for k in 0..=dims.len() {
            check_layer_norm(&mut g, &shape, k);
        }
        for dim in 0..dims.len() {
            let (data, l) = random_view(&mut g, &shape, DType::F32);
            check_softmax(data, &l, dim);
            check_softmax_backward(&mut g, &shape, dim, true);
        }
    }
    let calls = autograd_wgpu::host_calls();
    let on_host: Vec<_> = calls.iter().filter(|(n, _)| n.contains("softmax") || n.contains("layer_norm")).collect();
    assert!(on_host.is_empty(), "took the host path: {on_host:?}");
}

/// Bad operands are the call's `Err`, naming the op.
#[test]
fn bad_operands_are_errors() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let x = Wgpu::from_host(HostData::from(vec![1.0f32; 6]));
    let l = Layout::contiguous(Shape::from([2, 3]));
    assert!(Wgpu::softmax(&x, &l, 2).is_err());
    let e = Wgpu::layer_norm(&x, &l, 3, 1e-5).unwrap_err();
    assert!(e.to_string().contains("layer_norm"), "{e}");
    let wide = Layout::contiguous(Shape::from([2, 4]));
    let e = Wgpu::softmax(&x, &wide, 1).unwrap_err();
    assert!(e.to_string().contains("softmax"), "{e}");
    let rstd = Wgpu::from_host(HostData::from(vec![1.0f32; 2]));
    let e = Wgpu::layer_norm_backward(&x, &l, &x, &l, &rstd, &Layout::contiguous(Shape::from([1, 2])), 1).unwrap_err();
    assert!(e.to_string().contains("layer_norm_backward"), "{e}");
    let e = Wgpu::softmax_backward(&x, &l, &x, &wide, 1, false).unwrap_err();
    assert!(e.to_string().contains("softmax_backward"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn softmax_matches(mut dims in prop::collection::vec(0usize..9, 1..5), dim in 0usize..4, long in any::<bool>(), seed in any::<u64>()) {
        if backend_available::<Wgpu>() {
            let dim = dim % dims.len();
            if long {
                // rows for the workgroup tree
                dims[dim] = 60 + 37 * dims[dim];
            }
            let mut g = Generator::new(seed);
            let shape = Shape::new(dims);
            let (data, l) = random_view(&mut g, &shape, DType::F32);
            check_softmax(data, &l, dim);
            check_softmax_backward(&mut g, &shape, dim, false);
            check_softmax_backward(&mut g, &shape, dim, true);
        }
    }

    #[test]
    fn layer_norm_matches(mut dims in prop::collection::vec(0usize..12, 0..5), k in 0usize..5, long in any::<bool>(), seed in any::<u64>()) {
        if backend_available::<Wgpu>() {
            let k = k % (dims.len() + 1);
            if long && k > 0 {
                let last = dims.len() - 1;
                dims[last] = 60 + 37 * dims[last];
            }
            check_layer_norm(&mut Generator::new(seed), &Shape::new(dims), k);
        }
    }
}
