//! `headroom prepare`: text files tokenized into shards, with a held-out split.
//!
//! The files are found (directories walked, sorted), each becomes one document, and a
//! document is held out when the hash of its name falls in the held-out fraction (a lone file
//! is split, its last part held out). Documents are grouped in order into shards of about
//! `shard_bytes` of text; each shard's documents are tokenized in parallel and written with the
//! end-of-text token after each. A shard is written whole under a temporary name and renamed
//! into place, and a re-run keeps every shard whose header names the same tokenizer and the
//! same sources, so an interrupted run resumes where it stopped. The manifest comes last.
//!
//! A file that is not UTF-8, holds a NUL byte (binary), or cannot be read is reported and
//! skipped.

use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use super::header::{HEADER_BYTES, ShardHeader};
use super::manifest::{MANIFEST, Manifest, ShardEntry, Skipped, TOKENIZER};
use super::reader::encode;
use crate::atomic_file::write_atomically;
use crate::error::{Error, Result};
use crate::tokenizer::{TextTokenizer, fnv1a};

/// What to prepare, and how.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    /// Text files and directories (walked for files).
    pub inputs: Vec<PathBuf>,
    /// Which files of the inputs to read.
    pub filter: FileFilter,
    /// The output directory.
    pub out: PathBuf,
    /// The fraction of documents held out, in `(0, 0.5]`.
    pub held_out: f64,
    /// Text bytes per shard, about.
    pub shard_bytes: u64,
    /// Show a progress bar.
    pub progress: bool,
}

/// Which files of the input directories are read.
#[derive(Debug, Clone, Default)]
pub struct FileFilter {
    /// Only files with one of these extensions (without the dot); empty: every file.
    pub extensions: Vec<String>,
    /// Directories of these names are not walked (such as `site-packages` or `test`).
    pub skip_dirs: Vec<String>,
}

impl FileFilter {
    fn wants_file(&self, path: &Path) -> bool {
        self.extensions.is_empty()
            || path.extension().is_some_and(|e| {
                self.extensions
                    .iter()
                    .any(|w| e == w.trim_start_matches('.'))
            })
    }

    fn wants_dir(&self, path: &Path) -> bool {
        path.file_name()
            .is_none_or(|name| !self.skip_dirs.iter().any(|skip| name == skip.as_str()))
    }
}

/// What a preparation did.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The manifest written.
    pub manifest: Manifest,
    /// Shards tokenized by this run.
    pub written: usize,
    /// Shards a previous run had finished, kept.
    pub kept: usize,
}

/// A file, or part of the lone file, to tokenize.
#[derive(Debug, Clone)]
struct Document {
    path: PathBuf,
    /// Its name under its input, which decides whether it is held out.
    name: String,
    bytes: u64,
    part: Part,
}

/// Which part of a file a document is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Part {
    Whole,
    /// The text before the first line break after this fraction of its bytes.
    Head(f64),
    /// The text from there on.
    Tail(f64),
}

