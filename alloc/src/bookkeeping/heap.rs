//! The heap: the regions an allocator holds, cut into chunks linked to their neighbours, the free
//! ones filed in bins. The only module that changes chunks: allocation and free take and give back
//! chunks here, growth adds, extends, shrinks and removes regions through a few operations, and
//! inspection and validation read it.

use std::collections::BTreeMap;

use crate::bookkeeping::address_map::AddressMap;
use crate::bookkeeping::bins::Bins;
use crate::bookkeeping::chunk::{Chunk, ChunkArena, ChunkId, NONE};
use crate::bookkeeping::error::InvalidFreeReason;
use crate::bookkeeping::free_set::FreeKey;
use crate::bookkeeping::size::GRANULE;
use crate::bookkeeping::tag::Tag;

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

/// The region an expandable allocator grows, and its last chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Growable {
    /// The region's base address.
    pub base: u64,
    /// The chunk whose `next` is `NONE` in that region; kept up to date by every split, merge,
    /// extension and shrink.
    pub tail: ChunkId,
}

/// The end of the growable region, which is what growth needs to know of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GrowableEnd {
    /// The region's base address.
    pub base: u64,
    /// The region's size in bytes.
    pub size: u64,
    /// Bytes free at its end: the size of its last chunk when that is free, else 0.
    pub free_tail: u64,
    /// True when that free last chunk is the whole region.
    pub free_whole: bool,
}

/// Regions cut into chunks: every chunk, how to find it by address, and every free one by size.
#[derive(Debug, Default)]
pub(crate) struct Heap {
    /// Every chunk of every region. The chunks of a region tile it in address order, with no gap
    /// or overlap; their `prev` and `next` links agree; no two free chunks are neighbours.
    chunks: ChunkArena,
    /// The start of every chunk, free or in use, to its id, and nothing else.
    by_addr: AddressMap,
    /// Every free chunk, each in the bin of its size, and nothing else.
    bins: Bins,
    /// Region base to region size: bases non-zero, bases and sizes positive multiples of the
    /// granule, and regions never overlap.
    regions: BTreeMap<u64, u64>,
    /// When the allocator grows in place ([`Growth`](crate::Growth)), the region that grows (one
    /// held in `regions`) and its last chunk, which ends where the region ends.
    growable: Option<Growable>,
}

impl Heap {
    /// Hands out the best-fitting free chunk for a request of `requested` bytes, `rounded` to the
    /// granule, under `tag`, and returns the allocation it holds, built from what the search
    /// found rather than read back from the chunk just written (whose wide reload would stall,
    /// as in [`coalesce`](Self::coalesce)). The chunk is split when it is at least twice
    /// `rounded`, when the remainder reaches `max_internal_fragmentation`, or when it is the
    /// growable region's last chunk (whose remainder stays at the region's end, to be given back
    /// or grown into), but never into an empty remainder.
    #[inline]
    pub fn take_best_fit(
        &mut self,
        rounded: u64,
        requested: u64,
        tag: Tag,
        max_internal_fragmentation: u64,
    ) -> Option<Allocation> {
        let found = self.bins.best_fit(rounded)?;
        let key = found.key();
        let (size, id) = (key.size, key.chunk());
        let remainder = size - rounded;
        // Never split off an empty remainder: a zero-size chunk would share its address with the
        // next chunk (with `max_internal_fragmentation` 0, an exact fit meets the cap).
        let worth_splitting = size >= rounded.saturating_mul(2)
            || remainder >= max_internal_fragmentation
            || self.growable.is_some_and(|growable| growable.tail == id);
        let handed_out = if remainder > 0 && worth_splitting {
            let rest = self.split(id, rounded);
            self.bins.replace_found(found, rest);
            rounded
        } else {
            self.bins.take(found);
            size
        };
        let chunk = &mut self.chunks[id];
        chunk.in_use = true;
        chunk.requested = requested;
        chunk.tag = tag;
        Some(Allocation {
            addr: key.addr,
            size: handed_out,
            requested,
            tag,
        })
    }

