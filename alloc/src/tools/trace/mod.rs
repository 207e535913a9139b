//! Allocation traces: the JSON Lines format, streaming one from a running allocator, replaying a
//! trace, finding the smallest limit it fits in, and generating realistic ones.
//!
//! The generators (`TransformerTrace`, `LogNormalTrace`) and their random number generator
//! (`SplitMix64`) are test tooling, public with the `testing` feature only; the `cli` feature
//! compiles them privately for its `generate` and `replay --builtin` commands.
//!
//! The writer and the settings line it starts with belong to the allocator, which streams them
//! (`allocator::trace_writer`, `allocator::trace_settings`); this module re-exports them beside
//! the reader, the replay, the limit search and the generators.
//!
//! A trace is one operation per line, after a first line that may give the settings of the
//! allocator it was recorded from ([`TraceSettings`]):
//!
//! ```text
//! {"op":"allocator","limit":25165824,"growth":"on-demand","growth_step":4096,"max_internal_fragmentation":256,"garbage_collection":true}
//! {"op":"alloc","id":7,"size":4096,"tag":"activations"}
//! {"op":"oom","size":8388608,"tag":"activations"}
//! {"op":"free","id":7}
//! ```

#[cfg(any(feature = "cli", feature = "testing"))]
pub(crate) mod generate;
mod limit;
mod replay;
#[cfg(any(feature = "cli", feature = "testing"))]
mod rng;

pub use crate::allocator::trace_settings::{TraceSettings, growth_name};
pub use crate::allocator::trace_writer::TraceWriter;
#[cfg(feature = "testing")]
pub use generate::{LogNormalTrace, TransformerTrace};
pub use limit::{
    FailureBelow, LimitSearch, MAX_SEARCHED_LIMIT, find_limit, find_limit_with_growth_step,
};
pub use replay::{OomEvent, ReplayReport, replay, replay_with_growth_step};
#[cfg(feature = "testing")]
pub use rng::SplitMix64;

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bookkeeping::error::{Error, Result};
use crate::bookkeeping::tag::Tag;

/// One operation of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum TraceOp {
    /// Allocate `size` bytes under the caller's `id`.
    Alloc {
        /// The caller's name for this allocation, unique while it lives.
        id: u64,
        /// Bytes requested.
        size: u64,
        /// What it holds (`other` when absent).
        #[serde(default)]
        tag: Tag,
    },
    /// Free the allocation made under `id`.
    Free {
        /// The id given at allocation.
        id: u64,
    },
    /// A request of `size` bytes that failed with an out-of-memory when the trace was
    /// recorded: it held no memory, and nothing frees it.
    Oom {
        /// Bytes requested.
        size: u64,
        /// What it was for (`other` when absent).
        #[serde(default)]
        tag: Tag,
    },
}

/// An operation of a trace with the number that a replay's errors and OOMs name it by: its line
/// in the file it was read from, or its one-based index in a list.
pub trait NumberedOp {
    /// The operation.
    fn op(&self) -> TraceOp;
    /// Its number, given its zero-based `index` in the list being replayed.
    fn number(&self, index: usize) -> usize;
}

/// A bare operation is known by its one-based index.
impl NumberedOp for TraceOp {
    fn op(&self) -> TraceOp {
        *self
    }
    fn number(&self, index: usize) -> usize {
        index + 1
    }
}

/// An operation read from a file, known by its line ([`read_trace_lines`]).
impl NumberedOp for (usize, TraceOp) {
    fn op(&self) -> TraceOp {
        self.1
    }
    fn number(&self, _index: usize) -> usize {
        self.0
    }
}

/// Reads a JSON Lines trace; blank lines and the allocator's settings are skipped, and a bad
/// line is an error naming it.
pub fn read_trace(reader: impl BufRead) -> Result<Vec<TraceOp>> {
    Ok(read_trace_lines(reader)?
        .into_iter()
        .map(|(_, op)| op)
        .collect())
}

