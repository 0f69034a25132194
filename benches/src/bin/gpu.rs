//! The GPU backend beside the CPU backend, on whatever adapter wgpu finds:
//! f32 GEMM GFLOP/s at each size, softmax and layer norm rows on their row
//! kernels and as composites, bf16 elementwise ops through f32 and as half
//! kernels, uniform draws made by the CPU or on the device, the
//! 784-512-512-10 MLP training step at batch 1024 and the char_gpt
//! training step (context 128, batch 16) in f32 and under `autocast(BF16)`,
//! as milliseconds per step. Prints the adapter first: on Mesa's lavapipe
//! (a "GPU" that runs on the CPU) the numbers measure the backend's
//! overheads, not a GPU.
//!
//! `cargo run --release -p benches --features wgpu --bin gpu -- [sizes] [steps]`
//! (defaults `1024,4096` and 5; the 4096 product takes minutes on lavapipe:
//! pass `256,1024` there).

#![allow(clippy::print_stdout)] // the output is the point

use autograd_core::{Backend, DType, Layout, Shape};
use autograd_cpu::Cpu;
use autograd_wgpu::Wgpu;
use benches::{MlpStep, median_secs};
use examples::char_gpt::{CharGpt, Corpus, GptConfig, TrainConfig, policy, train};

/// Waits for `B`'s queued work by reading one element back.
fn sync<B: Backend>(s: &B::Storage) {
    let one = Layout::new(Shape::from([1]), vec![1], 0);
    B::to_host(s, &one).expect("read back");
}

/// Median seconds of an `n`-cubed f32 product on `B`, read back each time.
fn gemm<B: Backend>(n: usize, reps: usize) -> f64 {
    let l = Layout::contiguous(Shape::from([n, n]));
    let a = B::full(l.shape(), 0.5, DType::F32).expect("a");
    let b = B::full(l.shape(), 0.25, DType::F32).expect("b");
    sync::<B>(&B::matmul(&a, &l, &b, &l).expect("warm-up"));
    median_secs(reps, || sync::<B>(&B::matmul(&a, &l, &b, &l).expect("matmul")))
}

/// Median milliseconds of the MLP step at batch 1024 on `B`.
fn mlp<B: Backend>(steps: usize) -> f64 {
    let mut m = MlpStep::<B>::new(1024);
    m.step();
    median_secs(steps, || {
        std::hint::black_box(m.step());
    }) * 1e3
}

/// Median milliseconds of a char_gpt training step on `B` (the example's
/// model and recipe, `steps` steps, its last one validating), in f32 or
/// inside one `autocast(low)` region (bf16 or f16 products, f32 weights).
fn gpt<B: Backend>(steps: usize, low: Option<DType>) -> f64 {
    let corpus = Corpus::shipped().expect("the shipped corpus");
    let gc = GptConfig::small(corpus.vocab.len());
    let tc = TrainConfig { steps, eval_every: usize::MAX, eval_windows: 1, ..TrainConfig::default() };
    let model = CharGpt::<B>::new(&gc, policy("none").expect("policy"), 0).expect("model");
    let go = || train(&model, &corpus, &tc, gc.context, |_, _, _| {});
    let report = match low {
        Some(dtype) => autograd_tensor::autocast::autocast(dtype, go),
        None => go(),
    };
    report.expect("training").step_seconds * 1e3
}

