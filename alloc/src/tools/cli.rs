//! The command-line subcommands of `headroom-alloc`, as clap argument groups that other tools
//! (the `headroom` CLI) embed as they are.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::tools::pytorch::{
    SNAPSHOT_POLICIES, Snapshot, replay_snapshot, write_history_memory_viz,
    write_snapshot_replay_memory_viz,
};
use crate::tools::trace::generate::{LogNormalTrace, TransformerTrace};
use crate::tools::trace::{
    NumberedTrace, TraceOp, TraceSettings, find_limit_with_growth_step, growth_name,
    read_trace_file_with_settings, replay_with_growth_step, write_trace,
};
use crate::{AllocatorConfig, EXPANSION_STEP, Error, Growth, Result, format_bytes, parse_size};

/// Replay a JSON Lines trace (or a built-in one) and report peaks, OOMs and fragmentation, or
/// find the smallest limit it fits in. A trace recorded from an allocator replays under that
/// allocator's settings, unless a flag changes one. A PyTorch memory snapshot (the pickle
/// `torch.cuda.memory._dump_snapshot` writes) replays each device's allocation stream under the
/// default and the expandable policy (or the one --growth names), beside what PyTorch reserved
/// for it.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The trace file, or a PyTorch memory snapshot; without it, the built-in trace given by
    /// --builtin.
    pub trace: Option<PathBuf>,
    /// Built-in trace to replay when no file is given.
    #[arg(long, value_enum, default_value_t = Builtin::Transformer)]
    pub builtin: Builtin,
    /// The memory limit (and capacity of the virtual address space), e.g. 64MiB; --find-limit
    /// answers no more than it where the trace fits under it [default: the trace's, else
    /// 64MiB].
    #[arg(long, value_parser = parse_size)]
    pub limit: Option<u64>,
    /// When regions are reserved [default: as the trace was recorded, else on-demand].
    #[arg(long, value_enum)]
    pub growth: Option<GrowthArg>,
    /// Split a free chunk whenever the remainder is at least this large [default: the
    /// trace's, else 128MiB].
    #[arg(long, value_parser = parse_size)]
    pub max_internal_fragmentation: Option<u64>,
    /// Instead of replaying at --limit, find the smallest limit (a multiple of 256 bytes) at
    /// which every allocation the trace holds replays without an OOM (the requests it records
    /// as failed are passed over), and say what fails one granule below it.
    #[arg(long)]
    pub find_limit: bool,
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    pub json: bool,
    /// Also write the replay's allocator history as a PyTorch memory snapshot to this file,
    /// which pytorch.org/memory_viz and `python -m torch.cuda._memory_viz trace_plot` draw (of
    /// a PyTorch snapshot: its blocks as headroom-alloc places them, under --growth, on-demand
    /// by default).
    #[arg(long, value_name = "OUT.pickle", conflicts_with = "find_limit")]
    pub memory_viz: Option<PathBuf>,
}

/// The limit a replay uses when neither a flag nor the trace gives one.
pub const DEFAULT_REPLAY_LIMIT: u64 = 64 << 20;

/// Where a replay's setting came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SettingSource {
    /// A command-line flag.
    Flag,
    /// The trace's first line: the allocator it was recorded from.
    Trace,
    /// The replay's default.
    Default,
}

impl SettingSource {
    /// How the report says it.
    fn said(self) -> &'static str {
        match self {
            Self::Flag => "as given",
            Self::Trace => "the trace's",
            Self::Default => "the default",
        }
    }
}

/// The settings a replay uses, and where each came from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReplaySettings {
    /// The settings.
    #[serde(flatten)]
    pub settings: TraceSettings,
    /// Where the limit came from.
    pub limit_from: SettingSource,
    /// Where the growth policy came from.
    pub growth_from: SettingSource,
    /// Where the split rule came from.
    pub max_internal_fragmentation_from: SettingSource,
}

