//! Property tests: the CPU backend equals the reference backend on shapes,
//! strides, offsets and broadcasts chosen by proptest (shrinking to a
//! minimal failing shape when one is found).

use autograd_core::rng::Generator;
use autograd_core::{Backend, BinaryOp, DType, Layout, ReduceOp, RefBackend, Shape, UnaryOp};
use autograd_cpu::Cpu;
use autograd_testkit::conformance::{assert_close, low_precision_ulp, random_view};
use proptest::prelude::*;

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..7, 0..5)
}

fn dtype_strategy() -> impl Strategy<Value = DType> {
    prop_oneof![Just(DType::F32), Just(DType::F64)]
}

fn tol(d: DType) -> f64 {
    if d == DType::F32 { 1e-5 } else { 1e-12 }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn unary_matches(dims in shape_strategy(), seed in any::<u64>(), dtype in dtype_strategy(), op in 0usize..6) {
        let op = [UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Relu, UnaryOp::Abs, UnaryOp::LeakyRelu(0.2)][op];
        let shape = Shape::new(dims);
        let (data, l) = random_view(&mut Generator::new(seed), &shape, dtype);
        let out = Layout::contiguous(shape);
        let got = Cpu::to_host(&Cpu::unary(op, &Cpu::from_host(data.clone()), &l).unwrap(), &out).unwrap();
        let want = RefBackend::to_host(&RefBackend::unary(op, &RefBackend::from_host(data), &l).unwrap(), &out).unwrap();
        assert_close(&got, &want, tol(dtype), "unary");
    }

    #[test]
    fn broadcast_binary_matches(dims in shape_strategy(), keep_a in any::<u8>(), keep_b in any::<u8>(), seed in any::<u64>(), dtype in dtype_strategy(), op in 0usize..4) {
        let op = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Maximum][op];
        let out = Shape::new(dims.clone());
        // Each operand turns some dims into 1 (bit i of keep_* decides) and may drop leading dims.
        let operand = |keep: u8| Shape::new(dims.iter().enumerate().map(|(i, &d)| if keep >> i & 1 == 1 { d } else { 1 }).skip((keep >> 6) as usize % (dims.len() + 1)).collect());
        let (sa, sb) = (operand(keep_a), operand(keep_b));
        let mut g = Generator::new(seed);
        let (da, la) = random_view(&mut g, &sa, dtype);
        let (db, lb) = random_view(&mut g, &sb, dtype);
        let (la, lb) = (la.broadcast_as(&out).unwrap(), lb.broadcast_as(&out).unwrap());
        let lo = Layout::contiguous(out);
        let got = Cpu::binary(op, &Cpu::from_host(da.clone()), &la, &Cpu::from_host(db.clone()), &lb).unwrap();
        let want = RefBackend::binary(op, &RefBackend::from_host(da), &la, &RefBackend::from_host(db), &lb).unwrap();
        assert_close(&Cpu::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), tol(dtype), "binary");
    }

    #[test]
    fn reduce_matches(dims in shape_strategy(), mask in any::<u8>(), seed in any::<u64>(), dtype in dtype_strategy(), op in 0usize..3) {
        let op = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min][op];
        let shape = Shape::new(dims.clone());
        let red: Vec<usize> = (0..dims.len()).filter(|i| mask >> i & 1 == 1).collect();
        let (data, l) = random_view(&mut Generator::new(seed), &shape, dtype);
        let lo = Layout::contiguous(Shape::new(dims.iter().enumerate().map(|(i, &d)| if red.contains(&i) { 1 } else { d }).collect()));
        let got = Cpu::reduce(op, &Cpu::from_host(data.clone()), &l, &red).unwrap();
        let want = RefBackend::reduce(op, &RefBackend::from_host(data), &l, &red).unwrap();
        assert_close(&Cpu::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), tol(dtype) * 10.0, "reduce");
    }

    #[test]
    fn layer_norm_backward_matches(dims in prop::collection::vec(0usize..7, 1..5), k in 1usize..4, seed in any::<u64>(), dtype in dtype_strategy()) {
        let k = k.min(dims.len());
        let shape = Shape::new(dims.clone());
        let mut kd = dims.clone();
        kd[dims.len() - k..].iter_mut().for_each(|d| *d = 1);
        let mut g = Generator::new(seed);
        let (dg, lg) = random_view(&mut g, &shape, dtype);
        let (dx, lx) = random_view(&mut g, &shape, dtype);
        let (dr, lr) = random_view(&mut g, &Shape::new(kd), dtype);
        let lo = Layout::contiguous(shape);
        let got = Cpu::layer_norm_backward(&Cpu::from_host(dg.clone()), &lg, &Cpu::from_host(dx.clone()), &lx, &Cpu::from_host(dr.clone()), &lr, k).unwrap();
        let want = RefBackend::layer_norm_backward(&RefBackend::from_host(dg), &lg, &RefBackend::from_host(dx), &lx, &RefBackend::from_host(dr), &lr, k).unwrap();
        assert_close(&Cpu::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), tol(dtype) * 10.0, "layer_norm_backward");
    }

    #[test]
    fn softmax_backward_matches(dims in prop::collection::vec(0usize..7, 1..5), dim in 0usize..4, log in any::<bool>(), seed in any::<u64>(), dtype in dtype_strategy()) {
        let dim = dim % dims.len();
        let shape = Shape::new(dims);
        let mut g = Generator::new(seed);
        let (dy, ly) = random_view(&mut g, &shape, dtype);
        let (dg, lg) = random_view(&mut g, &shape, dtype);
        let lo = Layout::contiguous(shape);
        let got = Cpu::softmax_backward(&Cpu::from_host(dy.clone()), &ly, &Cpu::from_host(dg.clone()), &lg, dim, log).unwrap();
        let want = RefBackend::softmax_backward(&RefBackend::from_host(dy), &ly, &RefBackend::from_host(dg), &lg, dim, log).unwrap();
        assert_close(&Cpu::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), tol(dtype) * 10.0, "softmax_backward");
    }

    #[test]
    fn matmul_matches(m in 1usize..40, k in 1usize..40, n in 1usize..40, batch in 0usize..3, seed in any::<u64>(), dtype in dtype_strategy()) {
        let b: Vec<usize> = vec![2; batch];
        let sa = Shape::new(b.iter().copied().chain([m, k]).collect());
        let sb = Shape::new(b.iter().copied().chain([k, n]).collect());
        let mut g = Generator::new(seed);
        let (da, la) = random_view(&mut g, &sa, dtype);
        let (db, lb) = random_view(&mut g, &sb, dtype);
        let lo = Layout::contiguous(Shape::new(b.iter().copied().chain([m, n]).collect()));
        let got = Cpu::matmul(&Cpu::from_host(da.clone()), &la, &Cpu::from_host(db.clone()), &lb).unwrap();
        let want = RefBackend::matmul(&RefBackend::from_host(da), &la, &RefBackend::from_host(db), &lb).unwrap();
        assert_close(&Cpu::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), tol(dtype) * 20.0, "matmul");
    }

    /// im2col and col2im on random windows over strided 1-, 2- and 3-d
    /// images (0-size batches, kernels larger than the padded input
    /// included): both backends give the same columns and images, or both
    /// an `Err`.
    #[test]
    fn unfold_and_fold_match(
        n in 0usize..3, c in 1usize..4, spatial in prop::collection::vec(1usize..8, 1..4),
        kernel in prop::collection::vec(1usize..5, 3), stride in prop::collection::vec(1usize..4, 3),
        dilation in prop::collection::vec(1usize..3, 3), pads in prop::collection::vec((0usize..3, 0usize..3), 3),
        seed in any::<u64>(), dtype in dtype_strategy(), pad_value in -2.0f64..2.0,
    ) {
        use autograd_core::window::Window;
        let r = spatial.len();
        let w = Window::new("unfold", &kernel[..r], &stride[..r], &pads[..r], &dilation[..r]).unwrap();
        let mut dims = vec![n, c];
        dims.extend_from_slice(&spatial);
        let mut g = Generator::new(seed);
        let (data, l) = random_view(&mut g, &Shape::new(dims), dtype);
        let got = Cpu::unfold(&Cpu::from_host(data.clone()), &l, &w, pad_value);
        let want = RefBackend::unfold(&RefBackend::from_host(data), &l, &w, pad_value);
        prop_assert_eq!(got.is_ok(), want.is_ok());
        let (Ok(got), Ok(want)) = (got, want) else { return Ok(()) };
        let positions = w.out_dims("unfold", &spatial).unwrap();
        let lcols = Layout::contiguous(Shape::from([n, c * w.kernel_numel(), positions.iter().product()]));
        let (hc, hr) = (Cpu::to_host(&got, &lcols).unwrap(), RefBackend::to_host(&want, &lcols).unwrap());
        prop_assert_eq!(&hc, &hr);
        // fold random columns, read through a strided view
        let (cols, lc) = random_view(&mut g, lcols.shape(), dtype);
        let lo = Layout::contiguous(Shape::new([n, c].into_iter().chain(spatial.iter().copied()).collect()));
        let got = Cpu::fold(&Cpu::from_host(cols.clone()), &lc, &w, &spatial).unwrap();
        let want = RefBackend::fold(&RefBackend::from_host(cols), &lc, &w, &spatial).unwrap();
        assert_close(&Cpu::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), tol(dtype), "fold");
    }

    /// bf16 and f16 products on both backends, strided and batched: within
    /// one low-precision ulp of the exact product of the rounded inputs plus
    /// the f32 accumulation bound `k 2^-24 sum |a_i b_i|`.
    #[test]
    fn low_precision_matmul_within_bound(m in 1usize..48, k in 1usize..200, n in 1usize..48, batch in 0usize..2, seed in any::<u64>(), bf in any::<bool>()) {
        let dtype = if bf { DType::BF16 } else { DType::F16 };
        let b: Vec<usize> = vec![2; batch];
        let nb = if batch == 1 { 2 } else { 1 };
        let sa = Shape::new(b.iter().copied().chain([m, k]).collect());
        let sb = Shape::new(b.iter().copied().chain([k, n]).collect());
        let mut g = Generator::new(seed);
        let (da, la) = random_view(&mut g, &sa, dtype);
        let (db, lb) = random_view(&mut g, &sb, dtype);
        let lo = Layout::contiguous(Shape::new(b.iter().copied().chain([m, n]).collect()));
        let av = RefBackend::to_host(&RefBackend::from_host(da.clone()), &la).unwrap().to_f64_vec();
        let bv = RefBackend::to_host(&RefBackend::from_host(db.clone()), &lb).unwrap().to_f64_vec();
        let got_cpu = Cpu::to_host(&Cpu::matmul(&Cpu::from_host(da.clone()), &la, &Cpu::from_host(db.clone()), &lb).unwrap(), &lo).unwrap();
        let got_ref = RefBackend::to_host(&RefBackend::matmul(&RefBackend::from_host(da.clone()), &la, &RefBackend::from_host(db.clone()), &lb).unwrap(), &lo).unwrap();
        prop_assert_eq!(got_cpu.dtype(), dtype);
        let mut results = vec![("cpu", got_cpu.to_f64_vec()), ("reference", got_ref.to_f64_vec())];
        // every low-precision kernel the CPU has, whether or not it was chosen
        if matches!(dtype, DType::BF16 | DType::F16) {
            results.extend(low_kernel_results(&da, &la, &db, &lb, None));
        }
        for (name, got) in results {
            for bi in 0..nb {
                for i in 0..m {
                    for j in 0..n {
                        let terms: Vec<f64> = (0..k).map(|p| av[bi * m * k + i * k + p] * bv[bi * k * n + p * n + j]).collect();
                        let exact: f64 = terms.iter().sum();
                        let bound = low_precision_ulp(exact, dtype) + k as f64 * 2f64.powi(-24) * terms.iter().map(|t| t.abs()).sum::<f64>();
                        let v = got[bi * m * n + i * n + j];
                        prop_assert!((v - exact).abs() <= bound, "{} {:?} [{}]({},{}): {} vs {}", name, dtype, bi, i, j, v, exact);
                    }
                }
            }
        }
    }
}

