//! `random` on the device: uniform f32 draws with the CPU backend's bits
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
    for n in [0usize, 1, 255, 256, 257, 1000, 262_143, 262_144, 262_145, 3_000_001] {
        let shape = Shape::from([n]);
        let got = Wgpu::random(&shape, DType::F32, Distribution::Uniform, &mut gw).unwrap();
        let want = Cpu::random(&shape, DType::F32, Distribution::Uniform, &mut gc).unwrap();
        let l = Layout::contiguous(shape);
        let (got, want) = (Wgpu::to_host(&got, &l).unwrap().to_le_bytes(), Cpu::to_host(&want, &l).unwrap().to_le_bytes());
        if let Some(i) = got.chunks(4).zip(want.chunks(4)).position(|(a, b)| a != b) {
            panic!("{n} draws: element {i} is {:?}, the CPU's {:?}", &got[4 * i..4 * i + 4], &want[4 * i..4 * i + 4]);
        }
        assert_eq!(gw, gc, "after {n} draws the generators agree");
    }
    assert_eq!(hosted(), before, "uniform f32 took the host path");
}
