//! Reserving regions from the source and giving free ones back.

use crate::allocator::{Allocator, Growable};
use crate::chunk::{Chunk, NONE};
use crate::config::{EXPANSION_STEP, Growth};
use crate::error::{Error, Result};
use crate::free_set::FreeKey;
use crate::history::EventKind;
use crate::report::OomCause;
use crate::size::GRANULE;
use crate::source::SourceError;
use crate::tag::Tag;

/// Why the allocator could not grow.
pub(crate) enum GrowFailure {
    /// Out of memory, for this reason.
    Oom(OomCause),
    /// The source failed for a reason other than memory: an error, not an out-of-memory.
    Fault(Error),
}

impl From<OomCause> for GrowFailure {
    fn from(cause: OomCause) -> Self {
        GrowFailure::Oom(cause)
    }
}

impl Allocator {
    /// Makes room for a request of `rounded` bytes, following the growth policy.
    pub(crate) fn grow(&mut self, rounded: u64) -> std::result::Result<(), GrowFailure> {
        let headroom = self.limit - self.counters.reserved;
        match self.config.growth {
            Growth::Expandable => self.grow_expandable(rounded, headroom),
            Growth::Preallocate => self.grow_by_region(rounded, headroom, false),
            Growth::OnDemand => self.grow_by_region(rounded, headroom, true),
        }
    }

    /// Reserves a new region that can hold `rounded` bytes: the whole headroom when preallocating,
    /// else the next doubling size; either backs off while the source refuses.
    fn grow_by_region(
        &mut self,
        rounded: u64,
        headroom: u64,
        on_demand: bool,
    ) -> std::result::Result<(), GrowFailure> {
        if rounded > headroom {
            return Err(OomCause::LimitReached.into());
        }
        let size = if on_demand {
            let mut size = self.next_region_size.max(GRANULE);
            while size < rounded {
                size = size.saturating_mul(2);
            }
            size.min(headroom)
        } else {
            headroom
        };
        let (base, size) = self.reserve_backing_off(size, rounded)?;
        self.add_region(base, size)
            .map_err(|err| OomCause::SourceRefused(err.to_string()))?;
        self.next_region_size = size.saturating_mul(2);
        Ok(())
    }

    /// Reserves a region of `size` bytes or, while the source refuses for lack of memory, 10%
    /// less at a time (TensorFlow's back-off: a GPU holds less than its total free), down to
    /// `at_least`; returns its base and size. A fault ends the attempt at once.
    pub(crate) fn reserve_backing_off(
        &mut self,
        mut size: u64,
        at_least: u64,
    ) -> std::result::Result<(u64, u64), GrowFailure> {
        loop {
            match self.source.reserve(size) {
                Ok(base) => return Ok((base, size)),
                Err(failure) if failure.fault => {
                    return Err(self.source_fault("reserve", size, failure));
                }
                Err(refusal) => {
                    let smaller = (size / 10 * 9) & !(GRANULE - 1);
                    if smaller < at_least.max(GRANULE) {
                        return Err(OomCause::SourceRefused(refusal.message).into());
                    }
                    size = smaller;
                }
            }
        }
    }

    /// Grows the expandable region at its end by just enough steps that its free tail holds
    /// `rounded` bytes; without one (or with a source that cannot resize), reserves a region of
    /// `rounded` bytes rounded up to the step.
    fn grow_expandable(
        &mut self,
        rounded: u64,
        headroom: u64,
    ) -> std::result::Result<(), GrowFailure> {
        let resizable = self.source.can_resize();
        let Some(Growable { base, tail }) = self.growable.filter(|_| resizable) else {
            let size = rounded
                .div_ceil(EXPANSION_STEP)
                .saturating_mul(EXPANSION_STEP);
            return self.grow_by_region(rounded, headroom.min(size), false);
        };
        let tail_chunk = self.chunks[tail];
        let free_tail = if tail_chunk.in_use {
            0
        } else {
            tail_chunk.size
        };
        let needed = rounded - free_tail;
        if needed > headroom {
            return Err(OomCause::LimitReached.into());
        }
        let extra = needed
            .div_ceil(EXPANSION_STEP)
            .saturating_mul(EXPANSION_STEP)
            .min(headroom);
        let size = self.regions[&base];
        match self.source.extend(base, size, extra) {
            Ok(()) => {}
            Err(failure) if failure.fault => {
                return Err(self.source_fault("extend", extra, failure));
            }
            Err(refusal) => return Err(OomCause::SourceRefused(refusal.message).into()),
        }
        self.regions.insert(base, size + extra);
        if tail_chunk.in_use {
            let id = self.chunks.insert(Chunk {
                addr: base + size,
                size: extra,
                requested: 0,
                prev: tail,
                next: NONE,
                tag: Tag::OTHER,
                in_use: false,
            });
            self.chunks[tail].next = id;
            self.by_addr.insert(base + size, id);
            self.bins.insert(self.key(id));
            self.replace_growable_tail(tail, id);
        } else {
            let old = self.key(tail);
            self.chunks[tail].size += extra;
            self.bins.replace(old, self.key(tail));
        }
        self.count_reserved(base + size, extra);
        Ok(())
    }

