//! The CUDA backend's state (context, stream, cuBLAS handle, compiled modules) and how its
//! kernels are launched.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute, CUstream};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg,
    result,
};
use headroom_alloc::{AllocatorConfig, CudaMemory, Growth};
use parking_lot::Mutex;

use super::args::Arg;
use super::blas::BlasHandle;
use super::compile::{Family, compile};
use super::driver::{CudaOptions, driver_error, require_device, require_libraries, source_error};
use super::profile::Profile;
use super::signature::{Param, check_arguments, signatures};
use crate::buffer::{Buffer, PendingWork};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::DeviceKind;
use crate::meta::PlanTarget;
use crate::ops::gemm::kernels::preferred_blas_workspace;

/// Threads per block of every kernel.
pub(crate) const BLOCK: u32 = 256;
/// Bytes of dynamic shared memory a kernel may take without opting in to more.
const SHARED_WITHOUT_OPT_IN: u32 = 48 << 10;

/// Runs kernels on one CUDA device, all queued on its one stream, and copies between the
/// device and its host tier on a second stream, so that they overlap the kernels.
pub(crate) struct CudaBackend {
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Copies between the device and page-locked host memory: each waits for the kernels
    /// queued before it, and the kernels wait for it only where they need what it moved.
    copies: Arc<CudaStream>,
    /// cuBLAS handle bound to the stream; a handle serves one call at a time.
    pub(crate) blas: Mutex<BlasHandle>,
    pub(crate) options: CudaOptions,
    /// `compute_XY` of the device, what NVRTC compiles for.
    arch: String,
    /// Bytes of cuBLAS workspace each product asks for: the options', else cuBLAS's
    /// recommendation for this device.
    pub(crate) gemm_workspace: u64,
    multiprocessors: u32,
    /// Compute capability 8.0 or later: the matrix units take bf16 and f16 (`mma.sync`
    /// m16n8k16).
    pub(crate) tensor_cores: bool,
    /// Bytes of shared memory a block may have once its kernel opts in
    /// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`).
    pub(crate) shared_opt_in: u32,
    modules: Mutex<HashMap<Family, Arc<Module>>>,
    functions: Mutex<HashMap<String, Kernel>>,
    /// Times each piece of work alone, when the environment asks (`profile.rs`).
    profile: Option<Profile>,
}

/// A loaded family and the parameter lists of its kernels.
struct Module {
    module: Arc<CudaModule>,
    signatures: HashMap<String, Vec<Param>>,
}

/// A loaded kernel and its parameter list.
#[derive(Clone)]
struct Kernel {
    function: CudaFunction,
    params: Arc<[Param]>,
    /// Bytes of dynamic shared memory its launches may take: 48 KiB until it opts in to more.
    shared_allowed: Arc<AtomicU32>,
}

impl Device {
    /// The CUDA device `ordinal`, its memory managed by an allocator with `config` (whose
    /// fraction limit applies to the device's total memory), products under default
    /// [`CudaOptions`]. Under [`Growth::OnDemand`] (the default) and [`Growth::Expandable`] the
    /// allocator's one region grows and shrinks in place through the driver's virtual memory
    /// management, as PyTorch's expandable segments do, so that what is reserved follows what is
    /// in use; under [`Growth::Preallocate`] its regions are plain `cuMemAlloc` allocations. Fails with [`Error::NoCudaDriver`] on a machine without a driver or
    /// device, [`Error::NoCudaLibrary`] without cuBLAS or NVRTC, and [`Error::Cuda`] for a
    /// missing ordinal.
    pub fn cuda(ordinal: u32, config: AllocatorConfig) -> Result<Device> {
        Self::cuda_with(ordinal, config, CudaOptions::default())
    }

