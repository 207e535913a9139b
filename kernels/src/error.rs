//! The crate's one error type.

use headroom_alloc::OomReport;

use crate::dtype::DType;
use crate::shape::Shape;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a kernel call. Every variant names the op.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The device ran out of memory; the allocator's report says why and what to do.
    #[error("{op}: {report}")]
    OutOfMemory {
        /// The op that asked for memory.
        op: &'static str,
        /// The allocator's report.
        report: Box<OomReport>,
    },

    /// Operand shapes do not fit together.
    #[error("{op}: shapes do not fit: {detail}")]
    Shape {
        /// The op.
        op: &'static str,
        /// The shapes involved and the rule they break.
        detail: String,
    },

    /// An operand has a dtype the op does not take.
    #[error("{op}: expected {expected}, got {got}")]
    DType {
        /// The op.
        op: &'static str,
        /// What the op wanted (a dtype or a family such as "a float dtype").
        expected: String,
        /// What it got.
        got: DType,
    },

    /// Operands live on different devices.
    #[error("{op}: operands live on different devices ({left} and {right})")]
    Device {
        /// The op.
        op: &'static str,
        /// One device.
        left: String,
        /// The other.
        right: String,
    },

    /// A host buffer has the wrong length for the operand.
    #[error("{op}: host data holds {got} elements, the shape {shape} needs {expected}")]
    HostLength {
        /// The op.
        op: &'static str,
        /// The operand's shape.
        shape: Shape,
        /// Elements needed.
        expected: usize,
        /// Elements given.
        got: usize,
    },

    /// The op reads data, and this device holds none (the meta device plans memory only).
    #[error("{op}: the {device} device holds no data to read")]
    NoData {
        /// The op.
        op: &'static str,
        /// The device.
        device: String,
    },

    /// An argument is out of its range (an axis past the rank, a probability outside [0, 1)...).
    #[error("{op}: {detail}")]
    Argument {
        /// The op.
        op: &'static str,
        /// What was wrong.
        detail: String,
    },

    /// An in-place write to an array whose buffer another handle shares.
    #[error("{op}: the array is shared with another handle; writing in place needs the only one")]
    Shared {
        /// The op.
        op: &'static str,
    },

    /// The allocator refused for a reason other than memory (a bad configuration, say).
    #[error("{op}: {source}")]
    Alloc {
        /// The op.
        op: &'static str,
        /// The allocator's error.
        #[source]
        source: headroom_alloc::Error,
    },

    /// No CUDA driver could be loaded, or it reports no usable device: asking for a CUDA device
    /// on a machine without one.
    #[error("no CUDA driver found: {detail}")]
    NoCudaDriver {
        /// What was looked for and what to check.
        detail: String,
    },

    /// A CUDA library that the backend loads at run time (cuBLAS, NVRTC) is missing.
    #[error("{library} not found: {detail}")]
    NoCudaLibrary {
        /// The library.
        library: &'static str,
        /// What was looked for and what to check.
        detail: String,
    },

    /// A kernel launch whose arguments do not match the kernel's parameters as compiled: a bug
    /// in the backend, caught before the GPU reads the wrong bytes.
    #[error(
        "{op}: kernel `{kernel}` was launched with arguments that do not match its parameters: {detail}"
    )]
    KernelArguments {
        /// The op.
        op: &'static str,
        /// The kernel's name.
        kernel: String,
        /// Where the arguments and the parameters part.
        detail: String,
    },

    /// A call into the CUDA driver, cuBLAS or NVRTC failed.
    #[error("{op}: {call} failed with {name}: {detail}")]
    Cuda {
        /// The op.
        op: &'static str,
        /// The library function that failed, such as `cuMemcpyDtoHAsync`.
        call: &'static str,
        /// The library's name for the error, such as `CUDA_ERROR_ILLEGAL_ADDRESS`.
        name: String,
        /// The library's description of it (the compiler's log for NVRTC).
        detail: String,
    },
}

impl Error {
    /// Wraps an allocator error, keeping an OOM report intact.
    pub fn from_alloc(op: &'static str, err: headroom_alloc::Error) -> Self {
        match err {
            headroom_alloc::Error::OutOfMemory(report) => Self::OutOfMemory { op, report },
            source => Self::Alloc { op, source },
        }
    }

    /// The same error, named after `outer`: for a composite op whose inner step failed, so that
    /// the message names the op the caller called.
    pub(crate) fn in_op(mut self, outer: &'static str) -> Self {
        match &mut self {
            Self::OutOfMemory { op, .. }
            | Self::Shape { op, .. }
            | Self::DType { op, .. }
            | Self::Device { op, .. }
            | Self::HostLength { op, .. }
            | Self::NoData { op, .. }
            | Self::Argument { op, .. }
            | Self::Shared { op }
            | Self::Alloc { op, .. }
            | Self::KernelArguments { op, .. }
            | Self::Cuda { op, .. } => *op = outer,
            Self::NoCudaDriver { .. } | Self::NoCudaLibrary { .. } => {}
        }
        self
    }

    /// The OOM report, when this is an out-of-memory.
    pub fn oom_report(&self) -> Option<&OomReport> {
        match self {
            Self::OutOfMemory { report, .. } => Some(report),
            _ => None,
        }
    }

    /// True when this is an out-of-memory (the caller may retry with less).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Self::OutOfMemory { .. })
    }
}
