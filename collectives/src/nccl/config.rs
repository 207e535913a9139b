//! The configuration a communicator is made with.

use std::ffi::c_int;

use cudarc::nccl::sys;

/// NCCL's mark of a configuration made as `NCCL_CONFIG_INITIALIZER` makes it.
const MAGIC: u32 = 0xcafe_beef;
/// The version of the headers cudarc's bindings follow (2.30.0, as `NCCL_VERSION` encodes it):
/// NCCL reads the fields a configuration of that version has, and older libraries the fields
/// they know.
const HEADER_VERSION: u32 = 2 * 10_000 + 30 * 100;
/// A field left to NCCL's default (`NCCL_CONFIG_UNDEF_INT`).
const UNDEF: c_int = c_int::MIN;

/// A non-blocking communicator with NCCL's defaults otherwise: its calls return at once
/// (`ncclInProgress` while work is under way), so that every wait can have a deadline.
pub(crate) fn non_blocking() -> sys::ncclConfig_t {
    sys::ncclConfig_t {
        size: std::mem::size_of::<sys::ncclConfig_t>(),
        magic: MAGIC,
        version: HEADER_VERSION,
        blocking: 0,
        cgaClusterSize: UNDEF,
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        netName: std::ptr::null(),
        splitShare: UNDEF,
        trafficClass: UNDEF,
        commName: std::ptr::null(),
        collnetEnable: UNDEF,
        CTAPolicy: UNDEF,
        shrinkShare: UNDEF,
        nvlsCTAs: UNDEF,
        nChannelsPerNetPeer: UNDEF,
        nvlinkCentricSched: UNDEF,
        graphUsageMode: UNDEF,
        numRmaCtx: UNDEF,
        maxP2pPeers: UNDEF,
    }
}
