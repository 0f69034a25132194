//! f16 and bf16 on the device: every float family computed in f32 and
//! rounded once, as the CPU backend computes them, through strided and
//! broadcast views with 0-size dims; copies, `assign`, `cat`, `gather`
//! and `unfold` of f16, bf16 and bool move bits (NaN payloads included);
//! none of it takes the host path.
//!
//! The testkit's `low_precision` conformance (in `suites.rs`) checks the
//! same families against the reference on contiguous-sized views; this
//! file adds broadcasts, the primitives that suite leaves out (the rows'
//! backwards, fold, attention, fused programs) and the host-path count.

use autograd_core::attention::AttentionSpec;
use autograd_core::fusion::{ElementwiseProgram, Instr};
use autograd_core::rng::Generator;
use autograd_core::window::Window;
use autograd_core::{ArgReduceOp, Backend, BinaryOp, DType, HostData, Layout, ReduceOp, Shape, UnaryOp};
use autograd_cpu::Cpu;
use autograd_testkit::backend_available;
use autograd_testkit::conformance::{low_precision_ulp, random_view};
use autograd_wgpu::Wgpu;
use proptest::prelude::*;

const LOW: [DType; 2] = [DType::F16, DType::BF16];

/// Every test of this file keeps off the host path, so the process-wide
/// count stays empty whatever order they run in (sin and cos, which take
/// it in f32 too, are left to the conformance suite's process).
fn no_host_path() {
    let hosted = autograd_wgpu::host_calls();
    assert!(hosted.is_empty(), "through the host: {hosted:?}");
}

/// Ops whose f32 result is correctly rounded on both backends (or exact),
/// so that its rounding to a half is the same bits.
fn exact_unary(op: UnaryOp) -> bool {
    matches!(op, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Sign | UnaryOp::Square | UnaryOp::Clamp { .. })
}

fn exact_binary(op: BinaryOp) -> bool {
    !matches!(op, BinaryOp::Pow | BinaryOp::GeluBackward | BinaryOp::Div)
}

/// `got` equals `want` bit for bit (`exact`), or is within one ulp of the
/// dtype plus `extra` (both round an f32 whose last bits may differ);
/// NaN matches NaN, infinities match exactly.
fn check(got: &HostData, want: &HostData, exact: bool, extra: f64, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    if exact {
        let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!((a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits(), "{what}: element {i}: got {a}, want {b}");
        }
        return;
    }
    let dtype = want.dtype();
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    assert_eq!(g.len(), w.len(), "{what}: length");
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = if a.is_finite() && b.is_finite() {
            (a - b).abs() <= low_precision_ulp(*b, dtype) + extra
        } else {
            (a.is_nan() && b.is_nan()) || a == b
        };
        assert!(ok, "{what} {dtype:?}: element {i}: got {a}, want {b}");
    }
}

/// `got` has `want`'s bytes; a difference names the first element that differs.
fn same_bytes(got: &HostData, want: &HostData, what: &str) {
    same_bits(got, want, false, what);
}

/// `got` has `want`'s bytes, except that any NaN matches any NaN when
/// `nan_free` (a NaN computed by arithmetic has the sign and payload the
/// device's compiler gives it, which IEEE leaves open).
fn same_bits(got: &HostData, want: &HostData, nan_free: bool, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let size = want.dtype().size_in_bytes();
    let (g, w) = (got.to_le_bytes(), want.to_le_bytes());
    assert_eq!(g.len(), w.len(), "{what}: length");
    let (gv, wv) = if nan_free { (got.to_f64_vec(), want.to_f64_vec()) } else { (vec![], vec![]) };
    let differs = |i: usize, (a, b): (&[u8], &[u8])| a != b && !(nan_free && gv[i].is_nan() && wv[i].is_nan());
    if let Some(i) = g.chunks(size).zip(w.chunks(size)).enumerate().position(|(i, p)| differs(i, p)) {
        panic!("{what}: element {i} is {:?}, want {:?}", &g[i * size..(i + 1) * size], &w[i * size..(i + 1) * size]);
    }
}

fn host(s: &<Wgpu as Backend>::Storage, shape: &Shape) -> HostData {
    Wgpu::to_host(s, &Layout::contiguous(shape.clone())).unwrap()
}

fn cpu_host(s: &<Cpu as Backend>::Storage, shape: &Shape) -> HostData {
    Cpu::to_host(s, &Layout::contiguous(shape.clone())).unwrap()
}

