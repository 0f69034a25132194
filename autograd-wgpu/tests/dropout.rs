//! Attention's dropout scales on the device (`Backend::attention_dropout`):
//! the CPU backend's bits for f32, f16 and bf16 from the same seed (read
//! where it lies, through a strided view too), over shapes around a
//! workgroup and odd element counts, probabilities near 0 and 1, seeds at
//! the edges of `[0, 1)`; a seed outside it makes every scale NaN where
//! the CPU says `Err`; bad arguments are `Err`s as on the CPU.

use autograd_core::{Backend, DType, HostData, Layout, Shape};
use autograd_cpu::Cpu;
use autograd_testkit::backend_available;
use autograd_wgpu::Wgpu;

fn scales<B: Backend>(seed: &[f64], lseed: &Layout, shape: &Shape, p: f64, dtype: DType) -> autograd_core::Result<Vec<u8>> {
    let s = B::from_host(HostData::from(seed.to_vec()));
    let out = B::attention_dropout(&s, lseed, shape, p, dtype)?;
    Ok(B::to_host(&out, &Layout::contiguous(shape.clone()))?.to_le_bytes())
}

#[test]
fn dropout_scales_are_the_cpus_bits() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let whole = Layout::contiguous(Shape::from([2]));
    // the seed's two draws every other element of a longer buffer
    let strided = Layout::new(Shape::from([2]), vec![2], 1);
    let below_one = 1.0 - f64::EPSILON / 2.0;
    let seeds: [[f64; 2]; 6] =
        [[0.25, 0.5], [0.0, 0.0], [-0.0, below_one], [f64::MIN_POSITIVE / 8.0, 0.999], [0.123_456_789, 1e-300], [below_one, 0.75]];
    let shapes = [Shape::from([1, 1]), Shape::from([3, 5]), Shape::from([2, 3, 7, 9]), Shape::from([4, 33, 65]), Shape::from([0, 4])];
    for seed in seeds {
        for p in [1e-9, 0.1, 0.5, 0.9, 1.0 - 1e-9] {
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                for (shape, (values, ls)) in
                    shapes.iter().zip([(seed.to_vec(), &whole), (vec![9.0, seed[0], 9.0, seed[1]], &strided)].iter().cycle())
                {
                    let got = scales::<Wgpu>(values, ls, shape, p, dtype).unwrap();
                    let want = scales::<Cpu>(values, ls, shape, p, dtype).unwrap();
                    assert_eq!(got, want, "seed {seed:?}, p {p}, {dtype:?}, {:?}", shape.dims());
                }
            }
        }
    }
}

#[test]
fn a_seed_outside_the_unit_interval_gives_nan_scales_and_bad_arguments_are_errs() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let l = Layout::contiguous(Shape::from([2]));
    let shape = Shape::from([3, 5]);
    for seed in [[1.0, 0.5], [0.5, f64::NAN], [-0.25, 0.5], [0.5, f64::INFINITY]] {
        assert!(scales::<Cpu>(&seed, &l, &shape, 0.5, DType::F32).is_err(), "{seed:?}");
        let got = scales::<Wgpu>(&seed, &l, &shape, 0.5, DType::F32).unwrap();
        assert!(got.chunks(4).all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_nan()), "{seed:?}");
        let half = scales::<Wgpu>(&seed, &l, &shape, 0.5, DType::BF16).unwrap();
        // a bf16 NaN: every exponent bit set and a non-zero significand
        let nan = |w: u16| w & 0x7f80 == 0x7f80 && w & 0x7f != 0;
        assert!(half.chunks(2).all(|b| nan(u16::from_le_bytes([b[0], b[1]]))), "{seed:?}");
    }
    let seed = [0.25, 0.5];
    for (ls, shape, p, dtype) in [
        (&l, Shape::from([5]), 0.5, DType::F32), // no L x S
        (&l, shape.clone(), 0.0, DType::F32),    // p outside (0, 1)
        (&l, shape.clone(), 1.0, DType::F32),
        (&l, shape.clone(), f64::NAN, DType::F32),
        (&l, shape.clone(), 0.5, DType::I64),                                         // not a float
        (&Layout::contiguous(Shape::from([3])), shape.clone(), 0.5, DType::F32),      // not [2]
        (&Layout::new(Shape::from([2]), vec![1], 1), shape.clone(), 0.5, DType::F32), // past the seed
    ] {
        let (w, c) = (scales::<Wgpu>(&seed, ls, &shape, p, dtype), scales::<Cpu>(&seed, ls, &shape, p, dtype));
        assert!(w.is_err() && c.is_err(), "{:?} p {p} {dtype:?}: {w:?} / {c:?}", shape.dims());
    }
    // an f32 seed is refused, not reinterpreted
    let f = Wgpu::from_host(HostData::from(vec![0.25f32, 0.5]));
    assert!(Wgpu::attention_dropout(&f, &l, &shape, 0.5, DType::F32).is_err());
}

