//! Replaying a trace against an allocator configuration.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::Serialize;

use super::{NumberedOp, TraceOp};
use crate::allocator::Allocator;
use crate::bookkeeping::error::{Error, Result};
use crate::bookkeeping::history::History;
use crate::bookkeeping::report::{OomReport, Verdict};
use crate::bookkeeping::size::format_bytes;
use crate::bookkeeping::stats::Stats;
use crate::bookkeeping::tag::Tag;
use crate::policy::config::{AllocatorConfig, EXPANSION_STEP};
use crate::policy::source::VirtualMemory;

/// OOMs listed one by one in the human report.
const OOMS_LISTED: usize = 10;

/// One failed allocation during a replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomEvent {
    /// The operation's number: its line in the trace file for operations read with
    /// [`read_trace_lines`](super::read_trace_lines), else its one-based index in the trace.
    pub op: usize,
    /// Bytes requested.
    pub requested: u64,
    /// Its tag.
    pub tag: Tag,
    /// Fragmentation or capacity.
    pub verdict: Verdict,
    /// True for a request the trace records as failed: the replay failed where the recorded
    /// program did.
    pub recorded: bool,
}

/// What a replay measured. Serializes to exactly the documented JSON keys.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// Operations in the trace.
    pub ops: usize,
    /// Successful allocations.
    pub allocs: u64,
    /// Frees performed (frees of failed allocations are skipped).
    pub frees: u64,
    /// Failed allocations, the recorded failed requests that failed again among them.
    pub ooms: u64,
    /// Requests the trace records as failed (`oom` lines): a replay under the settings the
    /// trace was recorded with fails each of them again.
    pub recorded_ooms: u64,
    /// Recorded failed requests that fitted in this replay; each was freed at once, as the
    /// recorded program never held it (the peaks count it while it lived).
    pub recorded_ooms_fitted: u64,
    /// Highest bytes in use.
    pub peak_in_use: u64,
    /// Highest bytes reserved.
    pub peak_reserved: u64,
    /// The number of the first failed operation (its line in the trace file, or its one-based
    /// index; see [`OomEvent::op`]).
    pub first_oom_op: Option<usize>,
    /// The first OOM's verdict.
    pub first_oom_verdict: Option<Verdict>,
    /// Fragmentation when the first OOM happened.
    pub fragmentation_at_first_oom: Option<f64>,
    /// Largest free block when the first OOM happened.
    pub largest_free_at_first_oom: Option<u64>,
    /// Every OOM with its verdict.
    #[serde(skip)]
    pub oom_events: Vec<OomEvent>,
    /// The full report of the first OOM.
    #[serde(skip)]
    pub first_oom_report: Option<Box<OomReport>>,
    /// Statistics at the end of the replay.
    #[serde(skip)]
    pub final_stats: Option<Stats>,
    /// The allocator's history, where its configuration records one.
    #[serde(skip)]
    pub history: Option<History>,
}

/// Replays `ops` on a fresh allocator over a virtual address space of `capacity` bytes.
///
/// A failed allocation is counted and skipped, and so is its later free. A request the trace
/// records as failed ([`TraceOp::Oom`]) is tried: where it fails again it is an OOM, where it
/// fits it is freed at once (the recorded program never held it), and both are counted apart.
/// A trace that frees an id it never allocated, or reuses a live id, is an error naming the
/// operation by its number: its line, for operations read with
/// [`read_trace_lines`](super::read_trace_lines), else its one-based index.
///
/// ```
/// use headroom_alloc::{AllocatorConfig, Tag, trace::{TraceOp, replay}};
/// let ops = [
///     TraceOp::Alloc { id: 1, size: 3 << 20, tag: Tag::WEIGHTS },
///     TraceOp::Alloc { id: 2, size: 3 << 20, tag: Tag::ACTIVATIONS },
///     TraceOp::Free { id: 1 },
///     TraceOp::Free { id: 2 },
/// ];
/// let report = replay(&ops, AllocatorConfig::default(), 4 << 20)?;
/// assert_eq!((report.allocs, report.ooms, report.frees), (1, 1, 1));
/// assert_eq!(report.first_oom_op, Some(2));
/// # Ok::<(), headroom_alloc::Error>(())
/// ```
pub fn replay<O: NumberedOp>(
    ops: &[O],
    config: AllocatorConfig,
    capacity: u64,
) -> Result<ReplayReport> {
    replay_with_growth_step(ops, config, capacity, EXPANSION_STEP)
}

/// [`replay`] over an address space that grows a region in place in steps of `growth_step`
/// bytes, as the source the trace was recorded from did ([`TraceSettings`](super::TraceSettings)
/// gives it): the default, 2 MiB, is CUDA's page; a host page is 4 KiB.
pub fn replay_with_growth_step<O: NumberedOp>(
    ops: &[O],
    config: AllocatorConfig,
    capacity: u64,
    growth_step: u64,
) -> Result<ReplayReport> {
    replay_with(ops, config, capacity, growth_step, RecordedOoms::Tried)
}