/// Reads a JSON Lines trace, keeping the one-based line number of each operation, so that a
/// replay names lines of the file (blank lines make them differ from operation indices). The
/// allocator's settings, if the trace gives them, are skipped ([`read_trace_with_settings`]).
pub fn read_trace_lines(reader: impl BufRead) -> Result<Vec<(usize, TraceOp)>> {
    Ok(read_trace_with_settings(reader)?.1)
}

/// A trace read with its one-based line numbers, and the settings of the allocator it was
/// recorded from when its first line gives them.
pub type NumberedTrace = (Option<TraceSettings>, Vec<(usize, TraceOp)>);

/// Reads a JSON Lines trace as [`read_trace_lines`] does, and the settings of the allocator it
/// was recorded from, which only its first line may give.
pub fn read_trace_with_settings(reader: impl BufRead) -> Result<NumberedTrace> {
    let mut ops = Vec::new();
    let mut settings = None;
    for (index, line) in reader.lines().enumerate() {
        let line_number = index + 1;
        let bad = |message: String| Error::Trace {
            path: None,
            line: line_number,
            message,
        };
        let line = line.map_err(|err| bad(format!("cannot read: {err}")))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(&line) {
            Ok(op) => ops.push((line_number, op)),
            Err(err) => match serde_json::from_str::<TraceSettings>(&line) {
                Ok(_) if !ops.is_empty() || settings.is_some() => {
                    return Err(bad(
                        "the allocator's settings may only be given on the first line".into(),
                    ));
                }
                Ok(given) => settings = Some(given),
                Err(_) => return Err(bad(format!("{err} in {line:?}"))),
            },
        }
    }
    Ok((settings, ops))
}

/// Reads the trace file at `path` with [`read_trace_lines`]; its errors name the file.
pub fn read_trace_file(path: &Path) -> Result<Vec<(usize, TraceOp)>> {
    Ok(read_trace_file_with_settings(path)?.1)
}

/// Reads the trace file at `path` with [`read_trace_with_settings`]; its errors name the file.
pub fn read_trace_file_with_settings(path: &Path) -> Result<NumberedTrace> {
    let file = File::open(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    read_trace_with_settings(BufReader::new(file)).map_err(|err| err.in_trace_file(path))
}

/// Writes a trace as JSON Lines.
pub fn write_trace(ops: &[TraceOp], mut out: impl Write) -> std::io::Result<()> {
    for op in ops {
        serde_json::to_writer(&mut out, op)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_round_trip_through_json_lines() {
        let ops = vec![
            TraceOp::Alloc {
                id: 7,
                size: 4096,
                tag: Tag::ACTIVATIONS,
            },
            TraceOp::Free { id: 7 },
        ];
        let mut text = Vec::new();
        write_trace(&ops, &mut text).unwrap();
        assert_eq!(
            String::from_utf8(text.clone()).unwrap(),
            "{\"op\":\"alloc\",\"id\":7,\"size\":4096,\"tag\":\"activations\"}\n\
             {\"op\":\"free\",\"id\":7}\n"
        );
        assert_eq!(read_trace(&text[..]).unwrap(), ops);
    }

    #[test]
    fn bad_lines_are_reported_with_their_number() {
        let text = "{\"op\":\"alloc\",\"id\":1,\"size\":10}\n\n{\"op\":\"resize\",\"id\":1}\n";
        match read_trace(text.as_bytes()) {
            Err(Error::Trace { line, message, .. }) => {
                assert_eq!(line, 3);
                assert!(message.contains("resize"), "{message}");
            }
            other => panic!("expected a trace error, got {other:?}"),
        }
        let missing_tag = read_trace("{\"op\":\"alloc\",\"id\":1,\"size\":10}".as_bytes()).unwrap();
        assert!(matches!(
            missing_tag[0],
            TraceOp::Alloc {
                tag: Tag::OTHER,
                ..
            }
        ));
    }
}
