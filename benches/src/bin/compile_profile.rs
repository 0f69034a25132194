//! Runs one workload eagerly or compiled in a loop, for profilers
//! (`perf record`): `compile_profile <delivery|chain|mlp<batch>> <eager|compiled> [iters]`.

#![allow(clippy::print_stdout)]

use autograd_cpu::Cpu;
use autograd_jit::Traced;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (what, mode) = (args.get(1).map_or("delivery", |s| s.as_str()), args.get(2).map_or("compiled", |s| s.as_str()));
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let t = std::time::Instant::now();
    let per = match (what, mode) {
        ("delivery", "eager") => {
            let d = benches::DeliveryTime::<Cpu>::load();
            for _ in 0..iters / 300 {
                std::hint::black_box(d.train(300));
            }
            (iters / 300) * 300
        }
        ("delivery", _) => {
            let d = benches::DeliveryTime::<Traced<Cpu>>::load();
            for _ in 0..iters / 300 {
                std::hint::black_box(d.train_compiled(300));
            }
            (iters / 300) * 300
        }
        ("chain", "eager") => {
            for _ in 0..iters {
                std::hint::black_box(benches::autograd_chain::<Cpu>(2000));
            }
            iters * 2000
        }
        ("chain", _) => {
            let mut c = benches::CompiledChain::new(2000);
            for _ in 0..iters {
                std::hint::black_box(c.run());
            }
            iters * 2000
        }
        (b, mode) if b.starts_with("mlp") => {
            let batch: usize = b[3..].parse().expect("mlp<batch>");
            if mode == "eager" {
                let mut m = benches::MlpStep::<Cpu>::new(batch);
                for _ in 0..iters {
                    std::hint::black_box(m.step());
                }
            } else {
                let mut c = benches::MlpStep::<Traced<Cpu>>::new(batch).into_compiled();
                for _ in 0..iters {
                    std::hint::black_box(c());
                }
            }
            iters
        }
        _ => panic!("usage: compile_profile <delivery|chain|mlp16|mlp1024> <eager|compiled> [iters]"),
    };
    println!("{:.3} us per step or op", t.elapsed().as_secs_f64() / per as f64 * 1e6);
}
