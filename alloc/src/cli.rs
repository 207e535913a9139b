//! The command-line subcommands of `headroom-alloc`, as clap argument groups that other tools
//! (the `headroom` CLI) embed as they are.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::trace::generate::{LogNormalTrace, TransformerTrace};
use crate::trace::{TraceOp, find_limit, read_trace_file, replay, write_trace};
use crate::{AllocatorConfig, Error, Growth, Result, parse_size};

/// Replay a JSON Lines trace (or a built-in one) and report peaks, OOMs and fragmentation, or
/// find the smallest limit it fits in.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The trace file; without it, the built-in trace given by --builtin. A tool that embeds
    /// these arguments may set it before calling `run` (to resolve a run directory to its trace,
    /// say).
    pub trace: Option<PathBuf>,
    /// Built-in trace to replay when no file is given.
    #[arg(long, value_enum, default_value_t = Builtin::Transformer)]
    pub builtin: Builtin,
    /// The memory limit (and capacity of the virtual address space), e.g. 64MiB; ignored by
    /// --find-limit.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub limit: u64,
    /// When regions are reserved.
    #[arg(long, value_enum, default_value_t = GrowthArg::OnDemand)]
    pub growth: GrowthArg,
    /// Split a free chunk whenever the remainder is at least this large (default 128MiB).
    #[arg(long, value_parser = parse_size)]
    pub max_internal_fragmentation: Option<u64>,
    /// Instead of replaying at --limit, find the smallest limit (a multiple of 256 bytes) at
    /// which the whole trace replays without an OOM, and say what fails one granule below it.
    #[arg(long)]
    pub find_limit: bool,
    /// Print one JSON object instead of the human report.
    #[arg(long)]
    pub json: bool,
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

fn output_error(source: std::io::Error) -> Error {
    Error::Io {
        path: "standard output".into(),
        source,
    }
}

impl ReplayArgs {
    /// The operations to replay, each with its number: its line in the trace file, or its
    /// one-based index in the built-in trace. Errors name the file.
    pub fn load_trace(&self) -> Result<Vec<(usize, TraceOp)>> {
        match &self.trace {
            Some(path) => read_trace_file(path),
            None => Ok((1..).zip(builtin_trace(self.builtin, 8)).collect()),
        }
    }

    /// The allocator configuration these arguments describe.
    pub fn allocator_config(&self) -> AllocatorConfig {
        let config = AllocatorConfig::default()
            .with_limit_bytes(self.limit)
            .with_growth(self.growth.into());
        match self.max_internal_fragmentation {
            Some(bytes) => config.with_max_internal_fragmentation(bytes),
            None => config,
        }
    }

    /// Replays the trace (or searches for its smallest limit) and writes the report to `out`.
    pub fn run(&self, out: impl Write) -> Result<()> {
        let ops = self.load_trace()?;
        let config = self.allocator_config();
        let in_file = |err: Error| match &self.trace {
            Some(path) => err.in_trace_file(path),
            None => err,
        };
        if self.find_limit {
            let search = find_limit(&ops, config).map_err(in_file)?;
            self.write_report(&search, out)
        } else {
            let report = replay(&ops, config, self.limit).map_err(in_file)?;
            self.write_report(&report, out)
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
