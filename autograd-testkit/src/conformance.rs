//! The backend conformance suite.
//!
//! Each check runs a primitive of backend `B` on random shapes and random
//! strided views (permuted, sliced with steps, broadcast) and compares the
//! result with [`RefBackend`]; a few anchors with hand-computed values keep
//! the reference itself honest. A third-party backend proves itself with one
//! line in its tests:
//!
//! ```ignore
//! autograd_testkit::backend_conformance!(MyBackend);
//! ```

use autograd_core::fused_update::FusedUpdate;
use autograd_core::rng::Generator;
use autograd_core::{ArgReduceOp, Backend, BinaryOp, DType, HostData, Layout, ReduceOp, RefBackend, Shape, UnaryOp};

/// Instantiates the whole conformance suite as `#[test]`s for a backend
/// type (a module `conformance` with one test per check).
#[macro_export]
macro_rules! backend_conformance {
    ($backend:ty) => {
        $crate::instantiate!(
            $backend,
            conformance,
            [
                anchors,
                primitives,
                unary,
                binary,
                reduce,
                arg_reduce,
                matmul,
                addmm,
                indexing,
                copy_cast_cat_where,
                softmax,
                layer_norm,
                window,
                attention,
                fused_update,
                errors,
                random,
                fused_elementwise,
                low_precision,
            ]
        );
    };
}

const DTYPES: [DType; 2] = [DType::F32, DType::F64];

fn tol(dtype: DType) -> f64 {
    if dtype == DType::F32 { 2e-5 } else { 1e-12 }
}

/// Asserts two host buffers agree elementwise (relative + absolute tolerance; NaNs must match).
pub fn assert_close(got: &HostData, want: &HostData, rtol: f64, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    assert_eq!(g.len(), w.len(), "{what}: length");
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rtol * (1.0 + b.abs());
        assert!(ok, "{what}: element {i}: got {a}, want {b}");
    }
}

fn random_shape(g: &mut Generator, max_rank: usize, max_dim: u64) -> Shape {
    let r = g.below(max_rank as u64 + 1) as usize;
    Shape::new((0..r).map(|_| 1 + g.below(max_dim) as usize).collect())
}

fn random_values(g: &mut Generator, n: usize, dtype: DType) -> HostData {
    let v: Vec<f64> = (0..n).map(|_| g.normal() * 2.0).collect();
    HostData::from_f64(&v, dtype)
}

/// A random strided view with the given shape: the data lives in a larger
/// buffer, dims are stored permuted and possibly with a step, and a random
/// offset is applied. Returns the storage data and the view's layout.
pub fn random_view(g: &mut Generator, shape: &Shape, dtype: DType) -> (HostData, Layout) {
    let r = shape.rank();
    // Storage order: a random permutation of the logical dims.
    let mut perm: Vec<usize> = (0..r).collect();
    for i in (1..r).rev() {
        perm.swap(i, g.below(i as u64 + 1) as usize);
    }
    let steps: Vec<usize> = (0..r).map(|_| if g.below(3) == 0 { 2 } else { 1 }).collect();
    let stored_dims: Vec<usize> = perm.iter().map(|&p| shape.dims()[p] * steps[p]).collect();
    let offset = g.below(3) as usize;
    let base = Layout::contiguous(Shape::new(stored_dims.clone()));
    let total = offset + base.numel();
    let data = random_values(g, total, dtype);
    let mut strides = vec![0; r];
    for (k, &p) in perm.iter().enumerate() {
        strides[p] = base.strides()[k] * steps[p];
    }
    (data, Layout::new(shape.clone(), strides, offset))
}

fn both<B: Backend>(data: &HostData) -> (B::Storage, <RefBackend as Backend>::Storage) {
    (B::from_host(data.clone()), RefBackend::from_host(data.clone()))
}

