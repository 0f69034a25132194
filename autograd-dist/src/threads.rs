//! An in-process group: ranks are threads of one process, and collectives
//! meet at a rendezvous in shared memory. For tests (the default test
//! suite needs no MPI) and for data parallelism on one machine.

use crate::communicator::{CollectiveOp, Communicator, Work};
use crate::host;
use crate::worker::Worker;
use autograd_core::memory::{Counters, MemoryStats, set_thread_counters, with_counters};
use autograd_core::{DistError, Error, HostData, Result};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// What every rank put in for one collective: its description and buffers.
type Round = Arc<Vec<(String, Vec<HostData>)>>;

/// The rendezvous: each collective is a round in which every rank leaves
/// its buffer and then takes everyone's.
#[derive(Default)]
struct Rendezvous {
    round: u64,
    slots: Vec<Option<(String, Vec<HostData>)>>,
    arrived: usize,
    done: Option<Round>,
    taken: usize,
    /// Why the group cannot go on (a rank failed or left), with the rank.
    failed: Option<(usize, String)>,
}

struct Shared {
    world: usize,
    state: Mutex<Rendezvous>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Rendezvous> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn wait<'a>(&self, g: MutexGuard<'a, Rendezvous>) -> MutexGuard<'a, Rendezvous> {
        self.wake.wait(g).unwrap_or_else(|e| e.into_inner())
    }
    fn fail(&self, rank: usize, why: String) {
        let mut st = self.lock();
        if st.failed.is_none() {
            st.failed = Some((rank, why));
        }
        self.wake.notify_all();
    }
    fn failure(st: &Rendezvous, what: &str) -> Error {
        let (rank, why) = st.failed.as_ref().expect("checked");
        DistError::Transport { what: what.to_string(), detail: format!("rank {rank} {why}") }.into()
    }

    /// Leaves `data` for this round (described by `kind`, which must be the
    /// same on every rank) and returns every rank's.
    fn exchange(&self, rank: usize, kind: String, data: Vec<HostData>) -> Result<Round> {
        let what = kind.clone();
        let mut st = self.lock();
        while st.done.is_some() {
            // the previous round is still being collected
            if st.failed.is_some() {
                return Err(Self::failure(&st, &what));
            }
            st = self.wait(st);
        }
        if st.failed.is_some() {
            return Err(Self::failure(&st, &what));
        }
        let round = st.round;
        st.slots[rank] = Some((kind, data));
        st.arrived += 1;
        if st.arrived == self.world {
            let all: Vec<(String, Vec<HostData>)> = st.slots.iter_mut().map(|s| s.take().expect("every rank arrived")).collect();
            st.done = Some(Arc::new(all));
            self.wake.notify_all();
        }
        loop {
            if st.round == round
                && let Some(done) = st.done.clone()
            {
                st.taken += 1;
                if st.taken == self.world {
                    st.done = None;
                    st.taken = 0;
                    st.arrived = 0;
                    st.round += 1;
                    self.wake.notify_all();
                }
                if let Some((r, (k, _))) = done.iter().enumerate().find(|(_, (k, _))| k != &done[0].0) {
                    return Err(DistError::Mismatch {
                        op: "collective",
                        detail: format!("rank 0 called {}, rank {r} called {k}", done[0].0),
                    }
                    .into());
                }
                return Ok(done);
            }
            if st.failed.is_some() {
                return Err(Self::failure(&st, &what));
            }
            st = self.wait(st);
        }
    }
}

/// One rank of a [`ThreadGroup`]: a [`Communicator`] whose collectives run
/// on its own thread (so they overlap the caller's work) and meet the other
/// ranks' in memory. Dropping it tells the others this rank has left: their
/// later collectives fail instead of waiting.
pub struct ThreadComm {
    rank: usize,
    shared: Arc<Shared>,
    counters: &'static Counters,
    worker: Worker<()>,
}

impl std::fmt::Debug for ThreadComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ThreadComm {{ rank: {}, world: {} }}", self.rank, self.shared.world)
    }
}

impl ThreadComm {
    /// The memory counters of this rank (its storage allocations, when
    /// made on its thread: [`ThreadGroup::run`] installs them).
    pub fn memory(&self) -> MemoryStats {
        self.counters.stats()
    }

    /// Runs a collective on the worker thread: exchange, then `finish` on
    /// every rank's buffers (in rank order).
    fn collective(
        &self,
        kind: String,
        data: Vec<HostData>,
        finish: impl FnOnce(&[(String, Vec<HostData>)]) -> Result<Vec<HostData>> + Send + 'static,
    ) -> Result<Work> {
        let (work, tx) = Work::channel("collective");
        let (shared, rank) = (self.shared.clone(), self.rank);
        self.worker.submit(move |_| {
            let _s = tracing::trace_span!("collective", kind = %kind, rank).entered();
            let out = shared.exchange(rank, kind, data).and_then(|all| finish(&all));
            let _ = tx.send(out);
        })?;
        Ok(work)
    }
}

