//! Finding the smallest limit at which a trace replays without an out-of-memory.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use super::replay::{RecordedOoms, ReplayReport, replay_with};
use super::{NumberedOp, TraceOp};
use crate::bookkeeping::error::{Error, Result};
use crate::bookkeeping::report::Verdict;
use crate::bookkeeping::size::{GRANULE, format_bytes, round_size};
use crate::policy::config::{AllocatorConfig, EXPANSION_STEP, Limit};

/// The largest limit the search tries; a trace that does not fit under it is an error.
pub const MAX_SEARCHED_LIMIT: u64 = 1 << 62;

/// What failed one granule below the limit found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureBelow {
    /// The limit tried: one granule below the one found.
    pub limit: u64,
    /// The number of the first operation that failed there (its line in the trace file, or its
    /// one-based index).
    pub first_oom_op: usize,
    /// Bytes that operation asked for.
    pub requested: u64,
    /// That OOM's verdict: fragmentation or capacity.
    pub verdict: Verdict,
    /// Allocations that failed there, in all.
    pub ooms: u64,
}

/// The answer of [`find_limit`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitSearch {
    /// The smallest limit found at which the whole trace replays without an OOM; a multiple of
    /// the granule.
    pub limit: u64,
    /// Peak bytes in use when replayed at `limit`.
    pub peak_in_use: u64,
    /// Peak bytes reserved when replayed at `limit`.
    pub peak_reserved: u64,
    /// The most bytes live at once with every request rounded to the granule: no smaller limit
    /// can fit.
    pub packed_peak: u64,
    /// The first OOM one granule below `limit` (none when `limit` is one granule).
    pub below: Option<FailureBelow>,
    /// Replays the search ran.
    pub replays: u32,
}

/// Finds the smallest limit, a multiple of the 256-byte granule, at which `ops` replay without
/// any OOM under `config`'s growth policy, internal-fragmentation cap and garbage collection
/// (its history is ignored; each replay's capacity is the limit tried). The requests the trace
/// records as failed ([`TraceOp::Oom`]) are passed over: the limit found is one at which every
/// allocation the recorded program held succeeds.
///
/// The search keeps a limit known to fail and one known to fit. The first is one granule below
/// the packed peak (the most bytes live at once, each request rounded to the granule), which no
/// allocator can beat. The second is `config`'s limit when it is in bytes and the trace fits
/// under it (so the answer is never larger), else the sum of every rounded request, doubled
/// until a replay fits. Bisection then closes the gap to one granule, in about
/// log2(limit / 256) replays.
///
/// Whether a trace fits is not monotone in the limit for every policy: the limit caps the last
/// region or growth step, so a smaller limit changes where a region ends and where chunks land,
/// and a larger limit can fail where a smaller one fits (even one preallocated region changes
/// best fit through the size of its free tail). The answer is
/// therefore a limit that fits with one granule less failing, the smallest such found; a smaller
/// limit that fits may exist between the packed peak and it, and a larger one may fail.
///
/// ```
/// use headroom_alloc::{AllocatorConfig, Growth, Tag, Verdict, trace::{TraceOp, find_limit}};
/// let ops = [
///     TraceOp::Alloc { id: 1, size: 1 << 20, tag: Tag::WEIGHTS },
///     TraceOp::Alloc { id: 2, size: 512 << 10, tag: Tag::ACTIVATIONS },
///     TraceOp::Free { id: 2 },
///     TraceOp::Free { id: 1 },
/// ];
/// let config = AllocatorConfig::default()
///     .with_growth(Growth::Preallocate)
///     .with_max_internal_fragmentation(256);
/// let search = find_limit(&ops, config)?;
/// assert_eq!(search.limit, 3 << 19); // 1.5 MiB: exactly what is live at the peak
/// assert_eq!(search.below.unwrap().verdict, Verdict::Capacity);
/// # Ok::<(), headroom_alloc::Error>(())
/// ```
pub fn find_limit<O: NumberedOp>(ops: &[O], config: AllocatorConfig) -> Result<LimitSearch> {
    find_limit_with_growth_step(ops, config, EXPANSION_STEP)
}