/// What a replay does with the requests a trace records as failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordedOoms {
    /// Each is tried, and freed at once where it fits.
    Tried,
    /// They are passed over: the replay asks only whether what the program held fits.
    Skipped,
}

/// [`replay_with_growth_step`], with the recorded failed requests tried or passed over.
pub(crate) fn replay_with<O: NumberedOp>(
    ops: &[O],
    config: AllocatorConfig,
    capacity: u64,
    growth_step: u64,
    recorded_ooms: RecordedOoms,
) -> Result<ReplayReport> {
    let space = VirtualMemory::new(capacity).with_growth_step(growth_step);
    let mut allocator = Allocator::new(space, config)?;
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut failed: HashSet<u64> = HashSet::new();
    let mut report = ReplayReport {
        ops: ops.len(),
        allocs: 0,
        frees: 0,
        ooms: 0,
        recorded_ooms: 0,
        recorded_ooms_fitted: 0,
        peak_in_use: 0,
        peak_reserved: 0,
        first_oom_op: None,
        first_oom_verdict: None,
        fragmentation_at_first_oom: None,
        largest_free_at_first_oom: None,
        oom_events: Vec::new(),
        first_oom_report: None,
        final_stats: None,
        history: None,
    };
    for (index, numbered) in ops.iter().enumerate() {
        let op_number = numbered.number(index);
        let bad = |message: String| Error::Trace {
            path: None,
            line: op_number,
            message,
        };
        match numbered.op() {
            TraceOp::Alloc { id, size, tag } => {
                if live.contains_key(&id) {
                    return Err(bad(format!("id {id} is allocated again while still live")));
                }
                failed.remove(&id);
                match allocator.allocate(size, tag) {
                    Ok(allocation) => {
                        live.insert(id, allocation.addr);
                        report.allocs += 1;
                    }
                    Err(Error::OutOfMemory(oom)) => {
                        failed.insert(id);
                        report.count_oom(op_number, size, tag, oom, false);
                    }
                    Err(other) => return Err(other),
                }
            }
            TraceOp::Oom { size, tag } => {
                if recorded_ooms == RecordedOoms::Skipped {
                    continue;
                }
                report.recorded_ooms += 1;
                match allocator.allocate(size, tag) {
                    Ok(allocation) => {
                        allocator.free(allocation.addr)?;
                        report.recorded_ooms_fitted += 1;
                    }
                    Err(Error::OutOfMemory(oom)) => {
                        report.count_oom(op_number, size, tag, oom, true);
                    }
                    Err(other) => return Err(other),
                }
            }
            TraceOp::Free { id } => match live.remove(&id) {
                Some(addr) => {
                    allocator.free(addr)?;
                    report.frees += 1;
                }
                None if failed.remove(&id) => {}
                None => return Err(bad(format!("free of id {id}, which is not live"))),
            },
        }
    }
    let stats = allocator.stats();
    report.peak_in_use = stats.peak_in_use;
    report.peak_reserved = stats.peak_reserved;
    report.final_stats = Some(stats);
    report.history = allocator.take_history();
    Ok(report)
}

impl ReplayReport {
    /// Counts an OOM of operation `op`, a request of `size` bytes for `tag` (`recorded` when the
    /// trace records it as failed), keeping the report of the first.
    fn count_oom(&mut self, op: usize, size: u64, tag: Tag, oom: Box<OomReport>, recorded: bool) {
        self.ooms += 1;
        self.oom_events.push(OomEvent {
            op,
            requested: size,
            tag,
            verdict: oom.verdict,
            recorded,
        });
        if self.first_oom_op.is_none() {
            self.first_oom_op = Some(op);
            self.first_oom_verdict = Some(oom.verdict);
            self.fragmentation_at_first_oom = Some(oom.fragmentation);
            self.largest_free_at_first_oom = Some(oom.largest_free);
            self.first_oom_report = Some(oom);
        }
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "replayed {} ops: {} allocs, {} frees, {} OOMs",
            self.ops, self.allocs, self.frees, self.ooms
        )?;
        if self.recorded_ooms > 0 {
            writeln!(
                f,
                "the trace records {} failed request{}: {} failed here too, {} fitted (each freed \
                 at once)",
                self.recorded_ooms,
                if self.recorded_ooms == 1 { "" } else { "s" },
                self.recorded_ooms - self.recorded_ooms_fitted,
                self.recorded_ooms_fitted
            )?;
        }
        writeln!(
            f,
            "peak in use {} | peak reserved {}",
            format_bytes(self.peak_in_use),
            format_bytes(self.peak_reserved)
        )?;
        if let Some(stats) = &self.final_stats {
            writeln!(
                f,
                "at the end: in use {} | reserved {} in {} regions | largest free {} | \
                 fragmentation {:.1}%",
                format_bytes(stats.in_use),
                format_bytes(stats.reserved),
                stats.regions,
                format_bytes(stats.largest_free),
                stats.fragmentation * 100.0
            )?;
            writeln!(f, "reserved as {}", stats.reservation)?;
            writeln!(f, "peak per tag:")?;
            let width =
                crate::bookkeeping::tag::name_width(stats.tags.iter().map(|usage| usage.tag));
            for usage in &stats.tags {
                writeln!(
                    f,
                    "  {:<width$} {:>12}",
                    usage.tag.name(),
                    format_bytes(usage.peak)
                )?;
            }
        }
        if self.oom_events.is_empty() {
            return writeln!(f, "no OOM");
        }
        writeln!(f, "OOMs:")?;
        for event in self.oom_events.iter().take(OOMS_LISTED) {
            writeln!(
                f,
                "  op {:>8}: {:>12} for {:<16} {} OOM{}",
                event.op,
                format_bytes(event.requested),
                event.tag.name(),
                event.verdict,
                if event.recorded { " (as recorded)" } else { "" }
            )?;
        }
        if self.oom_events.len() > OOMS_LISTED {
            writeln!(f, "  ... and {} more", self.oom_events.len() - OOMS_LISTED)?;
        }
        if let Some(report) = &self.first_oom_report {
            writeln!(f, "\nthe first OOM:\n{report}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(id: u64, size: u64) -> TraceOp {
        TraceOp::Alloc {
            id,
            size,
            tag: Tag::ACTIVATIONS,
        }
    }

    #[test]
    fn failed_allocations_and_their_frees_are_skipped() {
        let ops = [
            alloc(1, 1 << 20),
            alloc(2, 8 << 20),
            TraceOp::Free { id: 2 },
            TraceOp::Free { id: 1 },
        ];
        let report = replay(&ops, AllocatorConfig::default(), 4 << 20).unwrap();
        assert_eq!((report.allocs, report.frees, report.ooms), (1, 1, 1));
        assert_eq!(report.first_oom_verdict, Some(Verdict::Capacity));
        let json = serde_json::to_value(&report).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys.len(), 12, "{keys:?}");
    }

