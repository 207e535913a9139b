//! What a run leaves in its directory: metrics that read back whatever the loss did, a run
//! that diverges stopped with every artifact written, recovered out-of-memory failures
//! explained in the records and marked on the plots, the allocator's history honest about
//! what it dropped, and an allocation trace that replays the run.

mod common;

use std::process::Command;

use common::{TempDir, resume, small_config, tight_limit};
use headroom_alloc::Verdict;
use headroom_alloc::trace::{read_trace_file_with_settings, replay_with_growth_step};
use headroom_trainer::config::PrecisionKind;
use headroom_trainer::run_dir::{Summary, read_all};
use headroom_trainer::{Error, Trainer};

fn summary_in(dir: &TempDir) -> Summary {
    serde_json::from_slice(&std::fs::read(dir.0.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn skipped_f16_steps_with_infinite_gradients_end_the_run_normally_with_every_artifact() {
    let dir = TempDir::new("f16-skips");
    let mut config = small_config(&dir);
    config.steps = Some(4);
    config.precision.dtype = PrecisionKind::F16;
    // A scale no f16 gradient survives: every step overflows and is skipped.
    config.precision.loss_scale = 1e30;
    let file = dir.0.join("run.toml");
    std::fs::write(&file, config.to_toml()).unwrap();
    let headroom = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_headroom"))
            .args(args)
            .env("HEADROOM_LOG", "warn")
            .output()
            .unwrap()
    };
    let trained = headroom(&["train", "--quiet", "--config", file.to_str().unwrap()]);
    assert!(
        trained.status.success(),
        "{}",
        String::from_utf8_lossy(&trained.stderr)
    );
    let records = read_all(&dir.0).unwrap();
    assert_eq!(records.len(), 4);
    assert!(
        records
            .iter()
            .all(|r| r.skipped && !r.grad_norm.is_finite())
    );
    for file in [
        "summary.json",
        "loss.svg",
        "memory.svg",
        "checkpoint.safetensors",
    ] {
        assert!(dir.0.join(file).exists(), "{file}");
    }
    let report = headroom(&["report", dir.0.to_str().unwrap()]);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
}

#[test]
fn a_run_whose_loss_stays_nan_stops_naming_the_step_and_keeps_its_last_good_checkpoint() {
    let dir = TempDir::new("diverge");
    let mut config = small_config(&dir);
    config.steps = Some(40);
    config.checkpoint.every = 1;
    config.max_nonfinite_steps = 3;
    // A learning rate that blows the weights up, with nothing to clip the gradients.
    config.optimizer.lr = 1e30;
    config.optimizer.clip = 0.0;
    config.optimizer.schedule = headroom_trainer::config::ScheduleKind::Constant;
    let err = Trainer::new(config.clone())
        .unwrap()
        .run(false)
        .unwrap_err();
    let Error::Diverged { step, steps, .. } = err else {
        panic!("expected a divergence, got {err}");
    };
    assert_eq!(steps, 3);
    assert!(
        err.to_string().contains(&format!("up to step {step}")),
        "{err}"
    );
    let records = read_all(&dir.0).unwrap();
    assert_eq!(records.len() as u64, step);
    assert!(
        records[records.len() - 3..]
            .iter()
            .all(|r| !r.loss.is_finite())
    );
    let summary = summary_in(&dir);
    assert_eq!(summary.diverged_at, Some(step));
    for file in ["loss.svg", "memory.svg"] {
        assert!(dir.0.join(file).exists(), "{file}");
    }
    // The checkpoint holds the last step whose loss was finite: it resumes and its weights
    // are numbers.
    config.max_nonfinite_steps = 0;
    config.steps = Some(step);
    let resumed = resume(config).unwrap();
    let last_finite = records.iter().rposition(|r| r.loss.is_finite()).unwrap() as u64 + 1;
    assert_eq!(resumed.steps_done(), last_finite);
    for p in resumed.model().module().parameters() {
        assert!(p.to_f64().unwrap().iter().all(|x| x.is_finite()));
    }
}

#[test]
fn a_run_that_ends_without_a_finite_loss_fails_and_keeps_its_files() {
    let dir = TempDir::new("ends-nan");
    let mut config = small_config(&dir);
    config.steps = Some(12);
    config.checkpoint.every = 1;
    // Never stopped early for divergence: the end itself must not look like success.
    config.max_nonfinite_steps = 0;
    config.optimizer.lr = 1e30;
    config.optimizer.clip = 0.0;
    config.optimizer.schedule = headroom_trainer::config::ScheduleKind::Constant;
    let err = Trainer::new(config).unwrap().run(false).unwrap_err();
    let Error::EndedNotFinite {
        step,
        steps,
        checkpoint_kept,
        ..
    } = err
    else {
        panic!("expected a run that ended without a finite loss, got {err}");
    };
    assert_eq!(step, 12);
    let records = read_all(&dir.0).unwrap();
    assert_eq!(records.len(), 12, "every step's record stays");
    let last_finite = records.iter().rposition(|r| r.loss.is_finite()).unwrap() as u64 + 1;
    assert_eq!(steps, 12 - last_finite);
    assert!(checkpoint_kept, "the first step's checkpoint stays");
    let message = err.to_string();
    for part in [
        "ended at step 12",
        "NaN or infinite",
        "last checkpoint holds",
    ] {
        assert!(message.contains(part), "`{part}` not in: {message}");
    }
    assert_eq!(summary_in(&dir).diverged_at, Some(12));
    for file in ["loss.svg", "memory.svg"] {
        assert!(dir.0.join(file).exists(), "{file}");
    }
}

#[test]
fn without_held_out_samples_there_is_no_metric() {
    let dir = TempDir::new("no-eval");
    let mut config = small_config(&dir);
    config.data.eval_size = 0;
    let summary = Trainer::new(config).unwrap().run(false).unwrap();
    assert_eq!(summary.metric, None);
    assert!(summary.to_string().contains("not evaluated"), "{summary}");
}

#[test]
fn recovered_ooms_are_recorded_with_their_verdict_and_marked_on_the_memory_plot() {
    let dir = TempDir::new("oom-records");
    let (_, mut tight, _) = tight_limit(&dir, 3);
    tight.memory.history = 200;
    tight.memory.trace = true;
    let summary = Trainer::new(tight.clone()).unwrap().run(false).unwrap();
    let records = read_all(&dir.0).unwrap();
    let oom = &records[0].ooms[0];
    // Under a limit halfway between the peaks at 4 and at 32 samples, the step of 32 runs out
    // for lack of bytes or of a free range long enough, as the order of its frees has it; the
    // record and the plot say which.
    assert_eq!(oom.micro, 32);
    assert!(
        matches!(oom.verdict, Verdict::Capacity | Verdict::Fragmentation),
        "{oom:?}"
    );
    assert!(
        oom.requested > 0 && oom.largest_free < oom.requested,
        "{oom:?}"
    );
    let svg = std::fs::read_to_string(dir.0.join("memory.svg")).unwrap();
    let mark = format!("out of memory, recovered ({})", oom.verdict);
    assert!(svg.contains(&mark), "no OOM mark `{mark}`");
    assert!(svg.contains("micro 16"), "no micro-batch change mark");
    let loss = std::fs::read_to_string(dir.0.join("loss.svg")).unwrap();
    assert!(loss.contains("log scale") && loss.contains("held-out exact match"));

    // The history kept 200 events of about a thousand, and says so; the OOMs are among them.
    assert!(summary.history_dropped > 200, "{}", summary.history_dropped);
    assert!(summary.to_string().contains("were dropped"), "{summary}");
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.0.join("memory-trace.json")).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let ooms = events
        .iter()
        .filter(|e| e["name"] == "out of memory")
        .count();
    assert_eq!(ooms, summary.ooms_recovered, "every OOM kept");
    assert!(
        trace.to_string().contains("dropped"),
        "the trace says what it dropped"
    );

    // The allocation trace replays the run under the settings it records: the same peak, and
    // the same OOMs.
    let path = dir.0.join("allocations-1.jsonl");
    let (settings, ops) = read_trace_file_with_settings(&path).unwrap();
    let settings = settings.expect("the trace records its allocator's settings");
    let budget = headroom_trainer::planning::run_device::budget(&tight).unwrap();
    let config = settings.allocator_config();
    let replayed =
        replay_with_growth_step(&ops, config, budget.capacity, settings.growth_step).unwrap();
    assert_eq!(replayed.peak_in_use, summary.peak);
    assert_eq!(replayed.ooms as usize, summary.ooms_recovered);
}

#[test]
fn the_summary_reports_training_throughput_apart_and_aligns_long_tag_names() {
    let dir = TempDir::new("summary-throughput");
    let mut config = small_config(&dir);
    config.steps = Some(2);
    config.eval_every = 1;
    let mut trainer = Trainer::new(config).unwrap();
    let mut summary = trainer.run(false).unwrap();
    assert!(
        summary.train_s > 0.0 && summary.train_s < summary.elapsed_s,
        "the evaluations' time is not training's: {} of {} s",
        summary.train_s,
        summary.elapsed_s
    );
    // A slow step of a large model still shows its rate, not "0 samples/s".
    (summary.samples, summary.train_s) = (1, 4.0);
    let text = summary.to_string();
    assert!(text.contains("(0.250 samples/s)"), "{text}");
    summary.peak_by_tag[0].tag = "a tag longer than sixteen characters".into();
    let text = summary.to_string();
    let columns: Vec<usize> = text
        .lines()
        .skip_while(|line| !line.contains("by tag:"))
        .skip(1)
        .take(summary.peak_by_tag.len())
        .map(|line| line.trim_end().len())
        .collect();
    assert!(columns.len() > 1, "{text}");
    assert!(columns.iter().all(|&end| end == columns[0]), "{text}");
}
