//! bf16 and f16 against f32, interleaved in one process: square products,
//! the 784-512-512-10 MLP's SGD step at batch 128 under `autocast`, and
//! (not with `--json`) that step's products one by one and the char_gpt
//! training step under `autocast(BF16)`.
//! `cargo run --release -p benches --bin low_precision [sizes] [rounds]`;
//! `--json` prints one round as JSON lines for `benches/compare_pytorch.py
//! --only amp`. `AUTOGRAD_CPU_ISA=avx512` shows the path below AMX (dot
//! products where they pay, else the packed f32 FMA kernel),
//! `AUTOGRAD_CPU_ISA=avx2` the packed FMA kernel on AVX2 (f16 takes it on
//! every CPU with AVX2). The f32 GEMM (the `gemm` crate) picks its own
//! instruction set: a cap does not narrow it.

#![allow(clippy::print_stdout)] // the output is the point

use autograd_core::DType;
use benches::{median_secs, square, with_threads};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let mut positional = args.iter().filter(|a| !a.starts_with("--"));
    let sizes: Vec<usize> = positional.next().map(|s| s.split(',').map(|x| x.parse().expect("size")).collect()).unwrap_or(vec![512, 1024]);
    let rounds: usize = if json { 1 } else { positional.next().map(|s| s.parse().expect("rounds")).unwrap_or(3) };
    if !json {
        println!(
            "bf16 kernel: {}",
            if autograd_cpu::matmul::amx::available() {
                "AMX tiles"
            } else if autograd_cpu::matmul::bf16::available() {
                "AVX512_BF16 dot products"
            } else if autograd_cpu::matmul::widening::available() {
                "converted to f32 while packed, f32 FMA micro-kernel"
            } else {
                "operands widened to f32"
            }
        );
    }
    for threads in [1usize, 2] {
        for &n in &sizes {
            let (a, b) = square(n, DType::F32);
            let (ab, bb) = (a.to_dtype(DType::BF16), b.to_dtype(DType::BF16));
            let (ah, bh) = (a.to_dtype(DType::F16), b.to_dtype(DType::F16));
            let gf = |s: f64| 2.0 * (n as f64).powi(3) / s / 1e9;
            let reps = if n >= 1024 { 5 } else { 15 };
            let mut rows: Vec<(&str, Vec<f64>)> = vec![("f32", vec![]), ("bf16", vec![]), ("f16", vec![])];
            for _ in 0..rounds {
                with_threads(threads, || {
                    rows[0].1.push(gf(median_secs(reps, || drop(std::hint::black_box(a.matmul(&b))))));
                    rows[1].1.push(gf(median_secs(reps, || drop(std::hint::black_box(ab.matmul(&bb))))));
                    rows[2].1.push(gf(median_secs(reps, || drop(std::hint::black_box(ah.matmul(&bh))))));
                });
            }
            for (name, v) in rows {
                let mut v = v;
                v.sort_by(|x, y| x.partial_cmp(y).expect("finite"));
                if json {
                    println!("{{\"workload\":\"gemm_{name}_amp\",\"n\":{n},\"threads\":{threads},\"gflops\":{:.2}}}", v[v.len() / 2]);
                } else {
                    println!(
                        "n {n} threads {threads} {name:<5} {:7.1} GFLOP/s (rounds {:?})",
                        v[v.len() / 2],
                        v.iter().map(|x| x.round()).collect::<Vec<_>>()
                    );
                }
            }
        }
    }
    mlp_step(rounds, json);
    if !json {
        mlp_products(rounds);
        gpt_step(rounds);
    }
}

