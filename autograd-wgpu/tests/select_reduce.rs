//! The reduction, selection and fused-program kernels against the
//! reference backend on random shapes, strides, offsets and dims (0-size
//! dims included), reductions long enough for the workgroup tree, and the
//! values that decide ties and NaNs; indices out of range are `Err`s.

use autograd_core::fusion::{ElementwiseProgram, Instr};
use autograd_core::rng::Generator;
use autograd_core::{ArgReduceOp, Backend, BinaryOp, DType, HostData, Layout, ReduceOp, RefBackend, Shape, UnaryOp};
use autograd_testkit::backend_available;
use autograd_testkit::conformance::{assert_close, random_view};
use autograd_wgpu::Wgpu;
use proptest::prelude::*;

fn host<B: Backend>(s: &B::Storage, shape: &Shape) -> HostData {
    B::to_host(s, &Layout::contiguous(shape.clone())).unwrap()
}

/// A strided int64 view of `shape` whose values lie in `0..size`.
fn index_view(g: &mut Generator, shape: &Shape, size: usize) -> (HostData, Layout) {
    let (data, l) = random_view(g, shape, DType::I64);
    let v: Vec<i64> = (0..data.len()).map(|_| g.below(size.max(1) as u64) as i64).collect();
    (HostData::from(v), l)
}

fn check_reduce(op: ReduceOp, data: HostData, l: &Layout, dims: &[usize]) {
    let mut out = l.dims().to_vec();
    dims.iter().for_each(|&d| out[d] = 1);
    let out = Shape::new(out);
    let got = host::<Wgpu>(&Wgpu::reduce(op, &Wgpu::from_host(data.clone()), l, dims).unwrap(), &out);
    let want = host::<RefBackend>(&RefBackend::reduce(op, &RefBackend::from_host(data), l, dims).unwrap(), &out);
    assert_close(&got, &want, 1e-5, &format!("{op:?} over {dims:?} of {:?}", l.dims()));
}

/// Long reductions take the workgroup tree, on grids past one dimension's
/// limit too; 2^20 ones sum exactly; NaN and infinities propagate through
/// max and min as on the CPU.
#[test]
fn long_reductions_and_special_values() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let mut g = Generator::new(3);
    for dims in [vec![3, 1000], vec![1000, 3], vec![2, 70, 33], vec![5000]] {
        let shape = Shape::new(dims.clone());
        for red in [vec![dims.len() - 1], vec![0], (0..dims.len()).collect()] {
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
                let (data, l) = random_view(&mut g, &shape, DType::F32);
                check_reduce(op, data, &l, &red);
            }
        }
    }
    // 66,000 outputs of 64 elements each: one workgroup per output, past
    // the 65,535 workgroups of one grid dimension
    let l = Layout::contiguous(Shape::from([66_000, 64]));
    let s = Wgpu::reduce(ReduceOp::Sum, &Wgpu::full(l.shape(), 0.5, DType::F32).unwrap(), &l, &[1]).unwrap();
    let HostData::F32(v) = host::<Wgpu>(&s, &Shape::from([66_000, 1])) else { panic!("f32 out") };
    assert!(v.iter().all(|&x| x == 32.0), "{:?}", v.iter().position(|&x| x != 32.0));
    let n = 1 << 20;
    let l = Layout::contiguous(Shape::from([n]));
    let s = Wgpu::reduce(ReduceOp::Sum, &Wgpu::full(l.shape(), 1.0, DType::F32).unwrap(), &l, &[0]).unwrap();
    assert_eq!(host::<Wgpu>(&s, &Shape::from([1])), HostData::from(vec![n as f32]));
    let mut v = vec![1.0f32; 300];
    v[17] = f32::NAN;
    v[200] = f32::INFINITY;
    let l = Layout::contiguous(Shape::from([3, 100]));
    for op in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum] {
        check_reduce(op, HostData::from(v.clone()), &l, &[1]);
    }
}

