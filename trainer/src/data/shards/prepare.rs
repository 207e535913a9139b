//! `headroom prepare`: text files tokenized into shards, with a held-out split.
//!
//! The files are found (by `find`), each becomes one document, and a document is held out when
//! it is among the held-out files the user named, or else when the hash of its name falls in
//! the held-out fraction (a lone file is split, its last part held out). Documents are grouped
//! in order into shards of about `shard_bytes` of text; each shard's documents are tokenized in
//! parallel and written with the end-of-text token after each.
//!
//! Nothing in the output directory changes until the preparation has succeeded: shards are
//! written whole into its `.unfinished` directory, and only once every shard is there and both
//! sides hold tokens do they move into place, the tokenizer's copy and the manifest last. A
//! failed run leaves the directory as it was. A re-run keeps every shard (in place, or left
//! in `.unfinished` by an interrupted run) whose header names the same tokenizer and the same
//! sources and whose tokens match its checksum, so an interrupted run resumes where it stopped.
//!
//! A file that is not UTF-8, holds a NUL byte (binary), or cannot be read, and a directory
//! that cannot be read, are reported and skipped.
//!
//! Chat data ([`prepare_chat`]) goes the same way, its files JSON Lines of conversations (a lone
//! file split at a line), each rendered with the chat template into tokens and their flags; a
//! bad line stops the preparation, naming the file and line.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::find::{FileFilter, FoundFile, Walk};
use super::header::{HEADER_BYTES, SCORED, STARTS_CONVERSATION, ShardHeader};
use super::manifest::{MANIFEST, Manifest, ShardEntry, Skipped, TOKENIZER};
use super::reader::encode;
use super::staging::Staging;
use crate::atomic_file::write_atomically;
use crate::data::chat::ChatEncoder;
use crate::data::tokenizer::{TextTokenizer, fnv1a};
use crate::error::{Error, Result};
use crate::progress::Bar;

/// What to prepare, and how.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    /// Text files and directories (walked for files).
    pub inputs: Vec<PathBuf>,
    /// Which files of the inputs to read.
    pub filter: FileFilter,
    /// The output directory.
    pub out: PathBuf,
    /// Which documents are held out for evaluation.
    pub held_out: HeldOut,
    /// Text bytes per shard, about.
    pub shard_bytes: u64,
    /// Show a progress bar.
    pub progress: bool,
}

