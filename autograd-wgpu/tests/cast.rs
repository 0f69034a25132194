//! Casts between f32, f16, bf16, int64 and bool on the device give the CPU
//! backend's bits: every f16 and bf16, f32 bit patterns around each
//! rounding edge and at random, int64 values at every magnitude (ties to
//! even, 2^63's saturation), through random strided views with 0-size dims;
//! none takes the host path but f64's.

use autograd_core::rng::Generator;
use autograd_core::{Backend, DType, HostData, Layout, Shape};
use autograd_cpu::Cpu;
use autograd_testkit::backend_available;
use autograd_testkit::conformance::random_view;
use autograd_wgpu::Wgpu;
use proptest::prelude::*;

const SERVED: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I64, DType::Bool];

fn host_casts() -> u64 {
    autograd_wgpu::host_calls().iter().find(|(n, _)| *n == "cast").map_or(0, |(_, c)| *c)
}

/// The cast on both backends, compared bit for bit (NaNs included).
fn check(data: &HostData, layout: &Layout, to: DType) {
    let shape = Layout::contiguous(layout.shape().clone());
    let got = Wgpu::to_host(&Wgpu::cast(&Wgpu::from_host(data.clone()), layout, to).unwrap(), &shape).unwrap();
    let want = Cpu::to_host(&Cpu::cast(&Cpu::from_host(data.clone()), layout, to).unwrap(), &shape).unwrap();
    assert_eq!(got.dtype(), to);
    let (g, w) = (got.to_le_bytes(), want.to_le_bytes());
    if g != w {
        let size = to.size_in_bytes();
        let at = g.chunks(size).zip(w.chunks(size)).position(|(a, b)| a != b).unwrap_or(0);
        let src = data.convert(DType::F64).to_f64_vec();
        panic!(
            "{:?} -> {to:?} over {:?}: element {at} (source {:?}) gave bytes {:?}, the CPU {:?}",
            data.dtype(),
            layout.dims(),
            src.get(at),
            &g[at * size..(at + 1) * size],
            &w[at * size..(at + 1) * size]
        );
    }
}

fn contiguous(n: usize) -> Layout {
    Layout::contiguous(Shape::from([n]))
}

/// Every f16 and bf16 to each other dtype; f32 around the halves' rounding
/// edges (each half value and the points between, just above and below),
/// their overflow and subnormal ranges, and random bit patterns.
#[test]
fn halves_and_their_rounding_edges() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let f16s = HostData::from(all.iter().map(|&b| autograd_core::half::f16::from_bits(b)).collect::<Vec<_>>());
    let bf16s = HostData::from(all.iter().map(|&b| autograd_core::half::bf16::from_bits(b)).collect::<Vec<_>>());
    for to in [DType::F32, DType::I64, DType::Bool] {
        check(&f16s, &contiguous(all.len()), to);
        check(&bf16s, &contiguous(all.len()), to);
    }
    check(&f16s, &contiguous(all.len()), DType::BF16);
    check(&bf16s, &contiguous(all.len()), DType::F16);
    let mut bits: Vec<u32> = Vec::new();
    for h in (0..=u16::MAX).step_by(7) {
        let f = autograd_core::half::f16::from_bits(h).to_f32().to_bits();
        let b = (h as u32) << 16;
        for base in [f, b] {
            // the value, the midpoint to the next, and a step either side of each
            for d in [0u32, 1, 0x0fff, 0x1000, 0x1001, 0x7fff, 0x8000, 0x8001] {
                bits.extend([base.wrapping_add(d), base.wrapping_sub(d)]);
            }
        }
    }
    let mut g = Generator::new(11);
    bits.extend((0..200_000).map(|_| g.next_u64() as u32));
    let f32s = HostData::from(bits.iter().map(|&b| f32::from_bits(b)).collect::<Vec<f32>>());
    for to in [DType::F16, DType::BF16, DType::I64, DType::Bool] {
        check(&f32s, &contiguous(bits.len()), to);
    }
}

/// int64 to floats at every magnitude (ties to even, 2^63), floats to
/// int64 (truncation, saturation, NaN to 0), and bools both ways.
#[test]
fn int64_edges_and_bools() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let mut ints: Vec<i64> = vec![0, 1, -1, i64::MAX, i64::MIN, i64::MIN + 1, (1 << 24) + 1, (1 << 24) + 3, -(1 << 24) - 1, (1 << 53) + 1];
    let mut g = Generator::new(5);
    for shift in 0..64 {
        for _ in 0..40 {
            let v = (g.next_u64() >> shift) as i64;
            ints.extend([v, -v]);
        }
    }
    for shift in 0..39 {
        for _ in 0..20 {
            // 25 significant bits ending in 1: the 24 kept and a round bit
            // with nothing below it, a tie (to even), and one past it
            let tie = ((1i64 << 24) | g.below(1 << 24) as i64 | 1) << shift;
            ints.extend([tie, -tie, tie + 1, -tie - 1]);
        }
    }
    let ints = HostData::from(ints);
    let n = ints.len();
    for to in [DType::F32, DType::F16, DType::BF16, DType::Bool] {
        check(&ints, &contiguous(n), to);
    }
    let p63 = 9.223_372e18f32;
    let floats: Vec<f32> = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        0.99,
        -0.99,
        1.5,
        -1.5,
        8_388_608.5,
        2_147_483_648.0,
        4_294_967_296.0,
        -4_294_967_296.0,
        4.611_686e18,
        p63,
        -p63,
        1e19,
        -1e19,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MIN_POSITIVE,
        1e-45,
        f32::MAX,
        f32::MIN,
    ];
    let mut floats = floats;
    floats.extend((0..50_000).map(|_| f32::from_bits(g.next_u64() as u32)));
    let n = floats.len();
    check(&HostData::from(floats), &contiguous(n), DType::I64);
    let bools = HostData::from((0..1001).map(|i| i % 3 == 0).collect::<Vec<bool>>());
    for to in [DType::F32, DType::F16, DType::BF16, DType::I64] {
        check(&bools, &contiguous(1001), to);
    }
}

/// The casts between the served dtypes queue a kernel; f64, which WGSL
/// has no type for, goes through the host. (The other tests here never
/// take the host path, so the count is this test's.)
#[test]
fn only_f64_takes_the_host_path() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let before = host_casts();
    let mut g = Generator::new(2);
    for from in SERVED {
        let (data, l) = random_view(&mut g, &Shape::from([3, 5]), from);
        for to in SERVED.into_iter().filter(|&t| t != from) {
            check(&data, &l, to);
        }
    }
    assert_eq!(host_casts(), before, "a cast between served dtypes took the host path");
    check(&HostData::from(vec![1.5f32, -2.0]), &contiguous(2), DType::F64);
    assert_eq!(host_casts(), before + 1, "f64 goes through the host");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn strided_casts_match_the_cpu(dims in prop::collection::vec(0usize..7, 0..4), from in 0usize..5, to in 0usize..5, seed in any::<u64>()) {
        if backend_available::<Wgpu>() && from != to {
            let (data, l) = random_view(&mut Generator::new(seed), &Shape::new(dims), SERVED[from]);
            check(&data, &l, SERVED[to]);
        }
    }
}
