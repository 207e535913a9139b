//! Growth: reserving regions from the memory source as the growth policy says, growing and
//! shrinking the expandable region in place, and giving free regions back.
//!
//! The [`Grower`] owns the source. It changes the heap only through the heap's region operations
//! and reports each change as a [`RegionChange`], which the allocator counts and records.

use crate::bookkeeping::error::{Error, Result};
use crate::bookkeeping::heap::Heap;
use crate::bookkeeping::report::OomCause;
use crate::bookkeeping::reservation::Reservation;
use crate::bookkeeping::segment::segment_size;
use crate::bookkeeping::size::GRANULE;
use crate::policy::config::{EXPANSION_STEP, Growth};
use crate::policy::source::{MemorySource, SourceError};

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
    /// Whether the allocator grows one region in place: under [`Growth::Expandable`], and under
    /// [`Growth::OnDemand`] over a source that [can resize](MemorySource::can_resize). Fixed for
    /// the allocator's life.
    in_place: bool,
    /// The step the growable region grows and shrinks in: the source's
    /// [`growth_step`](MemorySource::growth_step), a positive multiple of the granule.
    step: u64,
}

impl Grower {
    /// A grower over `source` under `policy`.
    pub fn new(source: Box<dyn MemorySource>, policy: Growth) -> Self {
        let in_place = match policy {
            Growth::Expandable => true,
            Growth::OnDemand => source.can_resize(),
            Growth::Preallocate => false,
        };
        let step = source
            .growth_step()
            .max(1)
            .div_ceil(GRANULE)
            .saturating_mul(GRANULE);
        Self {
            source,
            policy,
            in_place,
            step,
        }
    }

    /// The step the growable region grows and shrinks in.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// How the allocator reserves, under its policy and over its source.
    pub fn reservation(&self) -> Reservation {
        match self.policy {
            Growth::Preallocate => Reservation::Preallocated,
            _ if self.in_place && self.source.can_resize() => {
                Reservation::InPlace { step: self.step }
            }
            Growth::Expandable => Reservation::Steps {
                step: EXPANSION_STEP,
            },
            Growth::OnDemand => Reservation::Segments,
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
        if self.in_place {
            return self.grow_in_place(heap, rounded, headroom);
        }
        let size = match self.policy {
            Growth::Preallocate => headroom,
            Growth::OnDemand | Growth::Expandable => segment_size(rounded),
        };
        self.grow_by_region(heap, rounded, size.min(headroom))
    }

    /// Reserves a new region of `size` bytes for a request of `rounded`, backing off while the
    /// source refuses.
    fn grow_by_region(
        &mut self,
        heap: &mut Heap,
        rounded: u64,
        size: u64,
    ) -> std::result::Result<RegionChange, GrowFailure> {
        if rounded > size {
            return Err(OomCause::LimitReached.into());
        }
        let (base, size) = self.reserve_backing_off(size, rounded)?;
        self.add_region(heap, base, size)
            .map_err(|err| OomCause::SourceRefused(err.to_string()).into())
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

    /// Grows the growable region at its end by just enough of the source's steps that its free
    /// tail holds `rounded` bytes; without one, reserves a region of `rounded` bytes rounded up
    /// to the step (to [`EXPANSION_STEP`] for a source that cannot resize).
    fn grow_in_place(
        &mut self,
        heap: &mut Heap,
        rounded: u64,
        headroom: u64,
    ) -> std::result::Result<RegionChange, GrowFailure> {
        let resizable = self.source.can_resize();
        let Some(end) = heap.growable_end().filter(|_| resizable) else {
            let step = if resizable { self.step } else { EXPANSION_STEP };
            let size = rounded.div_ceil(step).saturating_mul(step);
            return self.grow_by_region(heap, rounded, headroom.min(size));
        };
        let needed = rounded - end.free_tail;
        if needed > headroom {
            return Err(OomCause::LimitReached.into());
        }
        let extra = needed
            .div_ceil(self.step)
            .saturating_mul(self.step)
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
        if !heap.add_region(base, size, self.in_place) {
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

    /// Gives back whole steps of the growable region's free tail.
    fn shrink_growable(&mut self, heap: &mut Heap) -> Option<RegionChange> {
        let end = heap.growable_end()?;
        let cut = end.free_tail / self.step * self.step;
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
