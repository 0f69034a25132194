//! Workloads shared by the criterion benches and the `workloads` binary that
//! the PyTorch comparison script (`compare_pytorch.py`) runs.

use autograd_core::{Backend, DType};
use autograd_cpu::Cpu;
use autograd_tensor::Tensor;
use std::time::Instant;

/// A 1-element tensor through `n` chained ops (alternately `* c1` and `+ c2`,
/// both 1-element tensors), then backward and a read of the gradient.
/// Returns the gradient so the work cannot be optimised away.
pub fn autograd_chain<B: Backend>(n: usize) -> f32 {
    let x = Tensor::<B>::from_vec(vec![1.0f32], [1]).requires_grad_(true);
    let c1 = Tensor::<B>::from_vec(vec![1.0001f32], [1]);
    let c2 = Tensor::<B>::from_vec(vec![0.5f32], [1]);
    let mut y = x.clone();
    for i in 0..n {
        y = if i % 2 == 0 { &y * &c1 } else { &y + &c2 };
    }
    y.sum().backward().expect("backward");
    x.grad().expect("grad").to_vec::<f32>()[0]
}

/// Two random `n x n` f32 matrices on the CPU backend.
pub fn square(n: usize, dtype: DType) -> (Tensor<Cpu>, Tensor<Cpu>) {
    autograd_tensor::manual_seed(0);
    (Tensor::randn([n, n], dtype), Tensor::randn([n, n], dtype))
}

/// Median seconds of `f` over `reps` runs after one warm-up.
pub fn median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    t[reps / 2]
}

/// Runs `f` on a rayon pool of `threads` threads.
pub fn with_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool").install(f)
}
