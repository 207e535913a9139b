//! The thread pool a run's kernels work in: called from inside it, a kernel splits its work
//! among the pool's threads without handing it to another thread first, which a model's many
//! small kernels (one token at a time) would otherwise pay for at every call.

use crate::error::{Error, Result};

/// A pool of one thread per core, its threads named `headroom-N`.
pub fn thread_pool() -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("headroom-{i}"))
        .build()
        .map_err(|e| Error::io("the thread pool")(std::io::Error::other(e)))
}

/// Runs `f` inside a new [`thread_pool`].
pub fn in_thread_pool<R: Send>(f: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    thread_pool()?.install(f)
}
