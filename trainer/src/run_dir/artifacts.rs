//! What a run leaves in its directory besides its records and checkpoint: `summary.json`, the
//! plots of its records, the allocator's history as a Chrome trace for Perfetto, and the
//! allocation trace flushed to its file.

use std::path::Path;

use headroom_kernels::Device;

use crate::atomic_file::write_atomically;
use crate::error::{Error, Result};
use crate::run_dir::record::Summary;

/// Writes `summary.json`, `loss.svg` and `memory.svg` (with the `plots` feature) and
/// `memory-trace.json` in `dir` (and the host tier's history, where the run has one, as
/// `memory-trace-host.json`), after flushing the allocation trace of `device` (streamed to
/// `trace`).
pub fn write(
    dir: &Path,
    summary: &Summary,
    (device, host): (&Device, Option<&Device>),
    trace: Option<&Path>,
) -> Result<()> {
    flush_trace(device, trace);
    let path = dir.join("summary.json");
    let json = serde_json::to_string_pretty(summary).map_err(|e| Error::io(&path)(e.into()))?;
    write_atomically(&path, json.as_bytes())?;
    #[cfg(feature = "plots")]
    {
        let records = crate::run_dir::metrics::read_all(dir)?;
        crate::run_dir::plots::loss_curve(
            &records,
            &summary.metric_name,
            summary.metric,
            &dir.join("loss.svg"),
        )?;
        crate::run_dir::plots::memory_timeline(
            &records,
            &summary.micro_history,
            &dir.join("memory.svg"),
        )?;
    }
    chrome_trace(&dir.join("memory-trace.json"), device)?;
    match host {
        Some(host) => chrome_trace(&dir.join("memory-trace-host.json"), host),
        None => Ok(()),
    }
}

/// Writes the allocator history of `device` to `path` as a Chrome trace (for Perfetto).
fn chrome_trace(path: &Path, device: &Device) -> Result<()> {
    let file = std::fs::File::create(path).map_err(Error::io(path))?;
    device
        .allocator()
        .with(|a| match a.history() {
            Some(history) => history.write_chrome_trace(std::io::BufWriter::new(file)),
            None => Ok(()),
        })
        .map_err(Error::io(path))
}

/// Flushes the allocation trace `device` streams to `trace`; a failure to write it is a
/// warning, never the end of the run.
pub fn flush_trace(device: &Device, trace: Option<&Path>) {
    if let (Some(path), Err(err)) = (trace, device.allocator().with(|a| a.flush_trace())) {
        tracing::warn!(
            "{}: the allocation trace is incomplete: {err}",
            path.display()
        );
    }
}

/// The allocator history's drops in `device`: how many events, and up to which second.
pub fn history_dropped(device: &Device) -> (u64, Option<f64>) {
    device.allocator().with(|a| match a.history() {
        Some(history) => (
            history.dropped(),
            history.dropped_until_ns().map(|ns| ns as f64 * 1e-9),
        ),
        None => (0, None),
    })
}
