//! The [`Communicator`] trait: what a rank can ask of its group.

use autograd_core::{DistError, HostData, Result};
use std::sync::mpsc;

/// How [`Communicator::all_reduce`] combines the ranks' values, element by
/// element (PyTorch's `ReduceOp`; named apart from
/// `autograd_core::ReduceOp`, the backend's reduction over axes).
///
/// ```
/// use autograd_dist::CollectiveOp;
/// assert_ne!(CollectiveOp::Sum, CollectiveOp::Avg);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveOp {
    /// The sum over ranks.
    Sum,
    /// The sum over ranks divided by the world size.
    Avg,
    /// The largest value.
    Max,
    /// The smallest value.
    Min,
}

/// A collective launched without waiting ([`Communicator::all_reduce_async`]),
/// PyTorch's `Work`: [`Work::wait`] blocks until it has finished on this
/// rank and gives its results, one per buffer launched.
///
/// ```
/// use autograd_dist::{Communicator, CollectiveOp, ThreadGroup};
/// use autograd_core::HostData;
/// let sums = ThreadGroup::new(2).run(|comm| {
///     let mine = vec![HostData::from(vec![comm.rank() as f32 + 1.0]), HostData::from(vec![10i64, 20])];
///     let work = comm.all_reduce_async(mine, CollectiveOp::Sum)?;
///     // ... compute something else meanwhile ...
///     work.wait()
/// }).unwrap();
/// assert_eq!(sums[1], vec![HostData::from(vec![3.0f32]), HostData::from(vec![20i64, 40])]);
/// ```
#[derive(Debug)]
pub struct Work {
    what: &'static str,
    rx: mpsc::Receiver<Result<Vec<HostData>>>,
}

impl Work {
    /// A handle and the sender that completes it.
    pub(crate) fn channel(what: &'static str) -> (Self, mpsc::Sender<Result<Vec<HostData>>>) {
        let (tx, rx) = mpsc::channel();
        (Work { what, rx }, tx)
    }
    /// Blocks until the collective has finished on this rank; its results.
    pub fn wait(self) -> Result<Vec<HostData>> {
        self.rx.recv().unwrap_or_else(|_| {
            Err(DistError::Transport {
                what: self.what.to_string(),
                detail: "the communicator shut down before the collective finished".into(),
            }
            .into())
        })
    }
}

/// A rank's view of its process group (PyTorch's `ProcessGroup`): its
/// rank, the world size and the collectives. Every rank must call the same
/// collectives in the same order with buffers of the same dtype and
/// length; a collective waits for every rank. Collectives run in the order
/// they were called on a rank, the non-blocking ones included.
///
/// Two implementations: [`ThreadGroup`](crate::ThreadGroup) (ranks are
/// threads of one process; for tests and one machine without MPI) and,
/// with the `mpi` cargo feature, `Mpi` (ranks are processes started by
/// `mpirun`, on one machine or many).
///
/// Buffers are [`HostData`]: f32, f64 and i64 reduce natively; f16 and
/// bf16 are reduced in f32 and rounded once; booleans cannot be reduced.
///
/// ```
/// use autograd_dist::{Communicator, CollectiveOp, ThreadGroup};
/// use autograd_core::HostData;
/// let out = ThreadGroup::new(3).run(|comm| {
///     let mut x = HostData::from(vec![comm.rank() as f64; 2]);
///     comm.all_reduce(&mut x, CollectiveOp::Avg)?;
///     let gathered = comm.all_gather(&HostData::from(vec![comm.rank() as i64]))?;
///     Ok((x, gathered))
/// }).unwrap();
/// assert_eq!(out[2].0, HostData::from(vec![1.0f64, 1.0]));
/// assert_eq!(out[0].1, HostData::from(vec![0i64, 1, 2]));
/// ```
pub trait Communicator: Send + Sync {
    /// This rank, in `0..world_size()`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn world_size(&self) -> usize;
    /// What carries the collectives (`"threads"`, `"mpi"`), for messages.
    fn backend_name(&self) -> &'static str;
    /// Launches an all-reduce of each buffer of `data` (PyTorch's
    /// `all_reduce_coalesced`: one launch, one wait, no copy into one flat
    /// buffer) and returns at once; the reduced buffers come from
    /// [`Work::wait`], in the same order.
    fn all_reduce_async(&self, data: Vec<HostData>, op: CollectiveOp) -> Result<Work>;
    /// Every rank gets `root`'s `data` (whose dtype and length must match).
    fn broadcast(&self, data: &mut HostData, root: usize) -> Result<()>;
    /// Launches an all-gather of `data` (every rank's of one length) and
    /// returns at once; [`Work::wait`] gives one buffer, every rank's
    /// `data` concatenated in rank order.
    fn all_gather_async(&self, data: HostData) -> Result<Work>;
    /// Launches a reduce-scatter of `data` (length `world_size() * n`) and
    /// returns at once; [`Work::wait`] gives one buffer, rank `r`'s `r`-th
    /// block of `n` elements of the reduced result.
    fn reduce_scatter_async(&self, data: HostData, op: CollectiveOp) -> Result<Work>;
    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()>;
    /// Ends the job because this rank failed: with MPI, prints `reason`
    /// and calls `MPI_Abort` (every process exits non-zero; does not
    /// return); in a thread group, every other rank's pending and later
    /// collectives fail with `reason` instead of waiting for this rank.
    fn abort(&self, reason: &str);