/// Which documents are held out for evaluation.
#[derive(Debug, Clone, PartialEq)]
pub enum HeldOut {
    /// This fraction of the documents, in `(0, 0.5]`, drawn by the hash of their names (a lone
    /// file split, its last part held out).
    Fraction(f64),
    /// Exactly the files of these files and directories (walked as the inputs are, with the
    /// same filter), such as a validation split one already has; none of them is trained on,
    /// even when an input directory holds it.
    Files(Vec<PathBuf>),
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

impl From<FoundFile> for Document {
    fn from(file: FoundFile) -> Self {
        Self {
            path: file.path,
            name: file.name,
            bytes: file.bytes,
            part: Part::Whole,
        }
    }
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

/// What the documents hold.
#[derive(Clone, Copy)]
enum Content<'a> {
    /// Text, each document followed by the end-of-text token.
    Text,
    /// Conversations, one a line, rendered with a chat template.
    Chat(&'a ChatEncoder<'a>),
}

/// Tokenizes `options.inputs` with `tokenizer` into `options.out`, which changes only when
/// the preparation succeeds.
pub fn prepare(tokenizer: &TextTokenizer, options: &PrepareOptions) -> Result<Prepared> {
    run(tokenizer, options, Content::Text)
}

/// Renders the conversations of `options.inputs` (JSON Lines) with `encoder` into shards that
/// flag the scored tokens, in `options.out`, which changes only when the preparation succeeds.
pub fn prepare_chat(encoder: &ChatEncoder, options: &PrepareOptions) -> Result<Prepared> {
    run(encoder.tokenizer(), options, Content::Chat(encoder))
}

fn run(tokenizer: &TextTokenizer, options: &PrepareOptions, content: Content) -> Result<Prepared> {
    let (train, held_out, skipped) = documents(options)?;
    let staging = Staging::open(&options.out)?;
    let total = train.iter().chain(&held_out).map(|d| d.bytes).sum();
    let bar = Bar::bytes(options.progress, total);
    let mut job = Job {
        tokenizer,
        content,
        options,
        staging: &staging,
        bar: &bar,
        skipped,
        staged: Vec::new(),
        written: 0,
        kept: 0,
    };
    let tokenized = job
        .shards("train", &train)
        .and_then(|train| Ok((train, job.shards("val", &held_out)?)));
    bar.finish();
    let (train, held_out) = match tokenized {
        Ok(sides) => sides,
        Err(err) => {
            staging.discard();
            return Err(err);
        }
    };
    let vocab = tokenizer.vocab() as u64;
    let manifest = Manifest {
        tokenizer_hash: crate::data::tokenizer::hash_hex(tokenizer.hash()),
        vocab,
        token_bytes: ShardHeader::token_bytes_for(vocab),
        train,
        held_out,
        skipped: job.skipped,
        chat: match content {
            Content::Text => None,
            Content::Chat(encoder) => Some(encoder.manifest()),
        },
    };
    for (tokens, side) in [
        (manifest.train_tokens(), Side::Training),
        (manifest.held_out_tokens(), Side::HeldOut),
    ] {
        if tokens == 0 {
            staging.discard();
            return Err(Error::Data {
                path: options.out.clone(),
                detail: no_text(side, &options.held_out),
            });
        }
    }
    commit(&staging, &job.staged, tokenizer, &manifest)?;
    Ok(Prepared {
        manifest,
        written: job.written,
        kept: job.kept,
    })
}

/// A side of the split.
#[derive(Debug, Clone, Copy)]
enum Side {
    Training,
    HeldOut,
}

/// Why a side holding no tokens stops the preparation, and what to change.
fn no_text(side: Side, held_out: &HeldOut) -> String {
    let advice = match (side, held_out) {
        (Side::HeldOut, HeldOut::Fraction(f)) => format!(
            "the held-out documents hold no text to tokenize: hold out more of them with a \
             larger --held-out (now {f}), or name them with --held-out-files"
        ),
        (Side::HeldOut, HeldOut::Files(_)) => "the held-out files hold no text to tokenize: \
             name files with text in --held-out-files"
            .to_owned(),
        (Side::Training, HeldOut::Fraction(f)) => format!(
            "the training documents hold no text to tokenize: hold out fewer with a smaller \
             --held-out (now {f}), or add files with text"
        ),
        (Side::Training, HeldOut::Files(_)) => "the training documents hold no text to \
             tokenize: give inputs with text besides the --held-out-files"
            .to_owned(),
    };
    format!("{advice}; nothing in the directory was changed")
}

/// Moves the staged shards into the output directory, then writes the tokenizer's copy and
/// the manifest. The old manifest goes first, so that a run stopped in between leaves a
/// directory without one (unfinished), never one whose manifest is wrong.
fn commit(
    staging: &Staging,
    staged: &[String],
    tokenizer: &TextTokenizer,
    manifest: &Manifest,
) -> Result<()> {
    let out = staging.out();
    let copy = out.join(TOKENIZER);
    let tokenizer_bytes = match tokenizer.path() == copy {
        true => None,
        false => Some(tokenizer.json().to_vec()),
    };
    let json = serde_json::to_string_pretty(manifest).map_err(|err| Error::Data {
        path: out.join(MANIFEST),
        detail: err.to_string(),
    })?;
    let old_manifest = out.join(MANIFEST);
    match std::fs::remove_file(&old_manifest) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io(&old_manifest)(err));
        }
        _ => {}
    }
    for file in staged {
        staging.place(file)?;
    }
    if let Some(bytes) = tokenizer_bytes {
        write_atomically(&copy, &bytes)?;
    }
    write_atomically(&out.join(MANIFEST), json.as_bytes())?;
    remove_stale_shards(out, manifest)?;
    staging.finish()
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

