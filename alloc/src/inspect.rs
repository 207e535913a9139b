//! Looking inside an allocator: statistics, snapshots and OOM reports.

use crate::allocator::Allocator;
use crate::chunk::NONE;
use crate::error::Error;
use crate::history::EventKind;
use crate::report::{
    LARGEST_LISTED, OCCUPANCY_WIDTH, OomCause, OomReport, RegionOccupancy, Verdict,
};
use crate::snapshot::{ChunkSnapshot, MemorySnapshot, RegionSnapshot};
use crate::stats::{Stats, fragmentation};
use crate::tag::Tag;

impl Allocator {
    /// Current statistics (`torch.cuda.memory_stats()`); O(number of tags).
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        let free = c.reserved - c.in_use;
        let largest_free = self.largest_free();
        Stats {
            allocations: c.allocations,
            frees: c.frees,
            ooms: c.ooms,
            in_use: c.in_use,
            peak_in_use: c.peak_in_use,
            requested_in_use: c.requested_in_use,
            internal_fragmentation: c.in_use - c.packed_in_use,
            reserved: c.reserved,
            peak_reserved: c.peak_reserved,
            limit: self.limit,
            regions: self.regions.len(),
            regions_reserved: c.regions_reserved,
            regions_released: c.regions_released,
            free,
            largest_free,
            fragmentation: fragmentation(free, largest_free),
            tags: self.tags.used(),
        }
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
        self.bins.largest().map_or(0, |key| key.size)
    }

    /// Starts new peaks from the current values, for scoped peak measurements
    /// (`torch.cuda.reset_peak_memory_stats()`).
    pub fn reset_peak(&mut self) {
        self.counters.peak_in_use = self.counters.in_use;
        self.counters.peak_reserved = self.counters.reserved;
        self.tags.reset_peaks();
    }

    /// Every region and chunk, in address order; O(number of chunks).
    pub fn snapshot(&self) -> MemorySnapshot {
        let regions = self
            .regions
            .iter()
            .map(|(&base, &size)| {
                let mut chunks = Vec::new();
                let mut id = self.by_addr.get(base).unwrap_or(NONE);
                while id != NONE {
                    let chunk = &self.chunks[id];
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
            source: self.source.name().to_owned(),
            limit: self.limit,
            regions,
        }
    }

    /// Counts a failed allocation and builds its report.
    pub(crate) fn out_of_memory(
        &mut self,
        requested: u64,
        rounded: Option<u64>,
        tag: Tag,
        cause: OomCause,
    ) -> Error {
        self.counters.ooms += 1;
        self.record(
            EventKind::Oom,
            0,
            rounded.unwrap_or(u64::MAX),
            requested,
            Some(tag),
        );
        Error::OutOfMemory(Box::new(self.oom_report(requested, rounded, tag, cause)))
    }

    /// What an OOM for this request would report now.
    pub(crate) fn oom_report(
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
