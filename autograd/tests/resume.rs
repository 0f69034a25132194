//! An interrupted run, saved with `TrainState` and resumed in fresh objects,
//! continues bit for bit like the uninterrupted run. The global generator
//! is process-wide: only the first test here draws from it.

use autograd::data::LoaderState;
use autograd::optim::{Scheduler, StepLR};
use autograd::prelude::*;

const EPOCHS: usize = 3;

struct Run {
    model: Sequential<Cpu>,
    opt: AdamW<Cpu>,
    sched: Scheduler,
    loader: DataLoader<Cpu>,
}

/// A fresh run: the seed decides the initial weights and the loader's order.
fn fresh(seed: u64) -> Run {
    manual_seed(seed);
    let model = MlpConfig::new(&[4, 16, 3]).with_dropout(0.25).init::<Cpu>();
    let mut opt = AdamW::new(model.parameters(), AdamWConfig { lr: 1e-2, ..Default::default() }).unwrap();
    let sched = Scheduler::new(&mut opt, StepLR { step_size: 4, gamma: 0.5 }).unwrap();
    manual_seed(1234); // the data is the same in every run
    let x = Tensor::<Cpu>::randn([22, 4]);
    let y = Tensor::<Cpu>::from_vec((0..22).map(|i| (i % 3) as i64).collect(), [22]);
    let loader = DataLoader::new(TensorDataset::new(vec![x, y]).unwrap(), 5).shuffle(seed);
    manual_seed(seed + 1);
    Run { model, opt, sched, loader }
}

fn train_step(run: &mut Run, batch: &[Tensor<Cpu>]) {
    run.opt.zero_grad(true);
    let logits = run.model.forward(&batch[0]);
    let loss = F::try_cross_entropy(&logits, &batch[1], Reduction::Mean, &Default::default()).unwrap();
    loss.backward().unwrap();
    run.opt.step().unwrap();
}

fn weights(run: &Run) -> Vec<Vec<u32>> {
    run.model.parameters().iter().map(|p| p.to_vec::<f32>().iter().map(|v| v.to_bits()).collect()).collect()
}

#[test]
fn interrupted_run_continues_bit_for_bit() {
    // Uninterrupted.
    let mut a = fresh(7);
    for _ in 0..EPOCHS {
        let batches: Vec<_> = a.loader.epoch().collect();
        for b in batches {
            train_step(&mut a, &b);
        }
        a.sched.step(&mut a.opt).unwrap();
    }

    // Interrupted in the middle of the second epoch, saved to disk.
    let path = std::env::temp_dir().join(format!("resume-test-{}.safetensors", std::process::id()));
    let mut b = fresh(7);
    'outer: for epoch in 0..EPOCHS {
        let mut it = b.loader.epoch();
        let mut taken = 0;
        while let Some(batch) = it.next() {
            taken += 1;
            let state = it.state();
            drop(it);
            train_step(&mut b, &batch);
            if epoch == 1 && taken == 2 {
                TrainState::capture(&b.model, &b.opt, Some(&b.sched), Some(state), 0).save(&path).unwrap();
                break 'outer;
            }
            it = b.loader.resume(&state).unwrap();
        }
        b.sched.step(&mut b.opt).unwrap();
    }
    drop(b);

    // Resumed in a run built from another seed (other weights, other order, other generator).
    let mut c = fresh(99);
    let state = TrainState::<Cpu>::load(&path).unwrap();
    state.restore(&mut c.model, &mut c.opt, Some(&mut c.sched)).unwrap();
    let saved: LoaderState = state.loader.clone().unwrap();
    assert_eq!((saved.epoch, saved.batch), (1, 2));
    for epoch in saved.epoch..EPOCHS {
        let batches: Vec<_> = if epoch == saved.epoch { c.loader.resume(&saved).unwrap().collect() } else { c.loader.epoch().collect() };
        for b in batches {
            train_step(&mut c, &b);
        }
        c.sched.step(&mut c.opt).unwrap();
    }
    // A truncated or foreign file is an `Err` naming the file.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    assert!(TrainState::<Cpu>::load(&path).unwrap_err().to_string().contains("resume-test"));
    Sequential::<Cpu>::new().add(Linear::new(2, 2)).save_safetensors(&path).unwrap();
    assert!(TrainState::<Cpu>::load(&path).unwrap_err().to_string().contains("not a training state"));
    std::fs::remove_file(&path).ok();
    assert_eq!(weights(&a), weights(&c), "the resumed run drifted from the uninterrupted one");
    assert_eq!(a.opt.lr(), c.opt.lr());

    // A state that does not fit changes nothing.
    let mut d = fresh(5);
    let before = weights(&d);
    let other = Sequential::<Cpu>::new().add(Linear::new(4, 3));
    let wrong = TrainState::capture(&other, &Sgd::new(other.parameters(), SgdConfig::default()).unwrap(), Some(&d.sched), None, 0);
    assert!(wrong.restore(&mut d.model, &mut d.opt, Some(&mut d.sched)).is_err());
    assert_eq!(weights(&d), before);
}

/// A loss scaler's state travels with the optimizer's in one file: saved,
/// loaded and put back, and a corrupt one is refused without touching the
/// scaler.
#[test]
fn grad_scaler_state_is_saved_and_resumed_with_the_optimizer() {
    use autograd::optim::{GradScalerConfig, Sgd, SgdConfig};
    // a private generator: the other test here owns the global one
    let model = autograd::tensor::fork_rng(5, || autograd::nn::LinearConfig::new(2, 1).init::<Cpu>());
    let opt = Sgd::new(model.parameters(), SgdConfig::default()).unwrap();
    let mut scaler = GradScalerConfig { growth_interval: 7, ..GradScalerConfig::new() }.init().unwrap();
    scaler.set_scale(1024.0).unwrap();
    let dir = std::env::temp_dir().join(format!("autograd-scaler-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.safetensors");
    TrainState::capture(&model, &opt, None, None, 3).with_grad_scaler(&scaler).save(&path).unwrap();
    let loaded = TrainState::<Cpu>::load(&path).unwrap();
    assert_eq!(loaded.grad_scaler, Some(scaler.state_dict()));
    let mut fresh = GradScalerConfig::new().init().unwrap();
    loaded.restore_grad_scaler(&mut fresh).unwrap();
    assert_eq!((fresh.get_scale(), fresh.state_dict().growth_interval), (1024.0, 7));
    // a run saved without a scaler has none to restore
    TrainState::capture(&model, &opt, None, None, 3).save(&path).unwrap();
    let plain = TrainState::<Cpu>::load(&path).unwrap();
    assert!(plain.grad_scaler.is_none() && plain.restore_grad_scaler(&mut fresh).is_err());
    assert_eq!(fresh.get_scale(), 1024.0, "unchanged by the refused restore");
    std::fs::remove_dir_all(&dir).ok();
}
