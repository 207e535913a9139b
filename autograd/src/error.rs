//! The crate's one error type.

use headroom_alloc::OomReport;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while recording or differentiating.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A kernel failed: bad operands, or out of memory with the allocator's report intact.
    #[error(transparent)]
    Kernel(#[from] headroom_kernels::Error),

    /// A collective among the ranks a parameter is sharded over failed.
    #[error(transparent)]
    Collective(#[from] headroom_collectives::Error),

    /// `gradient` was called twice on one tape; a tape releases what it saved as it runs.
    #[error("gradient: this tape has already computed gradients; record a new tape for each pass")]
    TapeUsed,

    /// The target of `gradient` was not computed on this tape from anything it watched.
    #[error(
        "gradient: the target was not recorded on this tape (compute it while the tape records, \
         from a variable or a watched tensor)"
    )]
    NotRecorded,

    /// An argument is out of its range or inconsistent.
    #[error("{op}: {detail}")]
    Argument {
        /// The op.
        op: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl Error {
    /// The allocator's report, when this is an out-of-memory.
    pub fn oom_report(&self) -> Option<&OomReport> {
        match self {
            Self::Kernel(err) => err.oom_report(),
            Self::Collective(headroom_collectives::Error::Kernels(err)) => err.oom_report(),
            _ => None,
        }
    }

    /// True when this is an out-of-memory: drop what the step holds and retry with less.
    pub fn is_out_of_memory(&self) -> bool {
        self.oom_report().is_some()
    }
}
