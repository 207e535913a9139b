//! Finding NCCL at run time, and its errors as this crate's.

use cudarc::nccl::result::NcclError;
use cudarc::nccl::sys;

use crate::Error;

/// Fails unless libnccl can be loaded (cudarc looks for `libnccl.so`; NCCL's own packages also
/// install `libnccl.so.2`, which it does not try).
pub(crate) fn require_nccl() -> Result<(), Error> {
    // SAFETY: this only tries to open the shared library by the names cudarc loads it by; it
    // runs no code of the library beyond its loader's initialisers.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::NoLibrary {
            library: "NCCL",
            detail: "libnccl.so could not be loaded: install NCCL (the `nvidia-nccl-cu13` Python \
                     package has it as lib/libnccl.so.2: link it as libnccl.so) and add its \
                     folder to LD_LIBRARY_PATH"
                .into(),
        })
    }
}

/// NCCL's failure of `call` on `rank` of `world` as an [`Error::Backend`], with NCCL's message
/// and, given the communicator, its last error.
pub(crate) fn nccl_error(
    call: &'static str,
    rank: usize,
    world: usize,
    err: NcclError,
    comm: Option<sys::ncclComm_t>,
) -> Error {
    // SAFETY: ncclGetErrorString returns a static string for any result code.
    let mut detail = unsafe { message(sys::ncclGetErrorString(err.0)) };
    if let Some(comm) = comm {
        // SAFETY: `comm` is a live communicator; the string lives until the next NCCL call on
        // this thread, and is copied at once.
        let last = unsafe { message(sys::ncclGetLastError(comm)) };
        if !last.is_empty() {
            detail = format!("{detail} ({last})");
        }
    }
    Error::Backend {
        backend: "NCCL",
        op: call,
        rank,
        world,
        detail,
    }
}

/// A C string from NCCL, copied (empty for a null pointer).
///
/// # Safety
/// `text` is null or a NUL-terminated string valid for the call.
unsafe fn message(text: *const std::ffi::c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: as the caller promised.
    unsafe { std::ffi::CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}
