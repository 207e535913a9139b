//! The loader: each epoch a seeded shuffle of every sample, cut into batches in order, prepared
//! by a background thread a bounded number of batches ahead.

use std::ops::Range;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use headroom_kernels::ops::random::uniform;
use serde::{Deserialize, Serialize};

use super::{Dataset, HostBatch};
use crate::error::Result;

/// Where a batch starts in the data: its epoch, and how many samples of the epoch's order came
/// before it (so a run may change its batch size and keep its place).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct Position {
    /// The epoch, from 0.
    pub epoch: u64,
    /// Samples of the epoch drawn before the batch.
    pub offset: u64,
}

impl Position {
    /// The position after a batch of `samples` from here, in an epoch of `len` samples.
    pub fn after(self, samples: usize, len: usize) -> Self {
        let offset = self.offset + samples as u64;
        if offset >= len as u64 {
            Self {
                epoch: self.epoch + 1,
                offset: 0,
            }
        } else {
            Self {
                epoch: self.epoch,
                offset,
            }
        }
    }
}

/// The order of a dataset's samples in `epoch`: a Fisher-Yates shuffle drawn from
/// `(seed, epoch)`, the same on every run and every resume.
pub fn epoch_order(len: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let stream = uniform(seed, u64::MAX - epoch).to_bits();
    let mut order: Vec<usize> = (0..len).collect();
    for i in (1..len).rev() {
        let j = (uniform(stream, i as u64) * (i + 1) as f64) as usize;
        order.swap(i, j.min(i));
    }
    order
}

/// Batches of a dataset, from a position on, prepared ahead by a thread.
pub struct Loader {
    receiver: Receiver<(Position, Result<HostBatch>)>,
    worker: Option<JoinHandle<()>>,
    batches_per_epoch: u64,
}

impl Loader {
    /// Batches of `batch_size` samples (the last of an epoch may be smaller) of `dataset`,
    /// shuffled by `seed`, from `start` on, `prefetch` ahead; the epochs never end.
    pub fn new(
        dataset: Arc<dyn Dataset>,
        batch_size: usize,
        seed: u64,
        prefetch: usize,
        start: Position,
    ) -> Self {
        Self::sharded(dataset, batch_size, seed, prefetch, start, |len| 0..len)
    }

    /// [`Loader::new`] for a rank of a data-parallel run: each batch is drawn as a whole (the
    /// same on every rank, its position the whole batch's), and only the rank's shard of it is
    /// gathered: `part(len)`, the range of a batch of `len` samples.
    pub fn sharded(
        dataset: Arc<dyn Dataset>,
        batch_size: usize,
        seed: u64,
        prefetch: usize,
        start: Position,
        part: impl Fn(usize) -> Range<usize> + Send + 'static,
    ) -> Self {
        let batch_size = batch_size.max(1);
        let batches_per_epoch = dataset.len().div_ceil(batch_size) as u64;
        let (sender, receiver) = sync_channel(prefetch.max(1));
        let worker = std::thread::Builder::new()
            .name("headroom-loader".into())
            .spawn(move || produce(&*dataset, batch_size, seed, start, &part, &sender))
            .ok();
        Self {
            receiver,
            worker,
            batches_per_epoch,
        }
    }

    /// Batches in one epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        self.batches_per_epoch
    }

    /// The next batch and its position, or the error of a sample the dataset could not give
    /// (none if the loader's thread could not start). After an error the loader goes on with
    /// the next batch.
    pub fn next_batch(&mut self) -> Option<(Position, Result<HostBatch>)> {
        self.receiver.recv().ok()
    }
}

fn produce(
    dataset: &dyn Dataset,
    batch_size: usize,
    seed: u64,
    start: Position,
    part: &dyn Fn(usize) -> Range<usize>,
    sender: &SyncSender<(Position, Result<HostBatch>)>,
) {
    if dataset.is_empty() {
        return;
    }
    let len = dataset.len();
    let mut position = start;
    let mut order = epoch_order(len, seed, position.epoch);
    loop {
        let start = (position.offset as usize).min(len);
        let chunk = &order[start..(start + batch_size).min(len)];
        let shard = part(chunk.len());
        if sender
            .send((position, HostBatch::collect(dataset, &chunk[shard])))
            .is_err()
        {
            return; // the trainer is done
        }
        let next = position.after(chunk.len(), len);
        if next.epoch != position.epoch {
            order = epoch_order(len, seed, next.epoch);
        }
        position = next;
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Unblock the producer (its sends fail once the receiver is gone), then wait for it.
        let (_, receiver) = sync_channel(1);
        drop(std::mem::replace(&mut self.receiver, receiver));
        if let Some(worker) = self.worker.take() {
            worker.join().ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Addition, Dataset};

    #[test]
    fn the_shards_of_a_batch_are_the_whole_batch_cut_in_order() {
        let data: Arc<dyn Dataset> = Arc::new(Addition::new(3, 103, 1, false));
        let mut whole = Loader::new(data.clone(), 10, 7, 2, Position::default());
        let size = 3;
        let mut ranks: Vec<Loader> = (0..size)
            .map(|rank| {
                Loader::sharded(data.clone(), 10, 7, 2, Position::default(), move |len| {
                    len * rank / size..len * (rank + 1) / size
                })
            })
            .collect();
        for _ in 0..12 {
            let (position, batch) = whole.next_batch().unwrap();
            let batch = batch.unwrap();
            let mut joined = Vec::new();
            for rank in &mut ranks {
                let (at, shard) = rank.next_batch().unwrap();
                assert_eq!(at, position);
                joined.extend(shard.unwrap().indices);
            }
            assert_eq!(joined, batch.indices);
        }
    }

    #[test]
    fn every_sample_comes_once_per_epoch_in_a_seeded_order_and_resumes_in_place() {
        let data: Arc<dyn Dataset> = Arc::new(Addition::new(3, 103, 1, false));
        let mut loader = Loader::new(data.clone(), 10, 7, 2, Position::default());
        assert_eq!(loader.batches_per_epoch(), 11);
        let mut seen = Vec::new();
        let mut positions = Vec::new();
        for _ in 0..11 {
            let (position, batch) = loader.next_batch().unwrap();
            positions.push(position);
            seen.extend(batch.unwrap().indices);
        }
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..103).collect::<Vec<_>>(), "each sample once");
        assert_eq!(
            positions[10],
            Position {
                epoch: 0,
                offset: 100
            }
        );
        let (next, second_epoch) = loader.next_batch().unwrap();
        assert_eq!(
            next,
            Position {
                epoch: 1,
                offset: 0
            }
        );
        assert_ne!(
            second_epoch.unwrap().indices,
            seen[..10],
            "each epoch its own order"
        );
        drop(loader);
        let at_40 = Position {
            epoch: 0,
            offset: 40,
        };
        let mut resumed = Loader::new(data.clone(), 10, 7, 2, at_40);
        let (at, batch) = resumed.next_batch().unwrap();
        assert_eq!(at, at_40);
        assert_eq!(batch.unwrap().indices, seen[40..50]);
        // Resumed with another batch size: the epoch goes on where it was, each sample once.
        let mut larger = Loader::new(data, 25, 7, 2, at_40);
        let mut rest = Vec::new();
        for _ in 0..3 {
            let (at, batch) = larger.next_batch().unwrap();
            assert_eq!(at.epoch, 0);
            rest.extend(batch.unwrap().indices);
        }
        assert_eq!(rest, seen[40..]);
        assert_eq!(
            larger.next_batch().unwrap().0,
            Position {
                epoch: 1,
                offset: 0
            }
        );
    }
}
