//! The allocator: best fit with coalescing over regions from a memory source.
//!
//! [`Allocator`] ties the parts together and owns their state: the heap (regions and chunks, which
//! only `bookkeeping::heap` changes), the grower (the source and growth policy, in
//! `policy::growth`), the running totals, per-tag usage, history and trace. Statistics, snapshots,
//! OOM reports and `validate()` read it through a read-only `AllocatorView` (in `inspect` and
//! `validate`). Its side of streams is in `streams`; the trace it streams is written by
//! `trace_writer`, after a first line of `trace_settings`. `shared` is a thread-safe handle to it.

use crate::allocator::inspect::AllocatorView;
use crate::allocator::trace_settings::TraceSettings;
use crate::allocator::trace_writer::TraceWriter;
use crate::allocator::validate::validate;
use crate::bookkeeping::chunk::ChunkId;
use crate::bookkeeping::error::{Error, Result};
use crate::bookkeeping::heap::{Allocation, Heap};
use crate::bookkeeping::history::{Event, EventKind, History};
use crate::bookkeeping::report::OomCause;
use crate::bookkeeping::size::round_size;
use crate::bookkeeping::snapshot::MemorySnapshot;
use crate::bookkeeping::stats::{Counters, Stats, TagTable};
use crate::bookkeeping::tag::Tag;
use crate::policy::config::{AllocatorConfig, Growth};
use crate::policy::growth::{GrowFailure, Grower, RegionChange};
use crate::policy::source::MemorySource;
use crate::policy::stream::{StreamId, Streams};

pub(crate) mod inspect;
pub(crate) mod shared;
mod streams;
pub(crate) mod trace_settings;
pub(crate) mod trace_writer;
pub(crate) mod validate;

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
    /// Regions cut into chunks; changed only through its own operations.
    heap: Heap,
    /// The memory source and the growth policy, which add regions to the heap and take them out.
    grower: Grower,
    /// The configuration it was made with; `history_capacity` follows `record_history`.
    config: AllocatorConfig,
    /// The most bytes that may be reserved; a positive multiple of 256, never passed by
    /// `counters.reserved`.
    limit: u64,
    /// Running totals, each equal to what the heap's chunks and regions add up to.
    counters: Counters,
    /// Live and peak bytes per tag; the live bytes add up to `counters.in_use`.
    tags: TagTable,
    /// The recorder of recent events, when recording is on.
    history: Option<History>,
    /// Successful allocations left before an injected OOM (`Some(0)`: the next one fails).
    injected_oom: Option<u64>,
    /// Where every allocation and free is streamed, when tracing is on.
    trace: Option<TraceWriter>,
    /// The streams that use blocks, once a stream clock is set; `None` for one stream.
    streams: Option<Streams>,
}

