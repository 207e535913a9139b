//! `headroom`: train with memory as a first-class resource, plan a run's memory, replay
//! allocation traces, and report on finished runs.

use std::fmt::Display;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use headroom_alloc::cli::{DEFAULT_REPLAY_LIMIT, ReplayArgs};
use headroom_alloc::pytorch::write_trace_file_memory_viz;
use headroom_trainer::config::{Overrides, TrainConfig};
use headroom_trainer::data::Task;
use headroom_trainer::data_parallel::Launch;
use headroom_trainer::interrupt::{self, StopOnSignal};
use headroom_trainer::planning::half_on_cpu::{half_on_cpu, half_on_cpu_warning};
use headroom_trainer::planning::{PlanAdvice, run_device};
use headroom_trainer::run_dir::{self, latest_trace};
use headroom_trainer::run_dir::{Start, Summary, read_all};
use headroom_trainer::thread_pool::in_thread_pool;
use headroom_trainer::{Error, Result, Trainer};
use tracing_subscriber::EnvFilter;

mod chat;
mod gguf_export;
mod model_use;
mod text;

/// What `--help` says of the log.
const LOG_HELP: &str = "\
Logging: warnings and progress go to standard error, at the `info` level (`warn` with --quiet).
HEADROOM_LOG sets the level or a filter, as RUST_LOG does (e.g. HEADROOM_LOG=debug); colours
are used only when standard error is a terminal, and NO_COLOR turns them off.";

/// Training that survives out-of-memory.
#[derive(Parser)]
#[command(name = "headroom", version, after_help = LOG_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model: fine-tune a Hugging Face one (--init-from), or train one from scratch
    /// (the default: a small GPT learning addition).
    Train(TrainArgs),
    /// Plan the memory techniques and the micro-batch size on the meta device and print the
    /// tables, without training.
    Plan(PlanArgs),
    /// Replay an allocation trace through the allocator: a trace file, a run directory (its
    /// latest trace), a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`'s pickle),
    /// or a built-in trace. A run's trace replays under the run's allocator settings unless a
    /// flag changes one.
    #[command(mut_arg("trace", |arg| arg.help(
        "The trace file, a run directory for its latest trace (allocations-<n>.jsonl), or a \
         PyTorch memory snapshot; without it, the built-in trace given by --builtin"
    )))]
    Replay(ReplayArgs),
    /// Train a tokenizer on text files.
    #[command(subcommand)]
    Tokenizer(text::TokenizerCommand),
    /// Tokenize text files (or, with --chat, conversations rendered with the model's chat
    /// template) into shards for data.kind = "token-shards", with a held-out split.
    Prepare(text::PrepareArgs),
    /// Continue a prompt with a trained model or a Hugging Face one, streaming the text (a
    /// key/value cache makes each token cost one token's work); it stops at the model's end of
    /// text or of turn.
    Generate(model_use::GenerateArgs),
    /// Judge a trained model, or a Hugging Face one, on held-out data: loss and perplexity for
    /// text.
    Eval(model_use::EvalArgs),
    /// Write a trained model as a Hugging Face directory (GPT-2 or the Llama family, with the
    /// base's tokenizer and generation files), a LoRA run's adapters as a PEFT directory, or a
    /// Llama-family model as a GGUF file for llama.cpp and Ollama.
    Export(model_use::ExportArgs),
    /// Print the summary of a finished run and redraw its plots.
    Report {
        /// The run directory.
        run_dir: PathBuf,
        /// Also write the allocator's history of the run's latest allocation trace as a
        /// PyTorch memory snapshot to this file, which pytorch.org/memory_viz and
        /// `python -m torch.cuda._memory_viz trace_plot` draw.
        #[arg(long, value_name = "OUT.pickle")]
        memory_viz: Option<PathBuf>,
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
    /// Continue the run from the checkpoint in its run directory (without --run-dir, the
    /// newest run, runs/latest).
    #[arg(long, conflicts_with = "overwrite")]
    resume: bool,
    /// Start a new run in the run directory even though it holds a checkpoint, replacing
    /// that run.
    #[arg(long)]
    overwrite: bool,
    /// No progress bar and only warnings in the log.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct PlanArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Measure this device's rates first (products, memory, kernel launches, copies), and on a
    /// GPU its host CPU's, keep them in the cache for runs with memory.rates = "calibrated", and
    /// plan with them.
    #[arg(long)]
    calibrate: bool,
    /// Plan one rank of a data-parallel run of this many (`mpirun -n N headroom train`): what
    /// fits on each device, training on its shard of every batch.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    world_size: u64,
}