/// The training and held-out documents of `options`, and the paths skipped on the way. The
/// output directory is never read as input (as in `headroom prepare . --out shards`): its
/// shards, manifest and tokenizer are not input text.
fn documents(options: &PrepareOptions) -> Result<(Vec<Document>, Vec<Document>, Vec<Skipped>)> {
    let mut walk = Walk::leaving_out(Some(&options.out));
    let (train, held_out) = match &options.held_out {
        HeldOut::Fraction(fraction) => {
            if !(*fraction > 0.0 && *fraction <= 0.5) {
                return Err(Error::config(format!(
                    "--held-out {fraction}: the held-out fraction must be in (0, 0.5]"
                )));
            }
            let found = walk.files(&options.inputs, &options.filter, "")?;
            split(found.into_iter().map(Document::from).collect(), *fraction)
        }
        HeldOut::Files(paths) => {
            // The held-out files first, so that the inputs' walk leaves them out.
            let held_out = walk.files(paths, &options.filter, "held-out ")?;
            let train = walk.files(&options.inputs, &options.filter, "")?;
            let documents = |found: Vec<FoundFile>| found.into_iter().map(Document::from);
            (documents(train).collect(), documents(held_out).collect())
        }
    };
    Ok((train, held_out, walk.skipped))
}

/// The training and held-out documents: by the hash of each name, at least one of each; a lone
/// file split in two.
fn split(mut documents: Vec<Document>, fraction: f64) -> (Vec<Document>, Vec<Document>) {
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
        return (vec![head], vec![tail]);
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
    (train, held_out)
}

/// One preparation under way.
struct Job<'a> {
    tokenizer: &'a TextTokenizer,
    content: Content<'a>,
    options: &'a PrepareOptions,
    staging: &'a Staging,
    bar: &'a Bar,
    skipped: Vec<Skipped>,
    /// The shards of this preparation in the staging directory, to move into place.
    staged: Vec<String>,
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
            self.bar.advance(bytes);
            start = end;
        }
        Ok(entries)
    }

    /// One shard: kept when a previous run finished it from the same sources (in place, or
    /// staged by a run that stopped), else tokenized into the staging directory.
    fn shard(&mut self, file: &str, documents: &[Document]) -> Result<ShardEntry> {
        let vocab = self.tokenizer.vocab() as u64;
        // Chat shards depend on the template and the scoring as well.
        let rendering = match self.content {
            Content::Text => String::new(),
            Content::Chat(encoder) => {
                let chat = encoder.manifest();
                format!("chat\0{}\0{}\n", chat.template_hash, chat.scored)
            }
        };
        let sources_hash = fnv1a(
            documents
                .iter()
                .map(|d| format!("{}\0{}\0{:?}\n", d.name, d.bytes, d.part))
                .chain([rendering])
                .collect::<String>()
                .as_bytes(),
        );
        let texts: Vec<std::result::Result<(String, usize), String>> = documents
            .par_iter()
            .map(|d| read_text(d, matches!(self.content, Content::Chat(_))))
            .collect();
        // Documents with text: skipped files and empty ones add no tokens.
        let tokenized = texts
            .iter()
            .filter(|text| text.as_ref().is_ok_and(|(t, _)| !t.is_empty()))
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
        let staged = self.staging.dir().join(file);
        for (path, in_place) in [(self.options.out.join(file), true), (staged.clone(), false)] {
            if let Some((header, scored)) = finished(&path)
                && header.tokenizer_hash == self.tokenizer.hash()
                && header.sources_hash == sources_hash
                && header.vocab == vocab
                && header.token_flags == matches!(self.content, Content::Chat(_))
            {
                self.kept += 1;
                if !in_place {
                    self.staged.push(file.to_owned());
                }
                return Ok(ShardEntry {
                    file: file.to_owned(),
                    tokens: header.tokens,
                    documents: scored.map_or(tokenized, |(_, conversations)| conversations),
                    scored: scored.map(|(scored, _)| scored),
                });
            }
        }
        let (tokens, flags, documents) = match self.content {
            Content::Text => (self.text_tokens(texts)?, None, tokenized),
            Content::Chat(encoder) => {
                let mut chats = crate::data::chat::EncodedFile::default();
                for (document, text) in documents.iter().zip(texts) {
                    let Ok((text, first_line)) = text else {
                        continue;
                    };
                    let file = encoder.encode_lines(&text, &document.path, first_line)?;
                    chats.tokens.extend(file.tokens);
                    chats.flags.extend(file.flags);
                    chats.conversations += file.conversations;
                }
                (chats.tokens, Some(chats.flags), chats.conversations)
            }
        };
        let token_bytes = ShardHeader::token_bytes_for(vocab);
        let mut body = encode(&tokens, token_bytes);
        body.extend(flags.iter().flatten());
        let header = ShardHeader {
            token_bytes,
            vocab,
            tokenizer_hash: self.tokenizer.hash(),
            sources_hash,
            tokens: tokens.len() as u64,
            checksum: ShardHeader::checksum_of(&body),
            token_flags: flags.is_some(),
        };
        let mut bytes = Vec::with_capacity(HEADER_BYTES + body.len());
        bytes.extend_from_slice(&header.to_bytes());
        bytes.extend(body);
        write_atomically(&staged, &bytes)?;
        self.staged.push(file.to_owned());
        self.written += 1;
        Ok(ShardEntry {
            file: file.to_owned(),
            tokens: header.tokens,
            documents,
            scored: flags.map(|f| f.iter().filter(|&&f| f & SCORED != 0).count() as u64),
        })
    }

    /// The tokens of documents' `texts`, each followed by the end-of-text token.
    fn text_tokens(
        &self,
        texts: Vec<std::result::Result<(String, usize), String>>,
    ) -> Result<Vec<u32>> {
        let end = self.tokenizer.end_of_text();
        let encoded = texts
            .into_par_iter()
            .filter_map(|text| text.ok())
            .map(|(text, _)| {
                if text.is_empty() {
                    return Ok(Vec::new());
                }
                let mut ids = self.tokenizer.encode_document(&text)?;
                ids.extend(end);
                Ok(ids)
            })
            .collect::<Result<Vec<Vec<u32>>>>()?;
        Ok(encoded.concat())
    }
}

