//! Growth: reserving regions from the memory source as the growth policy says, growing and
//! shrinking the expandable region in place, and giving free regions back.
//!
//! The [`Grower`] owns the source. It changes the heap only through the heap's region operations
//! and reports each change as a [`RegionChange`], which the allocator counts and records.

use crate::config::{EXPANSION_STEP, FIRST_REGION, Growth};
use crate::error::{Error, Result};
use crate::heap::Heap;
use crate::report::OomCause;
use crate::size::GRANULE;
use crate::source::{MemorySource, SourceError};

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

/// Bytes reserved from the source or given back to it, for the allocator to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RegionChange {
    /// `bytes` newly reserved at `addr`: a new region, or the growable region's new end.
    Reserved {
        /// Where the new bytes start.
        addr: u64,
        /// How many.
        bytes: u64,
        /// A new region (true) or an extension in place (false).
        new_region: bool,
    },
    /// `bytes` given back at `addr`: a whole region, or the growable region's end.
    Released {
        /// Where the bytes given back start.
        addr: u64,
        /// How many.
        bytes: u64,
        /// A whole region (true) or the end of one (false).
        whole_region: bool,
    },
}

impl RegionChange {
    /// The bytes reserved or given back.
    pub fn bytes(self) -> u64 {
        match self {
            Self::Reserved { bytes, .. } | Self::Released { bytes, .. } => bytes,
        }
    }
}

/// Where an allocator's regions come from and go back to: its memory source, driven by its
/// growth policy.
pub(crate) struct Grower {
    source: Box<dyn MemorySource>,
    /// When regions are reserved; fixed for the allocator's life.
    policy: Growth,
    /// The size the next on-demand region starts from (doubled as needed): at first
    /// `min(limit, FIRST_REGION)`, then twice the last region reserved by [`Growth::OnDemand`] or
    /// [`Growth::Preallocate`] growth.
    next_region_size: u64,
}

impl Grower {
    /// A grower over `source` under `policy`, for an allocator of `limit` bytes.
    pub fn new(source: Box<dyn MemorySource>, policy: Growth, limit: u64) -> Self {
        Self {
            source,
            policy,
            next_region_size: limit.min(FIRST_REGION),
        }
    }

    /// The memory source.
    pub fn source(&self) -> &dyn MemorySource {
        &*self.source
    }

    /// Reserves the whole `limit` as one region for [`Growth::Preallocate`] or, while the source
    /// refuses, 10% less at a time; a source that gives nothing is an [`Error::Source`].
    pub fn preallocate(&mut self, heap: &mut Heap, limit: u64) -> Result<RegionChange> {
        let (base, size) = match self.reserve_backing_off(limit, GRANULE) {
            Ok(region) => region,
            Err(GrowFailure::Fault(err)) => return Err(err),
            Err(GrowFailure::Oom(cause)) => {
                let message = match cause {
                    OomCause::SourceRefused(message) => message,
                    other => format!("{other:?}"),
                };
                return Err(Error::Source {
                    source_name: self.source.name().to_owned(),
                    op: "reserve",
                    bytes: limit,
                    message,
                });
            }
        };
        self.add_region(heap, base, size)
    }

    /// Makes room in `heap` for a request of `rounded` bytes, reserving at most `headroom` more
    /// bytes, as the growth policy says.
    pub fn grow(
        &mut self,
        heap: &mut Heap,
        rounded: u64,
        headroom: u64,
    ) -> std::result::Result<RegionChange, GrowFailure> {
        match self.policy {
            Growth::Expandable => self.grow_expandable(heap, rounded, headroom),
            Growth::Preallocate => self.grow_by_region(heap, rounded, headroom, false),
            Growth::OnDemand => self.grow_by_region(heap, rounded, headroom, true),
        }
    }