/// A shape of `dims` where the dims not in `keep`'s bits are 1 (and the
/// leading `keep >> 6` dims dropped): an operand broadcast to `dims`.
fn operand(dims: &[usize], keep: u8) -> Shape {
    Shape::new(
        dims.iter()
            .enumerate()
            .map(|(i, &d)| if keep >> i & 1 == 1 { d } else { 1 })
            .skip((keep >> 6) as usize % (dims.len() + 1))
            .collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Unary and binary ops, reductions and arg reductions over strided,
    /// broadcast and 0-size views.
    #[test]
    fn elementwise_and_reductions_match_the_cpu(
        dims in prop::collection::vec(0usize..6, 1..5),
        keep_a in any::<u8>(),
        keep_b in any::<u8>(),
        seed in any::<u64>(),
        op in 0usize..64,
        bf in any::<bool>(),
    ) {
        if backend_available::<Wgpu>() {
            let dtype = LOW[bf as usize];
            let out = Shape::new(dims.clone());
            let mut g = Generator::new(seed);
            let (da, la) = random_view(&mut g, &operand(&dims, keep_a), dtype);
            let (db, lb) = random_view(&mut g, &operand(&dims, keep_b), dtype);
            let (la, lb) = (la.broadcast_as(&out).unwrap(), lb.broadcast_as(&out).unwrap());
            let (wa, wb, ca, cb) = (Wgpu::from_host(da.clone()), Wgpu::from_host(db.clone()), Cpu::from_host(da), Cpu::from_host(db));

            let uop = UnaryOp::ALL.iter().copied().filter(|o| !matches!(o, UnaryOp::Sin | UnaryOp::Cos)).nth(op % (UnaryOp::ALL.len() - 2)).unwrap();
            let got = host(&Wgpu::unary(uop, &wa, &la).unwrap(), &out);
            check(&got, &cpu_host(&Cpu::unary(uop, &ca, &la).unwrap(), &out), exact_unary(uop), 0.0, &format!("{uop:?}"));

            let bop = BinaryOp::ALL[op % BinaryOp::ALL.len()];
            let got = host(&Wgpu::binary(bop, &wa, &la, &wb, &lb).unwrap(), &out);
            check(&got, &cpu_host(&Cpu::binary(bop, &ca, &la, &cb, &lb).unwrap(), &out), exact_binary(bop), 0.0, &format!("{bop:?}"));

            let dim = op % dims.len();
            let mut kept = dims.clone();
            kept[dim] = 1;
            let kept = Shape::new(kept);
            let rop = ReduceOp::ALL[op % ReduceOp::ALL.len()];
            let got = host(&Wgpu::reduce(rop, &wa, &la, &[dim]).unwrap(), &kept);
            let sum_abs: f64 = Cpu::to_host(&ca, &la).unwrap().to_f64_vec().iter().map(|v| v.abs()).sum();
            // two f32 summation orders, each within n 2^-24 sum |x| of the exact sum
            let bound = 2.0 * dims[dim] as f64 * 2f64.powi(-24) * sum_abs;
            check(&got, &cpu_host(&Cpu::reduce(rop, &ca, &la, &[dim]).unwrap(), &kept), false, bound, &format!("{rop:?}"));

            if dims[dim] > 0 {
                let aop = ArgReduceOp::ALL[op % ArgReduceOp::ALL.len()];
                let (gv, gi) = Wgpu::arg_reduce(aop, &wa, &la, dim).unwrap();
                let (cv, ci) = Cpu::arg_reduce(aop, &ca, &la, dim).unwrap();
                check(&host(&gv, &kept), &cpu_host(&cv, &kept), true, 0.0, &format!("{aop:?} values"));
                prop_assert_eq!(host(&gi, &kept), cpu_host(&ci, &kept));
            }
            no_host_path();
        }
    }

    /// Products and `addmm` (a bias broadcast over rows) through strided
    /// views: within an ulp of the CPU's plus the two f32 accumulation
    /// orders' bound.
    #[test]
    fn products_match_the_cpu(m in 0usize..40, k in 0usize..40, n in 0usize..40, batch in 0usize..3, seed in any::<u64>(), bf in any::<bool>()) {
        if backend_available::<Wgpu>() {
            let dtype = LOW[bf as usize];
            let b: Vec<usize> = vec![2; batch];
            let out = Shape::new(b.iter().copied().chain([m, n]).collect());
            let mut g = Generator::new(seed);
            let (da, la) = random_view(&mut g, &Shape::new(b.iter().copied().chain([m, k]).collect()), dtype);
            let (db, lb) = random_view(&mut g, &Shape::new(b.iter().copied().chain([k, n]).collect()), dtype);
            let (dc, lc) = random_view(&mut g, &Shape::from([n]), dtype);
            let lc = lc.broadcast_as(&out).unwrap();
            // two f32 sums of k + 1 terms (the bias too) each lie within
            // (k + 1) 2^-24 sum |term| of the exact one, and sum |term| is
            // at most k max|a| max|b| + max|c|
            let max = |d: &HostData| d.to_f64_vec().iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let bound = 2.0 * (k as f64 + 1.0) * 2f64.powi(-24) * (k as f64 * max(&da) * max(&db) + max(&dc));
            let got = host(&Wgpu::matmul(&Wgpu::from_host(da.clone()), &la, &Wgpu::from_host(db.clone()), &lb).unwrap(), &out);
            let want = cpu_host(&Cpu::matmul(&Cpu::from_host(da.clone()), &la, &Cpu::from_host(db.clone()), &lb).unwrap(), &out);
            check(&got, &want, false, bound, "matmul");
            let got = host(&Wgpu::addmm(&Wgpu::from_host(dc.clone()), &lc, &Wgpu::from_host(da.clone()), &la, &Wgpu::from_host(db.clone()), &lb).unwrap(), &out);
            let want = cpu_host(&Cpu::addmm(&Cpu::from_host(dc), &lc, &Cpu::from_host(da), &la, &Cpu::from_host(db), &lb).unwrap(), &out);
            check(&got, &want, false, bound, "addmm");
            no_host_path();
        }
    }
}

/// Products and `addmm` read f16 and bf16 operands as they are (each
/// element from its half of a word): the bits of widening the operands
/// with the cast kernel, the f32 product and one rounding, through strided
/// views with odd offsets (a transposed operand, a step), both kernels
/// (one invocation per output below 1,024 outputs, 64 x 64 blocks above),
/// batches, a broadcast bias, and an empty `k`; `matmul_cast` to f32 is
/// the rounded product widened.
#[test]
fn half_products_are_the_widened_f32_products_bit_for_bit() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let mut g = Generator::new(17);
    for dtype in LOW {
        for (batch, m, k, n) in [(1usize, 3usize, 5usize, 7usize), (1, 70, 33, 90), (2, 65, 17, 129), (1, 9, 0, 11), (3, 40, 64, 40)] {
            let dims = |r: usize, c: usize| Shape::new(if batch > 1 { vec![batch, r, c] } else { vec![r, c] });
            let (da, la) = random_view(&mut g, &dims(m, k), dtype);
            // b read transposed: its storage [.., n, k]
            let (db, lbt) = random_view(&mut g, &dims(n, k), dtype);
            let lb = lbt.transpose(lbt.rank() - 2, lbt.rank() - 1).unwrap();
            let (dc, lc1) = random_view(&mut g, &Shape::from([n]), dtype);
            let out = dims(m, n);
            let lc = lc1.broadcast_as(&out).unwrap();
            let (a, b, c) = (Wgpu::from_host(da), Wgpu::from_host(db), Wgpu::from_host(dc));
            let wide =
                |s: &<Wgpu as Backend>::Storage, l: &Layout| (Wgpu::cast(s, l, DType::F32).unwrap(), Layout::contiguous(l.shape().clone()));
            let ((wa, wla), (wb, wlb)) = (wide(&a, &la), wide(&b, &lb));
            let lo = Layout::contiguous(out.clone());
            let got = host(&Wgpu::matmul(&a, &la, &b, &lb).unwrap(), &out);
            let want = host(&Wgpu::cast(&Wgpu::matmul(&wa, &wla, &wb, &wlb).unwrap(), &lo, dtype).unwrap(), &out);
            same_bits(&got, &want, true, &format!("matmul {dtype:?} {batch} x {m} x {k} x {n}"));
            // asked for in f32 (matmul_cast): the rounded product widened
            let got = host(&Wgpu::matmul_cast(&a, &la, &b, &lb, DType::F32).unwrap(), &out);
            let want = host(&Wgpu::cast(&Wgpu::matmul(&a, &la, &b, &lb).unwrap(), &lo, DType::F32).unwrap(), &out);
            assert_eq!(got.dtype(), DType::F32);
            same_bits(&got, &want, true, &format!("matmul_cast {dtype:?} {batch} x {m} x {k} x {n}"));
            // the bias row widened, then broadcast as the product reads it
            let (wc, wlc1) = wide(&c, &lc1);
            let wlc = wlc1.broadcast_as(&out).unwrap();
            let got = host(&Wgpu::addmm(&c, &lc, &a, &la, &b, &lb).unwrap(), &out);
            let want = host(&Wgpu::cast(&Wgpu::addmm(&wc, &wlc, &wa, &wla, &wb, &wlb).unwrap(), &lo, dtype).unwrap(), &out);
            same_bits(&got, &want, true, &format!("addmm {dtype:?} {batch} x {m} x {k} x {n}"));
        }
    }
    no_host_path();
}