/// The header of the shard at `path` when it is complete and its tokens match its checksum,
/// with its scored tokens and conversations where it has flags.
fn finished(path: &Path) -> Option<(ShardHeader, Option<(u64, usize)>)> {
    let bytes = std::fs::read(path).ok()?;
    let header = ShardHeader::parse(&bytes, bytes.len() as u64).ok()?;
    header.check(&bytes[HEADER_BYTES..]).ok()?;
    let flags = &bytes[HEADER_BYTES + header.tokens as usize * header.token_bytes..];
    let counts = header.token_flags.then(|| {
        let count = |bit: u8| flags.iter().filter(|&&f| f & bit != 0).count();
        (count(SCORED) as u64, count(STARTS_CONVERSATION))
    });
    Some((header, counts))
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

/// A document's text and the number of its first line in its file, or why it is skipped; a
/// lone file of `lines` (conversations) is split between two lines.
fn read_text(document: &Document, lines: bool) -> std::result::Result<(String, usize), String> {
    let text = read_text_file(&document.path)?;
    let cut = |fraction| match lines {
        true => cut_between_lines(&text, fraction),
        false => cut(&text, fraction),
    };
    Ok(match document.part {
        Part::Whole => (text, 1),
        Part::Head(fraction) => (text[..cut(fraction)].to_owned(), 1),
        Part::Tail(fraction) => {
            let at = cut(fraction);
            let line = 1 + text[..at].matches('\n').count();
            (text[at..].to_owned(), line)
        }
    })
}

/// Where a lone file is split: after the first line break past `fraction` of its bytes (or at
/// a character boundary there, without one that leaves text after it: a file's last line
/// break ends it).
fn cut(text: &str, fraction: f64) -> usize {
    let (at, after) = cut_points(text, fraction);
    after.unwrap_or(at)
}

/// Where a lone file of lines is split: after the first line break past `fraction` of its
/// bytes that leaves a line after it, else after the last line break before (0 without one).
fn cut_between_lines(text: &str, fraction: f64) -> usize {
    let (at, after) = cut_points(text, fraction);
    after.unwrap_or_else(|| text[..at].rfind('\n').map_or(0, |line| line + 1))
}

/// The character boundary at `fraction` of `text`'s bytes, and the end of the first line
/// break past it when text follows.
fn cut_points(text: &str, fraction: f64) -> (usize, Option<usize>) {
    let mut at = ((text.len() as f64 * fraction) as usize).min(text.len());
    while !text.is_char_boundary(at) {
        at += 1;
    }
    match text[at..].find('\n') {
        Some(line) if at + line + 1 < text.len() => (at, Some(at + line + 1)),
        _ => (at, None),
    }
}
