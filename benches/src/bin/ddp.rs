//! Data-parallel throughput of the 784-512-512-10 MLP's SGD step at batch
//! 128 per rank, against one rank, and the cost of DDP's all-reduce.
//!
//! - `cargo run --release -p benches --bin ddp [rounds]`: one process: one
//!   rank on one thread (b128), one process on two threads (b128: its own
//!   speed-up; b256: the doubled batch), and two ranks of an in-process
//!   group with one thread each (b128 per rank, 256 per step).
//! - `cargo build --release -p benches --features mpi --bin ddp` then
//!   `mpirun -n 2 -x RAYON_NUM_THREADS=1 target/release/ddp --mpi [rounds]`:
//!   the two ranks as MPI processes (run the line above for the baselines).
//!
//! Each DDP row also times backward alone (the same model without DDP, on
//! the same rank) against backward with the overlapped all-reduce, and
//! one all-reduce of the gradients' bytes as a single buffer.

#![allow(clippy::print_stdout)] // the output is the point

use autograd_core::{HostData, Result};
use autograd_cpu::Cpu;
use autograd_dist::{CollectiveOp, Communicator, DdpConfig, DistributedDataParallel, ThreadGroup};
use autograd_nn::{MlpConfig, Module, ModuleExt, Sequential};
use autograd_optim::{Optimizer, Sgd, SgdConfig};
use autograd_tensor::functional::{Reduction, try_cross_entropy};
use autograd_tensor::{Tensor, fork_rng};
use benches::{median_secs, with_threads};
use std::sync::Arc;

const REPS: usize = 15;

fn model() -> Sequential<Cpu> {
    fork_rng(0, || MlpConfig::new(&[784, 512, 512, 10]).init::<Cpu>())
}

fn batch(n: usize, seed: u64) -> (Tensor<Cpu>, Tensor<Cpu>) {
    (fork_rng(seed, || Tensor::<Cpu>::randn([n, 784])), Tensor::<Cpu>::from_vec((0..n).map(|i| (i % 10) as i64).collect::<Vec<_>>(), [n]))
}

/// Median seconds of one SGD step of `m` on a batch of `n`.
fn step_secs(m: &dyn Module<Cpu>, params: Vec<Tensor<Cpu>>, n: usize) -> f64 {
    let mut opt = Sgd::new(params, SgdConfig { lr: 0.01, ..Default::default() }).expect("sgd");
    let (x, y) = batch(n, 1);
    median_secs(REPS, || {
        opt.zero_grad(true);
        let loss = try_cross_entropy(&m.forward(&x), &y, Reduction::Mean, &Default::default()).expect("loss");
        loss.backward().expect("backward");
        opt.step().expect("step");
    })
}

/// Median seconds of backward alone (forward untimed) of `m`.
fn backward_secs(m: &dyn Module<Cpu>, n: usize) -> f64 {
    let (x, y) = batch(n, 2);
    let mut t: Vec<f64> = (0..REPS + 1)
        .map(|_| {
            let loss = try_cross_entropy(&m.forward(&x), &y, Reduction::Mean, &Default::default()).expect("loss");
            let s = std::time::Instant::now();
            loss.backward().expect("backward");
            s.elapsed().as_secs_f64()
        })
        .skip(1)
        .collect();
    t.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    t[t.len() / 2]
}

/// What one rank measures: DDP step, backward with and without DDP, and a
/// single-buffer all-reduce of the gradients' bytes.
struct RankTimes {
    step: f64,
    backward_ddp: f64,
    backward_plain: f64,
    all_reduce: f64,
    bytes: usize,
}

fn rank_times(comm: Arc<dyn Communicator>) -> Result<RankTimes> {
    // `DDP_FIRST_BUCKET_MB=25`: one bucket, launched when backward ends (no overlap).
    let first = std::env::var("DDP_FIRST_BUCKET_MB").ok().and_then(|s| s.parse().ok()).unwrap_or(DdpConfig::default().first_bucket_cap_mb);
    let ddp = DistributedDataParallel::new(model(), comm.clone(), DdpConfig { first_bucket_cap_mb: first, ..Default::default() })?;
    let plain = model();
    let step = step_secs(&ddp, ddp.parameters(), 128);
    // alternate so that both see the same machine
    let (mut bd, mut bp) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        bd.push(backward_secs(&ddp, 128));
        bp.push(backward_secs(&plain, 128));
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        v[v.len() / 2]
    };
    let numel: usize = plain.parameters().iter().map(|p| p.numel()).sum();
    let data = HostData::F32(vec![1.0; numel]);
    // the buffer is made before the clock starts: only the collective is timed
    let mut t: Vec<f64> = (0..REPS + 1)
        .map(|_| {
            let mut d = data.clone();
            let s = std::time::Instant::now();
            comm.all_reduce(&mut d, CollectiveOp::Avg).expect("all-reduce");
            s.elapsed().as_secs_f64()
        })
        .skip(1)
        .collect();
    t.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    let all_reduce = t[t.len() / 2];
    Ok(RankTimes { step, backward_ddp: med(bd), backward_plain: med(bp), all_reduce, bytes: numel * 4 })
}

