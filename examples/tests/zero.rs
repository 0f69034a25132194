//! ZeRO-2 and ZeRO-3 train as one process on the whole batches does
//! (AdamW, 20 steps, f64 and f32, with checkpointing, under autocast) on
//! 2 and 4 in-process ranks, and each rank holds the bytes the formulas
//! say. CI runs the 2-rank checks under `mpirun -n 2` (`ddp_digits --check`).

use autograd::dist::{Communicator, ThreadGroup};
use autograd::prelude::*;
use examples::digits::load_digits;
use examples::zero::{Stage, adamw, bytes_after_a_step, check_sharded_against_single, mlp, sharded_checks, sharded_mlp, train_steps};
use std::sync::Arc;

#[test]
fn sharded_stages_match_one_process_on_two_ranks() {
    let data = load_digits::<Cpu>().unwrap();
    for check in sharded_checks() {
        let reports = ThreadGroup::new(2).run(|c| check_sharded_against_single(c.clone(), &data, check)).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{check:?}: {reports:?}");
    }
}

#[test]
fn sharded_stages_match_one_process_on_four_ranks() {
    let data = load_digits::<Cpu>().unwrap();
    for check in sharded_checks().into_iter().filter(|c| !c.checkpoint && !c.autocast) {
        let reports = ThreadGroup::new(4).run(|c| check_sharded_against_single(c.clone(), &data, check)).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{check:?}: {reports:?}");
    }
}

#[test]
fn each_rank_holds_the_bytes_of_its_stage() {
    let data = load_digits::<Cpu>().unwrap();
    for world in [2usize, 4] {
        for stage in [Stage::Ddp, Stage::Zero2, Stage::Zero3] {
            let got = ThreadGroup::new(world).threads_per_rank(1).run(|c| bytes_after_a_step(c.clone(), &data, stage)).unwrap();
            let params = got[0].1 as f64;
            // AdamW in f32: 4 bytes of parameter, 4 of gradient, 8 of moments per parameter.
            let n = world as f64;
            let formula = match stage {
                Stage::Ddp => 16.0 * params,
                Stage::Zero2 => (4.0 + 12.0 / n) * params,
                Stage::Zero3 => 16.0 / n * params,
            };
            for (rank, (bytes, _)) in got.iter().enumerate() {
                // ZeRO-3 cuts each parameter into slices of ceil(rows / world)
                // rows: the digits head's 10 rows go 3, 3, 3, 1 on 4 ranks, so a
                // rank's exact share is counted from its rows.
                let expected = match stage {
                    Stage::Zero3 => 16.0 * rows_of_rank(rank, world) as f64,
                    _ => formula,
                };
                let off = *bytes as f64 / expected - 1.0;
                eprintln!(
                    "{stage:?} world {world} rank {rank}: {bytes} bytes, formula {formula:.0}, expected {expected:.0} ({:+.1}%)",
                    off * 100.0
                );
                assert!(off.abs() <= 0.05, "{stage:?} on {world} ranks, rank {rank}: {bytes} bytes, expected {expected:.0}");
            }
            if stage == Stage::Zero3 {
                let total: usize = got.iter().map(|g| g.0).sum();
                assert!((total as f64 / (16.0 * params) - 1.0).abs() <= 0.01, "the shards add up to one model: {total}");
            }
        }
    }
}

/// Elements of the digits MLP (fc: 128 x 64 and 128, head: 10 x 128 and
/// 10) in rank `rank`'s slices of rows.
fn rows_of_rank(rank: usize, world: usize) -> usize {
    let share = |rows: usize, row_len: usize| {
        let chunk = rows.div_ceil(world);
        let start = (rank * chunk).min(rows);
        ((start + chunk).min(rows) - start) * row_len
    };
    share(128, 64) + share(128, 1) + share(10, 128) + share(10, 1)
}

