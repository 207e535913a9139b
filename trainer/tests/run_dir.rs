//! A run's directory and checkpoint: a new run never destroys a checkpoint unasked, a resumed
//! run is checked against the run it continues, and a checkpoint that was tampered with or
//! corrupted is refused, naming what is wrong. TensorBoard's event files hold the records of
//! `metrics.jsonl`, each step once however often the run was resumed.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::events::{event_files, read_events, scalars_by_tag};
use common::{TempDir, error_of, resume, small_config};
use headroom_kernels::{Device, DeviceConfig};
use headroom_trainer::Trainer;
use headroom_trainer::run_dir::{StepRecord, Summary, checkpoint_path, read_all};

#[test]
fn a_new_run_refuses_a_directory_with_a_checkpoint_unless_told_to_overwrite_it() {
    let dir = TempDir::new("claim");
    let config = small_config(&dir);
    Trainer::new(config.clone()).unwrap().run(false).unwrap();
    let before = std::fs::read(checkpoint_path(&dir.0)).unwrap();
    let err = Trainer::new(config.clone()).err().unwrap().to_string();
    assert!(
        err.contains("--resume") && err.contains("--overwrite"),
        "{err}"
    );
    assert_eq!(std::fs::read(checkpoint_path(&dir.0)).unwrap(), before);
    let mut other = config.clone();
    other.seed = 5;
    Trainer::builder()
        .config(other)
        .overwrite()
        .build()
        .unwrap()
        .run(false)
        .unwrap();
    assert_ne!(std::fs::read(checkpoint_path(&dir.0)).unwrap(), before);
    assert_eq!(
        read_all(&dir.0).unwrap().len(),
        3,
        "the earlier metrics are gone"
    );
}

#[test]
fn a_resumed_run_continues_its_records_and_its_summary_covers_the_whole_run() {
    let dir = TempDir::new("whole-run");
    let mut config = small_config(&dir);
    config.steps = Some(6);
    config.checkpoint.every = 4;
    let first = Trainer::new(config.clone()).unwrap().run(false).unwrap();
    assert_eq!((first.steps, first.samples, first.processes), (6, 48, 1));
    // Resuming a run that had finished changes nothing but the count of processes.
    let again = resume(config.clone()).unwrap().run(false).unwrap();
    assert_eq!(
        (again.steps, again.samples, again.final_loss, again.metric),
        (6, 48, first.final_loss, first.metric)
    );
    assert_eq!(again.processes, 2);
    assert_eq!(read_all(&dir.0).unwrap().len(), 6);
    // More steps, and a larger batch: both may change.
    config.steps = Some(9);
    config.batch.size = 16;
    config.batch.micro = Some(16);
    let longer = resume(config).unwrap().run(false).unwrap();
    assert_eq!((longer.steps, longer.samples), (9, 48 + 3 * 16));
    let steps: Vec<u64> = read_all(&dir.0).unwrap().iter().map(|r| r.step).collect();
    assert_eq!(steps, (1..=9).collect::<Vec<_>>());
    let written: Summary =
        serde_json::from_slice(&std::fs::read(dir.0.join("summary.json")).unwrap()).unwrap();
    assert_eq!(written.samples, longer.samples);
}

#[test]
fn a_resume_that_changes_the_trajectory_is_refused_naming_the_setting() {
    let dir = TempDir::new("resume-changes");
    let config = small_config(&dir);
    Trainer::new(config.clone()).unwrap().run(false).unwrap();
    let refused = |change: &dyn Fn(&mut headroom_trainer::config::TrainConfig), name: &str| {
        let mut changed = config.clone();
        change(&mut changed);
        let err = error_of(resume(changed));
        assert!(err.contains(&format!("--resume: {name}:")), "{name}: {err}");
    };
    refused(&|c| c.seed = 9, "seed");
    refused(&|c| c.model.width = 32, "model.width");
    refused(
        &|c| c.precision.dtype = headroom_trainer::config::PrecisionKind::Bf16,
        "precision.dtype",
    );
    refused(&|c| c.optimizer.lr = 0.5, "optimizer.lr");
    refused(&|c| c.data.train_size = 32, "data.train_size");
    let mut allowed = config.clone();
    allowed.memory.limit = Some(headroom_alloc::ByteSize::mib(48));
    allowed.checkpoint.every = 2;
    allowed.eval_every = 1;
    resume(allowed).unwrap();
}