/// The MLP step's products alone (784-512-512-10, batch 128: the forward
/// `addmm`s, the input gradients, the weight gradients as plain products),
/// bf16 against f32, interleaved: where a bf16 step's time goes product by
/// product (under `AUTOGRAD_CPU_ISA=avx2`, the AVX2-only CPUs' path). Best
/// of `5 rounds` medians of 21 calls, on 1 thread, then on 2 (where a
/// short `A` against a large weight splits the workers over the weight's
/// panels).
fn mlp_products(rounds: usize) {
    use autograd_tensor::functional::try_linear;
    use autograd_tensor::{Tensor, fork_rng};
    type Product = fn(&[Tensor<autograd_cpu::Cpu>]) -> Tensor<autograd_cpu::Cpu>;
    let randn = |seed: u64, dims: [usize; 2]| fork_rng(seed, || Tensor::<autograd_cpu::Cpu>::randn(dims));
    let bias = |seed: u64, n: usize| fork_rng(seed, || Tensor::<autograd_cpu::Cpu>::randn([n]));
    // (name, operands, product): shapes as the step runs them
    let linear: Product = |t| try_linear(&t[0], &t[1], Some(&t[2])).expect("linear");
    let times: Product = |t| t[0].matmul(&t[1]);
    let times_t: Product = |t| t[0].t().matmul(&t[1]);
    let cases: Vec<(&str, Vec<Tensor<autograd_cpu::Cpu>>, Product)> = vec![
        ("x W1^T + b1 (784 -> 512)", vec![randn(1, [128, 784]), randn(2, [512, 784]), bias(3, 512)], linear),
        ("h W2^T + b2 (512 -> 512)", vec![randn(4, [128, 512]), randn(5, [512, 512]), bias(6, 512)], linear),
        ("h W3^T + b3 (512 -> 10)", vec![randn(7, [128, 512]), randn(8, [10, 512]), bias(9, 10)], linear),
        ("dy W3 (dx, 10 -> 512)", vec![randn(10, [128, 10]), randn(11, [10, 512])], times),
        ("dy W2 (dx, 512 -> 512)", vec![randn(12, [128, 512]), randn(13, [512, 512])], times),
        ("dy^T h (dW3, 10 x 512)", vec![randn(14, [128, 10]), randn(15, [128, 512])], times_t),
        ("dy^T h (dW2, 512 x 512)", vec![randn(16, [128, 512]), randn(17, [128, 512])], times_t),
        ("dy^T x (dW1, 512 x 784)", vec![randn(18, [128, 512]), randn(19, [128, 784])], times_t),
    ];
    for threads in [1usize, 2] {
        println!("the MLP step's products alone, batch 128, {threads} thread(s), best of {} medians of 21 calls:", 5 * rounds);
        with_threads(threads, || {
            for (name, f32s, product) in &cases {
                let bf16s: Vec<_> = f32s.iter().map(|t| t.to_dtype(DType::BF16)).collect();
                let (mut f, mut b) = (f64::MAX, f64::MAX);
                for _ in 0..5 * rounds {
                    f = f.min(median_secs(21, || drop(std::hint::black_box(product(f32s)))));
                    b = b.min(median_secs(21, || drop(std::hint::black_box(product(&bf16s)))));
                }
                println!("  {name:<26} f32 {:8.1} us, bf16 {:8.1} us ({:.2}x)", f * 1e6, b * 1e6, b / f);
            }
        });
    }
}

