//! MPI ranks (the `mpi` cargo feature): processes started by `mpirun`, on
//! one machine or across a cluster, talking through the MPI library
//! (OpenMPI, MPICH) via the `mpi` crate.

use crate::communicator::{CollectiveOp, Communicator, Work};
use crate::host;
use crate::worker::Worker;
use autograd_core::{DistError, HostData, Result};
use half::{bf16, f16};
use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, CommunicatorCollectives, Root};

/// MPI's state, on the communicator's thread (which initialises MPI and,
/// when the communicator is dropped, finalises it).
struct State {
    _universe: Universe,
    world: SimpleCommunicator,
    spare: Spare,
}

/// Send buffers of finished all-reduces, kept to receive later all-reduces
/// of the same length: DDP all-reduces the same bucket sizes every step,
/// and a fresh multi-megabyte output would be page-faulted in each time
/// (that cost about as much as the all-reduce itself here).
#[derive(Default)]
struct Spare {
    f32: Vec<Vec<f32>>,
    f64: Vec<Vec<f64>>,
    i64: Vec<Vec<i64>>,
}

/// The spare list of one element type.
trait Pooled: Sized + Copy + Default + mpi::datatype::Equivalence {
    fn list(s: &mut Spare) -> &mut Vec<Vec<Self>>;
}
impl Pooled for f32 {
    fn list(s: &mut Spare) -> &mut Vec<Vec<Self>> {
        &mut s.f32
    }
}
impl Pooled for f64 {
    fn list(s: &mut Spare) -> &mut Vec<Vec<Self>> {
        &mut s.f64
    }
}
impl Pooled for i64 {
    fn list(s: &mut Spare) -> &mut Vec<Vec<Self>> {
        &mut s.i64
    }
}

/// Spare buffers kept per element type.
const SPARE: usize = 8;

impl Spare {
    /// A vector of `n` elements (old values: the caller overwrites them all).
    fn take<T: Pooled>(&mut self, n: usize) -> Vec<T> {
        let list = T::list(self);
        match list.iter().position(|v| v.len() == n) {
            Some(i) => list.swap_remove(i),
            None => vec![T::default(); n],
        }
    }
    fn give<T: Pooled>(&mut self, v: Vec<T>) {
        let list = T::list(self);
        if list.len() >= SPARE {
            list.remove(0);
        }
        list.push(v);
    }
}

/// The MPI world as a [`Communicator`]: rank and size from `mpirun`, the
/// collectives MPI's (`MPI_Allreduce`, `MPI_Bcast`, `MPI_Allgather`,
/// `MPI_Reduce_scatter_block`, `MPI_Barrier`), issued from one thread of
/// this communicator's in the order they were called, so a non-blocking
/// all-reduce overlaps the caller's work. One per process.
///
/// ```no_run
/// use autograd_dist::{Communicator, Mpi, CollectiveOp};
/// use autograd_core::HostData;
/// // mpirun -n 2 target/release/examples/...
/// let comm = Mpi::init().unwrap();
/// let mut x = HostData::from(vec![comm.rank() as f32]);
/// comm.all_reduce(&mut x, CollectiveOp::Sum).unwrap();
/// ```
pub struct Mpi {
    rank: usize,
    world: usize,
    worker: Worker<State>,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mpi {{ rank: {}, world: {} }}", self.rank, self.world)
    }
}

impl Mpi {
    /// Initialises MPI (once per process; `Err` the second time or when
    /// MPI cannot start) and returns this process's rank of the world.
    pub fn init() -> Result<Self> {
        let (worker, (rank, world)) = Worker::spawn(
            "mpi-comm".into(),
            || {
                let (universe, _threading) = mpi::initialize_with_threading(mpi::Threading::Multiple).ok_or_else(|| {
                    DistError::Transport { what: "Mpi::init".into(), detail: "MPI is already initialised in this process".into() }
                })?;
                lower_priority();
                let world = universe.world();
                Ok(State { _universe: universe, world, spare: Spare::default() })
            },
            |s: &State| (s.world.rank() as usize, s.world.size() as usize),
        )?;
        Ok(Mpi { rank, world, worker })
    }

