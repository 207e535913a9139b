//! The allocator: best fit with coalescing over regions from a memory source.

use std::collections::BTreeMap;

use crate::address_map::AddressMap;
use crate::bins::Bins;
use crate::chunk::{Chunk, ChunkArena, ChunkId, NONE};
use crate::config::{AllocatorConfig, FIRST_REGION, Growth};
use crate::error::{Error, InvalidFreeReason, Result};
use crate::free_set::FreeKey;
use crate::growth::GrowFailure;
use crate::history::{Event, EventKind, History};
use crate::report::OomCause;
use crate::size::{GRANULE, round_size};
use crate::source::MemorySource;
use crate::stats::{Counters, TagTable};
use crate::tag::Tag;
use crate::trace::TraceWriter;

/// A live allocation: where it is, how big, and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// First byte; a multiple of 256.
    pub addr: u64,
    /// Bytes reserved for it: the request rounded up to 256, or more when a free chunk was
    /// handed out whole.
    pub size: u64,
    /// Bytes the caller asked for.
    pub requested: u64,
    /// What it holds.
    pub tag: Tag,
}

/// A best-fit-with-coalescing allocator over any address space (TensorFlow's BFC design).
///
/// It only does bookkeeping over `u64` addresses: regions come from a [`MemorySource`], and the
/// allocator cuts them into chunks. For use from several threads, see
/// [`SharedAllocator`](crate::SharedAllocator).
///
/// ```
/// use headroom_alloc::{Allocator, AllocatorConfig, Tag, VirtualMemory};
/// let mut alloc = Allocator::new(VirtualMemory::new(1 << 30), AllocatorConfig::default())?;
/// let a = alloc.allocate(1000, Tag::ACTIVATIONS)?;
/// assert_eq!(a.size, 1024);
/// alloc.free(a.addr)?;
/// assert_eq!(alloc.stats().in_use, 0);
/// # Ok::<(), headroom_alloc::Error>(())
/// ```
pub struct Allocator {
    pub(crate) source: Box<dyn MemorySource>,
    pub(crate) config: AllocatorConfig,
    /// The most bytes that may be reserved; a positive multiple of 256.
    pub(crate) limit: u64,
    pub(crate) chunks: ChunkArena,
    /// The start of every chunk, free or in use, to its id.
    pub(crate) by_addr: AddressMap,
    /// Every free chunk, and nothing else.
    pub(crate) bins: Bins,
    /// Region base to region size; regions never overlap.
    pub(crate) regions: BTreeMap<u64, u64>,
    /// The size the next on-demand region starts from (doubled as needed).
    pub(crate) next_region_size: u64,
    /// Under [`Growth::Expandable`], the region that grows in place and its last chunk.
    pub(crate) growable: Option<Growable>,
    pub(crate) counters: Counters,
    pub(crate) tags: TagTable,
    pub(crate) history: Option<History>,
    /// Successful allocations left before an injected OOM (`Some(0)`: the next one fails).
    pub(crate) injected_oom: Option<u64>,
    /// Where every allocation and free is streamed, when tracing is on.
    pub(crate) trace: Option<TraceWriter>,
}

/// The region an expandable allocator grows, and its last chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Growable {
    /// The region's base address.
    pub base: u64,
    /// The chunk whose `next` is `NONE` in that region; kept up to date by split and merge.
    pub tail: ChunkId,
}

impl std::fmt::Debug for Allocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocator")
            .field("source", &self.source.name())
            .field("limit", &self.limit)
            .field("in_use", &self.counters.in_use)
            .field("reserved", &self.counters.reserved)
            .field("regions", &self.regions.len())
            .finish_non_exhaustive()
    }
}

impl Allocator {
    /// An allocator over `source`. With [`Growth::Preallocate`] the whole limit is reserved now
    /// or, where the source refuses that much (a GPU whose context and other processes hold
    /// some), as much as it gives, 10% less at a time as TensorFlow backs off; a source that
    /// gives nothing is an error.
    pub fn new(source: impl MemorySource + 'static, config: AllocatorConfig) -> Result<Self> {
        Self::from_boxed(Box::new(source), config)
    }

