//! The allocator's side of streams: allocating on a stream, holding a block freed on a busy
//! stream, handing it back to its own stream, and freeing it into the heap once its stream's
//! work has completed. The rule is in the `stream` module.

use super::Allocator;
use crate::bookkeeping::error::{Error, InvalidFreeReason, Result};
use crate::bookkeeping::heap::Allocation;
use crate::bookkeeping::size::round_size;
use crate::bookkeeping::tag::Tag;
use crate::policy::source::SourceError;
use crate::policy::stream::{StreamClock, StreamId, Streams};

impl Allocator {
    /// Allocates `size` bytes for `tag`, for work queued on `stream` (see the [`stream`
    /// rules](crate::StreamClock)): a block `stream` freed serves it again at once, and one freed
    /// on another stream only once the work queued there before the free has completed. Streams
    /// other than [`StreamId::DEFAULT`] need a clock ([`set_stream_clock`](Self::set_stream_clock));
    /// without one they are [`Error::InvalidConfig`].
    ///
    /// ```
    /// use headroom_alloc::{Allocator, AllocatorConfig, StreamId, Tag, VirtualMemory};
    /// let mut alloc = Allocator::new(VirtualMemory::new(1 << 20), AllocatorConfig::default())?;
    /// assert!(alloc.allocate_on(256, Tag::OTHER, StreamId(1)).is_err()); // no clock
    /// # Ok::<(), headroom_alloc::Error>(())
    /// ```
    pub fn allocate_on(&mut self, size: u64, tag: Tag, stream: StreamId) -> Result<Allocation> {
        let Some(streams) = &mut self.streams else {
            if stream == StreamId::DEFAULT {
                return self.allocate_counted(size, tag);
            }
            return Err(Error::InvalidConfig(format!(
                "allocating on stream {} needs a stream clock (Allocator::set_stream_clock)",
                stream.0
            )));
        };
        streams.enter(stream).map_err(clock_error)?;
        self.settle_streams(false)?;
        let allocation = match self.reuse_on(stream, size, tag) {
            Some(allocation) => allocation,
            None => self.allocate_counted(size, tag)?,
        };
        if let Some(streams) = &mut self.streams {
            streams.own(allocation.addr, stream);
        }
        Ok(allocation)
    }

    /// Sets what tells the allocator when work queued on a stream has completed, so that blocks
    /// can be allocated on several streams ([`allocate_on`](Self::allocate_on)). Blocks
    /// allocated before belong to [`StreamId::DEFAULT`]. A program of one stream needs none.
    /// Replacing a clock waits for the events of the old one; its failure is an
    /// [`Error::Source`], and leaves the old clock in place.
    pub fn set_stream_clock(&mut self, clock: impl StreamClock + 'static) -> Result<()> {
        let mut streams = Streams::new(Box::new(clock), self.counters.allocations > 0);
        if let Some(mut old) = self.streams.take()
            && let Err(failure) = streams.adopt(&mut old)
        {
            self.streams = Some(old);
            return Err(clock_error(failure));
        }
        self.streams = Some(streams);
        Ok(())
    }

    /// [`free`](Self::free) with a stream clock: while several streams allocate, the block waits
    /// for the work queued on its stream before it goes back to the heap.
    pub(super) fn free_on_stream(&mut self, addr: u64) -> Result<Allocation> {
        let Some(streams) = &mut self.streams else {
            return self.free(addr);
        };
        if streams.is_pending(addr) {
            let reason = InvalidFreeReason::DoubleFree;
            return Err(Error::InvalidFree { addr, reason });
        }
        let held = match self.heap.allocation(addr) {
            Some(allocation) if streams.shared() => {
                let stream = streams.stream_of(addr);
                streams.hold(addr, stream).map_err(clock_error)?;
                allocation
            }
            _ => self.free_and_count(addr)?,
        };
        if let Some(streams) = &mut self.streams {
            streams.disown(addr);
        }
        if let Some(trace) = &mut self.trace {
            trace.free(addr);
        }
        self.settle_streams(false)?;
        self.debug_validate();
        Ok(held)
    }

    /// Gives a block that `stream` freed, and that the split rule would hand out whole for
    /// this request, to a request of `size` bytes for `tag` on the same stream: its earlier work
    /// runs before any later work queued there.
    fn reuse_on(&mut self, stream: StreamId, size: u64, tag: Tag) -> Option<Allocation> {
        let rounded = round_size(size)?;
        let slack = self.config.max_internal_fragmentation;
        let heap = &self.heap;
        let fits = |addr: u64| {
            heap.allocation(addr).is_some_and(|held| {
                held.size >= rounded
                    && held.size < rounded.saturating_mul(2)
                    && held.size - rounded < slack.max(1)
            })
        };
        let addr = self.streams.as_mut()?.reuse(stream, fits)?;
        let before = self.heap.relabel(addr, size, tag)?;
        self.count_freed(addr, before.size, before.requested, before.tag);
        self.count_allocated(addr, before.size, size, rounded, tag);
        if let Some(trace) = &mut self.trace {
            trace.alloc(Some(addr), size, tag);
        }
        self.debug_validate();
        Some(Allocation {
            addr,
            size: before.size,
            requested: size,
            tag,
        })
    }

    /// Frees into the heap every block whose stream's work has completed, waiting for it with
    /// `wait`; returns the bytes freed.
    pub(super) fn settle_streams(&mut self, wait: bool) -> Result<u64> {
        let done = match &mut self.streams {
            Some(streams) if streams.any_pending() => {
                streams.completed(wait).map_err(clock_error)?
            }
            _ => return Ok(0),
        };
        let mut bytes = 0;
        for addr in done {
            bytes += self.free_and_count(addr)?.size;
        }
        Ok(bytes)
    }

    /// Bytes freed on a stream and waiting for the work queued there (counted as in use until
    /// then).
    pub(super) fn held_for_streams(&self) -> u64 {
        let Some(streams) = &self.streams else {
            return 0;
        };
        streams
            .pending_addrs()
            .filter_map(|addr| self.heap.allocation(addr))
            .map(|held| held.size)
            .sum()
    }
}

/// A stream clock's failure, as the error the call fails with.
fn clock_error(failure: SourceError) -> Error {
    Error::Source {
        source_name: "stream clock".to_owned(),
        op: "track streams for",
        bytes: 0,
        message: failure.message,
    }
}
