//! Data parallelism: the processes a run trains on ([`Launch`]: this one alone, or the ranks
//! `mpirun` launched, over MPI or NCCL, or that another launcher started with the master's
//! address to meet at, over NCCL), the small buffer through which they agree, what they
//! agree on in each step, gradients summed over the ranks in buckets, and the optimizer state
//! sharded over them (ZeRO stage 1), or the parameters themselves (ZeRO stage 3).

pub(crate) mod agreement;
pub(crate) mod buckets;
pub(crate) mod control;
#[cfg(feature = "nccl")]
pub(crate) mod nccl_world;
pub(crate) mod peers;
#[cfg(feature = "nccl")]
pub(crate) mod rendezvous;
pub(crate) mod sharded_params;
pub(crate) mod sharded_state;
pub(crate) mod world;

pub use world::Launch;
