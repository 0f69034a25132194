//! Activation checkpointing, measured: a deep MLP of Linear + ReLU blocks,
//! forward + backward under each policy, peak activation memory (the
//! backend's counters, gradients left out) and time relative to no
//! checkpointing. `cargo run --release --example checkpoint_memory` runs a
//! small model in seconds; `-- --full` runs the model (32 blocks of
//! Linear(1024, 1024) + ReLU, batch 256, f32), `--json` prints JSON lines for
//! `benches/compare_pytorch.py`, `--policy sqrt` runs one row, `--policy mixed` the mixed-precision table only.

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::checkpoint::{
    CheckpointPolicy, MemoryBudget, NoCheckpoint, Plan, Segments, SharedLayer, Sqrt, activation_peak, checkpoint_sequential_with,
};
use autograd::prelude::*;
use autograd::tensor::fork_rng;
use std::sync::Arc;
use std::time::Instant;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--full");
    let json = args.iter().any(|a| a == "--json");
    // `--policy NAME` runs one row (e.g. under a profiler).
    let only = args.iter().position(|a| a == "--policy").and_then(|i| args.get(i + 1)).cloned();
    let (depth, width, batch, reps) = if full { (32, 1024, 256, 7) } else { (32, 256, 64, 15) };
    let blocks: Vec<SharedLayer<Cpu>> = fork_rng(0, || {
        (0..depth).map(|_| Arc::new(Sequential::new().add(Linear::<Cpu>::new(width, width)).add(ReLU)) as SharedLayer<Cpu>).collect()
    });
    let params: Vec<Tensor<Cpu>> = blocks.iter().flat_map(|b| (**b).parameters()).collect();
    let x = fork_rng(1, || Tensor::<Cpu>::randn([batch, width]));
    let unit = batch * width * 4;
    // Budgets: the sqrt plan's memory with less recomputation, and a tighter
    // one that needs nested checkpoints.
    let (budget, tight) = (10, 6);
    let policies: Vec<(String, Box<dyn CheckpointPolicy>)> = vec![
        ("none".into(), Box::new(NoCheckpoint)),
        ("segments 4".into(), Box::new(Segments(4))),
        ("sqrt".into(), Box::new(Sqrt)),
        ("segments 8".into(), Box::new(Segments(8))),
        (format!("budget {budget} units"), Box::new(MemoryBudget { units: budget, layer_cost: 1 })),
        (format!("budget {tight} units"), Box::new(MemoryBudget { units: tight, layer_cost: 1 })),
    ];
    let step = |p: &dyn CheckpointPolicy| -> Result<()> { checkpoint_sequential_with(&blocks, p, &x)?.sum().backward() };
    let chosen: Vec<&(String, Box<dyn CheckpointPolicy>)> =
        policies.iter().filter(|(n, _)| only.as_ref().is_none_or(|o| n.starts_with(o.as_str()))).collect();
    // Times: the policies take turns, one step each per round, so that a
    // shared machine's drift reaches every row alike and the ratios to
    // "none" stay meaningful.
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); chosen.len()];
    for (_, p) in &chosen {
        step(p.as_ref())?; // warm-up
    }
    for _ in 0..reps {
        for (i, (_, p)) in chosen.iter().enumerate() {
            params.iter().for_each(|p| p.set_grad(None));
            let s = Instant::now();
            step(p.as_ref())?;
            times[i].push(s.elapsed().as_secs_f64());
        }
    }
    let medians: Vec<f64> = times
        .into_iter()
        .map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
        .collect();
    if !json {
        println!(
            "{depth} blocks of Linear({width}, {width}) + ReLU, batch {batch}, f32; one activation = {:.2} MiB; median of {reps} forward+backward runs, policies taking turns",
            unit as f64 / 1048576.0
        );
        println!();
        println!(
            "{:<18} {:>9} {:>10} {:>11} {:>12} {:>8} {:>10} {:>8}",
            "policy", "segments", "predicted", "peak MiB", "vs none", "ms", "vs none", "recomp."
        );
        println!("{}", "-".repeat(93));
    }
    let mut base: Option<(f64, f64)> = None;
    for ((name, p), &secs) in chosen.iter().zip(&medians) {
        let plan: Plan = p.plan(depth)?;
        let mem = activation_peak(&params, || step(p.as_ref()))?.peak_bytes as f64;
        let (m0, t0) = *base.get_or_insert((mem, secs));
        if json {
            println!(
                "{{\"workload\":\"checkpoint\",\"policy\":\"{name}\",\"segments\":{},\"peak_mib\":{:.2},\"ms\":{:.2}}}",
                plan.segments.len(),
                mem / 1048576.0,
                secs * 1e3
            );
        } else {
            println!(
                "{:<18} {:>9} {:>7} u {:>11.1} {:>11.2}x {:>8.1} {:>9.2}x {:>8}",
                name,
                plan.segments.len(),
                plan.peak_units(1.0),
                mem / 1048576.0,
                mem / m0,
                secs * 1e3,
                secs / t0,
                plan.recomputed_layers()
            );
        }
    }
    mixed_precision(&blocks, &params, &x, json, only.as_ref().is_some_and(|o| o != "mixed"))?;
    if !json {
        println!();
        println!("predicted: activations kept at the peak, in units of one activation (checkpoints + one segment's activations);");
        println!("measured peaks add the temporaries of backward (incoming gradients, the weight gradient being computed).");
        println!("recomp.: block forwards run again during backward (nested plans run some blocks more than twice).");
    }
    Ok(())
}

