//! A run's directory: where it is, how a run claims it, and what each start cleans.
//!
//! A run without a directory of its own gets a new one, `runs/<date-time>` (UTC), and
//! `runs/latest` names the newest (a symbolic link, on Unix). A new run refuses a directory
//! that holds a checkpoint: the checkpoint is only ever replaced by its own run, resumed, or by
//! a run told to overwrite it. Every start removes the temporary files a killed process left.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::atomic_file::TEMPORARY;
use crate::error::{Error, Result};
use crate::run_dir::checkpoint::checkpoint_path;
use crate::run_dir::metrics::METRICS_FILE;
use crate::run_dir::tensorboard::is_event_file;

/// Where runs without a directory of their own go.
pub const RUNS: &str = "runs";

/// The name in [`RUNS`] of the newest run.
pub const LATEST: &str = "latest";

/// The run's configuration, as it last started.
pub const CONFIG_FILE: &str = "config.toml";

/// The files a run writes besides its traces and the pretrained model's tokenizer and
/// generation files ([`headroom_nn::hf::COMPANION_FILES`]); an overwritten run loses exactly
/// these.
const RUN_FILES: [&str; 8] = [
    "checkpoint.safetensors",
    crate::data::shards::TOKENIZER,
    METRICS_FILE,
    "summary.json",
    CONFIG_FILE,
    "loss.svg",
    "memory.svg",
    "memory-trace.json",
];

/// The allocation traces' names: `allocations-<n>.jsonl`, one per start of a process.
const TRACE_PREFIX: &str = "allocations-";
const TRACE_SUFFIX: &str = ".jsonl";

/// How a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A new run; its directory must hold no checkpoint.
    New,
    /// The run continued from the checkpoint in its directory.
    Resume,
    /// A new run that replaces the run in its directory, checkpoint included.
    Overwrite,
}

/// The directory of a run that starts as `start`: `given`, or without one a new directory in
/// [`RUNS`] (and, to resume, the newest one). True when it was made now: the caller removes it
/// if the run fails to start, or points [`LATEST`] at it once it has started.
///
/// A run directory that is a file, and a file where [`LATEST`] should be, are errors, and
/// nothing is made or changed.
pub fn resolve(given: Option<&Path>, start: Start) -> Result<(PathBuf, bool)> {
    let (dir, made) = resolve_unchecked(given, start)?;
    if !made && std::fs::metadata(&dir).is_ok_and(|found| !found.is_dir()) {
        return Err(Error::config(format!(
            "run directory {}: it is a file, not a directory; give another --run-dir",
            dir.display()
        )));
    }
    Ok((dir, made))
}

/// [`resolve`] without its checks.
fn resolve_unchecked(given: Option<&Path>, start: Start) -> Result<(PathBuf, bool)> {
    match (given, start) {
        (Some(dir), _) => Ok((dir.to_owned(), false)),
        (None, Start::Resume) => {
            let latest = Path::new(RUNS).join(LATEST);
            let dir = match std::fs::read_link(&latest) {
                Ok(target) if target.is_relative() => Path::new(RUNS).join(target),
                Ok(target) => target,
                Err(_) => latest,
            };
            Ok((dir, false))
        }
        (None, _) => {
            latest_is_replaceable(Path::new(RUNS))?;
            Ok((new_run_dir(Path::new(RUNS), SystemTime::now())?, true))
        }
    }
}

/// Checks that [`LATEST`] in `runs`, if there is one, is not a file of the user's that pointing
/// it at a new run would replace (a directory there is left alone: see [`point_latest`]).
fn latest_is_replaceable(runs: &Path) -> Result<()> {
    let latest = runs.join(LATEST);
    match std::fs::symlink_metadata(&latest) {
        Ok(found) if found.is_file() => Err(Error::config(format!(
            "{} is a file, where Headroom keeps a link to the newest run: move it away, or give \
             --run-dir",
            latest.display()
        ))),
        _ => Ok(()),
    }
}

/// Claims `dir` for a run starting as `start`: checks what it holds (a new run must find no
/// checkpoint, a resumed one must find one), makes it if it is not there, and removes the
/// temporary files of killed processes. Nothing else is removed: a new run clears the earlier
/// one's files with [`clear_earlier_run`] once it is built, so a run that fails to start
/// destroys nothing. True when it made `dir`, which a start that ends before its first step
/// removes again.
pub fn claim(dir: &Path, start: Start) -> Result<bool> {
    let checkpoint = checkpoint_path(dir);
    match start {
        Start::Resume if !checkpoint.exists() => {
            return Err(Error::config(format!(
                "--resume: no checkpoint at {}",
                checkpoint.display()
            )));
        }
        Start::New if checkpoint.exists() => {
            return Err(Error::config(format!(
                "run directory {}: it holds the checkpoint of an earlier run; resume that run \
                 (--resume), overwrite it (--overwrite), or give another --run-dir",
                dir.display()
            )));
        }
        _ => {}
    }
    let made = !dir.exists();
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    for removed in remove_temporaries(dir)? {
        tracing::info!(
            "removed {}, left by a process that was stopped",
            removed.display()
        );
    }
    Ok(made)
}

