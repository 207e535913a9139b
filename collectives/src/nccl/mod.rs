//! Collectives over NCCL between CUDA devices, one rank per process and device. The
//! communicator is non-blocking, so that nothing waits without a deadline: its initialization,
//! each collective (queued on the device's own stream, in order with its kernels, then waited
//! for) and its finalization. A wait polls NCCL for errors that other ranks cause and aborts the
//! communicator past the timeout, so a rank that stops ends the others with an error naming the
//! collective and the rank instead of a hang.

mod config;
mod library;
mod progress;
mod unique_id;

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, CudaStream};
use cudarc::nccl::result::{self, NcclError, NcclStatus};
use cudarc::nccl::sys;
use headroom_kernels::{Array, DType, Device};

use crate::checks::{Chunks, chunked, reducible, root};
use crate::{Collective, Error, ReduceOp, Result};
use library::{nccl_error, require_nccl};
use progress::{Outcome, poll};
pub use unique_id::UniqueId;

/// Rank `rank` of a job of `world` ranks over NCCL, on one CUDA device.
pub struct NcclCollective {
    device: Device,
    stream: Arc<CudaStream>,
    /// The communicator; null once aborted.
    comm: sys::ncclComm_t,
    rank: usize,
    world: usize,
    timeout: Duration,
}

// SAFETY: an NCCL communicator may be used from any thread, one call at a time; every method
// that uses it takes `&mut self` (or `self`), so calls never overlap.
unsafe impl Send for NcclCollective {}

impl NcclCollective {
    /// Joins the job named by `id` as rank `rank` of `world`, on CUDA device `device`, waiting
    /// at most `timeout` for the other ranks to join and, later, for each collective
    /// ([`DEFAULT_TIMEOUT`](crate::DEFAULT_TIMEOUT) is PyTorch's).
    pub fn new(
        device: &Device,
        rank: usize,
        world: usize,
        id: &UniqueId,
        timeout: Duration,
    ) -> Result<Self> {
        const OP: &str = "NcclCollective::new";
        let stream = device
            .cuda_stream()
            .cloned()
            .ok_or_else(|| Error::Argument {
                op: OP,
                detail: format!("{device} is not a CUDA device: NCCL runs between CUDA devices"),
            })?;
        let ranks = c_int::try_from(world).ok().filter(|_| rank < world);
        let Some(ranks) = ranks else {
            return Err(Error::Argument {
                op: OP,
                detail: format!("rank {rank} is not a rank of a world of {world}"),
            });
        };
        require_nccl()?;
        bind(&stream, OP, rank, world)?;
        let start = Instant::now();
        let mut comm = std::ptr::null_mut();
        let mut config = config::non_blocking();
        // SAFETY: NCCL writes the communicator into `comm` and reads `config`, a configuration
        // as NCCL_CONFIG_INITIALIZER makes one; the id and ranks are plain values.
        unsafe {
            result::comm_init_rank_config(&mut comm, ranks, id.raw(), rank as c_int, &mut config)
        }
        .map_err(|err| nccl_error("ncclCommInitRankConfig", rank, world, err, None))?;
        let mut joined = Self {
            device: device.clone(),
            stream,
            comm,
            rank,
            world,
            timeout,
        };
        // The other ranks join while NCCL reports the initialization in progress.
        joined.settle(OP, start, |busy| Ok(!busy))?;
        Ok(joined)
    }

    /// The same rank, waiting at most `timeout` for each collective from now on.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// NCCL's type of `array`'s elements, once `array` is known to be on this rank's device.
    fn datatype(&self, op: &'static str, array: &Array) -> Result<sys::ncclDataType_t> {
        if !array.device().same(&self.device) {
            return Err(Error::Argument {
                op,
                detail: format!(
                    "an array on {}, where rank {} runs on {}",
                    array.device(),
                    self.rank,
                    self.device
                ),
            });
        }
        use sys::ncclDataType_t as N;
        Ok(match array.dtype() {
            DType::F32 => N::ncclFloat32,
            DType::F64 => N::ncclFloat64,
            DType::F16 => N::ncclFloat16,
            DType::BF16 => N::ncclBfloat16,
            DType::U32 => N::ncclUint32,
            DType::I32 => N::ncclInt32,
            DType::U8 => N::ncclUint8,
        })
    }

