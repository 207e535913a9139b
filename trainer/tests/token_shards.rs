//! Text to token shards and back, as a user relies on it: the tokenizer (the committed GPT-2
//! one, or one trained here), `headroom prepare` (files found, filtered, split, tokenized, kept
//! on a re-run), the errors that stop a bad preparation, and the windows `TokenShards` serves
//! to the loader.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use common::{TempDir, assert_mentions, error_of, fails, headroom, prose, succeeds};
use headroom_trainer::data::shards::{
    FileFilter, HEADER_BYTES, HeldOut, MANIFEST, Manifest, PrepareOptions, Prepared, ShardEntry,
    ShardFile, TOKENIZER, prepare,
};
use headroom_trainer::data::tokenizer::{END_OF_TEXT, TextTokenizer, fnv1a};
use headroom_trainer::data::{DataShape, Dataset, INPUTS, Loader, Position, Sample, TokenShards};

/// The tiny GPT-2 made with Python's transformers (a 320-token byte-level BPE).
const TINY_GPT2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../nn/tests/data/tiny-gpt2/");

fn tiny_gpt2() -> TextTokenizer {
    TextTokenizer::load(Path::new(TINY_GPT2)).unwrap()
}

/// Writes `bytes` to `path`, making its directory.
fn write(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) {
    let path = path.as_ref();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// `count` prose files `doc-00.txt`, ... in `dir`, with their texts, in path order.
fn write_corpus(dir: &Path, count: usize) -> Vec<(PathBuf, String)> {
    (0..count)
        .map(|i| {
            let path = dir.join(format!("doc-{i:02}.txt"));
            let text = prose(i as u64, 5 + i % 4);
            write(&path, &text);
            (path, text)
        })
        .collect()
}

/// Options to prepare `inputs` into `out`: a quarter held out, `shard_bytes` of text a shard.
fn options(inputs: &[&Path], out: &Path, shard_bytes: u64) -> PrepareOptions {
    PrepareOptions {
        inputs: inputs.iter().map(|p| p.to_path_buf()).collect(),
        filter: FileFilter::default(),
        out: out.to_owned(),
        held_out: HeldOut::Fraction(0.25),
        shard_bytes,
        progress: false,
    }
}

/// `files` prose files in `dir/corpus` prepared with the tiny GPT-2's tokenizer into
/// `dir/shards`, in one shard a side; returns the shards' directory.
fn prepared(dir: &TempDir, files: usize) -> PathBuf {
    let corpus = dir.0.join("corpus");
    write_corpus(&corpus, files);
    let out = dir.0.join("shards");
    prepare(&tiny_gpt2(), &options(&[&corpus], &out, 1 << 20)).unwrap();
    out
}

/// Every entry of a manifest, training shards first.
fn entries(manifest: &Manifest) -> Vec<&ShardEntry> {
    manifest.train.iter().chain(&manifest.held_out).collect()
}

/// Every token of the shard `file` in `dir`.
fn shard_tokens(dir: &Path, file: &str) -> Vec<u32> {
    let shard = ShardFile::open(&dir.join(file)).unwrap();
    shard.tokens(0, shard.len())
}

/// The texts of the documents in a shard: its tokens decoded, cut at each end-of-text token
/// (which must end the shard).
fn shard_documents(tokenizer: &TextTokenizer, dir: &Path, file: &str) -> Vec<String> {
    let text = tokenizer.decode(&shard_tokens(dir, file)).unwrap();
    let body = text.strip_suffix(END_OF_TEXT).unwrap_or_else(|| {
        panic!("{file} does not end with {END_OF_TEXT}: {text:?}");
    });
    body.split(END_OF_TEXT).map(str::to_owned).collect()
}

/// Each shard file of `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, SystemTime)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "tokens"))
        .map(|path| {
            let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap(), modified)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn the_committed_gpt2_tokenizer_encodes_as_transformers_does() {
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{TINY_GPT2}expected.json")).unwrap())
            .unwrap();
    let text = expected["text"].as_str().unwrap();
    let ids: Vec<u32> = expected["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap() as u32)
        .collect();
    let tokenizer = tiny_gpt2();
    assert_eq!(tokenizer.encode(text).unwrap(), ids);
    assert_eq!(tokenizer.decode(&ids).unwrap(), text);
    assert_eq!(
        tokenizer.vocab() as u64,
        expected["vocab_size"].as_u64().unwrap()
    );
    assert!(tokenizer.end_of_text().is_some());
    let json = std::fs::read(format!("{TINY_GPT2}tokenizer.json")).unwrap();
    assert_eq!(tokenizer.hash(), fnv1a(&json));
    assert!(tokenizer.path().ends_with("tokenizer.json"));
}

#[test]
fn a_trained_tokenizer_has_its_vocabulary_and_round_trips_text() {
    let dir = TempDir::new("tokenizer-train");
    let files: Vec<PathBuf> = write_corpus(&dir.0.join("corpus"), 4)
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    let out = dir.0.join("tokenizer.json");
    let tokenizer = TextTokenizer::train(&files, 300, &out).unwrap();
    assert_eq!(tokenizer.vocab(), 300);
    let end = tokenizer.end_of_text().expect("an end-of-text token");
    assert_eq!(tokenizer.encode(END_OF_TEXT).unwrap(), [end]);
    assert_eq!(tokenizer.hash(), fnv1a(&std::fs::read(&out).unwrap()));
    for text in [
        prose(1, 3),
        "Zebras jump over 42 fences — déjà vu!\n\ttabs, ünïcödé and 🦊\n".to_owned(),
    ] {
        let ids = tokenizer.encode(&text).unwrap();
        assert!(ids.iter().all(|&id| (id as usize) < 300), "{ids:?}");
        assert_eq!(tokenizer.decode(&ids).unwrap(), text);
    }
    // Merges were learned: the training text takes fewer tokens than bytes.
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(tokenizer.encode(&text).unwrap().len() < text.len() * 3 / 4);
    // Loaded again, the saved file is the same tokenizer.
    let loaded = TextTokenizer::load(&out).unwrap();
    assert_eq!(loaded.hash(), tokenizer.hash());
    assert_eq!(
        loaded.encode(&text).unwrap(),
        tokenizer.encode(&text).unwrap()
    );
}

#[test]
fn a_vocabulary_below_257_or_no_files_cannot_train_a_tokenizer() {
    let dir = TempDir::new("tokenizer-small");
    let files: Vec<PathBuf> = write_corpus(&dir.0, 2)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let out = dir.0.join("tokenizer.json");
    let message = error_of(TextTokenizer::train(&files, 256, &out));
    assert_mentions(&message, &["--vocab 256", "257"]);
    assert!(!out.exists(), "nothing is written");
    let message = error_of(TextTokenizer::train(&[], 300, &out));
    assert_mentions(&message, &["no text files"]);
}

#[test]
fn prepare_tokenizes_the_wanted_text_files_and_reports_the_others() {
    let dir = TempDir::new("prepare-files");
    let corpus = dir.0.join("corpus");
    let documents = write_corpus(&corpus, 8);
    let latin1 = corpus.join("latin1.txt");
    write(&latin1, b"caf\xe9 au lait\n");
    let binary = corpus.join("image.txt");
    write(&binary, b"GIF89a\x01\x00\x01\x00 some text after a NUL\n");
    // Neither is read: they would be tokenized (the first) or reported (the second).
    let vendored = corpus.join("vendor").join("vendored.txt");
    write(&vendored, "VENDORED TEXT\n");
    write(corpus.join("notes.md"), b"\xff\xfe\x00\x00 not text\n");
    let out = dir.0.join("shards");
    let tokenizer = tiny_gpt2();
    let mut options = options(&[&corpus], &out, 600);
    options.filter = FileFilter {
        extensions: vec!["txt".into()],
        skip_dirs: vec!["vendor".into()],
    };
    let Prepared {
        manifest,
        written,
        kept,
    } = prepare(&tokenizer, &options).unwrap();

    let mut skipped = manifest.skipped.clone();
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    let paths: Vec<&Path> = skipped.iter().map(|s| s.path.as_path()).collect();
    assert_eq!(paths, [binary.as_path(), latin1.as_path()]);
    assert_mentions(&skipped[0].reason, &["binary", "NUL"]);
    assert_mentions(&skipped[1].reason, &["not UTF-8"]);

    assert!(!manifest.train.is_empty() && !manifest.held_out.is_empty());
    assert!(manifest.train_tokens() > 0 && manifest.held_out_tokens() > 0);
    assert_eq!((written, kept), (entries(&manifest).len(), 0));
    assert_eq!(manifest, Manifest::read(&out).unwrap());
    assert_eq!(
        manifest.tokenizer_hash,
        format!("{:016x}", tokenizer.hash())
    );
    assert_eq!(
        std::fs::read(out.join(TOKENIZER)).unwrap(),
        std::fs::read(tokenizer.path()).unwrap(),
        "the tokenizer is copied beside the shards"
    );
    assert_eq!((manifest.vocab, manifest.token_bytes), (320, 2));
    for entry in entries(&manifest) {
        let path = out.join(&entry.file);
        let shard = ShardFile::open(&path).unwrap();
        assert_eq!(shard.header().tokens, entry.tokens, "{}", entry.file);
        assert_eq!(shard.header().token_bytes, 2, "u16 tokens for 320");
        assert_eq!(shard.header().vocab, 320);
        assert_eq!(shard.header().tokenizer_hash, tokenizer.hash());
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(len, (HEADER_BYTES + 2 * shard.len()) as u64);
    }

    // Each shard decodes to its documents' texts, each followed by the end-of-text token, in
    // path order; every readable document is in one shard, on one side.
    let index_of = |text: &str| {
        documents
            .iter()
            .position(|(_, t)| t == text)
            .unwrap_or_else(|| panic!("not a document's text: {text:?}"))
    };
    let mut sides = Vec::new();
    for side in [&manifest.train, &manifest.held_out] {
        let mut found = Vec::new();
        for entry in side {
            let texts = shard_documents(&tokenizer, &out, &entry.file);
            assert_eq!(texts.len(), entry.documents, "{}", entry.file);
            found.extend(texts.iter().map(|t| index_of(t)));
        }
        assert!(found.is_sorted(), "documents in path order: {found:?}");
        sides.push(found);
    }
    assert!(
        entries(&manifest).iter().any(|e| e.documents > 1),
        "some shard holds several documents"
    );
    let mut all = sides.concat();
    all.sort_unstable();
    assert_eq!(all, (0..documents.len()).collect::<Vec<_>>());
}

#[test]
fn a_rerun_keeps_finished_shards_and_rewrites_changed_or_damaged_ones() {
    let dir = TempDir::new("prepare-rerun");
    let corpus = dir.0.join("corpus");
    let documents = write_corpus(&corpus, 6);
    let out = dir.0.join("shards");
    let tokenizer = tiny_gpt2();
    // One document a shard.
    let options = options(&[&corpus], &out, 1);
    let first = prepare(&tokenizer, &options).unwrap();
    let shards = entries(&first.manifest).len();
    assert_eq!(shards, documents.len());
    assert_eq!((first.written, first.kept), (shards, 0));
    let before = snapshot(&out);
    assert_eq!(before.len(), shards);

    std::thread::sleep(std::time::Duration::from_millis(20));
    let second = prepare(&tokenizer, &options).unwrap();
    assert_eq!((second.written, second.kept), (0, shards));
    assert_eq!(second.manifest, first.manifest);
    assert_eq!(snapshot(&out), before, "no shard touched");

    // One file grows: its shard alone is tokenized again.
    let (grown, text) = &documents[3];
    write(grown, format!("{text}one more line at the end.\n"));
    let third = prepare(&tokenizer, &options).unwrap();
    assert_eq!((third.written, third.kept), (1, shards - 1));
    let after = snapshot(&out);
    let changed: Vec<&str> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(_, a)| a.0.as_str())
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    let texts = shard_documents(&tokenizer, &out, changed[0]);
    assert_eq!(texts, [format!("{text}one more line at the end.\n")]);

    // A shard cut short (a run killed while writing it) is written again, whole.
    let victim = out.join(&third.manifest.train[0].file);
    let whole = std::fs::read(&victim).unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .unwrap();
    file.set_len((HEADER_BYTES + (whole.len() - HEADER_BYTES) / 2) as u64)
        .unwrap();
    drop(file);
    let fourth = prepare(&tokenizer, &options).unwrap();
    assert_eq!((fourth.written, fourth.kept), (1, shards - 1));
    assert_eq!(std::fs::read(&victim).unwrap(), whole);
    assert_eq!(fourth.manifest, third.manifest);

    // Another tokenizer: every shard is tokenized again.
    let files: Vec<PathBuf> = documents.iter().map(|(p, _)| p.clone()).collect();
    let other = TextTokenizer::train(&files, 280, &dir.0.join("other.json")).unwrap();
    let fifth = prepare(&other, &options).unwrap();
    assert_eq!((fifth.written, fifth.kept), (shards, 0));
    assert_eq!(fifth.manifest.vocab, 280);
    TokenShards::open(&out, 4, 10).unwrap();
}

#[test]
fn a_lone_file_is_split_at_a_line_break() {
    let dir = TempDir::new("prepare-lone");
    let tokenizer = tiny_gpt2();
    let long_last_line = format!(
        "a short first line\n{}\n",
        "the last line is long ".repeat(20)
    );
    // Each text, and whether it is cut at a line break: not when the only one past the held-out
    // point ends the file (the cut is there, mid-line, keeping the held-out part small).
    for (name, text, at_line_break) in [
        ("prose", prose(7, 40), true),
        ("long-last-line", long_last_line, false),
        (
            "no-line-break",
            "one line without a break at its end ".repeat(8),
            false,
        ),
    ] {
        let file = dir.0.join(format!("{name}.txt"));
        write(&file, &text);
        // A file given, or a directory holding just it.
        for input in [file.clone(), dir.0.join(name)] {
            if input != file {
                write(input.join("only.txt"), &text);
            }
            let out = dir.0.join(format!("{name}-shards"));
            let mut options = options(&[&input], &out, 1 << 20);
            options.held_out = HeldOut::Fraction(0.1);
            let manifest = prepare(&tokenizer, &options).unwrap().manifest;
            assert_eq!((manifest.train.len(), manifest.held_out.len()), (1, 1));
            let head = shard_documents(&tokenizer, &out, &manifest.train[0].file);
            let tail = shard_documents(&tokenizer, &out, &manifest.held_out[0].file);
            let ([head], [tail]) = (head.as_slice(), tail.as_slice()) else {
                panic!("one part on each side: {head:?} {tail:?}");
            };
            assert!(
                !head.is_empty() && !tail.is_empty(),
                "{name}: {head:?} {tail:?}"
            );
            assert_eq!(format!("{head}{tail}"), text, "{name}");
            assert!(tail.len() < text.len() / 4, "{name}: held out {tail:?}");
            assert_eq!(head.ends_with('\n'), at_line_break, "{name}: {head:?}");
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
}

#[test]
fn input_and_option_mistakes_are_explained() {
    let dir = TempDir::new("prepare-mistakes");
    let tokenizer = tiny_gpt2();
    let corpus = dir.0.join("corpus");
    write(corpus.join("readme.md"), "not a text file for this run\n");
    let out = dir.0.join("shards");
    let mut only_txt = options(&[&corpus], &out, 1 << 20);
    only_txt.filter.extensions = vec!["txt".into()];
    let message = error_of(prepare(&tokenizer, &only_txt));
    assert_mentions(
        &message,
        &["no files ending in .txt", &corpus.display().to_string()],
    );

    let missing = dir.0.join("nowhere");
    let message = error_of(prepare(&tokenizer, &options(&[&missing], &out, 1 << 20)));
    assert_mentions(&message, &[&missing.display().to_string()]);

    write_corpus(&corpus, 3);
    for held_out in [0.0, -0.1, 0.6, 1.0, f64::NAN] {
        let mut bad = options(&[&corpus], &out, 1 << 20);
        bad.held_out = HeldOut::Fraction(held_out);
        let message = error_of(prepare(&tokenizer, &bad));
        assert_mentions(&message, &["--held-out", "(0, 0.5]"]);
    }
    let mut half = options(&[&corpus], &out, 1 << 20);
    half.held_out = HeldOut::Fraction(0.5);
    prepare(&tokenizer, &half).unwrap();
}

#[test]
fn damaged_shards_are_refused_naming_the_file() {
    let dir = TempDir::new("prepare-damage");
    let corpus = dir.0.join("corpus");
    write_corpus(&corpus, 4);
    let out = dir.0.join("shards");
    let manifest = prepare(&tiny_gpt2(), &options(&[&corpus], &out, 1 << 20))
        .unwrap()
        .manifest;
    TokenShards::open(&out, 8, 100).unwrap();
    let shard = out.join(&manifest.train[0].file);
    let whole = std::fs::read(&shard).unwrap();
    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, Damage); 3] = [
        ("not a token shard", |bytes| bytes[0] ^= 0xff),
        ("truncated", |bytes| bytes.truncate(bytes.len() - 3)),
        ("outside the vocabulary of 320", |bytes| {
            bytes[HEADER_BYTES + 10..HEADER_BYTES + 12].copy_from_slice(&320u16.to_le_bytes())
        }),
    ];
    for (detail, damage) in damages {
        let mut bytes = whole.clone();
        damage(&mut bytes);
        std::fs::write(&shard, &bytes).unwrap();
        let message = error_of(TokenShards::open(&out, 8, 100));
        assert_mentions(&message, &[&shard.display().to_string(), detail]);
    }
    std::fs::write(&shard, &whole).unwrap();
    TokenShards::open(&out, 8, 100).unwrap();
}

#[test]
fn a_shard_from_another_preparation_is_refused() {
    let dir = TempDir::new("prepare-mixed");
    let tokenizer = tiny_gpt2();
    let (a, b) = (dir.0.join("a"), dir.0.join("b"));
    write_corpus(&a, 4);
    write_corpus(&b, 7);
    let (out_a, out_b) = (dir.0.join("shards-a"), dir.0.join("shards-b"));
    let manifest = prepare(&tokenizer, &options(&[&a], &out_a, 1 << 20))
        .unwrap()
        .manifest;
    prepare(&tokenizer, &options(&[&b], &out_b, 1 << 20)).unwrap();
    let file = &manifest.train[0].file;
    std::fs::copy(out_b.join(file), out_a.join(file)).unwrap();
    let message = error_of(TokenShards::open(&out_a, 8, 100));
    assert_mentions(
        &message,
        &[&out_a.join(file).display().to_string(), "manifest"],
    );
}

/// Every file of `dir` (in its subdirectories too) with its bytes, by path.
fn every_file(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(every_file(&path));
        } else {
            files.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    files.sort();
    files
}

#[test]
fn a_failed_rerun_changes_nothing_and_says_what_to_change() {
    let dir = TempDir::new("prepare-failed-rerun");
    let tokenizer = tiny_gpt2();
    let corpus = dir.0.join("corpus");
    let documents = write_corpus(&corpus, 2);
    let out = dir.0.join("shards");
    let options = options(&[&corpus], &out, 1 << 20);
    prepare(&tokenizer, &options).unwrap();
    let before = every_file(&out);
    // One document emptied: a side holds no text, which is known only once it is tokenized,
    // here with another tokenizer, so every shard would be rewritten.
    write(&documents[0].0, "");
    let files: Vec<PathBuf> = documents.iter().map(|(p, _)| p.clone()).collect();
    let other = TextTokenizer::train(&files, 280, &dir.0.join("other.json")).unwrap();
    let message = error_of(prepare(&other, &options));
    assert_mentions(
        &message,
        &[
            "hold no text",
            "--held-out (now 0.25)",
            "nothing in the directory was changed",
        ],
    );
    assert_eq!(every_file(&out), before, "the directory is as it was");
    TokenShards::open(&out, 8, 100).unwrap();

    // Into a new directory, the failed run leaves none.
    let fresh = dir.0.join("fresh");
    let mut into_fresh = options.clone();
    into_fresh.out = fresh.clone();
    error_of(prepare(&other, &into_fresh));
    assert!(!fresh.exists());
}

#[test]
fn a_changed_token_is_found_by_the_checksum() {
    let dir = TempDir::new("prepare-checksum");
    let corpus = dir.0.join("corpus");
    write_corpus(&corpus, 4);
    let out = dir.0.join("shards");
    let tokenizer = tiny_gpt2();
    let options = options(&[&corpus], &out, 1 << 20);
    let first = prepare(&tokenizer, &options).unwrap();
    let shard = out.join(&first.manifest.train[0].file);
    let whole = std::fs::read(&shard).unwrap();
    // A token changed to another of the vocabulary: the header and the length still fit.
    let mut flipped = whole.clone();
    flipped[HEADER_BYTES + 6] ^= 1;
    std::fs::write(&shard, &flipped).unwrap();

    let message = error_of(TokenShards::open(&out, 8, 100));
    assert_mentions(
        &message,
        &[&shard.display().to_string(), "checksum", "headroom prepare"],
    );
    let rerun = prepare(&tokenizer, &options).unwrap();
    let shards = entries(&rerun.manifest).len();
    assert_eq!((rerun.written, rerun.kept), (1, shards - 1));
    assert_eq!(std::fs::read(&shard).unwrap(), whole, "rewritten as it was");
    TokenShards::open(&out, 8, 100).unwrap();
}

#[test]
fn an_unfinished_or_retokenized_directory_is_refused() {
    let dir = TempDir::new("prepare-unfinished");
    let out = prepared(&dir, 4);

    let message = error_of(TokenShards::open(&out, 100_000, 100));
    assert_mentions(
        &message,
        &[&out.display().to_string(), "not one window of 100001"],
    );

    let tokenizer = out.join(TOKENIZER);
    let mut json = std::fs::read(&tokenizer).unwrap();
    let original = json.clone();
    json.push(b'\n');
    std::fs::write(&tokenizer, &json).unwrap();
    let message = error_of(TokenShards::open(&out, 8, 100));
    assert_mentions(&message, &[&tokenizer.display().to_string(), "replaced"]);
    std::fs::write(&tokenizer, &original).unwrap();

    std::fs::remove_file(out.join(MANIFEST)).unwrap();
    let message = error_of(TokenShards::open(&out, 8, 100));
    assert_mentions(
        &message,
        &[
            &out.join(MANIFEST).display().to_string(),
            "headroom prepare",
            "again",
        ],
    );
}

#[test]
fn windows_follow_each_other_within_each_shard() {
    let dir = TempDir::new("windows");
    let corpus = dir.0.join("corpus");
    write_corpus(&corpus, 8);
    let out = dir.0.join("shards");
    let manifest = prepare(&tiny_gpt2(), &options(&[&corpus], &out, 600))
        .unwrap()
        .manifest;
    assert!(manifest.train.len() >= 2, "several training shards");
    let context = 8;
    let (train, _) = TokenShards::open(&out, context, usize::MAX).unwrap();
    assert_eq!(train.shape(), DataShape::tokens(320, context));
    // The windows the shards hold, in order: `context` apart, none across two shards.
    let mut expected = Vec::new();
    for entry in &manifest.train {
        let tokens = shard_tokens(&out, &entry.file);
        for start in (0..tokens.len().saturating_sub(1) / context).map(|w| w * context) {
            expected.push(tokens[start..start + context + 1].to_vec());
        }
    }
    assert_eq!(train.len(), expected.len());
    for (index, window) in expected.iter().enumerate() {
        let sample = train.sample(index).unwrap();
        let want = Sample::tokens(window[..context].to_vec(), window[1..].to_vec());
        assert_eq!(sample, want, "window {index}");
    }
}

#[test]
fn the_held_out_set_is_capped_at_eval_size_windows_spread_evenly() {
    let dir = TempDir::new("held-out-cap");
    let out = prepared(&dir, 8);
    let (_, all) = TokenShards::open(&out, 4, usize::MAX).unwrap();
    let windows = all.len();
    assert!(windows >= 8, "{windows} held-out windows");
    let (_, capped) = TokenShards::open(&out, 4, 3).unwrap();
    assert_eq!(capped.len(), 3);
    let picked: Vec<_> = (0..3).map(|i| capped.sample(i).unwrap()).collect();
    for (i, sample) in picked.iter().enumerate() {
        assert_eq!(*sample, all.sample(i * windows / 3).unwrap(), "pick {i}");
    }
    assert!(picked[0] != picked[1] && picked[1] != picked[2]);
    let (_, roomy) = TokenShards::open(&out, 4, windows + 10).unwrap();
    assert_eq!(roomy.len(), windows);
}

#[test]
fn the_loader_serves_every_window_once_an_epoch_and_resumes_in_place() {
    let dir = TempDir::new("loader");
    let corpus = dir.0.join("corpus");
    write_corpus(&corpus, 6);
    let out = dir.0.join("shards");
    prepare(&tiny_gpt2(), &options(&[&corpus], &out, 600)).unwrap();
    let (train, _) = TokenShards::open(&out, 8, 100).unwrap();
    let data: Arc<dyn Dataset> = Arc::new(train);
    let len = data.len();
    assert!(len >= 10, "{len} windows");
    let batch = 4;
    let mut loader = Loader::new(data.clone(), batch, 11, 2, Position::default());
    let per_epoch = loader.batches_per_epoch() as usize;
    assert_eq!(per_epoch, len.div_ceil(batch));
    let served: Vec<_> = (0..per_epoch + 3)
        .map(|_| {
            let (position, batch) = loader.next_batch().unwrap();
            (position, batch.unwrap())
        })
        .collect();
    drop(loader);
    let mut first_epoch: Vec<usize> = served[..per_epoch]
        .iter()
        .flat_map(|(_, b)| b.indices.clone())
        .collect();
    first_epoch.sort_unstable();
    assert_eq!(
        first_epoch,
        (0..len).collect::<Vec<_>>(),
        "each window once"
    );
    assert_eq!(
        served[per_epoch].0,
        Position {
            epoch: 1,
            offset: 0
        }
    );
    for (_, batch) in &served {
        assert_eq!(batch.shape().as_tokens().unwrap().len, 8);
        let expected: Vec<u32> = batch
            .indices
            .iter()
            .flat_map(|&i| {
                data.sample(i).unwrap().arrays()[0]
                    .as_u32()
                    .unwrap()
                    .to_vec()
            })
            .collect();
        assert_eq!(batch.array(INPUTS).unwrap().as_u32().unwrap(), expected);
    }
    // Restarted at a batch's position, a loader serves what followed it, across the epoch.
    let from = per_epoch - 2;
    let mut resumed = Loader::new(data, batch, 11, 2, served[from].0);
    for (position, expected) in &served[from..] {
        let (at, batch) = resumed.next_batch().unwrap();
        assert_eq!(at, *position);
        assert_eq!(batch.unwrap(), *expected);
    }
}

#[test]
fn the_command_line_trains_a_tokenizer_and_prepares_shards() {
    let dir = TempDir::new("cli-prepare");
    let corpus = dir.0.join("corpus");
    write_corpus(&corpus, 6);
    write(corpus.join("latin1.txt"), b"caf\xe9\n");
    let tokenizer = dir.0.join("tokenizer.json");
    let out = dir.0.join("shards");
    let (corpus, tokenizer_arg, out_arg) = (
        corpus.to_str().unwrap(),
        tokenizer.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    let said = succeeds(&headroom(&[
        "tokenizer",
        "train",
        corpus,
        "--vocab",
        "300",
        "--out",
        tokenizer_arg,
    ]));
    assert_mentions(&said, &["300 tokens", "6 files"]);
    assert_eq!(TextTokenizer::load(&tokenizer).unwrap().vocab(), 300);
    let prepare = [
        "prepare",
        corpus,
        "--tokenizer",
        tokenizer_arg,
        "--out",
        out_arg,
        "--held-out",
        "0.25",
        "--shard-size",
        "1KiB",
        "--quiet",
    ];
    let said = succeeds(&headroom(&prepare));
    assert_mentions(&said, &["0 kept", "1 skipped"]);
    let manifest = Manifest::read(&out).unwrap();
    assert_eq!(manifest.vocab, 300);
    let (train, eval) = TokenShards::open(&out, 8, 4).unwrap();
    assert!(train.len() > 0 && eval.len() > 0);
    let shards = entries(&manifest).len();
    let said = succeeds(&headroom(&prepare));
    assert_mentions(&said, &["0 shards written", &format!("{shards} kept")]);

    let mut too_much = prepare;
    too_much[7] = "0.9";
    let stderr = fails(&headroom(&too_much));
    assert_mentions(&stderr, &["--held-out 0.9"]);
}

#[test]
fn an_output_directory_among_the_inputs_is_not_read() {
    let dir = TempDir::new("prepare-inside");
    write_corpus(&dir.0, 5);
    let out = dir.0.join("shards");
    let tokenizer = tiny_gpt2();
    let options = options(&[&dir.0], &out, 1);
    let first = prepare(&tokenizer, &options).unwrap();
    let second = prepare(&tokenizer, &options).unwrap();
    assert_eq!(
        second.manifest, first.manifest,
        "its own files are not inputs"
    );
    assert_eq!((second.written, second.kept), (0, first.written));
    assert!(
        second.manifest.skipped.is_empty(),
        "{:?}",
        second.manifest.skipped
    );
}

#[test]
fn a_rerun_into_fewer_shards_removes_the_ones_left_over() {
    let dir = TempDir::new("stale-shards");
    let corpus = dir.0.join("corpus");
    let out = dir.0.join("shards");
    write_corpus(&corpus, 12);
    let tokenizer = tiny_gpt2();
    let small = prepare(&tokenizer, &options(&[&corpus], &out, 200)).unwrap();
    let before = snapshot(&out).len();
    assert!(before > 2, "small shards make several: {before}");
    let large = prepare(&tokenizer, &options(&[&corpus], &out, 1 << 20)).unwrap();
    let listed: Vec<String> = entries(&large.manifest)
        .iter()
        .map(|e| e.file.clone())
        .collect();
    let on_disk: Vec<String> = snapshot(&out).into_iter().map(|(name, ..)| name).collect();
    assert_eq!(
        on_disk, listed,
        "only the listed shards stay (had {before})"
    );
    assert!(entries(&small.manifest).len() > listed.len());
}
