//! Which files `headroom prepare` and `headroom tokenizer train` read, as a user relies on it:
//! symbolic links followed (the Hugging Face cache's layout) without looping, paths that cannot
//! be read skipped and reported, and a validation split of one's own held out exactly.
#![cfg(unix)]

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use common::tiny::tiny_tokenizer;
use common::{TempDir, assert_mentions, error_of, fails, headroom, prose, succeeds, text};
use headroom_trainer::data::shards::{
    FileFilter, HeldOut, Manifest, PrepareOptions, ShardEntry, ShardFile, find_files, prepare,
};
use headroom_trainer::data::tokenizer::{END_OF_TEXT, TextTokenizer};

/// Writes `text` to `path`, making its directory.
fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Options to prepare `inputs` into `out`, in shards of 1 MiB of text.
fn options(inputs: &[&Path], out: &Path, held_out: HeldOut) -> PrepareOptions {
    PrepareOptions {
        inputs: inputs.iter().map(|p| p.to_path_buf()).collect(),
        filter: FileFilter::default(),
        out: out.to_owned(),
        held_out,
        shard_bytes: 1 << 20,
        progress: false,
    }
}

/// The texts of the documents in `side`'s shards of `out`, sorted.
fn texts(tokenizer: &TextTokenizer, out: &Path, side: &[ShardEntry]) -> Vec<String> {
    let mut texts = Vec::new();
    for entry in side {
        let shard = ShardFile::open(&out.join(&entry.file)).unwrap();
        let decoded = tokenizer.decode(&shard.tokens(0, shard.len())).unwrap();
        let body = decoded.strip_suffix(END_OF_TEXT).unwrap();
        texts.extend(body.split(END_OF_TEXT).map(str::to_owned));
    }
    texts.sort();
    texts
}

/// Every document's text in both sides of `manifest`, sorted.
fn all_texts(tokenizer: &TextTokenizer, out: &Path, manifest: &Manifest) -> Vec<String> {
    let mut all = texts(tokenizer, out, &manifest.train);
    all.extend(texts(tokenizer, out, &manifest.held_out));
    all.sort();
    all
}

#[test]
fn links_to_files_and_directories_are_followed_and_each_file_read_once() {
    let dir = TempDir::new("prepare-links");
    // The Hugging Face cache's layout: a snapshot's files are links into `blobs`.
    let hub = dir.0.join("hub");
    let snapshot = hub.join("snapshots").join("0123abc");
    std::fs::create_dir_all(&snapshot).unwrap();
    let mut expected = Vec::new();
    for i in 0..6 {
        let text = prose(i, 6);
        write(&hub.join("blobs").join(format!("blob{i}")), &text);
        let link = snapshot.join(format!("doc-{i}.txt"));
        symlink(format!("../../blobs/blob{i}"), &link).unwrap();
        expected.push(text);
    }
    // A link to a directory elsewhere, a second link to one of the files, and a link back up.
    let extra = dir.0.join("extra");
    for i in 10..12 {
        let text = prose(i, 6);
        write(&extra.join(format!("more-{i}.txt")), &text);
        expected.push(text);
    }
    symlink(&extra, snapshot.join("extra")).unwrap();
    symlink(
        snapshot.join("doc-0.txt"),
        snapshot.join("same-as-doc-0.txt"),
    )
    .unwrap();
    symlink(&snapshot, snapshot.join("loop")).unwrap();
    expected.sort();

    let files = find_files(std::slice::from_ref(&snapshot), &FileFilter::default()).unwrap();
    assert_eq!(files.len(), expected.len(), "{files:?}");

    let out = dir.0.join("shards");
    let tokenizer = tiny_tokenizer();
    let prepared = prepare(
        &tokenizer,
        &options(&[&snapshot], &out, HeldOut::Fraction(0.25)),
    )
    .unwrap();
    let manifest = prepared.manifest;
    assert!(manifest.skipped.is_empty(), "{:?}", manifest.skipped);
    assert_eq!(all_texts(&tokenizer, &out, &manifest), expected);

    // The tokenizer trains on the linked files too.
    let trained = dir.0.join("tokenizer.json");
    let said = succeeds(&headroom(&[
        "tokenizer",
        "train",
        text(&snapshot),
        "--vocab",
        "280",
        "--out",
        text(&trained),
    ]));
    assert_mentions(&said, &[&format!("on {} files", expected.len())]);
}

/// A directory under `root` whose path is longer than the system lets a path be
/// (`ENAMETOOLONG`), holding a text file: it cannot be read, even by root. Made with short
/// names and renamed from the deepest up, so that no call names a path too long.
fn unreadable_directory(root: &Path) -> PathBuf {
    let levels = 20;
    let mut short = root.to_owned();
    for _ in 0..levels {
        short.push("d");
    }
    write(&short.join("deep.txt"), "text too deep to reach.\n");
    let long = "x".repeat(250);
    for level in (1..=levels).rev() {
        let mut path = root.to_owned();
        for _ in 0..level {
            path.push("d");
        }
        std::fs::rename(&path, path.with_file_name(&long)).unwrap();
    }
    root.join(&long)
}