// The per-instruction-set kernels against each other, in this binary
// rather than one of their own (each test binary is a full release link).
#[path = "kernels/simd_dispatch.rs"]
mod simd_dispatch;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// bf16 and f16 unary and binary ops, which run chunk by chunk
    /// (`src/low_elementwise.rs`), give the bits of the whole-buffer rule:
    /// the inputs cast to f32, the f32 op on the same backend, the result
    /// cast back. Every op of `UnaryOp::ALL` and `BinaryOp::ALL`, on
    /// strided views whose sizes cross the 512-element chunks (and, with
    /// the 70,000-element case, the split over threads).
    #[test]
    fn low_precision_elementwise_is_its_f32_op_rounded(
        dims in prop::sample::select(vec![vec![0usize, 3], vec![1], vec![511], vec![2, 256], vec![3, 171], vec![7, 150], vec![70_000]]),
        seed in any::<u64>(), bf in any::<bool>(),
    ) {
        let dtype = if bf { DType::BF16 } else { DType::F16 };
        let shape = Shape::new(dims);
        let mut g = Generator::new(seed);
        let (da, la) = random_view(&mut g, &shape, dtype);
        let (db, lb) = random_view(&mut g, &shape, dtype);
        let lo = Layout::contiguous(shape.clone());
        let (a, b) = (Cpu::from_host(da), Cpu::from_host(db));
        let wide = |s, l: &Layout| Cpu::cast(s, l, DType::F32).unwrap();
        let (wa, wb) = (wide(&a, &la), wide(&b, &lb));
        let bits = |s| Cpu::to_host(&s, &lo).unwrap().to_f64_vec().into_iter().map(f64::to_bits).collect::<Vec<_>>();
        for &op in UnaryOp::ALL {
            let got = Cpu::unary(op, &a, &la).unwrap();
            let want = Cpu::cast(&Cpu::unary(op, &wa, &lo).unwrap(), &lo, dtype).unwrap();
            prop_assert_eq!(bits(got), bits(want), "{:?} {:?}", op, dtype);
        }
        for &op in BinaryOp::ALL {
            let got = Cpu::binary(op, &a, &la, &b, &lb).unwrap();
            let want = Cpu::cast(&Cpu::binary(op, &wa, &lo, &wb, &lo).unwrap(), &lo, dtype).unwrap();
            prop_assert_eq!(bits(got), bits(want), "{:?} {:?}", op, dtype);
        }
    }

    /// bf16 reductions over leading axes (Linear's bias gradient), which
    /// widen each element as they read it, give the bits of the f32
    /// reduction of the widened tensor rounded once: sums past the 32-row
    /// leaves of the pairwise order, maxima and minima, NaN planted, and
    /// (the 300 x 2,000 case) the split over threads by columns.
    #[test]
    fn bf16_column_reductions_are_the_widened_reduction_rounded(
        dims in prop::sample::select(vec![vec![1usize, 2], vec![33, 5], vec![2, 70, 3], vec![4, 9, 600], vec![300, 2000], vec![5, 0], vec![0, 5]]),
        leading in 1usize..3, op in 0usize..3, nan in any::<bool>(), seed in any::<u64>(),
    ) {
        let op = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min][op];
        let red: Vec<usize> = (0..leading.min(dims.len() - 1)).collect();
        let shape = Shape::new(dims);
        let mut g = Generator::new(seed);
        let n = shape.numel();
        let data: Vec<half::bf16> = (0..n).map(|i| if nan && i == n / 3 { half::bf16::NAN } else { half::bf16::from_f64(g.normal() * 100.0) }).collect();
        let l = Layout::contiguous(shape.clone());
        let x = Cpu::from_host(autograd_core::HostData::BF16(data));
        let lo = Layout::contiguous(Shape::new(shape.dims()[red.len()..].to_vec()));
        let got = Cpu::reduce(op, &x, &l, &red).unwrap();
        let want = Cpu::cast(&Cpu::reduce(op, &Cpu::cast(&x, &l, DType::F32).unwrap(), &l, &red).unwrap(), &lo, DType::BF16).unwrap();
        let bits = |s| Cpu::to_host(&s, &lo).unwrap().to_f64_vec().into_iter().map(f64::to_bits).collect::<Vec<_>>();
        prop_assert_eq!(bits(got), bits(want), "{:?} over {:?} of {:?}", op, red, shape);
    }

    /// Casts between f32 and bf16 or f16 (autocast's weight casts and
    /// their gradients' widening), converted in runs over a pool of three
    /// threads from 65,536 elements on, give the reference backend's bits:
    /// any f32 bit pattern (NaN payloads, infinities, subnormals, ties),
    /// whole buffers and transposed views, lengths around the runs.
    #[test]
    fn low_precision_casts_are_the_references_bits(
        len in prop::sample::select(vec![0usize, 1, 7, 16_383, 16_385, 65_535, 65_536, 70_001]),
        to in prop::sample::select(vec![DType::BF16, DType::F16]), transposed in any::<bool>(), seed in any::<u64>(),
    ) {
        use autograd_core::HostData;
        let mut g = Generator::new(seed);
        let pattern: Vec<f32> = (0..len).map(|_| f32::from_bits((g.next_u64() >> 32) as u32)).collect();
        // a transposed view reads the buffer out of order (a dense copy first)
        let rows = if transposed && len % 7 == 0 && len > 0 { 7 } else { 1 };
        let shape = Shape::from([rows, len / rows]);
        let l = if rows > 1 { Layout::contiguous(Shape::from([len / rows, rows])).transpose(0, 1).unwrap() } else { Layout::contiguous(shape.clone()) };
        let lo = Layout::contiguous(shape);
        let bits = |d: HostData| -> Vec<u32> {
            match d {
                HostData::F32(v) => v.into_iter().map(f32::to_bits).collect(),
                HostData::BF16(v) => v.into_iter().map(|x| u32::from(x.to_bits())).collect(),
                HostData::F16(v) => v.into_iter().map(|x| u32::from(x.to_bits())).collect(),
                other => panic!("not a float buffer: {:?}", other.dtype()),
            }
        };
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let (narrow, wide) = pool.install(|| {
            let narrow = Cpu::cast(&Cpu::from_host(HostData::F32(pattern.clone())), &l, to).unwrap();
            let wide = Cpu::cast(&narrow, &lo, DType::F32).unwrap();
            (Cpu::to_host(&narrow, &lo).unwrap(), Cpu::to_host(&wide, &lo).unwrap())
        });
        let want_narrow = RefBackend::cast(&RefBackend::from_host(HostData::F32(pattern)), &l, to).unwrap();
        let want_wide = RefBackend::cast(&want_narrow, &lo, DType::F32).unwrap();
        // the first element that differs, not two long lists
        let first_difference = |got: Vec<u32>, want: Vec<u32>| (got.len() != want.len()).then_some((usize::MAX, 0, 0))
            .or_else(|| got.iter().zip(&want).position(|(g, w)| g != w).map(|i| (i, got[i], want[i])));
        prop_assert_eq!(first_difference(bits(narrow), bits(RefBackend::to_host(&want_narrow, &lo).unwrap())), None, "f32 -> {:?}", to);
        prop_assert_eq!(first_difference(bits(wide), bits(RefBackend::to_host(&want_wide, &lo).unwrap())), None, "{:?} -> f32", to);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// `matmul_cast` to f32 of bf16 and f16 operands (the kernel writes the
    /// rounded product into the front half of the f32 output, widened
    /// there in rounds from the top, over a pool of three threads past
    /// 65,536 elements) gives the bits of the product followed by the
    /// cast: outputs of 0 and 1 elements, around one run of 16,384 and
    /// past the split over threads, batched, transposed and offset views,
    /// k = 0; and the casts it does not fuse (to f64, f32 operands).
    #[test]
    fn matmul_cast_is_the_product_then_the_cast(
        (batch, m, k, n) in prop::sample::select(vec![
            (0usize, 3usize, 5usize, 4usize), (0, 1, 1, 1), (0, 0, 3, 5), (0, 4, 0, 6), (0, 128, 9, 129), (0, 300, 17, 300), (2, 150, 20, 130),
        ]),
        dtype in prop::sample::select(vec![DType::BF16, DType::F16]), to in prop::sample::select(vec![DType::F32, DType::F64]), seed in any::<u64>(),
    ) {
        use autograd_core::HostData;
        let dims = |r: usize, c: usize| Shape::new((0..batch).map(|_| 2).chain([r, c]).collect());
        let mut g = Generator::new(seed);
        let (da, la) = random_view(&mut g, &dims(m, k), dtype);
        let (db, lb) = random_view(&mut g, &dims(k, n), dtype);
        let lo = Layout::contiguous(dims(m, n));
        let (a, b) = (Cpu::from_host(da), Cpu::from_host(db));
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let (got, want) = pool.install(|| {
            let got = Cpu::matmul_cast(&a, &la, &b, &lb, to).unwrap();
            let want = Cpu::cast(&Cpu::matmul(&a, &la, &b, &lb).unwrap(), &lo, to).unwrap();
            (Cpu::to_host(&got, &lo).unwrap(), Cpu::to_host(&want, &lo).unwrap())
        });
        prop_assert_eq!(got.dtype(), to);
        let bits = |d: HostData| -> Vec<u64> {
            match d {
                HostData::F32(v) => v.into_iter().map(|x| u64::from(x.to_bits())).collect(),
                HostData::F64(v) => v.into_iter().map(f64::to_bits).collect(),
                other => panic!("not a wide float buffer: {:?}", other.dtype()),
            }
        };
        let (got, want) = (bits(got), bits(want));
        prop_assert_eq!(got.len(), want.len());
        let first = got.iter().zip(&want).position(|(g, w)| g != w);
        prop_assert_eq!(first, None, "{:?} -> {:?}: first difference", dtype, to);
    }
}

