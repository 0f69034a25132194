//! The in-process group's collectives, failures that end a group instead
//! of hanging it, per-rank generators and memory counters, and DDP's
//! construction checks, buckets and overlap. (Training equivalence with one
//! process: `examples/tests/ddp.rs`, also run under `mpirun` by CI.)

use autograd_core::memory::{Buffer, stats};
use autograd_core::{DType, DistError, Error, HostData, Result};
use autograd_cpu::Cpu;
use autograd_dist::{CollectiveOp, Communicator, DdpConfig, DistributedDataParallel, ThreadGroup, Work, all_gather_varying, on_rank0};
use autograd_jit::{Traced, compile};
use autograd_nn::{Linear, LinearConfig, Module, ModuleExt, ReLU, Sequential};
use autograd_optim::{Optimizer, Sgd, SgdConfig};
use autograd_tensor::{Tensor, fork_rng, manual_seed};
use half::bf16;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// Runs `f` on another thread and fails the test if it takes longer than
/// 60 s: the failure tests must end, not hang.
fn within_a_minute<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the group hung")
}

#[test]
fn collectives_give_every_rank_the_same_answer() {
    let out = ThreadGroup::new(3)
        .run(|c| {
            let r = c.rank() as f64;
            let mut sum = HostData::from(vec![r, 10.0 * r]);
            c.all_reduce(&mut sum, CollectiveOp::Sum)?;
            let mut avg = HostData::from(vec![r as f32]);
            c.all_reduce(&mut avg, CollectiveOp::Avg)?;
            let mut max = HostData::from(vec![r as i64, -(r as i64)]);
            c.all_reduce(&mut max, CollectiveOp::Max)?;
            let mut min = HostData::from(vec![r, -r]);
            c.all_reduce(&mut min, CollectiveOp::Min)?;
            let mut low = HostData::from(vec![bf16::from_f32(1.0 + r as f32 / 256.0)]);
            c.all_reduce(&mut low, CollectiveOp::Sum)?;
            let mut b = HostData::from(vec![r as i64; 2]);
            c.broadcast(&mut b, 2)?;
            let g = c.all_gather(&HostData::from(vec![r as f32]))?;
            let rs = c.reduce_scatter(
                &HostData::from(vec![1.0, 2.0, 3.0].into_iter().map(|x: f64| x * (r + 1.0)).collect::<Vec<_>>()),
                CollectiveOp::Sum,
            )?;
            c.barrier()?;
            Ok((sum, avg, max, min, low, b, g, rs))
        })
        .unwrap();
    for (rank, (sum, avg, max, min, low, b, g, rs)) in out.into_iter().enumerate() {
        assert_eq!(sum, HostData::from(vec![3.0f64, 30.0]));
        assert_eq!(avg, HostData::from(vec![1.0f32]));
        assert_eq!(max, HostData::from(vec![2i64, 0]));
        assert_eq!(min, HostData::from(vec![0.0f64, -2.0]));
        // the bf16 inputs (1, 1 + 1/256 -> 1, 1 + 2/256) summed in f32, rounded once
        let exact: f32 = (0..3).map(|r| bf16::from_f32(1.0 + r as f32 / 256.0).to_f32()).sum();
        assert_eq!(low, HostData::from(vec![bf16::from_f32(exact)]));
        assert_eq!(b, HostData::from(vec![2i64, 2]));
        assert_eq!(g, HostData::from(vec![0.0f32, 1.0, 2.0]));
        // block `rank` of [1,2,3] * (1+2+3)
        assert_eq!(rs, HostData::from(vec![6.0 * (rank as f64 + 1.0)]));
    }
}

#[test]
fn async_all_reduces_complete_in_launch_order() {
    let out = ThreadGroup::new(2)
        .run(|c| {
            let works: Vec<Work> = (0..5)
                .map(|i| c.all_reduce_async(vec![HostData::from(vec![(i * 10 + c.rank()) as f64])], CollectiveOp::Sum))
                .collect::<Result<_>>()?;
            works.into_iter().map(Work::wait).collect::<Result<Vec<_>>>()
        })
        .unwrap();
    let want: Vec<Vec<HostData>> = (0..5).map(|i| vec![HostData::from(vec![(20 * i + 1) as f64])]).collect();
    assert_eq!(out, vec![want.clone(), want]);
}