/// Hand-computed values, so the reference is checked too.
pub fn anchors<B: Backend>() {
    let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    let a = B::from_host(HostData::from(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let b = B::from_host(HostData::from(vec![1.0f64, 0.0, 0.0, 1.0, 1.0, 1.0]));
    let c = B::matmul(&a, &l(&[2, 3]), &b, &l(&[3, 2])).unwrap();
    assert_eq!(B::to_host(&c, &l(&[2, 2])).unwrap(), HostData::from(vec![4.0, 5.0, 10.0, 11.0]));
    let s = B::reduce(ReduceOp::Sum, &a, &l(&[2, 3]), &[1]).unwrap();
    assert_eq!(B::to_host(&s, &l(&[2, 1])).unwrap(), HostData::from(vec![6.0, 15.0]));
    let s = B::reduce(ReduceOp::Sum, &a, &l(&[2, 3]), &[0]).unwrap();
    assert_eq!(B::to_host(&s, &l(&[1, 3])).unwrap(), HostData::from(vec![5.0, 7.0, 9.0]));
    let t = l(&[2, 3]).transpose(0, 1).unwrap();
    let ct = B::copy_strided(&a, &t).unwrap();
    assert_eq!(B::to_host(&ct, &l(&[3, 2])).unwrap(), HostData::from(vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
    let (mx, ix) = B::arg_reduce(ArgReduceOp::Max, &a, &l(&[2, 3]), 0).unwrap();
    assert_eq!(B::to_host(&mx, &l(&[1, 3])).unwrap(), HostData::from(vec![4.0, 5.0, 6.0]));
    assert_eq!(B::to_host(&ix, &l(&[1, 3])).unwrap(), HostData::from(vec![1i64, 1, 1]));
    let row = l(&[3]).broadcast_as(&Shape::from([2, 3])).unwrap();
    let d = B::binary(BinaryOp::Sub, &a, &l(&[2, 3]), &a, &row).unwrap();
    assert_eq!(B::to_host(&d, &l(&[2, 3])).unwrap(), HostData::from(vec![0.0, 0.0, 0.0, 3.0, 3.0, 3.0]));
    let u = B::unary(UnaryOp::Sigmoid, &B::from_host(HostData::from(vec![0.0f32, -1000.0, 1000.0])), &l(&[3])).unwrap();
    assert_eq!(B::to_host(&u, &l(&[3])).unwrap(), HostData::from(vec![0.5f32, 0.0, 1.0]));
}

/// Every unary op on random strided views.
pub fn unary<B: Backend>() {
    let mut g = Generator::new(1);
    // every variant, and a negative fractional power besides
    let ops: Vec<UnaryOp> = UnaryOp::ALL.iter().copied().chain([UnaryOp::Powf(-1.5)]).collect();
    for &dtype in &DTYPES {
        for &op in &ops {
            for size in [1usize, 7, 70_000] {
                let shape = if size > 100 { Shape::from([size / 100, 100]) } else { random_shape(&mut g, 4, 5) };
                let (data, l) = random_view(&mut g, &shape, dtype);
                let (x, r) = both::<B>(&data);
                let got = B::unary(op, &x, &l).unwrap();
                let want = RefBackend::unary(op, &r, &l).unwrap();
                let out = Layout::contiguous(shape.clone());
                assert_close(
                    &B::to_host(&got, &out).unwrap(),
                    &RefBackend::to_host(&want, &out).unwrap(),
                    tol(dtype),
                    &format!("{op:?} {shape:?} {dtype:?}"),
                );
            }
        }
    }
}

/// Binary ops with broadcasting and strided operands.
pub fn binary<B: Backend>() {
    let mut g = Generator::new(2);
    let ops = BinaryOp::ALL;
    for &dtype in &DTYPES {
        for &op in ops {
            for trial in 0..12 {
                let out = if trial == 11 { Shape::from([300, 257]) } else { random_shape(&mut g, 4, 5) };
                // Each operand keeps a random subset of the output's dims (others become 1 or vanish).
                let mk = |g: &mut Generator| {
                    let lead = g.below(out.rank() as u64 + 1) as usize;
                    Shape::new(out.dims()[lead..].iter().map(|&d| if g.below(3) == 0 { 1 } else { d }).collect())
                };
                let (sa, sb) = (mk(&mut g), mk(&mut g));
                let (da, la) = random_view(&mut g, &sa, dtype);
                let (db, lb) = random_view(&mut g, &sb, dtype);
                let (la, lb) = (la.broadcast_as(&out).unwrap(), lb.broadcast_as(&out).unwrap());
                let (xa, ra) = both::<B>(&da);
                let (xb, rb) = both::<B>(&db);
                let got = B::binary(op, &xa, &la, &xb, &lb).unwrap();
                let want = RefBackend::binary(op, &ra, &la, &rb, &lb).unwrap();
                let lo = Layout::contiguous(out.clone());
                assert_close(
                    &B::to_host(&got, &lo).unwrap(),
                    &RefBackend::to_host(&want, &lo).unwrap(),
                    tol(dtype),
                    &format!("{op:?} {sa:?} {sb:?} -> {out:?}"),
                );
            }
        }
    }
}

/// Sum/max/min over random sets of axes.
pub fn reduce<B: Backend>() {
    let mut g = Generator::new(3);
    for &dtype in &DTYPES {
        for &op in ReduceOp::ALL {
            for trial in 0..30 {
                let shape = match trial {
                    0 => Shape::from([1000, 300]),
                    1 => Shape::from([300, 1000]),
                    2 => Shape::from([64, 50, 40]),
                    // contiguous, a middle block kept (per-channel statistics), some NaN
                    3..=5 => Shape::from([32, 16, 9, 70]),
                    _ => random_shape(&mut g, 4, 6),
                };
                let dims: Vec<usize> = match trial {
                    0 | 2 => vec![0],
                    1 => vec![1],
                    3 => vec![0, 2, 3],
                    4 => vec![0, 3],
                    5 => vec![0, 1, 3],
                    _ => (0..shape.rank()).filter(|_| g.below(2) == 0).collect(),
                };
                let (d, l) = if (3..=5).contains(&trial) {
                    let mut v = random_values(&mut g, shape.numel(), dtype).to_f64_vec();
                    v[777] = f64::NAN;
                    (HostData::from_f64(&v, dtype), Layout::contiguous(shape.clone()))
                } else {
                    random_view(&mut g, &shape, dtype)
                };
                let (x, r) = both::<B>(&d);
                let got = B::reduce(op, &x, &l, &dims).unwrap();
                let want = RefBackend::reduce(op, &r, &l, &dims).unwrap();
                let mut od = shape.dims().to_vec();
                for &k in &dims {
                    od[k] = 1;
                }
                let lo = Layout::contiguous(Shape::new(od));
                // Summation order may differ (blocking, threads): allow for it.
                let t = if op == ReduceOp::Sum { tol(dtype) * 50.0 } else { 0.0 };
                assert_close(
                    &B::to_host(&got, &lo).unwrap(),
                    &RefBackend::to_host(&want, &lo).unwrap(),
                    t,
                    &format!("{op:?} {shape:?} over {dims:?}"),
                );
            }
        }
    }
}

/// Max/min with indices along one axis.
pub fn arg_reduce<B: Backend>() {
    let mut g = Generator::new(4);
    for &dtype in &DTYPES {
        for &op in ArgReduceOp::ALL {
            for _ in 0..20 {
                let mut shape = random_shape(&mut g, 4, 6);
                if shape.rank() == 0 {
                    shape = Shape::from([3]);
                }
                let dim = g.below(shape.rank() as u64) as usize;
                let (d, l) = random_view(&mut g, &shape, dtype);
                let (x, r) = both::<B>(&d);
                let (gv, gi) = B::arg_reduce(op, &x, &l, dim).unwrap();
                let (wv, wi) = RefBackend::arg_reduce(op, &r, &l, dim).unwrap();
                let mut od = shape.dims().to_vec();
                od[dim] = 1;
                let lo = Layout::contiguous(Shape::new(od));
                assert_close(&B::to_host(&gv, &lo).unwrap(), &RefBackend::to_host(&wv, &lo).unwrap(), 0.0, "arg_reduce values");
                assert_eq!(B::to_host(&gi, &lo).unwrap(), RefBackend::to_host(&wi, &lo).unwrap(), "arg_reduce indices");
            }
        }
    }
}

/// Matmul with transposed, strided and broadcast-batch operands, small and large.
pub fn matmul<B: Backend>() {
    let mut g = Generator::new(5);
    for &dtype in &DTYPES {
        for trial in 0..20 {
            let (m, k, n) = if trial < 3 {
                (67 + trial * 40, 129, 93)
            } else {
                (1 + g.below(9) as usize, 1 + g.below(9) as usize, 1 + g.below(9) as usize)
            };
            let batch: Vec<usize> = (0..g.below(3)).map(|_| 1 + g.below(3) as usize).collect();
            let bb: Vec<usize> = batch.iter().map(|&d| if g.below(2) == 0 { 1 } else { d }).collect();
            let sa = Shape::new(batch.iter().copied().chain([m, k]).collect());
            let sb = Shape::new(bb.iter().copied().chain([k, n]).collect());
            let (da, la) = random_view(&mut g, &sa, dtype);
            let (db, lb) = random_view(&mut g, &sb, dtype);
            let lb = lb.broadcast_as(&Shape::new(batch.iter().copied().chain([k, n]).collect())).unwrap();
            let (xa, ra) = both::<B>(&da);
            let (xb, rb) = both::<B>(&db);
            let got = B::matmul(&xa, &la, &xb, &lb).unwrap();
            let want = RefBackend::matmul(&ra, &la, &rb, &lb).unwrap();
            let lo = Layout::contiguous(Shape::new(batch.iter().copied().chain([m, n]).collect()));
            let t = tol(dtype) * (k as f64).sqrt() * 10.0;
            assert_close(&B::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), t, &format!("matmul {sa:?} x {sb:?}"));
        }
    }
}

/// Products large enough to be split over threads and shaped so that the
/// CPU backend computes some transposed (`x W^T` at a small batch), with and
/// without a bias folded in ([`Backend::addmm`]), against the reference's
/// `matmul` + `add`; a bias of the wrong shape is an `Err`.
pub fn addmm<B: Backend>() {
    let mut g = Generator::new(7);
    let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    for &dtype in &DTYPES {
        // (m, k, n, weight stored [n, k] and used transposed, batch)
        for &(m, k, n, wt, nb) in &[
            (24, 300, 700, true, 1),
            (700, 300, 24, false, 1),
            (200, 150, 180, true, 1),
            (3, 40, 50, true, 4),
            (1, 7, 5, false, 1),
            (9, 0, 6, true, 1),
        ] {
            let batch: Vec<usize> = if nb > 1 { vec![nb] } else { vec![] };
            let sa = Shape::new(batch.iter().copied().chain([m, k]).collect());
            let (da, la) = random_view(&mut g, &sa, dtype);
            let db = random_values(&mut g, nb * n * k, dtype);
            let lb = if wt { l(&[nb, n, k]).transpose(1, 2).unwrap() } else { l(&[nb, k, n]) };
            let lb = if nb > 1 { lb } else { Layout::new(Shape::from([k, n]), vec![lb.strides()[1], lb.strides()[2]], 0) };
            let bias = random_values(&mut g, n, dtype);
            let out = Shape::new(batch.iter().copied().chain([m, n]).collect());
            let lc = l(&[n]).broadcast_as(&out).unwrap();
            let ((xa, ra), (xb, rb), (xc, rc)) = (both::<B>(&da), both::<B>(&db), both::<B>(&bias));
            let lo = Layout::contiguous(out.clone());
            let t = tol(dtype) * ((k + 1) as f64).sqrt() * 10.0;
            let want = RefBackend::matmul(&ra, &la, &rb, &lb).unwrap();
            let got = B::matmul(&xa, &la, &xb, &lb).unwrap();
            let what = format!("matmul {sa:?} x {:?} (strides {:?})", lb.shape(), lb.strides());
            assert_close(&B::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), t, &what);
            let want = RefBackend::binary(BinaryOp::Add, &want, &lo, &rc, &lc).unwrap();
            let got = B::addmm(&xc, &lc, &xa, &la, &xb, &lb).unwrap();
            assert_close(&B::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), t, &format!("addmm {what}"));
            let bad = l(&[n]).broadcast_as(&Shape::from([m + 1, n])).unwrap();
            assert!(B::addmm(&xc, &bad, &xa, &la, &xb, &lb).is_err(), "addmm accepted a bias of the wrong shape");
        }
    }
}

/// Gather and scatter-add along each axis.
pub fn indexing<B: Backend>() {
    let mut g = Generator::new(6);
    for &dtype in &DTYPES {
        for _ in 0..20 {
            let mut shape = random_shape(&mut g, 3, 5);
            if shape.rank() == 0 {
                shape = Shape::from([4]);
            }
            let dim = g.below(shape.rank() as u64) as usize;
            let mut idims = shape.dims().to_vec();
            idims[dim] = 1 + g.below(6) as usize;
            let ishape = Shape::new(idims);
            let idx: Vec<i64> = (0..ishape.numel()).map(|_| g.below(shape.dims()[dim] as u64) as i64).collect();
            let li = Layout::contiguous(ishape.clone());
            let (ib, ir) = both::<B>(&HostData::from(idx));
            let (d, l) = random_view(&mut g, &shape, dtype);
            let (x, r) = both::<B>(&d);
            let got = B::gather(&x, &l, dim, &ib, &li).unwrap();
            let want = RefBackend::gather(&r, &l, dim, &ir, &li).unwrap();
            assert_close(&B::to_host(&got, &li).unwrap(), &RefBackend::to_host(&want, &li).unwrap(), 0.0, "gather");
            let (sd, sl) = random_view(&mut g, &ishape, dtype);
            let (s, sr) = both::<B>(&sd);
            let got = B::scatter_add(&shape, dim, &ib, &li, &s, &sl).unwrap();
            let want = RefBackend::scatter_add(&shape, dim, &ir, &li, &sr, &sl).unwrap();
            let lo = Layout::contiguous(shape.clone());
            assert_close(&B::to_host(&got, &lo).unwrap(), &RefBackend::to_host(&want, &lo).unwrap(), tol(dtype), "scatter_add");
        }
    }
}

/// Strided copies, dtype casts, concatenation and select.
pub fn copy_cast_cat_where<B: Backend>() {
    let mut g = Generator::new(7);
    for &dtype in &DTYPES {
        for _ in 0..20 {
            let shape = random_shape(&mut g, 4, 5);
            let (d, l) = random_view(&mut g, &shape, dtype);
            let (x, r) = both::<B>(&d);
            let lo = Layout::contiguous(shape.clone());
            let got = B::copy_strided(&x, &l).unwrap();
            assert_eq!(B::to_host(&got, &lo).unwrap(), RefBackend::to_host(&r, &l).unwrap(), "copy_strided");
            assert_eq!(B::to_host(&x, &l).unwrap(), RefBackend::to_host(&r, &l).unwrap(), "to_host");
            for to in [DType::F16, DType::BF16, DType::F32, DType::F64] {
                let got = B::cast(&x, &l, to).unwrap();
                let want = RefBackend::cast(&r, &l, to).unwrap();
                assert_eq!(B::to_host(&got, &lo).unwrap(), RefBackend::to_host(&want, &lo).unwrap(), "cast to {to:?}");
            }
            // where
            let (dc, lc) = random_view(&mut g, &shape, dtype);
            let (db, lb) = random_view(&mut g, &shape, dtype);
            let (c, rc) = both::<B>(&dc);
            let (y, ry) = both::<B>(&db);
            let got = B::where_select(&c, &lc, &x, &l, &y, &lb);
            let want = RefBackend::where_select(&rc, &lc, &r, &l, &ry, &lb);
            let (got, want) = (got.unwrap(), want.unwrap());
            assert_eq!(B::to_host(&got, &lo).unwrap(), RefBackend::to_host(&want, &lo).unwrap(), "where");
            // cat along a random dim with a second random part
            if shape.rank() > 0 {
                let dim = g.below(shape.rank() as u64) as usize;
                let mut d2 = shape.dims().to_vec();
                d2[dim] = 1 + g.below(3) as usize;
                let (e, le) = random_view(&mut g, &Shape::new(d2), dtype);
                let (xe, re) = both::<B>(&e);
                let got = B::cat(&[(&x, &l), (&xe, &le)], dim).unwrap();
                let want = RefBackend::cat(&[(&r, &l), (&re, &le)], dim).unwrap();
                let mut od = shape.dims().to_vec();
                od[dim] += le.dims()[dim];
                let lo = Layout::contiguous(Shape::new(od));
                assert_eq!(B::to_host(&got, &lo).unwrap(), RefBackend::to_host(&want, &lo).unwrap(), "cat");
            }
        }
    }
    // assign into a strided destination, from a strided source of another dtype
    for _ in 0..20 {
        let shape = random_shape(&mut g, 3, 5);
        let (dd, ld) = random_view(&mut g, &shape, DType::F64);
        let (sd, ls) = random_view(&mut g, &shape, DType::F32);
        let (mut x, mut r) = both::<B>(&dd);
        let (s, sr) = both::<B>(&sd);
        B::assign(&mut x, &ld, &s, &ls).unwrap();
        RefBackend::assign(&mut r, &ld, &sr, &ls).unwrap();
        assert_eq!(B::to_host(&x, &ld).unwrap(), RefBackend::to_host(&r, &ld).unwrap(), "assign (view)");
        let whole = Layout::contiguous(Shape::new(vec![B::len(&x)]));
        assert_eq!(B::to_host(&x, &whole).unwrap(), RefBackend::to_host(&r, &whole).unwrap(), "assign touched only the view");
        assert_eq!(
            B::to_host(&x, &ld).unwrap().to_f64_vec(),
            RefBackend::to_host(&sr, &ls).unwrap().to_f64_vec(),
            "assign wrote the source"
        );
    }
    let f = B::full(&Shape::from([2, 2]), 3.5, DType::F64).unwrap();
    assert_eq!(B::to_host(&f, &Layout::contiguous(Shape::from([2, 2]))).unwrap(), HostData::from(vec![3.5f64; 4]));
}

/// Softmax is stable for large inputs, sums to one, and agrees with the
/// reference on strided views along every dim (NaN and infinite rows too).
pub fn softmax<B: Backend>() {
    let x = B::from_host(HostData::from(vec![1000.0f64, 1001.0, 1002.0, -5.0, 0.0, 5.0]));
    let l = Layout::contiguous(Shape::from([2, 3]));
    let s = B::to_host(&B::softmax(&x, &l, 1).unwrap(), &l).unwrap().to_f64_vec();
    let e = [1.0f64, std::f64::consts::E, std::f64::consts::E.powi(2)];
    let z: f64 = e.iter().sum();
    for j in 0..3 {
        assert!((s[j] - e[j] / z).abs() < 1e-15, "softmax row 0: {s:?}");
        assert!((s[3 + j] - e[j].powi(5) / e.iter().map(|v| v.powi(5)).sum::<f64>()).abs() < 1e-15, "softmax row 1: {s:?}");
    }
    // against the reference along every dim of random strided views, with
    // a NaN, a +inf and all -inf rows among them (NaN rows, as PyTorch)
    let mut g = Generator::new(9);
    for &dtype in &DTYPES {
        for case in 0..40 {
            let shape = if case == 0 { Shape::from([300, 130]) } else { random_shape(&mut g, 4, 6) };
            if shape.rank() == 0 {
                continue;
            }
            let (data, l) = random_view(&mut g, &shape, dtype);
            let mut v = data.to_f64_vec();
            if v.len() > 8 {
                v[1] = f64::NAN;
                v[5] = f64::INFINITY;
                v[6] = f64::NEG_INFINITY;
            }
            if case % 5 == 1 {
                v.iter_mut().for_each(|x| *x = f64::NEG_INFINITY);
            }
            let data = HostData::from_f64(&v, dtype);
            let (x, r) = both::<B>(&data);
            let out = Layout::contiguous(shape.clone());
            for dim in 0..shape.rank() {
                let got = B::softmax(&x, &l, dim).unwrap();
                let want = RefBackend::softmax(&r, &l, dim).unwrap();
                assert_close(
                    &B::to_host(&got, &out).unwrap(),
                    &RefBackend::to_host(&want, &out).unwrap(),
                    tol(dtype),
                    &format!("softmax {shape:?} dim {dim} {dtype:?}"),
                );
            }
        }
    }
    assert!(B::softmax(&x, &l, 2).is_err());
}

/// Layer normalisation's statistics over every number of trailing dims of
/// random strided views, against the reference (constant rows, where the
/// variance is 0, and empty shapes included).
pub fn layer_norm<B: Backend>() {
    let mut g = Generator::new(10);
    for &dtype in &DTYPES {
        for case in 0..30 {
            let shape = match case {
                0 => Shape::from([2048, 128]),
                1 => Shape::from([3, 0, 2]),
                _ => random_shape(&mut g, 4, 6),
            };
            let (data, l) = random_view(&mut g, &shape, dtype);
            let data = if case == 2 { HostData::from_f64(&vec![1.5; data.len()], dtype) } else { data };
            let (x, r) = both::<B>(&data);
            for k in 0..=shape.rank() {
                let (xh, rs) = B::layer_norm(&x, &l, k, 1e-5).unwrap();
                let (wxh, wrs) = RefBackend::layer_norm(&r, &l, k, 1e-5).unwrap();
                let mut kd = shape.dims().to_vec();
                kd[shape.rank() - k..].iter_mut().for_each(|d| *d = 1);
                let (out, lk) = (Layout::contiguous(shape.clone()), Layout::contiguous(Shape::new(kd)));
                let what = format!("layer_norm {shape:?} k {k} {dtype:?}");
                assert_close(&B::to_host(&xh, &out).unwrap(), &RefBackend::to_host(&wxh, &out).unwrap(), tol(dtype) * 10.0, &what);
                assert_close(&B::to_host(&rs, &lk).unwrap(), &RefBackend::to_host(&wrs, &lk).unwrap(), tol(dtype) * 10.0, &what);
            }
            assert!(B::layer_norm(&x, &l, shape.rank() + 1, 1e-5).is_err());
        }
    }
}

/// Wrong dtypes and out-of-range indices are errors, not panics or garbage.
pub fn errors<B: Backend>() {
    let l = Layout::contiguous(Shape::from([2]));
    let a = B::from_host(HostData::from(vec![1.0f32, 2.0]));
    let b = B::from_host(HostData::from(vec![1.0f64, 2.0]));
    assert!(B::binary(BinaryOp::Add, &a, &l, &b, &l).is_err());
    let h = B::from_host(HostData::F16(vec![half::f16::ONE; 2]));
    let hb = B::from_host(HostData::BF16(vec![half::bf16::ONE; 2]));
    assert!(B::binary(BinaryOp::Add, &h, &l, &hb, &l).is_err(), "f16 with bf16 is not promoted by a backend");
    assert!(B::matmul(&h, &Layout::contiguous(Shape::from([1, 2])), &hb, &Layout::contiguous(Shape::from([2, 1]))).is_err());
    let idx = B::from_host(HostData::from(vec![5i64, 0]));
    assert!(B::gather(&b, &l, 0, &idx, &l).is_err());
    assert!(B::scatter_add(&Shape::from([2]), 0, &idx, &l, &b, &l).is_err());
}

/// A stateful update that is no optimizer, so the hook is tested as the
/// contract it is: `s = 0.5 s + g`, `p = p - lr s + 0.01 sqrt(|p|)`, its
/// `lr` read from the first scalar, its calls counted in the second (a
/// negative `lr` is refused by `resolve`).
#[derive(Clone, Debug)]
struct Momentumish {
    lr: f64,
}

const MOMENTUMISH: Momentumish = Momentumish { lr: f64::NAN };

impl Momentumish {
    fn apply<T: num_like::Float>(&self, p: &mut [T], g: &[T], states: &mut [&mut [T]]) {
        let s = &mut *states[0];
        for ((p, &g), s) in p.iter_mut().zip(g).zip(s.iter_mut()) {
            *s = *s * T::of(0.5) + g;
            *p = *p - T::of(self.lr) * *s + T::of(0.01) * p.abs().sqrt();
        }
    }
}

impl FusedUpdate for Momentumish {
    fn num_states(&self) -> usize {
        1
    }
    fn num_scalars(&self) -> usize {
        2
    }
    fn resolve(&self, scalars: &mut [f64]) -> autograd_core::Result<Self> {
        if scalars[0] < 0.0 {
            return Err(autograd_core::Error::msg("momentumish: a negative learning rate"));
        }
        scalars[1] += 1.0;
        Ok(Momentumish { lr: scalars[0] })
    }
    fn apply_f32(&self, p: &mut [f32], g: &[f32], states: &mut [&mut [f32]]) {
        self.apply(p, g, states)
    }
    fn apply_f64(&self, p: &mut [f64], g: &[f64], states: &mut [&mut [f64]]) {
        self.apply(p, g, states)
    }
}

mod num_like {
    /// The few float operations the test update needs.
    pub trait Float: Copy + std::ops::Add<Output = Self> + std::ops::Sub<Output = Self> + std::ops::Mul<Output = Self> {
        fn of(x: f64) -> Self;
        fn abs(self) -> Self;
        fn sqrt(self) -> Self;
    }
    impl Float for f32 {
        fn of(x: f64) -> Self {
            x as f32
        }
        fn abs(self) -> Self {
            f32::abs(self)
        }
        fn sqrt(self) -> Self {
            f32::sqrt(self)
        }
    }
    impl Float for f64 {
        fn of(x: f64) -> Self {
            x
        }
        fn abs(self) -> Self {
            f64::abs(self)
        }
        fn sqrt(self) -> Self {
            f64::sqrt(self)
        }
    }
}

/// The fused-update hook: the backend's [`Backend::fused_update`] against
/// the reference's, on small and large (parallel) buffers, a strided
/// gradient, f32, f64 and the half dtypes (host fallback), the update
/// resolved from its scalars and counting its calls there, and `Err` for
/// mismatched lengths, state counts or scalars (or scalars the update
/// refuses) with nothing written.
pub fn fused_update<B: Backend>() {
    let mut g = Generator::new(8);
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for n in [1usize, 37, 200_000] {
            let shape = Shape::from([n]);
            let p0 = random_values(&mut g, n, dtype);
            let s0 = random_values(&mut g, n, dtype);
            // odd sizes read the gradient through a strided view (every second element, offset 1)
            let (gd, gl) = if n % 2 == 1 {
                (random_values(&mut g, 2 * n + 1, dtype), Layout::new(shape.clone(), vec![2], 1))
            } else {
                (random_values(&mut g, n, dtype), Layout::contiguous(shape.clone()))
            };
            let (mut p, mut rp) = both::<B>(&p0);
            let (mut s, mut rs) = both::<B>(&s0);
            let (gb, gr) = both::<B>(&gd);
            let lr = 0.1 + g.uniform() * 0.1;
            let (mut sc, mut rsc) = both::<B>(&HostData::from(vec![lr, 3.0]));
            B::fused_update(&MOMENTUMISH, &mut p, &gb, &gl, &mut [&mut s], &mut sc).unwrap();
            RefBackend::fused_update(&MOMENTUMISH, &mut rp, &gr, &gl, &mut [&mut rs], &mut rsc).unwrap();
            let l2 = Layout::contiguous(Shape::from([2]));
            assert_eq!(B::to_host(&sc, &l2).unwrap(), HostData::from(vec![lr, 4.0]), "the call counted in its scalars");
            assert_eq!(RefBackend::to_host(&rsc, &l2).unwrap(), HostData::from(vec![lr, 4.0]));
            let l = Layout::contiguous(shape.clone());
            // a native half kernel may round once differently: one ulp (f16 2^-10, bf16 2^-7)
            let t = match dtype {
                DType::F16 => 1e-3,
                DType::BF16 => 8e-3,
                _ => tol(dtype),
            };
            let what = format!("fused update {dtype:?} n={n}");
            assert_close(&B::to_host(&p, &l).unwrap(), &RefBackend::to_host(&rp, &l).unwrap(), t, &format!("{what}: param"));
            assert_close(&B::to_host(&s, &l).unwrap(), &RefBackend::to_host(&rs, &l).unwrap(), t, &format!("{what}: state"));
            // and the reference computed the update itself
            let (pv, gv, sv) = (p0.to_f64_vec(), RefBackend::to_host(&gr, &gl).unwrap().to_f64_vec(), s0.to_f64_vec());
            let (mut pw, mut sw) = (pv.clone(), sv.clone());
            Momentumish { lr }.apply_f64(&mut pw, &gv, &mut [&mut sw]);
            let want = HostData::from_f64(&pw, dtype);
            assert_close(&RefBackend::to_host(&rp, &l).unwrap(), &want, 0.0, &format!("{what}: reference vs closed form"));
        }
    }
    // Mismatched buffers are refused before anything is written.
    let l = Layout::contiguous(Shape::from([3]));
    let p0 = HostData::from(vec![1.0f32, 2.0, 3.0]);
    let mut p = B::from_host(p0.clone());
    let gr = B::from_host(HostData::from(vec![1.0f32, 1.0, 1.0]));
    let mut short = B::from_host(HostData::from(vec![0.0f32; 2]));
    let sc0 = HostData::from(vec![0.1f64, 0.0]);
    let mut sc = B::from_host(sc0.clone());
    let m = &MOMENTUMISH;
    assert!(B::fused_update(m, &mut p, &gr, &l, &mut [&mut short], &mut sc).is_err(), "a state of the wrong length");
    assert!(B::fused_update(m, &mut p, &gr, &l, &mut [], &mut sc).is_err(), "a missing state");
    let l2 = Layout::contiguous(Shape::from([2]));
    let mut s = B::from_host(HostData::from(vec![0.0f32; 3]));
    assert!(B::fused_update(m, &mut p, &gr, &l2, &mut [&mut s], &mut sc).is_err(), "a gradient of the wrong length");
    let bad = Layout::new(Shape::from([3]), vec![5], 0);
    assert!(B::fused_update(m, &mut p, &gr, &bad, &mut [&mut s], &mut sc).is_err(), "a gradient view outside its storage");
    let mut few = B::from_host(HostData::from(vec![0.1f64]));
    assert!(B::fused_update(m, &mut p, &gr, &l, &mut [&mut s], &mut few).is_err(), "too few scalars");
    let mut f32_scalars = B::from_host(HostData::from(vec![0.1f32, 0.0]));
    assert!(B::fused_update(m, &mut p, &gr, &l, &mut [&mut s], &mut f32_scalars).is_err(), "scalars not f64");
    let mut refused = B::from_host(HostData::from(vec![-1.0f64, 0.0]));
    assert!(B::fused_update(m, &mut p, &gr, &l, &mut [&mut s], &mut refused).is_err(), "scalars the update refuses");
    assert_eq!(B::to_host(&p, &l).unwrap(), p0, "nothing written");
    assert_eq!(B::to_host(&sc, &l2).unwrap(), sc0, "scalars unchanged");
    assert_eq!(B::to_host(&refused, &l2).unwrap(), HostData::from(vec![-1.0f64, 0.0]), "refused scalars unchanged");
}

