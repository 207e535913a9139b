//! Collectives over MPI between CPU processes, one rank per process, ranks and world size from
//! the launcher (`mpirun -n N`; a process started alone is a world of one). Each collective is
//! MPI's non-blocking form, polled until it completes or the timeout passes. MPI cannot cancel a
//! collective, so past the timeout the rank keeps the collective's buffers alive (they leak),
//! returns [`Error::Timeout`] and refuses later collectives; it then leaves MPI unfinalized, so
//! that the launcher ends the other ranks when this process exits.

mod datatype;

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use headroom_kernels::{Array, Device, DeviceKind};
use mpi::environment::Universe;
use mpi::ffi;
use mpi::traits::Communicator;

use crate::checks::{Chunks, chunked, reducible, root};
use crate::{Collective, Error, ReduceOp, Result};
use datatype::{datatype, widened};

/// This process's rank of an MPI job, on a CPU device.
pub struct MpiCollective {
    /// MPI itself, finalized on drop; `None` once a collective was left pending.
    universe: Option<Universe>,
    device: Device,
    rank: usize,
    world: usize,
    timeout: Duration,
}

impl MpiCollective {
    /// Initializes MPI in this process and joins its job on CPU device `device`, waiting at
    /// most `timeout` for each collective. A process holds one at a time.
    pub fn init(device: &Device, timeout: Duration) -> Result<Self> {
        const OP: &str = "MpiCollective::init";
        if device.kind() != DeviceKind::Cpu {
            return Err(Error::Argument {
                op: OP,
                detail: format!(
                    "{device} is not a CPU device: MPI runs between CPU processes (NCCL between \
                     CUDA devices)"
                ),
            });
        }
        let universe = mpi::initialize().ok_or_else(|| Error::Argument {
            op: OP,
            detail: "MPI was initialized in this process already: a process holds one \
                     MpiCollective"
                .into(),
        })?;
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(Self {
            universe: Some(universe),
            device: device.clone(),
            rank,
            world: size,
            timeout,
        })
    }

    /// The number of elements of `array` as MPI counts them, once `array` is known to be on
    /// this rank's device.
    fn count(&self, op: &'static str, array: &Array) -> Result<c_int> {
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
        c_int::try_from(array.numel()).map_err(|_| Error::Argument {
            op,
            detail: format!(
                "{} elements: MPI counts in 32 bits, so an array holds at most {} elements",
                array.numel(),
                c_int::MAX
            ),
        })
    }

