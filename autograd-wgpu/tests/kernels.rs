//! The WGSL kernels against the reference backend on shapes, strides,
//! offsets and broadcasts chosen by proptest, special values (NaN, +-inf,
//! -0, huge and tiny), grids past 65,535 workgroups, reads of queued work,
//! the buffer pool's counters, and which primitives stay off the host path.

use autograd_core::rng::Generator;
use autograd_core::{Backend, BinaryOp, DType, HostData, Layout, RefBackend, Shape, UnaryOp};
use autograd_testkit::backend_available;
use autograd_testkit::conformance::{assert_close, random_view};
use autograd_wgpu::Wgpu;
use proptest::prelude::*;

/// Inputs every unary formula must get right: NaN, infinities, signed
/// zeros, subnormal and huge values, values either side of erf's clamp.
const SPECIAL: [f32; 14] =
    [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 3.95, -3.95, 20.0, -20.0, 0.5];

fn unary_op(i: usize) -> UnaryOp {
    UnaryOp::ALL[i % UnaryOp::ALL.len()]
}

fn device_vs_reference_unary(op: UnaryOp, data: HostData, l: &Layout) {
    let out = Layout::contiguous(l.shape().clone());
    let got = Wgpu::to_host(&Wgpu::unary(op, &Wgpu::from_host(data.clone()), l).unwrap(), &out).unwrap();
    let want = RefBackend::to_host(&RefBackend::unary(op, &RefBackend::from_host(data), l).unwrap(), &out).unwrap();
    // WGSL's exp/log/tanh/sin are within a few ulp, not the host's
    assert_close(&got, &want, 2e-5, &format!("{op:?}"));
}

#[test]
fn unary_special_values() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let l = Layout::contiguous(Shape::from([SPECIAL.len()]));
    for &op in UnaryOp::ALL.iter().chain(&[UnaryOp::Powf(-2.0), UnaryOp::Powf(2.5), UnaryOp::Powf(7.0), UnaryOp::Powf(0.0)]) {
        device_vs_reference_unary(op, HostData::from(SPECIAL.to_vec()), &l);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn unary_matches(dims in prop::collection::vec(0usize..7, 0..5), seed in any::<u64>(), op in 0usize..64) {
        if backend_available::<Wgpu>() {
            let (data, l) = random_view(&mut Generator::new(seed), &Shape::new(dims), DType::F32);
            device_vs_reference_unary(unary_op(op), data, &l);
        }
    }

    #[test]
    fn broadcast_binary_matches(dims in prop::collection::vec(0usize..6, 0..5), keep_a in any::<u8>(), keep_b in any::<u8>(), seed in any::<u64>(), op in 0usize..64) {
        if backend_available::<Wgpu>() {
            let op = BinaryOp::ALL[op % BinaryOp::ALL.len()];
            let out = Shape::new(dims.clone());
            let operand = |keep: u8| Shape::new(dims.iter().enumerate().map(|(i, &d)| if keep >> i & 1 == 1 { d } else { 1 }).skip((keep >> 6) as usize % (dims.len() + 1)).collect());
            let mut g = Generator::new(seed);
            let (da, la) = random_view(&mut g, &operand(keep_a), DType::F32);
            let (db, lb) = random_view(&mut g, &operand(keep_b), DType::F32);
            let (la, lb) = (la.broadcast_as(&out).unwrap(), lb.broadcast_as(&out).unwrap());
            let lo = Layout::contiguous(out);
            let got = Wgpu::binary(op, &Wgpu::from_host(da.clone()), &la, &Wgpu::from_host(db.clone()), &lb).unwrap();
            let want = RefBackend::binary(op, &RefBackend::from_host(da), &la, &RefBackend::from_host(db), &lb).unwrap();
            assert_close(&Wgpu::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), 2e-5, &format!("{op:?}"));
        }
    }

    #[test]
    fn matmul_matches(m in 0usize..100, k in 0usize..70, n in 0usize..100, batch in 0usize..3, seed in any::<u64>()) {
        if backend_available::<Wgpu>() {
            let b: Vec<usize> = vec![2; batch];
            let sa = Shape::new(b.iter().copied().chain([m, k]).collect());
            let sb = Shape::new(b.iter().copied().chain([k, n]).collect());
            let mut g = Generator::new(seed);
            let (da, la) = random_view(&mut g, &sa, DType::F32);
            let (db, lb) = random_view(&mut g, &sb, DType::F32);
            let lo = Layout::contiguous(Shape::new(b.iter().copied().chain([m, n]).collect()));
            let got = Wgpu::matmul(&Wgpu::from_host(da.clone()), &la, &Wgpu::from_host(db.clone()), &lb).unwrap();
            let want = RefBackend::matmul(&RefBackend::from_host(da), &la, &RefBackend::from_host(db), &lb).unwrap();
            assert_close(&Wgpu::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), 1e-4, "matmul");
        }
    }

    /// `addmm` in one kernel gives the composite's bits (the product, then
    /// `c + y`) on both kernels (small outputs and 64 x 64 blocks), for a
    /// bias broadcast over rows and batches or a whole strided `c`.
    #[test]
    fn addmm_is_the_composite_bit_for_bit(m in 0usize..90, k in 0usize..40, n in 0usize..90, batch in 0usize..3, whole in any::<bool>(), seed in any::<u64>()) {
        if backend_available::<Wgpu>() {
            let b: Vec<usize> = vec![2; batch];
            let out = Shape::new(b.iter().copied().chain([m, n]).collect());
            let mut g = Generator::new(seed);
            let (da, la) = random_view(&mut g, &Shape::new(b.iter().copied().chain([m, k]).collect()), DType::F32);
            let (db, lb) = random_view(&mut g, &Shape::new(b.iter().copied().chain([k, n]).collect()), DType::F32);
            let (dc, lc) = if whole {
                random_view(&mut g, &out, DType::F32)
            } else {
                let (d, l) = random_view(&mut g, &Shape::from([n]), DType::F32);
                (d, l.broadcast_as(&out).unwrap())
            };
            let lo = Layout::contiguous(out.clone());
            let (a, bb, c) = (Wgpu::from_host(da), Wgpu::from_host(db), Wgpu::from_host(dc));
            let got = Wgpu::addmm(&c, &lc, &a, &la, &bb, &lb).unwrap();
            let y = Wgpu::matmul(&a, &la, &bb, &lb).unwrap();
            let want = Wgpu::binary(BinaryOp::Add, &c, &lc, &y, &lo).unwrap();
            prop_assert_eq!(Wgpu::to_host(&got, &lo).unwrap(), Wgpu::to_host(&want, &lo).unwrap());
        }
    }
}

