//! The crate's one error type.

use std::path::PathBuf;

use headroom_alloc::OomReport;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong building, running, optimizing or saving a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op failed: bad operands, or out of memory with the allocator's report intact.
    #[error(transparent)]
    Autograd(#[from] headroom_autograd::Error),

    /// A configuration value is impossible (zero heads, a width the heads do not divide...).
    #[error("invalid {what}: {detail}")]
    Config {
        /// What is configured (a layer, an optimizer, a schedule).
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },

    /// A checkpoint entry is missing, does not fit the model or optimizer, or does not match the
    /// checksum saved with it; or the checkpoint's checksum metadata is malformed.
    #[error("checkpoint {path}: `{key}`: {detail}")]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// The entry (a parameter name, an optimizer state name, a metadata key such as
        /// `headroom.crc32.metadata` when the metadata does not match its checksum).
        key: String,
        /// What is wrong with it.
        detail: String,
    },

    /// A checkpoint file is not a readable safetensors file (truncated, corrupt, not one).
    #[error("checkpoint {path}: not a readable safetensors file: {detail}")]
    CorruptCheckpoint {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        detail: String,
    },

    /// A GGUF file is not one, or is corrupt or truncated, or one of its values or tensors is
    /// not what was asked of it.
    #[error("GGUF {path}: {item}: {detail}")]
    Gguf {
        /// The file.
        path: PathBuf,
        /// What in it: `header`, ``key `general.alignment` ``, ``tensor `token_embd.weight` ``.
        item: String,
        /// What is wrong with it.
        detail: String,
    },

    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

impl From<headroom_kernels::Error> for Error {
    fn from(err: headroom_kernels::Error) -> Self {
        Self::Autograd(err.into())
    }
}

impl Error {
    /// The allocator's report, when this is an out-of-memory.
    pub fn oom_report(&self) -> Option<&OomReport> {
        match self {
            Self::Autograd(err) => err.oom_report(),
            _ => None,
        }
    }

    /// True when this is an out-of-memory: drop what the step holds and retry with less.
    pub fn is_out_of_memory(&self) -> bool {
        self.oom_report().is_some()
    }

    /// A configuration error.
    pub fn config(what: &'static str, detail: impl Into<String>) -> Self {
        Self::Config {
            what,
            detail: detail.into(),
        }
    }
}
