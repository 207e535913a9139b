//! The thread pool a run's kernels work in: called from inside it, a kernel splits its work
//! among the pool's threads without handing it to another thread first, which a model's many
//! small kernels (one token at a time) would otherwise pay for at every call.

use crate::error::{Error, Result};

/// A pool of one thread per core, its threads named `headroom-N`: per core of this rank's
/// share of the machine where a launcher started several ranks on it (as `torchrun` gives each
/// rank its share), unless `RAYON_NUM_THREADS` says how many.
pub fn thread_pool() -> Result<rayon::ThreadPool> {
    let mut pool = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("headroom-{i}"));
    if std::env::var_os("RAYON_NUM_THREADS").is_none()
        && let Some(ranks) = ranks_on_this_machine().filter(|&r| r > 1)
    {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        pool = pool.num_threads((cores / ranks).max(1));
    }
    pool.build()
        .map_err(|e| Error::io("the thread pool")(std::io::Error::other(e)))
}

/// How many ranks the launcher started on this machine (Open MPI's
/// `OMPI_COMM_WORLD_LOCAL_SIZE`, MPICH's `MPI_LOCALNRANKS`), if it says.
fn ranks_on_this_machine() -> Option<usize> {
    ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]
        .iter()
        .find_map(|name| std::env::var(name).ok()?.parse().ok())
}

/// Runs `f` inside a new [`thread_pool`].
pub fn in_thread_pool<R: Send>(f: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    thread_pool()?.install(f)
}
