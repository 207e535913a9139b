//! The run's TensorBoard event files, beside `metrics.jsonl`: each step's record as scalars
//! (`train/loss`, `train/lr`, `memory/peak`, ...), and each held-out evaluation, so that
//! `tensorboard --logdir runs/` shows each run directory as one run.
//!
//! Each process that works on a run writes a file of its own, `events.out.tfevents.<seconds>.
//! <host>`, and never touches an earlier one. A resumed run's file starts with a restart marker
//! at the step after its checkpoint's: TensorBoard drops what earlier files hold from that step
//! on, as the resume drops those records from `metrics.jsonl`. Each event is written whole in
//! one system call, so a process killed at any moment leaves at most its last record torn,
//! which TensorBoard's reader passes over.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::run_dir::event_file::{What, event_record};
use crate::run_dir::record::StepRecord;

/// What every event file's name starts with.
const EVENT_FILE_PREFIX: &str = "events.out.tfevents.";

/// The event file a process appends to.
pub struct EventLog {
    path: PathBuf,
    file: File,
    /// The held-out metric's name as its tag takes it, `eval/<name>`: `loss`, `accuracy` or
    /// `exact_match`.
    metric_name: String,
}

impl EventLog {
    /// A new event file in `dir` for a run whose held-out metric is `metric_name`. A run
    /// resumed from its checkpoint at step `resumed_from` marks the step after it as a restart.
    pub fn create(dir: &Path, resumed_from: Option<u64>, metric_name: &str) -> Result<Self> {
        let now = wall_time();
        let (path, file) = new_file(dir, now as u64)?;
        let mut log = Self {
            path,
            file,
            metric_name: metric_name.replace(' ', "_"),
        };
        log.write(event_record(now, 0, What::FileVersion))?;
        if let Some(step) = resumed_from {
            log.write(event_record(now, step + 1, What::Restart))?;
        }
        Ok(log)
    }

    /// Appends `record`'s scalars as one event at its step.
    pub fn append(&mut self, record: &StepRecord) -> Result<()> {
        let scalars = scalars(record, &self.metric_name);
        self.write(event_record(
            wall_time(),
            record.step,
            What::Scalars(&scalars),
        ))
    }

    /// Appends a held-out evaluation made after `step`.
    pub fn evaluation(&mut self, step: u64, metric: f64) -> Result<()> {
        let scalars = [(format!("eval/{}", self.metric_name), metric as f32)];
        self.write(event_record(wall_time(), step, What::Scalars(&scalars)))
    }

    fn write(&mut self, record: Vec<u8>) -> Result<()> {
        self.file.write_all(&record).map_err(Error::io(&self.path))
    }
}

/// The scalars of one step, by tag: the training values under `train/`, memory under
/// `memory/` (in MiB; each allocator tag's peak under `memory/tags/`), and the held-out
/// metric, where the step has one, as `eval/<metric_name>`.
fn scalars(record: &StepRecord, metric_name: &str) -> Vec<(String, f32)> {
    let mut out: Vec<(String, f32)> = [
        ("train/loss", record.loss),
        ("train/lr", record.lr),
        ("train/grad_norm", record.grad_norm),
        ("train/loss_scale", record.loss_scale),
        ("train/samples_per_second", record.samples_per_s),
        ("train/tokens_per_second", record.tokens_per_s),
        ("train/epoch", record.epoch as f64),
        ("train/ooms_recovered", record.ooms.len() as f64),
    ]
    .into_iter()
    .map(|(tag, value)| (tag.to_owned(), value as f32))
    .collect();
    // The step's largest micro-batch: the size it ran at, where its last one holds the rest.
    if let Some(&micro) = record.micro_sizes.iter().max() {
        out.push(("train/micro_batch".to_owned(), micro as f32));
    }
    out.push(("memory/in_use".to_owned(), mib(record.in_use)));
    out.push(("memory/peak".to_owned(), mib(record.peak)));
    if let Some(host) = record.host_peak {
        out.push(("memory/host_peak".to_owned(), mib(host)));
    }
    for tag in &record.tags {
        out.push((format!("memory/tags/{}", tag.tag), mib(tag.peak)));
    }
    if let Some(metric) = record.metric {
        out.push((format!("eval/{metric_name}"), metric as f32));
    }
    out
}

/// Whether `name` is an event file's.
pub fn is_event_file(name: &str) -> bool {
    name.starts_with(EVENT_FILE_PREFIX)
}

fn mib(bytes: u64) -> f32 {
    (bytes as f64 / (1u64 << 20) as f64) as f32
}

/// Seconds since the Unix epoch.
fn wall_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// A new file `events.out.tfevents.<seconds>.<host>` in `dir`, with a suffix of three digits
/// if other processes took that name in the same second: TensorBoard reads a directory's files
/// in the order of their names, which is the order they were made.
fn new_file(dir: &Path, seconds: u64) -> Result<(PathBuf, File)> {
    let name = format!("{EVENT_FILE_PREFIX}{seconds:010}.{}", host_name());
    for n in 0..1000 {
        let path = match n {
            0 => dir.join(&name),
            n => dir.join(format!("{name}.{n:03}")),
        };
        match OpenOptions::new().append(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(Error::io(&path)(err)),
        }
    }
    Err(Error::io(dir.join(name))(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        "a thousand event files of this second are there already",
    )))
}

/// The machine's name, as it may stand in a file name; `localhost` where it has none.
fn host_name() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: the pointer and length describe `buffer`, which outlives the call; gethostname
    // writes at most that many bytes.
    let status = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    let name: String = String::from_utf8_lossy(&buffer[..end])
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    if status != 0 || name.is_empty() {
        "localhost".to_owned()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_the_same_second_get_names_of_their_own_that_sort_in_order() {
        let dir = std::env::temp_dir().join(format!("headroom-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let names: Vec<PathBuf> = (0..12).map(|_| new_file(&dir, 42).unwrap().0).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(names.iter().all(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            is_event_file(name) && name.contains(".0000000042.")
        }));
        std::fs::remove_dir_all(&dir).ok();
    }
}
