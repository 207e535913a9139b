//! MPI's names for the element types.

use headroom_kernels::DType;
use mpi::ffi;

/// MPI's datatype for moving `dtype`'s elements. The 16-bit floats move as 16-bit integers
/// (MPI has no standard type for them): their bits are copied, never reduced.
pub(crate) fn datatype(dtype: DType) -> ffi::MPI_Datatype {
    // SAFETY: the `RSMPI_*` handles are constants the MPI library defines; reading them is
    // always sound.
    unsafe {
        match dtype {
            DType::F32 => ffi::RSMPI_FLOAT,
            DType::F64 => ffi::RSMPI_DOUBLE,
            DType::F16 | DType::BF16 => ffi::RSMPI_UINT16_T,
            DType::U32 => ffi::RSMPI_UINT32_T,
            DType::I32 => ffi::RSMPI_INT32_T,
            DType::U8 => ffi::RSMPI_UINT8_T,
        }
    }
}

/// Whether MPI cannot reduce `dtype` itself, so the reduction runs on a wider float.
pub(crate) fn widened(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}
