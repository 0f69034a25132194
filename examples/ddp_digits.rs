//! The digits MLP trained data-parallel: every rank holds the model, reads
//! its `DistributedSampler` shard in batches of 32 and averages gradients
//! with the others during backward.
//!
//! - In one process, ranks as threads: `cargo run --release --example ddp_digits -- --threads 2`
//! - Ranks as processes under MPI (`--features mpi`, OpenMPI installed):
//!   `cargo build --release --features mpi --example ddp_digits` then
//!   `mpirun -n 2 target/release/examples/ddp_digits` (as root add
//!   `--allow-run-as-root`; across machines add `--hostfile hosts`).
//!
//! Options: `--epochs N` (default 30), `--seed N`, `--save PATH` (rank 0
//! writes the model), `--check` (instead of training: the equivalence
//! checks against one process, DDP, ZeRO-1, ZeRO-2 and ZeRO-3, and each
//! stage's bytes per rank; exit status 1 on a difference),
//! `--fail-on-rank R` (rank R fails after its first epoch: the job must end
//! with a non-zero status, not hang).

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::dist::{Communicator, ThreadGroup, run_rank};
use autograd::prelude::*;
use examples::ddp::{check_against_single, issue_checks, train_ddp};
use examples::digits::{Recipe, load_digits};
use examples::zero::{Stage, bytes_after_a_step, check_sharded_against_single, sharded_checks};
use std::sync::Arc;

struct Args {
    threads: Option<usize>,
    epochs: usize,
    seed: u64,
    save: Option<std::path::PathBuf>,
    check: bool,
    fail_on_rank: Option<usize>,
}

fn parse() -> Args {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    Args {
        threads: value("--threads").and_then(|s| s.parse().ok()),
        epochs: value("--epochs").and_then(|s| s.parse().ok()).unwrap_or(30),
        seed: value("--seed").and_then(|s| s.parse().ok()).unwrap_or(0),
        save: value("--save").map(Into::into),
        check: args.iter().any(|a| a == "--check"),
        fail_on_rank: value("--fail-on-rank").and_then(|s| s.parse().ok()),
    }
}

/// One rank's whole job.
fn rank_main(comm: Arc<dyn Communicator>, args: &Args) -> Result<()> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let data = load_digits::<Cpu>()?;
    if args.check {
        for check in issue_checks() {
            let r = check_against_single(comm.clone(), &data, check)?;
            println!(
                "rank {rank}/{world} {check:?}: max |difference| from one process {:.3e}{}",
                r.vs_single,
                r.vs_ddp.map(|d| format!(", from plain DDP {d:.3e}")).unwrap_or_default()
            );
            if let Some((mine, whole)) = r.state_bytes {
                println!("rank {rank}/{world} ZeRO-1 optimizer state: {mine} bytes on this rank, {whole} for the whole optimizer");
            }
        }
        for check in sharded_checks() {
            let r = check_sharded_against_single(comm.clone(), &data, check)?;
            println!(
                "rank {rank}/{world} {check:?}: max |difference| from one process {:.3e}, from plain DDP {:.3e}",
                r.vs_single, r.vs_ddp
            );
        }
        for stage in [Stage::Ddp, Stage::Zero2, Stage::Zero3] {
            let (bytes, params) = bytes_after_a_step(comm.clone(), &data, stage)?;
            println!("rank {rank}/{world} {stage:?}: {bytes} bytes of parameters, gradients and AdamW state for {params} parameters");
        }
        return Ok(());
    }
    let recipe = Recipe { epochs: args.epochs, seed: args.seed, ..Recipe::default() };
    if rank == 0 {
        println!(
            "ddp_digits: {world} ranks over {}, batch {} per rank ({} per step), Adam lr {}, {} epochs",
            comm.backend_name(),
            recipe.batch_size,
            recipe.batch_size * world,
            recipe.lr,
            recipe.epochs
        );
    }
    let start = std::time::Instant::now();
    let run = train_ddp(comm.clone(), &data, &recipe, args.save.as_deref(), |epoch, loss| {
        println!("rank {rank}/{world} epoch {:>2} loss {loss:.4}", epoch + 1);
        if args.fail_on_rank == Some(rank) {
            return Err(Error::msg(format!("--fail-on-rank {rank}: failing on purpose after epoch {}", epoch + 1)));
        }
        Ok(())
    })?;
    println!("rank {rank}/{world}: {} steps in {:.2?}, final test accuracy {:.2}%", run.steps, start.elapsed(), 100.0 * run.test_accuracy);
    Ok(())
}

fn main() {
    let args = parse();
    let outcome = match args.threads {
        Some(n) => {
            let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
            ThreadGroup::new(n)
                .threads_per_rank((cores / n.max(1)).max(1))
                .run(|comm| {
                    let comm: Arc<dyn Communicator> = comm.clone();
                    run_rank(comm.as_ref(), || rank_main(comm.clone(), &args))
                })
                .map(|_| ())
        }
        None => mpi_main(&args),
    };
    if let Err(e) = outcome {
        eprintln!("ddp_digits: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "mpi")]
fn mpi_main(args: &Args) -> Result<()> {
    let comm: Arc<dyn Communicator> = Arc::new(autograd::dist::Mpi::init()?);
    run_rank(comm.as_ref(), || rank_main(comm.clone(), args))
}

#[cfg(not(feature = "mpi"))]
fn mpi_main(_: &Args) -> Result<()> {
    Err(Error::msg("built without MPI: pass --threads N, or build with --features mpi and start it with mpirun"))
}