    /// [`Device::cuda`] with chosen [`CudaOptions`].
    pub fn cuda_with(
        ordinal: u32,
        config: AllocatorConfig,
        options: CudaOptions,
    ) -> Result<Device> {
        require_libraries()?;
        require_device("cuda", ordinal)?;
        let context = CudaContext::new(ordinal as usize)
            .map_err(|err| driver_error("cuda", "cuDevicePrimaryCtxRetain", err))?;
        let stream = context
            .new_stream()
            .map_err(|err| driver_error("cuda", "cuStreamCreate", err))?;
        let expandable = config.growth != Growth::Preallocate;
        let memory = CudaMemory::new(Arc::clone(&context), Arc::clone(&stream), expandable)
            .map_err(|err| source_error("cuda", err))?;
        let backend = CudaBackend::new(context, Arc::clone(&stream), options)?;
        let plan_target = PlanTarget::Cuda {
            gemm_workspace: backend.gemm_workspace,
        };
        let device = Self::assemble(
            DeviceKind::Cuda(ordinal),
            plan_target,
            Box::new(backend),
            Box::new(memory),
            config,
        )?;
        Ok(device.with_cuda_stream(stream))
    }
}

impl CudaBackend {
    fn new(
        context: Arc<CudaContext>,
        stream: Arc<CudaStream>,
        options: CudaOptions,
    ) -> Result<Self> {
        let capability = context
            .compute_capability()
            .map_err(|err| driver_error("cuda", "cuDeviceGetAttribute", err))?;
        let attribute = |which| {
            context
                .attribute(which)
                .map_err(|err| driver_error("cuda", "cuDeviceGetAttribute", err))
        };
        let multiprocessors =
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let shared_opt_in =
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        context
            .bind_to_thread()
            .map_err(|err| driver_error("cuda", "cuCtxSetCurrent", err))?;
        let blas = BlasHandle::new(Arc::clone(&stream))?;
        let copies = context
            .new_stream()
            .map_err(|err| driver_error("cuda", "cuStreamCreate", err))?;
        Ok(Self {
            context,
            stream,
            copies,
            blas: Mutex::new(blas),
            options,
            arch: format!("compute_{}{}", capability.0, capability.1),
            gemm_workspace: options.gemm_workspace.unwrap_or_else(|| {
                preferred_blas_workspace(u32::try_from(capability.0).unwrap_or(0))
            }),
            multiprocessors: u32::try_from(multiprocessors).unwrap_or(1).max(1),
            tensor_cores: capability.0 >= 8,
            shared_opt_in: u32::try_from(shared_opt_in).unwrap_or(0),
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            profile: Profile::from_env(),
        })
    }

    /// Makes the device's context current on this thread, for raw driver calls.
    pub(crate) fn bind(&self, op: &'static str) -> Result<()> {
        self.context
            .bind_to_thread()
            .map_err(|err| driver_error(op, "cuCtxSetCurrent", err))
    }

    /// The kernel `name` of `family`, compiling and loading the family the first time.
    fn kernel(&self, family: Family, name: &str) -> Result<Kernel> {
        if let Some(kernel) = self.functions.lock().get(name) {
            return Ok(kernel.clone());
        }
        let module = self.module(family)?;
        let params = module.signatures.get(name).ok_or_else(|| Error::Cuda {
            op: family.file(),
            call: "cuModuleGetFunction",
            name: "CUDA_ERROR_NOT_FOUND".into(),
            detail: format!("{} has no kernel named `{name}`", family.file()),
        })?;
        let function = module
            .module
            .load_function(name)
            .map_err(|err| driver_error(family.file(), "cuModuleGetFunction", err))?;
        let kernel = Kernel {
            function,
            params: params.as_slice().into(),
            shared_allowed: Arc::new(AtomicU32::new(SHARED_WITHOUT_OPT_IN)),
        };
        self.functions
            .lock()
            .insert(name.to_owned(), kernel.clone());
        Ok(kernel)
    }

    fn module(&self, family: Family) -> Result<Arc<Module>> {
        let mut modules = self.modules.lock();
        if let Some(module) = modules.get(&family) {
            return Ok(Arc::clone(module));
        }
        let ptx = compile(family, &self.arch)?;
        let signatures = signatures(&ptx.to_src());
        let module = self
            .context
            .load_module(ptx)
            .map_err(|err| driver_error(family.file(), "cuModuleLoadData", err))?;
        let module = Arc::new(Module { module, signatures });
        modules.insert(family, Arc::clone(&module));
        Ok(module)
    }