/// An output of 65,535 x 256 + 300 elements needs a second row of
/// workgroups; every element, the last ones included, is computed.
#[test]
fn grids_past_one_dimension() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let n = 65_535 * 256 + 300;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 - 500.0).collect();
    let l = Layout::contiguous(Shape::from([n]));
    let y = Wgpu::to_host(&Wgpu::unary(UnaryOp::Relu, &Wgpu::from_host(HostData::from(x.clone())), &l).unwrap(), &l).unwrap();
    let HostData::F32(y) = y else { panic!("f32 out") };
    assert!(y.iter().zip(&x).all(|(&a, &b)| a == b.max(0.0)));
    // a batch of 70,000 products: past the grid's third dimension too
    let nb = 70_000;
    let a = Layout::contiguous(Shape::from([nb, 1, 2]));
    let b = Layout::contiguous(Shape::from([nb, 2, 1]));
    let va: Vec<f32> = (0..2 * nb).map(|i| (i % 7) as f32).collect();
    let out = Wgpu::matmul(&Wgpu::from_host(HostData::from(va.clone())), &a, &Wgpu::from_host(HostData::from(va.clone())), &b).unwrap();
    let HostData::F32(out) = Wgpu::to_host(&out, &Layout::contiguous(Shape::from([nb, 1, 1]))).unwrap() else { panic!("f32 out") };
    assert!(out.iter().enumerate().all(|(i, &v)| v == va[2 * i] * va[2 * i] + va[2 * i + 1] * va[2 * i + 1]));
}

/// The distance from `got` to `want` in units in the last place of `want`
/// (f32; NaN to NaN and equal infinities are 0).
fn ulps(got: f32, want: f32) -> f64 {
    if got.is_nan() && want.is_nan() || got == want {
        return 0.0;
    }
    if !got.is_finite() || !want.is_finite() {
        return f64::INFINITY;
    }
    let e = if want == 0.0 { -126 } else { (want.abs() as f64).log2().floor().max(-126.0) as i32 };
    (got as f64 - want as f64).abs() / 2f64.powi(e - 23)
}