/// [`find_limit`] over address spaces that grow a region in place in steps of `growth_step`
/// bytes ([`replay_with_growth_step`](super::replay_with_growth_step)).
pub fn find_limit_with_growth_step<O: NumberedOp>(
    ops: &[O],
    config: AllocatorConfig,
    growth_step: u64,
) -> Result<LimitSearch> {
    let config = config.with_history(0);
    let mut replays = 0;
    let mut replay_at = |limit: u64| {
        replays += 1;
        replay_with(
            ops,
            config.clone().with_limit_bytes(limit),
            limit,
            growth_step,
            RecordedOoms::Skipped,
        )
    };
    let (packed_peak, total) = packed_sizes(ops)?;
    // Nothing below the packed peak fits (and 0 is no limit at all).
    let mut fails = packed_peak.saturating_sub(GRANULE);
    let mut below_report: Option<ReplayReport> = None;
    let mut fits = total.max(packed_peak).max(GRANULE);
    // A limit in bytes that the trace fits under (the one it was recorded under, say) bounds
    // the answer from above.
    let mut known_fit = None;
    if let Limit::Bytes(bytes) = config.limit {
        let known = bytes / GRANULE * GRANULE;
        if known > fails && known < fits {
            let report = replay_at(known)?;
            if report.ooms == 0 {
                (fits, known_fit) = (known, Some(report));
            }
        }
    }
    let mut fit_report = loop {
        if let Some(report) = known_fit.take() {
            break report;
        }
        let report = replay_at(fits)?;
        if report.ooms == 0 {
            break report;
        }
        if fits >= MAX_SEARCHED_LIMIT {
            return Err(never_fits(&report));
        }
        fails = fits;
        below_report = Some(report);
        fits = fits.saturating_mul(2).min(MAX_SEARCHED_LIMIT);
    };
    while fits - fails > GRANULE {
        let middle = fails + (fits - fails) / 2 / GRANULE * GRANULE;
        let report = replay_at(middle)?;
        if report.ooms == 0 {
            (fits, fit_report) = (middle, report);
        } else {
            (fails, below_report) = (middle, Some(report));
        }
    }
    let below_report = match below_report {
        Some(report) if fails > 0 => Some(report),
        None if fails > 0 => Some(replay_at(fails)?),
        _ => None,
    };
    let below = below_report
        .map(|report| failure_below(fails, &report))
        .transpose()?;
    Ok(LimitSearch {
        limit: fits,
        peak_in_use: fit_report.peak_in_use,
        peak_reserved: fit_report.peak_reserved,
        packed_peak,
        below,
        replays,
    })
}

/// The packed peak (most rounded bytes live at once) and the sum of every rounded request. A
/// request too large to round is an error naming it.
fn packed_sizes<O: NumberedOp>(ops: &[O]) -> Result<(u64, u64)> {
    let (mut live, mut peak, mut total) = (HashMap::new(), 0u64, 0u64);
    let mut in_use = 0u64;
    for (index, numbered) in ops.iter().enumerate() {
        match numbered.op() {
            TraceOp::Alloc { id, size, .. } => {
                let rounded = round_size(size)
                    .filter(|&rounded| rounded <= MAX_SEARCHED_LIMIT)
                    .ok_or_else(|| Error::Trace {
                        path: None,
                        line: numbered.number(index),
                        message: format!(
                            "an allocation of {size} bytes is larger than any limit searched \
                             ({})",
                            format_bytes(MAX_SEARCHED_LIMIT)
                        ),
                    })?;
                // An id allocated again while live is the replay's error to report.
                in_use = in_use.saturating_sub(live.insert(id, rounded).unwrap_or(0));
                in_use = in_use.saturating_add(rounded);
                peak = peak.max(in_use);
                total = total.saturating_add(rounded);
            }
            TraceOp::Free { id } => {
                in_use = in_use.saturating_sub(live.remove(&id).unwrap_or(0));
            }
            TraceOp::Oom { .. } => {}
        }
    }
    Ok((peak, total.min(MAX_SEARCHED_LIMIT)))
}

/// The error for a trace that fails even at the largest limit searched.
fn never_fits(report: &ReplayReport) -> Error {
    let first = report.oom_events.first();
    Error::Trace {
        path: None,
        line: first.map_or(0, |event| event.op),
        message: format!(
            "no limit up to {} replays this trace without an OOM; this allocation of {} fails \
             there",
            format_bytes(MAX_SEARCHED_LIMIT),
            format_bytes(first.map_or(0, |event| event.requested))
        ),
    }
}

/// The first OOM of a replay at `limit` that must have failed.
fn failure_below(limit: u64, report: &ReplayReport) -> Result<FailureBelow> {
    let first = report.oom_events.first().ok_or_else(|| {
        Error::Corrupted(format!(
            "a replay at {limit} bytes, below the packed peak, had no OOM"
        ))
    })?;
    Ok(FailureBelow {
        limit,
        first_oom_op: first.op,
        requested: first.requested,
        verdict: first.verdict,
        ooms: report.ooms,
    })
}

