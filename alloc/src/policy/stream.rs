//! Streams: which queue of device work uses a block, and when a block freed on one stream may
//! serve another.
//!
//! The rule, the one PyTorch's caching allocator keeps with `record_stream`, but with reuse
//! across streams once it is safe: a block belongs to the stream it was allocated on. Freed, it
//! serves its own stream again at once (that stream's later work runs after its earlier work),
//! and every other stream only once the work queued on its stream before the free has completed:
//! an event is recorded on that stream at the free, and the block goes back to the heap when
//! the event has completed (polled on every allocation and free, synchronized before an
//! out-of-memory is reported). A program that uses one stream records no event and pays
//! nothing. When a second stream first allocates, the work queued so far on the streams already
//! used is waited for once, since the blocks freed before then carry no event.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::policy::source::SourceError;

/// A queue of device work whose blocks the allocator tracks, by number (a CUDA stream, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamId(pub u32);

impl StreamId {
    /// The stream of [`Allocator::allocate`](crate::Allocator::allocate).
    pub const DEFAULT: StreamId = StreamId(0);
}

/// A point in a stream's work, recorded by a [`StreamClock`], by the clock's own number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamEvent(pub u64);

/// What tells the allocator whether the work queued on a stream has completed: a CUDA
/// context's events, or a test's clock.
pub trait StreamClock: Send {
    /// Records an event after the work queued on `stream` so far.
    fn record(&mut self, stream: StreamId) -> Result<StreamEvent, SourceError>;

    /// Whether the work queued before `event` has completed; never waits. The allocator forgets
    /// an event once it has answered true.
    fn completed(&mut self, event: StreamEvent) -> Result<bool, SourceError>;

    /// Waits until the work queued before `event` has completed.
    fn synchronize(&mut self, event: StreamEvent) -> Result<(), SourceError>;
}

/// A block freed on its stream, waiting for the work queued there before the free.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    /// Its address.
    pub addr: u64,
    /// Recorded on its stream at the free.
    pub event: StreamEvent,
}

/// The streams of an allocator that has a clock.
pub(crate) struct Streams {
    clock: Box<dyn StreamClock>,
    /// Every stream that has allocated, in the order of first use.
    used: Vec<StreamId>,
    /// The stream of each live block not on [`StreamId::DEFAULT`].
    owners: HashMap<u64, StreamId>,
    /// Per stream, the blocks freed on it and not yet back in the heap, oldest first. Events on
    /// one stream complete in the order they were recorded.
    pending: HashMap<StreamId, VecDeque<Pending>>,
    /// The stream of every address in `pending`.
    pending_at: HashMap<u64, StreamId>,
}

impl Streams {
    /// Streams told apart by `clock`: none used yet, or the default stream when blocks were
    /// `allocated_before`, whose work a new stream must wait for.
    pub fn new(clock: Box<dyn StreamClock>, allocated_before: bool) -> Self {
        Self {
            clock,
            used: if allocated_before {
                vec![StreamId::DEFAULT]
            } else {
                Vec::new()
            },
            owners: HashMap::new(),
            pending: HashMap::new(),
            pending_at: HashMap::new(),
        }
    }

    /// Notes that `stream` allocates. The first allocation of a second or later stream waits for
    /// the work queued so far on the others (their earlier frees carry no event).
    pub fn enter(&mut self, stream: StreamId) -> Result<(), SourceError> {
        if self.used.contains(&stream) {
            return Ok(());
        }
        for &earlier in &self.used {
            let event = self.clock.record(earlier)?;
            self.clock.synchronize(event)?;
        }
        self.used.push(stream);
        Ok(())
    }

    /// Whether more than one stream has allocated, so that frees must record events.
    pub fn shared(&self) -> bool {
        self.used.len() > 1
    }

    /// Notes that the block at `addr` was allocated on `stream`.
    pub fn own(&mut self, addr: u64, stream: StreamId) {
        if stream != StreamId::DEFAULT {
            self.owners.insert(addr, stream);
        }
    }

    /// The stream of the live block at `addr`.
    pub fn stream_of(&self, addr: u64) -> StreamId {
        self.owners.get(&addr).copied().unwrap_or(StreamId::DEFAULT)
    }

    /// Forgets the stream of the block at `addr`, freed.
    pub fn disown(&mut self, addr: u64) {
        self.owners.remove(&addr);
    }

    /// Takes over what `old` knew (a clock replaced): the streams used, the blocks' streams and
    /// the blocks waiting. The old clock's events are waited for first, since this clock cannot
    /// tell them.
    pub fn adopt(&mut self, old: &mut Streams) -> Result<(), SourceError> {
        for queue in old.pending.values() {
            for pending in queue {
                old.clock.synchronize(pending.event)?;
            }
        }
        // Their work has completed; events of this clock say so, and the next settling frees
        // them.
        let mut pending: HashMap<StreamId, VecDeque<Pending>> = HashMap::new();
        for (&addr, &stream) in &old.pending_at {
            let event = self.clock.record(stream)?;
            pending
                .entry(stream)
                .or_default()
                .push_back(Pending { addr, event });
        }
        self.pending = pending;
        self.pending_at = std::mem::take(&mut old.pending_at);
        self.used = std::mem::take(&mut old.used);
        self.owners = std::mem::take(&mut old.owners);
        Ok(())
    }

    /// Whether the block at `addr` was freed and waits for its stream.
    pub fn is_pending(&self, addr: u64) -> bool {
        self.pending_at.contains_key(&addr)
    }

    /// Holds the block at `addr`, just freed on `stream`, until the work queued there completes.
    pub fn hold(&mut self, addr: u64, stream: StreamId) -> Result<(), SourceError> {
        let event = self.clock.record(stream)?;
        self.pending
            .entry(stream)
            .or_default()
            .push_back(Pending { addr, event });
        self.pending_at.insert(addr, stream);
        Ok(())
    }

    /// Takes a block `stream` freed that `fits` accepts, oldest first, out of waiting.
    pub fn reuse(&mut self, stream: StreamId, fits: impl Fn(u64) -> bool) -> Option<u64> {
        let queue = self.pending.get_mut(&stream)?;
        let index = queue.iter().position(|pending| fits(pending.addr))?;
        let pending = queue.remove(index)?;
        self.pending_at.remove(&pending.addr);
        Some(pending.addr)
    }

    /// Takes out of waiting, and returns, every block whose stream's work has completed; with
    /// `wait`, waits for all of them.
    pub fn completed(&mut self, wait: bool) -> Result<Vec<u64>, SourceError> {
        let mut done = Vec::new();
        for queue in self.pending.values_mut() {
            while let Some(&Pending { addr, event }) = queue.front() {
                if wait {
                    self.clock.synchronize(event)?;
                } else if !self.clock.completed(event)? {
                    break;
                }
                queue.pop_front();
                self.pending_at.remove(&addr);
                done.push(addr);
            }
        }
        Ok(done)
    }

    /// Whether any freed block waits.
    pub fn any_pending(&self) -> bool {
        !self.pending_at.is_empty()
    }

    /// Bytes waiting, given each block's size.
    pub fn pending_addrs(&self) -> impl Iterator<Item = u64> + '_ {
        self.pending_at.keys().copied()
    }
}