/// Median milliseconds of softmax forward and backward over `[rows, n]`
/// and of layer norm forward and backward over the same (char_gpt's
/// attention rows and its norms), on the row kernels and on the trait's
/// composites over the other kernels.
fn rows(rows: usize, n: usize, reps: usize) -> [(f64, f64); 2] {
    use autograd_core::backend::composite;
    let l = Layout::contiguous(Shape::from([rows, n]));
    let ls = Layout::contiguous(Shape::from([rows, 1]));
    let x = Wgpu::full(l.shape(), 0.5, DType::F32).expect("x");
    let g = Wgpu::full(l.shape(), 0.25, DType::F32).expect("g");
    let ms = |f: &dyn Fn() -> <Wgpu as Backend>::Storage| {
        sync::<Wgpu>(&f());
        median_secs(reps, || sync::<Wgpu>(&f())) * 1e3
    };
    let softmax = |kernel: bool| {
        ms(&|| {
            if kernel {
                let y = Wgpu::softmax(&x, &l, 1).expect("softmax");
                Wgpu::softmax_backward(&y, &l, &g, &l, 1, false).expect("backward")
            } else {
                let y = composite::softmax::<Wgpu>(&x, &l, 1).expect("softmax");
                composite::softmax_backward::<Wgpu>(&y, &l, &g, &l, 1, false).expect("backward")
            }
        })
    };
    let norm = |kernel: bool| {
        ms(&|| {
            if kernel {
                let (xhat, rstd) = Wgpu::layer_norm(&x, &l, 1, 1e-5).expect("layer_norm");
                Wgpu::layer_norm_backward(&g, &l, &xhat, &l, &rstd, &ls, 1).expect("backward")
            } else {
                let (xhat, rstd) = composite::layer_norm::<Wgpu>(&x, &l, 1, 1e-5).expect("layer_norm");
                composite::layer_norm_backward::<Wgpu>(&g, &l, &xhat, &l, &rstd, &ls, 1).expect("backward")
            }
        })
    };
    [(softmax(false), softmax(true)), (norm(false), norm(true))]
}

/// Median milliseconds of GELU then an add on bf16 `[rows, n]` (a
/// mixed-precision step's elementwise ops), through f32 (each operand
/// widened by a cast kernel, the f32 kernel, the result rounded by
/// another: the path every other low-precision family takes) and as the
/// one-kernel half ops `Wgpu` runs for them.
fn halves(rows: usize, n: usize, reps: usize) -> (f64, f64) {
    use autograd_core::{BinaryOp, UnaryOp};
    let l = Layout::contiguous(Shape::from([rows, n]));
    let x = Wgpu::full(l.shape(), 0.5, DType::BF16).expect("x");
    let y = Wgpu::full(l.shape(), 0.25, DType::BF16).expect("y");
    let widened = || {
        let (wx, wy) = (Wgpu::cast(&x, &l, DType::F32).expect("cast"), Wgpu::cast(&y, &l, DType::F32).expect("cast"));
        let g = Wgpu::cast(&Wgpu::unary(UnaryOp::Gelu, &wx, &l).expect("gelu"), &l, DType::BF16).expect("cast");
        let wg = Wgpu::cast(&g, &l, DType::F32).expect("cast");
        Wgpu::cast(&Wgpu::binary(BinaryOp::Add, &wg, &l, &wy, &l).expect("add"), &l, DType::BF16).expect("cast")
    };
    let direct = || Wgpu::binary(BinaryOp::Add, &Wgpu::unary(UnaryOp::Gelu, &x, &l).expect("gelu"), &l, &y, &l).expect("add");
    let ms = |f: &dyn Fn() -> <Wgpu as Backend>::Storage| {
        sync::<Wgpu>(&f());
        median_secs(reps, || sync::<Wgpu>(&f())) * 1e3
    };
    (ms(&widened), ms(&direct))
}

/// Median milliseconds of `n` uniform f32 draws landing on the device:
/// drawn by the CPU and uploaded (the host path), and drawn on the device
/// (the same numbers).
fn uniform(n: usize, reps: usize) -> (f64, f64) {
    use autograd_core::rng::{Distribution, Generator};
    let shape = Shape::from([n]);
    let mut g = Generator::new(1);
    let mut host = || {
        let drawn = Cpu::random(&shape, DType::F32, Distribution::Uniform, &mut g).expect("draws");
        Wgpu::from_host(Cpu::to_host(&drawn, &Layout::contiguous(shape.clone())).expect("read"))
    };
    sync::<Wgpu>(&host());
    let through_host = median_secs(reps, || sync::<Wgpu>(&host())) * 1e3;
    let mut g = Generator::new(1);
    let mut device = || Wgpu::random(&shape, DType::F32, Distribution::Uniform, &mut g).expect("draws");
    sync::<Wgpu>(&device());
    (through_host, median_secs(reps, || sync::<Wgpu>(&device())) * 1e3)
}