impl Drop for ThreadComm {
    fn drop(&mut self) {
        self.shared.fail(self.rank, "left the group (its communicator was dropped)".into());
    }
}

/// Buffer `j` of every rank.
fn refs(all: &[(String, Vec<HostData>)], j: usize) -> Vec<&HostData> {
    all.iter().map(|(_, d)| &d[j]).collect()
}

/// The one buffer of a single-buffer collective's result.
fn single(work: Work) -> Result<HostData> {
    Ok(work.wait()?.pop().ok_or_else(|| DistError::Transport { what: "collective".into(), detail: "no result".into() })?)
}

impl Communicator for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.shared.world
    }
    fn backend_name(&self) -> &'static str {
        "threads"
    }
    fn all_reduce_async(&self, data: Vec<HostData>, op: CollectiveOp) -> Result<Work> {
        let n = data.len();
        self.collective(format!("all_reduce({op:?}, {n} buffers)"), data, move |all| {
            (0..n).map(|j| host::reduce(&refs(all, j), op, "all_reduce")).collect()
        })
    }
    fn broadcast(&self, data: &mut HostData, root: usize) -> Result<()> {
        if root >= self.world_size() {
            return Err(DistError::InvalidArgument {
                op: "broadcast",
                detail: format!("root {root} is not a rank of a group of {}", self.world_size()),
            }
            .into());
        }
        let (dtype, len, rank) = (data.dtype(), data.len(), self.rank);
        let work = self.collective(format!("broadcast(root {root})"), vec![data.clone()], move |all| {
            let got = &all[root].1[0];
            if got.dtype() != dtype || got.len() != len {
                return Err(DistError::Mismatch {
                    op: "broadcast",
                    detail: format!("rank {rank} expects {len} {dtype:?} values, root {root} sent {} {:?}", got.len(), got.dtype()),
                }
                .into());
            }
            Ok(vec![got.clone()])
        })?;
        *data = single(work)?;
        Ok(())
    }
    fn all_gather_async(&self, data: HostData) -> Result<Work> {
        self.collective("all_gather".into(), vec![data], |all| {
            let parts = refs(all, 0);
            if let Some(r) = parts.iter().position(|p| p.len() != parts[0].len()) {
                return Err(DistError::Mismatch {
                    op: "all_gather",
                    detail: format!(
                        "rank {r} sent {} values, rank 0 sent {} (use all_gather_varying for different lengths)",
                        parts[r].len(),
                        parts[0].len()
                    ),
                }
                .into());
            }
            Ok(vec![host::concat(&parts)?])
        })
    }
    fn reduce_scatter_async(&self, data: HostData, op: CollectiveOp) -> Result<Work> {
        let (world, rank) = (self.world_size(), self.rank);
        if !data.len().is_multiple_of(world) {
            return Err(DistError::InvalidArgument {
                op: "reduce_scatter",
                detail: format!("{} values do not split into {world} equal blocks", data.len()),
            }
            .into());
        }
        let n = data.len() / world;
        self.collective(format!("reduce_scatter({op:?})"), vec![data], move |all| {
            let blocks: Vec<HostData> = all.iter().map(|(_, d)| host::slice(&d[0], rank * n, n)).collect();
            Ok(vec![host::reduce(&blocks.iter().collect::<Vec<_>>(), op, "reduce_scatter")?])
        })
    }
    fn barrier(&self) -> Result<()> {
        self.collective("barrier".into(), Vec::new(), |_| Ok(Vec::new()))?.wait().map(|_| ())
    }
    fn abort(&self, reason: &str) {
        self.shared.fail(self.rank, format!("failed: {reason}"));
    }
}

/// Runs ranks as threads of this process (PyTorch's `mp.spawn` with a
/// process group, in one process). Each rank gets a [`ThreadComm`], its
/// own global random generator (seeding one rank does not move another's)
/// and its own memory counters; optionally its own rayon pool, so that
/// ranks do not share kernel threads. (Storage allocated by a kernel on
/// the process's shared rayon pool counts in the process's counters: give
/// each rank its own pool with [`ThreadGroup::threads_per_rank`] to
/// attribute everything.)
///
/// ```
/// use autograd_dist::{Communicator, CollectiveOp, ThreadGroup};
/// use autograd_core::HostData;
/// let group = ThreadGroup::new(2).threads_per_rank(1);
/// let ranks = group.run(|comm| Ok(comm.rank())).unwrap();
/// assert_eq!(ranks, vec![0, 1]);
/// // a failing rank ends the group: the others' collectives fail, nothing hangs
/// let err = group.run(|comm| {
///     if comm.rank() == 1 { return Err(autograd_core::Error::msg("out of data")); }
///     comm.barrier()
/// }).unwrap_err();
/// assert!(err.to_string().contains("rank 1") && err.to_string().contains("out of data"), "{err}");
/// ```
#[derive(Clone, Debug)]
pub struct ThreadGroup {
    world: usize,
    threads_per_rank: Option<usize>,
}