impl RunArgs {
    fn config(&self) -> Result<TrainConfig> {
        let config = self.overrides.configure(self.config.as_deref())?;
        config.validate()?;
        Ok(config)
    }

    /// The configuration of the run to resume (its `config.toml`), with the file and the flags
    /// over it: a resume changes only what it names.
    fn resumed_config(&self) -> Result<TrainConfig> {
        let given = match (&self.overrides.run_dir, &self.config) {
            (Some(dir), _) => Some(dir.clone()),
            (None, Some(file)) => TrainConfig::from_toml_file(file)?.run_dir,
            (None, None) => None,
        };
        let (dir, _) = run_dir::resolve(given.as_deref(), Start::Resume)?;
        let saved = dir.join(run_dir::CONFIG_FILE);
        if !saved.is_file() {
            tracing::warn!(
                "{} holds no {}: resuming with the defaults and the flags given",
                dir.display(),
                run_dir::CONFIG_FILE
            );
            return self.config();
        }
        let mut config = self
            .overrides
            .configure_resumed(&saved, self.config.as_deref())?;
        config.run_dir = Some(dir);
        config.validate()?;
        Ok(config)
    }
}

/// Writes `text` and a newline to standard output.
fn say(text: impl Display) -> Result<()> {
    writeln!(std::io::stdout().lock(), "{text}").map_err(|source| Error::Io {
        path: "standard output".into(),
        source,
    })
}

fn train(args: &TrainArgs) -> Result<()> {
    let config = match args.resume {
        true => args.run.resumed_config()?,
        false => args.run.config()?,
    };
    let start = match (args.resume, args.overwrite) {
        (true, _) => Start::Resume,
        (false, true) => Start::Overwrite,
        (false, false) => Start::New,
    };
    // A data-parallel run's ranks would have to agree on the step to stop at: there a signal
    // still ends the processes at once. Installed before the start, the handlers also end a
    // start that a signal interrupts, leaving nothing.
    let stop = (Launch::from_env().size == 1).then(StopOnSignal::install);
    let mut trainer = match Trainer::builder().config(config).start(start).build() {
        // A resume to fewer steps than done: said, and no failure.
        Err(err @ Error::NothingToDo { .. }) => return say(err),
        started => started?,
    };
    let launch = trainer.launch();
    if !launch.writes() {
        // Rank 0 of a data-parallel run speaks and writes for every rank.
        return trainer.run(false).map(drop);
    }
    if let Some(plan) = trainer.plan() {
        say(plan)?;
        let config = trainer.config();
        if half_on_cpu(&config) {
            let task = Task::from_config(&config.data, &config.model, config.seed)?;
            let (budget, _, _) = run_device::planning(&config)?;
            if let Some(warning) = half_on_cpu_warning(&config, &task, &budget, plan) {
                tracing::warn!("{warning}");
            }
        }
    }
    let run_dir = trainer.run_dir().to_owned();
    let ranks = match launch.size {
        1 => String::new(),
        n => format!(", on {n} ranks"),
    };
    say(format_args!(
        "training {} steps from step {}, micro-batches of {} (batch {}{ranks}), into {}",
        trainer.total_steps(),
        trainer.steps_done(),
        trainer.micro_batch(),
        trainer.config().batch.size,
        run_dir.display()
    ))?;
    if let Some(stop) = stop {
        trainer.add_callback(stop);
    }
    let summary = trainer.run(!args.quiet)?;
    say(format_args!(
        "{summary}run directory: {}",
        run_dir.display()
    ))?;
    say("  metrics.jsonl, summary.json, loss.svg, memory.svg, memory-trace.json (Perfetto),")?;
    say("  allocations-*.jsonl (for `headroom replay`), checkpoint.safetensors,")?;
    let logdir = run_dir.parent().filter(|p| !p.as_os_str().is_empty());
    say(format_args!(
        "  events.out.tfevents.* (for `tensorboard --logdir {}`)",
        logdir.unwrap_or(&run_dir).display()
    ))?;
    match interrupt::received() {
        Some(signal) => Err(Error::Interrupted {
            signal,
            step: summary.steps,
        }),
        None => Ok(()),
    }
}