    /// Starts one MPI call (`start`, which fills in its request) and waits for it. `arrays` and
    /// `host` are the buffers it reads or writes: past the timeout they are kept alive for good,
    /// since MPI may still use them; once it completes, `host` is handed back.
    fn run<H>(
        &mut self,
        op: &'static str,
        arrays: &[&Array],
        host: H,
        start: impl FnOnce(*mut ffi::MPI_Request) -> c_int,
    ) -> Result<H> {
        let (rank, world) = (self.rank, self.world);
        if self.universe.is_none() {
            return Err(Error::Backend {
                backend: "MPI",
                op,
                rank,
                world,
                detail: "an earlier collective timed out and is still pending; the job must \
                         start again"
                    .into(),
            });
        }
        let failed = |call: &str, code: c_int| Error::Backend {
            backend: "MPI",
            op,
            rank,
            world,
            detail: format!("{call} returned error code {code}"),
        };
        let mut request = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
        let code = start(request.as_mut_ptr());
        if code != 0 {
            return Err(failed("starting the collective", code));
        }
        // SAFETY: the call succeeded, so it wrote its request.
        let mut request = unsafe { request.assume_init() };
        let began = Instant::now();
        loop {
            let mut done: c_int = 0;
            // SAFETY: `request` is the pending request of this collective; the status is
            // ignored.
            let code = unsafe { ffi::MPI_Test(&mut request, &mut done, ffi::RSMPI_STATUS_IGNORE) };
            if code != 0 {
                return Err(failed("MPI_Test", code));
            }
            if done != 0 {
                return Ok(host);
            }
            let waited = began.elapsed();
            if waited >= self.timeout {
                for array in arrays {
                    std::mem::forget((*array).clone());
                }
                std::mem::forget(host);
                std::mem::forget(self.universe.take());
                return Err(Error::Timeout {
                    op,
                    rank,
                    world,
                    waited,
                });
            }
            if waited < Duration::from_millis(1) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// `sent`, the input's elements as f64, reduced by `reduction` into `output` (of `count`
    /// elements) in host memory, then written into it: how 16-bit floats, which MPI cannot
    /// reduce, and means (a sum, divided here) are reduced, with one rounding at the end.
    fn reduce_as_f64(
        &mut self,
        reduction: Reduction,
        sent: Vec<f64>,
        output: &mut Array,
        count: c_int,
        op: ReduceOp,
    ) -> Result<()> {
        let mut result = vec![0.0f64; output.numel()];
        let (from, to) = (sent.as_ptr().cast_mut().cast(), result.as_mut_ptr().cast());
        // SAFETY: `sent` holds the input's elements (`count`, or world x `count` for a
        // reduce-scatter, as the caller checked) and `result` `count`, as f64, in distinct host
        // buffers handed over to keep.
        let (_, mut result) = unsafe {
            self.reduce_raw(
                reduction,
                &[],
                (sent, result),
                (from, to, count),
                ffi::RSMPI_DOUBLE,
                op,
            )?
        };
        if op == ReduceOp::Avg {
            let ranks = self.world as f64;
            result.iter_mut().for_each(|v| *v /= ranks);
        }
        Ok(output.write_f64(&result)?)
    }

    /// The reduction `reduction` of `count` elements of `dtype` at `to` (world x `count` at
    /// `from` for a reduce-scatter, `count` for an all-reduce), waited for by
    /// [`run`](Self::run), which keeps `arrays` and `host` alive past a timeout and hands `host`
    /// back.
    ///
    /// # Safety
    ///
    /// `from` and `to` hold that many elements of `dtype`, in distinct buffers that `arrays`
    /// and `host` own.
    unsafe fn reduce_raw<H>(
        &mut self,
        reduction: Reduction,
        arrays: &[&Array],
        host: H,
        (from, to, count): (*mut c_void, *mut c_void, c_int),
        dtype: ffi::MPI_Datatype,
        op: ReduceOp,
    ) -> Result<H> {
        let (name, start): (_, ReductionStart) = match reduction {
            Reduction::AllReduce => ("all_reduce", ffi::MPI_Iallreduce),
            Reduction::ReduceScatter => ("reduce_scatter", ffi::MPI_Ireduce_scatter_block),
        };
        self.run(name, arrays, host, |request| {
            // SAFETY: the caller vouches for the buffers; `run` keeps them alive until the
            // request completes (or for good, past the timeout).
            unsafe {
                start(
                    from,
                    to,
                    count,
                    dtype,
                    mpi_op(op),
                    ffi::RSMPI_COMM_WORLD,
                    request,
                )
            }
        })
    }
}

/// The reductions, which MPI starts with the same arguments.
#[derive(Debug, Clone, Copy)]
enum Reduction {
    AllReduce,
    ReduceScatter,
}

/// `MPI_Iallreduce`'s and `MPI_Ireduce_scatter_block`'s signature.
type ReductionStart = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    c_int,
    ffi::MPI_Datatype,
    ffi::MPI_Op,
    ffi::MPI_Comm,
    *mut ffi::MPI_Request,
) -> c_int;

/// MPI's reduction for `op` (the mean is a sum, divided afterwards).
fn mpi_op(op: ReduceOp) -> ffi::MPI_Op {
    // SAFETY: the `RSMPI_*` handles are constants the MPI library defines.
    unsafe {
        match op {
            ReduceOp::Sum | ReduceOp::Avg => ffi::RSMPI_SUM,
            ReduceOp::Max => ffi::RSMPI_MAX,
            ReduceOp::Min => ffi::RSMPI_MIN,
        }
    }
}

/// A copy of `array`'s elements in host memory, in words aligned for any element type.
fn host_copy(array: &Array) -> Result<Vec<u64>> {
    let bytes = array.to_bytes()?;
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut le = [0u8; 8];
        le[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_ne_bytes(le);
    }
    Ok(words)
}

/// The address of `array`'s elements in this process (its device is a CPU device).
fn address(array: &Array) -> *mut c_void {
    array.buffer().addr() as *mut c_void
}

impl Collective for MpiCollective {
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
        let count = self.count(OP, array)?;
        reducible(OP, op, array.dtype())?;
        array.buffer_mut(OP)?;
        let dtype = array.dtype();
        // The reduction allocates nothing on the device: MPI reads a copy of the elements in
        // host memory, outside the device's allocator, and writes the result in place, so an
        // out-of-memory cannot stop one rank between the ranks' collectives.
        if widened(dtype) || op == ReduceOp::Avg {
            let sent = array.to_f64()?;
            return self.reduce_as_f64(Reduction::AllReduce, sent, array, count, op);
        }
        let sent = host_copy(array)?;
        let (from, to) = (sent.as_ptr().cast_mut().cast(), address(array));
        // SAFETY: `from` (a host copy, handed over to keep) and `to` (the array) hold `count`
        // elements of the datatype each, in distinct buffers.
        unsafe {
            self.reduce_raw(
                Reduction::AllReduce,
                &[array],
                sent,
                (from, to, count),
                datatype(dtype),
                op,
            )?
        };
        Ok(())
    }

