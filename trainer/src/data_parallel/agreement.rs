//! What the ranks of a data-parallel step agree on, each in one small all-reduce through the
//! run's control buffer: the whole batch's counts before the first micro-batch, what each round
//! of micro-batches did, and whether every rank's update succeeded. In a run of one process each
//! is this process's own.

use headroom_collectives::ReduceOp;
#[cfg(doc)]
use headroom_collectives::SharedWorld;

use crate::data::HostBatch;
use crate::data_parallel::control::Values;
use crate::data_parallel::peers::Peers;
use crate::data_parallel::world::Launch;
use crate::error::{Error, Result};

/// What every rank agrees happened in one round of micro-batches (one attempt per rank that
/// had samples left). In a run of one process it is that process's attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Round {
    /// Every attempt succeeded and some rank has samples left.
    Fine,
    /// No rank had samples left: the step's micro-batches are done.
    Done,
    /// Rank `rank` ran out of memory in a micro-batch of `size` (the highest such rank).
    OutOfMemory { rank: usize, size: usize },
    /// Rank `rank` failed otherwise.
    Failed { rank: usize },
}

impl Round {
    /// The round every rank agrees on, from this rank's samples `left` before its `attempt`.
    /// In a data-parallel run this is one all-reduce (the largest of each rank's flags).
    pub(crate) fn agree<T>(
        peers: &mut Peers<'_>,
        launch: Launch,
        left: usize,
        attempt: Option<&(usize, HostBatch, Option<u64>, Result<T>)>,
    ) -> Result<Self> {
        let rank = launch.rank as f64 + 1.0;
        // [failed otherwise, out of memory, the size that ran out, samples left after]
        let mut flags = [0.0, 0.0, 0.0, left as f64];
        if let Some((size, _, _, outcome)) = attempt {
            match outcome {
                Ok(_) => flags[3] = (left - size) as f64,
                Err(err) if err.is_out_of_memory() => {
                    flags[1] = rank;
                    flags[2] = *size as f64;
                }
                Err(_) => flags[0] = rank,
            }
        }
        Ok(Self::of(peers.agree(flags, ReduceOp::Max)?))
    }

    /// The round that agreed `flags` say: also what a rank whose pass another rank's round
    /// stopped receives at its collective ([`SharedWorld::agreeing`]).
    pub(crate) fn of(flags: Values) -> Self {
        if flags[0] > 0.0 {
            Self::Failed {
                rank: flags[0] as usize - 1,
            }
        } else if flags[1] > 0.0 {
            Self::OutOfMemory {
                rank: flags[1] as usize - 1,
                size: flags[2] as usize,
            }
        } else if flags[3] > 0.0 {
            Self::Fine
        } else {
            Self::Done
        }
    }
}

/// The samples and scored targets of the whole batch: `batch`'s, summed over the ranks in a
/// data-parallel run.
pub(crate) fn whole_batch(peers: &mut Peers<'_>, batch: &HostBatch) -> Result<(usize, usize)> {
    let mine = [batch.len() as f64, batch.scored() as f64, 0.0, 0.0];
    let counts = peers.agree(mine, ReduceOp::Sum)?;
    Ok((counts[0] as usize, counts[1] as usize))
}

/// `updated`, this rank's update, once every rank of a data-parallel run has said whether its
/// own succeeded: a rank whose update failed stops every rank, naming it.
pub(crate) fn agree_on_update(
    peers: &mut Peers<'_>,
    launch: Launch,
    step: u64,
    updated: Result<(bool, f64)>,
) -> Result<(bool, f64)> {
    let what = "an error in its optimizer update";
    agree_on_outcome(peers, launch, (step + 1, what), updated)
}

/// `outcome`, this rank's part of some work of step `step`, once every rank of a
/// data-parallel run has said whether its own part succeeded: a rank whose part failed (with
/// `what`) stops every rank, naming it.
pub(crate) fn agree_on_outcome<T>(
    peers: &mut Peers<'_>,
    launch: Launch,
    (step, what): (u64, &'static str),
    outcome: Result<T>,
) -> Result<T> {
    let failed = match outcome {
        Ok(_) => 0.0,
        Err(_) => launch.rank as f64 + 1.0,
    };
    let agreed = peers.agree([failed, 0.0, 0.0, 0.0], ReduceOp::Max)?;
    match outcome {
        Ok(_) if agreed[0] > 0.0 => Err(Error::PeerFailed {
            step,
            rank: agreed[0] as usize - 1,
            what,
        }),
        outcome => outcome,
    }
}
