//! A character-level GPT on Genesis and Exodus (King James Bible, shipped):
//! 4 pre-norm causal Transformer blocks, 4 heads, width 128, context 128,
//! AdamW with warm-up and cosine decay, gradient clipping.
//!
//! `cargo run --release --example char_gpt` trains 600 steps (a few
//! minutes on 2 cores) and prints the validation loss against the corpus's
//! unigram entropy, then samples text.
//!
//! `--steps N` sets the steps; `--checkpoint none,sqrt,every-2` trains the
//! same model from the same seed under each checkpointing policy of the
//! blocks and prints each one's peak activation memory and step time
//! (losses must be, and are checked to be, identical); `--seed N`;
//! `--json` prints each policy's median step time as JSON lines (for
//! `benches/compare_pytorch.py`); `--context N` and `--batch N` change the
//! window and the batch (the attention-bound benchmark runs context 512,
//! batch 4); `--device wgpu` trains on the GPU backend (built with
//! `--features wgpu`). `--ranks N --zero 0|1|2|3` trains data-parallel on
//! N ranks (threads) under plain DDP or a ZeRO stage and prints each
//! rank's bytes of parameters, gradients and optimizer state; built with
//! `--features mpi`, `mpirun -n N char_gpt --zero S` does the same on
//! processes.

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::dist::{Communicator, ThreadGroup, run_rank};
use autograd::prelude::*;
use examples::char_gpt::{CharGpt, Corpus, GptConfig, TrainConfig, TrainReport, policy, sample, train};
use examples::char_gpt_dist::{DataParallel, Zero, train_data_parallel};
use examples::device::{Device, OnDevice, run_on};
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mut tc = TrainConfig::default();
    if let Some(s) = arg(&args, "--steps") {
        tc.steps = s.parse().map_err(|_| Error::msg(format!("--steps: not a number: {s}")))?;
        tc.eval_every = tc.eval_every.min(tc.steps.max(1));
    }
    if let Some(s) = arg(&args, "--seed") {
        tc.seed = s.parse().map_err(|_| Error::msg(format!("--seed: not a number: {s}")))?;
    }
    let policies: Vec<&str> = arg(&args, "--checkpoint").unwrap_or("none").split(',').collect();
    let corpus = Corpus::shipped()?;
    let mut gc = GptConfig::small(corpus.vocab.len());
    if let Some(s) = arg(&args, "--context") {
        gc.context = s.parse().map_err(|_| Error::msg(format!("--context: not a number: {s}")))?;
    }
    if let Some(s) = arg(&args, "--batch") {
        tc.batch_size = s.parse().map_err(|_| Error::msg(format!("--batch: not a number: {s}")))?;
    }
    println!(
        "char_gpt: {} training / {} validation characters, {} distinct; {} layers, {} heads, width {}, context {}; \
         AdamW lr {} (warm-up {}, cosine to {}), batch {}, clip {}, {} steps",
        corpus.train.len(),
        corpus.val.len(),
        corpus.vocab.len(),
        gc.n_layers,
        gc.n_heads,
        gc.d_model,
        gc.context,
        tc.lr,
        tc.warmup,
        tc.min_lr,
        tc.batch_size,
        tc.clip,
        tc.steps
    );
    println!("unigram entropy of the corpus: {:.3} nats (the loss of a model that ignores context)", corpus.unigram_entropy);
    if arg(&args, "--zero").is_some() || arg(&args, "--ranks").is_some() {
        return distributed(&args, &tc, &gc, &corpus, policies[0]);
    }
    let job = Run { args: args.clone(), tc, gc, corpus, policies: policies.iter().map(|p| p.to_string()).collect() };
    run_on(Device::from_args(&args)?, job)
}

/// `--ranks N` (threads) or `mpirun` (processes, `--features mpi`): data
/// parallel under `--zero 0|1|2|3`, each rank printing its losses and the
/// bytes it holds.
fn distributed(args: &[String], tc: &TrainConfig, gc: &GptConfig, corpus: &Corpus, policy_name: &str) -> Result<()> {
    let zero = Zero::parse(arg(args, "--zero").unwrap_or("0"))?;
    let job = |comm: Arc<dyn Communicator>| -> Result<()> {
        let (rank, world) = (comm.rank(), comm.world_size());
        if !tc.batch_size.is_multiple_of(world) {
            return Err(Error::msg(format!("--batch {} does not split into {world} ranks", tc.batch_size)));
        }
        if rank == 0 {
            println!("{world} ranks over {}, {zero}, {} sequences per rank per step", comm.backend_name(), tc.batch_size / world);
        }
        let every = tc.eval_every.max(1);
        let dp = DataParallel { zero, policy: policy_name.to_string(), dtype: DType::F32 };
        let r = train_data_parallel::<Cpu>(comm.clone(), corpus, gc, tc, &dp, |step, loss| {
            if rank == 0 && ((step + 1) % every == 0 || step + 1 == tc.steps) {
                println!("step {:>4}: loss {loss:.3}", step + 1);
            }
        })?;
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        println!(
            "rank {rank}/{world} {zero}: parameters {:.2} MiB, gradients {:.2} MiB, optimizer state {:.2} MiB (memory counters); step {:.1} ms",
            mib(r.bytes.params),
            mib(r.bytes.grads),
            mib(r.bytes.optimizer),
            r.step_seconds * 1e3
        );
        Ok(())
    };
    match arg(args, "--ranks") {
        Some(n) => {
            let n: usize = n.parse().map_err(|_| Error::msg(format!("--ranks: not a number: {n}")))?;
            let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
            ThreadGroup::new(n).threads_per_rank((cores / n.max(1)).max(1)).run(|c| {
                let comm: Arc<dyn Communicator> = c.clone();
                run_rank(comm.as_ref(), || job(comm.clone()))
            })?;
            Ok(())
        }
        None => mpi_job(job),
    }
}