/// Removes the files of the run `dir` held before (its checkpoint, a sharded one's rank files,
/// and TensorBoard event files included: call it only for a run that overwrites it), but the
/// allocation trace `keep` of this start.
pub fn clear_earlier_run(dir: &Path, keep: Option<&Path>) -> Result<()> {
    for path in headroom_nn::checkpoint::remove_rank_files(&checkpoint_path(dir), &[])? {
        tracing::info!("removed {} of the earlier run", path.display());
    }
    let traces = traces(dir)?.into_iter().map(|(_, path)| path);
    let events = event_files(dir)?;
    let files = RUN_FILES.iter().chain(headroom_nn::hf::COMPANION_FILES);
    for path in files.map(|f| dir.join(f)).chain(traces).chain(events) {
        if Some(path.as_path()) == keep {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!("removed {} of the earlier run", path.display()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(Error::io(&path)(err)),
        }
    }
    Ok(())
}

/// Removes what processes killed while writing left in `dir`: temporary checkpoints and
/// temporary copies of the run's files. Returns what it removed.
pub fn remove_temporaries(dir: &Path) -> Result<Vec<PathBuf>> {
    let checkpoint = checkpoint_path(dir);
    let mut removed = headroom_nn::checkpoint::remove_stale_temporaries(&checkpoint)?;
    // The rank files of a sharded checkpoint never committed.
    removed.extend(headroom_nn::checkpoint::remove_uncommitted(&checkpoint)?);
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(err) => return Err(Error::io(dir)(err)),
    };
    for entry in entries {
        let path = entry.map_err(Error::io(dir))?.path();
        let ours = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(TEMPORARY))
            .is_some_and(|n| RUN_FILES.contains(&n));
        if ours {
            std::fs::remove_file(&path).map_err(Error::io(&path))?;
            removed.push(path);
        }
    }
    Ok(removed)
}

/// The allocation traces in `dir`, by number.
fn traces(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut found: Vec<(u64, PathBuf)> = files_named(dir, |name| {
        name.strip_prefix(TRACE_PREFIX)?
            .strip_suffix(TRACE_SUFFIX)?
            .parse()
            .ok()
    })?;
    found.sort();
    Ok(found)
}

/// The TensorBoard event files in `dir`.
fn event_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let found = files_named(dir, |name| is_event_file(name).then_some(()))?;
    Ok(found.into_iter().map(|((), path)| path).collect())
}

/// The entries of `dir` whose names `matches` gives a value for, with it (none where `dir`
/// is missing).
fn files_named<T>(dir: &Path, matches: impl Fn(&str) -> Option<T>) -> Result<Vec<(T, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(Error::io(dir)(err)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry.map_err(Error::io(dir))?.path();
        if let Some(value) = path.file_name().and_then(|n| n.to_str()).and_then(&matches) {
            found.push((value, path));
        }
    }
    Ok(found)
}

/// The newest allocation trace in `dir`, if any.
pub fn latest_trace(dir: &Path) -> Result<Option<PathBuf>> {
    Ok(traces(dir)?.pop().map(|(_, path)| path))
}

/// The file this start of a process streams its allocations to: the next number in `dir`.
pub fn next_trace(dir: &Path) -> Result<PathBuf> {
    let next = traces(dir)?.last().map_or(1, |(n, _)| n + 1);
    Ok(dir.join(format!("{TRACE_PREFIX}{next}{TRACE_SUFFIX}")))
}

/// A new directory in `runs` named by the date and time `now` (UTC), with a suffix if that
/// name is taken.
fn new_run_dir(runs: &Path, now: SystemTime) -> Result<PathBuf> {
    std::fs::create_dir_all(runs).map_err(Error::io(runs))?;
    let stamp = utc_stamp(now);
    let dir = (1..)
        .map(|n| match n {
            1 => runs.join(&stamp),
            n => runs.join(format!("{stamp}-{n}")),
        })
        .find_map(|dir| match std::fs::create_dir(&dir) {
            Ok(()) => Some(Ok(dir)),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => None,
            Err(err) => Some(Err(Error::io(&dir)(err))),
        })
        .unwrap_or_else(|| Err(Error::config("runs: no free directory name")))?;
    Ok(dir)
}