    /// Queues one NCCL collective (`queue`, named `call`) on the stream and waits until it has
    /// completed: first until NCCL has queued it, then until the stream has run it.
    fn run(
        &mut self,
        op: &'static str,
        call: &'static str,
        queue: impl FnOnce(
            sys::ncclComm_t,
            sys::cudaStream_t,
        ) -> std::result::Result<NcclStatus, NcclError>,
    ) -> Result<()> {
        if self.comm.is_null() {
            return Err(Error::Backend {
                backend: "NCCL",
                op,
                rank: self.rank,
                world: self.world,
                detail:
                    "the communicator was aborted after an earlier failure; the job must start \
                         again"
                        .into(),
            });
        }
        bind(&self.stream, op, self.rank, self.world)?;
        let start = Instant::now();
        let stream = self.stream.cu_stream() as sys::cudaStream_t;
        queue(self.comm, stream)
            .map_err(|err| nccl_error(call, self.rank, self.world, err, Some(self.comm)))?;
        let (rank, world) = (self.rank, self.world);
        let cuda = Arc::clone(&self.stream);
        let mut recorded: Option<CudaEvent> = None;
        self.settle(op, start, |busy| {
            if busy {
                return Ok(false);
            }
            let event = match &recorded {
                Some(event) => event,
                None => recorded.insert(
                    cuda.record_event(None)
                        .map_err(|err| cuda_error(op, rank, world, err))?,
                ),
            };
            event
                .try_is_complete()
                .map_err(|err| cuda_error(op, rank, world, err))
        })
    }

    /// Waits (from `start`, for at most the timeout) until `ready`, aborting the communicator
    /// when NCCL fails or the time runs out.
    fn settle(
        &mut self,
        op: &'static str,
        start: Instant,
        ready: impl FnMut(bool) -> Result<bool>,
    ) -> Result<()> {
        // SAFETY: `self.comm` is live: callers check it is not aborted, and only `abort`
        // clears it.
        let outcome = unsafe { poll(self.comm, start, self.timeout, ready) }?;
        let (rank, world) = (self.rank, self.world);
        let failure = match outcome {
            Outcome::Ready => return Ok(()),
            Outcome::Failed(err) => nccl_error(op, rank, world, err, Some(self.comm)),
            Outcome::TimedOut(waited) => Error::Timeout {
                op,
                rank,
                world,
                waited,
            },
        };
        self.abort();
        Err(failure)
    }

    /// Aborts the communicator: what it has queued stops, and later collectives fail.
    fn abort(&mut self) {
        if !self.comm.is_null() {
            // SAFETY: the communicator is live and is never used again. Its own failure leaves
            // nothing to undo: the communicator is gone either way.
            let _ = unsafe { result::comm_abort(self.comm) };
            self.comm = std::ptr::null_mut();
        }
    }

    /// Leaves the job: waits for NCCL to finish the communicator's work (for at most the
    /// timeout), then frees it. Dropping a rank does the same and ignores what fails.
    pub fn finish(mut self) -> Result<()> {
        self.finalize()
    }

    /// What [`NcclCollective::finish`] and `drop` do.
    fn finalize(&mut self) -> Result<()> {
        const OP: &str = "NcclCollective::finish";
        if self.comm.is_null() {
            return Ok(());
        }
        bind(&self.stream, OP, self.rank, self.world)?;
        let start = Instant::now();
        // SAFETY: the communicator is live; every collective it queued has been waited for.
        if let Err(err) = unsafe { result::comm_finalize(self.comm) } {
            let failure = nccl_error(
                "ncclCommFinalize",
                self.rank,
                self.world,
                err,
                Some(self.comm),
            );
            self.abort();
            return Err(failure);
        }
        self.settle(OP, start, |busy| Ok(!busy))?;
        // SAFETY: the communicator is finalized and never used again.
        let destroyed = unsafe { result::comm_destroy(self.comm) };
        self.comm = std::ptr::null_mut();
        destroyed
            .map(drop)
            .map_err(|err| nccl_error("ncclCommDestroy", self.rank, self.world, err, None))
    }
}

impl Drop for NcclCollective {
    fn drop(&mut self) {
        // A failure leaves nothing to undo: `finalize` aborts the communicator when it fails.
        let _ = self.finalize();
    }
}

