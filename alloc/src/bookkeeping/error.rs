//! The crate's one error type.

use crate::bookkeeping::report::OomReport;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in headroom-alloc.
///
/// Every variant leaves the allocator exactly as it was before the failing call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An allocation could not be satisfied. The report says why and what to do.
    #[error("{0}")]
    OutOfMemory(Box<OomReport>),

    /// `free` was given an address that is not the start of a live allocation.
    #[error("invalid free of address {addr:#x}: {reason}")]
    InvalidFree {
        /// The address that was passed to `free`.
        addr: u64,
        /// Why the address was refused.
        reason: InvalidFreeReason,
    },

    /// A configuration value is impossible (a zero limit, a fraction outside (0, 1], ...).
    #[error("invalid allocator configuration: {0}")]
    InvalidConfig(String),

    /// A size written as text (such as `64MiB`) could not be parsed.
    #[error("invalid size {text:?}: {reason}")]
    InvalidSize {
        /// The text that was given.
        text: String,
        /// What was wrong with it.
        reason: String,
    },

    /// The memory source failed: a refused preallocation or release, or a failure that more
    /// memory would not cure ([`SourceError::fault`](crate::SourceError::fault)) while growing.
    #[error("memory source `{source_name}` failed to {op} {bytes} bytes: {message}")]
    Source {
        /// The name of the memory source.
        source_name: String,
        /// The operation that failed (`reserve`, `release`).
        op: &'static str,
        /// The size involved.
        bytes: u64,
        /// The source's own explanation.
        message: String,
    },

    /// More distinct named tags than a process can hold were created.
    #[error("too many named tags: at most {max} distinct names can be interned")]
    TooManyTags {
        /// The maximum number of named tags.
        max: usize,
    },

    /// A trace could not be read or is inconsistent.
    #[error("trace {}line {line}: {message}", path.as_ref().map_or(String::new(), |path| format!("{path} ")))]
    Trace {
        /// The trace file, when the trace came from one.
        path: Option<String>,
        /// One-based line number in the trace file, or index of the operation in a list.
        line: usize,
        /// What was wrong with the line.
        message: String,
    },

    /// A trace file holds no operation: there is nothing to replay.
    #[error(
        "trace {path} holds no allocation: there is nothing to replay (was the run that wrote \
         it refused at its start?)"
    )]
    EmptyTrace {
        /// The trace file.
        path: String,
    },

    /// A file is not a PyTorch memory snapshot that can be replayed.
    #[error("{path}: {detail}")]
    Snapshot {
        /// The file.
        path: String,
        /// What is wrong or missing, and how to record what is.
        detail: String,
    },

    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// `validate()` found a broken invariant. This is a bug in headroom-alloc.
    #[error("allocator invariant violated: {0}")]
    Corrupted(String),
}

/// Why a `free` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidFreeReason {
    /// The address starts a chunk that is already free: a double free.
    DoubleFree,
    /// The address lies inside a region but not at the start of an allocation.
    InteriorAddress,
    /// The address lies outside every region this allocator manages.
    UnknownAddress,
}

impl std::fmt::Display for InvalidFreeReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::DoubleFree => "it was already freed (double free)",
            Self::InteriorAddress => {
                "it points inside a managed region but not at the start of an allocation"
            }
            Self::UnknownAddress => "it lies outside every region this allocator manages",
        })
    }
}

impl Error {
    /// True when writing failed because the reader closed its end (`headroom-alloc generate |
    /// head`): not a failure of the command that wrote.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// The OOM report, when this error is an out-of-memory.
    pub fn oom_report(&self) -> Option<&OomReport> {
        match self {
            Self::OutOfMemory(report) => Some(report),
            _ => None,
        }
    }

    /// This error, naming the trace file `path` if it is an [`Error::Trace`] that names none.
    pub fn in_trace_file(self, path: &std::path::Path) -> Self {
        match self {
            Self::Trace {
                path: None,
                line,
                message,
            } => Self::Trace {
                path: Some(path.display().to_string()),
                line,
                message,
            },
            other => other,
        }
    }

    /// True when this error is an out-of-memory (the caller may retry with less).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Self::OutOfMemory(_))
    }
}