#[test]
fn matmul_cast_refuses_what_matmul_refuses() {
    let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    let a = Cpu::full(&Shape::from([2, 3]), 1.0, DType::BF16).unwrap();
    // inner dims disagree; a layout past its storage
    assert!(Cpu::matmul_cast(&a, &l(&[2, 3]), &a, &l(&[2, 3]), DType::F32).is_err());
    assert!(Cpu::matmul_cast(&a, &l(&[3, 3]), &a, &l(&[3, 2]), DType::F32).is_err());
    // mixed dtypes
    let f = Cpu::full(&Shape::from([3, 2]), 1.0, DType::F32).unwrap();
    assert!(Cpu::matmul_cast(&a, &l(&[2, 3]), &f, &l(&[3, 2]), DType::F32).is_err());
}

/// The bf16 kernels' entries for tests: `Ok(None)` where the CPU lacks the instructions.
type Bf16Kernel =
    fn(&[half::bf16], &Layout, &[half::bf16], &Layout, Option<(&[half::bf16], &Layout)>) -> autograd_core::Result<Option<Vec<half::bf16>>>;
const BF16_KERNELS: [(&str, Bf16Kernel); 3] = [
    ("amx tiles", autograd_cpu::matmul::amx::matmul_on_tiles),
    ("dot products", autograd_cpu::matmul::bf16::matmul_with_dot_products),
    ("packed f32 FMAs", autograd_cpu::matmul::widening::matmul_packed::<half::bf16>),
];

