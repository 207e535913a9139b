//! `headroom-alloc`: replay allocation traces and generate realistic ones.

use std::io::BufWriter;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use headroom_alloc::cli::{GenerateArgs, ReplayArgs};

/// Replay allocation traces through the headroom BFC allocator and explain every OOM.
#[derive(Parser)]
#[command(name = "headroom-alloc", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a JSON Lines trace (or a built-in one) and report peaks, OOMs and fragmentation,
    /// or find the smallest limit it fits in (--find-limit).
    Replay(ReplayArgs),
    /// Write a built-in trace as JSON Lines to standard output.
    Generate(GenerateArgs),
}

fn main() -> ExitCode {
    let stdout = std::io::stdout();
    let result = match Cli::parse().command {
        Command::Replay(args) => args.run(stdout.lock()),
        Command::Generate(args) => args.run(BufWriter::new(stdout.lock())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.is_broken_pipe() => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("headroom-alloc: {err}");
            ExitCode::FAILURE
        }
    }
}