    /// Cuts free chunk `id` to `size` bytes; the rest becomes a new free chunk, whose bin key is
    /// returned for the caller to file. Inlined, so that the key stays in registers: returned
    /// through memory, its two words were read back by one wide load, which stalls.
    #[inline]
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
        FreeKey::new(rest.size, rest.addr, rest_id)
    }

    /// The live chunk starting at `addr`, or why `addr` cannot be freed. Changes nothing.
    #[inline]
    pub fn live_chunk(&self, addr: u64) -> Result<ChunkId, InvalidFreeReason> {
        match self.by_addr.get(addr) {
            Some(id) if self.chunks[id].in_use => Ok(id),
            Some(_) => Err(InvalidFreeReason::DoubleFree),
            None if self.region_containing(addr).is_some() => {
                Err(InvalidFreeReason::InteriorAddress)
            }
            None => Err(InvalidFreeReason::UnknownAddress),
        }
    }

    /// Frees live chunk `id` (from [`live_chunk`](Self::live_chunk)) and merges it with its free
    /// neighbours.
    #[inline]
    pub fn release(&mut self, id: ChunkId) {
        let chunk = &mut self.chunks[id];
        chunk.in_use = false;
        chunk.requested = 0;
        self.coalesce(id);
    }

    /// Files free chunk `id` (in no bin yet), merged with its free neighbours, whose bin entries
    /// are replaced in place where possible. The merged key is built from the sizes the merges
    /// return rather than read back from the chunk just written, whose wide reload would stall.
    #[inline]
    fn coalesce(&mut self, id: ChunkId) {
        let chunk = &self.chunks[id];
        let (prev, next, addr, size) = (chunk.prev, chunk.next, chunk.addr, chunk.size);
        let next_free = next != NONE && !self.chunks[next].in_use;
        let prev_free = prev != NONE && !self.chunks[prev].in_use;
        match (prev_free, next_free) {
            (false, false) => self.bins.insert(FreeKey::new(size, addr, id)),
            (false, true) => {
                let old = self.key(next);
                let merged = self.merge_into_lower(id);
                self.bins.replace(old, FreeKey::new(merged, addr, id));
            }
            (true, false) => {
                let old = self.key(prev);
                let merged = self.merge_into_lower(prev);
                self.bins.replace(old, FreeKey::new(merged, old.addr, prev));
            }
            (true, true) => {
                let (old_prev, old_next) = (self.key(prev), self.key(next));
                self.bins.remove(old_next);
                self.merge_into_lower(id);
                let merged = self.merge_into_lower(prev);
                self.bins
                    .replace(old_prev, FreeKey::new(merged, old_prev.addr, prev));
            }
        }
    }

    /// Merges the chunk after `lower` into `lower`, unlinking and forgetting it; returns the
    /// merged size.
    fn merge_into_lower(&mut self, lower: ChunkId) -> u64 {
        let upper_id = self.chunks[lower].next;
        let upper = self.chunks[upper_id];
        let chunk = &mut self.chunks[lower];
        chunk.size += upper.size;
        chunk.next = upper.next;
        let merged = chunk.size;
        if upper.next != NONE {
            self.chunks[upper.next].prev = lower;
        } else {
            self.replace_growable_tail(upper_id, lower);
        }
        self.by_addr.remove(upper.addr);
        self.chunks.remove(upper_id);
        merged
    }

    /// Records that the last chunk of a region changed from `old` to `new`: when `old` was the
    /// growable region's last chunk, `new` is now.
    #[inline]
    fn replace_growable_tail(&mut self, old: ChunkId, new: ChunkId) {
        if let Some(growable) = &mut self.growable
            && growable.tail == old
        {
            growable.tail = new;
        }
    }

    /// The bin key of chunk `id`.
    #[inline]
    fn key(&self, id: ChunkId) -> FreeKey {
        let chunk = &self.chunks[id];
        FreeKey::new(chunk.size, chunk.addr, id)
    }

    /// The region holding `addr`, as (base, size).
    fn region_containing(&self, addr: u64) -> Option<(u64, u64)> {
        let (&base, &size) = self.regions.range(..=addr).next_back()?;
        (addr - base < size).then_some((base, size))
    }

    /// Takes region `base`+`size`, just reserved, as one free chunk; when `growable`, it becomes
    /// the region that grows in place. Returns false, and changes nothing, when the base is null,
    /// not 256-byte aligned, wraps around or overlaps a region already held.
    #[must_use]
    pub fn add_region(&mut self, base: u64, size: u64, growable: bool) -> bool {
        let end = base.checked_add(size);
        let overlaps = self
            .regions
            .range(..end.unwrap_or(u64::MAX))
            .next_back()
            .is_some_and(|(&other, &other_size)| other + other_size > base);
        if base == 0 || !base.is_multiple_of(GRANULE) || end.is_none() || overlaps {
            return false;
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
        self.bins.insert(FreeKey::new(size, base, id));
        self.regions.insert(base, size);
        if growable {
            self.growable = Some(Growable { base, tail: id });
        }
        true
    }

    /// The end of the growable region, when there is one.
    pub fn growable_end(&self) -> Option<GrowableEnd> {
        let Growable { base, tail } = self.growable?;
        let tail = &self.chunks[tail];
        Some(GrowableEnd {
            base,
            size: self.regions[&base],
            free_tail: if tail.in_use { 0 } else { tail.size },
            free_whole: !tail.in_use && tail.is_whole_region(),
        })
    }

    /// Adds `extra` bytes, just reserved in place at the growable region's end, to that region:
    /// to its last chunk when that is free, else as a new free chunk. Without a growable region,
    /// does nothing.
    pub fn extend_growable(&mut self, extra: u64) {
        let Some(Growable { base, tail }) = self.growable else {
            return;
        };
        let size = self.regions[&base];
        self.regions.insert(base, size + extra);
        if self.chunks[tail].in_use {
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
    }

    /// Takes `cut` bytes, given back to the source, off the end of the growable region, whose
    /// last chunk is free, at least `cut` long and not the whole region; the chunk goes when
    /// `cut` is all of it. Without a growable region, does nothing.
    pub fn shrink_growable(&mut self, cut: u64) {
        let Some(Growable { base, tail }) = self.growable else {
            return;
        };
        let size = self.regions[&base];
        self.regions.insert(base, size - cut);
        let tail_chunk = self.chunks[tail];
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
    }

    /// Every region that is entirely free, as (base, size), lowest base first.
    pub fn free_regions(&self) -> Vec<(u64, u64)> {
        self.regions
            .iter()
            .filter(|&(base, _)| {
                self.by_addr
                    .get(*base)
                    .is_some_and(|id| !self.chunks[id].in_use && self.chunks[id].is_whole_region())
            })
            .map(|(&base, &size)| (base, size))
            .collect()
    }

    /// Forgets region `base` of `size` bytes, one of [`free_regions`](Self::free_regions), given
    /// back to the source.
    pub fn remove_free_region(&mut self, base: u64, size: u64) {
        let id = self.by_addr.remove(base).unwrap_or(NONE);
        self.bins.remove(FreeKey::new(size, base, id));
        self.chunks.remove(id);
        self.regions.remove(&base);
        if self.growable.is_some_and(|growable| growable.base == base) {
            self.growable = None;
        }
    }

    /// The allocation live chunk `id` holds.
    #[inline]
    pub fn handed_out(&self, id: ChunkId) -> Allocation {
        let chunk = &self.chunks[id];
        Allocation {
            addr: chunk.addr,
            size: chunk.size,
            requested: chunk.requested,
            tag: chunk.tag,
        }
    }

    /// The live allocation starting at `addr`, if any.
    pub fn allocation(&self, addr: u64) -> Option<Allocation> {
        let id = self.by_addr.get(addr)?;
        self.chunks[id].in_use.then(|| self.handed_out(id))
    }

    /// Gives the live allocation at `addr` to a new request of `requested` bytes under `tag`,
    /// in place, and returns it as it was; `None` (changing nothing) when no live allocation
    /// starts there.
    pub fn relabel(&mut self, addr: u64, requested: u64, tag: Tag) -> Option<Allocation> {
        let before = self.allocation(addr)?;
        let chunk = &mut self.chunks[self.by_addr.get(addr)?];
        chunk.requested = requested;
        chunk.tag = tag;
        Some(before)
    }

    /// The largest free chunk's size, 0 when none is free; O(log n).
    pub fn largest_free(&self) -> u64 {
        self.bins.largest().map_or(0, |key| key.size)
    }

    /// Every chunk, for reading.
    pub fn chunks(&self) -> &ChunkArena {
        &self.chunks
    }

    /// The address index, for reading.
    pub fn by_addr(&self) -> &AddressMap {
        &self.by_addr
    }

    /// The bins, for reading.
    pub fn bins(&self) -> &Bins {
        &self.bins
    }

    /// Region base to region size.
    pub fn regions(&self) -> &BTreeMap<u64, u64> {
        &self.regions
    }

    /// The growable region and its last chunk, if any.
    pub fn growable(&self) -> Option<Growable> {
        self.growable
    }
}
