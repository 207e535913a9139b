//! The model's stream clock: work on a stream runs only when a scenario says so.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::policy::source::SourceError;
use crate::policy::stream::{StreamClock, StreamEvent, StreamId};

/// A clock shared by a scenario and its allocator. Each allocation on a stream queues an item of
/// work there (a kernel that uses the block); [`Action::RunStream`](super::Action::RunStream)
/// runs a stream's queued work, and the allocator's synchronizations run it up to their events.
#[derive(Clone, Default)]
pub struct ModelClock(Arc<Mutex<Counts>>);

/// Items of work queued and run, per stream, and the events recorded.
#[derive(Default)]
struct Counts {
    queued: HashMap<StreamId, u64>,
    done: HashMap<StreamId, u64>,
    /// Each event's stream and the items of work it follows.
    events: Vec<(StreamId, u64)>,
}

impl ModelClock {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        // A poisoned lock only means another test thread panicked; the counts stay whole.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues an item of work on `stream`; returns how many are queued there now.
    pub fn queue(&self, stream: StreamId) -> u64 {
        let mut counts = self.counts();
        let queued = counts.queued.entry(stream).or_default();
        *queued += 1;
        *queued
    }

    /// Items of work queued on `stream` so far.
    pub fn queued(&self, stream: StreamId) -> u64 {
        self.counts().queued.get(&stream).copied().unwrap_or(0)
    }

    /// Whether the first `items` of `stream`'s work have run.
    pub fn has_run(&self, stream: StreamId, items: u64) -> bool {
        self.counts().done.get(&stream).copied().unwrap_or(0) >= items
    }

    /// Runs all the work queued on `stream`.
    pub fn run(&self, stream: StreamId) {
        let mut counts = self.counts();
        let queued = counts.queued.get(&stream).copied().unwrap_or(0);
        counts.done.insert(stream, queued);
    }

    /// An event's stream and the work it follows, or an error for one never recorded.
    fn event(&self, event: StreamEvent) -> Result<(StreamId, u64), SourceError> {
        let counts = self.counts();
        usize::try_from(event.0)
            .ok()
            .and_then(|index| counts.events.get(index).copied())
            .ok_or_else(|| SourceError::fault(format!("event {} was never recorded", event.0)))
    }
}

impl StreamClock for ModelClock {
    fn record(&mut self, stream: StreamId) -> Result<StreamEvent, SourceError> {
        let mut counts = self.counts();
        let queued = counts.queued.get(&stream).copied().unwrap_or(0);
        counts.events.push((stream, queued));
        Ok(StreamEvent(counts.events.len() as u64 - 1))
    }

    fn completed(&mut self, event: StreamEvent) -> Result<bool, SourceError> {
        let (stream, items) = self.event(event)?;
        Ok(self.has_run(stream, items))
    }

    fn synchronize(&mut self, event: StreamEvent) -> Result<(), SourceError> {
        let (stream, items) = self.event(event)?;
        let mut counts = self.counts();
        let done = counts.done.entry(stream).or_default();
        *done = (*done).max(items);
        Ok(())
    }
}