/// `unfold` (im2col) and `fold` (col2im) on random 1-, 2- and 3-d windows
/// over random strided images (0-size batches, padding on either side,
/// stride and dilation, a pad value), against the reference: the same
/// columns bit for bit (a copy), images within the tolerance (sums), or
/// both an `Err` (a kernel larger than the padded input, columns of the
/// wrong shape).
pub fn window<B: Backend>() {
    use autograd_core::window::Window;
    let mut g = Generator::new(29);
    let mut checked = 0;
    for round in 0..60 {
        let dtype = DTYPES[round % 2];
        let r = 1 + g.below(3) as usize;
        let pick = |g: &mut Generator, lo: u64, hi: u64| -> Vec<usize> { (0..r).map(|_| (lo + g.below(hi - lo)) as usize).collect() };
        let (kernel, stride, dilation) = (pick(&mut g, 1, 4), pick(&mut g, 1, 3), pick(&mut g, 1, 3));
        let pads: Vec<(usize, usize)> = (0..r).map(|_| (g.below(3) as usize, g.below(3) as usize)).collect();
        let spatial = pick(&mut g, 1, 7);
        let w = Window::new("unfold", &kernel, &stride, &pads, &dilation).unwrap();
        let (n, c) = (g.below(3) as usize, 1 + g.below(3) as usize);
        let image = Shape::new([n, c].into_iter().chain(spatial.iter().copied()).collect());
        let (data, l) = random_view(&mut g, &image, dtype);
        let pad_value = g.normal();
        let (s, sr) = both::<B>(&data);
        let what = format!("unfold {dtype:?} {image:?} by {w:?}");
        let (got, want) = (B::unfold(&s, &l, &w, pad_value), RefBackend::unfold(&sr, &l, &w, pad_value));
        assert_eq!(got.is_ok(), want.is_ok(), "{what}: Ok on one backend only");
        let (Ok(got), Ok(want)) = (got, want) else { continue };
        let blocks: usize = w.out_dims("unfold", &spatial).unwrap().iter().product();
        let lcols = Layout::contiguous(Shape::from([n, c * w.kernel_numel(), blocks]));
        assert_eq!(B::to_host(&got, &lcols).unwrap(), RefBackend::to_host(&want, &lcols).unwrap(), "{what}");
        let (cols, lc) = random_view(&mut g, lcols.shape(), dtype);
        let (s, sr) = both::<B>(&cols);
        let got = B::fold(&s, &lc, &w, &spatial).unwrap_or_else(|e| panic!("fold of {what}: {e}"));
        let want = RefBackend::fold(&sr, &lc, &w, &spatial).unwrap();
        let li = Layout::contiguous(image.clone());
        assert_close(&B::to_host(&got, &li).unwrap(), &RefBackend::to_host(&want, &li).unwrap(), tol(dtype), &format!("fold of {what}"));
        // columns of the wrong count are refused
        let short = Layout::contiguous(Shape::from([n, c * w.kernel_numel(), blocks + 1]));
        let (bad, _) = random_view(&mut g, short.shape(), dtype);
        assert!(B::fold(&B::from_host(bad), &short, &w, &spatial).is_err(), "fold of {blocks} + 1 blocks for {what}");
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} windows fitted");
    // An anchor: a 2x2 window over a 2x3 image padded by one on the left with -1.
    let x = B::from_host(HostData::from(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let w = Window::new("unfold", &[2, 2], &[1, 1], &[(0, 0), (1, 0)], &[1, 1]).unwrap();
    let cols = B::unfold(&x, &Layout::contiguous(Shape::from([1, 1, 2, 3])), &w, -1.0).unwrap();
    let want = vec![-1.0, 1.0, 2.0, 1.0, 2.0, 3.0, -1.0, 4.0, 5.0, 4.0, 5.0, 6.0];
    assert_eq!(B::to_host(&cols, &Layout::contiguous(Shape::from([1, 4, 3]))).unwrap(), HostData::from(want));
    let big = Window::new("unfold", &[3, 3], &[1, 1], &[(0, 0), (0, 0)], &[1, 1]).unwrap();
    assert!(B::unfold(&x, &Layout::contiguous(Shape::from([1, 1, 2, 3])), &big, 0.0).is_err(), "kernel larger than the input");
}

/// Fused attention forward and backward against the reference's math path
/// on random strided views: batch dims (one broadcast), query and key
/// counts around the CPU's block sizes (0, 1, 63-65, 127-130, 200), no
/// mask, causal (more queries than keys too), a `Bool` mask with fully
/// masked queries, an additive mask with `-inf`s, masks broadcast from
/// `[S]`; the backward fed the reference's `out` and `lse`. Then the
/// checks: mismatched shapes and dtypes are an `Err` on both.
pub fn attention<B: Backend>() {
    use autograd_core::attention::AttentionSpec;
    let mut g = Generator::new(31);
    let sizes = [0usize, 1, 5, 63, 64, 65, 127, 130, 200];
    for round in 0..28 {
        let dtype = DTYPES[round % 2];
        let batch: Vec<usize> = (0..g.below(3) as usize).map(|_| 1 + g.below(3) as usize).collect();
        let (l, s) = (sizes[g.below(9) as usize], sizes[g.below(9) as usize]);
        let (e, ev) = ([1usize, 3, 8, 33][g.below(4) as usize], [1usize, 5, 32, 40][g.below(4) as usize]);
        let dims = |last: [usize; 2]| Shape::new(batch.iter().copied().chain(last).collect::<Vec<_>>());
        let view = |g: &mut Generator, shape: Shape| {
            // the first batch dim broadcast (stride 0) now and then
            if !batch.is_empty() && g.below(4) == 0 {
                let mut one = shape.dims().to_vec();
                one[0] = 1;
                let (d, lo) = random_view(g, &Shape::new(one), dtype);
                (d, lo.broadcast_as(&shape).unwrap())
            } else {
                random_view(g, &shape, dtype)
            }
        };
        let (q, k, v) = (view(&mut g, dims([l, e])), view(&mut g, dims([s, e])), view(&mut g, dims([s, ev])));
        let kind = round % 5;
        let mask = match kind {
            2 => {
                // Bool, each key kept with probability 1/2, row 0 fully masked
                let v: Vec<bool> = (0..l * s).map(|i| i >= s && g.below(2) == 0).collect();
                Some((HostData::from(v), Layout::contiguous(Shape::from([l, s])).broadcast_as(&dims([l, s])).unwrap()))
            }
            3 => {
                let (d, lm) = view(&mut g, dims([l, s]));
                let mut m = d.to_f64_vec();
                for x in m.iter_mut().step_by(3) {
                    *x = f64::NEG_INFINITY;
                }
                Some((HostData::from_f64(&m, dtype), lm))
            }
            4 => {
                // a key padding mask: [S] broadcast over queries and batch
                let m: Vec<f64> = (0..s).map(|j| if j % 4 == 3 { f64::NEG_INFINITY } else { 0.25 * j as f64 }).collect();
                Some((HostData::from_f64(&m, dtype), Layout::contiguous(Shape::from([s])).broadcast_as(&dims([l, s])).unwrap()))
            }
            _ => None,
        };
        // dropout in a third of the cases: the seed is one more input, last
        let dropout = if g.below(3) == 0 { 0.1 + 0.6 * g.uniform() } else { 0.0 };
        let spec = AttentionSpec { scale: 0.1 + g.uniform(), causal: kind == 1, dropout };
        let seed_data = HostData::from(vec![g.uniform(), g.uniform()]);
        let (seed, rseed, lseed) =
            (B::from_host(seed_data.clone()), RefBackend::from_host(seed_data), Layout::contiguous(Shape::from([2])));
        let what = format!("attention {dtype:?} batch {batch:?} L {l} S {s} E {e} Ev {ev} mask kind {kind} {spec:?}");
        let ups: Vec<(B::Storage, <RefBackend as Backend>::Storage, Layout)> = [&q, &k, &v]
            .into_iter()
            .chain(mask.as_ref())
            .map(|(d, lay)| (B::from_host(d.clone()), RefBackend::from_host(d.clone()), lay.clone()))
            .collect();
        let with_seed = dropout > 0.0;
        let mut ins: Vec<(&B::Storage, &Layout)> = ups.iter().map(|(s, _, l)| (s, l)).collect();
        let mut rins: Vec<(&<RefBackend as Backend>::Storage, &Layout)> = ups.iter().map(|(_, r, l)| (r, l)).collect();
        if with_seed {
            ins.push((&seed, &lseed));
            rins.push((&rseed, &lseed));
        }
        let (out, lse) = B::attention(&ins, spec).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (rout, rlse) = RefBackend::attention(&rins, spec).unwrap();
        let (lo, ll) =
            (Layout::contiguous(dims([l, ev])), Layout::contiguous(Shape::new(batch.iter().copied().chain([l]).collect::<Vec<_>>())));
        let want_out = RefBackend::to_host(&rout, &lo).unwrap();
        let want_lse = RefBackend::to_host(&rlse, &ll).unwrap();
        assert_close(&B::to_host(&out, &lo).unwrap(), &want_out, tol(dtype), &format!("{what}: out"));
        assert_close(&B::to_host(&lse, &ll).unwrap(), &want_lse, tol(dtype), &format!("{what}: lse"));
        // backward from the reference's forward, with a strided output gradient
        let (dout, ldo) = random_view(&mut g, lo.shape(), dtype);
        let extra = [(want_out, lo.clone()), (want_lse, ll.clone()), (dout, ldo)];
        let bups: Vec<(B::Storage, <RefBackend as Backend>::Storage, Layout)> =
            extra.iter().map(|(d, lay)| (B::from_host(d.clone()), RefBackend::from_host(d.clone()), lay.clone())).collect();
        let order: Vec<usize> = (0..3).chain(3..6).chain(if mask.is_some() { Some(6) } else { None }).collect();
        let pick = |k: usize| {
            if k < 3 {
                &ups[k]
            } else if k < 6 {
                &bups[k - 3]
            } else {
                &ups[3]
            }
        };
        let mut bins: Vec<(&B::Storage, &Layout)> = order.iter().map(|&k| (&pick(k).0, &pick(k).2)).collect();
        let mut brins: Vec<(&<RefBackend as Backend>::Storage, &Layout)> = order.iter().map(|&k| (&pick(k).1, &pick(k).2)).collect();
        if with_seed {
            bins.push((&seed, &lseed));
            brins.push((&rseed, &lseed));
        }
        let got = B::attention_backward(&bins, spec).unwrap_or_else(|e| panic!("{what} backward: {e}"));
        let want = RefBackend::attention_backward(&brins, spec).unwrap();
        for (n, ((gd, wd), shape)) in got.iter().zip(&want).zip([dims([l, e]), dims([s, e]), dims([s, ev])]).enumerate() {
            let lc = Layout::contiguous(shape);
            let w = RefBackend::to_host(wd, &lc).unwrap();
            assert_close(&B::to_host(gd, &lc).unwrap(), &w, 10.0 * tol(dtype), &format!("{what}: gradient {}", ["q", "k", "v"][n]));
        }
    }
    // Refused on every backend: E differs, a mask of the wrong shape, mixed dtypes.
    let up = |n: usize, d: DType| B::from_host(HostData::from_f64(&vec![0.5; n], d));
    let l = |d: &[usize]| Layout::contiguous(Shape::from(d));
    let spec = AttentionSpec { scale: 1.0, causal: false, dropout: 0.0 };
    let (q, k32, k64) = (up(6, DType::F64), up(8, DType::F32), up(8, DType::F64));
    assert!(B::attention(&[(&q, &l(&[3, 2])), (&k64, &l(&[2, 4])), (&k64, &l(&[2, 4]))], spec).is_err(), "E differs");
    assert!(B::attention(&[(&q, &l(&[3, 2])), (&k32, &l(&[4, 2])), (&k64, &l(&[4, 2]))], spec).is_err(), "mixed dtypes");
    let m = B::from_host(HostData::from(vec![true; 12]));
    assert!(B::attention(&[(&q, &l(&[3, 2])), (&k64, &l(&[4, 2])), (&k64, &l(&[4, 2])), (&m, &l(&[4, 3]))], spec).is_err(), "mask (S, L)");
    assert!(
        B::attention(&[(&q, &l(&[3, 2])), (&k64, &l(&[4, 2])), (&k64, &l(&[4, 2])), (&m, &l(&[3, 5]))], spec).is_err(),
        "mask outside its storage"
    );
    assert!(B::attention(&[(&q, &l(&[3, 2]))], spec).is_err(), "no key");
    // dropout: the seed must follow, F64 of shape [2], and p in (0, 1)
    let drop = AttentionSpec { dropout: 0.5, ..spec };
    let (seed, seed32) = (up(2, DType::F64), up(2, DType::F32));
    let (lq, lkv, l1, l2) = (l(&[3, 2]), l(&[4, 2]), l(&[1]), l(&[2]));
    let qkv = [(&q, &lq), (&k64, &lkv), (&k64, &lkv)];
    assert!(B::attention(&qkv, drop).is_err(), "dropout without its seed");
    let cases: [(&B::Storage, &Layout, AttentionSpec, bool, &str); 5] = [
        (&seed32, &l2, drop, false, "an F32 seed"),
        (&seed, &l1, drop, false, "a seed of one draw"),
        (&seed, &l2, AttentionSpec { dropout: 1.0, ..spec }, false, "p = 1"),
        (&seed, &l2, AttentionSpec { dropout: f64::NAN, ..spec }, false, "p NaN"),
        (&seed, &l2, drop, true, "a good seed"),
    ];
    for (s, ls, sp, ok, what) in cases {
        let ins = [qkv[0], qkv[1], qkv[2], (s, ls)];
        assert_eq!(B::attention(&ins, sp).is_ok(), ok, "{what}");
    }
}

/// Every primitive of the table ([`autograd_core::primitive`]), one sample
/// call each, against the reference: what it makes and what it updates in
/// place. A primitive added to the table is checked here without a line
/// more; the other checks go deeper (random shapes and views) per family.
pub fn primitives<B: Backend>() {
    let samples = autograd_core::Primitive::<B>::samples();
    let reference = autograd_core::Primitive::<RefBackend>::samples();
    assert_eq!(samples.len(), autograd_core::Primitive::<B>::NAMES.len(), "one sample per primitive");
    for (s, r) in samples.iter().zip(&reference) {
        let what = format!("{} on {}", s.primitive, B::NAME);
        let got = s.run_on_host(11).unwrap_or_else(|e| panic!("{what}: {e}"));
        let want = r.run_on_host(11).unwrap_or_else(|e| panic!("{what} on the reference: {e}"));
        assert_eq!(got.len(), want.len(), "{what}: buffers made and updated");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(g, w, tol(w.dtype()), &format!("{what}: buffer {k}"));
        }
        // Too few buffers is an Err, not a panic.
        let mut none: [&mut B::Storage; 0] = [];
        if !s.ins.is_empty() || !s.muts.is_empty() {
            assert!(s.primitive.run(&[], &mut none, Some(&mut Generator::new(1))).is_err(), "{what}: run without its buffers");
        }
    }
}

/// `random` draws the generator's values in row-major order (the same bits
/// as the reference from the same state), in every float dtype, and leaves
/// the generator where the reference leaves it.
pub fn random<B: Backend>() {
    use autograd_core::rng::Distribution;
    for dist in [Distribution::Uniform, Distribution::Normal] {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            for shape in [Shape::scalar(), Shape::from([0]), Shape::from([3, 5]), Shape::from([1000])] {
                let (mut g, mut r) = (Generator::new(11), Generator::new(11));
                let got = B::random(&shape, dtype, dist, &mut g).unwrap();
                let want = RefBackend::random(&shape, dtype, dist, &mut r).unwrap();
                let l = Layout::contiguous(shape.clone());
                assert_eq!(B::dtype(&got), dtype);
                assert_close(
                    &B::to_host(&got, &l).unwrap(),
                    &RefBackend::to_host(&want, &l).unwrap(),
                    0.0,
                    &format!("random {dist:?} {dtype:?} {shape:?}"),
                );
                assert_eq!(g, r, "the generator advances by one draw per element");
            }
        }
    }
    let mut g = Generator::new(1);
    assert!(B::random(&Shape::from([1 << 40, 1 << 40]), DType::F32, Distribution::Uniform, &mut g).is_err(), "an impossible size");
}