/// Every low-precision kernel this CPU can run on `a @ b` (+ `init`), by
/// name, as f64: the bf16 ones on bf16 data, the packed FMA kernel on f16.
fn low_kernel_results(
    a: &autograd_core::HostData,
    la: &Layout,
    b: &autograd_core::HostData,
    lb: &Layout,
    init: Option<&(autograd_core::HostData, Layout)>,
) -> Vec<(&'static str, Vec<f64>)> {
    use autograd_core::HostData;
    let mut results = vec![];
    match (a, b) {
        (HostData::BF16(x), HostData::BF16(y)) => {
            let z = init.map(|(d, l)| match d {
                HostData::BF16(z) => (&z[..], l),
                _ => unreachable!("a bias of the operands' dtype"),
            });
            for (name, kernel) in BF16_KERNELS {
                if let Some(c) = kernel(x, la, y, lb, z).unwrap() {
                    results.push((name, c.iter().map(|v| v.to_f64()).collect()));
                }
            }
        }
        (HostData::F16(x), HostData::F16(y)) => {
            let z = init.map(|(d, l)| match d {
                HostData::F16(z) => (&z[..], l),
                _ => unreachable!("a bias of the operands' dtype"),
            });
            if let Some(c) = autograd_cpu::matmul::widening::matmul_packed(x, la, y, lb, z).unwrap() {
                results.push(("packed f32 FMAs", c.iter().map(|v| v.to_f64()).collect()));
            }
        }
        _ => unreachable!("bf16 or f16 operands"),
    }
    results
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The AMX, AVX512_BF16 and packed-FMA kernels (those this CPU has)
    /// against the reference on the sizes their blockings cut at: m and n
    /// around one and two tiles (16, 32; the FMA kernels' 6 and 8 rows),
    /// k odd, below, at and past one 64-byte tile row (32) and several
    /// blocks, strided and transposed operands, a bias through addmm
    /// (row-broadcast or full), batches, bf16 and (the packed kernel) f16.
    /// Within one ulp of the output dtype of the exact product of the
    /// rounded inputs plus the f32 accumulation bound.
    #[test]
    fn low_precision_kernels_within_bound(
        m in prop::sample::select(vec![1usize, 2, 6, 7, 15, 16, 17, 31, 32, 33, 47, 64, 65, 100]),
        n in prop::sample::select(vec![1usize, 3, 15, 16, 17, 31, 32, 33, 48, 64, 97]),
        k in prop::sample::select(vec![1usize, 2, 7, 31, 32, 33, 63, 64, 65, 130, 257]),
        batch in 0usize..2, bias in 0usize..3, seed in any::<u64>(), bf in any::<bool>(),
    ) {
        use autograd_core::HostData;
        let dtype = if bf { DType::BF16 } else { DType::F16 };
        let b: Vec<usize> = vec![3; batch];
        let nb = if batch == 1 { 3 } else { 1 };
        let dims = |r: usize, c: usize| Shape::new(b.iter().copied().chain([r, c]).collect());
        let mut g = Generator::new(seed);
        let (da, la) = random_view(&mut g, &dims(m, k), dtype);
        let (db, lb) = random_view(&mut g, &dims(k, n), dtype);
        let lo = Layout::contiguous(dims(m, n));
        // bias 0: none; 1: one row broadcast over m (Linear's); 2: a full matrix
        let init = match bias {
            0 => None,
            1 => {
                let (dc, lc) = random_view(&mut g, &Shape::new(vec![n]), dtype);
                Some((dc, lc.broadcast_as(lo.shape()).unwrap()))
            }
            _ => Some(random_view(&mut g, lo.shape(), dtype)),
        };
        let host = |d: &HostData, l: &Layout| RefBackend::to_host(&RefBackend::from_host(d.clone()), l).unwrap().to_f64_vec();
        let (av, bv) = (host(&da, &la), host(&db, &lb));
        let cv = init.as_ref().map(|(d, l)| host(d, l));
        for (name, got) in low_kernel_results(&da, &la, &db, &lb, init.as_ref()) {
            prop_assert_eq!(got.len(), nb * m * n);
            for bi in 0..nb {
                for i in 0..m {
                    for j in 0..n {
                        let o = bi * m * n + i * n + j;
                        let terms: Vec<f64> = (0..k).map(|p| av[bi * m * k + i * k + p] * bv[bi * k * n + p * n + j]).collect();
                        let c = cv.as_ref().map_or(0.0, |c| c[o]);
                        let exact: f64 = terms.iter().sum::<f64>() + c;
                        let bound = low_precision_ulp(exact, dtype) + (k + 1) as f64 * 2f64.powi(-24) * (terms.iter().map(|t| t.abs()).sum::<f64>() + c.abs());
                        let v = got[o];
                        prop_assert!((v - exact).abs() <= bound, "{} {:?} [{}]({},{}) of {}x{}x{}: {} vs {}", name, dtype, bi, i, j, m, k, n, v, exact);
                    }
                }
            }
        }
    }
}

