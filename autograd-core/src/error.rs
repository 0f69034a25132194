//! The one error type of the workspace.
//!
//! Every message names the operation, the shapes or dtypes involved and, where
//! there is one, what the caller can do about it. Shape errors raised through a
//! `try_` method also carry the caller's source location.

use crate::{DType, Shape};
use std::panic::Location;

/// Everything fallible in the workspace returns this error.
///
/// ```
/// use autograd_core::{Error, Shape};
/// let e = Error::shape_mismatch("add", &Shape::from([2, 3]), &Shape::from([4]), None);
/// assert!(e.to_string().contains("[2, 3]"));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Two operands whose shapes cannot be combined by the op.
    #[error("{op}: shape mismatch between {lhs:?} and {rhs:?}{}", at(location))]
    ShapeMismatch {
        /// The op that failed.
        op: &'static str,
        /// Left operand's dims.
        lhs: Vec<usize>,
        /// Right operand's dims.
        rhs: Vec<usize>,
        /// Where the op was called, when known.
        location: Option<&'static Location<'static>>,
    },
    /// A shape argument is invalid for the op (bad reshape, bad expand, ...).
    #[error("{op}: {msg}{}", at(location))]
    InvalidShape {
        /// The op that failed.
        op: &'static str,
        /// What is wrong and what to do.
        msg: String,
        /// Where the op was called, when known.
        location: Option<&'static Location<'static>>,
    },
    /// A dimension index outside `-rank..rank`.
    #[error("{op}: dimension {dim} is out of range for a tensor of rank {rank} (expected a dim in [{}, {}]){}", -(*rank as i64).max(1), (*rank as i64).max(1) - 1, at(location))]
    DimOutOfRange {
        /// The op that failed.
        op: &'static str,
        /// The dimension asked for.
        dim: isize,
        /// The tensor's rank.
        rank: usize,
        /// Where the op was called, when known.
        location: Option<&'static Location<'static>>,
    },
    /// An index outside the size of a dimension.
    #[error("{op}: index {index} is out of range for dimension {dim} of size {size}{}", at(location))]
    IndexOutOfRange {
        /// The op that failed.
        op: &'static str,
        /// The offending index.
        index: i64,
        /// The dimension indexed.
        dim: usize,
        /// Its size.
        size: usize,
        /// Where the op was called, when known.
        location: Option<&'static Location<'static>>,
    },
    /// The op does not support this dtype.
    #[error("{op}: unsupported dtype {dtype:?}; {hint}")]
    UnsupportedDType {
        /// The op that failed.
        op: &'static str,
        /// The dtype it got.
        dtype: DType,
        /// What to do instead.
        hint: &'static str,
    },
    /// Operands of different dtypes where one dtype is required.
    #[error("{op}: dtype mismatch between {lhs:?} and {rhs:?}; convert one with to_dtype()")]
    DTypeMismatch {
        /// The op that failed.
        op: &'static str,
        /// Left dtype.
        lhs: DType,
        /// Right dtype.
        rhs: DType,
    },
    /// An allocation that cannot succeed: more bytes than `isize::MAX` or
    /// than this machine's physical memory, or one the allocator refused.
    #[error("{op}: cannot allocate {bytes} bytes for {numel} elements of {dtype_bytes} bytes ({why}){}", at(location))]
    OutOfMemory {
        /// The op that needed the memory.
        op: &'static str,
        /// Bytes requested (wide enough to hold an overflowing product).
        bytes: u128,
        /// Elements requested.
        numel: u128,
        /// Bytes per element.
        dtype_bytes: usize,
        /// Which limit it ran into.
        why: String,
        /// Where the op was called, when known.
        location: Option<&'static Location<'static>>,
    },
    /// Misuse of the autograd protocol (second backward through a freed graph,
    /// implicit gradient of a non-scalar, ...).
    #[error("{0}")]
    Autograd(String),
    /// I/O error, with the path or operation it came from.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Malformed or mismatched file contents (safetensors, JSON, ...).
    #[error("{0}")]
    Format(String),
    /// Anything else, with a message that says what and why.
    #[error("{0}")]
    Msg(String),
    /// A collective, a process group or data-parallel training failed
    /// (`autograd-dist`); match on the [`DistError`] for what went wrong.
    #[error("{0}")]
    Distributed(DistError),
}

fn at(location: &Option<&'static Location<'static>>) -> String {
    match location {
        Some(l) => format!(" (called at {}:{}:{})", l.file(), l.line(), l.column()),
        None => String::new(),
    }
}