impl Collective for NcclCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn all_reduce(&mut self, array: &mut Array, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce";
        let datatype = self.datatype(OP, array)?;
        reducible(OP, op, array.dtype())?;
        let (count, at) = (array.numel(), array.buffer_mut(OP)?.addr());
        if count == 0 {
            return Ok(());
        }
        self.run(OP, "ncclAllReduce", |comm, stream| {
            // SAFETY: `at` holds `count` elements of `datatype` on this device, written only
            // through the unique handle borrowed for the call, which waits for completion.
            unsafe {
                result::all_reduce(
                    at as *const c_void,
                    at as *mut c_void,
                    count,
                    datatype,
                    reduction(op),
                    comm,
                    stream,
                )
            }
        })
    }

    fn reduce_scatter(&mut self, input: &Array, output: &mut Array, op: ReduceOp) -> Result<()> {
        const OP: &str = "reduce_scatter";
        chunked(OP, input, output, Chunks::Input, self.world)?;
        let datatype = self.datatype(OP, input)?;
        reducible(OP, op, input.dtype())?;
        let (from, count) = (input.buffer().addr(), output.numel());
        let to = output.buffer_mut(OP)?.addr();
        if count == 0 {
            return Ok(());
        }
        self.run(OP, "ncclReduceScatter", |comm, stream| {
            // SAFETY: `from` holds world x `count` elements and `to` `count`, of `datatype` on
            // this device; the call waits for completion while both are borrowed.
            unsafe {
                result::reduce_scatter(
                    from as *const c_void,
                    to as *mut c_void,
                    count,
                    datatype,
                    reduction(op),
                    comm,
                    stream,
                )
            }
        })
    }

    fn all_gather(&mut self, input: &Array, output: &mut Array) -> Result<()> {
        const OP: &str = "all_gather";
        chunked(OP, input, output, Chunks::Output, self.world)?;
        let datatype = self.datatype(OP, input)?;
        let (from, count) = (input.buffer().addr(), input.numel());
        let to = output.buffer_mut(OP)?.addr();
        if count == 0 {
            return Ok(());
        }
        self.run(OP, "ncclAllGather", |comm, stream| {
            // SAFETY: `from` holds `count` elements and `to` world x `count`, of `datatype` on
            // this device; the call waits for completion while both are borrowed.
            unsafe {
                result::all_gather(
                    from as *const c_void,
                    to as *mut c_void,
                    count,
                    datatype,
                    comm,
                    stream,
                )
            }
        })
    }

    fn broadcast(&mut self, array: &mut Array, from: usize) -> Result<()> {
        const OP: &str = "broadcast";
        root(OP, from, self.world)?;
        let datatype = self.datatype(OP, array)?;
        let (count, at) = (array.numel(), array.buffer_mut(OP)?.addr());
        if count == 0 {
            return Ok(());
        }
        self.run(OP, "ncclBroadcast", |comm, stream| {
            // SAFETY: as in `all_reduce`; `from` is a rank of the world.
            unsafe {
                result::broadcast(
                    at as *const c_void,
                    at as *mut c_void,
                    count,
                    datatype,
                    from as c_int,
                    comm,
                    stream,
                )
            }
        })
    }

    fn barrier(&mut self) -> Result<()> {
        let mut token = Array::zeros(&self.device, [1], DType::F32)?;
        self.all_reduce(&mut token, ReduceOp::Sum)
    }
}

/// NCCL's reduction for `op`.
fn reduction(op: ReduceOp) -> sys::ncclRedOp_t {
    match op {
        ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
        ReduceOp::Avg => sys::ncclRedOp_t::ncclAvg,
        ReduceOp::Max => sys::ncclRedOp_t::ncclMax,
        ReduceOp::Min => sys::ncclRedOp_t::ncclMin,
    }
}

/// Makes the stream's context current on this thread, as NCCL's calls expect.
fn bind(stream: &CudaStream, op: &'static str, rank: usize, world: usize) -> Result<()> {
    stream
        .context()
        .bind_to_thread()
        .map_err(|err| cuda_error(op, rank, world, err))
}

/// A CUDA driver failure during `op` as an [`Error::Backend`].
fn cuda_error(
    op: &'static str,
    rank: usize,
    world: usize,
    err: cudarc::driver::DriverError,
) -> Error {
    Error::Backend {
        backend: "CUDA",
        op,
        rank,
        world,
        detail: err.to_string(),
    }
}
