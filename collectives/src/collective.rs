//! The collective interface: what every rank calls, with the same arguments, in the same order.

use std::time::Duration;

use headroom_kernels::{Array, Device};

use crate::Result;

/// How long a collective waits for the other ranks unless told otherwise (PyTorch's default for
/// NCCL).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// How values from every rank combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The mean over ranks (the sum divided by the world size), for floating-point arrays.
    Avg,
    /// The largest.
    Max,
    /// The smallest.
    Min,
}

/// Collectives among the `world_size` ranks of a job, one rank per process and device.
///
/// Every rank calls the same collectives in the same order with arrays of the same dtype and
/// sizes; a collective returns once this rank's part is complete, or fails with
/// [`Error::Timeout`](crate::Error::Timeout) when another rank does not take part in time. Arrays
/// written in place must be the only handle to their buffer.
pub trait Collective {
    /// This process's rank, from 0.
    fn rank(&self) -> usize;

    /// The number of ranks.
    fn world_size(&self) -> usize;

    /// The device this rank's arrays live on.
    fn device(&self) -> &Device;

    /// Replaces `array` on every rank by the reduction of the ranks' arrays.
    fn all_reduce(&mut self, array: &mut Array, op: ReduceOp) -> Result<()>;

    /// Reduces `input` (`world_size` equal chunks) over the ranks and writes chunk `rank` of
    /// the result into `output`.
    fn reduce_scatter(&mut self, input: &Array, output: &mut Array, op: ReduceOp) -> Result<()>;

    /// Writes every rank's `input` into `output`, rank `r`'s as chunk `r` of `world_size`.
    fn all_gather(&mut self, input: &Array, output: &mut Array) -> Result<()>;

    /// Replaces `array` on every rank by rank `root`'s.
    fn broadcast(&mut self, array: &mut Array, root: usize) -> Result<()>;

    /// Returns once every rank has called it.
    fn barrier(&mut self) -> Result<()>;
}