fn main() {
    let sizes: Vec<usize> =
        std::env::args().nth(1).map(|s| s.split(',').map(|x| x.parse().expect("a size")).collect()).unwrap_or(vec![1024, 4096]);
    let steps: usize = std::env::args().nth(2).map(|s| s.parse().expect("a step count")).unwrap_or(5);
    let info = match autograd_wgpu::adapter() {
        Ok(info) => info,
        Err(e) => {
            println!("no GPU adapter: {e}");
            return;
        }
    };
    println!("adapter: {} ({:?}, {:?}, driver {} {})", info.name, info.device_type, info.backend, info.driver, info.driver_info);
    if info.device_type == autograd_wgpu::wgpu::DeviceType::Cpu {
        println!("(a software device: these numbers measure the backend's overheads, not a GPU)");
    }
    println!("{:<28} {:>14} {:>14} {:>10}", "workload", "cpu", "wgpu", "wgpu/cpu");
    for &n in &sizes {
        let reps = if n >= 2048 { 3 } else { 5 };
        let flop = 2.0 * (n as f64).powi(3) / 1e9;
        let (c, g) = (flop / gemm::<Cpu>(n, reps), flop / gemm::<Wgpu>(n, reps));
        println!("{:<28} {:>10.1} GF/s {:>10.1} GF/s {:>9.2}x", format!("gemm f32 {n}"), c, g, g / c);
    }
    let [softmax, norm] = rows(16 * 4 * 128, 128, 5);
    println!("{:<28} {:>14} {:>14} {:>10}", "rows, forward + backward", "composite", "row kernel", "speed-up");
    for (what, (c, k)) in [("softmax [8192, 128]", softmax), ("layer norm [8192, 128]", norm)] {
        println!("{:<28} {:>11.2} ms {:>11.2} ms {:>9.2}x", what, c, k, c / k);
    }
    let (wide, direct) = halves(8192, 512, 5);
    println!("{:<28} {:>14} {:>14} {:>10}", "bf16, gelu then add", "through f32", "half kernels", "speed-up");
    println!("{:<28} {:>11.2} ms {:>11.2} ms {:>9.2}x", "[8192, 512]", wide, direct, wide / direct);
    let (host, device) = uniform(1 << 22, 5);
    println!("{:<28} {:>14} {:>14} {:>10}", "uniform f32 draws", "cpu + upload", "on device", "speed-up");
    println!("{:<28} {:>11.2} ms {:>11.2} ms {:>9.2}x", "[4194304]", host, device, host / device);
    // the times the host waited for the device (a read-back each) during
    // a workload's whole Wgpu run: the values it asked for, nothing else
    let waits = |f: &dyn Fn() -> f64| {
        let before = autograd_wgpu::device_reads();
        (f(), autograd_wgpu::device_reads() - before)
    };
    let c = mlp::<Cpu>(steps);
    let (g, mlp_reads) = waits(&|| mlp::<Wgpu>(steps));
    println!("{:<28} {:>11.2} ms {:>11.2} ms {:>9.2}x", "mlp step, batch 1024", c, g, c / g);
    let c = gpt::<Cpu>(steps + 1, None);
    let (g, gpt_reads) = waits(&|| gpt::<Wgpu>(steps + 1, None));
    println!("{:<28} {:>11.2} ms {:>11.2} ms {:>9.2}x", "char_gpt step, ctx 128 b16", c, g, c / g);
    let (c, g) = (gpt::<Cpu>(steps + 1, Some(DType::BF16)), gpt::<Wgpu>(steps + 1, Some(DType::BF16)));
    println!("{:<28} {:>11.2} ms {:>11.2} ms {:>9.2}x", "same, autocast(BF16)", c, g, c / g);
    println!(
        "device reads (host waits) in the whole wgpu run: mlp {mlp_reads} ({} timed steps), char_gpt f32 {gpt_reads} ({} steps)",
        steps,
        steps + 1
    );
    let hosted: Vec<String> = autograd_wgpu::host_calls().iter().map(|(n, c)| format!("{n} x{c}")).collect();
    println!("primitives through the host: {}", if hosted.is_empty() { "none".into() } else { hosted.join(", ") });
}
