//! Data-parallel training equals one process on the whole batches: the
//! issue's checks (SGD+momentum and Adam in f64 and f32, `no_sync`, ZeRO-1
//! against plain DDP, an unused branch) on an in-process group of 2 ranks,
//! one with 4, and the `ddp_digits` training. CI runs the same checks under
//! `mpirun -n 2` (`ddp_digits --check`).

use autograd::dist::{Communicator, ThreadGroup};
use autograd::prelude::*;
use examples::ddp::{Check, Mode, Opt, check_against_single, issue_checks, train_ddp};
use examples::digits::{Recipe, load_digits};
use std::sync::Arc;

#[test]
fn two_ranks_match_one_process_in_every_check_of_the_issue() {
    let data = load_digits::<Cpu>().unwrap();
    for check in issue_checks() {
        let reports = ThreadGroup::new(2).run(|c| check_against_single(c.clone(), &data, check)).unwrap_or_else(|e| panic!("{e}"));
        for r in &reports {
            assert!(r.vs_single <= check.tolerance(), "{check:?}: {r:?}");
        }
        if check.mode == Mode::Zero1 {
            let (mine0, whole) = reports[0].state_bytes.unwrap();
            let (mine1, _) = reports[1].state_bytes.unwrap();
            assert_eq!(mine0 + mine1, whole, "the shards add up to the whole state");
            assert!(mine0 < whole && mine1 < whole, "each rank holds only its shard: {mine0} + {mine1} of {whole}");
            assert_eq!(reports[0].vs_ddp, Some(0.0), "ZeRO-1 gives plain DDP's parameters bit for bit");
        }
    }
}

#[test]
fn four_ranks_match_one_process() {
    let data = load_digits::<Cpu>().unwrap();
    let check = Check { opt: Opt::Adam, dtype: DType::F64, mode: Mode::Plain, steps: 20, batch: 64 };
    let reports = ThreadGroup::new(4).run(|c| check_against_single(c.clone(), &data, check)).unwrap_or_else(|e| panic!("{e}"));
    assert!(reports.iter().all(|r| r.vs_single <= 1e-12), "{reports:?}");
}

#[test]
fn ddp_digits_trains_saves_on_rank_0_and_the_ranks_agree() {
    let data = load_digits::<Cpu>().unwrap();
    let dir = std::env::temp_dir().join(format!("ddp_digits_test_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.safetensors");
    let recipe = Recipe { epochs: 10, ..Recipe::default() };
    let runs = ThreadGroup::new(2)
        .threads_per_rank(1)
        .run(|c| {
            let comm: Arc<dyn Communicator> = c.clone();
            train_ddp(comm, &data, &recipe, Some(&path), |_, _| Ok(()))
        })
        .unwrap();
    assert_eq!(runs[0].test_accuracy, runs[1].test_accuracy, "the replicas are the same model");
    assert_eq!(runs[0].steps, 10 * 23, "1437 samples -> 719 per rank -> 23 batches of 32");
    assert!(runs[0].test_accuracy > 0.93, "{}", runs[0].test_accuracy);
    assert!(runs[0].epoch_losses.last().unwrap() < &runs[0].epoch_losses[0]);
    // what rank 0 saved is the trained model
    let mut loaded = MlpConfig::new(&[64, 128, 10]).init::<Cpu>();
    loaded.load_safetensors(&path).unwrap();
    let acc = {
        let pred = examples::digits::predict(&loaded, &data.test.0);
        let truth = data.test.1.to_vec::<i64>();
        pred.iter().zip(&truth).filter(|(p, t)| p == t).count() as f64 / truth.len() as f64
    };
    assert_eq!(acc, runs[0].test_accuracy);
    std::fs::remove_dir_all(&dir).unwrap();
}