fn report(label: &str, t: &RankTimes, one_rank_1t: Option<f64>, one_proc_2t_b256: Option<f64>) {
    println!("{label}: step {:.2} ms per rank (256 examples per step over 2 ranks)", t.step * 1e3);
    if let Some(s) = one_rank_1t {
        println!("  throughput vs 1 rank, 1 thread, b128: {:.2}x (target >= 1.8x)", 2.0 * s / t.step);
    }
    if let Some(s) = one_proc_2t_b256 {
        println!("  throughput vs 1 process, 2 threads, b256: {:.2}x (target >= 0.9x)", s / t.step);
    }
    println!(
        "  backward with the overlapped all-reduce {:.2} ms vs backward alone {:.2} ms: {:.2}x (target <= 1.1x)",
        t.backward_ddp * 1e3,
        t.backward_plain * 1e3,
        t.backward_ddp / t.backward_plain
    );
    println!(
        "  all-reduce of the gradients' {:.2} MB as one buffer: {:.3} ms ({:.2} GB/s); DDP's added backward time {:.3} ms",
        t.bytes as f64 / 1e6,
        t.all_reduce * 1e3,
        t.bytes as f64 / t.all_reduce / 1e9,
        (t.backward_ddp - t.backward_plain) * 1e3
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: usize = args.iter().find(|a| !a.starts_with("--")).and_then(|s| s.parse().ok()).unwrap_or(3);
    if args.iter().any(|a| a == "--mpi") {
        mpi_main(rounds);
        return;
    }
    for round in 0..rounds {
        let m = model();
        let one = with_threads(1, || step_secs(&m, m.parameters(), 128));
        let two_b128 = with_threads(2, || step_secs(&m, m.parameters(), 128));
        let two_b256 = with_threads(2, || step_secs(&m, m.parameters(), 256));
        println!(
            "round {round}: 1 rank 1 thread b128 {:.2} ms; 1 process 2 threads b128 {:.2} ms (speed-up {:.2}x), b256 {:.2} ms",
            one * 1e3,
            two_b128 * 1e3,
            one / two_b128,
            two_b256 * 1e3
        );
        let times = ThreadGroup::new(2).threads_per_rank(1).run(|c| rank_times(c.clone())).expect("ranks");
        report("  2 ranks (threads), 1 thread each, b128 per rank", &times[0], Some(one), Some(two_b256));
    }
}

#[cfg(feature = "mpi")]
fn mpi_main(rounds: usize) {
    let mpi = Arc::new(autograd_dist::Mpi::init().expect("MPI"));
    let comm: Arc<dyn Communicator> = mpi.clone();
    for round in 0..rounds {
        let t = rank_times(comm.clone()).expect("rank");
        let raw = mpi_own_all_reduce_secs(&mpi, t.bytes / 4);
        if comm.rank() == 0 {
            report(&format!("round {round}: {} MPI ranks, b128 per rank", comm.world_size()), &t, None, None);
            println!(
                "  MPI's own MPI_Allreduce of the same {:.2} MB (blocking, no queue): {:.3} ms ({:.2} GB/s)",
                t.bytes as f64 / 1e6,
                raw * 1e3,
                t.bytes as f64 / raw / 1e9
            );
        }
    }
}

/// Median seconds of `MPI_Allreduce` (sum, f32) of `n` values, called
/// directly on the communicator's thread.
#[cfg(feature = "mpi")]
fn mpi_own_all_reduce_secs(mpi: &autograd_dist::Mpi, n: usize) -> f64 {
    use autograd_dist::rsmpi::collective::SystemOperation;
    use autograd_dist::rsmpi::traits::CommunicatorCollectives;
    mpi.with_raw(move |w| {
        let send = vec![1.0f32; n];
        let mut out = vec![0.0f32; n];
        w.barrier();
        median_secs(REPS, || w.all_reduce_into(&send[..], &mut out[..], SystemOperation::sum()))
    })
    .expect("MPI")
}

#[cfg(not(feature = "mpi"))]
fn mpi_main(_: usize) {
    eprintln!("built without MPI: cargo build --release -p benches --features mpi --bin ddp");
    std::process::exit(1);
}
