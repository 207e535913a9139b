//! Out-of-memory reports: what was asked, what was there, why it failed and what to do.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::bookkeeping::reservation::Reservation;
use crate::bookkeeping::size::format_bytes;
use crate::bookkeeping::snapshot::{BinRow, ChunkSnapshot};
use crate::bookkeeping::stats::TagUsage;
use crate::bookkeeping::tag::Tag;

/// The kind of out-of-memory, which decides the cure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Enough bytes are free in total, but no free block is big enough.
    Fragmentation,
    /// Not enough memory even if everything were perfectly packed.
    Capacity,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Fragmentation => "fragmentation",
            Self::Capacity => "capacity",
        })
    }
}

/// Why the allocator could not find or make room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomCause {
    /// The request alone is larger than the limit (or its rounding overflows).
    ExceedsLimit,
    /// Growing would pass the limit.
    LimitReached,
    /// The memory source refused to reserve more, with its explanation.
    SourceRefused(String),
    /// A test armed this failure with [`Allocator::inject_oom`](crate::Allocator::inject_oom).
    Injected,
}

/// One region's occupancy, drawn as a fixed-width map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionOccupancy {
    /// Base address.
    pub base: u64,
    /// Length in bytes.
    pub size: u64,
    /// 100 characters: `#` in use, `.` free, `+` partly in use.
    pub map: String,
}

/// Width of the occupancy maps in a report.
pub const OCCUPANCY_WIDTH: usize = 100;

/// Largest live allocations listed in a report.
pub const LARGEST_LISTED: usize = 10;

/// Everything known about a failed allocation, at the moment it failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomReport {
    /// The memory source's name.
    pub source: String,
    /// Bytes asked for.
    pub requested: u64,
    /// Bytes after rounding to the granule (`None` if rounding overflows).
    pub rounded: Option<u64>,
    /// The tag of the failed request.
    pub tag: Tag,
    /// The most bytes that may be reserved.
    pub limit: u64,
    /// Bytes handed out.
    pub in_use: u64,
    /// Bytes reserved from the source.
    pub reserved: u64,
    /// How they were reserved.
    pub reservation: Reservation,
    /// Bytes reserved but not handed out.
    pub free: u64,
    /// Padding inside chunks handed out whole (part of `in_use`).
    pub internal_fragmentation: u64,
    /// The largest free chunk.
    pub largest_free: u64,
    /// `(free - largest_free) / free`.
    pub fragmentation: f64,
    /// Bytes that could serve the request if every live allocation were packed at its request
    /// rounded to 256, with no padding and no holes: the limit (or, when the source refused to
    /// grow, what is reserved) less those packed sizes.
    pub available_if_packed: u64,
    /// Fragmentation or capacity.
    pub verdict: Verdict,
    /// Why no room could be made.
    pub cause: OomCause,
    /// Live and peak bytes per tag.
    pub tags: Vec<TagUsage>,
    /// Chunks in use and free per size class.
    pub bins: Vec<BinRow>,
    /// The largest live allocations, largest first.
    pub largest_live: Vec<ChunkSnapshot>,
    /// One occupancy map per region.
    pub regions: Vec<RegionOccupancy>,
}

