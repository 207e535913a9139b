//! A run killed with SIGKILL at random moments, checkpoints included, and resumed each time,
//! ends exactly where a run never stopped does: the same weights, no temporary file left,
//! each step recorded once (in `metrics.jsonl` and as TensorBoard shows the event files), and
//! a summary of the whole run.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::events::{event_files, read_events, scalars_by_tag};
use common::{TempDir, assert_same_checkpoints, small_config};
use headroom_alloc::trace::SplitMix64;
use headroom_trainer::run_dir::{Summary, read_all};

const STEPS: u64 = 6000;
const KILLS: usize = 24;

fn headroom(args: &[&str], config: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_headroom"));
    command
        .args(["train", "--quiet", "--config"])
        .arg(config)
        .args(args)
        .env("HEADROOM_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Returns as soon as a temporary checkpoint file exists in `dir` (a checkpoint is being
/// written), or after `patience`.
fn wait_for_a_checkpoint_write(dir: &Path, patience: Duration) {
    let started = Instant::now();
    while started.elapsed() < patience {
        let writing = std::fs::read_dir(dir).unwrap().any(|e| {
            let name = e.unwrap().file_name();
            name.to_string_lossy()
                .starts_with("checkpoint.safetensors.tmp-")
        });
        if writing {
            return;
        }
    }
}

#[test]
fn a_run_killed_at_random_moments_and_resumed_ends_like_a_run_never_stopped() {
    let straight_dir = TempDir::new("kill-straight");
    let killed_dir = TempDir::new("kill-killed");
    let write_config = |dir: &TempDir| {
        let mut config = small_config(dir);
        config.steps = Some(STEPS);
        // A checkpoint every step: most kills land in or near one.
        config.checkpoint.every = 1;
        config.memory.trace = true;
        let path = dir.0.join("run.toml");
        std::fs::write(&path, config.to_toml()).unwrap();
        path
    };
    let straight = headroom(&[], &write_config(&straight_dir))
        .output()
        .unwrap();
    assert!(
        straight.status.success(),
        "{}",
        String::from_utf8_lossy(&straight.stderr)
    );

    let config = write_config(&killed_dir);
    let checkpoint = headroom_trainer::run_dir::checkpoint_path(&killed_dir.0);
    let mut rng = SplitMix64::new(21);
    let started = Instant::now();
    let (mut kills, mut finished) = (0, false);
    let (mut mid_checkpoint, mut torn) = (0, 0);
    while kills < KILLS {
        // What the last kill left: a checkpoint half written, a record cut short.
        let names: Vec<String> = std::fs::read_dir(&killed_dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        mid_checkpoint += usize::from(names.iter().any(|n| n.contains(".tmp")));
        let metrics = std::fs::read(killed_dir.0.join("metrics.jsonl")).unwrap_or_default();
        torn += usize::from(metrics.last().is_some_and(|&b| b != b'\n'));
        let resume = checkpoint.exists();
        let mut child = headroom(if resume { &["--resume"] } else { &[] }, &config)
            .spawn()
            .unwrap();
        // A moment between 10 and 160 ms after the start (a start takes about 10 ms, a step
        // with its checkpoint about one); every fourth kill waits, after that, for a checkpoint
        // being written, so that some kills land inside one however loaded the machine is.
        let wait = Duration::from_millis(10 + rng.next_u64() % 150);
        std::thread::sleep(wait);
        if kills % 4 == 3 {
            wait_for_a_checkpoint_write(&killed_dir.0, Duration::from_secs(2));
        }
        if child.try_wait().unwrap().is_some() {
            // It got to the end before the kill: start the count again from scratch.
            let output = child.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            finished = true;
            break;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
    }
    assert!(
        !finished,
        "the run finished before {KILLS} kills: make it longer"
    );
    let last = headroom(&["--resume"], &config).output().unwrap();
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    eprintln!(
        "{kills} kills and resumes in {:.1} s: {mid_checkpoint} left a temporary checkpoint, \
         {torn} a torn record",
        started.elapsed().as_secs_f64()
    );
    assert!(
        mid_checkpoint > 0,
        "no kill landed while a checkpoint was written"
    );

    assert_same_checkpoints(&straight_dir.0, &killed_dir.0);
    let leftovers: Vec<String> = std::fs::read_dir(&killed_dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    let steps: Vec<u64> = read_all(&killed_dir.0)
        .unwrap()
        .iter()
        .map(|r| r.step)
        .collect();
    assert_eq!(steps, (1..=STEPS).collect::<Vec<_>>(), "each step once");
    // Every event file reads back, each record's CRCs checked, a torn last record passed over;
    // TensorBoard shows each step once, with the loss of metrics.jsonl.
    let files = event_files(&killed_dir.0);
    let torn_events = files.iter().filter(|f| read_events(f).1).count();
    eprintln!(
        "{} event files, {torn_events} with a torn last record",
        files.len()
    );
    let shown: Vec<(u64, u32)> = scalars_by_tag(&killed_dir.0)["train/loss"]
        .iter()
        .map(|&(step, loss)| (step, loss.to_bits()))
        .collect();
    let recorded: Vec<(u64, u32)> = read_all(&killed_dir.0)
        .unwrap()
        .iter()
        .map(|r| (r.step, (r.loss as f32).to_bits()))
        .collect();
    let first_difference = shown.iter().zip(&recorded).position(|(a, b)| a != b);
    assert!(
        shown.len() == recorded.len() && first_difference.is_none(),
        "TensorBoard shows {} losses, metrics.jsonl holds {}; the first that differs: {:?}",
        shown.len(),
        recorded.len(),
        first_difference.map(|i| (shown[i], recorded[i]))
    );
    let summary: Summary =
        serde_json::from_slice(&std::fs::read(killed_dir.0.join("summary.json")).unwrap()).unwrap();
    let whole: Summary =
        serde_json::from_slice(&std::fs::read(straight_dir.0.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(
        (summary.steps, summary.samples, summary.final_loss.to_bits()),
        (STEPS, STEPS * 8, whole.final_loss.to_bits()),
        "the summary counts the whole run"
    );
    assert_eq!(summary.metric, whole.metric);
    assert!(summary.processes >= 2, "{}", summary.processes);
    let traces = std::fs::read_dir(&killed_dir.0)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("allocations-")
        })
        .count();
    assert!(traces >= 2, "one allocation trace per start: {traces}");
}

/// Starts a long run in `dir`, waits until it has recorded a few steps, sends it `signal` (by
/// name, as `kill` takes it) and returns its exit code.
fn stopped_by(signal: &str, dir: &TempDir) -> Option<i32> {
    let mut config = small_config(dir);
    config.steps = Some(1_000_000);
    config.checkpoint.every = 0;
    config.eval_every = 0;
    let path = dir.0.join("config.toml.in");
    std::fs::write(&path, config.to_toml()).unwrap();
    let mut child = headroom(&[], &path).spawn().unwrap();
    let metrics = dir.0.join(headroom_trainer::run_dir::METRICS_FILE);
    let started = Instant::now();
    while std::fs::read_to_string(&metrics).map_or(0, |m| m.lines().count()) < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no steps recorded"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
    assert!(sent.success());
    child.wait().unwrap().code()
}

#[test]
fn ctrl_c_and_sigterm_finish_the_step_and_write_the_checkpoint_and_summary() {
    for (signal, code) in [("-INT", 130), ("-TERM", 143)] {
        let dir = TempDir::new("signalled");
        assert_eq!(stopped_by(signal, &dir), Some(code), "{signal}");
        let summary: Summary =
            serde_json::from_str(&std::fs::read_to_string(dir.0.join("summary.json")).unwrap())
                .unwrap();
        let steps = read_all(&dir.0).unwrap().len() as u64;
        assert_eq!(summary.stopped_at, Some(steps), "{signal}");
        assert!(dir.0.join("checkpoint.safetensors").exists(), "{signal}");
        assert!(dir.0.join("loss.svg").exists(), "{signal}");
        // The run goes on from where the signal stopped it.
        let resumed = headroom(
            &["--resume", "--steps", &(steps + 2).to_string()],
            &dir.0.join("config.toml.in"),
        )
        .output()
        .unwrap();
        assert!(
            resumed.status.success(),
            "{}",
            String::from_utf8_lossy(&resumed.stderr)
        );
        assert_eq!(read_all(&dir.0).unwrap().len() as u64, steps + 2);
    }
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Starts `headroom train` in `cwd` on a configuration whose start takes a while (GPT-2 small
/// planned and built), with `args`; once the start has opened its allocation trace (a file
/// named `allocations-` anywhere below `watched`, other than those in `before`), sends
/// `signal`. Returns the exit code and standard error.
fn interrupted_start(
    cwd: &Path,
    args: &[&str],
    watched: &Path,
    signal: &str,
) -> (Option<i32>, String) {
    let config = cwd.join("slow.toml");
    std::fs::write(
        &config,
        "steps = 1\n[model]\npreset = \"gpt2\"\ncontext = 128\n[data]\nkind = \
         \"uniform-tokens\"\n[batch]\nsize = 4\n[memory]\ntrace = true\n",
    )
    .unwrap();
    let before = traces_below(watched);
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .current_dir(cwd)
        .args(["train", "--quiet", "--config"])
        .arg(&config)
        .args(args)
        .env("HEADROOM_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while traces_below(watched) == before {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the start ended before its trace was opened"
        );
        assert!(started.elapsed() < Duration::from_secs(120), "no trace");
        std::thread::sleep(Duration::from_millis(2));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success()
    );
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

/// The allocation traces in `dir` and its subdirectories.
fn traces_below(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for name in names_in(dir) {
        let path = dir.join(&name);
        if path.is_dir() {
            found.extend(traces_below(&path));
        } else if name.starts_with("allocations-") {
            found.push(path.display().to_string());
        }
    }
    found
}

#[test]
fn a_signal_while_the_model_loads_ends_the_start_leaving_nothing() {
    // A new run in runs/: its directory goes.
    let cwd = TempDir::new("interrupted-start");
    let runs = cwd.0.join("runs");
    let (code, stderr) = interrupted_start(&cwd.0, &[], &cwd.0, "-INT");
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted before the first step; nothing was written"),
        "{stderr}"
    );
    assert!(names_in(&runs).is_empty(), "{:?}", names_in(&runs));

    // A run directory named but not there: made by the start, and removed.
    let (code, stderr) = interrupted_start(&cwd.0, &["--run-dir", "mine"], &cwd.0, "-TERM");
    assert_eq!(code, Some(143), "{stderr}");
    assert!(!cwd.0.join("mine").exists());

    // Over an earlier run: its files stay as they were, and the start's trace goes.
    let earlier = TempDir::new("interrupted-overwrite");
    let mut config = small_config(&earlier);
    config.memory.trace = true;
    headroom_trainer::Trainer::new(config)
        .unwrap()
        .run(false)
        .unwrap();
    let files = names_in(&earlier.0);
    let checkpoint = std::fs::read(earlier.0.join("checkpoint.safetensors")).unwrap();
    let run_dir = earlier.0.to_str().unwrap();
    let args = ["--overwrite", "--run-dir", run_dir];
    let (code, stderr) = interrupted_start(&cwd.0, &args, &earlier.0, "-INT");
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted before the first step"),
        "{stderr}"
    );
    assert_eq!(names_in(&earlier.0), files);
    assert_eq!(
        std::fs::read(earlier.0.join("checkpoint.safetensors")).unwrap(),
        checkpoint
    );
}