impl Error {
    /// A shape mismatch between two operands of `op`.
    pub fn shape_mismatch(op: &'static str, lhs: &Shape, rhs: &Shape, location: Option<&'static Location<'static>>) -> Self {
        Error::ShapeMismatch { op, lhs: lhs.dims().to_vec(), rhs: rhs.dims().to_vec(), location }
    }

    /// An invalid shape argument.
    pub fn invalid_shape(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidShape { op, msg: msg.into(), location: None }
    }

    /// Attach the caller's location to errors that can carry one and have none yet.
    pub fn at(mut self, loc: &'static Location<'static>) -> Self {
        if let Error::ShapeMismatch { location, .. }
        | Error::InvalidShape { location, .. }
        | Error::DimOutOfRange { location, .. }
        | Error::IndexOutOfRange { location, .. }
        | Error::OutOfMemory { location, .. } = &mut self
        {
            location.get_or_insert(loc);
        }
        self
    }

    /// The same error reported for the user-facing `op` (an index error
    /// raised by the `gather` kernel under `index_select` or `embedding`),
    /// with the caller's location attached.
    pub fn renamed(self, op: &'static str, loc: &'static Location<'static>) -> Self {
        match self {
            Error::IndexOutOfRange { index, dim, size, .. } => Error::IndexOutOfRange { op, index, dim, size, location: Some(loc) },
            e => e.at(loc),
        }
    }

    /// A free-form error.
    pub fn msg(msg: impl Into<String>) -> Self {
        Error::Msg(msg.into())
    }
}

/// What went wrong in a collective, a process group or data-parallel
/// training (`autograd-dist`), as data to match on.
///
/// ```
/// use autograd_core::{DistError, Error};
/// let e = Error::from(DistError::RankFailed { rank: 1, world: 2, cause: Box::new(Error::msg("out of data")) });
/// assert!(matches!(e, Error::Distributed(DistError::RankFailed { rank: 1, .. })));
/// assert_eq!(e.to_string(), "rank 1 of 2 failed: out of data");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// A rank's work failed (an error or a panic); the others stopped.
    #[error("rank {rank} of {world} failed: {cause}")]
    RankFailed {
        /// The rank that failed first.
        rank: usize,
        /// The group's size.
        world: usize,
        /// Its error (match on it in turn: a rank's own `Err`, or a
        /// collective's).
        cause: Box<Error>,
    },
    /// The ranks disagree: different collectives in one round, buffers of
    /// different dtypes or lengths, models that differ.
    #[error("{op}: the ranks disagree: {detail}")]
    Mismatch {
        /// The collective or the check.
        op: &'static str,
        /// What differs.
        detail: String,
    },
    /// An argument no group can take (a root outside the group, values that
    /// do not split into equal blocks, booleans to reduce, a bucket cap of 0).
    #[error("{op}: {detail}")]
    InvalidArgument {
        /// The collective or the constructor.
        op: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The communicator's thread or the transport stopped, or could not start.
    #[error("{what}: {detail}")]
    Transport {
        /// The communicator or the call.
        what: String,
        /// What happened.
        detail: String,
    },
    /// Data-parallel bookkeeping found a gradient twice or missing.
    #[error("DistributedDataParallel: {detail}")]
    Gradients {
        /// Which parameters and what to do.
        detail: String,
    },
}

impl From<DistError> for Error {
    fn from(e: DistError) -> Self {
        Error::Distributed(e)
    }
}

/// The workspace's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// The workspace's one rule for what may fail: `try_x` returns a
/// [`Result`], `x` panics at the caller's line with the same error. Every
/// panicking twin is `try_x(..).or_panic()` under `#[track_caller]`.
///
/// ```
/// use autograd_core::{Error, Result, ResultExt};
/// #[track_caller]
/// fn half(x: u32) -> u32 { try_half(x).or_panic() }
/// fn try_half(x: u32) -> Result<u32> { if x % 2 == 0 { Ok(x / 2) } else { Err(Error::msg("odd")) } }
/// assert_eq!(half(4), 2);
/// assert!(std::panic::catch_unwind(|| half(3)).is_err());
/// ```
pub trait ResultExt<T> {
    /// The value, or a panic with the error's message at the caller's line.
    #[track_caller]
    fn or_panic(self) -> T;
}

impl<T> ResultExt<T> for Result<T> {
    #[track_caller]
    fn or_panic(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }
}