/// The metadata of the checkpoint in `dir`, and its trainer's state as JSON.
fn saved_metadata(dir: &std::path::Path) -> (BTreeMap<String, String>, serde_json::Value) {
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let saved = headroom_nn::checkpoint::load(&checkpoint_path(dir), &device).unwrap();
    let metadata = saved.metadata().clone();
    let state = serde_json::from_str(&metadata["headroom.trainer"]).unwrap();
    (metadata, state)
}

#[test]
fn flipped_bytes_and_impossible_states_in_a_checkpoint_are_refused() {
    let dir = TempDir::new("tampered");
    let config = small_config(&dir);
    let mut trainer = Trainer::new(config.clone()).unwrap();
    trainer.train_step().unwrap();
    trainer.save_checkpoint().unwrap();
    let path = checkpoint_path(&dir.0);
    let good = std::fs::read(&path).unwrap();
    // One flipped bit near the end of the file: in the last tensor's data.
    let mut flipped = good.clone();
    let at = flipped.len() - 3;
    flipped[at] ^= 0x10;
    std::fs::write(&path, &flipped).unwrap();
    let err = error_of(resume(config.clone()));
    assert!(err.contains("checksum"), "{err}");

    // States no run saves, written with valid checksums: a micro-batch of 0, a step count
    // beyond the samples drawn.
    let (metadata, state) = {
        std::fs::write(&path, &good).unwrap();
        saved_metadata(&dir.0)
    };
    for (field, value, named) in [
        ("micro", serde_json::json!(0), "micro"),
        ("step", serde_json::json!(1_000_000_000_000_000u64), "step"),
    ] {
        let mut state = state.clone();
        match field {
            "micro" => state["micro"]["size"] = value,
            _ => state[field] = value,
        }
        let mut metadata = metadata.clone();
        metadata.insert("headroom.trainer".into(), state.to_string());
        headroom_nn::checkpoint::save(&path, trainer.model().module(), None, &metadata).unwrap();
        let err = error_of(resume(config.clone()));
        assert!(
            err.contains(named) && err.contains("not a state a run saves"),
            "{field}: {err}"
        );
    }
}