    fn reduce_scatter(&mut self, input: &Array, output: &mut Array, op: ReduceOp) -> Result<()> {
        const OP: &str = "reduce_scatter";
        chunked(OP, input, output, Chunks::Input, self.world)?;
        self.count(OP, input)?;
        let count = self.count(OP, output)?;
        reducible(OP, op, input.dtype())?;
        output.buffer_mut(OP)?;
        let dtype = input.dtype();
        // As the all-reduce: nothing is allocated on the device, so an out-of-memory cannot stop
        // one rank between the ranks' collectives.
        if widened(dtype) || op == ReduceOp::Avg {
            let sent = input.to_f64()?;
            return self.reduce_as_f64(Reduction::ReduceScatter, sent, output, count, op);
        }
        let buffers = (address(input), address(output), count);
        // SAFETY: `from` (the input) holds world x `count` elements and `to` (the output)
        // `count`, of the datatype, in distinct arrays.
        unsafe {
            self.reduce_raw(
                Reduction::ReduceScatter,
                &[input, output],
                (),
                buffers,
                datatype(dtype),
                op,
            )?;
        }
        Ok(())
    }

    fn all_gather(&mut self, input: &Array, output: &mut Array) -> Result<()> {
        const OP: &str = "all_gather";
        chunked(OP, input, output, Chunks::Output, self.world)?;
        let count = self.count(OP, input)?;
        self.count(OP, output)?;
        output.buffer_mut(OP)?;
        let dtype = datatype(input.dtype());
        let (from, to) = (address(input), address(output));
        self.run(OP, &[input, output], (), |request| {
            // SAFETY: `from` holds `count` elements and `to` world x `count`, of the datatype,
            // kept alive until the request completes (or for good, past the timeout).
            unsafe {
                ffi::MPI_Iallgather(
                    from,
                    count,
                    dtype,
                    to,
                    count,
                    dtype,
                    ffi::RSMPI_COMM_WORLD,
                    request,
                )
            }
        })
    }

    fn broadcast(&mut self, array: &mut Array, from: usize) -> Result<()> {
        const OP: &str = "broadcast";
        root(OP, from, self.world)?;
        let count = self.count(OP, array)?;
        array.buffer_mut(OP)?;
        let dtype = datatype(array.dtype());
        let at = address(array);
        self.run(OP, &[array], (), |request| {
            // SAFETY: `at` holds `count` elements of the datatype, kept alive until the request
            // completes (or for good, past the timeout); `from` is a rank of the world.
            unsafe {
                ffi::MPI_Ibcast(
                    at,
                    count,
                    dtype,
                    from as c_int,
                    ffi::RSMPI_COMM_WORLD,
                    request,
                )
            }
        })
    }

    fn barrier(&mut self) -> Result<()> {
        // SAFETY: a barrier moves no data.
        self.run("barrier", &[], (), |request| unsafe {
            ffi::MPI_Ibarrier(ffi::RSMPI_COMM_WORLD, request)
        })
    }
}