/// Bit-for-bit equality, NaN equal to NaN.
fn assert_same_bits(got: &HostData, want: &HostData, what: &str) {
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    assert_eq!(g.len(), w.len(), "{what}: length");
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!((a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits(), "{what}: element {i}: got {a}, want {b}");
    }
}

/// Random fused programs (chains and trees of every unary and binary op)
/// over random strided and broadcast inputs: the same bits as the backend
/// running each step as its own primitive ([`autograd_core::fusion::unfused`]),
/// and close to the reference. Bad calls are `Err`.
pub fn fused_elementwise<B: Backend>() {
    use autograd_core::fusion::{ElementwiseProgram, Instr, unfused};
    let mut g = Generator::new(12);
    for &dtype in &DTYPES {
        for trial in 0..60 {
            let out = match trial {
                0 => Shape::scalar(),
                1 => Shape::from([2000, 3]),
                2 => Shape::from([0, 4]),
                // past the CPU backend's thresholds for splitting across threads
                3 => Shape::from([600, 1000]),
                _ => random_shape(&mut g, 3, 6),
            };
            let n_in = 1 + g.below(3) as usize;
            let mut data = Vec::new();
            for _ in 0..n_in {
                let lead = g.below(out.rank() as u64 + 1) as usize;
                let s = Shape::new(out.dims()[lead..].iter().map(|&d| if g.below(3) == 0 { 1 } else { d }).collect());
                let (d, l) = random_view(&mut g, &s, dtype);
                data.push((d, l.broadcast_as(&out).unwrap()));
            }
            let steps = 1 + g.below(12) as usize;
            let mut instrs = Vec::new();
            for i in 0..steps {
                let regs = (n_in + i) as u64;
                let (a, b) = (g.below(regs) as usize, g.below(regs) as usize);
                instrs.push(if g.below(2) == 0 {
                    Instr::Unary(UnaryOp::ALL[g.below(UnaryOp::ALL.len() as u64) as usize], a)
                } else {
                    Instr::Binary(BinaryOp::ALL[g.below(BinaryOp::ALL.len() as u64) as usize], a, b)
                });
            }
            let total = n_in + steps;
            let mut outs: Vec<usize> = vec![total - 1];
            if total > 2 && g.below(2) == 0 {
                outs.push(g.below(total as u64 - 1) as usize);
            }
            let prog = ElementwiseProgram::new(n_in, instrs, outs).unwrap();
            let xs: Vec<B::Storage> = data.iter().map(|(d, _)| B::from_host(d.clone())).collect();
            let rs: Vec<<RefBackend as Backend>::Storage> = data.iter().map(|(d, _)| RefBackend::from_host(d.clone())).collect();
            let args: Vec<(&B::Storage, &Layout)> = xs.iter().zip(&data).map(|(x, (_, l))| (x, l)).collect();
            let rargs: Vec<(&<RefBackend as Backend>::Storage, &Layout)> = rs.iter().zip(&data).map(|(x, (_, l))| (x, l)).collect();
            let got = B::fused_elementwise(&prog, &args).unwrap();
            let same = unfused::<B>(&prog, &args).unwrap();
            let want = RefBackend::fused_elementwise(&prog, &rargs).unwrap();
            let lo = Layout::contiguous(out.clone());
            for (k, ((x, y), z)) in got.iter().zip(&same).zip(&want).enumerate() {
                let what = format!("fused {prog:?} on {out:?}, output {k}");
                let gh = B::to_host(x, &lo).unwrap();
                assert_same_bits(&gh, &B::to_host(y, &lo).unwrap(), &what);
                assert_close(&gh, &RefBackend::to_host(z, &lo).unwrap(), tol(dtype).max(1e-4), &what);
            }
        }
    }
    // Bad programs and calls are refused.
    assert!(ElementwiseProgram::new(1, vec![Instr::Unary(UnaryOp::Neg, 1)], vec![1]).is_err(), "a step reading itself");
    assert!(ElementwiseProgram::new(1, vec![Instr::Unary(UnaryOp::Neg, 0)], vec![1, 1]).is_err(), "an output twice");
    assert!(ElementwiseProgram::new(1, vec![], vec![3]).is_err(), "an output out of range");
    let prog = ElementwiseProgram::new(2, vec![Instr::Binary(BinaryOp::Add, 0, 1)], vec![2]).unwrap();
    let l3 = Layout::contiguous(Shape::from([3]));
    let a = B::from_host(HostData::from(vec![1.0f32; 3]));
    let b64 = B::from_host(HostData::from(vec![1.0f64; 3]));
    let i = B::from_host(HostData::from(vec![1i64; 3]));
    let short = Layout::contiguous(Shape::from([2]));
    assert!(B::fused_elementwise(&prog, &[(&a, &l3)]).is_err(), "too few inputs");
    assert!(B::fused_elementwise(&prog, &[(&a, &l3), (&b64, &l3)]).is_err(), "mixed dtypes");
    assert!(B::fused_elementwise(&prog, &[(&a, &l3), (&a, &short)]).is_err(), "mixed shapes");
    assert!(B::fused_elementwise(&prog, &[(&i, &l3), (&i, &l3)]).is_err(), "integer inputs");
    let outside = Layout::new(Shape::from([3]), vec![4], 0);
    assert!(B::fused_elementwise(&prog, &[(&a, &l3), (&a, &outside)]).is_err(), "a view outside its storage");
}

