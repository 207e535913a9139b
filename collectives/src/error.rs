//! What can go wrong in a collective.

use std::time::Duration;

/// The crate's result.
pub type Result<T> = std::result::Result<T, Error>;

/// A collective that could not run or did not complete.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The arrays or arguments do not fit the collective (sizes, dtypes, devices, ranks).
    #[error("{op}: {detail}")]
    Argument {
        /// The collective.
        op: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A device operation (a copy, an allocation) failed.
    #[error(transparent)]
    Kernels(#[from] headroom_kernels::Error),
    /// A library the backend loads at run time is missing.
    #[error("{library} is not available: {detail}")]
    NoLibrary {
        /// The library.
        library: &'static str,
        /// Where it was looked for and how to provide it.
        detail: String,
    },
    /// The backend reported a failure, on this rank or, asynchronously, from another one.
    #[error("{op} on rank {rank} of {world}: {backend} failed: {detail}")]
    Backend {
        /// The backend (NCCL).
        backend: &'static str,
        /// The collective.
        op: &'static str,
        /// This process's rank.
        rank: usize,
        /// The number of ranks.
        world: usize,
        /// The backend's message.
        detail: String,
    },
    /// An agreeing handle's collective was not run: another rank stopped its pass before it
    /// ([`SharedWorld::agreeing`](crate::SharedWorld::agreeing)).
    #[error("{op} on rank {rank} of {world} was not run: another rank stopped before it")]
    Stopped {
        /// The collective.
        op: &'static str,
        /// This process's rank.
        rank: usize,
        /// The number of ranks.
        world: usize,
    },
    /// A collective did not complete in time: another rank has stopped or is stuck. This rank
    /// takes part in no further collective (they fail at once).
    #[error(
        "{op} on rank {rank} of {world} did not complete within {waited:?}: another rank has \
         stopped or is stuck, and this rank takes part in no further collective"
    )]
    Timeout {
        /// The collective.
        op: &'static str,
        /// This process's rank.
        rank: usize,
        /// The number of ranks.
        world: usize,
        /// How long it waited.
        waited: Duration,
    },
}