/// Ties go to the first occurrence, a NaN beats everything.
#[test]
fn arg_reduce_ties_and_nan() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let v = vec![1.0f32, 3.0, 3.0, 0.0, f32::NAN, 2.0, f32::NAN, 5.0, -1.0, -1.0, 7.0, 7.0];
    let l = Layout::contiguous(Shape::from([3, 4]));
    for op in [ArgReduceOp::Max, ArgReduceOp::Min] {
        let (vals, idx) = Wgpu::arg_reduce(op, &Wgpu::from_host(HostData::from(v.clone())), &l, 1).unwrap();
        let (rv, ri) = RefBackend::arg_reduce(op, &RefBackend::from_host(HostData::from(v.clone())), &l, 1).unwrap();
        let out = Shape::from([3, 1]);
        assert_close(&host::<Wgpu>(&vals, &out), &host::<RefBackend>(&rv, &out), 0.0, "values");
        assert_eq!(host::<Wgpu>(&idx, &out), host::<RefBackend>(&ri, &out), "{op:?}");
    }
}

/// Out-of-range indices are the call's `Err`, as on the CPU.
#[test]
fn indices_out_of_range_are_errors() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let x = Wgpu::from_host(HostData::from(vec![1.0f32; 6]));
    let l = Layout::contiguous(Shape::from([2, 3]));
    let li = Layout::contiguous(Shape::from([2, 1]));
    for bad in [3i64, -1] {
        let idx = Wgpu::from_host(HostData::from(vec![0i64, bad]));
        let e = Wgpu::gather(&x, &l, 1, &idx, &li).unwrap_err();
        assert!(e.to_string().contains("gather"), "{e}");
        let src = Wgpu::from_host(HostData::from(vec![1.0f32; 2]));
        let e = Wgpu::scatter_add(l.shape(), 1, &idx, &li, &src, &li).unwrap_err();
        assert!(e.to_string().contains("scatter_add"), "{e}");
    }
}

/// A fused program gives what its steps give one by one on the reference.
#[test]
fn fused_program_matches_its_steps() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let prog = ElementwiseProgram::new(
        3,
        vec![
            Instr::Binary(BinaryOp::Mul, 0, 1),
            Instr::Unary(UnaryOp::Gelu, 3),
            Instr::Binary(BinaryOp::Sub, 4, 2),
            Instr::Unary(UnaryOp::Clamp { min: f64::NEG_INFINITY, max: 0.5 }, 5),
            Instr::Unary(UnaryOp::Powf(3.0), 0),
        ],
        vec![6, 4, 1],
    )
    .unwrap();
    let shape = Shape::from([7, 45]);
    let mut g = Generator::new(9);
    let views: Vec<(HostData, Layout)> = (0..3).map(|_| random_view(&mut g, &shape, DType::F32)).collect();
    let dev: Vec<_> = views.iter().map(|(d, _)| Wgpu::from_host(d.clone())).collect();
    let refs: Vec<_> = views.iter().map(|(d, _)| RefBackend::from_host(d.clone())).collect();
    let got = Wgpu::fused_elementwise(&prog, &[(&dev[0], &views[0].1), (&dev[1], &views[1].1), (&dev[2], &views[2].1)]).unwrap();
    let want = RefBackend::fused_elementwise(&prog, &[(&refs[0], &views[0].1), (&refs[1], &views[1].1), (&refs[2], &views[2].1)]).unwrap();
    assert_eq!(got.len(), 3);
    for (a, b) in got.iter().zip(&want) {
        assert_close(&host::<Wgpu>(a, &shape), &host::<RefBackend>(b, &shape), 2e-5, "fused");
    }
    let fused = autograd_wgpu::host_calls().iter().find(|(n, _)| *n == "fused_elementwise").map_or(0, |(_, c)| *c);
    assert_eq!(fused, 0, "the fused program took the host path");
}