    /// Reserves a new region that can hold `rounded` bytes: the whole headroom when preallocating,
    /// else the next doubling size; either backs off while the source refuses.
    fn grow_by_region(
        &mut self,
        heap: &mut Heap,
        rounded: u64,
        headroom: u64,
        on_demand: bool,
    ) -> std::result::Result<RegionChange, GrowFailure> {
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
        let change = self
            .add_region(heap, base, size)
            .map_err(|err| OomCause::SourceRefused(err.to_string()))?;
        self.next_region_size = size.saturating_mul(2);
        Ok(change)
    }

    /// Reserves a region of `size` bytes or, while the source refuses for lack of memory, 10%
    /// less at a time (TensorFlow's back-off: a GPU holds less than its total free), down to
    /// `at_least`; returns its base and size. A fault ends the attempt at once.
    fn reserve_backing_off(
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
        heap: &mut Heap,
        rounded: u64,
        headroom: u64,
    ) -> std::result::Result<RegionChange, GrowFailure> {
        let resizable = self.source.can_resize();
        let Some(end) = heap.growable_end().filter(|_| resizable) else {
            let size = rounded
                .div_ceil(EXPANSION_STEP)
                .saturating_mul(EXPANSION_STEP);
            return self.grow_by_region(heap, rounded, headroom.min(size), false);
        };
        let needed = rounded - end.free_tail;
        if needed > headroom {
            return Err(OomCause::LimitReached.into());
        }
        let extra = needed
            .div_ceil(EXPANSION_STEP)
            .saturating_mul(EXPANSION_STEP)
            .min(headroom);
        match self.source.extend(end.base, end.size, extra) {
            Ok(()) => {}
            Err(failure) if failure.fault => {
                return Err(self.source_fault("extend", extra, failure));
            }
            Err(refusal) => return Err(OomCause::SourceRefused(refusal.message).into()),
        }
        heap.extend_growable(extra);
        Ok(RegionChange::Reserved {
            addr: end.base + end.size,
            bytes: extra,
            new_region: false,
        })
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

    /// Takes a region the source handed out into the heap as one free chunk; gives back one the
    /// heap cannot hold, with an error.
    fn add_region(&mut self, heap: &mut Heap, base: u64, size: u64) -> Result<RegionChange> {
        if !heap.add_region(base, size, self.policy == Growth::Expandable) {
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
        Ok(RegionChange::Reserved {
            addr: base,
            bytes: size,
            new_region: true,
        })
    }

    /// Gives every entirely free region back to the source, then whole steps of the expandable
    /// region's free tail; returns what was given back, in order. A region the source fails to
    /// take back is kept.
    pub fn release_free_regions(&mut self, heap: &mut Heap) -> Vec<RegionChange> {
        let mut changes = Vec::new();
        for (base, size) in heap.free_regions() {
            if let Err(err) = self.source.release(base, size) {
                tracing::warn!(
                    source = self.source.name(),
                    base,
                    size,
                    "keeping a region the source failed to release: {err}"
                );
                continue;
            }
            heap.remove_free_region(base, size);
            changes.push(RegionChange::Released {
                addr: base,
                bytes: size,
                whole_region: true,
            });
        }
        changes.extend(self.shrink_growable(heap));
        changes
    }

    /// Gives back whole steps of the expandable region's free tail.
    fn shrink_growable(&mut self, heap: &mut Heap) -> Option<RegionChange> {
        let end = heap.growable_end()?;
        let cut = end.free_tail / EXPANSION_STEP * EXPANSION_STEP;
        // A wholly free region was released above, unless the source refused; it stays whole.
        if cut == 0 || end.free_whole {
            return None;
        }
        if let Err(err) = self.source.shrink(end.base, end.size, cut) {
            tracing::warn!(
                source = self.source.name(),
                base = end.base,
                cut,
                "cannot shrink: {err}"
            );
            return None;
        }
        heap.shrink_growable(cut);
        Some(RegionChange::Released {
            addr: end.base + end.size - cut,
            bytes: cut,
            whole_region: false,
        })
    }
}
