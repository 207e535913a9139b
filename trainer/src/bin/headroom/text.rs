//! `headroom tokenizer train` and `headroom prepare`: a tokenizer for the user's text, and the
//! text tokenized into shards.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use headroom_trainer::Result;
use headroom_trainer::data::shards::{
    FileFilter, HeldOut, PrepareOptions, find_files, prepare, read_text_file,
};
use headroom_trainer::data::tokenizer::TextTokenizer;

use crate::say;

/// `headroom tokenizer ...`.
#[derive(Subcommand)]
pub enum TokenizerCommand {
    /// Train a byte-level BPE (GPT-2's kind) on text files and save it as tokenizer.json.
    Train(TrainTokenizerArgs),
}

/// `headroom tokenizer train`.
#[derive(Args)]
pub struct TrainTokenizerArgs {
    /// Text files, or directories of them (walked, symbolic links followed).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Tokens in the vocabulary, the 256 bytes and <|endoftext|> included.
    #[arg(long, default_value_t = 8192)]
    vocab: usize,
    /// Where to write the tokenizer.
    #[arg(long, default_value = "tokenizer.json")]
    out: PathBuf,
    #[command(flatten)]
    filter: FilterArgs,
}

/// Which files of the input directories are read.
#[derive(Args)]
pub struct FilterArgs {
    /// Only files ending in this extension (repeatable), e.g. --ext py.
    #[arg(long = "ext")]
    extensions: Vec<String>,
    /// Do not walk directories of this name (repeatable), e.g. --skip-dir site-packages.
    #[arg(long = "skip-dir")]
    skip_dirs: Vec<String>,
}

impl FilterArgs {
    /// The filter these flags describe.
    pub fn filter(&self) -> FileFilter {
        FileFilter {
            extensions: self.extensions.clone(),
            skip_dirs: self.skip_dirs.clone(),
        }
    }
}

/// `headroom prepare`.
#[derive(Args)]
pub struct PrepareArgs {
    /// Text files, or directories of them (walked, symbolic links followed); with --chat,
    /// JSON Lines files of conversations (.jsonl files in directories, unless --ext says).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    #[command(flatten)]
    pub chat: crate::chat::ChatArgs,
    /// The tokenizer: a tokenizer.json, a directory holding one, or a GGUF file (the tokenizer
    /// its metadata describes).
    #[arg(long)]
    pub tokenizer: PathBuf,
    /// The directory to write the shards into (for data.kind = "token-shards").
    #[arg(long, required_unless_present = "show")]
    pub out: Option<PathBuf>,
    /// The fraction of documents held out for evaluation, in (0, 0.5], drawn by the hash of
    /// their names.
    #[arg(long, default_value_t = 0.02)]
    held_out: f64,
    /// Hold out exactly this file or directory (walked) instead of a fraction, such as the
    /// validation split of a dataset; repeatable. Its files are never trained on.
    #[arg(long, value_name = "FILE_OR_DIR", conflicts_with = "held_out")]
    held_out_files: Vec<PathBuf>,
    /// Text per shard, about, e.g. 64MiB.
    #[arg(long, default_value = "64MiB")]
    shard_size: headroom_alloc::ByteSize,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Runs a tokenizer command.
pub fn tokenizer(command: &TokenizerCommand) -> Result<()> {
    let TokenizerCommand::Train(args) = command;
    let mut files = Vec::new();
    // A tokenizer written among its inputs by an earlier run is not text to train on.
    let out = std::fs::canonicalize(&args.out).ok();
    for path in find_files(&args.inputs, &args.filter.filter())? {
        if out.is_some() && std::fs::canonicalize(&path).ok() == out {
            continue;
        }
        match read_text_file(&path) {
            Ok(_) => files.push(path),
            Err(reason) => tracing::warn!("skipped {}: {reason}", path.display()),
        }
    }
    let started = std::time::Instant::now();
    let tokenizer = TextTokenizer::train(&files, args.vocab, &args.out)?;
    say(format_args!(
        "trained a byte-level BPE of {} tokens on {} files in {:.1} s: {}",
        tokenizer.vocab(),
        files.len(),
        started.elapsed().as_secs_f64(),
        args.out.display()
    ))
}

/// Runs `headroom prepare`.
pub fn prepare_shards(args: &PrepareArgs) -> Result<()> {
    let tokenizer = TextTokenizer::load(&args.tokenizer)?;
    if args.chat.chat || args.chat.show.is_some() {
        return crate::chat::prepare_chat_shards(args, &tokenizer);
    }
    let out = args.out.clone().unwrap_or_default();
    let options = args.options(&out);
    let started = std::time::Instant::now();
    let prepared = prepare(&tokenizer, &options)?;
    report(&prepared, &out, started)
}

impl PrepareArgs {
    /// The options these flags describe, writing into `out`.
    pub fn options(&self, out: &std::path::Path) -> PrepareOptions {
        let args = self;
        PrepareOptions {
            inputs: args.inputs.clone(),
            filter: args.filter.filter(),
            out: out.to_owned(),
            held_out: if args.held_out_files.is_empty() {
                HeldOut::Fraction(args.held_out)
            } else {
                HeldOut::Files(args.held_out_files.clone())
            },
            shard_bytes: args.shard_size.bytes().max(1),
            progress: !args.quiet && std::io::stderr().is_terminal(),
        }
    }
}

/// Says what a preparation wrote into `out`.
pub fn report(
    prepared: &headroom_trainer::data::shards::Prepared,
    out: &std::path::Path,
    started: std::time::Instant,
) -> Result<()> {
    let manifest = &prepared.manifest;
    say(format_args!(
        "{} training tokens in {} shards, {} held-out tokens in {}; {} shards written, {} kept \
         from an earlier run, {} skipped (listed in the manifest), in {:.1} s: {}",
        manifest.train_tokens(),
        manifest.train.len(),
        manifest.held_out_tokens(),
        manifest.held_out.len(),
        prepared.written,
        prepared.kept,
        manifest.skipped.len(),
        started.elapsed().as_secs_f64(),
        out.display()
    ))
}