/// The char_gpt training step (the example's model and recipe: context
/// 128, batch 16, AdamW with clipping), f32 against the same training loop
/// run inside one `autocast(BF16)` region (backward runs outside it as the
/// engine always does; the weight-cast cache remakes each copy after the
/// optimizer's update): the median of 9 steps per run, runs alternating.
fn gpt_step(rounds: usize) {
    use autograd_cpu::Cpu;
    use autograd_tensor::autocast::autocast;
    use examples::char_gpt::{CharGpt, Corpus, GptConfig, TrainConfig, policy, train};
    let corpus = Corpus::shipped().expect("the shipped corpus");
    let gc = GptConfig::small(corpus.vocab.len());
    let tc = TrainConfig { steps: 9, eval_every: usize::MAX, eval_windows: 1, ..TrainConfig::default() };
    let run = |low: bool| -> f64 {
        let model = CharGpt::<Cpu>::new(&gc, policy("none").expect("policy"), 0).expect("model");
        let go = || train(&model, &corpus, &tc, gc.context, |_, _, _| {});
        let report = if low { autocast(DType::BF16, go) } else { go() }.expect("training");
        report.step_seconds
    };
    for threads in [1usize, 2] {
        let (mut f, mut b) = (vec![], vec![]);
        for _ in 0..rounds {
            with_threads(threads, || {
                f.push(run(false));
                b.push(run(true));
            });
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|x, y| x.partial_cmp(y).expect("finite"));
            v[v.len() / 2]
        };
        let (f, b) = (med(&mut f), med(&mut b));
        println!(
            "char_gpt step, ctx {} batch {}, threads {threads}: f32 {:.1} ms, bf16 autocast {:.1} ms ({:.2}x)",
            gc.context,
            tc.batch_size,
            f * 1e3,
            b * 1e3,
            b / f
        );
    }
}

/// The 784-512-512-10 MLP's SGD step at batch 128, f32 against
/// `autocast(BF16)` and `autocast(F16)`, and (not with `--json`)
/// `autocast(BF16)` with the weight-cast cache off, interleaved round by
/// round.
fn mlp_step(rounds: usize, json: bool) {
    use autograd_cpu::Cpu;
    use autograd_nn::{MlpConfig, Module, ModuleExt};
    use autograd_optim::{Optimizer, Sgd, SgdConfig};
    use autograd_tensor::autocast::AutocastGuard;
    use autograd_tensor::functional::{Reduction, try_cross_entropy};
    use autograd_tensor::{Tensor, fork_rng};
    let model = fork_rng(0, || MlpConfig::new(&[784, 512, 512, 10]).init::<Cpu>());
    let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.01, ..Default::default() }).expect("sgd");
    let x = fork_rng(1, || Tensor::<Cpu>::randn([128, 784]));
    let y = Tensor::<Cpu>::from_vec((0..128).map(|i| i % 10).collect::<Vec<i64>>(), [128]);
    // (the region's dtype, whether it caches the weights' copies)
    let mut step = |region: Option<(DType, bool)>| {
        opt.zero_grad(true);
        let loss = {
            let _region = region.map(|(d, cache)| AutocastGuard::with_cache(Some(d), cache).expect("autocast"));
            try_cross_entropy(&model.forward(&x), &y, Reduction::Mean, &Default::default()).expect("loss")
        };
        loss.backward().expect("backward");
        opt.step().expect("step");
    };
    for threads in [1usize, 2] {
        let mut t: Vec<Vec<f64>> = vec![vec![]; 4];
        let regions = [None, Some((DType::BF16, true)), Some((DType::F16, true)), Some((DType::BF16, false))];
        for _ in 0..rounds {
            with_threads(threads, || {
                for (i, r) in regions.into_iter().enumerate().take(if json { 3 } else { 4 }) {
                    t[i].push(median_secs(9, || step(r)));
                }
            });
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
            v[v.len() / 2]
        };
        let (f, b, h) = (med(&mut t[0]), med(&mut t[1]), med(&mut t[2]));
        if json {
            for (name, s) in [("f32", f), ("bf16", b), ("f16", h)] {
                println!("{{\"workload\":\"mlp_step_{name}_amp\",\"n\":128,\"threads\":{threads},\"ms\":{:.3}}}", s * 1e3);
            }
        } else {
            println!(
                "MLP 784-512-512-10 SGD step, batch 128, threads {threads}: f32 {:.2} ms, bf16 autocast {:.2} ms ({:.2}x), f16 autocast {:.2} ms ({:.2}x), bf16 without the weight-cast cache {:.2} ms ({:.2}x)",
                f * 1e3,
                b * 1e3,
                b / f,
                h * 1e3,
                h / f,
                med(&mut t[3]) * 1e3,
                med(&mut t[3]) / f
            );
        }
    }
}
