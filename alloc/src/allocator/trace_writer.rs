//! Streaming every allocation and free to a writer, as a replayable trace.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::allocator::trace_settings::TraceSettings;
use crate::bookkeeping::error::{Error, Result};
use crate::bookkeeping::tag::Tag;

/// Writes an allocator's operations as a JSON Lines trace that
/// [`read_trace`](crate::trace::read_trace) reads back and [`replay`](crate::trace::replay)
/// replays, while the program runs.
///
/// Switched on by [`Allocator::stream_trace`](crate::Allocator::stream_trace), it first writes
/// the allocator's settings ([`TraceSettings`]), then `{"op":"alloc","id":N,"size":S,"tag":"T"}`
/// for every successful `allocate` and `try_allocate`, `{"op":"oom","size":S,"tag":"T"}` for
/// every `allocate` that fails with a real out-of-memory (a replay under the same settings fails
/// there too), and `{"op":"free","id":N}` for every successful free of an allocation it wrote.
/// Ids count from 0 and are never reused. Not written: an OOM injected with
/// [`inject_oom`](crate::Allocator::inject_oom) (a replay could not fail there), a
/// `try_allocate` that returns `None`, an allocation that fails for a source fault, allocations
/// made before streaming started and their frees, and calls that change no allocation
/// (`release_cached`, `reset_peak`), so a replay can differ from the run in reserved memory.
///
/// Costs, per operation while on: one hash-map update (address to id) and one formatted line of
/// about 20 to 80 bytes into an 8 KiB buffer. The map holds one entry per live allocation written.
///
/// An I/O error never fails an allocation: the writer keeps the first error, stops writing, and
/// reports it from [`flush`](Self::flush) and [`finish`](Self::finish). Dropped unfinished, it
/// writes out its buffer and any error is lost.
///
/// A replay starts from an empty allocator, so it matches the run when streaming starts on a
/// fresh allocator: regions reserved before, and their sizes, are not in the trace.
pub struct TraceWriter {
    out: BufWriter<Box<dyn Write + Send>>,
    /// The id the next allocation gets.
    next_id: u64,
    /// The id of every live allocation written, by address.
    live: HashMap<u64, u64>,
    /// Operations written, the failed requests among them (not the settings).
    written: u64,
    /// The first write error; nothing is written after it.
    error: Option<io::Error>,
}

impl fmt::Debug for TraceWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceWriter")
            .field("written", &self.written)
            .field("live", &self.live.len())
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl TraceWriter {
    /// A trace writer into `out`, buffered.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        Self::from_boxed(Box::new(out))
    }

    /// Like [`new`](Self::new), for a writer already boxed.
    pub fn from_boxed(out: Box<dyn Write + Send>) -> Self {
        Self {
            out: BufWriter::new(out),
            next_id: 0,
            live: HashMap::new(),
            written: 0,
            error: None,
        }
    }

    /// A trace writer into a new file at `path` (truncated if it exists).
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Self::new(file))
    }

    /// Operations written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The first write error, after which nothing more was written.
    pub fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }

    /// Writes the settings of the allocator the trace is streamed from, as its first line.
    pub(crate) fn settings(&mut self, settings: &TraceSettings) {
        if self.error.is_some() {
            return;
        }
        let written = serde_json::to_writer(&mut self.out, settings)
            .map_err(io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"));
        if let Err(err) = written {
            self.error = Some(err);
        }
    }

    /// Writes an allocation of `size` bytes under `tag` that got `addr`, or a request that
    /// failed with an out-of-memory (`None`).
    pub(crate) fn alloc(&mut self, addr: Option<u64>, size: u64, tag: Tag) {
        let Some(addr) = addr else {
            return self.write(|out| {
                write!(out, "{{\"op\":\"oom\",\"size\":{size},\"tag\":")?;
                serde_json::to_writer(&mut *out, tag.name())?;
                out.write_all(b"}\n")
            });
        };
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(addr, id);
        self.write(|out| {
            write!(
                out,
                "{{\"op\":\"alloc\",\"id\":{id},\"size\":{size},\"tag\":"
            )?;
            serde_json::to_writer(&mut *out, tag.name())?;
            out.write_all(b"}\n")
        });
    }

    /// Writes the free of the allocation at `addr`, if it was written.
    pub(crate) fn free(&mut self, addr: u64) {
        if let Some(id) = self.live.remove(&addr) {
            self.write(|out| writeln!(out, "{{\"op\":\"free\",\"id\":{id}}}"));
        }
    }

    /// Runs `line` on the output unless an earlier write failed; keeps its error.
    fn write(
        &mut self,
        line: impl FnOnce(&mut BufWriter<Box<dyn Write + Send>>) -> io::Result<()>,
    ) {
        if self.error.is_some() {
            return;
        }
        self.written += 1;
        if let Err(err) = line(&mut self.out) {
            self.error = Some(err);
        }
    }

    /// The first error, as one that says writing stopped there.
    fn stopped(&self) -> Option<io::Error> {
        self.error.as_ref().map(|err| {
            io::Error::new(
                err.kind(),
                format!(
                    "the allocation trace stopped after {} operations: {err}",
                    self.written
                ),
            )
        })
    }

    /// Writes out the buffer. Fails with the first write error, which stopped the trace there,
    /// every time it is called after one.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.error.is_none()
            && let Err(err) = self.out.flush()
        {
            self.error = Some(err);
        }
        self.stopped().map_or(Ok(()), Err)
    }

    /// Flushes and closes the trace; fails as [`flush`](Self::flush) does.
    pub fn finish(mut self) -> io::Result<()> {
        self.flush()
    }
}
