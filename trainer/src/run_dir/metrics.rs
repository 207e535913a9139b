//! `metrics.jsonl`, one line per step. Each line is written whole in one system call, so a run
//! killed at any moment leaves at most its last line torn. Reading drops a torn last line (one
//! without its newline) with a warning; any other line that does not parse is an error naming
//! it. A resumed run first cuts the file back to its checkpoint's step, so that the steps it
//! does again are recorded once.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::run_dir::record::StepRecord;

/// The file's name in a run directory.
pub const METRICS_FILE: &str = "metrics.jsonl";

/// The log a run appends its records to.
pub struct MetricsLog {
    path: PathBuf,
    file: File,
}

impl MetricsLog {
    /// A new, empty log in `dir`, replacing any earlier one.
    pub fn create(dir: &Path) -> Result<Self> {
        let path = dir.join(METRICS_FILE);
        File::create(&path).map_err(Error::io(&path))?;
        Self::open(path)
    }

    /// The log of a run resumed from its checkpoint at `step`: the records of steps up to
    /// `step` are kept, later ones (done again by the resumed run) and a torn last line are
    /// dropped. The file is rewritten atomically, through a temporary file and a rename.
    pub fn resume(dir: &Path, step: u64) -> Result<Self> {
        let path = dir.join(METRICS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(err) => return Err(Error::io(&path)(err)),
        };
        let lines = parse(&path, &text)?;
        let kept: Vec<&(StepRecord, &str)> = lines.iter().filter(|(r, _)| r.step <= step).collect();
        let dropped = lines.len() - kept.len();
        if dropped > 0 {
            tracing::info!(
                "{}: {dropped} records after the checkpoint's step {step} dropped; those steps \
                 run again",
                path.display()
            );
        }
        let steps_in_order = kept
            .iter()
            .enumerate()
            .all(|(i, (r, _))| r.step == i as u64 + 1);
        if !steps_in_order || kept.len() as u64 != step {
            tracing::warn!(
                "{}: holds {} records for the checkpoint's {step} steps; the plots and metrics \
                 of the missing steps are lost",
                path.display(),
                kept.len()
            );
        }
        let text: String = kept.iter().map(|(_, line)| format!("{line}\n")).collect();
        crate::atomic_file::write_atomically(&path, text.as_bytes())?;
        Self::open(path)
    }

    fn open(path: PathBuf) -> Result<Self> {
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(Error::io(&path))?;
        Ok(Self { path, file })
    }

    /// Appends `record` as one line, in one write.
    pub fn append(&mut self, record: &StepRecord) -> Result<()> {
        let mut line = serde_json::to_vec(record).map_err(|e| Error::io(&self.path)(e.into()))?;
        line.push(b'\n');
        self.file.write_all(&line).map_err(Error::io(&self.path))
    }
}

/// Every record of a run directory, in order; a torn last line is dropped with a warning.
pub fn read_all(dir: &Path) -> Result<Vec<StepRecord>> {
    let path = dir.join(METRICS_FILE);
    let text = std::fs::read_to_string(&path).map_err(Error::io(&path))?;
    Ok(parse(&path, &text)?.into_iter().map(|(r, _)| r).collect())
}

/// The records of `text` with their lines; a last line without its newline is torn, and
/// dropped with a warning.
fn parse<'t>(path: &Path, text: &'t str) -> Result<Vec<(StepRecord, &'t str)>> {
    let (whole, torn) = match text.rfind('\n') {
        Some(end) => text.split_at(end + 1),
        None => ("", text),
    };
    if !torn.is_empty() {
        tracing::warn!(
            "{}: its last line was cut short (the run was stopped while writing it); dropped",
            path.display()
        );
    }
    whole
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let record = serde_json::from_str(line).map_err(|err| Error::Data {
                path: path.to_owned(),
                detail: format!("line {}: {err}", i + 1),
            })?;
            Ok((record, line))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u64, loss: f64) -> StepRecord {
        StepRecord::sample(step, loss)
    }

    #[test]
    fn a_resume_cuts_back_to_its_checkpoint_and_drops_a_torn_last_line() {
        let dir = std::env::temp_dir().join(format!("headroom-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut log = MetricsLog::create(&dir).unwrap();
        for step in 1..=5 {
            log.append(&record(step, if step == 2 { f64::NAN } else { 0.5 }))
                .unwrap();
        }
        let path = dir.join(METRICS_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"step\":6,\"epo");
        std::fs::write(&path, &text).unwrap();
        let read = read_all(&dir).unwrap();
        assert_eq!(read.len(), 5, "the torn line is dropped");
        assert!(read[1].loss.is_nan() && read[1].grad_norm.is_infinite());
        let mut log = MetricsLog::resume(&dir, 3).unwrap();
        log.append(&record(4, 0.25)).unwrap();
        let steps: Vec<u64> = read_all(&dir).unwrap().iter().map(|r| r.step).collect();
        assert_eq!(steps, [1, 2, 3, 4], "each step once");
        assert_eq!(read_all(&dir).unwrap()[3].loss, 0.25);
        // A bad line that is not the last is an error naming it.
        std::fs::write(&path, "{\"step\":1}\n{}\n").unwrap();
        let err = read_all(&dir).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