/// `sin` and `cos` on the device reduce any f32 argument exactly: within
/// two ulps of the host's libm (the CPU backend's) on a sweep through
/// [-50, 50], beside multiples of pi/2 (where the reduction cancels the
/// most), on 200,000 random bit patterns up to 3.4e38, and at the special
/// values; `sin(-0)` is -0.
#[test]
fn sin_and_cos_reduce_any_argument() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let mut xs: Vec<f32> = (-50_000..=50_000).map(|i| i as f32 * 1e-3).collect();
    let ks = (1..20_000u64).chain((24..120).map(|j| 3u64 << (j / 2)).filter(|&k| k < 1 << 62));
    for k in ks {
        let c = (k as f64 * std::f64::consts::FRAC_PI_2) as f32;
        xs.extend((-3i32..=3).map(|d| f32::from_bits(c.to_bits().wrapping_add_signed(d))));
    }
    let mut g = Generator::new(17);
    xs.extend((0..200_000).map(|_| f32::from_bits(g.next_u64() as u32)).filter(|x| x.is_finite()));
    xs.extend([
        0.0,
        -0.0,
        1e-40,
        -1e-45,
        1e-20,
        f32::MAX,
        -f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        std::f32::consts::FRAC_PI_4,
        f32::from_bits(std::f32::consts::FRAC_PI_4.to_bits() + 1),
    ]);
    let l = Layout::contiguous(Shape::from([xs.len()]));
    let x = Wgpu::from_host(HostData::from(xs.clone()));
    for (op, f) in [(UnaryOp::Sin, f32::sin as fn(f32) -> f32), (UnaryOp::Cos, f32::cos)] {
        let HostData::F32(got) = Wgpu::to_host(&Wgpu::unary(op, &x, &l).unwrap(), &l).unwrap() else { panic!("f32 out") };
        let (worst, at) = xs.iter().zip(&got).map(|(&x, &y)| (ulps(y, f(x)), x)).fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
        assert!(worst <= 2.0, "{op:?}: {worst} ulps at {at:e} (got {}, want {})", op_at(&xs, &got, at), f(at));
    }
    let z = Wgpu::from_host(HostData::from(vec![-0.0f32]));
    let one = Layout::contiguous(Shape::from([1]));
    let HostData::F32(s) = Wgpu::to_host(&Wgpu::unary(UnaryOp::Sin, &z, &one).unwrap(), &one).unwrap() else { panic!("f32 out") };
    assert_eq!(s[0].to_bits(), (-0.0f32).to_bits());
}

/// The device's value at the first input equal to `at`.
fn op_at(xs: &[f32], got: &[f32], at: f32) -> f32 {
    xs.iter().position(|&x| x.to_bits() == at.to_bits()).map_or(f32::NAN, |i| got[i])
}

/// A chain of queued kernels read back at once gives the last value; the
/// inputs' buffers return to the pool when dropped; none of these
/// primitives took the host path.
#[test]
fn queued_reads_pool_and_device_paths() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let l = Layout::contiguous(Shape::from([1000]));
    let hosted = |name: &str| autograd_wgpu::host_calls().iter().find(|(n, _)| *n == name).map_or(0, |(_, c)| *c);
    let before: Vec<u64> = ["unary", "binary", "matmul", "full"].iter().map(|n| hosted(n)).collect();
    // this test's own counters: other tests allocate and free in parallel
    let mine = autograd_core::memory::Counters::leak();
    autograd_core::memory::with_counters(mine, || {
        let mut x = Wgpu::full(l.shape(), 1.0, DType::F32).unwrap();
        for _ in 0..50 {
            x = Wgpu::binary(BinaryOp::Add, &x, &l, &x, &l).unwrap();
            x = Wgpu::unary(UnaryOp::Sqrt, &x, &l).unwrap();
        }
        // x_{k+1} = sqrt(2 x_k) from 1 tends to 2
        let HostData::F32(v) = Wgpu::to_host(&x, &l).unwrap() else { panic!("f32 out") };
        assert!(v.iter().all(|&e| (e - 2.0).abs() < 1e-6), "{}", v[0]);
        assert_eq!(mine.stats().device_bytes, 4000, "x's buffer, the others dropped");
    });
    let s = mine.stats();
    assert_eq!((s.device_bytes, s.live_bytes, s.live_buffers), (0, 0, 0), "every buffer given back");
    assert!(s.peak_bytes >= 8000, "two buffers were live at once: {}", s.peak_bytes);
    assert!(autograd_wgpu::memory::pooled_bytes() > 0, "the pool holds what was freed");
    let after: Vec<u64> = ["unary", "binary", "matmul", "full"].iter().map(|n| hosted(n)).collect();
    assert_eq!(before, after, "f32 unary/binary/matmul/full ran on the host");
}

/// A layout that reads past its storage is an `Err` naming the op, never a
/// read the device would clamp into a wrong value.
#[test]
fn bad_layouts_are_errors() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let x = Wgpu::from_host(HostData::from(vec![1.0f32; 4]));
    let past = Layout::new(Shape::from([4]), vec![2], 0);
    assert!(Wgpu::unary(UnaryOp::Exp, &x, &past).is_err());
    let e = Wgpu::matmul(&x, &Layout::contiguous(Shape::from([2, 3])), &x, &Layout::contiguous(Shape::from([3, 1]))).unwrap_err();
    assert!(e.to_string().contains("matmul"), "{e}");
}
