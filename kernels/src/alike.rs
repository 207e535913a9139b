//! Loops of like iterations, planned once: a meta device plans an iteration that repeats the
//! one before it, from the same memory, by pricing that iteration's kernels again instead of
//! running it. A fused head's chunks are such a loop: half a million tokens in chunks of eight
//! rows made a planned step of a million kernel calls.

use crate::device::Device;
use crate::work::Kernel;

/// What a device's memory and queues look like between two iterations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    in_use: u64,
    reserved: u64,
    requested: u64,
    /// Work queued and waits made on the device's timeline so far.
    events: u64,
}

impl Device {
    /// Runs `body` on each of `items`, in order. On a meta device, an item whose `kind` equals
    /// the previous item's is not run when that item's run left the memory as it found it
    /// (every allocation freed, nothing reserved) and queued nothing but its own kernels: its
    /// kernels are planned again, which plans the same peak and time. Elsewhere every item runs.
    pub fn for_each_alike<T, K: PartialEq, E>(
        &self,
        items: &[T],
        kind: impl Fn(&T) -> K,
        mut body: impl FnMut(&T) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(log) = self.work_log() else {
            return items.iter().try_for_each(body);
        };
        let mark = || {
            let stats = self.allocator().stats();
            Mark {
                in_use: stats.in_use,
                reserved: stats.reserved,
                requested: stats.requested_in_use,
                events: log.timeline().events(),
            }
        };
        // The previous item's kind and kernels, when its run can stand for the next, and how
        // many items since stood for by it.
        let mut last: Option<(K, Vec<Kernel>)> = None;
        let mut owed = 0;
        for item in items {
            let key = kind(item);
            if last.as_ref().is_some_and(|(k, _)| *k == key) {
                owed += 1;
                continue;
            }
            if let Some((_, kernels)) = &last {
                log.replay(kernels, std::mem::take(&mut owed));
            }
            let before = mark();
            log.capture();
            let ran = body(item);
            let kernels = log.captured();
            ran?;
            let after = mark();
            let alone = after.events - before.events == kernels.len() as u64;
            let restored = Mark { events: 0, ..after }
                == Mark {
                    events: 0,
                    ..before
                };
            last = (alone && restored).then_some((key, kernels));
        }
        if let Some((_, kernels)) = &last {
            log.replay(kernels, owed);
        }
        Ok(())
    }
}
