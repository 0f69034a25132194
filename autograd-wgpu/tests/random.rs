//! `random` on the device: uniform f32 and f64 draws with the CPU backend's bits
//! from the same generator, at sizes around each thread's run (one thread,
//! a run's edges, 1024 threads and past them), consecutive calls
//! continuing the stream, the generator left where the CPU leaves it, and
//! no host path.

use autograd_core::rng::{Distribution, Generator};
use autograd_core::{Backend, DType, Layout, Shape};
use autograd_cpu::Cpu;
use autograd_testkit::backend_available;
use autograd_wgpu::Wgpu;

#[test]
fn uniform_f32_draws_the_cpus_numbers_on_the_device() {
    if !backend_available::<Wgpu>() {
        return;
    }
    let hosted = || autograd_wgpu::host_calls().iter().find(|(n, _)| *n == "random").map_or(0, |(_, c)| *c);
    let before = hosted();
    let (mut gw, mut gc) = (Generator::new(2024), Generator::new(2024));
    for dtype in [DType::F32, DType::F64] {
        let w = dtype.size_in_bytes();
        for n in [0usize, 1, 255, 256, 257, 1000, 262_143, 262_144, 262_145, 3_000_001] {
            let shape = Shape::from([n]);
            let got = Wgpu::random(&shape, dtype, Distribution::Uniform, &mut gw).unwrap();
            let want = Cpu::random(&shape, dtype, Distribution::Uniform, &mut gc).unwrap();
            let l = Layout::contiguous(shape);
            let (got, want) = (Wgpu::to_host(&got, &l).unwrap().to_le_bytes(), Cpu::to_host(&want, &l).unwrap().to_le_bytes());
            if let Some(i) = got.chunks(w).zip(want.chunks(w)).position(|(a, b)| a != b) {
                panic!("{dtype:?}, {n} draws: element {i} is {:?}, the CPU's {:?}", &got[w * i..w * i + w], &want[w * i..w * i + w]);
            }
            assert_eq!(gw, gc, "after {n} draws of {dtype:?} the generators agree");
        }
    }
    assert_eq!(hosted(), before, "uniform f32 or f64 took the host path");
}
