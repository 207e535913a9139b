//! The ranks of a data-parallel run on CUDA devices: NCCL carries their collectives, and rank
//! 0's NCCL id reaches the others through MPI where MPI launched them (`mpirun -n N headroom
//! train --device cuda`), or over TCP at the master's address where another launcher did
//! (`torchrun --no-python headroom train --device cuda`, [`rendezvous`]). Rank 0 sends a flag
//! before the id, so that a rank 0 without NCCL stops every rank with its reason instead of
//! leaving them waiting for an id.

use std::time::Duration;

use headroom_collectives::{Collective, MpiCollective, NcclCollective, ReduceOp, UniqueId};
use headroom_kernels::{Array, Device, DeviceConfig};

use crate::data_parallel::rendezvous::{self, Master};
use crate::error::{Error, Result};

/// NCCL's collectives, with the MPI job that launched the ranks (if MPI did) kept open until
/// they end.
pub struct NcclWorld {
    nccl: NcclCollective,
    /// Finalized after NCCL, when the world is dropped.
    _launcher: Option<MpiCollective>,
}

impl NcclWorld {
    /// Joins the `size` ranks as rank `rank`, on CUDA device `device`, waiting at most
    /// `timeout` for each collective: rank 0's id reaches the others over TCP at `master`
    /// where given, through MPI otherwise.
    pub fn join(
        (rank, size): (usize, usize),
        device: &Device,
        master: Option<&Master>,
        timeout: Duration,
    ) -> Result<Self> {
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
        let (message, launcher) = match master {
            Some(master) => (over_tcp(master, (rank, size), &message, timeout)?, None),
            None => {
                let host = Device::cpu(DeviceConfig::new(1 << 20))?;
                let mut launcher = MpiCollective::init(&host, timeout)?;
                let mut shared = Array::from_host(&host, [129], &message)?;
                launcher.broadcast(&mut shared, 0)?;
                (shared.to_host::<u8>()?, Some(launcher))
            }
        };
        if message.len() != 129 {
            return Err(Error::config(format!(
                "rank {rank}: rank 0's answer held {} bytes, not NCCL's id",
                message.len()
            )));
        }
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

/// Rank 0's `message` over TCP at `master`: sent by rank 0 to every other rank of `size`,
/// received by the others.
fn over_tcp(
    master: &Master,
    (rank, size): (usize, usize),
    message: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>> {
    match rank {
        0 => {
            rendezvous::serve(master, size, message, timeout)?;
            Ok(message.to_vec())
        }
        _ => rendezvous::receive(master, timeout),
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