    /// Like [`new`](Self::new), for a source already boxed.
    pub fn from_boxed(source: Box<dyn MemorySource>, config: AllocatorConfig) -> Result<Self> {
        let limit = config.resolve_limit(source.capacity())?;
        let history = (config.history_capacity > 0).then(|| History::new(config.history_capacity));
        let mut allocator = Self {
            source,
            limit,
            chunks: ChunkArena::default(),
            by_addr: AddressMap::default(),
            bins: Bins::default(),
            regions: BTreeMap::new(),
            next_region_size: limit.min(FIRST_REGION),
            growable: None,
            counters: Counters::default(),
            tags: TagTable::default(),
            history,
            injected_oom: None,
            trace: None,
            config,
        };
        if allocator.config.growth == Growth::Preallocate {
            let (base, size) = match allocator.reserve_backing_off(limit, GRANULE) {
                Ok(region) => region,
                Err(GrowFailure::Fault(err)) => return Err(err),
                Err(GrowFailure::Oom(cause)) => {
                    let message = match cause {
                        OomCause::SourceRefused(message) => message,
                        other => format!("{other:?}"),
                    };
                    return Err(Error::Source {
                        source_name: allocator.source.name().to_owned(),
                        op: "reserve",
                        bytes: limit,
                        message,
                    });
                }
            };
            allocator.add_region(base, size)?;
        }
        allocator.debug_validate();
        Ok(allocator)
    }

    /// Allocates `size` bytes for `tag`. A zero-size request gets a unique 256-byte chunk.
    ///
    /// Takes the best-fitting free chunk; failing that, grows by a new region; failing that,
    /// releases entirely free regions and tries again (if garbage collection is on). A failure
    /// is [`Error::OutOfMemory`] with a report, and leaves the allocator as it was.
    pub fn allocate(&mut self, size: u64, tag: Tag) -> Result<Allocation> {
        let result = self.allocate_unchecked(size, tag);
        if let (Ok(_), Some(left)) = (&result, &mut self.injected_oom) {
            *left -= 1;
        }
        if let Some(trace) = &mut self.trace {
            match &result {
                Ok(allocation) => trace.alloc(Some(allocation.addr), size, tag),
                Err(Error::OutOfMemory(report)) if report.cause != OomCause::Injected => {
                    trace.alloc(None, size, tag);
                }
                Err(_) => {}
            }
        }
        self.debug_validate();
        result
    }

    /// Allocates `size` bytes for `tag` if a free chunk or a new region can hold them; otherwise
    /// returns `None` and changes nothing: no cached region is released and no out-of-memory
    /// is counted or recorded. For optional scratch memory, such as a GEMM library's
    /// workspace, whose absence only slows the caller down. [`inject_oom`](Self::inject_oom)
    /// does not count these.
    ///
    /// ```
    /// use headroom_alloc::{Allocator, AllocatorConfig, Tag, VirtualMemory};
    /// let mut alloc = Allocator::new(VirtualMemory::new(1 << 20), AllocatorConfig::default())?;
    /// assert!(alloc.try_allocate(4096, Tag::WORKSPACE).is_some());
    /// assert!(alloc.try_allocate(2 << 20, Tag::WORKSPACE).is_none());
    /// assert_eq!(alloc.stats().ooms, 0);
    /// # Ok::<(), headroom_alloc::Error>(())
    /// ```
    pub fn try_allocate(&mut self, size: u64, tag: Tag) -> Option<Allocation> {
        let rounded = round_size(size).filter(|&rounded| rounded <= self.limit)?;
        let allocation = self.take_best_fit(rounded, size, tag).or_else(|| {
            self.grow(rounded).ok()?;
            self.take_best_fit(rounded, size, tag)
        });
        if let (Some(trace), Some(allocation)) = (&mut self.trace, &allocation) {
            trace.alloc(Some(allocation.addr), size, tag);
        }
        self.debug_validate();
        allocation
    }