impl std::fmt::Display for ReplaySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.settings;
        writeln!(
            f,
            "allocator: limit {} ({}), growth {} ({}) in steps of {}, chunks split when {} or \
             more would be left ({}), garbage collection {}",
            format_bytes(s.limit),
            self.limit_from.said(),
            growth_name(s.growth),
            self.growth_from.said(),
            format_bytes(s.growth_step),
            format_bytes(s.max_internal_fragmentation),
            self.max_internal_fragmentation_from.said(),
            if s.garbage_collection { "on" } else { "off" }
        )
    }
}

/// A report with the settings it was made under: one JSON object, or the settings' line and
/// the report.
#[derive(Serialize)]
struct Settled<'a, R> {
    settings: &'a ReplaySettings,
    #[serde(flatten)]
    report: &'a R,
}

impl<R: std::fmt::Display> std::fmt::Display for Settled<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.settings, self.report)
    }
}

/// Write a built-in trace as JSON Lines.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Which trace.
    #[arg(value_enum)]
    pub builtin: Builtin,
    /// Batch size of the transformer trace, or the size scale of the log-normal one.
    #[arg(long, default_value_t = 8)]
    pub scale: u64,
}

/// The built-in traces.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Builtin {
    /// Training steps of a small GPT (batch 8).
    Transformer,
    /// 20 000 log-normal sizes with exponential lifetimes.
    Lognormal,
}

/// Growth policies, as command-line values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GrowthArg {
    /// Reserve as requests need: one region grown in place (the replay's virtual space can).
    OnDemand,
    /// Reserve the whole limit up front.
    Preallocate,
    /// One region that grows and shrinks in place.
    Expandable,
}

impl From<Growth> for GrowthArg {
    fn from(growth: Growth) -> Self {
        match growth {
            Growth::OnDemand => GrowthArg::OnDemand,
            Growth::Preallocate => GrowthArg::Preallocate,
            Growth::Expandable => GrowthArg::Expandable,
        }
    }
}

impl From<GrowthArg> for Growth {
    fn from(growth: GrowthArg) -> Self {
        match growth {
            GrowthArg::OnDemand => Growth::OnDemand,
            GrowthArg::Preallocate => Growth::Preallocate,
            GrowthArg::Expandable => Growth::Expandable,
        }
    }
}

fn builtin_trace(builtin: Builtin, scale: u64) -> Vec<TraceOp> {
    match builtin {
        Builtin::Transformer => TransformerTrace::default().with_batch(scale).generate(),
        Builtin::Lognormal => LogNormalTrace::default()
            .with_scale(scale as f64)
            .generate(),
    }
}

/// Whether the file at `path` starts as a pickle does (protocol 2 or later: a PyTorch memory
/// snapshot); an unreadable file is left to the trace reader's error.
fn is_pickle(path: &std::path::Path) -> bool {
    let mut first = [0u8; 1];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut first))
        .is_ok_and(|()| first[0] == 0x80)
}

fn output_error(source: std::io::Error) -> Error {
    Error::Io {
        path: "standard output".into(),
        source,
    }
}

impl ReplayArgs {
    /// The operations to replay, each with its number (its line in the trace file, or its
    /// one-based index in the built-in trace), and the settings the trace was recorded under
    /// when it gives them. Errors name the file; a file that holds no operation is one.
    pub fn load_trace(&self) -> Result<NumberedTrace> {
        let Some(path) = &self.trace else {
            return Ok((None, (1..).zip(builtin_trace(self.builtin, 8)).collect()));
        };
        let (settings, ops) = read_trace_file_with_settings(path)?;
        if ops.is_empty() {
            return Err(Error::EmptyTrace {
                path: path.display().to_string(),
            });
        }
        Ok((settings, ops))
    }

