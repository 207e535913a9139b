//! Collectives for training on several devices: all-reduce, reduce-scatter, all-gather,
//! broadcast and barrier over [`Array`](headroom_kernels::Array)s, with a timeout on each.
//!
//! [`Collective`] is the interface a data-parallel trainer programs against. [`Solo`] is a world
//! of one process (every collective is a copy or nothing), so one code path serves one device
//! and many. With the `nccl` feature, `NcclCollective` runs them over NCCL between CUDA
//! devices, on each device's own stream, so that they queue in order with its kernels; with the
//! `mpi` feature, `MpiCollective` runs them over MPI between CPU processes. [`SharedWorld`] lets
//! several owners call one world in turn, and [`PlannedRank`] is a rank of a larger world as a
//! planner runs it on a meta device. [`Threads`] is a world of threads of one process, for tests.
//!
//! ```
//! use headroom_collectives::{Collective, ReduceOp, Solo};
//! use headroom_kernels::{Array, DType, Device, DeviceConfig};
//! let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
//! let mut world = Solo::new(&cpu);
//! let mut grads = Array::from_host(&cpu, [3], &[1.0f32, 2.0, 3.0])?;
//! world.all_reduce(&mut grads, ReduceOp::Sum)?;
//! assert_eq!(grads.to_host::<f32>()?, [1.0, 2.0, 3.0]);
//! # Ok::<(), headroom_collectives::Error>(())
//! ```

mod checks;
mod collective;
mod error;
#[cfg(feature = "nccl")]
mod nccl;
#[cfg(feature = "mpi")]
mod over_mpi;
mod planned;
mod shared;
mod solo;
mod threads;

pub use collective::{Collective, DEFAULT_TIMEOUT, ReduceOp};
pub use error::{Error, Result};
#[cfg(feature = "nccl")]
pub use nccl::{NcclCollective, UniqueId};
#[cfg(feature = "mpi")]
pub use over_mpi::MpiCollective;
pub use planned::PlannedRank;
pub use shared::{SharedWorld, Stop};
pub use solo::Solo;
pub use threads::Threads;