/// The spacing of `dtype`'s values at `x`: one unit in the last place
/// (f16: 10 stored bits, subnormals from 2^-14; bf16: 7 bits).
pub fn low_precision_ulp(x: f64, dtype: DType) -> f64 {
    let (bits, min_exp) = match dtype {
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        DType::F32 => (23, -126),
        _ => (52, -1022),
    };
    let e = if x == 0.0 || !x.is_finite() { min_exp } else { (x.abs().log2().floor() as i32).max(min_exp) };
    2f64.powi(e - bits)
}

/// Whether `got` is within one `dtype` ulp of `want` plus `extra` (NaN and
/// infinities must match exactly).
fn within_ulp(got: f64, want: f64, dtype: DType, extra: f64) -> bool {
    if !want.is_finite() || !got.is_finite() {
        return (got.is_nan() && want.is_nan()) || got == want;
    }
    (got - want).abs() <= low_precision_ulp(want, dtype) + extra
}

/// f16 and bf16 compute (PyTorch's CPU "opmath": f32 inside, one rounding
/// at the end): every unary and binary op, reductions, arg max/min,
/// softmax, layer norm, `where` and scatter-add equal the reference's f32
/// op on the widened inputs, rounded, within one low-precision ulp (both
/// compute in f32, whose last bits may differ and round either way);
/// products and `addmm` are within one ulp of the exact (f64) product of
/// the rounded inputs plus the f32 accumulation bound
/// `k * 2^-24 * sum |a_i b_i|`. The results keep the low dtype.
pub fn low_precision<B: Backend>() {
    let mut g = Generator::new(16);
    let shapes = [Shape::from([7]), Shape::from([3, 5]), Shape::from([2, 3, 33])];
    for dtype in [DType::BF16, DType::F16] {
        // Ref's f32 op on the widened data, rounded to `dtype`
        let widened = |d: &HostData| RefBackend::from_host(d.convert(DType::F32));
        let rounded = |s: &<RefBackend as Backend>::Storage, l: &Layout| RefBackend::to_host(s, l).unwrap().convert(dtype);
        let check = |got: &HostData, want: &HostData, extra: f64, what: &str| {
            assert_eq!(got.dtype(), dtype, "{what}: keeps {dtype:?}");
            let (gv, wv) = (got.to_f64_vec(), want.to_f64_vec());
            assert_eq!(gv.len(), wv.len(), "{what}: length");
            for (i, (a, b)) in gv.iter().zip(&wv).enumerate() {
                assert!(within_ulp(*a, *b, dtype, extra), "{what} {dtype:?}: element {i}: got {a}, want {b}");
            }
        };
        for shape in &shapes {
            let lo = Layout::contiguous(shape.clone());
            let (d, l) = random_view(&mut g, shape, dtype);
            let x = B::from_host(d.clone());
            for &op in UnaryOp::ALL {
                let got = B::to_host(&B::unary(op, &x, &l).unwrap(), &lo).unwrap();
                let want = rounded(&RefBackend::unary(op, &widened(&d), &l).unwrap(), &lo);
                check(&got, &want, 0.0, &format!("unary {op:?}"));
            }
            let (d2, l2) = random_view(&mut g, shape, dtype);
            let y = B::from_host(d2.clone());
            for &op in BinaryOp::ALL {
                let got = B::to_host(&B::binary(op, &x, &l, &y, &l2).unwrap(), &lo).unwrap();
                let want = rounded(&RefBackend::binary(op, &widened(&d), &l, &widened(&d2), &l2).unwrap(), &lo);
                check(&got, &want, 0.0, &format!("binary {op:?}"));
            }
            let last = shape.rank() - 1;
            let mut kd = shape.dims().to_vec();
            kd[last] = 1;
            let lk = Layout::contiguous(Shape::new(kd));
            let sum_abs: f64 = d.to_f64_vec().iter().map(|v| v.abs()).sum();
            for &op in ReduceOp::ALL {
                let got = B::to_host(&B::reduce(op, &x, &l, &[last]).unwrap(), &lk).unwrap();
                let want = rounded(&RefBackend::reduce(op, &widened(&d), &l, &[last]).unwrap(), &lk);
                // two f32 summation orders differ by at most the accumulation bound
                check(&got, &want, shape.dims()[last] as f64 * 2f64.powi(-24) * sum_abs, &format!("reduce {op:?}"));
            }
            for &op in ArgReduceOp::ALL {
                let (gv, gi) = B::arg_reduce(op, &x, &l, last).unwrap();
                let (wv, wi) = RefBackend::arg_reduce(op, &widened(&d), &l, last).unwrap();
                check(&B::to_host(&gv, &lk).unwrap(), &rounded(&wv, &lk), 0.0, &format!("arg_reduce {op:?}"));
                assert_eq!(B::to_host(&gi, &lk).unwrap(), RefBackend::to_host(&wi, &lk).unwrap(), "arg_reduce {op:?} indices");
            }
            let got = B::to_host(&B::softmax(&x, &l, last).unwrap(), &lo).unwrap();
            check(&got, &rounded(&RefBackend::softmax(&widened(&d), &l, last).unwrap(), &lo), 0.0, "softmax");
            let (xh, rs) = B::layer_norm(&x, &l, 1, 1e-5).unwrap();
            let (wxh, wrs) = RefBackend::layer_norm(&widened(&d), &l, 1, 1e-5).unwrap();
            check(&B::to_host(&xh, &lo).unwrap(), &rounded(&wxh, &lo), 0.0, "layer_norm xhat");
            check(&B::to_host(&rs, &lk).unwrap(), &rounded(&wrs, &lk), 0.0, "layer_norm rstd");
            let cond = B::from_host(HostData::Bool((0..shape.numel()).map(|i| i % 3 == 0).collect()));
            let got = B::to_host(&B::where_select(&cond, &lo, &x, &l, &y, &l2).unwrap(), &lo).unwrap();
            let want = RefBackend::where_select(
                &RefBackend::from_host(HostData::Bool((0..shape.numel()).map(|i| i % 3 == 0).collect())),
                &lo,
                &widened(&d),
                &l,
                &widened(&d2),
                &l2,
            )
            .unwrap();
            assert_eq!(got, rounded(&want, &lo), "where {dtype:?}: selects without rounding");
            let idx = HostData::from((0..shape.numel() as i64).map(|i| i % shape.dims()[0] as i64).collect::<Vec<_>>());
            let got = B::scatter_add(shape, 0, &B::from_host(idx.clone()), &lo, &x, &l).unwrap();
            let want = RefBackend::scatter_add(shape, 0, &RefBackend::from_host(idx), &lo, &widened(&d), &l).unwrap();
            check(&B::to_host(&got, &lo).unwrap(), &rounded(&want, &lo), 0.0, "scatter_add");
        }
        // products: against the exact product of the rounded inputs
        for (m, k, n) in [(1, 1, 1), (3, 7, 5), (17, 64, 9), (40, 300, 33)] {
            let (da, la) = random_view(&mut g, &Shape::from([m, k]), dtype);
            let (db, lb) = random_view(&mut g, &Shape::from([k, n]), dtype);
            let (dc, _) = random_view(&mut g, &Shape::from([n]), dtype);
            let lc = Layout::contiguous(Shape::from([n])).broadcast_as(&Shape::from([m, n])).unwrap();
            let lo = Layout::contiguous(Shape::from([m, n]));
            let (a, b, c) = (B::from_host(da.clone()), B::from_host(db.clone()), B::from_host(dc.clone()));
            let av = RefBackend::to_host(&RefBackend::from_host(da), &la).unwrap().to_f64_vec();
            let bv = RefBackend::to_host(&RefBackend::from_host(db), &lb).unwrap().to_f64_vec();
            let cv = dc.to_f64_vec();
            let mm = B::to_host(&B::matmul(&a, &la, &b, &lb).unwrap(), &lo).unwrap().to_f64_vec();
            let am = B::to_host(&B::addmm(&c, &lc, &a, &la, &b, &lb).unwrap(), &lo).unwrap();
            assert_eq!(am.dtype(), dtype);
            let am = am.to_f64_vec();
            for i in 0..m {
                for j in 0..n {
                    let terms: Vec<f64> = (0..k).map(|p| av[i * k + p] * bv[p * n + j]).collect();
                    let exact: f64 = terms.iter().sum();
                    let bound = k as f64 * 2f64.powi(-24) * terms.iter().map(|t| t.abs()).sum::<f64>();
                    let got = mm[i * n + j];
                    assert!(within_ulp(got, exact, dtype, bound), "matmul {dtype:?} {m}x{k}x{n} ({i},{j}): {got} vs {exact}");
                    let (got, exact) = (am[i * n + j], exact + cv[j]);
                    let bound = bound + (k + 1) as f64 * 2f64.powi(-24) * cv[j].abs();
                    assert!(within_ulp(got, exact, dtype, bound), "addmm {dtype:?} {m}x{k}x{n} ({i},{j}): {got} vs {exact}");
                }
            }
        }
    }
}
