//! When a planned step's work would be done, on a device whose copies to and from its host
//! tier can run beside its kernels: three queues, each a clock of predicted seconds.
//!
//! The rule, for a GPU: kernels run one after another on the kernels' queue; a copy between
//! the device and its host tier runs on the copy queue once the kernels queued before it and
//! the copies before it are done (a copy stream ordered after the kernels stream); the host's
//! own work (an offloaded optimizer's updates) runs on the host queue. A queue waits for
//! another only where the work needs its result: the kernels for a copy to the device when the
//! array is handed over, the host for a copy to the host when it reads the array, the kernels
//! for the host's work where a host thread's results land. The step takes until the last
//! queue is done. On a CPU, whose host and device share the cores and whose copies are the
//! host's own, the three are one queue: every piece of work adds its seconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::buffer::PendingWork;
use crate::error::Result;

/// One of a timeline's queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The device's kernels.
    Kernels,
    /// Copies between the device and its host tier.
    Copies,
    /// Work the host does itself on its host tier's arrays.
    Host,
}

/// The three queues' clocks, shared by a planned device and its planned host tier.
#[derive(Debug)]
pub(crate) struct Timeline {
    /// Whether copies and host work run beside the kernels (a GPU) or in turn with them.
    beside: bool,
    /// Invariant: each clock only moves forward; on a timeline not `beside`, only `kernels`
    /// moves.
    clocks: Mutex<[f64; 3]>,
    /// Work queued and waits made so far, on every queue.
    events: AtomicU64,
}

impl Timeline {
    /// Empty queues, running beside each other when `beside`.
    pub fn new(beside: bool) -> Arc<Self> {
        Arc::new(Self {
            beside,
            clocks: Mutex::new([0.0; 3]),
            events: AtomicU64::new(0),
        })
    }

    /// The queue `lane` work runs on here.
    fn queue(&self, lane: Lane) -> usize {
        match (self.beside, lane) {
            (false, _) | (true, Lane::Kernels) => 0,
            (true, Lane::Copies) => 1,
            (true, Lane::Host) => 2,
        }
    }

    /// Adds `seconds` of work to `lane`'s queue; returns when it is done.
    pub fn run(&self, lane: Lane, seconds: f64) -> f64 {
        self.events.fetch_add(1, Ordering::Relaxed);
        let mut clocks = self.clocks.lock();
        let queue = &mut clocks[self.queue(lane)];
        *queue += seconds;
        *queue
    }

    /// Queues a copy of `seconds` after the kernels queued so far and the copies before it;
    /// returns when it is done.
    pub fn copy(&self, seconds: f64) -> f64 {
        self.events.fetch_add(1, Ordering::Relaxed);
        let mut clocks = self.clocks.lock();
        let (kernels, copies) = (self.queue(Lane::Kernels), self.queue(Lane::Copies));
        clocks[copies] = clocks[copies].max(clocks[kernels]) + seconds;
        clocks[copies]
    }

    /// `lane`'s queue waits until `at`.
    pub fn wait(&self, lane: Lane, at: f64) {
        self.events.fetch_add(1, Ordering::Relaxed);
        let mut clocks = self.clocks.lock();
        let queue = &mut clocks[self.queue(lane)];
        *queue = queue.max(at);
    }

    /// `waiting`'s queue waits for the work queued so far on `lane`'s.
    pub fn join(&self, waiting: Lane, lane: Lane) {
        let at = self.clocks.lock()[self.queue(lane)];
        self.wait(waiting, at);
    }

    /// How many pieces of work were queued and waits made so far.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// When the work queued so far is done: the latest clock.
    pub fn done(&self) -> f64 {
        self.clocks.lock().iter().copied().fold(0.0, f64::max)
    }
}

/// A planned copy into an array, done at `at`: the queue `lane` waits for it where the array
/// is handed over, read by the host or written ([`PendingWork`] of a planned buffer).
#[derive(Debug)]
pub(crate) struct PlannedCopy {
    pub timeline: Arc<Timeline>,
    pub lane: Lane,
    pub at: f64,
}

impl PendingWork for PlannedCopy {
    fn wait(&self) -> Result<()> {
        self.timeline.wait(self.lane, self.at);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beside_kernels_a_copy_waits_only_for_what_it_needs_and_in_turn_everything_adds_up() {
        let gpu = Timeline::new(true);
        gpu.run(Lane::Kernels, 1.0);
        // A copy after a second of kernels, then two seconds of kernels beside it.
        let arrives = gpu.copy(0.5);
        assert_eq!(arrives, 1.5);
        gpu.run(Lane::Kernels, 2.0);
        assert_eq!(gpu.done(), 3.0);
        // The host reads the copy, and works for four seconds beside the kernels.
        gpu.wait(Lane::Host, arrives);
        gpu.run(Lane::Host, 4.0);
        assert_eq!(gpu.done(), 5.5);
        // The kernels wait for the host's results.
        gpu.join(Lane::Kernels, Lane::Host);
        gpu.run(Lane::Kernels, 1.0);
        assert_eq!(gpu.done(), 6.5);
        // A copy queued now starts after those kernels.
        assert_eq!(gpu.copy(0.5), 7.0);

        let cpu = Timeline::new(false);
        cpu.run(Lane::Kernels, 1.0);
        let arrives = cpu.copy(0.5);
        cpu.run(Lane::Kernels, 2.0);
        cpu.wait(Lane::Host, arrives);
        cpu.run(Lane::Host, 4.0);
        cpu.join(Lane::Kernels, Lane::Host);
        assert_eq!(cpu.done(), 7.5);
    }
}