    /// The settings these arguments give over those a trace was `recorded` under (if known),
    /// over the defaults, each with where it came from.
    pub fn settings(&self, recorded: Option<&TraceSettings>) -> ReplaySettings {
        fn pick<T>(flag: Option<T>, trace: Option<T>, default: T) -> (T, SettingSource) {
            match (flag, trace) {
                (Some(value), _) => (value, SettingSource::Flag),
                (None, Some(value)) => (value, SettingSource::Trace),
                (None, None) => (default, SettingSource::Default),
            }
        }
        let defaults = AllocatorConfig::default();
        let (limit, limit_from) = pick(self.limit, recorded.map(|s| s.limit), DEFAULT_REPLAY_LIMIT);
        let (growth, growth_from) = pick(
            self.growth.map(Growth::from),
            recorded.map(|s| s.growth),
            defaults.growth,
        );
        let (max_internal_fragmentation, max_internal_fragmentation_from) = pick(
            self.max_internal_fragmentation,
            recorded.map(|s| s.max_internal_fragmentation),
            defaults.max_internal_fragmentation,
        );
        ReplaySettings {
            settings: TraceSettings {
                limit,
                growth,
                growth_step: recorded.map_or(EXPANSION_STEP, |s| s.growth_step),
                max_internal_fragmentation,
                garbage_collection: recorded
                    .map_or(defaults.garbage_collection, |s| s.garbage_collection),
            },
            limit_from,
            growth_from,
            max_internal_fragmentation_from,
        }
    }

    /// Replays the trace (or searches for its smallest limit) under the settings these
    /// arguments and the trace give, and writes them and the report to `out`.
    pub fn run(&self, out: impl Write) -> Result<()> {
        if let Some(path) = self.trace.as_deref().filter(|p| is_pickle(p)) {
            let snapshot = Snapshot::read(path)?;
            if let Some(viz) = &self.memory_viz {
                let growth = self.growth.map_or(Growth::OnDemand, Growth::from);
                let counts = write_snapshot_replay_memory_viz(&snapshot, growth, self.limit, viz)?;
                eprintln!(
                    "{}: {counts}, headroom-alloc's {} replay (for pytorch.org/memory_viz)",
                    viz.display(),
                    growth_name(growth)
                );
            }
            let policies = match self.growth {
                Some(growth) => vec![Growth::from(growth)],
                None => SNAPSHOT_POLICIES.to_vec(),
            };
            let report = replay_snapshot(&snapshot, &policies, self.limit, self.find_limit)?;
            return self.write_report(&report, out);
        }
        let (recorded, ops) = self.load_trace()?;
        let settings = self.settings(recorded.as_ref());
        let config = settings.settings.allocator_config();
        let in_file = |err: Error| match &self.trace {
            Some(path) => err.in_trace_file(path),
            None => err,
        };
        if self.find_limit {
            let search = find_limit_with_growth_step(&ops, config, settings.settings.growth_step)
                .map_err(in_file)?;
            self.write_report(
                &Settled {
                    settings: &settings,
                    report: &search,
                },
                out,
            )
        } else {
            let limit = settings.settings.limit;
            // With --memory-viz, the replay records its history for the snapshot.
            let config = match self.memory_viz {
                Some(_) => config.with_history(usize::MAX),
                None => config,
            };
            let mut report =
                replay_with_growth_step(&ops, config, limit, settings.settings.growth_step)
                    .map_err(in_file)?;
            if let (Some(viz), Some(history)) = (&self.memory_viz, report.history.take()) {
                let counts = write_history_memory_viz(&history, limit, viz)?;
                eprintln!("{}: {counts} (for pytorch.org/memory_viz)", viz.display());
            }
            self.write_report(
                &Settled {
                    settings: &settings,
                    report: &report,
                },
                out,
            )
        }
    }

    /// Writes `report` as one JSON object with --json, else as text.
    fn write_report(
        &self,
        report: &(impl Serialize + std::fmt::Display),
        mut out: impl Write,
    ) -> Result<()> {
        if self.json {
            serde_json::to_writer(&mut out, report)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
        } else {
            write!(out, "{report}")
        }
        .map_err(output_error)
    }
}

impl GenerateArgs {
    /// Writes the trace to `out`.
    pub fn run(&self, mut out: impl Write) -> Result<()> {
        write_trace(&builtin_trace(self.builtin, self.scale), &mut out).map_err(output_error)?;
        out.flush().map_err(output_error)
    }
}