#[test]
fn mismatched_collectives_are_errors_on_every_rank() {
    let err = within_a_minute(|| {
        ThreadGroup::new(2).run(|c| {
            let mut x = HostData::from(vec![1.0f32; c.rank() + 1]);
            c.all_reduce(&mut x, CollectiveOp::Sum)
        })
    })
    .unwrap_err();
    assert!(err.to_string().contains("rank 1 sent 2 F32 values, rank 0 sent 1"), "{err}");
    let err = within_a_minute(|| {
        ThreadGroup::new(2).run(|c| if c.rank() == 0 { c.barrier() } else { c.all_gather(&HostData::from(vec![1i64])).map(|_| ()) })
    })
    .unwrap_err();
    assert!(err.to_string().contains("the ranks disagree: rank 0 called barrier, rank 1 called all_gather"), "{err}");
    let Error::Distributed(DistError::RankFailed { world: 2, cause, .. }) = &err else { panic!("typed: {err:?}") };
    // The cause is the first failing rank's own error: the mismatch it
    // found, or the group's failure it saw (which rank is first is a race).
    assert!(matches!(**cause, Error::Distributed(DistError::Mismatch { .. } | DistError::Transport { .. })), "typed: {cause:?}");
    let err = within_a_minute(|| ThreadGroup::new(2).run(|c| c.broadcast(&mut HostData::from(vec![true]), 5))).unwrap_err();
    assert!(err.to_string().contains("root 5"), "{err}");
    let err =
        within_a_minute(|| ThreadGroup::new(2).run(|c| c.all_reduce(&mut HostData::from(vec![true]), CollectiveOp::Sum))).unwrap_err();
    assert!(err.to_string().contains("boolean"), "{err}");
    let err =
        within_a_minute(|| ThreadGroup::new(2).run(|c| c.reduce_scatter(&HostData::from(vec![1.0f32; 3]), CollectiveOp::Sum))).unwrap_err();
    assert!(err.to_string().contains("3 values do not split into 2"), "{err}");
}

#[test]
fn varying_lengths_go_through_all_gather_varying() {
    let out = ThreadGroup::new(3).run(|c| all_gather_varying(c.as_ref(), &HostData::from(vec![c.rank() as f32; c.rank()]))).unwrap();
    assert_eq!(out[1], vec![HostData::from(Vec::<f32>::new()), HostData::from(vec![1.0f32]), HostData::from(vec![2.0f32, 2.0])]);
}