/// Peak activation memory under `autocast(BF16)`, alone and with the `Sqrt`
/// policy, against f32 without checkpointing. The bf16 copies of the
/// weights come from autocast's weight-cast cache, made once in the forward
/// and kept by the graph for backward; they are counted apart from
/// activations (`MemoryStats::cast_cache_bytes`), so not in this peak.
fn mixed_precision(blocks: &[SharedLayer<Cpu>], params: &[Tensor<Cpu>], x: &Tensor<Cpu>, json: bool, skip: bool) -> Result<()> {
    use autograd::tensor::autocast::autocast;
    if skip {
        return Ok(());
    }
    let run = |low: bool, p: &dyn CheckpointPolicy| -> Result<()> {
        let y = if low {
            autocast(DType::BF16, || checkpoint_sequential_with(blocks, p, x))?
        } else {
            checkpoint_sequential_with(blocks, p, x)?
        };
        // the loss in its own statement: the f32 copy of the output (a
        // temporary of the statement) is freed before backward runs, as
        // Python frees `y.float()` in `y.float().sum().backward()`
        let loss = y.to_dtype(DType::F32).sum();
        drop(y);
        loss.backward()
    };
    let rows: [(&str, bool, Box<dyn CheckpointPolicy>); 3] = [
        ("f32, none", false, Box::new(NoCheckpoint)),
        ("bf16 autocast, none", true, Box::new(NoCheckpoint)),
        ("bf16 autocast, sqrt", true, Box::new(Sqrt)),
    ];
    let mut base = None;
    if !json {
        println!();
        println!(
            "mixed precision: peak activation memory under autocast(BF16) (weights stay f32; their cached bf16 copies are counted apart)"
        );
        println!("{:<22} {:>11} {:>12}", "run", "peak MiB", "vs f32 none");
        println!("{}", "-".repeat(47));
    }
    for (name, low, p) in &rows {
        run(*low, p.as_ref())?; // warm-up
        let mem = activation_peak(params, || run(*low, p.as_ref()))?.peak_bytes as f64;
        let m0 = *base.get_or_insert(mem);
        if json {
            println!(
                "{{\"workload\":\"checkpoint_bf16\",\"run\":\"{name}\",\"peak_mib\":{:.2},\"vs_f32\":{:.3}}}",
                mem / 1048576.0,
                mem / m0
            );
        } else {
            println!("{:<22} {:>11.1} {:>11.2}x", name, mem / 1048576.0, mem / m0);
        }
    }
    Ok(())
}