    /// Blocking [`Communicator::all_reduce_async`], in place.
    fn all_reduce(&self, data: &mut HostData, op: CollectiveOp) -> Result<()> {
        let taken = std::mem::replace(data, HostData::F32(Vec::new()));
        *data = self
            .all_reduce_async(vec![taken], op)?
            .wait()?
            .pop()
            .ok_or_else(|| DistError::Transport { what: "all_reduce".into(), detail: "no result".into() })?;
        Ok(())
    }
    /// Blocking [`Communicator::all_gather_async`]: every rank's `data`
    /// (all of one length), concatenated in rank order.
    fn all_gather(&self, data: &HostData) -> Result<HostData> {
        single("all_gather", self.all_gather_async(data.clone())?)
    }
    /// Blocking [`Communicator::reduce_scatter_async`]: reduces `data`
    /// (length `world_size() * n`) across ranks and gives rank `r` the
    /// `r`-th block of `n` elements of the result.
    fn reduce_scatter(&self, data: &HostData, op: CollectiveOp) -> Result<HostData> {
        single("reduce_scatter", self.reduce_scatter_async(data.clone(), op)?)
    }
}

/// `err`, a failure of this rank's own (a local load, say), with the rank
/// and the group's size named, as the other ranks' errors name theirs.
pub(crate) fn rank_failed(comm: &dyn Communicator, err: autograd_core::Error) -> autograd_core::Error {
    DistError::RankFailed { rank: comm.rank(), world: comm.world_size(), cause: Box::new(err) }.into()
}

/// The one buffer a single-buffer collective gives.
fn single(what: &str, work: Work) -> Result<HostData> {
    Ok(work.wait()?.pop().ok_or_else(|| DistError::Transport { what: what.into(), detail: "no result".into() })?)
}

/// Every rank's `data`, of any length: gathers the lengths first, then the
/// values padded to the longest. Slower than [`Communicator::all_gather`]
/// (two collectives); for metadata.
///
/// ```
/// use autograd_dist::{all_gather_varying, Communicator, ThreadGroup};
/// use autograd_core::HostData;
/// let got = ThreadGroup::new(2).run(|comm| all_gather_varying(comm.as_ref(), &HostData::from(vec![7i64; comm.rank() + 1]))).unwrap();
/// assert_eq!(got[0], vec![HostData::from(vec![7i64]), HostData::from(vec![7i64, 7])]);
/// ```
pub fn all_gather_varying(comm: &dyn Communicator, data: &HostData) -> Result<Vec<HostData>> {
    let lens = comm.all_gather(&HostData::I64(vec![data.len() as i64]))?;
    let HostData::I64(lens) = lens else { unreachable!("i64 in, i64 out") };
    let longest = lens.iter().copied().max().unwrap_or(0) as usize;
    let mut padded = data.clone();
    crate::host::pad(&mut padded, longest);
    let all = comm.all_gather(&padded)?;
    Ok(lens.iter().enumerate().map(|(r, &n)| crate::host::slice(&all, r * longest, n as usize)).collect())
}

/// `text`'s bytes as i64 values (one per byte), to send text through a collective.
pub(crate) fn text_to_host(text: &str) -> HostData {
    HostData::I64(text.bytes().map(i64::from).collect())
}

/// The text sent by [`text_to_host`].
pub(crate) fn host_to_text(data: &HostData) -> String {
    match data {
        HostData::I64(v) => String::from_utf8_lossy(&v.iter().map(|&b| b as u8).collect::<Vec<u8>>()).into_owned(),
        _ => String::new(),
    }
}
