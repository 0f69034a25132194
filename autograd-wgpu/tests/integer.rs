//! int64 arithmetic and comparisons on the device give the CPU backend's
//! values bit for bit: wrapping at both ends, carries across the 32-bit
//! words, signed order, through random strided and broadcast views with
//! 0-size dims; division is an `Err` on both.

use autograd_core::rng::Generator;
use autograd_core::{Backend, BinaryOp, DType, HostData, Layout, Shape};
use autograd_cpu::Cpu;
use autograd_testkit::backend_available;
use autograd_testkit::conformance::random_view;
use autograd_wgpu::Wgpu;
use proptest::prelude::*;

const ON_DEVICE: [BinaryOp; 13] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Pow,
    BinaryOp::Maximum,
    BinaryOp::Minimum,
    BinaryOp::ThresholdBackward,
    BinaryOp::Eq,
    BinaryOp::Ne,
    BinaryOp::Lt,
    BinaryOp::Le,
    BinaryOp::Gt,
    BinaryOp::Ge,
];

fn host_binaries() -> u64 {
    autograd_wgpu::host_calls().iter().find(|(n, _)| *n == "binary").map_or(0, |(_, c)| *c)
}

/// int64 values at every magnitude: the extremes, the words' edges, small
/// numbers (ties in comparisons) and random bits shifted down.
fn values(g: &mut Generator, n: usize) -> Vec<i64> {
    const EDGES: [i64; 12] = [0, 1, -1, 2, i64::MAX, i64::MIN, 1 << 32, -(1 << 32), (1 << 32) - 1, 1 << 31, -(1 << 31), 0xffff_ffff_ffff];
    (0..n)
        .map(|_| match g.below(3) {
            0 => EDGES[g.below(EDGES.len() as u64) as usize],
            1 => g.below(7) as i64 - 3,
            _ => (g.next_u64() >> g.below(64)) as i64 * if g.below(2) == 0 { 1 } else { -1 },
        })
        .collect()
}

/// A strided view of `shape` over int64 values from [`values`].
fn view(g: &mut Generator, shape: &Shape) -> (HostData, Layout) {
    let (data, l) = random_view(g, shape, DType::I64);
    (HostData::from(values(g, data.len())), l)
}

fn check(op: BinaryOp, (da, la): &(HostData, Layout), (db, lb): &(HostData, Layout)) {
    let out = Layout::contiguous(la.shape().clone());
    let got =
        Wgpu::binary(op, &Wgpu::from_host(da.clone()), la, &Wgpu::from_host(db.clone()), lb).map(|s| Wgpu::to_host(&s, &out).unwrap());
    let want = Cpu::binary(op, &Cpu::from_host(da.clone()), la, &Cpu::from_host(db.clone()), lb).map(|s| Cpu::to_host(&s, &out).unwrap());
    match (got, want) {
        (Ok(g), Ok(w)) => assert_eq!(g, w, "{op:?} over {:?}", la.dims()),
        (Err(_), Err(_)) => {}
        (g, w) => panic!("{op:?}: the device gave {g:?}, the CPU {w:?}"),
    }
}

/// Every op on every pair of the edge values (the carries, the wraps, the
/// order across the sign, exponents up to 2^63 - 1 and negative ones),
/// and a broadcast operand; none takes the host path but division's `Err`.
#[test]
fn every_pair_of_edges_on_the_device() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let before = host_binaries();
    let edges: Vec<i64> =
        vec![0, 1, -1, 2, -2, i64::MAX, i64::MIN, 1 << 32, -(1 << 32), (1 << 32) - 1, 1 << 31, -(1 << 31), 0xffff_ffff, 3_037_000_500];
    let n = edges.len();
    let a: Vec<i64> = edges.iter().flat_map(|&x| std::iter::repeat_n(x, n)).collect();
    let b: Vec<i64> = (0..n).flat_map(|_| edges.iter().copied()).collect();
    let l = Layout::contiguous(Shape::from([n * n]));
    for op in ON_DEVICE {
        check(op, &(HostData::from(a.clone()), l.clone()), &(HostData::from(b.clone()), l.clone()));
    }
    // b broadcast along the rows of a [n, n] view
    let la = Layout::contiguous(Shape::from([n, n]));
    let lb = Layout::new(Shape::from([n, n]), vec![0, 1], 0);
    for op in ON_DEVICE {
        check(op, &(HostData::from(a.clone()), la.clone()), &(HostData::from(edges.clone()), lb.clone()));
    }
    assert_eq!(host_binaries(), before, "an int64 op took the host path");
    let (p, e) = (vec![3i64, -1, -1, 2, 1, 0, 7, -3], vec![40i64, 7, -4, -1, i64::MIN, -5, i64::MAX, 1 << 33]);
    let l = Layout::contiguous(Shape::from([p.len()]));
    check(BinaryOp::Pow, &(HostData::from(p), l.clone()), &(HostData::from(e), l));
    check(
        BinaryOp::Div,
        &(HostData::from(vec![3i64]), Layout::contiguous(Shape::from([1]))),
        &(HostData::from(vec![2i64]), Layout::contiguous(Shape::from([1]))),
    );
    assert_eq!(host_binaries(), before + 1, "division's Err comes from the host path, nothing else");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn strided_int64_ops_match_the_cpu(dims in prop::collection::vec(0usize..7, 0..4), op in 0usize..13, seed in any::<u64>()) {
        if backend_available::<Wgpu>() {
            let mut g = Generator::new(seed);
            let shape = Shape::new(dims);
            check(ON_DEVICE[op], &view(&mut g, &shape), &view(&mut g, &shape));
        }
    }
}