#[test]
fn a_sharded_state_resumes_bit_for_bit_and_the_whole_state_moves_to_four_ranks_or_one_process() {
    let data = load_digits::<Cpu>().unwrap();
    let dir = std::env::temp_dir().join(format!("autograd_zero3_resume_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |rank: usize| dir.join(format!("rank{rank}.safetensors"));
    // Two ranks: 5 steps, save, 5 more.
    let first = ThreadGroup::new(2)
        .run(|c| {
            let comm: Arc<dyn Communicator> = c.clone();
            let m = sharded_mlp::<Cpu>(&comm, 0, DType::F64, false)?;
            let mut o = adamw(m.parameters())?;
            train_steps(&m, &mut o, &data, 0..5, c.rank(), 2)?;
            m.save_sharded(file(c.rank()))?;
            let (saved_whole, saved_opt) = (m.full_state_dict()?, o.state_dict());
            let whole_opt = m.gather_optimizer_state(&saved_opt)?;
            train_steps(&m, &mut o, &data, 5..10, c.rank(), 2)?;
            Ok((m.full_state_dict()?, saved_whole, saved_opt, whole_opt))
        })
        .unwrap();
    let (after_ten, at_five, whole_opt) = (first[0].0.clone(), first[0].1.clone(), first[0].3.clone());
    let exp_avg = &whole_opt.tensors["state.0.exp_avg"];
    assert_eq!(exp_avg.dims(), &[128, 64], "the gathered moments are whole");
    // Resumed on two ranks from the shard files and the optimizer's shards: bit for bit.
    let resumed = ThreadGroup::new(2)
        .run(|c| {
            let comm: Arc<dyn Communicator> = c.clone();
            let m = sharded_mlp::<Cpu>(&comm, 7, DType::F64, false)?;
            let before = m.full_state_dict()?;
            // Another rank's file is refused and changes nothing.
            assert!(m.load_sharded(file(1 - c.rank())).is_err());
            assert!(m.full_state_dict()?.iter().all(|(k, t)| t.to_vec_f64() == before[k].to_vec_f64()));
            m.load_sharded(file(c.rank()))?;
            let mut o = adamw(m.parameters())?;
            o.load_state_dict(&first[c.rank()].2)?;
            train_steps(&m, &mut o, &data, 5..10, c.rank(), 2)?;
            m.full_state_dict()
        })
        .unwrap();
    for (k, t) in &after_ten {
        assert_eq!(t.to_vec_f64(), resumed[0][k].to_vec_f64(), "{k} resumed on 2 ranks");
    }
    // The whole state (parameters and AdamW's) on four ranks, and in one
    // process: 5 more steps of each equal the two ranks' 5 more steps.
    let moved = ThreadGroup::new(4)
        .run(|c| {
            let comm: Arc<dyn Communicator> = c.clone();
            let m = sharded_mlp::<Cpu>(&comm, 9, DType::F64, false)?;
            m.load_full_state_dict(&at_five)?;
            let loaded = m.full_state_dict()?;
            let mut o = adamw(m.parameters())?;
            o.load_state_dict(&m.shard_optimizer_state(&whole_opt)?)?;
            train_steps(&m, &mut o, &data, 5..10, c.rank(), 4)?;
            Ok((loaded, m.full_state_dict()?))
        })
        .unwrap();
    let mut single = mlp::<Cpu>(3, DType::F64, false);
    single.load_state_dict(&at_five, Default::default()).unwrap();
    let mut o = adamw(single.parameters()).unwrap();
    o.load_state_dict(&whole_opt).unwrap();
    train_steps(&single, &mut o, &data, 5..10, 0, 1).unwrap();
    for (k, t) in &at_five {
        assert_eq!(t.to_vec_f64(), moved[3].0[k].to_vec_f64(), "{k} loaded on 4 ranks");
        let ten = after_ten[k].to_vec_f64();
        let worst = |other: Vec<f64>| ten.iter().zip(other).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        let (four, one) = (worst(moved[3].1[k].to_vec_f64()), worst(single.state_dict()[k].to_vec_f64()));
        assert!(four <= 1e-12 && one <= 1e-12, "{k}: resumed on 4 ranks {four:e}, in one process {one:e} from the 2 ranks' run");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// char_gpt's model, small: 2 blocks of width 32, context 16, in f64.
fn tiny_gpt(corpus: &examples::char_gpt::Corpus) -> (examples::char_gpt::GptConfig, examples::char_gpt::TrainConfig) {
    let gc = examples::char_gpt::GptConfig { vocab: corpus.vocab.len(), d_model: 32, n_layers: 2, n_heads: 2, context: 16, dropout: 0.0 };
    let tc = examples::char_gpt::TrainConfig { steps: 20, batch_size: 4, warmup: 5, ..Default::default() };
    (gc, tc)
}

/// The largest difference between two runs' parameters, leaving out the
/// key part of each attention's `in_proj_bias`: its gradient is zero in
/// closed form (a constant added to every key of a row adds the same
/// number to each of the row's scores, which the softmax cancels), so what
/// reaches it is rounding, which Adam scales up to steps of the learning
/// rate: plain DDP's key biases end 7e-4 from one process in f32 (1.6e-12
/// in f64) while every other parameter is within 5e-7 (1e-15).
fn largest_difference(a: &examples::char_gpt_dist::DistReport<Cpu>, b: &examples::char_gpt_dist::DistReport<Cpu>, d_model: usize) -> f64 {
    let mut worst = 0.0f64;
    for (k, t) in &a.params {
        let u = b.params.get(k).unwrap_or_else(|| panic!("no {k}"));
        let key_bias = if k.ends_with("in_proj_bias") { d_model..2 * d_model } else { 0..0 };
        for (i, (x, y)) in t.to_vec_f64().iter().zip(u.to_vec_f64()).enumerate() {
            if !key_bias.contains(&i) {
                worst = worst.max((x - y).abs());
            }
        }
    }
    worst
}

/// char_gpt's model (embeddings, attention, norms) trained 20 steps with
/// the example's AdamW, schedule and clipping: every stage on 2 ranks (and
/// ZeRO-3 on 4, and under sqrt checkpointing) against one process on the
/// whole batches, within the 1e-12 in f64 and 1e-5 in f32.
#[test]
fn char_gpt_under_every_stage_matches_one_process() {
    use examples::char_gpt_dist::{DataParallel, Zero, train_data_parallel};
    let corpus = examples::char_gpt::Corpus::shipped().unwrap();
    let (gc, tc) = tiny_gpt(&corpus);
    let run = |dtype: DType, ranks: usize, zero: Zero, policy: &'static str| {
        ThreadGroup::new(ranks)
            .run(|c| {
                let dp = DataParallel { zero, policy: policy.to_string(), dtype };
                train_data_parallel::<Cpu>(c.clone(), &corpus, &gc, &tc, &dp, |_, _| {})
            })
            .unwrap_or_else(|e| panic!("{zero:?} on {ranks} ranks: {e}"))
    };
    let cases = [
        (DType::F64, 2, Zero::Ddp, "none"),
        (DType::F64, 4, Zero::Ddp, "none"),
        (DType::F64, 2, Zero::One, "none"),
        (DType::F64, 2, Zero::Two, "none"),
        (DType::F64, 2, Zero::Three, "none"),
        (DType::F64, 2, Zero::Three, "sqrt"),
        (DType::F64, 4, Zero::Three, "none"),
        (DType::F32, 2, Zero::Two, "none"),
        (DType::F32, 2, Zero::Three, "none"),
        (DType::F32, 4, Zero::Three, "none"),
    ];
    for dtype in [DType::F64, DType::F32] {
        let single = run(dtype, 1, Zero::Ddp, "none").remove(0);
        assert!(single.losses[19] < single.losses[0], "it learns: {:?}", single.losses);
        let tolerance = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
        for &(_, ranks, zero, policy) in cases.iter().filter(|c| c.0 == dtype) {
            for (rank, r) in run(dtype, ranks, zero, policy).iter().enumerate() {
                let worst = largest_difference(&single, r, gc.d_model);
                let what = format!("{dtype:?} {zero:?} ({policy}) on {ranks} ranks, rank {rank}");
                assert!(worst <= tolerance, "{what}: parameters differ from one process by {worst:e}");
                let losses = single.losses.iter().zip(&r.losses).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
                assert!(losses <= tolerance, "{what}: losses differ by {losses:e}");
            }
        }
    }
}