/// Attention with dropout, forward and backward, on the device: the CPU's
/// numbers (its mask from the same seed), and no read-back on the way
/// (before, each call read its seed back, waiting for all queued work,
/// and uploaded a mask the size of its weights).
#[test]
fn attention_with_dropout_matches_the_cpu_without_reading_back() {
    use autograd_core::attention::AttentionSpec;
    if !backend_available::<Wgpu>() {
        return;
    }
    let values = |n: usize, k: f32| HostData::from((0..n).map(|i| ((i as f32 + k) * 0.37).sin()).collect::<Vec<f32>>());
    let (lq, lk, lv) = (
        Layout::contiguous(Shape::from([2, 5, 8])),
        Layout::contiguous(Shape::from([2, 6, 8])),
        Layout::contiguous(Shape::from([2, 6, 4])),
    );
    let ls = Layout::contiguous(Shape::from([2]));
    let (lo, llse) = (Layout::contiguous(Shape::from([2, 5, 4])), Layout::contiguous(Shape::from([2, 5])));
    let spec = AttentionSpec { scale: 0.35, causal: true, dropout: 0.3 };
    let host = [values(80, 1.0), values(96, 2.0), values(48, 3.0), HostData::from(vec![0.625f64, 0.125]), values(40, 4.0)];
    fn run<B: Backend>(host: &[HostData], l: [&Layout; 7], spec: AttentionSpec) -> (B::Storage, B::Storage, Vec<B::Storage>) {
        let [q, k, v, seed, g] = [0, 1, 2, 3, 4].map(|i| B::from_host(host[i].clone()));
        let (out, lse) = B::attention(&[(&q, l[0]), (&k, l[1]), (&v, l[2]), (&seed, l[3])], spec).unwrap();
        let ins = [(&q, l[0]), (&k, l[1]), (&v, l[2]), (&out, l[4]), (&lse, l[5]), (&g, l[4]), (&seed, l[3])];
        let grads = B::attention_backward(&ins, spec).unwrap();
        (out, lse, grads)
    }
    let layouts = [&lq, &lk, &lv, &ls, &lo, &llse, &lo];
    let before = autograd_wgpu::device_reads();
    let got = run::<Wgpu>(&host, layouts, spec);
    assert_eq!(autograd_wgpu::device_reads(), before, "the calls waited for the device");
    let want = run::<Cpu>(&host, layouts, spec);
    let close = |a: &HostData, b: &HostData, what: &str| {
        for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{what}: {x} vs {y}");
        }
    };
    close(&Wgpu::to_host(&got.0, &lo).unwrap(), &Cpu::to_host(&want.0, &lo).unwrap(), "out");
    close(&Wgpu::to_host(&got.1, &llse).unwrap(), &Cpu::to_host(&want.1, &llse).unwrap(), "lse");
    for (i, (a, b)) in got.2.iter().zip(&want.2).enumerate() {
        let l = [&lq, &lk, &lv][i];
        close(&Wgpu::to_host(a, l).unwrap(), &Cpu::to_host(b, l).unwrap(), &format!("grad {i}"));
    }
}
