//! Looking inside an allocator: a read-only view of its state, and the statistics, memory
//! snapshots and OOM reports made from it.

use crate::bookkeeping::chunk::NONE;
use crate::bookkeeping::heap::Heap;
use crate::bookkeeping::report::{
    LARGEST_LISTED, OCCUPANCY_WIDTH, OomCause, OomReport, RegionOccupancy, Verdict,
};
use crate::bookkeeping::reservation::Reservation;
use crate::bookkeeping::snapshot::{ChunkSnapshot, MemorySnapshot, RegionSnapshot};
use crate::bookkeeping::stats::{Counters, Stats, TagTable, fragmentation};
use crate::bookkeeping::tag::Tag;

/// What inspection and validation read of an allocator, with no way to change it.
#[derive(Clone, Copy)]
pub(crate) struct AllocatorView<'a> {
    /// The regions and chunks.
    pub heap: &'a Heap,
    /// The running totals.
    pub counters: &'a Counters,
    /// Live and peak bytes per tag.
    pub tags: &'a TagTable,
    /// The most bytes that may be reserved.
    pub limit: u64,
    /// The memory source's name.
    pub source_name: &'a str,
    /// How the allocator reserves.
    pub reservation: Reservation,
    /// Bytes freed on a stream and waiting for its work, part of the in-use bytes until then.
    pub held_for_streams: u64,
}

impl AllocatorView<'_> {
    /// Current statistics; O(number of tags).
    pub fn stats(&self) -> Stats {
        let c = self.counters;
        let free = c.reserved - c.in_use;
        let largest_free = self.heap.largest_free();
        Stats {
            allocations: c.allocations,
            frees: c.frees,
            ooms: c.ooms,
            in_use: c.in_use,
            held_for_streams: self.held_for_streams,
            peak_in_use: c.peak_in_use,
            requested_in_use: c.requested_in_use,
            internal_fragmentation: c.in_use - c.packed_in_use,
            reserved: c.reserved,
            peak_reserved: c.peak_reserved,
            limit: self.limit,
            reservation: self.reservation,
            regions: self.heap.regions().len(),
            regions_reserved: c.regions_reserved,
            regions_released: c.regions_released,
            free,
            largest_free,
            fragmentation: fragmentation(free, largest_free),
            tags: self.tags.used(),
        }
    }

    /// Every region and chunk, in address order; O(number of chunks).
    pub fn snapshot(&self) -> MemorySnapshot {
        let regions = self
            .heap
            .regions()
            .iter()
            .map(|(&base, &size)| {
                let mut chunks = Vec::new();
                let mut id = self.heap.by_addr().get(base).unwrap_or(NONE);
                while id != NONE {
                    let chunk = &self.heap.chunks()[id];
                    chunks.push(ChunkSnapshot {
                        addr: chunk.addr,
                        size: chunk.size,
                        requested: chunk.requested,
                        in_use: chunk.in_use,
                        tag: chunk.in_use.then_some(chunk.tag),
                    });
                    id = chunk.next;
                }
                RegionSnapshot { base, size, chunks }
            })
            .collect();
        MemorySnapshot {
            source: self.source_name.to_owned(),
            limit: self.limit,
            regions,
        }
    }

    /// What an OOM for this request would report now.
    pub fn oom_report(
        &self,
        requested: u64,
        rounded: Option<u64>,
        tag: Tag,
        cause: OomCause,
    ) -> OomReport {
        let stats = self.stats();
        let usable = match cause {
            OomCause::SourceRefused(_) => stats.reserved,
            _ => self.limit,
        };
        let available_if_packed = usable - self.counters.packed_in_use;
        let verdict = match (&cause, rounded) {
            (OomCause::ExceedsLimit, _) | (_, None) => Verdict::Capacity,
            (_, Some(rounded)) if rounded > available_if_packed => Verdict::Capacity,
            _ => Verdict::Fragmentation,
        };
        let snapshot = self.snapshot();
        OomReport {
            source: snapshot.source.clone(),
            requested,
            rounded,
            tag,
            limit: self.limit,
            in_use: stats.in_use,
            reserved: stats.reserved,
            reservation: self.reservation,
            free: stats.free,
            internal_fragmentation: stats.internal_fragmentation,
            largest_free: stats.largest_free,
            fragmentation: stats.fragmentation,
            available_if_packed,
            verdict,
            cause,
            tags: stats.tags,
            bins: snapshot.bin_table(),
            largest_live: snapshot.largest_live(LARGEST_LISTED),
            regions: snapshot
                .regions
                .iter()
                .map(|region| RegionOccupancy {
                    base: region.base,
                    size: region.size,
                    map: region.occupancy_map(OCCUPANCY_WIDTH),
                })
                .collect(),
        }
    }
}