/// Softmax and layer-norm rows and their backwards read f16 and bf16 as
/// they are: the bits of widening every operand (through its view),
/// running the f32 row kernel and rounding each result once; rows of one
/// invocation (under 64 elements), a 32-wide segment and a whole
/// workgroup (past 4,096), transposed and strided views.
#[test]
fn half_rows_are_the_widened_f32_rows_bit_for_bit() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let mut g = Generator::new(29);
    for dtype in LOW {
        for (dims, dim) in [(vec![5usize, 7], 1usize), (vec![3, 100], 1), (vec![130, 6], 0), (vec![2, 5000], 1), (vec![0, 4], 1)] {
            let shape = Shape::new(dims.clone());
            let (dx, lx) = random_view(&mut g, &shape, dtype);
            let (dg, lg) = random_view(&mut g, &shape, dtype);
            let (x, gr) = (Wgpu::from_host(dx), Wgpu::from_host(dg));
            let lo = Layout::contiguous(shape.clone());
            let wide = |s: &<Wgpu as Backend>::Storage, l: &Layout| Wgpu::cast(s, l, DType::F32).unwrap();
            let narrow = |s: &<Wgpu as Backend>::Storage, l: &Layout| host(&Wgpu::cast(s, l, dtype).unwrap(), l.shape());
            let (wx, wg) = (wide(&x, &lx), wide(&gr, &lg));
            let what = |op: &str| format!("{op} {dtype:?} {dims:?} along {dim}");
            let y = Wgpu::softmax(&x, &lx, dim).unwrap();
            same_bits(&host(&y, &shape), &narrow(&Wgpu::softmax(&wx, &lo, dim).unwrap(), &lo), true, &what("softmax"));
            for log in [false, true] {
                let got = host(&Wgpu::softmax_backward(&y, &lo, &gr, &lg, dim, log).unwrap(), &shape);
                let want = narrow(&Wgpu::softmax_backward(&wide(&y, &lo), &lo, &wg, &lo, dim, log).unwrap(), &lo);
                same_bits(&got, &want, true, &what(if log { "log_softmax_backward" } else { "softmax_backward" }));
            }
            // layer norm over the last dim (its rows: the trailing k = 1 dims)
            let k = 1;
            let rows = Shape::new(dims[..1].iter().copied().chain([1]).collect());
            let lr = Layout::contiguous(rows.clone());
            let (xhat, rstd) = Wgpu::layer_norm(&x, &lx, k, 1e-5).unwrap();
            let (wxhat, wrstd) = Wgpu::layer_norm(&wx, &lo, k, 1e-5).unwrap();
            same_bits(&host(&xhat, &shape), &narrow(&wxhat, &lo), true, &what("layer_norm xhat"));
            same_bits(&host(&rstd, &rows), &narrow(&wrstd, &lr), true, &what("layer_norm rstd"));
            let got = host(&Wgpu::layer_norm_backward(&gr, &lg, &xhat, &lo, &rstd, &lr, k).unwrap(), &shape);
            let want = narrow(&Wgpu::layer_norm_backward(&wg, &lo, &wide(&xhat, &lo), &lo, &wide(&rstd, &lr), &lr, k).unwrap(), &lo);
            same_bits(&got, &want, true, &what("layer_norm_backward"));
        }
    }
    no_host_path();
}

