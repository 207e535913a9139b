//! Reserving regions from the source and giving free ones back.

use crate::allocator::Allocator;
use crate::bins::FreeKey;
use crate::chunk::{Chunk, NONE};
use crate::config::Growth;
use crate::error::{Error, Result};
use crate::history::EventKind;
use crate::report::OomCause;
use crate::size::GRANULE;
use crate::tag::Tag;

impl Allocator {
    /// Reserves a new region that can hold `rounded` bytes, following the growth policy.
    pub(crate) fn grow(&mut self, rounded: u64) -> std::result::Result<(), OomCause> {
        let headroom = self.limit - self.counters.reserved;
        if rounded > headroom {
            return Err(OomCause::LimitReached);
        }
        let mut size = match self.config.growth {
            Growth::Preallocate => headroom,
            Growth::OnDemand => {
                let mut size = self.next_region_size.max(GRANULE);
                while size < rounded {
                    size = size.saturating_mul(2);
                }
                size.min(headroom)
            }
        };
        loop {
            match self.source.reserve(size) {
                Ok(base) => {
                    self.add_region(base, size)
                        .map_err(|err| OomCause::SourceRefused(err.to_string()))?;
                    self.next_region_size = size.saturating_mul(2);
                    return Ok(());
                }
                Err(refusal) => {
                    let smaller = (size / 10 * 9) & !(GRANULE - 1);
                    if smaller < rounded || self.config.growth == Growth::Preallocate {
                        return Err(OomCause::SourceRefused(refusal.message));
                    }
                    size = smaller;
                }
            }
        }
    }

    /// Takes a region the source handed out into the allocator as one free chunk.
    pub(crate) fn add_region(&mut self, base: u64, size: u64) -> Result<()> {
        let end = base.checked_add(size);
        let overlaps = self
            .regions
            .range(..end.unwrap_or(u64::MAX))
            .next_back()
            .is_some_and(|(&other, &other_size)| other + other_size > base);
        if base == 0 || base % GRANULE != 0 || end.is_none() || overlaps {
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
        let counters = &mut self.counters;
        counters.reserved += size;
        counters.peak_reserved = counters.peak_reserved.max(counters.reserved);
        counters.regions_reserved += 1;
        self.record(EventKind::RegionReserve, base, size, 0, None);
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
            self.counters.reserved -= size;
            self.counters.regions_released += 1;
            released += size;
            self.record(EventKind::RegionRelease, base, size, 0, None);
        }
        released
    }

    /// Gives every entirely free region back to the source (`torch.cuda.empty_cache()`);
    /// returns the bytes released. Regions holding any live allocation stay.
    pub fn release_cached(&mut self) -> u64 {
        let released = self.release_free_regions();
        self.debug_validate();
        released
    }
}
