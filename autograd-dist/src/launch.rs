//! What a training script does around the training: fail the whole job
//! when one rank fails, and save on one rank while the others wait.

use crate::communicator::{Communicator, host_to_text, text_to_host};
use autograd_core::{DistError, Error, Result};

/// Runs one rank's work; when it returns `Err`, aborts the group with the
/// error as the reason ([`Communicator::abort`]: under MPI the rank prints
/// it and every process exits non-zero; in a thread group the others'
/// collectives fail and [`ThreadGroup::run`](crate::ThreadGroup::run)
/// returns it), so that no rank waits forever for a failed one.
///
/// ```
/// use autograd_dist::{run_rank, Communicator, ThreadGroup};
/// let err = ThreadGroup::new(2).run(|comm| {
///     run_rank(comm.as_ref(), || {
///         if comm.rank() == 0 { return Err(autograd_core::Error::msg("no such file")); }
///         comm.barrier() // would wait for rank 0 forever; fails instead
///     })
/// }).unwrap_err();
/// assert!(err.to_string().contains("no such file"), "{err}");
/// ```
pub fn run_rank<T>(comm: &dyn Communicator, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let out = f();
    if let Err(e) = &out {
        comm.abort(&e.to_string());
    }
    out
}

/// Runs `save` on rank 0 only; every rank returns once it has finished, so
/// a load that follows sees the file. `Err` on every rank when rank 0's
/// save failed (with its message).
///
/// ```
/// use autograd_dist::{on_rank0, Communicator, ThreadGroup};
/// use autograd_core::Error;
/// let io = |e: std::io::Error| Error::msg(e.to_string());
/// let dir = std::env::temp_dir().join(format!("on_rank0_{}", std::process::id()));
/// let path = dir.join("weights.txt");
/// let seen = ThreadGroup::new(2).run(|comm| {
///     on_rank0(comm.as_ref(), || { std::fs::create_dir_all(&dir).map_err(io)?; std::fs::write(&path, "w").map_err(io) })?;
///     std::fs::read_to_string(&path).map_err(io) // every rank sees the file
/// }).unwrap();
/// assert_eq!(seen, vec!["w", "w"]);
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn on_rank0(comm: &dyn Communicator, save: impl FnOnce() -> Result<()>) -> Result<()> {
    let outcome = if comm.rank() == 0 { save().err().map(|e| e.to_string()) } else { None };
    // The failure message (empty: success) goes out from rank 0: its length, then its text.
    let mut len = autograd_core::HostData::I64(vec![outcome.as_ref().map_or(-1, |m| m.len() as i64)]);
    comm.broadcast(&mut len, 0)?;
    let autograd_core::HostData::I64(len) = len else { unreachable!("i64 in, i64 out") };
    if len[0] < 0 {
        return Ok(());
    }
    let mut text = match &outcome {
        Some(m) => text_to_host(m),
        None => autograd_core::HostData::I64(vec![0; len[0] as usize]),
    };
    comm.broadcast(&mut text, 0)?;
    Err(DistError::RankFailed { rank: 0, world: comm.world_size(), cause: Box::new(Error::msg(host_to_text(&text))) }.into())
}