    #[test]
    fn the_tag_table_stays_aligned_past_long_tag_names() {
        let long = Tag::named("activations/a rather long layer name").unwrap();
        let ops = [
            alloc(1, 1 << 20),
            TraceOp::Alloc {
                id: 2,
                size: 3 << 20,
                tag: long,
            },
        ];
        let report = replay(&ops, AllocatorConfig::default(), 64 << 20).unwrap();
        let text = report.to_string();
        let rows: Vec<usize> = text
            .lines()
            .skip_while(|line| *line != "peak per tag:")
            .skip(1)
            .take(2)
            .map(str::len)
            .collect();
        assert_eq!(rows.len(), 2, "{text}");
        assert_eq!(rows[0], rows[1], "{text}");
    }

    #[test]
    fn inconsistent_traces_name_the_operation() {
        let twice = [alloc(1, 256), alloc(1, 256)];
        let err = replay(&twice, AllocatorConfig::default(), 1 << 20).unwrap_err();
        assert!(matches!(err, Error::Trace { line: 2, .. }), "{err}");
        let unknown = [alloc(1, 256), TraceOp::Free { id: 9 }];
        let err = replay(&unknown, AllocatorConfig::default(), 1 << 20).unwrap_err();
        assert!(matches!(err, Error::Trace { line: 2, .. }), "{err}");
    }

    #[test]
    fn errors_and_ooms_name_the_line_of_the_file() {
        let text = "\n{\"op\":\"alloc\",\"id\":1,\"size\":256}\n\n\
                    {\"op\":\"alloc\",\"id\":2,\"size\":4194304}\n\n{\"op\":\"free\",\"id\":9}\n";
        let ops = crate::tools::trace::read_trace_lines(text.as_bytes()).unwrap();
        assert_eq!(
            ops.iter().map(|&(line, _)| line).collect::<Vec<_>>(),
            [2, 4, 6]
        );
        let err = replay(&ops, AllocatorConfig::default(), 1 << 20).unwrap_err();
        assert!(matches!(err, Error::Trace { line: 6, .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "trace line 6: free of id 9, which is not live"
        );
        let named = err.in_trace_file(std::path::Path::new("run/trace.jsonl"));
        assert_eq!(
            named.to_string(),
            "trace run/trace.jsonl line 6: free of id 9, which is not live"
        );
        let report = replay(&ops[..2], AllocatorConfig::default(), 1 << 20).unwrap();
        assert_eq!(report.first_oom_op, Some(4));
        assert_eq!(report.oom_events[0].op, 4);
    }

    #[test]
    fn a_double_free_names_the_line_of_the_second_free() {
        let text = "{\"op\":\"alloc\",\"id\":1,\"size\":256}\n{\"op\":\"free\",\"id\":1}\n\n\
                    {\"op\":\"free\",\"id\":1}\n";
        let ops = crate::tools::trace::read_trace_lines(text.as_bytes()).unwrap();
        let err = replay(&ops, AllocatorConfig::default(), 1 << 20).unwrap_err();
        assert_eq!(
            err.to_string(),
            "trace line 4: free of id 1, which is not live"
        );
    }
}