/// Points [`LATEST`] beside `dir` at `dir` (on Unix, a symbolic link replaced atomically). A
/// `latest` that is a real directory or a file is left alone, with a warning.
pub fn point_latest(dir: &Path) {
    #[cfg(unix)]
    {
        let (Some(runs), Some(name)) = (dir.parent(), dir.file_name()) else {
            return;
        };
        let latest = runs.join(LATEST);
        if latest_is_replaceable(runs).is_err() {
            tracing::warn!(
                "{} is a file: it does not name the new run {}",
                latest.display(),
                dir.display()
            );
            return;
        }
        let temporary = runs.join(format!(".{LATEST}-{}", std::process::id()));
        std::fs::remove_file(&temporary).ok();
        let linked = std::os::unix::fs::symlink(name, &temporary)
            .and_then(|()| std::fs::rename(&temporary, &latest));
        if let Err(err) = linked {
            std::fs::remove_file(&temporary).ok();
            tracing::warn!(
                "{} does not name the new run {} ({err})",
                latest.display(),
                dir.display()
            );
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// `YYYY-MM-DDTHH-MM-SS` of `time` in UTC (file names cannot hold colons everywhere).
fn utc_stamp(time: SystemTime) -> String {
    let seconds = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates_are_utc_calendar_dates() {
        let at = |s: u64| utc_stamp(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00-00-00");
        assert_eq!(at(951_782_400), "2000-02-29T00-00-00");
        assert_eq!(at(1_795_602_661), "2026-11-25T10-31-01");
        assert_eq!(at(4_107_542_399), "2100-02-28T23-59-59");
    }

    #[test]
    fn runs_get_their_own_directories_and_latest_names_the_newest() {
        let runs = std::env::temp_dir().join(format!("headroom-runs-{}", std::process::id()));
        std::fs::remove_dir_all(&runs).ok();
        let now = UNIX_EPOCH + Duration::from_secs(1_795_602_661);
        let first = new_run_dir(&runs, now).unwrap();
        let second = new_run_dir(&runs, now).unwrap();
        assert_eq!(first, runs.join("2026-11-25T10-31-01"));
        assert_eq!(second, runs.join("2026-11-25T10-31-01-2"));
        point_latest(&first);
        point_latest(&second);
        #[cfg(unix)]
        assert_eq!(
            std::fs::read_link(runs.join(LATEST)).unwrap(),
            Path::new("2026-11-25T10-31-01-2")
        );
        std::fs::remove_dir_all(&runs).ok();
    }

    #[test]
    fn a_start_claims_its_directory_and_cleans_what_killed_processes_left() {
        let dir = std::env::temp_dir().join(format!("headroom-claim-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str| dir.join(name);
        for name in [
            "metrics.jsonl",
            "metrics.jsonl.tmp",
            "summary.json.tmp",
            "checkpoint.safetensors.tmp-4242",
            "allocations-1.jsonl",
            "events.out.tfevents.1700000000.host",
            "notes.txt",
        ] {
            std::fs::write(file(name), "x").unwrap();
        }
        let err = claim(&dir, Start::Resume).unwrap_err().to_string();
        assert!(err.contains("no checkpoint"), "{err}");
        assert!(!claim(&dir, Start::New).unwrap(), "it was there");
        let left = |dir: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            left(&dir),
            [
                "allocations-1.jsonl",
                "events.out.tfevents.1700000000.host",
                "metrics.jsonl",
                "notes.txt"
            ],
            "the temporaries are gone"
        );
        std::fs::write(file("allocations-2.jsonl"), "").unwrap();
        clear_earlier_run(&dir, Some(&file("allocations-2.jsonl"))).unwrap();
        assert_eq!(
            left(&dir),
            ["allocations-2.jsonl", "notes.txt"],
            "only this start's trace and what is not the run's stay"
        );
        std::fs::remove_file(file("allocations-2.jsonl")).unwrap();
        std::fs::write(file("checkpoint.safetensors"), "x").unwrap();
        let err = claim(&dir, Start::New).unwrap_err().to_string();
        assert!(
            err.contains("--resume") && err.contains("--overwrite"),
            "{err}"
        );
        assert!(
            file("checkpoint.safetensors").exists(),
            "never destroyed unasked"
        );
        claim(&dir, Start::Resume).unwrap();
        assert!(file("checkpoint.safetensors").exists());
        assert_eq!(next_trace(&dir).unwrap(), file("allocations-1.jsonl"));
        std::fs::write(file("allocations-1.jsonl"), "").unwrap();
        std::fs::write(file("allocations-10.jsonl"), "").unwrap();
        assert_eq!(
            latest_trace(&dir).unwrap(),
            Some(file("allocations-10.jsonl"))
        );
        assert_eq!(next_trace(&dir).unwrap(), file("allocations-11.jsonl"));
        claim(&dir, Start::Overwrite).unwrap();
        let fresh = dir.join("fresh");
        assert!(claim(&fresh, Start::New).unwrap(), "it was made");
        assert!(fresh.is_dir());
        assert!(
            file("checkpoint.safetensors").exists(),
            "only cleared once built"
        );
        clear_earlier_run(&dir, None).unwrap();
        assert!(!file("checkpoint.safetensors").exists());
        assert_eq!(latest_trace(&dir).unwrap(), None);
        assert!(file("notes.txt").exists());
        std::fs::remove_dir_all(&dir).ok();
    }
}