    /// A source's failure to `op` `bytes` bytes, as the error the allocation fails with.
    fn source_fault(&self, op: &'static str, bytes: u64, failure: SourceError) -> GrowFailure {
        GrowFailure::Fault(Error::Source {
            source_name: self.source.name().to_owned(),
            op,
            bytes,
            message: failure.message,
        })
    }

    /// Counts `bytes` newly reserved at `addr` (a new region or a region's new end).
    fn count_reserved(&mut self, addr: u64, bytes: u64) {
        let counters = &mut self.counters;
        counters.reserved += bytes;
        counters.peak_reserved = counters.peak_reserved.max(counters.reserved);
        self.record(EventKind::RegionReserve, addr, bytes, 0, None);
    }

    /// Counts `bytes` given back at `addr` (a whole region or a region's end).
    fn count_released(&mut self, addr: u64, bytes: u64) {
        self.counters.reserved -= bytes;
        self.record(EventKind::RegionRelease, addr, bytes, 0, None);
    }

    /// Takes a region the source handed out into the allocator as one free chunk.
    pub(crate) fn add_region(&mut self, base: u64, size: u64) -> Result<()> {
        let end = base.checked_add(size);
        let overlaps = self
            .regions
            .range(..end.unwrap_or(u64::MAX))
            .next_back()
            .is_some_and(|(&other, &other_size)| other + other_size > base);
        if base == 0 || !base.is_multiple_of(GRANULE) || end.is_none() || overlaps {
            // Give it back: the allocator cannot use it.
            let _ = self.source.release(base, size);
            return Err(Error::Source {
                source_name: self.source.name().to_owned(),
                op: "reserve",
                bytes: size,
                message: format!(
                    "returned base {base:#x}, which is null, not 256-byte aligned, wraps around \
                     or overlaps a region already held"
                ),
            });
        }
        let id = self.chunks.insert(Chunk {
            addr: base,
            size,
            requested: 0,
            prev: NONE,
            next: NONE,
            tag: Tag::OTHER,
            in_use: false,
        });
        self.by_addr.insert(base, id);
        self.bins.insert(FreeKey {
            size,
            addr: base,
            id,
        });
        self.regions.insert(base, size);
        self.counters.regions_reserved += 1;
        if self.config.growth == Growth::Expandable {
            self.growable = Some(Growable { base, tail: id });
        }
        self.count_reserved(base, size);
        Ok(())
    }

    /// Gives every entirely free region back to the source; returns the bytes released.
    pub(crate) fn release_free_regions(&mut self) -> u64 {
        let free_regions: Vec<(u64, u64)> = self
            .regions
            .iter()
            .filter(|&(base, _)| {
                self.by_addr
                    .get(*base)
                    .is_some_and(|id| !self.chunks[id].in_use && self.chunks[id].is_whole_region())
            })
            .map(|(&base, &size)| (base, size))
            .collect();
        let mut released = 0;
        for (base, size) in free_regions {
            if let Err(err) = self.source.release(base, size) {
                tracing::warn!(
                    source = self.source.name(),
                    base,
                    size,
                    "keeping a region the source failed to release: {err}"
                );
                continue;
            }
            let id = self.by_addr.remove(base).unwrap_or(NONE);
            self.bins.remove(FreeKey {
                size,
                addr: base,
                id,
            });
            self.chunks.remove(id);
            self.regions.remove(&base);
            self.counters.regions_released += 1;
            if self.growable.is_some_and(|growable| growable.base == base) {
                self.growable = None;
            }
            released += size;
            self.count_released(base, size);
        }
        released + self.shrink_growable()
    }

    /// Gives back whole steps of the expandable region's free tail; returns the bytes released.
    fn shrink_growable(&mut self) -> u64 {
        let Some(Growable { base, tail }) = self.growable else {
            return 0;
        };
        let tail_chunk = self.chunks[tail];
        let cut = tail_chunk.size / EXPANSION_STEP * EXPANSION_STEP;
        // A wholly free region was released above, so a free tail always has a predecessor.
        if tail_chunk.in_use || cut == 0 || tail_chunk.prev == NONE {
            return 0;
        }
        let size = self.regions[&base];
        if let Err(err) = self.source.shrink(base, size, cut) {
            tracing::warn!(
                source = self.source.name(),
                base,
                cut,
                "cannot shrink: {err}"
            );
            return 0;
        }
        self.regions.insert(base, size - cut);
        let old = self.key(tail);
        if cut == tail_chunk.size {
            self.bins.remove(old);
            self.by_addr.remove(tail_chunk.addr);
            self.chunks.remove(tail);
            self.chunks[tail_chunk.prev].next = NONE;
            self.replace_growable_tail(tail, tail_chunk.prev);
        } else {
            self.chunks[tail].size -= cut;
            self.bins.replace(old, self.key(tail));
        }
        self.count_released(base + size - cut, cut);
        cut
    }

    /// Gives every entirely free region back to the source (`torch.cuda.empty_cache()`);
    /// returns the bytes released. Regions holding any live allocation stay.
    pub fn release_cached(&mut self) -> u64 {
        let released = self.release_free_regions();
        self.debug_validate();
        released
    }
}