/// Tokenizes `options.inputs` with `tokenizer` into `options.out`.
pub fn prepare(tokenizer: &TextTokenizer, options: &PrepareOptions) -> Result<Prepared> {
    if !(options.held_out > 0.0 && options.held_out <= 0.5) {
        return Err(Error::config(format!(
            "--held-out {}: the held-out fraction must be in (0, 0.5]",
            options.held_out
        )));
    }
    let documents = find_documents(&options.inputs, &options.filter, Some(&options.out))?;
    let (train, held_out) = split(documents, options)?;
    std::fs::create_dir_all(&options.out).map_err(Error::io(&options.out))?;
    // An earlier run's manifest describes shards this run may rewrite: it goes before them, so
    // that a run that stops early leaves a directory without one (unfinished), not one whose
    // manifest is wrong.
    let old_manifest = options.out.join(MANIFEST);
    match std::fs::remove_file(&old_manifest) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io(&old_manifest)(err));
        }
        _ => {}
    }
    let total = train.iter().chain(&held_out).map(|d| d.bytes).sum();
    let bar = progress_bar(total, options.progress);
    let mut job = Job {
        tokenizer,
        options,
        bar: &bar,
        skipped: Vec::new(),
        written: 0,
        kept: 0,
    };
    let train = job.shards("train", &train)?;
    let held_out = job.shards("val", &held_out)?;
    bar.finish_and_clear();
    let vocab = tokenizer.vocab() as u64;
    let manifest = Manifest {
        tokenizer_hash: crate::tokenizer::hash_hex(tokenizer.hash()),
        vocab,
        token_bytes: ShardHeader::token_bytes_for(vocab),
        train,
        held_out,
        skipped: job.skipped,
    };
    for (tokens, what) in [
        (manifest.train_tokens(), "training"),
        (manifest.held_out_tokens(), "held-out"),
    ] {
        if tokens == 0 {
            return Err(Error::Data {
                path: options.out.clone(),
                detail: format!("the {what} documents hold no text to tokenize"),
            });
        }
    }
    let copy = options.out.join(TOKENIZER);
    if tokenizer.path() != copy {
        let bytes = std::fs::read(tokenizer.path()).map_err(Error::io(tokenizer.path()))?;
        write_atomically(&copy, &bytes)?;
    }
    let json = serde_json::to_string_pretty(&manifest).map_err(|err| Error::Data {
        path: options.out.join(MANIFEST),
        detail: err.to_string(),
    })?;
    write_atomically(&options.out.join(MANIFEST), json.as_bytes())?;
    remove_stale_shards(&options.out, &manifest)?;
    Ok(Prepared {
        manifest,
        written: job.written,
        kept: job.kept,
    })
}