impl fmt::Display for LimitSearch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "smallest limit without an OOM: {} ({} bytes), found in {} replays",
            format_bytes(self.limit),
            self.limit,
            self.replays
        )?;
        writeln!(
            f,
            "at that limit: peak in use {} | peak reserved {} | packed peak {}",
            format_bytes(self.peak_in_use),
            format_bytes(self.peak_reserved),
            format_bytes(self.packed_peak)
        )?;
        match &self.below {
            Some(below) => writeln!(
                f,
                "one granule below ({} bytes): {} OOMs, the first at op {} ({}), a {} OOM",
                below.limit,
                below.ooms,
                below.first_oom_op,
                format_bytes(below.requested),
                below.verdict
            ),
            None => writeln!(f, "one granule is the smallest limit there is"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bookkeeping::tag::Tag;
    use crate::policy::config::Growth;
    use crate::tools::trace::{TransformerTrace, replay};

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;

    fn alloc(id: u64, size: u64) -> TraceOp {
        TraceOp::Alloc {
            id,
            size,
            tag: Tag::ACTIVATIONS,
        }
    }

    fn free(id: u64) -> TraceOp {
        TraceOp::Free { id }
    }

    /// One preallocated region, split whenever anything is left over.
    fn packed() -> AllocatorConfig {
        AllocatorConfig::default()
            .with_growth(Growth::Preallocate)
            .with_max_internal_fragmentation(GRANULE)
    }

    #[test]
    fn a_trace_that_packs_perfectly_needs_exactly_its_peak() {
        let ops = [
            alloc(1, MIB),
            alloc(2, 512 * KIB),
            free(1),
            alloc(3, 256 * KIB),
            free(2),
            free(3),
        ];
        let search = find_limit(&ops, packed()).unwrap();
        assert_eq!(search.limit, 1536 * KIB);
        assert_eq!(search.packed_peak, 1536 * KIB);
        assert_eq!(search.peak_in_use, 1536 * KIB);
        assert_eq!(search.peak_reserved, 1536 * KIB);
        let below = search.below.clone().unwrap();
        assert_eq!(below.limit, 1536 * KIB - GRANULE);
        assert_eq!((below.first_oom_op, below.requested), (2, 512 * KIB));
        assert_eq!(below.verdict, Verdict::Capacity);
        let text = search.to_string();
        assert!(text.contains("1.50 MiB (1572864 bytes)"), "{text}");
        assert!(text.contains("a capacity OOM"), "{text}");
    }

    #[test]
    fn a_hole_between_live_allocations_costs_a_fragmentation_oom() {
        // a, b, c side by side; a and c freed leave b in the middle, so d (2 MiB) fits only past
        // c's end: 4 MiB although at most 3 MiB are ever live.
        let ops = [
            alloc(1, MIB),
            alloc(2, MIB),
            alloc(3, MIB),
            free(1),
            free(3),
            alloc(4, 2 * MIB),
            free(2),
            free(4),
        ];
        let search = find_limit(&ops, packed()).unwrap();
        assert_eq!(search.packed_peak, 3 * MIB);
        assert_eq!(search.limit, 4 * MIB);
        let below = search.below.unwrap();
        assert_eq!((below.first_oom_op, below.ooms), (6, 1));
        assert_eq!(below.verdict, Verdict::Fragmentation);
    }

    #[test]
    fn the_answer_fits_and_one_granule_less_fails_for_every_policy() {
        let ops = TransformerTrace::default().with_batch(1).generate();
        for growth in [Growth::OnDemand, Growth::Preallocate, Growth::Expandable] {
            let config = AllocatorConfig::default().with_growth(growth);
            let search = find_limit(&ops, config.clone()).unwrap();
            assert!(search.limit >= search.packed_peak, "{search:?}");
            let at = |limit| replay(&ops, config.clone().with_limit_bytes(limit), limit).unwrap();
            assert_eq!(at(search.limit).ooms, 0, "{growth:?}: {search:?}");
            let below = search.below.as_ref().unwrap();
            assert_eq!(below.limit, search.limit - GRANULE);
            assert_eq!(at(below.limit).first_oom_op, Some(below.first_oom_op));
            assert!(search.replays < 64, "{search:?}");
        }
    }

    #[test]
    fn edge_traces() {
        // No allocation at all: one granule, nothing below.
        let search = find_limit(&[free(1)][..0], packed()).unwrap();
        assert_eq!((search.limit, search.below), (GRANULE, None));
        // One granule-sized allocation.
        let search = find_limit(&[alloc(1, 1)], packed()).unwrap();
        assert_eq!((search.limit, search.peak_in_use), (GRANULE, GRANULE));
        assert_eq!(search.below, None);
        // Inconsistent traces and impossible requests are errors naming the operation.
        let err = find_limit(&[alloc(1, 256), alloc(1, 256)], packed()).unwrap_err();
        assert!(matches!(err, Error::Trace { line: 2, .. }), "{err}");
        let err = find_limit(&[(7, alloc(1, u64::MAX))], packed()).unwrap_err();
        assert!(matches!(err, Error::Trace { line: 7, .. }), "{err}");
        assert!(err.to_string().contains("larger than any limit"), "{err}");
    }
}