/// Reductions and arg reductions read f16 and bf16 as they are: the bits
/// of widening the input first (through its view) and reducing in f32,
/// rounded once; few elements per output (one invocation each) and many
/// (a workgroup's tree), strided and transposed views, a planted NaN,
/// empty reduced dims.
#[test]
fn half_reductions_are_the_widened_f32_reductions_bit_for_bit() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let mut g = Generator::new(23);
    for dtype in LOW {
        for (dims, reduced) in [
            (vec![3usize, 5, 7], vec![1usize]),
            (vec![300, 9], vec![0]),
            (vec![4, 130, 3], vec![0, 1]),
            (vec![6, 0, 2], vec![1]),
            (vec![2, 3], vec![0, 1]),
        ] {
            let shape = Shape::new(dims.clone());
            let (mut d, l) = random_view(&mut g, &shape, dtype);
            if g.below(2) == 0 {
                // a NaN somewhere in the storage
                let mut v = d.to_f64_vec();
                if !v.is_empty() {
                    let at = g.below(v.len() as u64) as usize;
                    v[at] = f64::NAN;
                }
                d = HostData::from_f64(&v, dtype);
            }
            let x = Wgpu::from_host(d);
            let wide = Wgpu::cast(&x, &l, DType::F32).unwrap();
            let wl = Layout::contiguous(shape.clone());
            let mut kept = dims.clone();
            for &r in &reduced {
                kept[r] = 1;
            }
            let (kept, lk) = (Shape::new(kept.clone()), Layout::contiguous(Shape::new(kept)));
            for &op in ReduceOp::ALL {
                let got = host(&Wgpu::reduce(op, &x, &l, &reduced).unwrap(), &kept);
                let want = host(&Wgpu::cast(&Wgpu::reduce(op, &wide, &wl, &reduced).unwrap(), &lk, dtype).unwrap(), &kept);
                same_bits(&got, &want, false, &format!("{op:?} {dtype:?} {dims:?} over {reduced:?}"));
            }
            if dims[reduced[0]] > 0 {
                for &op in ArgReduceOp::ALL {
                    let (gv, gi) = Wgpu::arg_reduce(op, &x, &l, reduced[0]).unwrap();
                    let (wv, wi) = Wgpu::arg_reduce(op, &wide, &wl, reduced[0]).unwrap();
                    let mut one = dims.clone();
                    one[reduced[0]] = 1;
                    let (one, lo) = (Shape::new(one.clone()), Layout::contiguous(Shape::new(one)));
                    same_bits(&host(&gv, &one), &host(&Wgpu::cast(&wv, &lo, dtype).unwrap(), &one), false, &format!("{op:?} {dtype:?}"));
                    assert_eq!(host(&gi, &one), host(&wi, &one), "{op:?} {dtype:?} indices");
                }
            }
        }
    }
    no_host_path();
}