impl ThreadGroup {
    /// A group of `world` ranks (at least 1).
    pub fn new(world: usize) -> Self {
        ThreadGroup { world: world.max(1), threads_per_rank: None }
    }
    /// Gives each rank its own rayon pool of `n` threads (default: the
    /// ranks share the process's pool).
    pub fn threads_per_rank(mut self, n: usize) -> Self {
        self.threads_per_rank = Some(n.max(1));
        self
    }
    /// The communicators of a new group, one per rank, for callers that
    /// start their threads themselves (they share nothing else: no own
    /// generator or counters; see [`ThreadGroup::run`]).
    pub fn communicators(&self) -> Result<Vec<ThreadComm>> {
        let shared = Arc::new(Shared {
            world: self.world,
            state: Mutex::new(Rendezvous { slots: vec![None; self.world], ..Default::default() }),
            wake: Condvar::new(),
        });
        (0..self.world)
            .map(|rank| {
                let (worker, ()) = Worker::spawn(format!("comm-thread-rank{rank}"), || Ok(()), |_| ())?;
                Ok(ThreadComm { rank, shared: shared.clone(), counters: Counters::leak(), worker })
            })
            .collect()
    }
    /// Runs `f` on every rank, each on its own thread, and returns their
    /// results in rank order. When a rank returns `Err` or panics, the
    /// group is aborted (the others' collectives fail at once) and the
    /// first failing rank's error is returned, naming it.
    pub fn run<R: Send>(&self, f: impl Fn(&Arc<ThreadComm>) -> Result<R> + Sync) -> Result<Vec<R>> {
        let comms: Vec<Arc<ThreadComm>> = self.communicators()?.into_iter().map(Arc::new).collect();
        let shared = comms[0].shared.clone();
        let pools: Vec<Option<rayon::ThreadPool>> = comms
            .iter()
            .map(|c| {
                let counters = c.counters;
                self.threads_per_rank
                    .map(|n| {
                        rayon::ThreadPoolBuilder::new()
                            .num_threads(n)
                            .thread_name(move |i| format!("rank-worker-{i}"))
                            .start_handler(move |_| set_thread_counters(counters))
                            .build()
                            .map_err(|e| {
                                DistError::Transport {
                                    what: "ThreadGroup".into(),
                                    detail: format!("cannot build a rank's thread pool: {e}"),
                                }
                                .into()
                            })
                    })
                    .transpose()
            })
            .collect::<Result<_>>()?;
        let results: Vec<Result<R>> = std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .into_iter()
                .zip(&pools)
                .map(|(comm, pool)| {
                    let f = &f;
                    std::thread::Builder::new()
                        .name(format!("rank{}", comm.rank))
                        .spawn_scoped(s, move || {
                            let body = || {
                                with_counters(comm.counters, || {
                                    autograd_tensor::with_own_generator(|| match pool {
                                        Some(p) => p.install(|| f(&comm)),
                                        None => f(&comm),
                                    })
                                })
                            };
                            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
                                .unwrap_or_else(|p| Err(Error::msg(format!("panicked: {}", panic_message(&p)))));
                            if let Err(e) = &out {
                                comm.abort(&e.to_string());
                            }
                            out
                        })
                        .map_err(|e| {
                            DistError::Transport { what: "ThreadGroup".into(), detail: format!("cannot start a rank: {e}") }.into()
                        })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.and_then(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(DistError::Transport { what: "ThreadGroup".into(), detail: "a rank's thread panicked".into() }.into())
                        })
                    })
                })
                .collect()
        });
        if results.iter().all(|r| r.is_ok()) {
            return Ok(results.into_iter().filter_map(Result::ok).collect());
        }
        // The first failure is the cause (its own error, typed); the others'
        // errors follow from it.
        let first = shared.lock().failed.clone();
        let mut errs: Vec<(usize, Error)> = results.into_iter().enumerate().filter_map(|(r, x)| x.err().map(|e| (r, e))).collect();
        let world = self.world;
        Err(match first {
            Some((r, why)) => match errs.iter().position(|(q, _)| *q == r) {
                Some(pos) => {
                    let (rank, err) = errs.swap_remove(pos);
                    DistError::RankFailed { rank, world, cause: Box::new(err) }.into()
                }
                // The first to fail returned no error of its own (it left the
                // group): its reason, and what it did to the others.
                None => {
                    let (rank, err) = errs.swap_remove(0);
                    let why = why.strip_prefix("failed: ").unwrap_or(&why);
                    DistError::RankFailed { rank: r, world, cause: Box::new(Error::msg(format!("{why} (rank {rank}: {err})"))) }.into()
                }
            },
            None => {
                let (rank, err) = errs.swap_remove(0);
                DistError::RankFailed { rank, world, cause: Box::new(err) }.into()
            }
        })
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "a panic".into())
}