/// The low-precision kernels' splits over threads, on products large
/// enough to be split (at least 2M multiply-adds per thread): by panels of
/// columns, by blocks of rows when there are fewer panels than threads,
/// and many small products of a batch one per worker; each with the
/// packing of both operands in parallel and a transposed operand; for the
/// packed-FMA kernel also a `B` wider than one packed block (2,100
/// columns at k = 130) and f16; and a `k` (4,100) long enough that the
/// AMX kernel takes its 7 row blocks in groups of 3 (its packed `A` kept
/// in L2) and makes 17 passes over `k` per block. Checked element by element against the
/// reference within the bound of `low_precision_kernels_within_bound`, in
/// a pool of 2 and of 3 threads.
#[test]
fn low_precision_kernel_thread_splits() {
    use autograd_core::HostData;
    let mut g = Generator::new(11);
    for threads in [2, 3] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        for (batch, m, k, n, transposed, dtype) in [
            (1usize, 300usize, 200usize, 130usize, false, DType::BF16),
            (1, 4200, 70, 20, true, DType::BF16),
            (80, 48, 40, 40, false, DType::BF16),
            (1, 40, 130, 2100, true, DType::F16),
            (1, 300, 200, 130, false, DType::F16),
            (1, 200, 4100, 40, false, DType::BF16),
        ] {
            let dims = |r: usize, c: usize| Shape::new(if batch > 1 { vec![batch, r, c] } else { vec![r, c] });
            let (da, la) = random_view(&mut g, &dims(m, k), dtype);
            let (db, lb) = if transposed {
                let (d, l) = random_view(&mut g, &dims(n, k), dtype);
                let r = l.rank();
                (d, l.transpose(r - 2, r - 1).unwrap())
            } else {
                random_view(&mut g, &dims(k, n), dtype)
            };
            let host = |d: &HostData, l: &Layout| RefBackend::to_host(&RefBackend::from_host(d.clone()), l).unwrap().to_f64_vec();
            let (av, bv) = (host(&da, &la), host(&db, &lb));
            for (name, got) in pool.install(|| low_kernel_results(&da, &la, &db, &lb, None)) {
                for bi in 0..batch {
                    for i in 0..m {
                        for j in 0..n {
                            let terms = (0..k).map(|p| av[bi * m * k + i * k + p] * bv[bi * k * n + p * n + j]);
                            let (exact, abs) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                            let bound = low_precision_ulp(exact, dtype) + k as f64 * 2f64.powi(-24) * abs;
                            let v = got[bi * m * n + i * n + j];
                            assert!(
                                (v - exact).abs() <= bound,
                                "{name} {dtype:?}, {threads} threads, {batch} x {m}x{k}x{n} [{bi}]({i},{j}): {v} vs {exact}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The AMX kernel reads a large row-major `A` in place (its tiles loaded
/// from the operand, row stride 1 KiB, at an odd element offset) and packs
/// the 16 rows past its last whole block of 32: 1040 x 512 by 512 x 257
/// (9 panels, the last one column wide), with a row-broadcast bias, within
/// the bound of `low_precision_kernels_within_bound`. A transposed `A` of
/// the same size (packed) is checked beside it. Skipped without AMX.
#[test]
fn amx_reads_a_large_a_in_place() {
    use autograd_cpu::matmul::amx::matmul_on_tiles;
    use half::bf16;
    let (m, k, n) = (1040usize, 512usize, 257usize);
    let mut g = Generator::new(5);
    let mut draw = |len: usize| -> Vec<bf16> { (0..len).map(|_| bf16::from_f64(g.normal())).collect() };
    let (a, b, bias) = (draw(1 + m * k), draw(k * n), draw(n));
    let lb = Layout::contiguous(Shape::from([k, n]));
    let lc = Layout::contiguous(Shape::from([n])).broadcast_as(&Shape::from([m, n])).unwrap();
    // A row-major at offset 1; A^T stored [k, m] and read transposed
    let in_place = Layout::new(Shape::from([m, k]), vec![k, 1], 1);
    let transposed = Layout::new(Shape::from([m, k]), vec![1, m], 1);
    for (name, la) in [("in place", in_place), ("transposed", transposed)] {
        let Some(got) = matmul_on_tiles(&a, &la, &b, &lb, Some((&bias, &lc))).unwrap() else { return };
        let at = |i: usize, p: usize| a[la.offset() + i * la.strides()[0] + p * la.strides()[1]].to_f64();
        for i in (0..m).step_by(7).chain(m - 16..m) {
            for j in 0..n {
                let terms: Vec<f64> = (0..k).map(|p| at(i, p) * b[p * n + j].to_f64()).collect();
                let c = bias[j].to_f64();
                let exact = terms.iter().sum::<f64>() + c;
                let bound = low_precision_ulp(exact, DType::BF16)
                    + (k + 1) as f64 * 2f64.powi(-24) * (terms.iter().map(|t| t.abs()).sum::<f64>() + c.abs());
                let v = got[i * n + j].to_f64();
                assert!((v - exact).abs() <= bound, "{name} ({i}, {j}): {v} vs {exact}");
            }
        }
    }
}

/// The bf16 kernels' public entries at the edges: empty and `k = 0`
/// products, a bias through a zero stride, and views that do not fit
/// their slices or sizes that overflow are `Err`s before any read.
#[test]
fn bf16_kernel_edges() {
    for (name, dot) in BF16_KERNELS {
        bf16_kernel_edges_of(name, dot);
    }
}

/// The packed FMA kernel's f16 entry at the same edges: `k = 0` (the
/// bias alone, over many tiles), an empty output, views outside their
/// slices and sizes that overflow are `Err`s before any read.
#[test]
fn f16_packed_kernel_edges() {
    use autograd_cpu::matmul::widening::matmul_packed;
    use half::f16;
    let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    let one = vec![f16::ONE; 64];
    let bias: Vec<f16> = (0..70).map(|j| f16::from_f32(j as f32)).collect();
    let lw = l(&[70]).broadcast_as(&Shape::from([20, 70])).unwrap();
    if let Some(c) = matmul_packed(&one, &l(&[20, 0]), &one, &l(&[0, 70]), Some((&bias, &lw))).unwrap() {
        assert_eq!(c, (0..20 * 70).map(|o| f16::from_f32((o % 70) as f32)).collect::<Vec<_>>());
        assert!(matmul_packed(&one, &l(&[0, 4]), &one, &l(&[4, 5]), None).unwrap().unwrap().is_empty());
        assert_eq!(matmul_packed(&one, &l(&[1, 7]), &one, &l(&[7, 1]), None).unwrap().unwrap(), vec![f16::from_f32(7.0)]);
    }
    assert!(matmul_packed(&one, &l(&[9, 9]), &one, &l(&[9, 1]), None).is_err());
    assert!(matmul_packed(&one, &l(&[2, 3]), &one, &l(&[4, 1]), None).is_err());
    let huge = Layout::new(Shape::from([usize::MAX / 2, 2]), vec![0, 0], 0);
    assert!(matmul_packed(&one, &huge, &one, &l(&[2, 1]), None).is_err());
    let strided = Layout::new(Shape::from([2, 2]), vec![usize::MAX - 3, 1], 0);
    assert!(matmul_packed(&one, &strided, &one, &l(&[2, 1]), None).is_err());
}

fn bf16_kernel_edges_of(name: &str, dot: Bf16Kernel) {
    use half::bf16;
    let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    let one = vec![bf16::ONE; 64];
    // k = 0: the empty sum (plus the bias)
    let bias = vec![bf16::from_f32(2.5); 3];
    let lc = l(&[3]).broadcast_as(&Shape::from([2, 3])).unwrap();
    if let Some(c) = dot(&one, &l(&[2, 0]), &one, &l(&[0, 3]), Some((&bias, &lc))).unwrap() {
        assert_eq!(c, vec![bf16::from_f32(2.5); 6], "{name}");
        assert_eq!(dot(&one, &l(&[2, 0]), &one, &l(&[0, 3]), None).unwrap().unwrap(), vec![bf16::ZERO; 6], "{name}");
        // k = 0 over many tiles (rows and columns past one micro-tile): the bias once per element
        let wide_bias: Vec<bf16> = (0..70).map(|j| bf16::from_f32(j as f32)).collect();
        let lw = l(&[70]).broadcast_as(&Shape::from([20, 70])).unwrap();
        let want: Vec<bf16> = (0..20 * 70).map(|o| bf16::from_f32((o % 70) as f32)).collect();
        assert_eq!(dot(&one, &l(&[20, 0]), &one, &l(&[0, 70]), Some((&wide_bias, &lw))).unwrap().unwrap(), want, "{name}");
        assert!(dot(&one, &l(&[0, 4]), &one, &l(&[4, 5]), None).unwrap().unwrap().is_empty(), "{name}");
        // odd k (a zero-padded last pair) and one row and column
        assert_eq!(dot(&one, &l(&[1, 7]), &one, &l(&[7, 1]), None).unwrap().unwrap(), vec![bf16::from_f32(7.0)], "{name}");
    }
    // views outside their slices, mismatched inner dims, impossible sizes
    assert!(dot(&one, &l(&[9, 9]), &one, &l(&[9, 1]), None).is_err(), "{name}");
    assert!(dot(&one, &l(&[2, 3]), &one, &l(&[4, 1]), None).is_err(), "{name}");
    let huge = Layout::new(Shape::from([usize::MAX / 2, 2]), vec![0, 0], 0);
    assert!(dot(&one, &huge, &one, &l(&[2, 1]), None).is_err(), "{name}");
    let strided = Layout::new(Shape::from([2, 2]), vec![usize::MAX - 3, 1], 0);
    assert!(dot(&one, &strided, &one, &l(&[2, 1]), None).is_err(), "{name}");
}

/// Kernels that take their output from the storage cache without zeroing
/// it (the GEMM, copies, elementwise ops) write every element: with the
/// cache holding NaN-filled vectors of exactly the outputs' sizes, the
/// results still equal the reference's. Shapes cover gemm's paths (a
/// vector times a matrix, the transposed orientation, a batch, an init).
#[test]
fn reused_storage_is_overwritten() {
    use autograd_core::HostData;
    let poison = |n: usize| {
        for _ in 0..4 {
            drop(Cpu::from_host(HostData::from(vec![f32::NAN; n])));
        }
    };
    let mut g = Generator::new(5);
    for (batch, m, k, n) in
        [(1usize, 1usize, 64usize, 20_000usize), (1, 20_000, 64, 1), (1, 128, 300, 128), (4, 64, 16, 96), (1, 16, 1024, 1024)]
    {
        let dims = |r: usize, c: usize| Shape::new(if batch > 1 { vec![batch, r, c] } else { vec![r, c] });
        let (a, la) = random_view(&mut g, &dims(m, k), DType::F32);
        // a transposed right operand: the orientation that repacks less
        let (b, lb) = random_view(&mut g, &dims(n, k), DType::F32);
        let r = lb.rank();
        let lb = lb.transpose(r - 2, r - 1).unwrap();
        let (bias, lbias) = random_view(&mut g, &Shape::new(vec![n]), DType::F32);
        let out = Layout::contiguous(dims(m, n));
        let lbias = lbias.broadcast_as(out.shape()).unwrap();
        for with_init in [false, true] {
            poison(batch * m * n);
            let (x, y, z) = (Cpu::from_host(a.clone()), Cpu::from_host(b.clone()), Cpu::from_host(bias.clone()));
            let (rx, ry, rz) = (RefBackend::from_host(a.clone()), RefBackend::from_host(b.clone()), RefBackend::from_host(bias.clone()));
            let (got, want) = if with_init {
                (Cpu::addmm(&z, &lbias, &x, &la, &y, &lb).unwrap(), RefBackend::addmm(&rz, &lbias, &rx, &la, &ry, &lb).unwrap())
            } else {
                (Cpu::matmul(&x, &la, &y, &lb).unwrap(), RefBackend::matmul(&rx, &la, &ry, &lb).unwrap())
            };
            let what = format!("{batch} x {m}x{k} @ {k}x{n} init {with_init}");
            let (got, want) = (Cpu::to_host(&got, &out).unwrap().to_f64_vec(), RefBackend::to_host(&want, &out).unwrap().to_f64_vec());
            // sums of k products of N(0, 4) values: f32 rounding grows with k
            let tol = 1e-5 * k as f64 * 16.0;
            for (i, (x, w)) in got.iter().zip(&want).enumerate() {
                assert!(x.is_finite() && (x - w).abs() <= tol, "{what}: element {i}: got {x}, want {w}");
            }
        }
    }
}

/// The row kernels' parallel split (above the rayon threshold), rows of one
/// element, and arguments that do not fit: `Err`s naming the op.
#[test]
fn norm_and_softmax_backward_large_and_bad() {
    for (rows, n) in [(2048usize, 128usize), (300_000, 1), (3, 70_000)] {
        let shape = Shape::from([rows, n]);
        let mut g = Generator::new(rows as u64);
        let (dg, lg) = random_view(&mut g, &shape, DType::F32);
        let (dx, lx) = random_view(&mut g, &shape, DType::F32);
        let (dr, lr) = random_view(&mut g, &Shape::from([rows, 1]), DType::F32);
        let lo = Layout::contiguous(shape);
        let got = Cpu::layer_norm_backward(
            &Cpu::from_host(dg.clone()),
            &lg,
            &Cpu::from_host(dx.clone()),
            &lx,
            &Cpu::from_host(dr.clone()),
            &lr,
            1,
        )
        .unwrap();
        let want = RefBackend::layer_norm_backward(
            &RefBackend::from_host(dg.clone()),
            &lg,
            &RefBackend::from_host(dx.clone()),
            &lx,
            &RefBackend::from_host(dr),
            &lr,
            1,
        )
        .unwrap();
        assert_close(&Cpu::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), 1e-4, "layer_norm_backward");
        for log in [false, true] {
            let got = Cpu::softmax_backward(&Cpu::from_host(dx.clone()), &lx, &Cpu::from_host(dg.clone()), &lg, 1, log).unwrap();
            let want =
                RefBackend::softmax_backward(&RefBackend::from_host(dx.clone()), &lx, &RefBackend::from_host(dg.clone()), &lg, 1, log)
                    .unwrap();
            assert_close(&Cpu::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), 1e-4, "softmax_backward");
        }
    }
    let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    let x = Cpu::from_host(autograd_core::HostData::from(vec![1.0f32; 6]));
    // empty views may start past their storage: nothing is read, an empty result
    let far = |d: &[usize]| Layout::new(Shape::from(d), Layout::contiguous(Shape::from(d)).strides().to_vec(), 100);
    let dx = Cpu::layer_norm_backward(&x, &far(&[0, 3]), &x, &far(&[0, 3]), &x, &far(&[0, 1]), 1).unwrap();
    assert_eq!(Cpu::to_host(&dx, &l(&[0, 3])).unwrap().len(), 0);
    for log in [false, true] {
        let dx = Cpu::softmax_backward(&x, &far(&[2, 0]), &x, &far(&[2, 0]), 1, log).unwrap();
        assert_eq!(Cpu::to_host(&dx, &l(&[2, 0])).unwrap().len(), 0);
        let dx = Cpu::softmax_backward(&x, &far(&[0, 2]), &x, &far(&[0, 2]), 1, log).unwrap();
        assert_eq!(Cpu::to_host(&dx, &l(&[0, 2])).unwrap().len(), 0);
    }
    let x64 = Cpu::from_host(autograd_core::HostData::from(vec![1.0f64; 6]));
    let bad = [
        Cpu::layer_norm_backward(&x, &l(&[2, 3]), &x, &l(&[2, 3]), &x, &l(&[2, 3]), 1),
        Cpu::layer_norm_backward(&x, &l(&[2, 3]), &x, &l(&[2, 3]), &x, &l(&[2, 1]), 3),
        Cpu::layer_norm_backward(&x, &l(&[2, 4]), &x, &l(&[2, 4]), &x, &l(&[2, 1]), 1),
        Cpu::layer_norm_backward(&x, &l(&[2, 3]), &x64, &l(&[2, 3]), &x, &l(&[2, 1]), 1),
    ];
    for e in bad {
        let msg = e.expect_err("bad arguments").to_string();
        assert!(msg.contains("layer_norm_backward"), "{msg}");
    }
    let bad = [
        Cpu::softmax_backward(&x, &l(&[2, 3]), &x, &l(&[3, 2]), 1, false),
        Cpu::softmax_backward(&x, &l(&[2, 3]), &x, &l(&[2, 3]), 2, true),
        Cpu::softmax_backward(&x, &l(&[7]), &x, &l(&[7]), 0, false),
        Cpu::softmax_backward(&x64, &l(&[2, 3]), &x, &l(&[2, 3]), 0, false),
    ];
    for e in bad {
        let msg = e.expect_err("bad arguments").to_string();
        assert!(msg.contains("softmax_backward"), "{msg}");
    }
}

/// An I64 index for `gather`/`scatter_add` along `dim`: `n` positions along
/// `dim`, the other dims those of `idims`; either one value per position
/// repeated (stride 0) over the other dims, as `index_select` and
/// `embedding` expand a 1-D index (the CPU backend's slice path), or an
/// independent value per element (its element-wise path). Values in
/// `0..size`, or one of them `bad` (out of range) when given.
fn index_view(
    g: &mut Generator,
    idims: &[usize],
    dim: usize,
    size: usize,
    repeated: bool,
    bad: Option<i64>,
) -> (autograd_core::HostData, Layout) {
    let full = Shape::new(idims.to_vec());
    let (count, layout) = if repeated {
        let mut one = vec![1usize; idims.len()];
        one[dim] = idims[dim];
        (idims[dim], Layout::contiguous(Shape::new(one)).broadcast_as(&full).unwrap())
    } else {
        (full.numel(), Layout::contiguous(full))
    };
    let mut v: Vec<i64> = (0..count).map(|_| g.below(size as u64) as i64).collect();
    if let (Some(b), false) = (bad, v.is_empty()) {
        let at = g.below(count as u64) as usize;
        v[at] = b;
    }
    (autograd_core::HostData::from(v), layout)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// Gather and scatter-add on strided views with both kinds of index
    /// equal the reference exactly (they only move and add elements in the
    /// reference's order); an out-of-range index is the same error.
    #[test]
    fn gather_scatter_add_match(
        dims in prop::collection::vec(1usize..6, 1..4),
        pick in any::<u64>(),
        shrink in any::<u8>(),
        seed in any::<u64>(),
        dtype in dtype_strategy(),
        repeated in any::<bool>(),
        bad in prop::option::weighted(0.15, prop_oneof![Just(-1i64), 6i64..9]),
    ) {
        let r = dims.len();
        let dim = pick as usize % r;
        let n = pick as usize / 7 % 6; // 0 positions too
        let idims: Vec<usize> = dims.iter().enumerate().map(|(d, &s)| if d == dim { n } else if shrink >> d & 1 == 1 { (s - 1).max(1) } else { s }).collect();
        let mut g = Generator::new(seed);
        let shape = Shape::new(dims.clone());
        let (data, l) = random_view(&mut g, &shape, dtype);
        let (idx, lidx) = index_view(&mut g, &idims, dim, dims[dim], repeated, bad);
        let lo = Layout::contiguous(Shape::new(idims.clone()));
        let got = Cpu::gather(&Cpu::from_host(data.clone()), &l, dim, &Cpu::from_host(idx.clone()), &lidx);
        let want = RefBackend::gather(&RefBackend::from_host(data), &l, dim, &RefBackend::from_host(idx.clone()), &lidx);
        match (got, want) {
            (Ok(a), Ok(b)) => prop_assert_eq!(Cpu::to_host(&a, &lo).unwrap(), RefBackend::to_host(&b, &lo).unwrap()),
            (a, b) => prop_assert_eq!(a.err().map(|e| e.to_string()), b.err().map(|e| e.to_string())),
        }
        let (src, lsrc) = random_view(&mut g, &Shape::new(idims.clone()), dtype);
        let lout = Layout::contiguous(shape.clone());
        let got = Cpu::scatter_add(&shape, dim, &Cpu::from_host(idx.clone()), &lidx, &Cpu::from_host(src.clone()), &lsrc);
        let want = RefBackend::scatter_add(&shape, dim, &RefBackend::from_host(idx), &lidx, &RefBackend::from_host(src), &lsrc);
        match (got, want) {
            (Ok(a), Ok(b)) => prop_assert_eq!(Cpu::to_host(&a, &lout).unwrap(), RefBackend::to_host(&b, &lout).unwrap()),
            (a, b) => prop_assert_eq!(a.err().map(|e| e.to_string()), b.err().map(|e| e.to_string())),
        }
    }

    /// Concatenation of strided parts (empty parts too) equals the reference.
    #[test]
    fn cat_matches(dims in prop::collection::vec(1usize..6, 1..4), sizes in prop::collection::vec(0usize..4, 1..4), pick in any::<u64>(), seed in any::<u64>(), dtype in dtype_strategy()) {
        let dim = pick as usize % dims.len();
        let mut g = Generator::new(seed);
        let parts: Vec<(autograd_core::HostData, Layout)> = sizes
            .iter()
            .map(|&s| {
                let mut d = dims.clone();
                d[dim] = s;
                random_view(&mut g, &Shape::new(d), dtype)
            })
            .collect();
        let mut od = dims.clone();
        od[dim] = sizes.iter().sum();
        let lo = Layout::contiguous(Shape::new(od));
        let cpu: Vec<_> = parts.iter().map(|(d, l)| (Cpu::from_host(d.clone()), l)).collect();
        let refs: Vec<_> = parts.iter().map(|(d, l)| (RefBackend::from_host(d.clone()), l)).collect();
        let got = Cpu::cat(&cpu.iter().map(|(s, l)| (s, *l)).collect::<Vec<_>>(), dim).unwrap();
        let want = RefBackend::cat(&refs.iter().map(|(s, l)| (s, *l)).collect::<Vec<_>>(), dim).unwrap();
        prop_assert_eq!(Cpu::to_host(&got, &lo).unwrap(), RefBackend::to_host(&want, &lo).unwrap());
    }
}

/// `full` of f16 and bf16 rounds its f64 value through f32, as PyTorch
/// does: values just past a tie in their lowest f32 bits round up (the
/// `half` crate's own `from_f64`, which a concrete dtype's `T::from_f64`
/// names first, rounded them to even).
#[test]
fn low_precision_full_rounds_through_f32() {
    use autograd_core::HostData;
    let shape = Shape::from([2]);
    let l = Layout::contiguous(shape.clone());
    for (bits, dtype, want) in [(0x3f80_8001u32, DType::BF16, 1.0078125), (0x3f80_1001, DType::F16, 1.0 + 2f64.powi(-10))] {
        let v = f64::from(f32::from_bits(bits));
        let got = Cpu::to_host(&Cpu::full(&shape, v, dtype).unwrap(), &l).unwrap();
        assert_eq!(got, HostData::from_f64(&[want, want], dtype), "{dtype:?}");
        assert_eq!(got, RefBackend::to_host(&RefBackend::full(&shape, v, dtype).unwrap(), &l).unwrap(), "{dtype:?}");
    }
}

/// An f16/bf16 attention call reads its operands as they are (each
/// element widened as the kernel copies its item) and rounds its f32
/// results once: the bits of the f32 kernel on the widened inputs with
/// its outputs rounded (the path through whole f32 copies it replaced),
/// forward and backward. Strided and broadcast views, batch dims, causal,
/// a Bool mask, dropout, sizes across the 64-query and 128-key blocks,
/// no queries and no keys.
#[test]
fn low_precision_attention_is_the_f32_kernel_on_widened_inputs_rounded() {
    use autograd_core::HostData;
    use autograd_core::attention::AttentionSpec;
    let widen = |d: &HostData| -> HostData {
        match d {
            HostData::BF16(v) => HostData::F32(v.iter().map(|x| x.to_f32()).collect()),
            HostData::F16(v) => HostData::F32(v.iter().map(|x| x.to_f32()).collect()),
            other => other.clone(),
        }
    };
    // an f32 result rounded as the backend rounds, as bits
    let rounded_bits = |d: HostData, dtype: DType| -> Vec<u16> {
        let HostData::F32(v) = d else { panic!("an f32 result") };
        match dtype {
            DType::BF16 => v.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect(),
            _ => v.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect(),
        }
    };
    let bits = |d: HostData| -> Vec<u16> {
        match d {
            HostData::BF16(v) => v.iter().map(|x| x.to_bits()).collect(),
            HostData::F16(v) => v.iter().map(|x| x.to_bits()).collect(),
            other => panic!("a low-precision result, not {:?}", other.dtype()),
        }
    };
    fn refs(v: &[(<Cpu as Backend>::Storage, Layout)]) -> Vec<(&<Cpu as Backend>::Storage, &Layout)> {
        v.iter().map(|(s, l)| (s, l)).collect()
    }
    let mut g = Generator::new(41);
    let sizes = [1usize, 5, 64, 65, 130];
    for round in 0..12 {
        let dtype = [DType::BF16, DType::F16][round % 2];
        let batch: Vec<usize> = (0..g.below(3) as usize).map(|_| 1 + g.below(3) as usize).collect();
        let (l, s) = match round {
            // no queries, no keys: the outputs' zeros and infinities rounded
            4 => (0, 5),
            5 => (5, 0),
            _ => (sizes[g.below(5) as usize], sizes[g.below(5) as usize]),
        };
        let (e, ev) = ([1usize, 8, 33][g.below(3) as usize], [1usize, 32, 40][g.below(3) as usize]);
        let dims = |last: [usize; 2]| Shape::new(batch.iter().copied().chain(last).collect::<Vec<_>>());
        let kind = round % 3;
        let spec = AttentionSpec { scale: 0.1 + g.uniform(), causal: kind == 1, dropout: if round % 4 == 3 { 0.3 } else { 0.0 } };
        let mut inputs: Vec<(HostData, Layout)> = vec![
            random_view(&mut g, &dims([l, e]), dtype),
            random_view(&mut g, &dims([s, e]), dtype),
            random_view(&mut g, &dims([s, ev]), dtype),
        ];
        // a Bool mask, or (rounds 2 and 11: bf16, f16) an additive one in
        // the operands' dtype, read as it is: the f32 kernel gets it widened
        let mask = (kind == 2).then(|| {
            let shared = Layout::contiguous(Shape::from([l, s])).broadcast_as(&dims([l, s])).unwrap();
            if round % 9 == 2 {
                let v: Vec<f32> = (0..l * s)
                    .map(|i| if i >= s && g.below(3) == 0 { f32::NEG_INFINITY } else { g.uniform() as f32 * 4.0 - 2.0 })
                    .collect();
                let data = match dtype {
                    DType::BF16 => HostData::BF16(v.iter().map(|&x| half::bf16::from_f32(x)).collect()),
                    _ => HostData::F16(v.iter().map(|&x| half::f16::from_f32(x)).collect()),
                };
                (data, shared)
            } else {
                let v: Vec<bool> = (0..l * s).map(|i| i >= s && g.below(2) == 0).collect();
                (HostData::from(v), shared)
            }
        });
        let seed = (HostData::from(vec![g.uniform(), g.uniform()]), Layout::contiguous(Shape::from([2])));
        let what = format!("{dtype:?} batch {batch:?} L {l} S {s} E {e} Ev {ev} {spec:?} mask {:?}", mask.as_ref().map(|m| m.0.dtype()));
        // the call's inputs: the given ones, the mask, the seed; low and widened
        let call = |ins: &[(HostData, Layout)], widened: bool| -> Vec<(<Cpu as Backend>::Storage, Layout)> {
            ins.iter()
                .chain(mask.as_ref())
                .chain((spec.dropout > 0.0).then_some(&seed))
                .map(|(d, lay)| (Cpu::from_host(if widened { widen(d) } else { d.clone() }), lay.clone()))
                .collect()
        };
        let (lo, ll) =
            (Layout::contiguous(dims([l, ev])), Layout::contiguous(Shape::new(batch.iter().copied().chain([l]).collect::<Vec<_>>())));
        let (low, wide) = (call(&inputs, false), call(&inputs, true));
        let (out, lse) = Cpu::attention(&refs(&low), spec).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (wout, wlse) = Cpu::attention(&refs(&wide), spec).unwrap();
        let (out, lse) = (Cpu::to_host(&out, &lo).unwrap(), Cpu::to_host(&lse, &ll).unwrap());
        assert_eq!(bits(out.clone()), rounded_bits(Cpu::to_host(&wout, &lo).unwrap(), dtype), "{what}: out");
        assert_eq!(bits(lse.clone()), rounded_bits(Cpu::to_host(&wlse, &ll).unwrap(), dtype), "{what}: lse");
        // backward from this forward, with a strided output gradient
        let dout = random_view(&mut g, lo.shape(), dtype);
        inputs.extend([(out, lo.clone()), (lse, ll.clone()), dout]);
        let (low, wide) = (call(&inputs, false), call(&inputs, true));
        let got = Cpu::attention_backward(&refs(&low), spec).unwrap_or_else(|e| panic!("{what} backward: {e}"));
        let want = Cpu::attention_backward(&refs(&wide), spec).unwrap();
        for (n, ((gd, wd), shape)) in got.iter().zip(&want).zip([dims([l, e]), dims([s, e]), dims([s, ev])]).enumerate() {
            let lc = Layout::contiguous(shape);
            assert_eq!(
                bits(Cpu::to_host(gd, &lc).unwrap()),
                rounded_bits(Cpu::to_host(wd, &lc).unwrap(), dtype),
                "{what}: gradient of {}",
                ["q", "k", "v"][n]
            );
        }
    }
}