/// A product of one step feeding an addition of the next rounds twice in
/// a fused kernel, as op by op: a device compiler that contracted the two
/// into one fused multiply-add (lavapipe did, for a GELU of `x * x` and
/// `x * y + x`) would round once and differ in the last bit. And `0 * y`
/// of a comparison's zero stays +0 (a compiler ignoring the sign of zero
/// made it -0 through an identity written as `r - 0.0`).
#[test]
fn fused_steps_round_as_their_ops() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let prog = ElementwiseProgram::new(
        2,
        vec![
            Instr::Binary(BinaryOp::Mul, 0, 0),
            Instr::Unary(UnaryOp::GeluTanh, 2),
            Instr::Binary(BinaryOp::Mul, 0, 1),
            Instr::Binary(BinaryOp::Add, 4, 0),
            Instr::Unary(UnaryOp::Gelu, 2),
            Instr::Binary(BinaryOp::Gt, 0, 0),
            Instr::Binary(BinaryOp::Mul, 7, 6),
        ],
        vec![3, 5, 6, 8],
    )
    .unwrap();
    let n = 50_000;
    let mut g = Generator::new(3);
    let shape = Shape::from([n]);
    let l = Layout::contiguous(shape.clone());
    let inputs: Vec<_> =
        (0..2).map(|_| Wgpu::from_host(HostData::from((0..n).map(|_| (g.normal() * 2.0) as f32).collect::<Vec<_>>()))).collect();
    let fused = Wgpu::fused_elementwise(&prog, &[(&inputs[0], &l), (&inputs[1], &l)]).unwrap();
    let steps = autograd_core::fusion::unfused::<Wgpu>(&prog, &[(&inputs[0], &l), (&inputs[1], &l)]).unwrap();
    for (k, (a, b)) in fused.iter().zip(&steps).enumerate() {
        let (HostData::F32(a), HostData::F32(b)) = (host::<Wgpu>(a, &shape), host::<Wgpu>(b, &shape)) else { panic!("f32 outputs") };
        if let Some(i) = a.iter().zip(&b).position(|(x, y)| x.to_bits() != y.to_bits()) {
            panic!("output {k}, element {i}: fused {} vs op by op {}", a[i], b[i]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn reduce_matches(dims in prop::collection::vec(0usize..7, 0..5), which in any::<u8>(), op in 0usize..3, seed in any::<u64>()) {
        if backend_available::<Wgpu>() {
            let red: Vec<usize> = (0..dims.len()).filter(|d| which >> d & 1 == 1).collect();
            let (data, l) = random_view(&mut Generator::new(seed), &Shape::new(dims), DType::F32);
            check_reduce([ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min][op], data, &l, &red);
        }
    }

    #[test]
    fn arg_reduce_matches(dims in prop::collection::vec(1usize..9, 1..4), dim in 0usize..3, max in any::<bool>(), seed in any::<u64>()) {
        if backend_available::<Wgpu>() {
            let dim = dim % dims.len();
            let mut g = Generator::new(seed);
            let (data, l) = random_view(&mut g, &Shape::new(dims.clone()), DType::F32);
            // few distinct values: ties decide the index
            let data = HostData::from(data.to_f64_vec().iter().map(|v| v.round() as f32).collect::<Vec<f32>>());
            let op = if max { ArgReduceOp::Max } else { ArgReduceOp::Min };
            let mut out = dims.clone();
            out[dim] = 1;
            let out = Shape::new(out);
            let (v, i) = Wgpu::arg_reduce(op, &Wgpu::from_host(data.clone()), &l, dim).unwrap();
            let (rv, ri) = RefBackend::arg_reduce(op, &RefBackend::from_host(data), &l, dim).unwrap();
            prop_assert_eq!(host::<Wgpu>(&v, &out), host::<RefBackend>(&rv, &out));
            prop_assert_eq!(host::<Wgpu>(&i, &out), host::<RefBackend>(&ri, &out));
        }
    }

    #[test]
    fn where_matches(dims in prop::collection::vec(0usize..6, 0..4), cond in 0usize..3, seed in any::<u64>()) {
        if backend_available::<Wgpu>() {
            let shape = Shape::new(dims);
            let mut g = Generator::new(seed);
            let dtype = [DType::Bool, DType::F32, DType::I64][cond];
            let (dc, lc) = random_view(&mut g, &shape, dtype);
            let (da, la) = random_view(&mut g, &shape, DType::F32);
            let (db, lb) = random_view(&mut g, &shape, DType::F32);
            let got = Wgpu::where_select(&Wgpu::from_host(dc.clone()), &lc, &Wgpu::from_host(da.clone()), &la, &Wgpu::from_host(db.clone()), &lb).unwrap();
            let want = RefBackend::where_select(&RefBackend::from_host(dc), &lc, &RefBackend::from_host(da), &la, &RefBackend::from_host(db), &lb).unwrap();
            prop_assert_eq!(host::<Wgpu>(&got, &shape), host::<RefBackend>(&want, &shape));
        }
    }

    #[test]
    fn gather_and_scatter_add_match(dims in prop::collection::vec(1usize..6, 1..4), dim in 0usize..3, extent in 0usize..7, seed in any::<u64>()) {
        if backend_available::<Wgpu>() {
            let dim = dim % dims.len();
            let mut g = Generator::new(seed);
            let shape = Shape::new(dims.clone());
            // the index: any extent along dim, no larger than the input elsewhere
            let idims: Vec<usize> = dims.iter().enumerate().map(|(d, &n)| if d == dim { extent } else { 1 + g.below(n as u64) as usize }).collect();
            let ishape = Shape::new(idims);
            let (di, li) = index_view(&mut g, &ishape, dims[dim]);
            let (dx, lx) = random_view(&mut g, &shape, DType::F32);
            let got = Wgpu::gather(&Wgpu::from_host(dx.clone()), &lx, dim, &Wgpu::from_host(di.clone()), &li).unwrap();
            let want = RefBackend::gather(&RefBackend::from_host(dx), &lx, dim, &RefBackend::from_host(di.clone()), &li).unwrap();
            prop_assert_eq!(host::<Wgpu>(&got, &ishape), host::<RefBackend>(&want, &ishape));
            let (ds, ls) = random_view(&mut g, &ishape, DType::F32);
            let got = Wgpu::scatter_add(&shape, dim, &Wgpu::from_host(di.clone()), &li, &Wgpu::from_host(ds.clone()), &ls).unwrap();
            let want = RefBackend::scatter_add(&shape, dim, &RefBackend::from_host(di), &li, &RefBackend::from_host(ds), &ls).unwrap();
            // each output sums its sources in the reference's order, in f32: the same bits
            prop_assert_eq!(host::<Wgpu>(&got, &shape), host::<RefBackend>(&want, &shape), "scatter_add");
        }
    }

    #[test]
    fn assign_and_cat_match(dims in prop::collection::vec(0usize..5, 1..4), dim in 0usize..3, parts in 1usize..4, seed in any::<u64>()) {
        if backend_available::<Wgpu>() {
            let dim = dim % dims.len();
            let mut g = Generator::new(seed);
            let views: Vec<(HostData, Layout)> = (0..parts).map(|k| {
                let mut d = dims.clone();
                d[dim] = (d[dim] + k) % 4;
                random_view(&mut g, &Shape::new(d), DType::F32)
            }).collect();
            let dev: Vec<_> = views.iter().map(|(d, _)| Wgpu::from_host(d.clone())).collect();
            let refs: Vec<_> = views.iter().map(|(d, _)| RefBackend::from_host(d.clone())).collect();
            let dp: Vec<_> = dev.iter().zip(&views).map(|(s, (_, l))| (s, l)).collect();
            let rp: Vec<_> = refs.iter().zip(&views).map(|(s, (_, l))| (s, l)).collect();
            let got = Wgpu::cat(&dp, dim).unwrap();
            let want = RefBackend::cat(&rp, dim).unwrap();
            let mut out = dims.clone();
            out[dim] = views.iter().map(|(_, l)| l.dims()[dim]).sum();
            let out = Shape::new(out);
            prop_assert_eq!(host::<Wgpu>(&got, &out), host::<RefBackend>(&want, &out));
            // assign the first part into a strided view of a bigger buffer
            let (dd, ld) = random_view(&mut g, views[0].1.shape(), DType::F32);
            let mut d = Wgpu::from_host(dd.clone());
            let mut r = RefBackend::from_host(dd.clone());
            Wgpu::assign(&mut d, &ld, &dev[0], &views[0].1).unwrap();
            RefBackend::assign(&mut r, &ld, &refs[0], &views[0].1).unwrap();
            let all = Shape::from([dd.len()]);
            prop_assert_eq!(host::<Wgpu>(&d, &all), host::<RefBackend>(&r, &all));
        }
    }
}

/// f64 and int64 elements move as word pairs: copies, `where`, `gather`,
/// `cat`, `assign` and `full` keep every bit (int64 past 2^53 included).
#[test]
fn eight_byte_elements_move_exactly() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let mut g = Generator::new(5);
    let shape = Shape::from([3, 4, 5]);
    for dtype in [DType::F64, DType::I64] {
        let (d, l) = random_view(&mut g, &shape, dtype);
        let d = match dtype {
            DType::I64 => HostData::from((0..d.len() as i64).map(|i| (i << 54) + i * 7 - 1000).collect::<Vec<i64>>()),
            _ => d,
        };
        let (x, r) = (Wgpu::from_host(d.clone()), RefBackend::from_host(d.clone()));
        assert_eq!(
            host::<Wgpu>(&Wgpu::copy_strided(&x, &l).unwrap(), &shape),
            host::<RefBackend>(&RefBackend::copy_strided(&r, &l).unwrap(), &shape)
        );
        let (dc, lc) = random_view(&mut g, &shape, DType::Bool);
        let (c, rc) = (Wgpu::from_host(dc.clone()), RefBackend::from_host(dc));
        let lt = l.transpose(0, 2).unwrap().broadcast_as(&Shape::from([5, 4, 3])).unwrap();
        let lc = lc.transpose(0, 2).unwrap();
        let want = RefBackend::where_select(&rc, &lc, &r, &lt, &r, &l.permute(&[2, 1, 0]).unwrap()).unwrap();
        let got = Wgpu::where_select(&c, &lc, &x, &lt, &x, &l.permute(&[2, 1, 0]).unwrap()).unwrap();
        let ts = Shape::from([5, 4, 3]);
        assert_eq!(host::<Wgpu>(&got, &ts), host::<RefBackend>(&want, &ts));
        let (di, li) = index_view(&mut g, &Shape::from([3, 2, 5]), 4);
        let want = RefBackend::gather(&r, &l, 1, &RefBackend::from_host(di.clone()), &li).unwrap();
        let got = Wgpu::gather(&x, &l, 1, &Wgpu::from_host(di), &li).unwrap();
        assert_eq!(host::<Wgpu>(&got, li.shape()), host::<RefBackend>(&want, li.shape()));
        let cs = Shape::from([6, 4, 5]);
        let want = RefBackend::cat(&[(&r, &l), (&r, &l)], 0).unwrap();
        let got = Wgpu::cat(&[(&x, &l), (&x, &l)], 0).unwrap();
        assert_eq!(host::<Wgpu>(&got, &cs), host::<RefBackend>(&want, &cs));
        let big = Shape::from([2000]);
        assert_eq!(
            host::<Wgpu>(&Wgpu::full(&big, -3.0, dtype).unwrap(), &big),
            host::<RefBackend>(&RefBackend::full(&big, -3.0, dtype).unwrap(), &big)
        );
    }
    let hosted: Vec<_> =
        autograd_wgpu::host_calls().into_iter().filter(|(n, _)| matches!(*n, "copy_strided" | "gather" | "cat" | "full")).collect();
    assert!(hosted.is_empty(), "{hosted:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// im2col and col2im against the reference on random images, windows
    /// (kernel, stride, padding, dilation), one to three spatial dims.
    #[test]
    fn unfold_and_fold_match(
        n in 0usize..3, c in 1usize..3, spatial in prop::collection::vec(1usize..7, 1..4),
        kernel in prop::collection::vec(1usize..4, 3), stride in prop::collection::vec(1usize..3, 3),
        pad in prop::collection::vec(0usize..2, 3), dilation in prop::collection::vec(1usize..3, 3), seed in any::<u64>(),
    ) {
        if backend_available::<Wgpu>() {
            use autograd_core::window::Window;
            let r = spatial.len();
            let pads: Vec<(usize, usize)> = pad[..r].iter().map(|&p| (p, p)).collect();
            let w = Window::new("unfold", &kernel[..r], &stride[..r], &pads, &dilation[..r]);
            let mut dims = vec![n, c];
            dims.extend_from_slice(&spatial);
            let shape = Shape::new(dims);
            let Ok(w) = w else { return Ok(()) };
            let Ok(positions) = w.out_dims("unfold", &spatial) else { return Ok(()) };
            let mut g = Generator::new(seed);
            let (d, l) = random_view(&mut g, &shape, DType::F32);
            let cols = Shape::from([n, c * w.kernel_numel(), positions.iter().product()]);
            let got = Wgpu::unfold(&Wgpu::from_host(d.clone()), &l, &w, -7.5).unwrap();
            let want = RefBackend::unfold(&RefBackend::from_host(d), &l, &w, -7.5).unwrap();
            prop_assert_eq!(host::<Wgpu>(&got, &cols), host::<RefBackend>(&want, &cols));
            let (dc, lc) = random_view(&mut g, &cols, DType::F32);
            let got = Wgpu::fold(&Wgpu::from_host(dc.clone()), &lc, &w, &spatial).unwrap();
            let want = RefBackend::fold(&RefBackend::from_host(dc), &lc, &w, &spatial).unwrap();
            // each image element sums its taps in the reference's order, in f32: the same bits
            prop_assert_eq!(host::<Wgpu>(&got, &shape), host::<RefBackend>(&want, &shape), "fold");
        }
    }
}