#[test]
fn a_failing_or_panicking_rank_ends_the_group_without_a_hang() {
    // Rank 2 fails while the others wait in a barrier (and then in more collectives).
    let err = within_a_minute(|| {
        ThreadGroup::new(3).run(|c| {
            if c.rank() == 2 {
                return Err(Error::msg("disk full"));
            }
            c.barrier()?;
            c.barrier()
        })
    })
    .unwrap_err();
    assert!(matches!(&err, Error::Distributed(DistError::RankFailed { rank: 2, world: 3, .. })), "typed: {err:?}");
    let err = err.to_string();
    assert!(err.contains("rank 2 of 3 failed: disk full"), "{err}");
    // A panic is a failure too.
    let err = within_a_minute(|| {
        ThreadGroup::new(2).run(|c| {
            if c.rank() == 0 {
                panic!("index out of range");
            }
            c.barrier()
        })
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("rank 0") && err.contains("index out of range"), "{err}");
    // A rank that returns early (without failing) leaves: the others' next collective fails.
    let err = within_a_minute(|| ThreadGroup::new(2).run(|c| if c.rank() == 1 { Ok(()) } else { c.barrier() })).unwrap_err().to_string();
    assert!(err.contains("rank 1") && err.contains("left the group"), "{err}");
}

#[test]
fn each_rank_has_its_own_generator_and_memory_counters() {
    manual_seed(1);
    let process_draw = Tensor::<Cpu>::rand_dtype([3], DType::F64).to_vec::<f64>();
    manual_seed(1);
    let out = ThreadGroup::new(2)
        .run(|c| {
            manual_seed(7); // on every rank: must not move the process's generator or the other rank's
            let a = Tensor::<Cpu>::rand_dtype([3], DType::F64).to_vec::<f64>();
            let before = stats().live_bytes;
            let held = Buffer::from_vec(vec![0u8; 1000 * (c.rank() + 1)]);
            let mine = stats().live_bytes - before;
            c.barrier()?; // both ranks hold their buffers now
            let mine_still = stats().live_bytes - before;
            drop(held);
            Ok((a, mine, mine_still, c.memory().peak_bytes >= mine))
        })
        .unwrap();
    assert_eq!(out[0].0, out[1].0, "ranks seeded alike draw alike");
    manual_seed(7);
    assert_eq!(out[0].0, Tensor::<Cpu>::rand_dtype([3], DType::F64).to_vec::<f64>(), "as a process seeded alike");
    manual_seed(1);
    assert_eq!(process_draw, Tensor::<Cpu>::rand_dtype([3], DType::F64).to_vec::<f64>());
    for (rank, (_, mine, still, peak)) in out.iter().enumerate() {
        assert_eq!((*mine, *still), (1000 * (rank + 1), 1000 * (rank + 1)), "rank {rank} counts only its own buffer");
        assert!(peak);
    }
}

fn mlp(seed: u64, hidden: usize) -> Sequential<Cpu> {
    fork_rng(seed, || {
        Sequential::new()
            .add(LinearConfig::new(4, hidden).with_dtype(DType::F64).init::<Cpu>())
            .add(ReLU)
            .add(LinearConfig::new(hidden, 2).with_dtype(DType::F64).init::<Cpu>())
    })
}

#[test]
fn models_that_differ_across_ranks_are_an_err_listing_the_differences() {
    let err = within_a_minute(|| {
        ThreadGroup::new(2).run(|c| DistributedDataParallel::new(mlp(0, 3 + c.rank()), c.clone(), DdpConfig::default()).map(|_| ()))
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("the ranks' models differ"), "{err}");
    assert!(err.contains("rank 1 has parameter 0.weight: shape [4, 4], F64"), "{err}");
    assert!(err.contains("rank 1 lacks rank 0's parameter 0.weight: shape [3, 4], F64"), "{err}");
    // dtype and frozen-ness count too
    let err = within_a_minute(|| {
        ThreadGroup::new(2).run(|c| {
            let m = Linear::<Cpu>::new(2, 2);
            if c.rank() == 1 {
                let _ = m.parameters()[1].clone().requires_grad_(false);
            }
            DistributedDataParallel::new(m, c.clone(), DdpConfig::default()).map(|_| ())
        })
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("bias: shape [2], F32, frozen"), "{err}");
}

#[test]
fn construction_takes_rank_0s_parameters() {
    let out = ThreadGroup::new(2)
        .run(|c| {
            let ddp = DistributedDataParallel::new(mlp(c.rank() as u64, 3), c.clone(), DdpConfig::default())?;
            Ok(ddp.module().parameters().iter().map(|p| p.to_vec::<f64>()).collect::<Vec<_>>())
        })
        .unwrap();
    assert_eq!(out[0], out[1]);
    assert_eq!(out[0], mlp(0, 3).parameters().iter().map(|p| p.to_vec::<f64>()).collect::<Vec<_>>());
}

#[test]
fn buckets_follow_reverse_parameter_order_and_leave_frozen_parameters_out() {
    let names = ThreadGroup::new(2)
        .run(|c| {
            let m = mlp(0, 3);
            let _ = m.parameters()[1].clone().requires_grad_(false); // freeze 0.bias
            // 16 bytes per bucket: each parameter (>= 2 f64) fills one
            let ddp = DistributedDataParallel::new(
                m,
                c.clone(),
                DdpConfig { bucket_cap_mb: 16.0 / (1 << 20) as f64, first_bucket_cap_mb: 16.0 / (1 << 20) as f64, ..Default::default() },
            )?;
            let x = Tensor::<Cpu>::ones_dtype([2, 4], DType::F64);
            ddp.forward(&x).sum().backward()?;
            assert!(ddp.module().parameters()[1].grad().is_none(), "frozen: no gradient, not all-reduced");
            Ok(ddp.buckets())
        })
        .unwrap();
    assert_eq!(names[0], vec![vec!["2.bias"], vec!["2.weight"], vec!["0.weight"]]);
    let one = ThreadGroup::new(1).run(|c| Ok(DistributedDataParallel::new(mlp(0, 3), c.clone(), DdpConfig::default())?.buckets())).unwrap();
    assert_eq!(one[0], vec![vec!["2.bias", "2.weight", "0.bias", "0.weight"]], "25 MiB: one bucket");
}

/// A module that writes "between" into the log as it runs, to place the
/// gathers around it.
struct Marker(Arc<Mutex<Vec<String>>>);

impl autograd_nn::ModuleFields<Cpu> for Marker {}

impl Module<Cpu> for Marker {
    fn try_forward(&self, x: &Tensor<Cpu>) -> Result<Tensor<Cpu>> {
        self.0.lock().unwrap().push("between".into());
        x.try_relu()
    }
}

/// A communicator that logs its launches, to see them happen during backward.
struct Logged {
    inner: Arc<dyn Communicator>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    /// `inner`, logging, and the log it writes.
    fn over(inner: &Arc<autograd_dist::ThreadComm>) -> (Arc<dyn Communicator>, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        (Arc::new(Logged { inner: inner.clone(), log: log.clone() }), log)
    }
}

impl Communicator for Logged {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn backend_name(&self) -> &'static str {
        "logged"
    }
    fn all_reduce_async(&self, data: Vec<HostData>, op: CollectiveOp) -> Result<Work> {
        self.log.lock().unwrap().push(format!("launch {}", data.iter().map(HostData::len).sum::<usize>()));
        self.inner.all_reduce_async(data, op)
    }
    fn broadcast(&self, data: &mut HostData, root: usize) -> Result<()> {
        self.inner.broadcast(data, root)
    }
    fn all_gather_async(&self, data: HostData) -> Result<Work> {
        self.log.lock().unwrap().push(format!("gather {}", data.len()));
        self.inner.all_gather_async(data)
    }
    fn reduce_scatter_async(&self, data: HostData, op: CollectiveOp) -> Result<Work> {
        self.log.lock().unwrap().push(format!("scatter {}", data.len()));
        self.inner.reduce_scatter_async(data, op)
    }
    fn barrier(&self) -> Result<()> {
        self.inner.barrier()
    }
    fn abort(&self, reason: &str) {
        self.inner.abort(reason)
    }
}

#[test]
fn buckets_launch_during_backward_and_gradients_are_averaged_when_it_returns() {
    let logs = ThreadGroup::new(2)
        .run(|c| {
            let (comm, log) = Logged::over(c);
            let m = mlp(0, 3);
            let first_layer = m.parameters()[0].clone();
            let l = log.clone();
            // registered before DDP's: runs just before 0.weight's bucket launches
            let _h = first_layer.register_post_accumulate_grad_hook(move |_| l.lock().unwrap().push("0.weight ready".into()))?;
            let tiny = 16.0 / (1 << 20) as f64;
            let ddp =
                DistributedDataParallel::new(m, comm, DdpConfig { bucket_cap_mb: tiny, first_bucket_cap_mb: tiny, ..Default::default() })?;
            log.lock().unwrap().clear(); // the construction's checks
            let x = Tensor::<Cpu>::full_dtype([2, 4], c.rank() as f64 + 1.0, DType::F64);
            ddp.forward(&x).sum().backward()?;
            log.lock().unwrap().push("backward returned".into());
            let g = ddp.module().parameters()[3].grad().unwrap().to_vec::<f64>();
            Ok((log.lock().unwrap().clone(), g))
        })
        .unwrap();
    for (log, _) in &logs {
        // 2.bias (2 values) and 2.weight (6) launch before the first layer's gradient exists
        assert_eq!(log[..2], ["launch 2".to_string(), "launch 6".to_string()], "{log:?}");
        let ready = log.iter().position(|e| e == "0.weight ready").unwrap();
        assert!(ready >= 2 && log.last().unwrap() == "backward returned", "{log:?}");
    }
    // d sum / d bias2 = batch size 2 on each rank: the average is 2 too
    assert_eq!(logs[0].1, vec![2.0, 2.0]);
    assert_eq!(logs[0].1, logs[1].1);
}

#[test]
fn unused_parameters_without_find_unused_are_an_err_not_a_hang() {
    let err = within_a_minute(|| {
        ThreadGroup::new(2).run(|c| {
            let ddp = DistributedDataParallel::new(mlp(0, 3), c.clone(), DdpConfig::default())?;
            // only the last layer's bias gets a gradient: the input path is cut
            let y = ddp.try_forward(&Tensor::<Cpu>::zeros_dtype([1, 4], DType::F64))?;
            let p = ddp.module().parameters();
            let loss = if c.rank() == 0 { p[3].sum() } else { y.sum() };
            loss.backward()
        })
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("received no gradient") && err.contains("find_unused_parameters"), "{err}");
    assert!(err.contains("0.weight"), "{err}");
}

#[test]
fn compiling_a_ddp_step_is_refused_while_tracing() {
    // DDP's all-reduce is driven by tensor hooks, which a trace cannot
    // record: the traced call is an Err naming the hook, the eager first
    // call works.
    let msgs = ThreadGroup::new(2)
        .run(|c| {
            let m = fork_rng(0, || Sequential::new().add(LinearConfig::new(4, 2).with_dtype(DType::F64).init::<Traced<Cpu>>()));
            let ddp = DistributedDataParallel::new(m, c.clone(), DdpConfig::default())?;
            let mut opt = Sgd::new(ddp.parameters(), SgdConfig { lr: 0.1, ..Default::default() })?;
            let mut step = compile(|b: &[Tensor<Traced<Cpu>>]| {
                opt.zero_grad(true);
                let loss = ddp.try_forward(&b[0])?.try_sum()?;
                loss.backward()?;
                opt.step()?;
                Ok(vec![loss])
            });
            let x = Tensor::<Traced<Cpu>>::ones_dtype([3, 4], DType::F64);
            step.run(std::slice::from_ref(&x))?; // eager
            Ok(step.run(std::slice::from_ref(&x)).unwrap_err().to_string())
        })
        .unwrap();
    assert!(msgs[0].contains("tensor hook"), "{}", msgs[0]);
}

#[test]
fn a_failed_save_on_rank_0_is_an_err_on_every_rank() {
    let out = within_a_minute(|| {
        ThreadGroup::new(3)
            .run(|c| {
                let got = on_rank0(c.as_ref(), || Err(Error::msg("no space left on device")));
                c.barrier()?; // the group goes on: the failure was reported, not aborted
                Ok(got.map_err(|e| e.to_string()))
            })
            .unwrap()
    });
    for r in out {
        assert_eq!(r.unwrap_err(), "rank 0 of 3 failed: no space left on device");
    }
}

#[test]
fn a_fully_sharded_modules_own_parameters_hold_no_values_outside_its_passes() {
    use autograd_dist::{FsdpConfig, FullyShardedDataParallel};
    ThreadGroup::new(2)
        .run(|comm| {
            let unit = FullyShardedDataParallel::new(Linear::<Cpu>::new(3, 2), comm.clone(), FsdpConfig::default())?;
            // The module's own weight is freed: reading it is an Err, not a read out of bounds.
            let w = &unit.module().weight;
            assert!(w.is_storage_released() && w.try_to_vec::<f32>().is_err());
            assert!(w.try_matmul(&Tensor::ones([3, 1])).is_err());
            let y = unit.forward(&Tensor::ones([1, 3]));
            assert!(w.is_storage_released(), "freed again after forward");
            y.sum().backward()?;
            assert!(w.is_storage_released() && w.grad().is_none(), "freed after backward, its gradient sent");
            assert!(unit.parameters().iter().all(|p| p.grad().is_some()));
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_whole_state_that_does_not_fit_the_model_is_an_err_on_every_rank_and_changes_nothing() {
    use autograd_dist::{FsdpConfig, FullyShardedDataParallel};
    let out = ThreadGroup::new(2)
        .run(|comm| {
            let m = FullyShardedDataParallel::new(Linear::<Cpu>::new(4, 6), comm.clone(), FsdpConfig::default())?;
            let before = m.full_state_dict()?;
            let with = |name: &str, t: Tensor<Cpu>| {
                let mut s = before.clone();
                s.insert(name.to_string(), t);
                s
            };
            // A bias of 5 for one of 6: rank 0's 3 rows would cut from it
            // as from the right one, rank 1's would not.
            let short_bias = m.load_full_state_dict(&with("bias", Tensor::zeros([5]))).unwrap_err().to_string();
            let wide_weight = m.load_full_state_dict(&with("weight", Tensor::zeros([6, 5]))).is_err();
            let extra = m.load_full_state_dict(&with("scale", Tensor::zeros([1]))).is_err();
            let mut missing = before.clone();
            missing.remove("weight");
            let missing = m.load_full_state_dict(&missing).is_err();
            let after = m.full_state_dict()?;
            let unchanged = before.iter().all(|(k, t)| t.to_vec::<f32>() == after[k].to_vec::<f32>());
            Ok((short_bias, wide_weight, extra, missing, unchanged))
        })
        .unwrap();
    for (short_bias, wide_weight, extra, missing, unchanged) in out {
        assert!(short_bias.contains("bias") && short_bias.contains("[6]"), "{short_bias}");
        assert!(wide_weight && extra && missing && unchanged);
    }
}

#[test]
fn a_fully_sharded_unit_refuses_a_buffer_below_its_top_module() {
    use autograd_dist::{FsdpConfig, FullyShardedDataParallel};
    use autograd_nn::BatchNorm1d;
    let err = ThreadGroup::new(2)
        .run(|comm| {
            let net = Sequential::<Cpu>::new().add(Linear::new(2, 2)).add(BatchNorm1d::new(2));
            FullyShardedDataParallel::new(net, comm.clone(), FsdpConfig::default()).map(|_| ())
        })
        .unwrap_err();
    assert!(err.to_string().contains("wrap that submodule"), "{err}");
}

#[test]
fn fully_sharded_units_gather_before_each_pass_prefetch_the_next_and_scatter_during_backward() {
    use autograd_dist::{FsdpConfig, FullyShardedDataParallel};
    let logs = ThreadGroup::new(2)
        .run(|c| {
            let (comm, log) = Logged::over(c);
            let unit = |l: Linear<Cpu>| FullyShardedDataParallel::new(l, comm.clone(), FsdpConfig::default());
            let between = Marker(log.clone());
            let net = Sequential::<Cpu>::new().add(unit(Linear::new(4, 6))?).add(between).add(unit(Linear::new(6, 2))?);
            let root = FullyShardedDataParallel::new(net, comm.clone(), FsdpConfig::default())?;
            log.lock().unwrap().clear();
            root.forward(&Tensor::ones([3, 4])).sum().backward()?;
            let first_step = std::mem::take(&mut *log.lock().unwrap());
            root.forward(&Tensor::ones([3, 4])).sum().backward()?;
            let second_step = log.lock().unwrap().clone();
            let names: Vec<String> = root.named_parameters().into_iter().map(|(n, _)| n).collect();
            Ok((first_step, second_step, names))
        })
        .unwrap();
    let (log, second_step, names) = &logs[0];
    // Each rank's rows padded to ceil(rows / world) rows, plus the changed flag.
    let layer1 = ["gather 13", "gather 4"]; // 6 x 4 weight: 3 rows of 4 + 1; bias: 3 + 1
    let layer2 = ["gather 7", "gather 2"]; // 2 x 6 weight: 1 row of 6 + 1; bias: 1 + 1
    // The first forward records the units' order, so already in the first
    // backward each unit's gather is launched ahead, before the unit after
    // it computes its gradients: the first layer's gather goes out before
    // the second layer's gradients do.
    let backward: Vec<&str> = [
        &layer2[..],                  // before the second layer's backward
        &layer1,                      // prefetched for the first layer's backward
        &["scatter 12", "scatter 2"], // the second layer's gradients, sent as soon as they exist
        &["scatter 24", "scatter 6"],
    ]
    .concat();
    let first: Vec<&str> = [&layer1[..], &["between"], &layer2, &backward].concat();
    assert_eq!(log, &first);
    // From the second step on, the second layer's gather is launched as the
    // first layer's forward begins, before the module between them runs.
    let prefetched: Vec<&str> = [&layer1[..], &layer2, &["between"], &backward].concat();
    assert_eq!(second_step, &prefetched);
    assert_eq!(names, &vec!["0.weight", "0.bias", "2.weight", "2.bias"], "the unwrapped model's names");
}

#[test]
fn sharded_data_parallel_scatters_buckets_during_backward_and_frees_whole_gradients() {
    use autograd_dist::ShardedDataParallel;
    let out = ThreadGroup::new(2)
        .run(|c| {
            let (comm, log) = Logged::over(c);
            let config = DdpConfig { first_bucket_cap_mb: 1e-5, bucket_cap_mb: 1e-5, ..Default::default() }; // ~10 bytes: a bucket per parameter
            let model = ShardedDataParallel::new(mlp(0, 3), comm, config)?;
            log.lock().unwrap().clear();
            model.forward(&Tensor::ones([2, 4])).sum().backward()?;
            let whole: Vec<bool> = model.module().parameters().iter().map(|p| p.grad().is_some()).collect();
            let shards: Vec<Vec<usize>> = model.shards().iter().map(|s| s.dims().to_vec()).collect();
            Ok((log.lock().unwrap().clone(), whole, shards))
        })
        .unwrap();
    let (log, whole, shards) = &out[0];
    // Buckets of 2.bias, 2.weight, 0.bias (3 values, padded to 4), 0.weight: backward's order.
    assert_eq!(log, &vec!["scatter 2", "scatter 6", "scatter 4", "scatter 12"], "a reduce-scatter per bucket, in reverse order");
    assert_eq!(whole, &vec![false; 4], "no whole gradient is kept");
    assert_eq!(shards, &vec![vec![1], vec![3], vec![2], vec![6]], "each rank's half of each bucket");
}