    /// A one-dimensional grid of [`BLOCK`]-thread blocks for a grid-stride loop over `n` items:
    /// enough blocks to fill the device several times over, no more than the items need.
    pub(crate) fn grid(&self, n: u64) -> LaunchConfig {
        let wanted = n.div_ceil(u64::from(BLOCK)).max(1);
        let most = u64::from(self.multiprocessors) * 16;
        LaunchConfig {
            grid_dim: (wanted.min(most) as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Queues kernel `name` of `family` on the stream with `args`, for `op`.
    pub(crate) fn launch(
        &self,
        op: &'static str,
        family: Family,
        name: &str,
        config: LaunchConfig,
        args: &[Arg],
    ) -> Result<()> {
        let kernel = self.kernel(family, name)?;
        check_arguments(&kernel.params, args).map_err(|detail| Error::KernelArguments {
            op,
            kernel: name.to_owned(),
            detail,
        })?;
        self.allow_shared(op, name, &kernel, config.shared_mem_bytes)?;
        let mut builder = self.stream.launch_builder(&kernel.function);
        for arg in args {
            match arg {
                Arg::U64(v) => builder.arg(v),
                Arg::U32(v) => builder.arg(v),
                Arg::I32(v) => builder.arg(v),
                Arg::F64(v) => builder.arg(v),
                Arg::Walk(v) => builder.arg(v.as_ref()),
            };
        }
        self.timed(
            op,
            || name.to_owned(),
            || {
                // SAFETY: `args` match the kernel's parameter list as its PTX declares it, in number,
                // size and kind (checked above): pointers as u64 device addresses of live buffers
                // borrowed for this call, u64 sizes, doubles, ints, `Walk` as its `#[repr(C)]` mirror. The kernels index only below the sizes passed,
                // which the op layer checked against the buffers' lengths. Work on the kernels' stream runs
                // in order, so the buffers' memory is not reused under it (see the module docs).
                unsafe { builder.launch(config) }
                    .map(drop)
                    .map_err(|err| driver_error(op, "cuLaunchKernel", err))
            },
        )
    }

    /// Opts `kernel` in to `bytes` of dynamic shared memory where that is more than it may
    /// take already (`cuFuncSetAttribute`), once; more than the device gives a block is an
    /// argument error.
    fn allow_shared(
        &self,
        op: &'static str,
        name: &str,
        kernel: &Kernel,
        bytes: u32,
    ) -> Result<()> {
        if bytes <= kernel.shared_allowed.load(Ordering::Relaxed) {
            return Ok(());
        }
        if bytes > self.shared_opt_in {
            return Err(Error::Argument {
                op,
                detail: format!(
                    "{name} needs {bytes} bytes of shared memory; the device gives a block {}",
                    self.shared_opt_in
                ),
            });
        }
        let attribute = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        // Below the device's opt-in limit, itself an i32 attribute.
        let value = i32::try_from(bytes).unwrap_or(i32::MAX);
        kernel
            .function
            .set_attribute(attribute, value)
            .map_err(|err| driver_error(op, "cuFuncSetAttribute", err))?;
        kernel.shared_allowed.fetch_max(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Runs `work`, which queues work on the stream; when profiling, alone, and counted as
    /// `name`.
    pub(crate) fn timed<R>(
        &self,
        op: &'static str,
        name: impl FnOnce() -> String,
        work: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let Some(profile) = &self.profile else {
            return work();
        };
        self.wait(op)?;
        let started = Instant::now();
        let out = work()?;
        self.wait(op)?;
        profile.record(name(), started.elapsed());
        Ok(out)
    }

    /// Queues a copy of `bytes` bytes from device address `src` to `dst`.
    pub(crate) fn copy_device(
        &self,
        op: &'static str,
        src: u64,
        dst: u64,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind(op)?;
        // SAFETY: both ranges lie inside live buffers of this device (checked by the caller),
        // the context is current, and the copy is ordered on the device's stream.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }
            .map_err(|err| driver_error(op, "cuMemcpyDtoDAsync", err))
    }

    /// Copies host bytes to device address `dst`; returns once the host bytes may be reused.
    pub(crate) fn copy_to_device(&self, op: &'static str, bytes: &[u8], dst: u64) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.bind(op)?;
        // SAFETY: `dst` starts a live buffer of at least `bytes.len()` bytes (checked by the
        // caller). From pageable host memory the driver stages the bytes before it returns, so
        // `bytes` may be dropped right after.
        unsafe { result::memcpy_htod_async(dst, bytes, self.stream.cu_stream()) }
            .map_err(|err| driver_error(op, "cuMemcpyHtoDAsync", err))
    }

    /// Copies device bytes from `src` into host bytes, waiting until they have arrived.
    pub(crate) fn copy_to_host(&self, op: &'static str, src: u64, bytes: &mut [u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.bind(op)?;
        self.timed(
            op,
            || format!("copy to host ({op})"),
            || {
                // SAFETY: `src` starts a live buffer of at least `bytes.len()` bytes (checked by the
                // caller); the stream is synchronised before `bytes` is used or released.
                unsafe { result::memcpy_dtoh_async(bytes, src, self.stream.cu_stream()) }
                    .map_err(|err| driver_error(op, "cuMemcpyDtoHAsync", err))
            },
        )?;
        self.wait(op)
    }

    /// Queues a copy of device bytes from `src` into host bytes on the copy stream, after the
    /// kernels queued so far (which compute them), without waiting for it. Returns the copy's
    /// mark, for the host to wait for before it touches `bytes`, and the wait the kernels'
    /// stream queues before anything reuses or overwrites `src`'s memory.
    ///
    /// # Safety
    /// `bytes` must stay allocated, and the host must neither read nor write them, until the
    /// returned mark has been reached.
    pub(crate) unsafe fn copy_to_host_queued(
        &self,
        op: &'static str,
        src: u64,
        bytes: &mut [u8],
    ) -> Result<(StreamMark, KernelsWait)> {
        self.on_copy_stream(op, |stream| {
            if bytes.is_empty() {
                return Ok(());
            }
            // SAFETY: `src` starts a live buffer of at least `bytes.len()` bytes (checked by
            // the caller), whose memory the kernels' stream neither reuses nor overwrites
            // before the copy (the caller queues the returned wait first); the caller keeps
            // `bytes` allocated and untouched until the copy has run.
            unsafe { result::memcpy_dtoh_async(bytes, src, stream) }
                .map_err(|err| driver_error(op, "cuMemcpyDtoHAsync", err))
        })
    }

    /// Queues a copy of page-locked host bytes to device address `dst` on the copy stream,
    /// after the kernels queued so far (the allocator hands memory out again in their order).
    /// Returns the copy's mark, for the host to wait for before it writes or frees `bytes`,
    /// and the wait the kernels' stream queues before anything uses `dst`.
    ///
    /// # Safety
    /// `bytes` must be page-locked, stay allocated and go unwritten until the returned mark
    /// has been reached.
    pub(crate) unsafe fn copy_to_device_queued(
        &self,
        op: &'static str,
        bytes: &[u8],
        dst: u64,
    ) -> Result<(StreamMark, KernelsWait)> {
        self.on_copy_stream(op, |stream| {
            if bytes.is_empty() {
                return Ok(());
            }
            // SAFETY: `dst` starts a live buffer of at least `bytes.len()` bytes (checked by
            // the caller), which the kernels' stream no longer uses (the copy waits for it)
            // and uses only after the copy (the caller queues the returned wait first); the
            // caller keeps the page-locked `bytes` allocated and unwritten until the copy has
            // run.
            unsafe { result::memcpy_htod_async(dst, bytes, stream) }
                .map_err(|err| driver_error(op, "cuMemcpyHtoDAsync", err))
        })
    }

    /// Queues what `copy` queues on the copy stream (given its handle), after the kernels
    /// queued so far. Returns the mark after it, for the host, and the wait the kernels'
    /// stream queues before it uses, overwrites or reuses the device memory the copy touches.
    fn on_copy_stream(
        &self,
        op: &'static str,
        copy: impl FnOnce(CUstream) -> Result<()>,
    ) -> Result<(StreamMark, KernelsWait)> {
        self.bind(op)?;
        let record = |stream: &CudaStream| {
            stream
                .record_event(None)
                .map_err(|err| driver_error(op, "cuEventRecord", err))
        };
        self.copies
            .wait(&record(&self.stream)?)
            .map_err(|err| driver_error(op, "cuStreamWaitEvent", err))?;
        copy(self.copies.cu_stream())?;
        let done = Arc::new(record(&self.copies)?);
        let wait = KernelsWait {
            kernels: Arc::clone(&self.stream),
            copy: Arc::clone(&done),
        };
        Ok((StreamMark(done), wait))
    }

    /// Waits for everything queued on the stream.
    pub(crate) fn wait(&self, op: &'static str) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|err| driver_error(op, "cuStreamSynchronize", err))
    }

    /// Reads a whole u32 buffer back to the host (ids, to check them and group them).
    pub(crate) fn read_u32(&self, op: &'static str, ids: &Buffer) -> Result<Vec<u32>> {
        let mut host = vec![0u32; ids.len()];
        self.copy_to_host(op, ids.addr(), bytemuck::cast_slice_mut(&mut host))?;
        Ok(host)
    }
}

/// A point in one of a device's streams: the work queued before it, which the host can wait
/// for.
pub(crate) struct StreamMark(Arc<CudaEvent>);

/// A copy on the copy stream that reads or writes a device buffer: before the kernels use what
/// it wrote, or overwrite or reuse what it reads, their stream waits for it (the host does
/// not).
pub(crate) struct KernelsWait {
    kernels: Arc<CudaStream>,
    copy: Arc<CudaEvent>,
}

impl std::fmt::Debug for KernelsWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KernelsWait")
    }
}

impl PendingWork for KernelsWait {
    fn wait(&self) -> Result<()> {
        self.kernels
            .wait(&self.copy)
            .map_err(|err| driver_error("wait", "cuStreamWaitEvent", err))
    }
}

impl std::fmt::Debug for StreamMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamMark")
    }
}

impl PendingWork for StreamMark {
    fn wait(&self) -> Result<()> {
        self.0
            .synchronize()
            .map_err(|err| driver_error("wait", "cuEventSynchronize", err))
    }
}

impl Drop for CudaBackend {
    /// Lets queued work finish with the device's context current before the cuBLAS handle and
    /// the modules go (cuBLAS's teardown acts on the current context; a module must outlive the
    /// kernels queued from it).
    fn drop(&mut self) {
        if self.context.bind_to_thread().is_ok() {
            // An error of earlier work has no one left to report to.
            let _ = self.copies.synchronize();
            let _ = self.stream.synchronize();
            if let Some(profile) = &self.profile {
                eprint!("{}", profile.table());
            }
        }
    }
}

/// The name of kernel `kernel` for a float `dtype` (`unary_f32`), or a dtype error for `op`.
pub(crate) fn float_kernel(kernel: &str, dtype: DType, op: &'static str) -> Result<String> {
    if dtype.is_float() {
        Ok(format!("{kernel}_{dtype}"))
    } else {
        Err(Error::DType {
            op,
            expected: "a float dtype".into(),
            got: dtype,
        })
    }
}

impl CudaBackend {
    /// The thread group per row and a grid over `rows` rows of `len` elements, for the row
    /// kernels of `loss.cu`: a warp for rows up to `warp_row_max` elements (the longest a warp
    /// holds in registers, for a kernel that does), else the whole block.
    pub(crate) fn row_grid(
        &self,
        rows: usize,
        len: usize,
        warp_row_max: usize,
    ) -> (u32, LaunchConfig) {
        let group = if len <= warp_row_max { 32 } else { BLOCK };
        (group, self.group_grid(rows, group))
    }

    /// A grid over `rows` rows with `group` threads to a row (a warp, or a whole block of
    /// `group` threads, at least [`BLOCK`]), in blocks of `max(group, BLOCK)` threads: enough
    /// to fill the device several times over, no more than the rows need.
    pub(crate) fn group_grid(&self, rows: usize, group: u32) -> LaunchConfig {
        let threads = group.max(BLOCK);
        let blocks = (rows as u64).div_ceil(u64::from(threads / group)).max(1);
        let most = u64::from(self.multiprocessors) * 16 * u64::from(BLOCK) / u64::from(threads);
        LaunchConfig {
            grid_dim: (blocks.min(most) as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}
