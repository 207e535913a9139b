//! `headroom`: train with memory as a first-class resource, plan a run's memory, replay
//! allocation traces, and report on finished runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use headroom_alloc::cli::ReplayArgs;
use headroom_trainer::config::{ModelKind, Overrides, TrainConfig};
use headroom_trainer::data::Task;
use headroom_trainer::{Error, Result, Summary, Trainer, device, plan, read_all};
use tracing_subscriber::EnvFilter;

/// Training that survives out-of-memory.
#[derive(Parser)]
#[command(name = "headroom", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model (the default: a small GPT learning addition).
    Train(TrainArgs),
    /// Plan the micro-batch size on the meta device and print the table, without training.
    Plan(RunArgs),
    /// Replay an allocation trace through the allocator.
    Replay(ReplayArgs),
    /// Print the summary of a finished run and redraw its plots.
    Report {
        /// The run directory.
        run_dir: PathBuf,
    },
}

/// A configuration: a file and flags over it.
#[derive(Args)]
struct RunArgs {
    /// A TOML configuration; flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    overrides: Overrides,
}

#[derive(Args)]
struct TrainArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Continue the run from the checkpoint in its run directory.
    #[arg(long)]
    resume: bool,
    /// No progress bar and only warnings in the log.
    #[arg(long)]
    quiet: bool,
}

impl RunArgs {
    fn config(&self) -> Result<TrainConfig> {
        let mut config = match &self.config {
            Some(path) => TrainConfig::from_toml_file(path)?,
            None => TrainConfig::default(),
        };
        self.overrides.apply(&mut config);
        config.validate()?;
        Ok(config)
    }
}

fn train(args: &TrainArgs) -> Result<()> {
    let config = args.run.config()?;
    let mut trainer = if args.resume {
        Trainer::resume(config.clone())?
    } else {
        Trainer::new(config.clone())?
    };
    if let Some(plan) = trainer.plan() {
        println!("{plan}");
    }
    println!(
        "training {} steps from step {}, micro-batches of {} (batch {}), into {}",
        trainer.total_steps(),
        trainer.steps_done(),
        trainer.micro_batch(),
        config.batch.size,
        config.run_dir.display()
    );
    let summary = trainer.run(!args.quiet)?;
    print!("{summary}");
    println!(
        "run directory: {} (metrics.jsonl, loss.svg, memory.svg, memory-trace.json)",
        config.run_dir.display()
    );
    Ok(())
}

fn plan_only(args: &RunArgs) -> Result<()> {
    let config = args.config()?;
    let budget = device::budget(&config)?;
    let task = Task::from_config(&config.data, config.seed)?;
    let target = device::plan_target(&config, &budget)?;
    let chosen = plan(&config, &task, &budget, target)?;
    println!("{chosen}");
    // A GPT that needs several micro-batches per step: what recomputing its blocks would fit.
    let batch = config.batch.size.min(task.train.len());
    if config.model.kind == ModelKind::Gpt && !config.model.recompute && chosen.micro < batch {
        let mut recomputing = config.clone();
        recomputing.model.recompute = true;
        if let Ok(alternative) = plan(&recomputing, &task, &budget, target) {
            println!(
                "with --recompute (each block run again in the backward pass): micro-batches of {} \
                 (predicted peak {})",
                alternative.micro,
                headroom_alloc::format_bytes(alternative.predicted_peak)
            );
        }
    }
    Ok(())
}

fn report(run_dir: &Path) -> Result<()> {
    let path = run_dir.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    let summary: Summary = serde_json::from_str(&text).map_err(|err| Error::Data {
        path: path.clone(),
        detail: err.to_string(),
    })?;
    print!("{summary}");
    let records = read_all(run_dir)?;
    headroom_trainer::loss_curve(&records, &run_dir.join("loss.svg"))?;
    headroom_trainer::memory_timeline(&records, &run_dir.join("memory.svg"))?;
    println!(
        "{} steps recorded; plots redrawn in {}",
        records.len(),
        run_dir.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet = matches!(&cli.command, Command::Train(args) if args.quiet);
    let filter = EnvFilter::try_from_env("HEADROOM_LOG")
        .unwrap_or_else(|_| EnvFilter::new(if quiet { "warn" } else { "info" }));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let result = match &cli.command {
        Command::Train(args) => train(args),
        Command::Plan(args) => plan_only(args),
        Command::Replay(args) => args.run(std::io::stdout().lock()).map_err(Error::from),
        Command::Report { run_dir } => report(run_dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("headroom: {err}");
            ExitCode::FAILURE
        }
    }
}