    /// Makes an allocation fail on purpose, to test recovery from OOM: after `successes` more
    /// successful allocations, the next one returns [`Error::OutOfMemory`] with cause
    /// [`OomCause::Injected`] and a report of the real state, and changes nothing. One shot.
    ///
    /// ```
    /// use headroom_alloc::{Allocator, AllocatorConfig, Tag, VirtualMemory};
    /// let mut alloc = Allocator::new(VirtualMemory::new(1 << 20), AllocatorConfig::default())?;
    /// alloc.inject_oom(1);
    /// assert!(alloc.allocate(256, Tag::OTHER).is_ok());
    /// assert!(alloc.allocate(256, Tag::OTHER).unwrap_err().is_out_of_memory());
    /// assert!(alloc.allocate(256, Tag::OTHER).is_ok());
    /// # Ok::<(), headroom_alloc::Error>(())
    /// ```
    pub fn inject_oom(&mut self, successes: u64) {
        self.injected_oom = Some(successes);
    }

    fn allocate_unchecked(&mut self, size: u64, tag: Tag) -> Result<Allocation> {
        if self.injected_oom == Some(0) {
            self.injected_oom = None;
            return Err(self.out_of_memory(size, round_size(size), tag, OomCause::Injected));
        }
        let rounded = match round_size(size) {
            Some(rounded) if rounded <= self.limit => rounded,
            rounded => return Err(self.out_of_memory(size, rounded, tag, OomCause::ExceedsLimit)),
        };
        if let Some(allocation) = self.take_best_fit(rounded, size, tag) {
            return Ok(allocation);
        }
        let mut cause = match self.grow(rounded) {
            Ok(()) => return self.take_after_growth(rounded, size, tag),
            Err(GrowFailure::Oom(cause)) => cause,
            Err(GrowFailure::Fault(err)) => return Err(err),
        };
        if self.config.garbage_collection && self.release_free_regions() > 0 {
            match self.grow(rounded) {
                Ok(()) => return self.take_after_growth(rounded, size, tag),
                Err(GrowFailure::Oom(retry_cause)) => cause = retry_cause,
                Err(GrowFailure::Fault(err)) => return Err(err),
            }
        }
        Err(self.out_of_memory(size, Some(rounded), tag, cause))
    }

    /// After a successful `grow`, the new region alone fits the request.
    fn take_after_growth(&mut self, rounded: u64, size: u64, tag: Tag) -> Result<Allocation> {
        self.take_best_fit(rounded, size, tag).ok_or_else(|| {
            Error::Corrupted(format!(
                "a region grown for {rounded} bytes did not fit the request"
            ))
        })
    }

    /// Hands out the best-fitting free chunk, split if the split rule says so.
    fn take_best_fit(&mut self, rounded: u64, requested: u64, tag: Tag) -> Option<Allocation> {
        let found = self.bins.best_fit(rounded)?;
        let FreeKey { size, addr, id } = found.key();
        let remainder = size - rounded;
        // Never split off an empty remainder: a zero-size chunk would share its address with the
        // next chunk (with `max_internal_fragmentation` 0, an exact fit meets the cap).
        let worth_splitting = size >= rounded.saturating_mul(2)
            || remainder >= self.config.max_internal_fragmentation;
        if remainder > 0 && worth_splitting {
            let rest = self.split(id, rounded);
            self.bins.replace_found(found, rest);
        } else {
            self.bins.take(found);
        }
        let chunk = &mut self.chunks[id];
        chunk.in_use = true;
        chunk.requested = requested;
        chunk.tag = tag;
        let size = chunk.size;

        let counters = &mut self.counters;
        counters.allocations += 1;
        counters.in_use += size;
        counters.peak_in_use = counters.peak_in_use.max(counters.in_use);
        counters.requested_in_use += requested;
        counters.packed_in_use += rounded;
        self.tags.add(tag, size);
        self.record(EventKind::Alloc, addr, size, requested, Some(tag));
        Some(Allocation {
            addr,
            size,
            requested,
            tag,
        })
    }

    /// Cuts free chunk `id` to `size` bytes; the rest becomes a new free chunk, whose bin key is
    /// returned for the caller to file.
    fn split(&mut self, id: ChunkId, size: u64) -> FreeKey {
        let chunk = self.chunks[id];
        let rest = Chunk {
            addr: chunk.addr + size,
            size: chunk.size - size,
            requested: 0,
            prev: id,
            next: chunk.next,
            tag: Tag::OTHER,
            in_use: false,
        };
        let rest_id = self.chunks.insert(rest);
        if rest.next != NONE {
            self.chunks[rest.next].prev = rest_id;
        } else {
            self.replace_growable_tail(id, rest_id);
        }
        let chunk = &mut self.chunks[id];
        chunk.size = size;
        chunk.next = rest_id;
        self.by_addr.insert(rest.addr, rest_id);
        FreeKey {
            size: rest.size,
            addr: rest.addr,
            id: rest_id,
        }
    }