/// Every f16 and every bf16 bit pattern (NaN payloads, subnormals,
/// infinities), and 65,536 bools: the moves' inputs.
fn every_pattern() -> [HostData; 3] {
    let all: Vec<u16> = (0..=u16::MAX).collect();
    [
        HostData::from(all.iter().map(|&b| autograd_core::half::f16::from_bits(b)).collect::<Vec<_>>()),
        HostData::from(all.iter().map(|&b| autograd_core::half::bf16::from_bits(b)).collect::<Vec<_>>()),
        HostData::Bool((0..65_536).map(|i| i % 3 == 0).collect()),
    ]
}

/// The one-kernel unary and binary ops on halves give the bits of
/// widening, the f32 kernel and rounding (the rule every other family
/// follows), for every f16 and every bf16 input; a NaN result is a NaN
/// (its sign and payload are the compiler's).
#[test]
fn half_kernels_are_the_widened_f32_ops_bit_for_bit() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let [f16s, bf16s, _] = every_pattern();
    let l = Layout::contiguous(Shape::from([65_536]));
    let shape = l.shape().clone();
    let through_f32 =
        |s: &<Wgpu as Backend>::Storage, dtype: DType, f: &dyn Fn(&<Wgpu as Backend>::Storage) -> <Wgpu as Backend>::Storage| {
            host(&Wgpu::cast(&f(&Wgpu::cast(s, &l, DType::F32).unwrap()), &l, dtype).unwrap(), &shape)
        };
    for data in [f16s, bf16s] {
        let dtype = data.dtype();
        let x = Wgpu::from_host(data.clone());
        // the second operand: the patterns in another order, so every pair kind meets
        let HostData::F32(wide) = data.convert(DType::F32) else { panic!("f32") };
        let mut g = Generator::new(3);
        let other: Vec<f64> = (0..65_536).map(|i| wide[(i * 40_503 + g.below(7) as usize) % 65_536] as f64).collect();
        let y = Wgpu::from_host(HostData::from_f64(&other, dtype));
        let ops =
            UnaryOp::ALL.iter().copied().chain([UnaryOp::Powf(-1.5), UnaryOp::Clamp { min: -0.25, max: 3.0 }, UnaryOp::LeakyRelu(0.01)]);
        for op in ops {
            let got = host(&Wgpu::unary(op, &x, &l).unwrap(), &shape);
            same_bits(&got, &through_f32(&x, dtype, &|w| Wgpu::unary(op, w, &l).unwrap()), true, &format!("{op:?} {dtype:?}"));
        }
        for &op in BinaryOp::ALL {
            let got = host(&Wgpu::binary(op, &x, &l, &y, &l).unwrap(), &shape);
            let (wx, wy) = (Wgpu::cast(&x, &l, DType::F32).unwrap(), Wgpu::cast(&y, &l, DType::F32).unwrap());
            let want = host(&Wgpu::cast(&Wgpu::binary(op, &wx, &l, &wy, &l).unwrap(), &l, dtype).unwrap(), &shape);
            same_bits(&got, &want, true, &format!("{op:?} {dtype:?}"));
        }
    }
    no_host_path();
}

