//! `headroom-alloc`: replay allocation traces and generate realistic ones.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use headroom_alloc::trace::{
    LogNormalTrace, TraceOp, TransformerTrace, read_trace, replay, write_trace,
};
use headroom_alloc::{AllocatorConfig, Error, Growth, parse_size};

/// Replay allocation traces through the headroom BFC allocator and explain every OOM.
#[derive(Parser)]
#[command(name = "headroom-alloc", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a JSON Lines trace (or a built-in one) and report peaks, OOMs and fragmentation.
    Replay {
        /// The trace file; without it, the built-in trace given by --builtin.
        trace: Option<PathBuf>,
        /// Built-in trace to replay when no file is given.
        #[arg(long, value_enum, default_value_t = Builtin::Transformer)]
        builtin: Builtin,
        /// The memory limit (and capacity of the virtual address space), e.g. 64MiB.
        #[arg(long, default_value = "64MiB", value_parser = parse_size)]
        limit: u64,
        /// When regions are reserved.
        #[arg(long, value_enum, default_value_t = GrowthArg::OnDemand)]
        growth: GrowthArg,
        /// Split a free chunk whenever the remainder is at least this large (default 128MiB).
        #[arg(long, value_parser = parse_size)]
        max_internal_fragmentation: Option<u64>,
        /// Print one JSON object instead of the human report.
        #[arg(long)]
        json: bool,
    },
    /// Write a built-in trace as JSON Lines to standard output.
    Generate {
        /// Which trace.
        #[arg(value_enum)]
        builtin: Builtin,
        /// Batch size of the transformer trace, or the size scale of the log-normal one.
        #[arg(long, default_value_t = 8)]
        scale: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Builtin {
    /// Training steps of a small GPT (batch 8).
    Transformer,
    /// 20 000 log-normal sizes with exponential lifetimes.
    Lognormal,
}

#[derive(Clone, Copy, ValueEnum)]
enum GrowthArg {
    OnDemand,
    Preallocate,
    Expandable,
}

fn builtin_trace(builtin: Builtin, scale: u64) -> Vec<TraceOp> {
    match builtin {
        Builtin::Transformer => TransformerTrace::default().with_batch(scale).generate(),
        Builtin::Lognormal => LogNormalTrace::default()
            .with_scale(scale as f64)
            .generate(),
    }
}

fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Replay {
            trace,
            builtin,
            limit,
            growth,
            max_internal_fragmentation,
            json,
        } => {
            let ops = match &trace {
                Some(path) => {
                    let io_error = |source| Error::Io {
                        path: path.display().to_string(),
                        source,
                    };
                    read_trace(BufReader::new(File::open(path).map_err(io_error)?))?
                }
                None => builtin_trace(builtin, 8),
            };
            let growth = match growth {
                GrowthArg::OnDemand => Growth::OnDemand,
                GrowthArg::Preallocate => Growth::Preallocate,
                GrowthArg::Expandable => Growth::Expandable,
            };
            let mut config = AllocatorConfig::default()
                .with_limit_bytes(limit)
                .with_growth(growth);
            if let Some(bytes) = max_internal_fragmentation {
                config = config.with_max_internal_fragmentation(bytes);
            }
            let report = replay(&ops, config, limit)?;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let written = if json {
                serde_json::to_writer(&mut out, &report)
                    .map_err(std::io::Error::from)
                    .and_then(|()| writeln!(out))
            } else {
                write!(out, "{report}")
            };
            written.map_err(|source| Error::Io {
                path: "standard output".into(),
                source,
            })?;
        }
        Command::Generate { builtin, scale } => {
            let stdout = std::io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            let io_error = |source| Error::Io {
                path: "standard output".into(),
                source,
            };
            write_trace(&builtin_trace(builtin, scale), &mut out).map_err(io_error)?;
            out.flush().map_err(io_error)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("headroom-alloc: {err}");
            ExitCode::FAILURE
        }
    }
}