impl OomReport {
    /// What to do about this OOM, in a sentence or two.
    pub fn advice(&self) -> String {
        let rounded = self.rounded.unwrap_or(u64::MAX);
        match (&self.cause, self.verdict) {
            (OomCause::Injected, _) => {
                "This OOM was injected on purpose (Allocator::inject_oom), to test recovery."
                    .to_owned()
            }
            (OomCause::ExceedsLimit, _) => format!(
                "The request alone is larger than the limit of {}: split the tensor, shrink the \
                 batch or the model, or raise the limit.",
                format_bytes(self.limit)
            ),
            (_, Verdict::Fragmentation) => format!(
                "{} would be free if memory were packed, but no free block is {} long: {} is \
                 held in holes between allocations and {} is padding inside chunks handed out \
                 whole. Allocate long-lived tensors (weights, optimizer state) before short-lived \
                 ones, keep tensor sizes uniform, lower max_internal_fragmentation, use expandable \
                 growth, or release cached regions between phases.",
                format_bytes(self.available_if_packed),
                format_bytes(rounded),
                format_bytes(self.free),
                format_bytes(self.internal_fragmentation)
            ),
            (OomCause::SourceRefused(message), Verdict::Capacity) => format!(
                "The memory source refused to grow ({message}); other processes may hold the \
                 memory. Even perfectly packed, {} more would be needed: reduce the batch size \
                 (accumulate gradients over micro-batches), use mixed precision, checkpoint \
                 activations, or lower the limit to what the device really has.",
                format_bytes(rounded.saturating_sub(self.available_if_packed))
            ),
            (_, Verdict::Capacity) => format!(
                "Even perfectly packed, {} more would be needed: reduce the batch size \
                 (accumulate gradients over micro-batches), use mixed precision, checkpoint \
                 activations, or raise the limit of {}.",
                format_bytes(rounded.saturating_sub(self.available_if_packed)),
                format_bytes(self.limit)
            ),
        }
    }
}

impl fmt::Display for OomReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rounded = self
            .rounded
            .map_or_else(|| "overflows".to_owned(), format_bytes);
        writeln!(
            f,
            "out of memory on `{}`: failed to allocate {} ({} rounded) for {}",
            self.source,
            format_bytes(self.requested),
            rounded,
            self.tag
        )?;
        match self.cause {
            // Nothing ran out: the state below is what the request failed in, not why.
            OomCause::Injected => writeln!(f, "verdict: none. {}", self.advice())?,
            _ => writeln!(f, "verdict: {} OOM. {}", self.verdict, self.advice())?,
        }
        writeln!(
            f,
            "limit {} | in use {} ({} of it padding) | reserved {} | free {} | \
             largest free block {} | fragmentation {:.1}%",
            format_bytes(self.limit),
            format_bytes(self.in_use),
            format_bytes(self.internal_fragmentation),
            format_bytes(self.reserved),
            format_bytes(self.free),
            format_bytes(self.largest_free),
            self.fragmentation * 100.0
        )?;
        writeln!(f, "reserved as {}", self.reservation)?;
        writeln!(f, "held by tag:")?;
        let held = || self.tags.iter().filter(|usage| usage.live > 0);
        let width = crate::bookkeeping::tag::name_width(held().map(|usage| usage.tag));
        for usage in held() {
            writeln!(
                f,
                "  {:<width$} {:>12} in {} allocations (peak {})",
                usage.tag.name(),
                format_bytes(usage.live),
                usage.live_allocations,
                format_bytes(usage.peak)
            )?;
        }
        writeln!(
            f,
            "bins:\n  {:>4} {:>12} {:>8} {:>12} {:>12} {:>8} {:>12}",
            "bin", "chunks >=", "in use", "bytes", "requested", "free", "free bytes"
        )?;
        for row in &self.bins {
            writeln!(
                f,
                "  {:>4} {:>12} {:>8} {:>12} {:>12} {:>8} {:>12}",
                row.bin,
                format_bytes(row.min_size),
                row.used_chunks,
                format_bytes(row.used_bytes),
                format_bytes(row.used_requested),
                row.free_chunks,
                format_bytes(row.free_bytes)
            )?;
        }
        writeln!(f, "largest live allocations:")?;
        for chunk in &self.largest_live {
            let tag = chunk.tag.map_or("?", Tag::name);
            writeln!(
                f,
                "  {:#014x} {:>12} {}",
                chunk.addr,
                format_bytes(chunk.size),
                tag
            )?;
        }
        writeln!(f, "regions (# in use, . free, + partly):")?;
        for region in &self.regions {
            writeln!(
                f,
                "  {:#014x} {:>12} [{}]",
                region.base,
                format_bytes(region.size),
                region.map
            )?;
        }
        Ok(())
    }
}