fn plan_only(args: &PlanArgs) -> Result<()> {
    let config = args.run.config()?;
    let advice = PlanAdvice::new(config, args.world_size as usize, args.calibrate)?;
    if !advice.is_empty() {
        say(&advice)?;
    }
    advice.outcome()
}

fn report(run_dir: &Path, memory_viz: Option<&Path>) -> Result<()> {
    let path = run_dir.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    let summary: Summary = serde_json::from_str(&text).map_err(|err| Error::Data {
        path: path.clone(),
        detail: err.to_string(),
    })?;
    let records = read_all(run_dir)?;
    headroom_trainer::run_dir::loss_curve(
        &records,
        &summary.metric_name,
        summary.metric,
        &run_dir.join("loss.svg"),
    )?;
    headroom_trainer::run_dir::memory_timeline(
        &records,
        &summary.micro_history,
        &run_dir.join("memory.svg"),
    )?;
    say(format_args!(
        "{summary}{} steps recorded; plots redrawn in {}",
        records.len(),
        run_dir.display()
    ))?;
    match memory_viz {
        Some(out) => {
            let trace = run_trace(run_dir)?;
            let counts = write_trace_file_memory_viz(&trace, DEFAULT_REPLAY_LIMIT, out)?;
            say(format_args!(
                "{}: {counts}, from {} (for pytorch.org/memory_viz)",
                out.display(),
                trace.display()
            ))
        }
        None => Ok(()),
    }
}

/// The latest allocation trace of the run in `dir`, or why it has none.
fn run_trace(dir: &Path) -> Result<PathBuf> {
    latest_trace(dir)?.ok_or_else(|| Error::Data {
        path: dir.to_path_buf(),
        detail: "holds no allocation trace (allocations-<n>.jsonl): was it trained with \
                 memory.trace = false?"
            .into(),
    })
}

/// Replays a trace; a run directory stands for its latest allocation trace.
fn replay(args: &ReplayArgs) -> Result<()> {
    let mut args = args.clone();
    if let Some(dir) = args.trace.as_ref().filter(|path| path.is_dir()) {
        args.trace = Some(run_trace(dir)?);
    }
    args.run(std::io::stdout().lock()).map_err(Error::from)
}

/// True when `err` is standard output closed by its reader (`headroom plan | head`): not a
/// failure of the command.
fn is_broken_pipe(err: &Error) -> bool {
    match err {
        Error::Io { source, .. } => source.kind() == std::io::ErrorKind::BrokenPipe,
        Error::Alloc(err) => err.is_broken_pipe(),
        _ => false,
    }
}

/// Standard error for the log, each line written above the progress bar, not over it.
struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        headroom_trainer::above_the_bar(|| std::io::stderr().lock().write_all(line))?;
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet = matches!(&cli.command, Command::Train(args) if args.quiet);
    let filter = EnvFilter::try_from_env("HEADROOM_LOG")
        .unwrap_or_else(|_| EnvFilter::new(if quiet { "warn" } else { "info" }));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LogWriter)
        .with_ansi(colour)
        .with_target(false)
        .init();
    let result = match &cli.command {
        Command::Train(args) => train(args),
        Command::Plan(args) => plan_only(args),
        Command::Replay(args) => replay(args),
        Command::Report {
            run_dir,
            memory_viz,
        } => report(run_dir, memory_viz.as_deref()),
        Command::Tokenizer(command) => text::tokenizer(command),
        Command::Prepare(args) => text::prepare_shards(args),
        // Inside a thread pool, as a trainer's steps run: each token's many small kernels.
        Command::Generate(args) => in_thread_pool(|| model_use::generate_text(args)),
        Command::Eval(args) => in_thread_pool(|| model_use::evaluate(args)),
        Command::Export(args) => model_use::export(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err @ Error::Interrupted { signal, .. }) => {
            eprintln!("headroom: {err}");
            ExitCode::from(interrupt::exit_status(signal))
        }
        Err(err) => {
            eprintln!("headroom: {err}");
            ExitCode::FAILURE
        }
    }
}