#[cfg(feature = "mpi")]
fn mpi_job(job: impl Fn(Arc<dyn Communicator>) -> Result<()>) -> Result<()> {
    let comm: Arc<dyn Communicator> = Arc::new(autograd::dist::Mpi::init()?);
    run_rank(comm.as_ref(), || job(comm.clone()))
}

#[cfg(not(feature = "mpi"))]
fn mpi_job(_: impl Fn(Arc<dyn Communicator>) -> Result<()>) -> Result<()> {
    Err(Error::msg("--zero without --ranks runs under mpirun: build with --features mpi"))
}

/// The training runs, one per policy, on the backend `--device` names.
struct Run {
    args: Vec<String>,
    tc: TrainConfig,
    gc: GptConfig,
    corpus: Corpus,
    policies: Vec<String>,
}

impl OnDevice for Run {
    type Output = ();
    fn run<B: Backend>(self) -> Result<()> {
        let Run { args, tc, gc, corpus, policies } = self;
        let style =
            ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len} steps {msg}").expect("a valid template").progress_chars("=> ");
        let mut runs: Vec<(&str, TrainReport, CharGpt<B>)> = Vec::new();
        for name in policies.iter().map(String::as_str) {
            let model = CharGpt::<B>::new(&gc, policy(name)?, tc.seed)?;
            if runs.is_empty() {
                println!("{} parameters, on {}", model.num_parameters(), B::NAME);
            }
            let bar = ProgressBar::new(tc.steps as u64).with_style(style.clone());
            bar.set_prefix(name.to_string());
            let report = train(&model, &corpus, &tc, gc.context, |step, loss, val| {
                bar.set_position(step as u64 + 1);
                match val {
                    Some(v) => {
                        bar.set_message(format!("loss {loss:.3}, validation {v:.3}"));
                        if bar.is_hidden() {
                            // Not a terminal (CI, a pipe): a line per evaluation instead of the bar.
                            println!("{name:>8} step {:>4}: loss {loss:.3}, validation {v:.3}", step + 1);
                        }
                    }
                    None => bar.set_message(format!("loss {loss:.3}")),
                }
            })?;
            bar.finish();
            runs.push((name, report, model));
        }
        println!();
        println!("{:>10} {:>12} {:>12} {:>22} {:>12}", "policy", "final loss", "validation", "peak activations (MiB)", "step (ms)");
        for (name, r, _) in &runs {
            println!(
                "{name:>10} {:>12.4} {:>12.4} {:>22.2} {:>12.1}",
                r.losses.last().copied().unwrap_or(f32::NAN),
                r.final_val_loss(),
                r.peak_activation_bytes as f64 / (1 << 20) as f64,
                r.step_seconds * 1e3
            );
        }
        let (first, report, model) = &runs[0];
        if let Some((other, _, _)) = runs.iter().find(|(_, r, _)| r.losses != report.losses) {
            return Err(Error::msg(format!("the losses under {other} differ from those under {first}")));
        }
        if runs.len() > 1 {
            println!("identical losses under every policy: yes ({} steps)", tc.steps);
        }
        if args.iter().any(|a| a == "--json") {
            // for benches/compare_pytorch.py: the median training step per policy
            for (name, r, _) in &runs {
                println!(
                    "{{\"workload\": \"gpt_step\", \"n\": {}, \"context\": {}, \"threads\": 2, \"policy\": \"{name}\", \"ms\": {:.3}, \"peak_mib\": {:.2}}}",
                    tc.batch_size,
                    gc.context,
                    r.step_seconds * 1e3,
                    r.peak_activation_bytes as f64 / (1 << 20) as f64
                );
            }
            return Ok(());
        }
        let gap = corpus.unigram_entropy - report.final_val_loss();
        println!(
            "validation loss {:.3} nats: {:.3} below the unigram entropy {:.3} ({})",
            report.final_val_loss(),
            gap,
            corpus.unigram_entropy,
            if gap >= 1.0 { "learnt context" } else { "train longer: --steps" }
        );
        println!();
        println!("sample (temperature 0.8):");
        println!("{}", sample(model, &corpus, "And God said", 300, 0.8, gc.context, tc.seed)?);
        Ok(())
    }
}