    /// Runs `f` with the MPI world on the communicator's thread, after the
    /// collectives queued before it, and returns its result: for MPI calls
    /// this trait does not wrap (the `rsmpi` re-export names their types).
    /// Every rank must make the same calls in the same order.
    ///
    /// ```no_run
    /// use autograd_dist::{Mpi, rsmpi::traits::CommunicatorCollectives};
    /// let comm = Mpi::init().unwrap();
    /// comm.with_raw(|world| world.barrier()).unwrap();
    /// ```
    pub fn with_raw<R: Send + 'static>(&self, f: impl FnOnce(&SimpleCommunicator) -> R + Send + 'static) -> Result<R> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.worker.submit(move |s| {
            let _ = tx.send(f(&s.world));
        })?;
        rx.recv()
            .map_err(|_| DistError::Transport { what: "Mpi::with_raw".into(), detail: "the communicator's thread stopped".into() }.into())
    }

    fn run(&self, f: impl FnOnce(&SimpleCommunicator) -> Result<Vec<HostData>> + Send + 'static) -> Result<Work> {
        let (work, tx) = Work::channel("mpi collective");
        self.worker.submit(move |s| {
            let _ = tx.send(f(&s.world));
        })?;
        Ok(work)
    }

    /// A single-buffer collective, waited for.
    fn run_one(&self, f: impl FnOnce(&SimpleCommunicator) -> Result<HostData> + Send + 'static) -> Result<HostData> {
        self.run_one_async(f)?
            .wait()?
            .pop()
            .ok_or_else(|| DistError::Transport { what: "mpi collective".into(), detail: "no result".into() }.into())
    }

    /// A single-buffer collective, launched.
    fn run_one_async(&self, f: impl FnOnce(&SimpleCommunicator) -> Result<HostData> + Send + 'static) -> Result<Work> {
        self.run(move |w| f(w).map(|d| vec![d]))
    }
}

fn op_of(op: CollectiveOp) -> SystemOperation {
    match op {
        CollectiveOp::Sum | CollectiveOp::Avg => SystemOperation::sum(),
        CollectiveOp::Max => SystemOperation::max(),
        CollectiveOp::Min => SystemOperation::min(),
    }
}

/// f16/bf16 as their bits (MPI moves them as u16 without reducing them).
fn bits(data: &HostData) -> Option<Vec<u16>> {
    match data {
        HostData::F16(v) => Some(v.iter().map(|x| x.to_bits()).collect()),
        HostData::BF16(v) => Some(v.iter().map(|x| x.to_bits()).collect()),
        _ => None,
    }
}

fn from_bits(v: Vec<u16>, like: &HostData) -> HostData {
    match like {
        HostData::F16(_) => HostData::F16(v.into_iter().map(f16::from_bits).collect()),
        _ => HostData::BF16(v.into_iter().map(bf16::from_bits).collect()),
    }
}

/// `MPI_Allreduce` of `send` into a buffer from `spare` (`send` goes back
/// to it). Blocking: MPI busy-polls until every rank has joined, but on
/// this communicator's thread, which runs at the lowest priority
/// ([`lower_priority`]), so the polling takes only cores the rank's
/// compute leaves idle.
fn all_reduce_into_spare<T: Pooled>(s: &mut State, send: Vec<T>, op: SystemOperation) -> Vec<T> {
    let mut out: Vec<T> = s.spare.take(send.len());
    s.world.all_reduce_into(&send[..], &mut out[..], op);
    s.spare.give(send);
    out
}

/// Makes the calling thread (the communicator's) the last to get a core
/// (nice 19): a collective waiting for a slower rank busy-polls inside
/// MPI, and on a machine with as many cores as ranks that polling took the
/// core from this rank's own backward, which the collective is meant to
/// overlap (backward with the overlapped all-reduce: 1.6-1.8x of backward
/// alone at nice 19, 1.9-2.1x polling `MPI_Test` with short sleeps, 2.4x
/// with `sched_yield` between tests; `benches/README.md`).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority on this thread's own id; no memory is touched.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
    }
}

/// All-reduce on `w`; the average divides the sum by the world size.
fn all_reduce(s: &mut State, data: HostData, op: CollectiveOp) -> Result<HostData> {
    let n = s.world.size();
    macro_rules! native {
        ($v:expr, $var:ident, $t:ty) => {{
            let mut out: Vec<$t> = all_reduce_into_spare(s, $v, op_of(op));
            if op == CollectiveOp::Avg {
                out.iter_mut().for_each(|x| *x /= n as $t);
            }
            HostData::$var(out)
        }};
    }
    let dtype = data.dtype();
    Ok(match data {
        HostData::F32(v) => native!(v, F32, f32),
        HostData::F64(v) => native!(v, F64, f64),
        HostData::I64(v) => native!(v, I64, i64),
        HostData::F16(_) | HostData::BF16(_) => {
            let HostData::F32(wide) = all_reduce(s, HostData::F32(host::widen(&data)), op)? else { unreachable!() };
            host::narrow(&wide, dtype)
        }
        HostData::Bool(_) => {
            return Err(DistError::InvalidArgument { op: "all_reduce", detail: "boolean buffers cannot be reduced".into() }.into());
        }
    })
}

