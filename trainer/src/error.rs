//! The crate's one error type.

use std::path::PathBuf;

use headroom_alloc::OomReport;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that stops a run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot describe a run; every problem found is listed.
    #[error("invalid configuration:\n  {}", .problems.join("\n  "))]
    Config {
        /// One line per problem, naming the setting.
        problems: Vec<String>,
    },

    /// A data file is missing, unreadable or malformed.
    #[error("{path}: {detail}")]
    Data {
        /// The file.
        path: PathBuf,
        /// What is wrong, with a line or offset where there is one.
        detail: String,
    },

    /// A line of a data file is malformed: a conversation that is not JSON, has no assistant
    /// turn or an unknown role, or that the chat template refuses.
    #[error("{path}:{line}: {detail}")]
    Line {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        detail: String,
    },

    /// A dataset could not give a sample, or gave one unlike what it said its samples are.
    #[error("sample {index}: {detail}")]
    Sample {
        /// The sample's index in its dataset.
        index: usize,
        /// What is wrong, naming the array.
        detail: String,
    },

    /// Reading or writing a file of the run failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },

    /// Not even a micro-batch of one sample fits: the diagnosis says what holds the memory.
    #[error("{diagnosis}")]
    DoesNotFit {
        /// Per tag, against the limit, with a suggestion.
        diagnosis: String,
        /// The allocator's report of the last failure.
        report: Box<OomReport>,
    },

    /// The run was stopped by a signal (Ctrl-C or `kill`) after the step under way, its
    /// checkpoint and summary written.
    #[error(
        "stopped by signal {signal} after step {step}; the checkpoint is written: --resume goes on"
    )]
    Interrupted {
        /// The signal's number (2 for SIGINT, 15 for SIGTERM).
        signal: i32,
        /// The last step trained.
        step: u64,
    },

    /// The loss stayed NaN or infinite: the run stopped.
    #[error(
        "the loss was NaN or infinite for {steps} steps in a row, up to step {step}: the run \
         diverged and stopped there (lower optimizer.lr, clip the gradients with \
         optimizer.clip, or train in bf16 or f32); its metrics, plots and summary are in {}, \
         and its last checkpoint holds the weights from before",
        run_dir.display()
    )]
    Diverged {
        /// The step it stopped at.
        step: u64,
        /// Steps in a row whose loss was not finite.
        steps: u64,
        /// Where the run's artifacts are.
        run_dir: PathBuf,
    },

    /// The run reached its end with a loss that was NaN or infinite (too few steps in a row to
    /// count as diverged, or `max_nonfinite_steps = 0`): it fails, writing no checkpoint for
    /// those steps.
    #[error(
        "the run ended at step {step} with a loss that was NaN or infinite for its last {steps} \
         step(s), so it wrote no checkpoint for them and {}; its metrics, plots and summary are \
         in {} (check the starting weights, lower optimizer.lr, clip the gradients with \
         optimizer.clip, or train in bf16 or f32)",
        if *checkpoint_kept {
            "its last checkpoint holds the weights from before"
        } else {
            "it has no checkpoint"
        },
        run_dir.display()
    )]
    EndedNotFinite {
        /// The last step.
        step: u64,
        /// Steps in a row, up to the last, whose loss was not finite.
        steps: u64,
        /// Whether the run has a checkpoint from before (written by this process or an
        /// earlier one).
        checkpoint_kept: bool,
        /// Where the run's artifacts are.
        run_dir: PathBuf,
    },

    /// Memory ran out in a step whose optimizer updates run inside the backward pass, after
    /// some parameters were updated: an update cannot be undone, so the step cannot be redone.
    #[error(
        "step {step}: out of memory after {updated} of {parameters} parameters were updated in \
         the backward pass (optimizer.in_backward); an update cannot be undone, so the run stops \
         here, and its last checkpoint holds the weights from before this step. Leave more \
         room (a larger batch.margin or memory limit) or turn optimizer.in_backward off.\n{report}"
    )]
    UpdateInterrupted {
        /// The step (from 1).
        step: u64,
        /// Parameters updated before memory ran out.
        updated: usize,
        /// Parameters of the model.
        parameters: usize,
        /// The allocator's report.
        report: Box<OomReport>,
    },

    /// A gradient held a NaN or an infinity in a step whose updates run inside the backward
    /// pass, where the step cannot be skipped.
    #[error(
        "step {step}: the gradient of `{parameter}` is NaN or infinite; with \
         optimizer.in_backward the parameters before it are already updated and the step \
         cannot be skipped, so the run stops here, and its last checkpoint holds the weights \
         from before this step (lower optimizer.lr, or turn optimizer.in_backward off to skip \
         such steps)"
    )]
    NonFiniteGradient {
        /// The step (from 1).
        step: u64,
        /// The parameter's name.
        parameter: String,
    },

    /// A resumed run has already done more steps than it was asked for: nothing was trained,
    /// and nothing in its directory changed.
    #[error(
        "the run in {} has done {done} steps, more than the {steps} asked for: there is nothing \
         to do, and nothing was changed (give more steps than {done} to train further)",
        run_dir.display()
    )]
    NothingToDo {
        /// The run's directory.
        run_dir: PathBuf,
        /// Steps its checkpoint has done.
        done: u64,
        /// Steps asked for.
        steps: u64,
    },

    /// A model, optimizer or checkpoint error, or an out-of-memory the trainer could not absorb.
    #[error(transparent)]
    Nn(#[from] headroom_nn::Error),

    /// The allocator refused a configuration or a replay failed.
    #[error(transparent)]
    Alloc(#[from] headroom_alloc::Error),

    /// A collective between the ranks of a data-parallel run failed or timed out.
    #[error(transparent)]
    Collective(#[from] headroom_collectives::Error),

    /// Another rank of a data-parallel run failed in a step; this rank stops with it (that
    /// rank's own error says why).
    #[error("step {step}: rank {rank} of the run failed ({what}); this rank stops with it")]
    PeerFailed {
        /// The step (from 1).
        step: u64,
        /// The rank that failed.
        rank: usize,
        /// What it ran into.
        what: &'static str,
    },
}

impl From<headroom_autograd::Error> for Error {
    fn from(err: headroom_autograd::Error) -> Self {
        Self::Nn(err.into())
    }
}

impl From<headroom_kernels::Error> for Error {
    fn from(err: headroom_kernels::Error) -> Self {
        Self::Nn(err.into())
    }
}

impl Error {
    /// The allocator's report, when this is an out-of-memory.
    pub fn oom_report(&self) -> Option<&OomReport> {
        match self {
            Self::Nn(err) => err.oom_report(),
            Self::DoesNotFit { report, .. } | Self::UpdateInterrupted { report, .. } => {
                Some(report)
            }
            _ => None,
        }
    }

    /// True when this is an out-of-memory the caller could retry with less.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Self::Nn(err) if err.is_out_of_memory())
    }

    /// A configuration error with one problem (what a model factory returns for data it cannot
    /// read, say).
    pub fn config(problem: impl Into<String>) -> Self {
        Self::Config {
            problems: vec![problem.into()],
        }
    }

    /// An I/O error on `path`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