impl std::fmt::Debug for Allocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocator")
            .field("source", &self.source_name())
            .field("limit", &self.limit)
            .field("in_use", &self.counters.in_use)
            .field("reserved", &self.counters.reserved)
            .field("regions", &self.heap.regions().len())
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
            heap: Heap::default(),
            grower: Grower::new(source, config.growth),
            limit,
            counters: Counters::default(),
            tags: TagTable::default(),
            history,
            injected_oom: None,
            trace: None,
            streams: None,
            config,
        };
        if allocator.config.growth == Growth::Preallocate {
            let change = allocator.grower.preallocate(&mut allocator.heap, limit)?;
            allocator.count_region_change(change);
        }
        allocator.debug_validate();
        Ok(allocator)
    }

    /// Allocates `size` bytes for `tag`. A zero-size request gets a unique 256-byte chunk.
    ///
    /// Takes the best-fitting free chunk; failing that, grows by a new region; failing that,
    /// releases entirely free regions and tries again (if garbage collection is on). A failure
    /// is [`Error::OutOfMemory`] with a report, and leaves the allocator as it was.
    #[inline]
    pub fn allocate(&mut self, size: u64, tag: Tag) -> Result<Allocation> {
        if self.streams.is_some() {
            return self.allocate_on(size, tag, StreamId::DEFAULT);
        }
        self.allocate_counted(size, tag)
    }

    /// [`allocate`](Self::allocate) on one stream: counted, recorded and traced.
    #[inline]
    fn allocate_counted(&mut self, size: u64, tag: Tag) -> Result<Allocation> {
        match self.allocate_unchecked(size, tag) {
            Ok(allocation) => {
                if let Some(left) = &mut self.injected_oom {
                    *left -= 1;
                }
                if let Some(trace) = &mut self.trace {
                    trace.alloc(Some(allocation.addr), size, tag);
                }
                self.debug_validate();
                Ok(allocation)
            }
            Err(err) => {
                if let Some(trace) = &mut self.trace
                    && matches!(&err, Error::OutOfMemory(report) if report.cause != OomCause::Injected)
                {
                    trace.alloc(None, size, tag);
                }
                self.debug_validate();
                Err(err)
            }
        }
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

    /// Allocates without the trace and the injected-OOM countdown.
    #[inline]
    fn allocate_unchecked(&mut self, size: u64, tag: Tag) -> Result<Allocation> {
        if self.injected_oom == Some(0) {
            self.injected_oom = None;
            return Err(self.out_of_memory(size, round_size(size), tag, OomCause::Injected));
        }
        let rounded = match round_size(size) {
            Some(rounded) if rounded <= self.limit => rounded,
            rounded => return Err(self.out_of_memory(size, rounded, tag, OomCause::ExceedsLimit)),
        };
        match self.take_best_fit(rounded, size, tag) {
            Some(allocation) => Ok(allocation),
            None => self.grow_and_take(rounded, size, tag),
        }
    }

    /// When no free chunk fits: grows, or releases free regions and grows, and takes the chunk.
    fn grow_and_take(&mut self, rounded: u64, size: u64, tag: Tag) -> Result<Allocation> {
        let mut cause = match self.grow(rounded) {
            Ok(()) => return self.take_after_growth(rounded, size, tag),
            Err(GrowFailure::Oom(cause)) => cause,
            Err(GrowFailure::Fault(err)) => return Err(err),
        };
        // Blocks freed on streams still at work: wait for the work, and try again with them.
        if self.settle_streams(true)? > 0 {
            if let Some(allocation) = self.take_best_fit(rounded, size, tag) {
                return Ok(allocation);
            }
            match self.grow(rounded) {
                Ok(()) => return self.take_after_growth(rounded, size, tag),
                Err(GrowFailure::Oom(retry_cause)) => cause = retry_cause,
                Err(GrowFailure::Fault(err)) => return Err(err),
            }
        }
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

    /// Hands out the best-fitting free chunk, split if the split rule says so, and counts it.
    #[inline]
    fn take_best_fit(&mut self, rounded: u64, requested: u64, tag: Tag) -> Option<Allocation> {
        let allocation = self.heap.take_best_fit(
            rounded,
            requested,
            tag,
            self.config.max_internal_fragmentation,
        )?;
        self.count_allocated(allocation.addr, allocation.size, requested, rounded, tag);
        Some(allocation)
    }

    /// Counts and records a chunk of `size` bytes at `addr` handed out for a request of
    /// `requested` bytes (`rounded` to the granule) under `tag`.
    #[inline(always)]
    fn count_allocated(&mut self, addr: u64, size: u64, requested: u64, rounded: u64, tag: Tag) {
        self.counters.count_allocation(size, requested, rounded);
        self.tags.add(tag, size);
        self.record(EventKind::Alloc, addr, size, requested, Some(tag));
    }

    /// Counts and records the chunk of `size` bytes at `addr`, handed out for `requested` bytes
    /// under `tag`, as freed.
    #[inline(always)]
    fn count_freed(&mut self, addr: u64, size: u64, requested: u64, tag: Tag) {
        // The request was rounded without overflow when it was allocated.
        let packed = round_size(requested).unwrap_or(0);
        self.counters.count_free(size, requested, packed);
        self.tags.sub(tag, size);
        self.record(EventKind::Free, addr, size, requested, Some(tag));
    }

    /// Frees the allocation starting at `addr` and merges it with free neighbours.
    ///
    /// An address that is not the start of a live allocation is [`Error::InvalidFree`], and
    /// changes nothing.
    #[inline]
    pub fn free(&mut self, addr: u64) -> Result<Allocation> {
        if self.streams.is_some() {
            return self.free_on_stream(addr);
        }
        let id = match self.heap.live_chunk(addr) {
            Ok(id) => id,
            Err(reason) => {
                self.debug_validate();
                return Err(Error::InvalidFree { addr, reason });
            }
        };
        let (size, requested, tag) = self.release_counted(id, addr);
        if let Some(trace) = &mut self.trace {
            trace.free(addr);
        }
        self.debug_validate();
        Ok(Allocation {
            addr,
            size,
            requested,
            tag,
        })
    }

    /// Frees chunk `id`, live at `addr`, in the heap, and counts and records it; returns its size,
    /// request and tag.
    #[inline(always)]
    fn release_counted(&mut self, id: ChunkId, addr: u64) -> (u64, u64, Tag) {
        let chunk = &self.heap.chunks()[id];
        let (size, requested, tag) = (chunk.size, chunk.requested, chunk.tag);
        self.heap.release(id);
        self.count_freed(addr, size, requested, tag);
        (size, requested, tag)
    }

    /// Frees the live allocation at `addr` in the heap and counts it, without the trace; a
    /// refused free changes nothing.
    fn free_and_count(&mut self, addr: u64) -> Result<Allocation> {
        let id = self
            .heap
            .live_chunk(addr)
            .map_err(|reason| Error::InvalidFree { addr, reason })?;
        let (size, requested, tag) = self.release_counted(id, addr);
        Ok(Allocation {
            addr,
            size,
            requested,
            tag,
        })
    }

    /// Makes room for a request of `rounded` bytes, following the growth policy, and counts
    /// what was reserved.
    fn grow(&mut self, rounded: u64) -> std::result::Result<(), GrowFailure> {
        let headroom = self.limit - self.counters.reserved;
        let change = self.grower.grow(&mut self.heap, rounded, headroom)?;
        self.count_region_change(change);
        Ok(())
    }

    /// Gives every entirely free region back to the source; returns the bytes released.
    fn release_free_regions(&mut self) -> u64 {
        let changes = self.grower.release_free_regions(&mut self.heap);
        let released = changes.iter().map(|change| change.bytes()).sum();
        for change in changes {
            self.count_region_change(change);
        }
        released
    }

    /// Counts and records bytes reserved from the source or given back to it.
    fn count_region_change(&mut self, change: RegionChange) {
        match change {
            RegionChange::Reserved {
                addr,
                bytes,
                new_region,
            } => {
                self.counters.count_reserve(bytes, new_region);
                self.record(EventKind::RegionReserve, addr, bytes, 0, None);
            }
            RegionChange::Released {
                addr,
                bytes,
                whole_region,
            } => {
                self.counters.count_release(bytes, whole_region);
                self.record(EventKind::RegionRelease, addr, bytes, 0, None);
            }
        }
    }

    /// Gives every entirely free region back to the source (`torch.cuda.empty_cache()`);
    /// returns the bytes released. Regions holding any live allocation stay.
    pub fn release_cached(&mut self) -> u64 {
        let released = self.release_free_regions();
        self.debug_validate();
        released
    }

    /// Counts a failed allocation and builds its report.
    fn out_of_memory(
        &mut self,
        requested: u64,
        rounded: Option<u64>,
        tag: Tag,
        cause: OomCause,
    ) -> Error {
        self.counters.count_oom();
        self.record(
            EventKind::Oom,
            0,
            rounded.unwrap_or(u64::MAX),
            requested,
            Some(tag),
        );
        let report = self.view().oom_report(requested, rounded, tag, cause);
        Error::OutOfMemory(Box::new(report))
    }

    /// Current statistics (`torch.cuda.memory_stats()`); O(number of tags).
    pub fn stats(&self) -> Stats {
        self.view().stats()
    }

    /// Bytes handed out right now.
    pub fn in_use(&self) -> u64 {
        self.counters.in_use
    }

    /// Bytes reserved from the source right now.
    pub fn reserved(&self) -> u64 {
        self.counters.reserved
    }

    /// The largest free chunk; O(log n).
    pub fn largest_free(&self) -> u64 {
        self.heap.largest_free()
    }

    /// Starts new peaks from the current values, for scoped peak measurements
    /// (`torch.cuda.reset_peak_memory_stats()`).
    pub fn reset_peak(&mut self) {
        self.counters.reset_peaks();
        self.tags.reset_peaks();
    }

    /// Every region and chunk, in address order; O(number of chunks).
    pub fn snapshot(&self) -> MemorySnapshot {
        self.view().snapshot()
    }

    /// Walks every region and chunk and checks every invariant: chunks tile their regions with
    /// no overlap or gap, neighbour links agree, no two free chunks are adjacent, every free
    /// chunk sits in exactly its bin and nothing else does, the address map is exact, and the
    /// totals match the counters. O(chunks); run after every operation in tests.
    pub fn validate(&self) -> Result<()> {
        validate(self.view())
    }

    /// What inspection and validation read.
    fn view(&self) -> AllocatorView<'_> {
        AllocatorView {
            heap: &self.heap,
            counters: &self.counters,
            tags: &self.tags,
            limit: self.limit,
            source_name: self.source_name(),
            reservation: self.grower.reservation(),
            held_for_streams: self.held_for_streams(),
        }
    }

    /// The live allocation starting at `addr`, if any.
    pub fn allocation(&self, addr: u64) -> Option<Allocation> {
        self.heap.allocation(addr)
    }

    /// The limit in bytes this allocator resolved from its configuration.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The most bytes its source can hand out in total (a device's memory, say), which a
    /// fractional limit is a fraction of.
    pub fn capacity(&self) -> u64 {
        self.grower.source().capacity()
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// The memory source's name.
    pub fn source_name(&self) -> &str {
        self.grower.source().name()
    }

    /// The history recorder, when recording is on.
    pub fn history(&self) -> Option<&History> {
        self.history.as_ref()
    }

    /// Stops recording and hands back what the recorder kept, when recording was on.
    pub fn take_history(&mut self) -> Option<History> {
        self.config.history_capacity = 0;
        self.history.take()
    }

    /// Starts recording the last `events` events (replacing any earlier recording); 0 stops.
    pub fn record_history(&mut self, events: usize) {
        self.config.history_capacity = events;
        self.history = (events > 0).then(|| History::new(events));
    }

    /// Streams every allocation and free from now on to `writer` as a replayable JSON Lines
    /// trace, after a first line with this allocator's settings ([`TraceWriter`] says what is
    /// written and what it costs); `None` stops. Returns
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
    pub fn stream_trace(&mut self, mut writer: Option<TraceWriter>) -> Option<TraceWriter> {
        if let Some(writer) = &mut writer {
            writer.settings(&TraceSettings::of(
                &self.config,
                self.limit,
                self.grower.step(),
            ));
        }
        std::mem::replace(&mut self.trace, writer)
    }

    /// Flushes the trace being streamed, if any; fails with its first write error.
    pub fn flush_trace(&mut self) -> std::io::Result<()> {
        self.trace.as_mut().map_or(Ok(()), TraceWriter::flush)
    }

    /// Records an event if the recorder is on.
    #[inline]
    fn record(&mut self, kind: EventKind, addr: u64, size: u64, requested: u64, tag: Option<Tag>) {
        if self.history.is_some() {
            self.record_event(kind, addr, size, requested, tag);
        }
    }

    /// Records an event in the recorder, which is on; out of line, off the hot path.
    #[cold]
    #[inline(never)]
    fn record_event(
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
    fn debug_validate(&self) {
        #[cfg(any(test, feature = "validate"))]
        if let Err(err) = self.validate() {
            // Only in test builds: a broken invariant must stop the test or fuzzer at once.
            panic!("{err}");
        }
    }
}