/// Every f16, bf16 and bool bit pattern copied through strided views (a
/// step, a transpose, an offset) and cast to its own dtype comes out with
/// the CPU's bytes: signalling NaNs keep their payloads (a copy through
/// f32 would quiet them).
#[test]
fn copies_move_bits() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let datas = every_pattern();
    let views = [
        Layout::contiguous(Shape::from([65_536])),
        Layout::new(Shape::from([32_767]), vec![2], 1),
        Layout::new(Shape::from([256, 255]), vec![1, 256], 3),
        Layout::new(Shape::from([0, 7]), vec![7, 1], 0),
    ];
    for data in &datas {
        for l in &views {
            let (w, c) = (Wgpu::from_host(data.clone()), Cpu::from_host(data.clone()));
            let want = cpu_host(&Cpu::copy_strided(&c, l).unwrap(), l.shape());
            same_bytes(&host(&Wgpu::copy_strided(&w, l).unwrap(), l.shape()), &want, &format!("copy {:?} {:?}", data.dtype(), l.dims()));
            let cast = Wgpu::cast(&w, l, data.dtype()).unwrap();
            same_bytes(&host(&cast, l.shape()), &want, &format!("cast to itself {:?} {:?}", data.dtype(), l.dims()));
        }
    }
    no_host_path();
}

/// `assign` into strided views of f16, bf16 and bool storages (an
/// element's neighbours in its 32-bit word left as they were), `cat`,
/// `gather` and `unfold` of such tensors give the CPU's bytes, every bit
/// pattern included.
#[test]
fn assign_cat_gather_and_unfold_move_bits() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let datas = every_pattern();
    for data in &datas {
        let dtype = data.dtype();
        let zeros = HostData::from_f64(&vec![0.0; 65_536], dtype);
        // every other element of a [256, 256] block, written transposed from the source's first half
        let ld = Layout::new(Shape::from([128, 256]), vec![2, 256], 1);
        let ls = Layout::new(Shape::from([128, 256]), vec![1, 128], 7);
        let (mut wd, mut cd) = (Wgpu::from_host(zeros.clone()), Cpu::from_host(zeros.clone()));
        Wgpu::assign(&mut wd, &ld, &Wgpu::from_host(data.clone()), &ls).unwrap();
        Cpu::assign(&mut cd, &ld, &Cpu::from_host(data.clone()), &ls).unwrap();
        let whole = Shape::from([65_536]);
        same_bytes(&host(&wd, &whole), &cpu_host(&cd, &whole), &format!("assign {dtype:?}"));

        let parts = [Layout::new(Shape::from([3, 5]), vec![5, 1], 11), Layout::new(Shape::from([3, 7]), vec![1, 3], 1001)];
        let w = Wgpu::from_host(data.clone());
        let c = Cpu::from_host(data.clone());
        let got = Wgpu::cat(&[(&w, &parts[0]), (&w, &parts[1])], 1).unwrap();
        let want = Cpu::cat(&[(&c, &parts[0]), (&c, &parts[1])], 1).unwrap();
        let out = Shape::from([3, 12]);
        same_bytes(&host(&got, &out), &cpu_host(&want, &out), &format!("cat {dtype:?}"));

        // gather along dim 1 of a transposed [256, 256] view, by indices with repeats
        let lv = Layout::new(Shape::from([256, 256]), vec![1, 256], 0);
        let li = Layout::contiguous(Shape::from([256, 300]));
        let idx = HostData::from((0..256 * 300).map(|i| (i * 37 % 256) as i64).collect::<Vec<_>>());
        let got = Wgpu::gather(&w, &lv, 1, &Wgpu::from_host(idx.clone()), &li).unwrap();
        let want = Cpu::gather(&c, &lv, 1, &Cpu::from_host(idx), &li).unwrap();
        same_bytes(&host(&got, li.shape()), &cpu_host(&want, li.shape()), &format!("gather {dtype:?}"));

        // unfold of a [2, 4, 64, 128] image (a strided view), 3 x 3 windows, padding 1, a pad
        // value that rounds (0.1 in the dtype, rounded once from f64 as on the CPU)
        let window = Window::new("unfold", &[3, 3], &[2, 1], &[(1, 1), (1, 1)], &[1, 1]).unwrap();
        let li = Layout::new(Shape::from([2, 4, 64, 128]), vec![32_768, 64, 1, 256], 0);
        let got = Wgpu::unfold(&w, &li, &window, 0.1).unwrap();
        let want = Cpu::unfold(&c, &li, &window, 0.1).unwrap();
        let cols = Shape::from([2, 36, 32 * 128]);
        same_bytes(&host(&got, &cols), &cpu_host(&want, &cols), &format!("unfold {dtype:?}"));
    }
    no_host_path();
}

