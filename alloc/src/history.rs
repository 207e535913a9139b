//! An optional, bounded recorder of allocator events, exportable for Perfetto.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::tag::Tag;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A successful allocation.
    Alloc,
    /// A successful free.
    Free,
    /// A failed allocation.
    Oom,
    /// A region reserved from the source.
    RegionReserve,
    /// A region given back to the source.
    RegionRelease,
}

/// One recorded event, with the totals right after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Nanoseconds since the recorder started (monotonic clock).
    pub time_ns: u64,
    /// What happened.
    pub kind: EventKind,
    /// The chunk or region address (0 for an OOM).
    pub addr: u64,
    /// The chunk or region size (the rounded size for an OOM).
    pub size: u64,
    /// The size the caller asked for (0 for region events).
    pub requested: u64,
    /// The allocation's tag (none for region events).
    pub tag: Option<Tag>,
    /// Bytes in use after the event.
    pub in_use: u64,
    /// Bytes reserved after the event.
    pub reserved: u64,
    /// Live bytes of `tag` after the event (0 without a tag).
    pub tag_live: u64,
}

/// A ring buffer of the most recent events.
#[derive(Debug, Clone)]
pub struct History {
    capacity: usize,
    events: VecDeque<Event>,
    /// Events pushed out of the ring by newer ones.
    dropped: u64,
    start: Instant,
}

impl History {
    /// A recorder that keeps the last `capacity` events.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            events: VecDeque::with_capacity(capacity.min(1 << 16)),
            dropped: 0,
            start: Instant::now(),
        }
    }

    /// Nanoseconds since the recorder started.
    pub(crate) fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Appends an event, evicting the oldest when full.
    pub(crate) fn push(&mut self, event: Event) {
        if self.capacity == 0 {
            return;
        }
        if self.events.len() == self.capacity {
            self.events.pop_front();
            self.dropped += 1;
        }
        self.events.push_back(event);
    }

    /// The kept events, oldest first.
    pub fn events(&self) -> impl ExactSizeIterator<Item = &Event> {
        self.events.iter()
    }

    /// Events evicted because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Writes one JSON object per event per line.
    pub fn write_json_lines(&self, mut out: impl Write) -> io::Result<()> {
        for event in &self.events {
            serde_json::to_writer(&mut out, event)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Writes Chrome trace-event JSON (opens in Perfetto and `chrome://tracing`): counter tracks
    /// for bytes in use, bytes reserved and live bytes per tag, and instant events for OOMs.
    pub fn write_chrome_trace(&self, mut out: impl Write) -> io::Result<()> {
        out.write_all(b"{\"traceEvents\":[\n")?;
        let mut first = true;
        let mut emit = |out: &mut dyn Write, value: serde_json::Value| -> io::Result<()> {
            if !first {
                out.write_all(b",\n")?;
            }
            first = false;
            serde_json::to_writer(out, &value).map_err(io::Error::other)
        };
        for event in &self.events {
            let ts = event.time_ns as f64 / 1000.0;
            let counter = |name: &str, bytes: u64| {
                serde_json::json!({"name": name, "ph": "C", "ts": ts, "pid": 1, "tid": 1,
                                   "args": {"bytes": bytes}})
            };
            emit(&mut out, counter("in use", event.in_use))?;
            emit(&mut out, counter("reserved", event.reserved))?;
            if let Some(tag) = event.tag {
                emit(&mut out, counter(&format!("tag {tag}"), event.tag_live))?;
            }
            if event.kind == EventKind::Oom {
                emit(
                    &mut out,
                    serde_json::json!({"name": "out of memory", "ph": "i", "s": "g", "ts": ts,
                                       "pid": 1, "tid": 1,
                                       "args": {"requested": event.requested,
                                                "tag": event.tag.map(Tag::name)}}),
                )?;
            }
        }
        out.write_all(b"\n],\"displayTimeUnit\":\"ns\"}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, in_use: u64) -> Event {
        Event {
            time_ns: in_use,
            kind,
            addr: 0x100,
            size: 256,
            requested: 200,
            tag: Some(Tag::ACTIVATIONS),
            in_use,
            reserved: 4096,
            tag_live: in_use,
        }
    }

    #[test]
    fn ring_keeps_the_newest_events() {
        let mut history = History::new(2);
        for i in 0..5 {
            history.push(event(EventKind::Alloc, i));
        }
        let kept: Vec<u64> = history.events().map(|e| e.in_use).collect();
        assert_eq!(kept, [3, 4]);
        assert_eq!(history.dropped(), 3);
    }

    #[test]
    fn exports_parse_back() {
        let mut history = History::new(8);
        history.push(event(EventKind::Alloc, 256));
        history.push(event(EventKind::Oom, 256));
        let mut lines = Vec::new();
        history.write_json_lines(&mut lines).unwrap();
        let parsed: Vec<Event> = String::from_utf8(lines)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(parsed, history.events().copied().collect::<Vec<_>>());

        let mut trace = Vec::new();
        history.write_chrome_trace(&mut trace).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&trace).unwrap();
        let events = value["traceEvents"].as_array().unwrap();
        // Two events, three counters each, and one instant for the OOM.
        assert_eq!(events.len(), 7);
        assert!(events.iter().any(|e| e["name"] == "tag activations"));
        assert!(events.iter().any(|e| e["ph"] == "i"));
    }
}