impl Communicator for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn backend_name(&self) -> &'static str {
        "mpi"
    }
    fn all_reduce_async(&self, data: Vec<HostData>, op: CollectiveOp) -> Result<Work> {
        let (work, tx) = Work::channel("mpi all_reduce");
        self.worker.submit(move |s| {
            let _ = tx.send(data.into_iter().map(|d| all_reduce(s, d, op)).collect());
        })?;
        Ok(work)
    }
    fn broadcast(&self, data: &mut HostData, root: usize) -> Result<()> {
        if root >= self.world {
            return Err(DistError::InvalidArgument {
                op: "broadcast",
                detail: format!("root {root} is not a rank of a world of {}", self.world),
            }
            .into());
        }
        let mine = std::mem::replace(data, HostData::F32(Vec::new()));
        *data = self.run_one(move |w| {
            let p = w.process_at_rank(root as i32);
            Ok(match mine {
                HostData::F32(mut v) => {
                    p.broadcast_into(&mut v[..]);
                    HostData::F32(v)
                }
                HostData::F64(mut v) => {
                    p.broadcast_into(&mut v[..]);
                    HostData::F64(v)
                }
                HostData::I64(mut v) => {
                    p.broadcast_into(&mut v[..]);
                    HostData::I64(v)
                }
                HostData::Bool(v) => {
                    let mut b: Vec<u8> = v.iter().map(|&x| x as u8).collect();
                    p.broadcast_into(&mut b[..]);
                    HostData::Bool(b.into_iter().map(|x| x != 0).collect())
                }
                other => {
                    let mut b = bits(&other).expect("f16 or bf16");
                    p.broadcast_into(&mut b[..]);
                    from_bits(b, &other)
                }
            })
        })?;
        Ok(())
    }
    fn all_gather_async(&self, data: HostData) -> Result<Work> {
        let (mine, n) = (data, self.world);
        self.run_one_async(move |w| {
            macro_rules! gather {
                ($v:expr, $t:ty) => {{
                    let mut out: Vec<$t> = vec![Default::default(); $v.len() * n];
                    w.all_gather_into(&$v[..], &mut out[..]);
                    out
                }};
            }
            Ok(match &mine {
                HostData::F32(v) => HostData::F32(gather!(v, f32)),
                HostData::F64(v) => HostData::F64(gather!(v, f64)),
                HostData::I64(v) => HostData::I64(gather!(v, i64)),
                HostData::Bool(v) => {
                    let b: Vec<u8> = v.iter().map(|&x| x as u8).collect();
                    HostData::Bool(gather!(b, u8).into_iter().map(|x| x != 0).collect())
                }
                other => {
                    let b = bits(other).expect("f16 or bf16");
                    from_bits(gather!(b, u16), other)
                }
            })
        })
    }
    fn reduce_scatter_async(&self, data: HostData, op: CollectiveOp) -> Result<Work> {
        if !data.len().is_multiple_of(self.world) {
            return Err(DistError::InvalidArgument {
                op: "reduce_scatter",
                detail: format!("{} values do not split into {} equal blocks", data.len(), self.world),
            }
            .into());
        }
        let (mine, n) = (data, self.world);
        self.run_one_async(move |w| {
            macro_rules! scatter {
                ($v:expr, $var:ident, $t:ty) => {{
                    let mut out: Vec<$t> = vec![Default::default(); $v.len() / n];
                    w.reduce_scatter_block_into(&$v[..], &mut out[..], op_of(op));
                    if op == CollectiveOp::Avg {
                        out.iter_mut().for_each(|x| *x /= n as $t);
                    }
                    HostData::$var(out)
                }};
            }
            Ok(match &mine {
                HostData::F32(v) => scatter!(v, F32, f32),
                HostData::F64(v) => scatter!(v, F64, f64),
                HostData::I64(v) => scatter!(v, I64, i64),
                HostData::F16(_) | HostData::BF16(_) => {
                    let wide = host::widen(&mine);
                    let HostData::F32(out) = scatter!(wide, F32, f32) else { unreachable!() };
                    host::narrow(&out, mine.dtype())
                }
                HostData::Bool(_) => {
                    return Err(
                        DistError::InvalidArgument { op: "reduce_scatter", detail: "boolean buffers cannot be reduced".into() }.into()
                    );
                }
            })
        })
    }
    fn barrier(&self) -> Result<()> {
        self.run(|w| {
            w.barrier();
            Ok(Vec::new())
        })?
        .wait()
        .map(|_| ())
    }
    fn abort(&self, reason: &str) {
        eprintln!("rank {} of {} failed: {reason}; calling MPI_Abort", self.rank, self.world);
        // Called from this thread, not the communicator's, which may be
        // blocked in a collective that a failed rank will never join:
        // MPI_Abort ends every process of the job (Threading::Multiple
        // was requested for this).
        // SAFETY: MPI was initialised by `Mpi::init` (this value exists) and
        // is not finalised while `self` lives; MPI_Abort takes no pointers.
        unsafe {
            mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 1);
        }
        std::process::exit(1);
    }
}