/// The rows' backwards, `where` with a bool, a half and an f32 condition,
/// scatter-add, fold, attention forward and backward (a bool mask, and
/// dropout) and fused programs on halves, against the CPU.
#[test]
fn rows_windows_attention_and_programs_match_the_cpu() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let mut g = Generator::new(5);
    for dtype in LOW {
        let shape = Shape::from([3, 4, 37]);
        let (dx, lx) = random_view(&mut g, &shape, dtype);
        let (dy, ly) = random_view(&mut g, &shape, dtype);
        let (wx, wy, cx, cy) = (Wgpu::from_host(dx.clone()), Wgpu::from_host(dy.clone()), Cpu::from_host(dx), Cpu::from_host(dy));
        for log in [false, true] {
            let got = host(&Wgpu::softmax_backward(&wx, &lx, &wy, &ly, 2, log).unwrap(), &shape);
            let want = cpu_host(&Cpu::softmax_backward(&cx, &lx, &cy, &ly, 2, log).unwrap(), &shape);
            check(&got, &want, false, 1e-6, &format!("softmax_backward log={log}"));
        }
        let rows = Shape::from([3, 4, 1]);
        let (dr, lr) = random_view(&mut g, &rows, dtype);
        let got = host(&Wgpu::layer_norm_backward(&wx, &lx, &wy, &ly, &Wgpu::from_host(dr.clone()), &lr, 1).unwrap(), &shape);
        let want = cpu_host(&Cpu::layer_norm_backward(&cx, &lx, &cy, &ly, &Cpu::from_host(dr), &lr, 1).unwrap(), &shape);
        check(&got, &want, false, 1e-5, "layer_norm_backward");

        let lo = Layout::contiguous(shape.clone());
        let bools = HostData::Bool((0..shape.numel()).map(|i| i % 3 == 0).collect());
        let halves = HostData::from_f64(&(0..shape.numel()).map(|i| (i % 4) as f64 - 1.5).collect::<Vec<_>>(), dtype);
        let singles = HostData::from_f64(&(0..shape.numel()).map(|i| (i % 4) as f64 - 1.5).collect::<Vec<_>>(), DType::F32);
        for cond in [bools, halves, singles] {
            let got = host(&Wgpu::where_select(&Wgpu::from_host(cond.clone()), &lo, &wx, &lx, &wy, &ly).unwrap(), &shape);
            let want = cpu_host(&Cpu::where_select(&Cpu::from_host(cond.clone()), &lo, &cx, &lx, &cy, &ly).unwrap(), &shape);
            check(&got, &want, true, 0.0, &format!("where on a {:?} condition", cond.dtype()));
        }
        let idx = HostData::from((0..shape.numel() as i64).map(|i| (i * 7) % 3).collect::<Vec<_>>());
        let got = host(&Wgpu::scatter_add(&shape, 0, &Wgpu::from_host(idx.clone()), &lo, &wx, &lx).unwrap(), &shape);
        let want = cpu_host(&Cpu::scatter_add(&shape, 0, &Cpu::from_host(idx), &lo, &cx, &lx).unwrap(), &shape);
        check(&got, &want, false, 1e-6, "scatter_add");

        // fold of 3-wide windows of stride 2 (padding 1) back onto 7 positions
        let window = Window::new("fold", &[3], &[2], &[(1, 1)], &[1]).unwrap();
        let cols = Shape::from([2, 6, 4]);
        let (dc, lc) = random_view(&mut g, &cols, dtype);
        let got = Wgpu::fold(&Wgpu::from_host(dc.clone()), &lc, &window, &[7]).unwrap();
        let want = Cpu::fold(&Cpu::from_host(dc), &lc, &window, &[7]).unwrap();
        let folded = Shape::from([2, 2, 7]);
        check(&host(&got, &folded), &cpu_host(&want, &folded), false, 1e-6, "fold");

        // attention: [2, 5, 8] queries over 6 keys, a bool mask, then dropout
        let (q, k, v) = (Shape::from([2, 5, 8]), Shape::from([2, 6, 8]), Shape::from([2, 6, 4]));
        let views: Vec<(HostData, Layout)> = [&q, &k, &v].iter().map(|s| random_view(&mut g, s, dtype)).collect();
        let mask = HostData::Bool((0..60).map(|i| i % 6 <= (i / 6) % 5).collect());
        let lm = Layout::contiguous(Shape::from([2, 5, 6]));
        let seed = HostData::from(vec![0.25f64, 0.75]);
        let ls = Layout::contiguous(Shape::from([2]));
        for dropout in [0.0, 0.3] {
            let spec = AttentionSpec { scale: 0.35, causal: false, dropout };
            let run = |w: bool| -> (HostData, HostData, Vec<HostData>) {
                macro_rules! on {
                    ($b:ty) => {{
                        let st: Vec<<$b as Backend>::Storage> = views.iter().map(|(d, _)| <$b>::from_host(d.clone())).collect();
                        let (m, s) = (<$b>::from_host(mask.clone()), <$b>::from_host(seed.clone()));
                        let mut ins: Vec<(&<$b as Backend>::Storage, &Layout)> = st.iter().zip(&views).map(|(s, (_, l))| (s, l)).collect();
                        ins.push((&m, &lm));
                        if dropout > 0.0 {
                            ins.push((&s, &ls));
                        }
                        let (out, lse) = <$b>::attention(&ins, spec).unwrap();
                        let (out_shape, lse_shape) = (Shape::from([2, 5, 4]), Shape::from([2, 5]));
                        let (oh, lh) = (
                            <$b>::to_host(&out, &Layout::contiguous(out_shape.clone())).unwrap(),
                            <$b>::to_host(&lse, &Layout::contiguous(lse_shape.clone())).unwrap(),
                        );
                        let grad =
                            <$b>::from_host(HostData::from_f64(&(0..40).map(|i| (i % 5) as f64 * 0.25 - 0.5).collect::<Vec<_>>(), dtype));
                        let (lo_, ll_) = (Layout::contiguous(out_shape), Layout::contiguous(lse_shape));
                        let mut bw: Vec<(&<$b as Backend>::Storage, &Layout)> = ins[..3].to_vec();
                        bw.extend([(&out, &lo_), (&lse, &ll_), (&grad, &lo_), (&m, &lm)]);
                        if dropout > 0.0 {
                            bw.push((&s, &ls));
                        }
                        let grads = <$b>::attention_backward(&bw, spec).unwrap();
                        let gh = grads
                            .iter()
                            .zip([&q, &k, &v])
                            .map(|(t, sh)| <$b>::to_host(t, &Layout::contiguous(sh.clone())).unwrap())
                            .collect();
                        (oh, lh, gh)
                    }};
                }
                if w { on!(Wgpu) } else { on!(Cpu) }
            };
            let (got, want) = (run(true), run(false));
            check(&got.0, &want.0, false, 1e-5, &format!("attention out, dropout {dropout}"));
            check(&got.1, &want.1, false, 1e-5, &format!("attention lse, dropout {dropout}"));
            for (i, (a, b)) in got.2.iter().zip(&want.2).enumerate() {
                check(a, b, false, 1e-5, &format!("attention grad {i}, dropout {dropout}"));
            }
        }

        // a program runs op by op, each step rounding as its eager op does
        let program = ElementwiseProgram::new(
            2,
            vec![Instr::Binary(BinaryOp::Mul, 0, 1), Instr::Unary(UnaryOp::Exp, 2), Instr::Binary(BinaryOp::Add, 3, 0)],
            vec![4, 2],
        )
        .unwrap();
        let got = Wgpu::fused_elementwise(&program, &[(&wx, &lx), (&wy, &ly)]).unwrap();
        let want = Cpu::fused_elementwise(&program, &[(&cx, &lx), (&cy, &ly)]).unwrap();
        check(&host(&got[1], &shape), &cpu_host(&want[1], &shape), true, 0.0, "program's product");
        check(&host(&got[0], &shape), &cpu_host(&want[0], &shape), false, 0.0, "program's exp + x");
    }
    no_host_path();
}
