//! The processes a run trains on: this one alone, or the ranks of a job that `mpirun -n N`
//! launched, each of which trains on its shard of every batch (data parallelism). The launcher
//! tells a process its rank and the world's size through the environment (Open MPI's
//! `OMPI_COMM_WORLD_*`, MPICH's `PMI_*`, or `RANK` and `WORLD_SIZE` as torchrun sets them with
//! `MASTER_ADDR` and `MASTER_PORT`, for ranks on CUDA devices that meet over TCP); a process
//! started alone is a world of one.

use std::time::Duration;

use headroom_collectives::{Collective, Solo};
use headroom_kernels::{Device, DeviceKind};

use crate::config::TrainConfig;
use crate::error::{Error, Result};

/// Where this process stands in its job, as its launcher said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank, from 0.
    pub rank: usize,
    /// The number of processes.
    pub size: usize,
}

impl Launch {
    /// A process started alone: a world of one.
    pub const ALONE: Self = Self { rank: 0, size: 1 };

    /// What the launcher's environment says, or a world of one when no launcher started this
    /// process.
    pub fn from_env() -> Self {
        let read = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
        };
        let rank = read("OMPI_COMM_WORLD_RANK").or_else(|| read("PMI_RANK"));
        let size = read("OMPI_COMM_WORLD_SIZE").or_else(|| read("PMI_SIZE"));
        let (rank, size) = match (rank, size) {
            (Some(rank), Some(size)) => (Some(rank), Some(size)),
            _ => (read("RANK"), read("WORLD_SIZE")),
        };
        match (rank, size) {
            (Some(rank), Some(size)) if rank < size => Self { rank, size },
            _ => Self::ALONE,
        }
    }

    /// Where `world` says this process stands.
    pub fn of(world: &dyn Collective) -> Self {
        Self {
            rank: world.rank(),
            size: world.world_size(),
        }
    }

    /// Whether a launcher started several processes.
    pub fn is_distributed(self) -> bool {
        self.size > 1
    }

    /// Whether this process writes the run's files (checkpoints, metrics, artifacts): rank 0
    /// does, for every rank.
    pub fn writes(self) -> bool {
        self.rank == 0
    }

    /// The most samples a rank's part of a batch of `len` holds.
    pub fn shard_size(self, len: usize) -> usize {
        len.div_ceil(self.size)
    }

    /// This rank's part of `len` samples: `len` cut into `size` runs that differ by at most one.
    pub fn shard(self, len: usize) -> std::ops::Range<usize> {
        len * self.rank / self.size..len * (self.rank + 1) / self.size
    }

    /// `config` as the ranks of this launch run it: a data-parallel run updates after the
    /// backward pass (every rank's gradients are needed first), its batch gives every rank a
    /// sample, its optimizer keeps this rank's share of the state where the configuration
    /// shards it, and `cuda` is the GPU of the rank's number on its machine.
    pub fn prepare(self, mut config: TrainConfig) -> Result<TrainConfig> {
        if !self.is_distributed() {
            return Ok(config);
        }
        config.optimizer.launched_as = Some((self.rank, self.size));
        if config.device == "cuda" {
            config.device = format!("cuda:{}", local_gpu(self.rank));
        }
        if config.optimizer.in_backward == Some(true) {
            return Err(Error::config(format!(
                "optimizer.in_backward: a data-parallel run ({} ranks) updates once the \
                 gradients of every rank are summed, after the backward pass; turn it off",
                self.size
            )));
        }
        config.optimizer.in_backward = Some(false);
        let divides = config.batch.size.is_multiple_of(self.size);
        let unset = config.optimizer.shard_params.is_none() && !config.optimizer.shard_grads;
        if unset && !divides {
            // Sharded ranks run their passes in step: the policy may not choose it here.
            config.optimizer.shard_params = Some(false);
        }
        if config.optimizer.shards_params() && !divides {
            return Err(Error::config(format!(
                "batch.size: with sharded parameters (optimizer.shard_params) every rank runs \
                 its passes in step with the others, so each takes an equal share of the \
                 batch; {} samples do not divide among {} ranks",
                config.batch.size, self.size
            )));
        }
        if config.batch.size < self.size {
            return Err(Error::config(format!(
                "batch.size: {} samples cannot give each of {} ranks one",
                config.batch.size, self.size
            )));
        }
        Ok(config)
    }

    /// What one rank plans its memory for: `config` with the batch of its shard.
    pub fn rank_config(self, config: &TrainConfig) -> TrainConfig {
        let mut shard = config.clone();
        shard.batch.size = self.shard_size(config.batch.size);
        shard
    }

    /// The collectives among the launched processes, on `device`, waiting at most `timeout`
    /// for each one: MPI's between CPU processes, NCCL's between CUDA devices.
    pub fn join(self, device: &Device, timeout: Duration) -> Result<Box<dyn Collective + Send>> {
        if !self.is_distributed() {
            return Ok(Box::new(Solo::new(device)));
        }
        match device.kind() {
            DeviceKind::Cuda(_) => join_nccl(self, device, timeout),
            _ if !launched_by_mpi() => Err(Error::config(format!(
                "rank {} of {} trains on {device}: ranks on CPUs meet over MPI; launch them with \
                 mpirun (ranks started with RANK and WORLD_SIZE meet over NCCL, on CUDA devices)",
                self.rank, self.size
            ))),
            _ => join_mpi(self, device, timeout),
        }
    }
}