#[test]
fn unreadable_directories_and_links_are_skipped_and_reported() {
    let dir = TempDir::new("prepare-unreadable");
    let corpus = dir.0.join("corpus");
    let mut expected = Vec::new();
    for i in 0..5 {
        let text = prose(i, 5);
        write(&corpus.join(format!("doc-{i}.txt")), &text);
        expected.push(text);
    }
    expected.sort();
    let deep = unreadable_directory(&corpus);
    let dangling = corpus.join("gone.txt");
    symlink(dir.0.join("nowhere.txt"), &dangling).unwrap();

    let out = dir.0.join("shards");
    let tokenizer = tiny_tokenizer();
    let prepared = prepare(
        &tokenizer,
        &options(&[&corpus], &out, HeldOut::Fraction(0.25)),
    )
    .unwrap();
    let manifest = prepared.manifest;
    assert_eq!(all_texts(&tokenizer, &out, &manifest), expected);
    let skipped: Vec<&Path> = manifest.skipped.iter().map(|s| s.path.as_path()).collect();
    assert!(skipped.contains(&dangling.as_path()), "{skipped:?}");
    let too_deep = manifest
        .skipped
        .iter()
        .find(|s| s.path.starts_with(&deep))
        .unwrap_or_else(|| panic!("nothing under the deep directory in {skipped:?}"));
    assert_mentions(&too_deep.reason, &["cannot read"]);
    assert_eq!(manifest, Manifest::read(&out).unwrap());

    // The tokenizer's trainer skips them too.
    let files = find_files(&[corpus], &FileFilter::default()).unwrap();
    assert_eq!(files.len(), expected.len(), "{files:?}");
}

#[test]
fn held_out_files_are_held_out_exactly_and_never_trained_on() {
    let dir = TempDir::new("prepare-held-out-files");
    let corpus = dir.0.join("corpus");
    let (mut train, mut valid) = (Vec::new(), Vec::new());
    for i in 0..2 {
        let text = prose(i, 5);
        write(&corpus.join(format!("train-{i}.txt")), &text);
        train.push(text);
    }
    // More held out than the fraction's cap of one half, inside the training directory.
    let valid_dir = corpus.join("valid");
    for i in 0..3 {
        let text = prose(100 + i, 5);
        write(&valid_dir.join(format!("valid-{i}.txt")), &text);
        valid.push(text);
    }
    let lone = dir.0.join("lone-valid.txt");
    let lone_text = prose(200, 3);
    write(&lone, &lone_text);
    valid.push(lone_text);
    train.sort();
    valid.sort();

    let out = dir.0.join("shards");
    let tokenizer = tiny_tokenizer();
    let held_out = HeldOut::Files(vec![valid_dir.clone(), lone.clone()]);
    let manifest = prepare(&tokenizer, &options(&[&corpus], &out, held_out))
        .unwrap()
        .manifest;
    assert_eq!(texts(&tokenizer, &out, &manifest.train), train);
    assert_eq!(texts(&tokenizer, &out, &manifest.held_out), valid);

    // Held-out files that do not exist, or hold no file, are errors naming them.
    let missing = dir.0.join("no-such-valid");
    let message = error_of(prepare(
        &tokenizer,
        &options(&[&corpus], &out, HeldOut::Files(vec![missing.clone()])),
    ));
    assert_mentions(&message, &[text(&missing)]);
    let empty = dir.0.join("empty-valid");
    std::fs::create_dir_all(&empty).unwrap();
    let message = error_of(prepare(
        &tokenizer,
        &options(&[&corpus], &out, HeldOut::Files(vec![empty.clone()])),
    ));
    assert_mentions(&message, &["no held-out files", text(&empty)]);

    // The command line: --held-out-files, which a fraction cannot accompany.
    let cli_out = dir.0.join("cli-shards");
    let tokenizer_path = tokenizer.path().to_str().unwrap();
    let mut args = vec![
        "prepare",
        text(&corpus),
        "--tokenizer",
        tokenizer_path,
        "--out",
        text(&cli_out),
        "--held-out-files",
        text(&valid_dir),
        "--held-out-files",
        text(&lone),
        "--quiet",
    ];
    succeeds(&headroom(&args));
    let cli = Manifest::read(&cli_out).unwrap();
    assert_eq!(texts(&tokenizer, &cli_out, &cli.held_out), valid);
    args.extend(["--held-out", "0.1"]);
    let stderr = fails(&headroom(&args));
    assert_mentions(&stderr, &["--held-out-files", "--held-out"]);
}