/// Deletes the shards of an earlier run of `dir` that `manifest` no longer lists (one that
/// made more shards): `{train,val}-<n>.tokens` files, nothing else.
fn remove_stale_shards(dir: &Path, manifest: &Manifest) -> Result<()> {
    let listed: Vec<&str> = manifest
        .train
        .iter()
        .chain(&manifest.held_out)
        .map(|s| s.file.as_str())
        .collect();
    for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
        let entry = entry.map_err(Error::io(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let shard =
            ["train-", "val-"].iter().any(|p| name.starts_with(p)) && name.ends_with(".tokens");
        if shard && !listed.contains(&name) {
            std::fs::remove_file(entry.path()).map_err(Error::io(entry.path()))?;
        }
    }
    Ok(())
}

/// Every file of `inputs` (directories walked in name order) that `filter` wants.
pub fn find_files(inputs: &[PathBuf], filter: &FileFilter) -> Result<Vec<PathBuf>> {
    Ok(find_documents(inputs, filter, None)?
        .into_iter()
        .map(|d| d.path)
        .collect())
}

/// The documents of `inputs`, leaving out the directory `out` when it lies among them (as in
/// `headroom prepare . --out shards`): its shards, manifest and tokenizer are not input text.
fn find_documents(
    inputs: &[PathBuf],
    filter: &FileFilter,
    out: Option<&Path>,
) -> Result<Vec<Document>> {
    if inputs.is_empty() {
        return Err(Error::config("no input files or directories given"));
    }
    let out = out.and_then(|out| std::fs::canonicalize(out).ok());
    let is_out = |dir: &Path| {
        out.as_ref()
            .is_some_and(|out| std::fs::canonicalize(dir).is_ok_and(|dir| &dir == out))
    };
    let mut documents = Vec::new();
    for input in inputs {
        let meta = std::fs::metadata(input).map_err(Error::io(input))?;
        if meta.is_file() {
            let name = input.file_name().unwrap_or_default().to_string_lossy();
            documents.push(Document {
                path: input.clone(),
                name: name.into_owned(),
                bytes: meta.len(),
                part: Part::Whole,
            });
            continue;
        }
        let mut stack = vec![input.clone()];
        let mut found = Vec::new();
        while let Some(dir) = stack.pop() {
            if is_out(&dir) {
                continue;
            }
            for entry in std::fs::read_dir(&dir).map_err(Error::io(&dir))? {
                let entry = entry.map_err(Error::io(&dir))?;
                let kind = entry.file_type().map_err(Error::io(entry.path()))?;
                let path = entry.path();
                if kind.is_dir() && filter.wants_dir(&path) {
                    stack.push(path);
                } else if kind.is_file() && filter.wants_file(&path) {
                    found.push(path);
                }
            }
        }
        found.sort();
        for path in found {
            let bytes = std::fs::metadata(&path).map_err(Error::io(&path))?.len();
            let name = path.strip_prefix(input).unwrap_or(&path);
            documents.push(Document {
                name: name.to_string_lossy().into_owned(),
                path,
                bytes,
                part: Part::Whole,
            });
        }
    }
    if documents.is_empty() {
        let only = match filter.extensions.as_slice() {
            [] => String::new(),
            some => format!(" ending in .{}", some.join(", .")),
        };
        return Err(Error::config(format!(
            "no files{only} in {}",
            inputs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(documents)
}

/// The training and held-out documents: by the hash of each name, at least one of each; a lone
/// file split in two.
fn split(
    mut documents: Vec<Document>,
    options: &PrepareOptions,
) -> Result<(Vec<Document>, Vec<Document>)> {
    let fraction = options.held_out;
    if let [lone] = documents.as_slice() {
        let head = Document {
            part: Part::Head(1.0 - fraction),
            bytes: (lone.bytes as f64 * (1.0 - fraction)) as u64,
            ..lone.clone()
        };
        let tail = Document {
            part: Part::Tail(1.0 - fraction),
            bytes: lone.bytes - head.bytes,
            ..lone.clone()
        };
        return Ok((vec![head], vec![tail]));
    }
    let draw = |d: &Document| fnv1a(d.name.as_bytes()) as f64 / u64::MAX as f64;
    let (mut held_out, mut train): (Vec<Document>, Vec<Document>) =
        documents.drain(..).partition(|d| draw(d) < fraction);
    // Draws can leave one side empty on few files: move the document nearest the boundary.
    let nearest = |side: &[Document]| {
        (0..side.len()).min_by(|&a, &b| {
            let (x, y) = (
                (draw(&side[a]) - fraction).abs(),
                (draw(&side[b]) - fraction).abs(),
            );
            x.total_cmp(&y)
        })
    };
    if held_out.is_empty()
        && let Some(at) = nearest(&train)
    {
        held_out.push(train.remove(at));
    }
    if train.is_empty()
        && let Some(at) = nearest(&held_out)
    {
        train.push(held_out.remove(at));
    }
    Ok((train, held_out))
}

fn progress_bar(total: u64, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "tokenizing [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// One preparation under way.
struct Job<'a> {
    tokenizer: &'a TextTokenizer,
    options: &'a PrepareOptions,
    bar: &'a ProgressBar,
    skipped: Vec<Skipped>,
    written: usize,
    kept: usize,
}

impl Job<'_> {
    /// Writes (or keeps) the shards of `documents`, named `{prefix}-{index}.tokens`.
    fn shards(&mut self, prefix: &str, documents: &[Document]) -> Result<Vec<ShardEntry>> {
        let mut entries = Vec::new();
        let mut start = 0;
        while start < documents.len() {
            let mut end = start + 1;
            let mut bytes = documents[start].bytes;
            while end < documents.len() && bytes + documents[end].bytes <= self.options.shard_bytes
            {
                bytes += documents[end].bytes;
                end += 1;
            }
            let file = format!("{prefix}-{:05}.tokens", entries.len());
            entries.push(self.shard(&file, &documents[start..end])?);
            self.bar.inc(bytes);
            start = end;
        }
        Ok(entries)
    }

    /// One shard: kept when a previous run finished it from the same sources, else tokenized.
    fn shard(&mut self, file: &str, documents: &[Document]) -> Result<ShardEntry> {
        let path = self.options.out.join(file);
        let vocab = self.tokenizer.vocab() as u64;
        let sources_hash = fnv1a(
            documents
                .iter()
                .map(|d| format!("{}\0{}\0{:?}\n", d.name, d.bytes, d.part))
                .collect::<String>()
                .as_bytes(),
        );
        let texts: Vec<std::result::Result<String, String>> =
            documents.par_iter().map(read_text).collect();
        // Documents with text: skipped files and empty ones add no tokens.
        let tokenized = texts
            .iter()
            .filter(|text| text.as_ref().is_ok_and(|t| !t.is_empty()))
            .count();
        for (document, text) in documents.iter().zip(&texts) {
            if let Err(reason) = text {
                tracing::warn!("skipped {}: {reason}", document.path.display());
                self.skipped.push(Skipped {
                    path: document.path.clone(),
                    reason: reason.clone(),
                });
            }
        }
        if let Some(header) = finished(&path)
            && header.tokenizer_hash == self.tokenizer.hash()
            && header.sources_hash == sources_hash
            && header.vocab == vocab
        {
            self.kept += 1;
            return Ok(ShardEntry {
                file: file.to_owned(),
                tokens: header.tokens,
                documents: tokenized,
            });
        }
        let end = self.tokenizer.end_of_text();
        let encoded = texts
            .into_par_iter()
            .filter_map(|text| text.ok())
            .map(|text| {
                let mut ids = self.tokenizer.encode(&text)?;
                ids.extend(end.filter(|_| !ids.is_empty()));
                Ok(ids)
            })
            .collect::<Result<Vec<Vec<u32>>>>()?;
        let tokens: Vec<u32> = encoded.concat();
        let header = ShardHeader {
            token_bytes: ShardHeader::token_bytes_for(vocab),
            vocab,
            tokenizer_hash: self.tokenizer.hash(),
            sources_hash,
            tokens: tokens.len() as u64,
        };
        let mut bytes = Vec::with_capacity(HEADER_BYTES + tokens.len() * header.token_bytes);
        bytes.extend_from_slice(&header.to_bytes());
        bytes.extend(encode(&tokens, header.token_bytes));
        write_atomically(&path, &bytes)?;
        self.written += 1;
        Ok(ShardEntry {
            file: file.to_owned(),
            tokens: header.tokens,
            documents: tokenized,
        })
    }
}

/// The header of the shard at `path` when it is complete.
fn finished(path: &Path) -> Option<ShardHeader> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut header = [0; HEADER_BYTES];
    file.read_exact(&mut header).ok()?;
    ShardHeader::parse(&header, file.metadata().ok()?.len()).ok()
}

/// The text of the file at `path`, or why it is not text: unreadable, not UTF-8, or binary
/// (holding a NUL byte).
pub fn read_text_file(path: &Path) -> std::result::Result<String, String> {
    let bytes = std::fs::read(path).map_err(|err| format!("cannot read it: {err}"))?;
    let text = String::from_utf8(bytes).map_err(|err| {
        format!(
            "not UTF-8 text (byte {} is not valid UTF-8)",
            err.utf8_error().valid_up_to()
        )
    })?;
    if let Some(at) = text.find('\0') {
        return Err(format!("binary (a NUL byte at {at})"));
    }
    Ok(text)
}

/// A document's text, or why it is skipped.
fn read_text(document: &Document) -> std::result::Result<String, String> {
    let text = read_text_file(&document.path)?;
    Ok(match document.part {
        Part::Whole => text,
        Part::Head(fraction) => text[..cut(&text, fraction)].to_owned(),
        Part::Tail(fraction) => text[cut(&text, fraction)..].to_owned(),
    })
}

/// Where a lone file is split: after the first line break past `fraction` of its bytes (or at
/// a character boundary there, without one that leaves text after it: a file's last line
/// break ends it).
fn cut(text: &str, fraction: f64) -> usize {
    let mut at = ((text.len() as f64 * fraction) as usize).min(text.len());
    while !text.is_char_boundary(at) {
        at += 1;
    }
    match text[at..].find('\n') {
        Some(line) if at + line + 1 < text.len() => at + line + 1,
        _ => at,
    }
}