/// Whether an MPI launcher started this process (its environment names its rank).
pub(crate) fn launched_by_mpi() -> bool {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK"]
        .iter()
        .any(|name| std::env::var_os(name).is_some())
}

/// The GPU a rank of a data-parallel run takes when its configuration says `cuda`: the one of
/// its rank on its machine, as the launcher numbers the ranks of each machine.
fn local_gpu(rank: usize) -> usize {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "LOCAL_RANK",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok()?.parse().ok())
    .unwrap_or(rank)
}

#[cfg(feature = "nccl")]
fn join_nccl(
    launch: Launch,
    device: &Device,
    timeout: Duration,
) -> Result<Box<dyn Collective + Send>> {
    use crate::data_parallel::rendezvous::Master;
    let master = Master::from_env().filter(|_| !launched_by_mpi());
    let world = crate::data_parallel::nccl_world::NcclWorld::join(
        (launch.rank, launch.size),
        device,
        master.as_ref(),
        timeout,
    )?;
    Ok(Box::new(world))
}

#[cfg(not(feature = "nccl"))]
fn join_nccl(
    launch: Launch,
    device: &Device,
    _timeout: Duration,
) -> Result<Box<dyn Collective + Send>> {
    Err(Error::config(format!(
        "rank {} of {} trains on {device}: data parallelism between CUDA devices runs over \
         NCCL; build headroom-trainer with its `nccl` feature",
        launch.rank, launch.size
    )))
}

#[cfg(feature = "mpi")]
fn join_mpi(
    launch: Launch,
    device: &Device,
    timeout: Duration,
) -> Result<Box<dyn Collective + Send>> {
    let world = headroom_collectives::MpiCollective::init(device, timeout)?;
    if (world.rank(), world.world_size()) != (launch.rank, launch.size) {
        return Err(Error::config(format!(
            "the launcher said rank {} of {}, and MPI says rank {} of {}",
            launch.rank,
            launch.size,
            world.rank(),
            world.world_size()
        )));
    }
    Ok(Box::new(world))
}

#[cfg(not(feature = "mpi"))]
fn join_mpi(
    launch: Launch,
    _device: &Device,
    _timeout: Duration,
) -> Result<Box<dyn Collective + Send>> {
    Err(Error::config(format!(
        "a launcher started this process as rank {} of {}, but this build has no data \
         parallelism: build headroom-trainer with its `mpi` feature",
        launch.rank, launch.size
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_a_batch_once_and_differ_by_at_most_one() {
        for size in 1..5 {
            for len in 0..12 {
                let shards: Vec<_> = (0..size)
                    .map(|rank| Launch { rank, size }.shard(len))
                    .collect();
                assert_eq!(shards[0].start, 0);
                assert_eq!(shards[size - 1].end, len);
                for pair in shards.windows(2) {
                    assert_eq!(pair[0].end, pair[1].start);
                }
                let lens: Vec<usize> = shards.iter().map(|s| s.len()).collect();
                let (least, most) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
                assert!(most - least <= 1, "{len} over {size}: {lens:?}");
            }
        }
    }
}