    /// Frees the allocation starting at `addr` and merges it with free neighbours.
    ///
    /// An address that is not the start of a live allocation is [`Error::InvalidFree`], and
    /// changes nothing.
    pub fn free(&mut self, addr: u64) -> Result<Allocation> {
        let result = self.free_unchecked(addr);
        if let (Some(trace), Ok(_)) = (&mut self.trace, &result) {
            trace.free(addr);
        }
        self.debug_validate();
        result
    }

    fn free_unchecked(&mut self, addr: u64) -> Result<Allocation> {
        let id = match self.by_addr.get(addr) {
            Some(id) if self.chunks[id].in_use => id,
            Some(_) => {
                let reason = InvalidFreeReason::DoubleFree;
                return Err(Error::InvalidFree { addr, reason });
            }
            None => {
                let reason = if self.region_containing(addr).is_some() {
                    InvalidFreeReason::InteriorAddress
                } else {
                    InvalidFreeReason::UnknownAddress
                };
                return Err(Error::InvalidFree { addr, reason });
            }
        };
        let chunk = &mut self.chunks[id];
        chunk.in_use = false;
        let freed = Allocation {
            addr,
            size: chunk.size,
            requested: std::mem::take(&mut chunk.requested),
            tag: chunk.tag,
        };
        self.counters.frees += 1;
        self.counters.in_use -= freed.size;
        self.counters.requested_in_use -= freed.requested;
        // The request was rounded without overflow when it was allocated.
        self.counters.packed_in_use -= round_size(freed.requested).unwrap_or(0);
        self.tags.sub(freed.tag, freed.size);
        self.record(
            EventKind::Free,
            addr,
            freed.size,
            freed.requested,
            Some(freed.tag),
        );
        self.coalesce(id);
        Ok(freed)
    }

    /// Files free chunk `id` (in no bin yet), merged with its free neighbours, whose bin entries
    /// are replaced in place where possible.
    fn coalesce(&mut self, id: ChunkId) {
        let chunk = &self.chunks[id];
        let (prev, next) = (chunk.prev, chunk.next);
        let next_free = next != NONE && !self.chunks[next].in_use;
        let prev_free = prev != NONE && !self.chunks[prev].in_use;
        match (prev_free, next_free) {
            (false, false) => self.bins.insert(self.key(id)),
            (false, true) => {
                let old = self.key(next);
                self.merge_into_lower(id);
                self.bins.replace(old, self.key(id));
            }
            (true, false) => {
                let old = self.key(prev);
                self.merge_into_lower(prev);
                self.bins.replace(old, self.key(prev));
            }
            (true, true) => {
                let (old_prev, old_next) = (self.key(prev), self.key(next));
                self.bins.remove(old_next);
                self.merge_into_lower(id);
                self.merge_into_lower(prev);
                self.bins.replace(old_prev, self.key(prev));
            }
        }
    }

    /// Records that the last chunk of a region changed from `old` to `new`: when `old` was the
    /// growable region's last chunk, `new` is now.
    #[inline]
    pub(crate) fn replace_growable_tail(&mut self, old: ChunkId, new: ChunkId) {
        if let Some(growable) = &mut self.growable
            && growable.tail == old
        {
            growable.tail = new;
        }
    }

    /// The bin key of chunk `id`.
    #[inline]
    pub(crate) fn key(&self, id: ChunkId) -> FreeKey {
        let chunk = &self.chunks[id];
        FreeKey {
            size: chunk.size,
            addr: chunk.addr,
            id,
        }
    }

    /// Merges the chunk after `lower` into `lower`, unlinking and forgetting it.
    fn merge_into_lower(&mut self, lower: ChunkId) {
        let upper_id = self.chunks[lower].next;
        let upper = self.chunks[upper_id];
        let chunk = &mut self.chunks[lower];
        chunk.size += upper.size;
        chunk.next = upper.next;
        if upper.next != NONE {
            self.chunks[upper.next].prev = lower;
        } else {
            self.replace_growable_tail(upper_id, lower);
        }
        self.by_addr.remove(upper.addr);
        self.chunks.remove(upper_id);
    }

