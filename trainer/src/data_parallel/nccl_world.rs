//! The ranks of a data-parallel run on CUDA devices: NCCL carries their collectives, and MPI,
//! which launched them (`mpirun -n N headroom train --device cuda`), hands rank 0's NCCL id to
//! the others. Rank 0 sends a flag before the id, so that a rank 0 without NCCL stops every rank
//! with its reason instead of leaving them waiting for an id.

use std::time::Duration;

use headroom_collectives::{Collective, MpiCollective, NcclCollective, ReduceOp, UniqueId};
use headroom_kernels::{Array, Device, DeviceConfig};

use crate::error::Result;

/// NCCL's collectives, with the MPI job that launched the ranks kept open until they end.
pub struct NcclWorld {
    nccl: NcclCollective,
    /// Finalized after NCCL, when the world is dropped.
    _launcher: MpiCollective,
}

impl NcclWorld {
    /// Joins the `size` ranks as rank `rank`, on CUDA device `device`, waiting at most
    /// `timeout` for each collective.
    pub fn join(rank: usize, size: usize, device: &Device, timeout: Duration) -> Result<Self> {
        let host = Device::cpu(DeviceConfig::new(1 << 20))?;
        let mut launcher = MpiCollective::init(&host, timeout)?;
        // [1, id...] from a rank 0 with an id; [0, ...] from one without NCCL.
        let mine = match rank {
            0 => UniqueId::new(),
            _ => Ok(UniqueId::from_bytes([0; 128])),
        };
        let mut message = [0u8; 129];
        if let Ok(id) = &mine {
            message[0] = 1;
            message[1..].copy_from_slice(&id.bytes());
        }
        let mut shared = Array::from_host(&host, [129], &message)?;
        launcher.broadcast(&mut shared, 0)?;
        let message = shared.to_host::<u8>()?;
        if message[0] == 0 {
            return Err(match mine {
                Err(err) => err.into(),
                Ok(_) => headroom_collectives::Error::Backend {
                    backend: "NCCL",
                    op: "joining the ranks",
                    rank,
                    world: size,
                    detail: "rank 0 could not make the job's id (its error says why)".into(),
                }
                .into(),
            });
        }
        let mut id = [0u8; 128];
        id.copy_from_slice(&message[1..]);
        let nccl = NcclCollective::new(device, rank, size, &UniqueId::from_bytes(id), timeout)?;
        Ok(Self {
            nccl,
            _launcher: launcher,
        })
    }
}

impl Collective for NcclWorld {
    fn rank(&self) -> usize {
        self.nccl.rank()
    }

    fn world_size(&self) -> usize {
        self.nccl.world_size()
    }

    fn device(&self) -> &Device {
        self.nccl.device()
    }

    fn all_reduce(&mut self, array: &mut Array, op: ReduceOp) -> headroom_collectives::Result<()> {
        self.nccl.all_reduce(array, op)
    }

    fn reduce_scatter(
        &mut self,
        input: &Array,
        output: &mut Array,
        op: ReduceOp,
    ) -> headroom_collectives::Result<()> {
        self.nccl.reduce_scatter(input, output, op)
    }

    fn all_gather(
        &mut self,
        input: &Array,
        output: &mut Array,
    ) -> headroom_collectives::Result<()> {
        self.nccl.all_gather(input, output)
    }

    fn broadcast(&mut self, array: &mut Array, root: usize) -> headroom_collectives::Result<()> {
        self.nccl.broadcast(array, root)
    }

    fn barrier(&mut self) -> headroom_collectives::Result<()> {
        self.nccl.barrier()
    }
}