#[test]
fn the_command_line_gives_each_run_its_own_directory_and_latest_names_the_newest() {
    let cwd = TempDir::new("cli-runs");
    let mut config = small_config(&cwd);
    config.run_dir = None;
    let file = cwd.0.join("run.toml");
    std::fs::write(&file, config.to_toml()).unwrap();
    let headroom = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_headroom"))
            .current_dir(&cwd.0)
            .args(["train", "--quiet", "--config", "run.toml"])
            .args(args)
            .env("HEADROOM_LOG", "warn")
            .output()
            .unwrap()
    };
    for _ in 0..2 {
        let output = headroom(&[]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut runs: Vec<String> = std::fs::read_dir(cwd.0.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name != "latest")
        .collect();
    runs.sort();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let latest = std::fs::read_link(cwd.0.join("runs/latest")).unwrap();
    assert_eq!(latest.to_str().unwrap(), runs[1]);
    // A run that cannot start leaves no directory behind, and latest where it was.
    let failed = headroom(&["--memory-limit", "16KiB"]);
    assert!(!failed.status.success());
    assert_eq!(std::fs::read_dir(cwd.0.join("runs")).unwrap().count(), 3);
    assert_eq!(
        std::fs::read_link(cwd.0.join("runs/latest")).unwrap(),
        latest
    );
    // Into a directory that holds a run: refused, unless resumed or overwritten.
    let first = format!("runs/{}", runs[0]);
    let refused = headroom(&["--run-dir", &first]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--overwrite"));
    for how in ["--resume", "--overwrite"] {
        let output = headroom(&["--run-dir", &first, how]);
        assert!(
            output.status.success(),
            "{how}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Resuming without --run-dir continues the newest run.
    let output = headroom(&["--resume", "--steps", "4"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        read_all(&cwd.0.join("runs").join(&runs[1])).unwrap().len(),
        4
    );
}

/// Every file in `dir` with its bytes, by name.
fn files_in(dir: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            (name, std::fs::read(entry.path()).unwrap_or_default())
        })
        .collect()
}

#[test]
fn a_refused_start_and_a_resume_to_fewer_steps_than_done_change_nothing() {
    let dir = TempDir::new("refused-starts");
    let mut config = small_config(&dir);
    config.memory.trace = true;
    config.steps = Some(4);
    Trainer::new(config.clone()).unwrap().run(false).unwrap();
    let before = files_in(&dir.0);
    assert!(
        before.contains_key("allocations-1.jsonl"),
        "{:?}",
        before.keys()
    );
    // A resume refused for a changed setting writes no allocation trace.
    let mut changed = config.clone();
    changed.seed = 9;
    assert!(resume(changed).is_err());
    assert_eq!(files_in(&dir.0), before, "a refused resume changed files");
    // An overwrite refused for a model that cannot fit neither.
    let mut cramped = config.clone();
    cramped.memory.limit = Some(headroom_alloc::ByteSize::kib(16));
    assert!(
        Trainer::builder()
            .config(cramped)
            .overwrite()
            .build()
            .is_err()
    );
    assert_eq!(
        files_in(&dir.0),
        before,
        "a refused overwrite changed files"
    );
    // Fewer steps than done: nothing to do, and nothing changes.
    let mut fewer = config.clone();
    fewer.steps = Some(2);
    match resume(fewer) {
        Err(headroom_trainer::Error::NothingToDo { done, steps, .. }) => {
            assert_eq!((done, steps), (4, 2));
        }
        Err(other) => panic!("expected nothing to do, got {other}"),
        Ok(_) => panic!("expected nothing to do, got a run"),
    }
    assert_eq!(
        files_in(&dir.0),
        before,
        "a resume to fewer steps changed files"
    );
    let file = dir.0.join("run.toml");
    std::fs::write(&file, config.to_toml()).unwrap();
    let before = files_in(&dir.0);
    let output = common::headroom(&[
        "train",
        "--quiet",
        "--config",
        file.to_str().unwrap(),
        "--resume",
        "--steps",
        "2",
    ]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        said.contains("has done 4 steps") && said.contains("nothing to do"),
        "{said}"
    );
    assert_eq!(files_in(&dir.0), before);
}

#[test]
fn a_file_named_as_the_run_directory_or_at_runs_latest_is_refused_and_kept() {
    let cwd = TempDir::new("cli-run-dir-files");
    let mut config = small_config(&cwd);
    config.run_dir = None;
    std::fs::write(cwd.0.join("run.toml"), config.to_toml()).unwrap();
    let headroom = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_headroom"))
            .current_dir(&cwd.0)
            .args(["train", "--quiet", "--config", "run.toml"])
            .args(args)
            .output()
            .unwrap()
    };
    std::fs::write(cwd.0.join("notes.txt"), "mine").unwrap();
    for how in [&[][..], &["--resume"], &["--overwrite"]] {
        let output = headroom(&[&["--run-dir", "notes.txt"], how].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(
            stderr.contains("notes.txt: it is a file, not a directory")
                && !stderr.contains("os error"),
            "{stderr}"
        );
    }
    assert_eq!(std::fs::read(cwd.0.join("notes.txt")).unwrap(), b"mine");
    std::fs::create_dir(cwd.0.join("runs")).unwrap();
    std::fs::write(cwd.0.join("runs/latest"), "mine too").unwrap();
    for how in [&[][..], &["--resume"]] {
        let output = headroom(how);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(
            stderr.contains("latest") && stderr.contains("is a file"),
            "{stderr}"
        );
    }
    assert_eq!(
        std::fs::read(cwd.0.join("runs/latest")).unwrap(),
        b"mine too"
    );
    assert_eq!(
        std::fs::read_dir(cwd.0.join("runs")).unwrap().count(),
        1,
        "no run was made"
    );
}

/// The values of `tag` in `dir`'s event files, by step, as bits (NaN compares equal to itself).
fn tensorboard_values(dir: &std::path::Path, tag: &str) -> Vec<(u64, u32)> {
    let tags = scalars_by_tag(dir);
    let values = tags
        .get(tag)
        .unwrap_or_else(|| panic!("no {tag} in {:?}", tags.keys()));
    values
        .iter()
        .map(|&(step, v)| (step, v.to_bits()))
        .collect()
}

/// `value` of each record of `dir`'s `metrics.jsonl`, by step, as bits.
fn metrics_values(dir: &std::path::Path, value: impl Fn(&StepRecord) -> f32) -> Vec<(u64, u32)> {
    let records = read_all(dir).unwrap();
    records
        .iter()
        .map(|r| (r.step, value(r).to_bits()))
        .collect()
}

/// A value of a record, as TensorBoard holds it.
type Field = dyn Fn(&StepRecord) -> f32;

fn mib(bytes: u64) -> f32 {
    (bytes as f64 / 1_048_576.0) as f32
}

#[test]
fn a_run_writes_each_record_as_tensorboard_scalars_in_an_event_file() {
    let dir = TempDir::new("tensorboard");
    let mut config = small_config(&dir);
    config.steps = Some(4);
    config.eval_every = 2;
    // Micro-batches of 5 and 3: the step's micro-batch size is the larger.
    config.batch.micro = Some(5);
    let summary = Trainer::new(config).unwrap().run(false).unwrap();
    let files = event_files(&dir.0);
    assert_eq!(files.len(), 1, "{files:?}");
    let (events, torn) = read_events(&files[0]);
    assert!(!torn);
    assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
    assert!(events.windows(2).all(|w| w[0].wall_time <= w[1].wall_time));
    assert!(events[0].wall_time > 1.5e9, "seconds since the epoch");
    let expected: [(&str, &Field); 10] = [
        ("train/loss", &|r| r.loss as f32),
        ("train/lr", &|r| r.lr as f32),
        ("train/grad_norm", &|r| r.grad_norm as f32),
        ("train/loss_scale", &|r| r.loss_scale as f32),
        ("train/samples_per_second", &|r| r.samples_per_s as f32),
        ("train/tokens_per_second", &|r| r.tokens_per_s as f32),
        ("train/micro_batch", &|r| {
            *r.micro_sizes.iter().max().unwrap() as f32
        }),
        ("train/ooms_recovered", &|r| r.ooms.len() as f32),
        ("memory/in_use", &|r| mib(r.in_use)),
        ("memory/peak", &|r| mib(r.peak)),
    ];
    for (tag, value) in expected {
        assert_eq!(
            tensorboard_values(&dir.0, tag),
            metrics_values(&dir.0, value),
            "{tag}"
        );
    }
    let records = read_all(&dir.0).unwrap();
    assert_eq!(records.len(), 4);
    let tags = scalars_by_tag(&dir.0);
    for record in &records {
        assert!(!record.tags.is_empty());
        for bytes in &record.tags {
            let values = &tags[&format!("memory/tags/{}", bytes.tag)];
            assert!(
                values.contains(&(record.step, mib(bytes.peak))),
                "{}",
                bytes.tag
            );
        }
    }
    // The held-out metric after step 2, from metrics.jsonl, and at the end, from the summary.
    // The task's metric, "exact match", is tagged as TensorBoard users write tags.
    assert_eq!(summary.metric_name, "exact match");
    let eval = "eval/exact_match";
    let held_out = [records[1].metric.unwrap(), summary.metric.unwrap()];
    assert_eq!(
        tags[eval],
        [(2, held_out[0] as f32), (4, held_out[1] as f32)]
    );
}

#[test]
fn a_resumed_run_adds_an_event_file_and_tensorboard_shows_each_step_once() {
    let dir = TempDir::new("tensorboard-resume");
    let mut config = small_config(&dir);
    config.steps = Some(4);
    let first = Trainer::new(config.clone()).unwrap().run(false).unwrap();
    let at_four = std::fs::read(checkpoint_path(&dir.0)).unwrap();
    config.steps = Some(6);
    resume(config.clone()).unwrap().run(false).unwrap();
    let before: Vec<(std::path::PathBuf, Vec<u8>)> = event_files(&dir.0)
        .into_iter()
        .map(|path| (path.clone(), std::fs::read(path).unwrap()))
        .collect();
    assert_eq!(before.len(), 2);
    // Back to the checkpoint of step 4, as after a kill past it: steps 5 and 6 are done again.
    std::fs::write(checkpoint_path(&dir.0), at_four).unwrap();
    config.steps = Some(7);
    let last = resume(config.clone()).unwrap().run(false).unwrap();
    let files = event_files(&dir.0);
    assert_eq!(files.len(), 3, "{files:?}");
    for (path, bytes) in &before {
        assert_eq!(
            &std::fs::read(path).unwrap(),
            bytes,
            "an earlier file changed"
        );
    }
    let (events, _) = read_events(&files[2]);
    assert!(events[1].restart && events[1].step == 5, "{:?}", events[1]);
    let loss = |r: &StepRecord| r.loss as f32;
    assert_eq!(
        tensorboard_values(&dir.0, "train/loss"),
        metrics_values(&dir.0, loss)
    );
    assert_eq!(read_all(&dir.0).unwrap().len(), 7);
    let eval = "eval/exact_match";
    let held_out = [first.metric.unwrap() as f32, last.metric.unwrap() as f32];
    let expected = [(4, held_out[0].to_bits()), (7, held_out[1].to_bits())];
    assert_eq!(tensorboard_values(&dir.0, eval), expected);
    // Resuming the finished run trains nothing and logs nothing again.
    resume(config.clone()).unwrap().run(false).unwrap();
    assert_eq!(event_files(&dir.0).len(), 4);
    assert_eq!(tensorboard_values(&dir.0, eval), expected);
    assert_eq!(
        tensorboard_values(&dir.0, "train/loss"),
        metrics_values(&dir.0, loss)
    );
    // An overwrite removes the earlier run's event files with its other files.
    Trainer::builder()
        .config(config)
        .overwrite()
        .build()
        .unwrap()
        .run(false)
        .unwrap();
    assert_eq!(event_files(&dir.0).len(), 1);
    assert_eq!(tensorboard_values(&dir.0, "train/loss").len(), 7);
}

/// The tiny SmolLM2 (nn/tests/data/tiny-smollm2).
const TINY_SMOLLM2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../nn/tests/data/tiny-smollm2");

/// `headroom args...` run in `cwd`.
fn headroom_in(cwd: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_headroom"))
        .current_dir(cwd)
        .args(args)
        .env("HEADROOM_LOG", "warn")
        .output()
        .unwrap()
}

/// In `dir/a`, a copy of the tiny SmolLM2 (`smol`), shards tokenized by its tokenizer
/// (`shards`) and a LoRA run of two steps (`run`), trained from `dir/a` with every path as
/// typed there, relative; and an empty `dir/b`, another directory to use it from.
fn lora_run_with_relative_paths(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let (a, b) = (dir.0.join("a"), dir.0.join("b"));
    std::fs::create_dir_all(a.join("smol")).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    for entry in std::fs::read_dir(TINY_SMOLLM2).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, a.join("smol").join(path.file_name().unwrap())).unwrap();
    }
    let tokenizer = headroom_trainer::data::tokenizer::TextTokenizer::load(&a.join("smol"));
    let corpus = common::tiny::corpus(&dir.0, "corpus", 3);
    common::tiny::shards(&tokenizer.unwrap(), &corpus, a.join("shards"));
    let trained = headroom_in(
        &a,
        &[
            "train",
            "--quiet",
            "--init-from",
            "smol",
            "--lora",
            "--data",
            "token-shards",
            "--data-path",
            "shards",
            "--context",
            "16",
            "--batch-size",
            "2",
            "--micro-batch",
            "2",
            "--steps",
            "2",
            "--eval-size",
            "2",
            "--run-dir",
            "run",
        ],
    );
    common::succeeds(&trained);
    (a, b)
}

#[test]
fn a_lora_run_trained_with_relative_paths_is_used_and_resumed_from_another_directory() {
    let dir = TempDir::new("anywhere");
    let (a, b) = lora_run_with_relative_paths(&dir);
    let run = "../a/run";
    let eval = common::succeeds(&headroom_in(&b, &["eval", "--checkpoint", run]));
    assert!(eval.contains("held-out loss"), "{eval}");
    let prompt = [
        "generate",
        "--checkpoint",
        run,
        "--prompt",
        "the",
        "--max-tokens",
        "3",
    ];
    common::succeeds(&headroom_in(&b, &prompt));
    common::succeeds(&headroom_in(&b, &["export", "--hf", run, "adapters"]));
    assert!(b.join("adapters/adapter_model.safetensors").is_file());
    let resumed = [
        "train",
        "--quiet",
        "--resume",
        "--run-dir",
        run,
        "--steps",
        "3",
    ];
    common::succeeds(&headroom_in(&b, &resumed));
    assert_eq!(read_all(&a.join("run")).unwrap().len(), 3);
    let saved = std::fs::read_to_string(a.join("run/config.toml")).unwrap();
    let smol = std::fs::canonicalize(a.join("smol")).unwrap();
    assert!(
        saved.contains(&format!("init_from = {:?}", smol.display().to_string())),
        "{saved}"
    );
}

#[test]
fn a_path_a_run_depends_on_that_is_gone_is_named_by_its_setting() {
    let dir = TempDir::new("gone");
    let (a, b) = lora_run_with_relative_paths(&dir);
    let smol = std::fs::canonicalize(a.join("smol")).unwrap();
    let shards = std::fs::canonicalize(a.join("shards")).unwrap();
    std::fs::rename(&smol, a.join("smol-moved")).unwrap();
    let named = format!(
        "model.init_from = {:?}: no such directory",
        smol.display().to_string()
    );
    let run = "../a/run";
    for args in [
        &["eval", "--checkpoint", run][..],
        &["generate", "--checkpoint", run, "--prompt", "the"],
        &["export", "--hf", run, "adapters"],
        &[
            "train",
            "--quiet",
            "--resume",
            "--run-dir",
            run,
            "--steps",
            "3",
        ],
    ] {
        let stderr = common::fails(&headroom_in(&b, args));
        assert!(stderr.contains(&named), "{args:?}: {stderr}");
    }
    std::fs::rename(a.join("smol-moved"), &smol).unwrap();
    std::fs::rename(&shards, a.join("shards-moved")).unwrap();
    let named = format!(
        "data.path = {:?}: no such directory",
        shards.display().to_string()
    );
    for args in [
        &["eval", "--checkpoint", run][..],
        &[
            "train",
            "--quiet",
            "--resume",
            "--run-dir",
            run,
            "--steps",
            "3",
        ],
    ] {
        let stderr = common::fails(&headroom_in(&b, args));
        assert!(stderr.contains(&named), "{args:?}: {stderr}");
    }
}