    /// The region holding `addr`, as (base, size).
    pub(crate) fn region_containing(&self, addr: u64) -> Option<(u64, u64)> {
        let (&base, &size) = self.regions.range(..=addr).next_back()?;
        (addr - base < size).then_some((base, size))
    }

    /// The live allocation starting at `addr`, if any.
    pub fn allocation(&self, addr: u64) -> Option<Allocation> {
        let chunk = &self.chunks[self.by_addr.get(addr)?];
        chunk.in_use.then_some(Allocation {
            addr,
            size: chunk.size,
            requested: chunk.requested,
            tag: chunk.tag,
        })
    }

    /// The limit in bytes this allocator resolved from its configuration.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The most bytes its source can hand out in total (a device's memory, say), which a
    /// fractional limit is a fraction of.
    pub fn capacity(&self) -> u64 {
        self.source.capacity()
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// The memory source's name.
    pub fn source_name(&self) -> &str {
        self.source.name()
    }

    /// The history recorder, when recording is on.
    pub fn history(&self) -> Option<&History> {
        self.history.as_ref()
    }

    /// Starts recording the last `events` events (replacing any earlier recording); 0 stops.
    pub fn record_history(&mut self, events: usize) {
        self.config.history_capacity = events;
        self.history = (events > 0).then(|| History::new(events));
    }

    /// Streams every allocation and free from now on to `writer` as a replayable JSON Lines
    /// trace ([`TraceWriter`] says what is written and what it costs); `None` stops. Returns
    /// the writer streamed to until now, for the caller to [`finish`](TraceWriter::finish).
    ///
    /// ```
    /// use headroom_alloc::{Allocator, AllocatorConfig, Tag, VirtualMemory};
    /// use headroom_alloc::trace::{TraceOp, TraceWriter, read_trace};
    /// let path = std::env::temp_dir().join(format!("trace-{}.jsonl", std::process::id()));
    /// let mut alloc = Allocator::new(VirtualMemory::new(1 << 20), AllocatorConfig::default())?;
    /// alloc.stream_trace(Some(TraceWriter::create(&path)?));
    /// let a = alloc.allocate(1000, Tag::ACTIVATIONS)?;
    /// alloc.free(a.addr)?;
    /// alloc.stream_trace(None).unwrap().finish().expect("the trace is written");
    /// let ops = read_trace(std::io::BufReader::new(std::fs::File::open(&path).unwrap()))?;
    /// assert_eq!(ops, [
    ///     TraceOp::Alloc { id: 0, size: 1000, tag: Tag::ACTIVATIONS },
    ///     TraceOp::Free { id: 0 },
    /// ]);
    /// # std::fs::remove_file(path).unwrap();
    /// # Ok::<(), headroom_alloc::Error>(())
    /// ```
    pub fn stream_trace(&mut self, writer: Option<TraceWriter>) -> Option<TraceWriter> {
        std::mem::replace(&mut self.trace, writer)
    }

    /// Flushes the trace being streamed, if any; fails with its first write error.
    pub fn flush_trace(&mut self) -> std::io::Result<()> {
        self.trace.as_mut().map_or(Ok(()), TraceWriter::flush)
    }

    /// Records an event if the recorder is on.
    pub(crate) fn record(
        &mut self,
        kind: EventKind,
        addr: u64,
        size: u64,
        requested: u64,
        tag: Option<Tag>,
    ) {
        if let Some(history) = &mut self.history {
            history.push(Event {
                time_ns: history.now_ns(),
                kind,
                addr,
                size,
                requested,
                tag,
                in_use: self.counters.in_use,
                reserved: self.counters.reserved,
                tag_live: tag.map_or(0, |tag| self.tags.live(tag)),
            });
        }
    }

    /// Checks every invariant after each public operation in tests and with feature `validate`.
    #[inline]
    pub(crate) fn debug_validate(&self) {
        #[cfg(any(test, feature = "validate"))]
        if let Err(err) = self.validate() {
            // Only in test builds: a broken invariant must stop the test or fuzzer at once.
            panic!("{err}");
        }
    }
}
