//! Prints this crate's timings of the comparison workloads as JSON lines,
//! for `compare_pytorch.py`: f32 GEMM GFLOP/s (plain and transposed) at
//! several sizes and thread counts, the per-op cost of a tiny autograd chain,
//! an Adam step over 10M parameters, a full MLP training step and the
//! lessons' delivery-time regression (300 gradient-descent steps, f64);
//! allocations per op and per step beside the times.
//!
//! Arguments: `[sizes] [families]`, e.g. `256,1024 gemm,chain,optim,mlp,delivery`.

#![allow(clippy::print_stdout)] // the output is the point

use autograd_core::DType;
use autograd_cpu::Cpu;
use autograd_optim::Optimizer;
use benches::alloc_count::{Counting, measure};
use benches::{CnnStep, DeliveryTime, LstmStep, MlpStep, adam_workload, autograd_chain, median_secs, square, with_threads};

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() {
    let sizes: Vec<usize> =
        std::env::args().nth(1).map(|s| s.split(',').map(|x| x.parse().expect("size")).collect()).unwrap_or(vec![256, 512, 1024, 2048]);
    let families: Vec<String> = std::env::args().nth(2).map(|s| s.split(',').map(String::from).collect()).unwrap_or(vec![
        "gemm".into(),
        "chain".into(),
        "optim".into(),
        "mlp".into(),
        "delivery".into(),
    ]);
    let want = |f: &str| families.iter().any(|x| x == f);
    for threads in [1usize, 2].into_iter().filter(|_| want("gemm")) {
        for &n in &sizes {
            let (a, b) = square(n, DType::F32);
            for (kind, f) in [("nn", 0), ("tn", 1), ("nt", 2)] {
                let reps = if n >= 2048 { 3 } else { 7 };
                let s = with_threads(threads, || {
                    median_secs(reps, || {
                        let c = match f {
                            0 => a.matmul(&b),
                            1 => a.t().matmul(&b),
                            _ => a.matmul(&b.t()),
                        };
                        std::hint::black_box(c);
                    })
                });
                let gflops = 2.0 * (n as f64).powi(3) / s / 1e9;
                println!("{{\"workload\":\"gemm_f32_{kind}\",\"n\":{n},\"threads\":{threads},\"gflops\":{gflops:.1}}}");
            }
        }
    }
    let n = 2000;
    for threads in [1usize, 2].into_iter().filter(|_| want("chain")) {
        let s = with_threads(threads, || {
            median_secs(21, || {
                std::hint::black_box(autograd_chain::<Cpu>(n));
            })
        });
        let (allocs, _, _) = measure(|| autograd_chain::<Cpu>(n));
        println!(
            "{{\"workload\":\"autograd_chain\",\"ops\":{n},\"threads\":{threads},\"us_per_op\":{:.3},\"allocs_per_op\":{:.2}}}",
            s / n as f64 * 1e6,
            allocs as f64 / n as f64
        );
    }
    if want("optim") {
        let (_params, mut opt) = adam_workload(10_000_000, 100);
        let s = with_threads(2, || median_secs(11, || opt.step().expect("step")));
        println!("{{\"workload\":\"optim_step\",\"threads\":2,\"ms\":{:.3}}}", s * 1e3);
    }
    if want("mlp") {
        for b in [16usize, 128, 1024] {
            let mut m = MlpStep::<Cpu>::new(b);
            let reps = if b >= 1024 { 21 } else { 101 };
            let s = with_threads(2, || {
                median_secs(reps, || {
                    std::hint::black_box(m.step());
                })
            });
            let (allocs, _, _) = measure(|| m.step());
            println!("{{\"workload\":\"mlp_step\",\"n\":{b},\"threads\":2,\"ms\":{:.3},\"allocs_per_step\":{allocs}}}", s * 1e3);
        }
    }
    if want("cnn") {
        // the LeNet digits step (batch 32) and a ResNet basic block (batch 32, 64 x 32 x 32)
        for (name, mut m, reps) in
            [("lenet_step", CnnStep::<Cpu>::lenet(32), 101), ("resnet_block_step", CnnStep::<Cpu>::resnet_block(32), 11)]
        {
            let s = with_threads(2, || {
                median_secs(reps, || {
                    std::hint::black_box(m.step());
                })
            });
            let (allocs, _, _) = measure(|| m.step());
            println!("{{\"workload\":\"{name}\",\"n\":32,\"threads\":2,\"ms\":{:.3},\"allocs_per_step\":{allocs}}}", s * 1e3);
        }
    }
    if want("rnn") {
        // a 2-layer LSTM (input 128, hidden 256), 64 steps, batch 32: forward and backward
        let mut m = LstmStep::<Cpu>::new();
        let s = with_threads(2, || {
            median_secs(5, || {
                std::hint::black_box(m.step());
            })
        });
        let (allocs, _, _) = measure(|| m.step());
        println!("{{\"workload\":\"lstm_step\",\"n\":64,\"threads\":2,\"ms\":{:.3},\"allocs_per_step\":{allocs}}}", s * 1e3);
    }
    if want("delivery") {
        let d = DeliveryTime::<Cpu>::load();
        let s = with_threads(2, || {
            median_secs(21, || {
                std::hint::black_box(d.train(300));
            })
        });
        println!("{{\"workload\":\"delivery_300\",\"n\":300,\"threads\":2,\"ms\":{:.3}}}", s * 1e3);
    }
}
