//! An optional, bounded recorder of allocator events, exportable for Perfetto.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::bookkeeping::tag::Tag;

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

/// A ring buffer of the most recent events, which never loses an out-of-memory.
///
/// When the ring is full, each new event evicts the oldest. An evicted OOM is kept aside, ahead
/// of the ring, so [`events`](Self::events) still yields every OOM ever recorded (each costs
/// about 80 bytes, without bound). Any other evicted event is dropped: [`dropped`](Self::dropped)
/// counts them and [`dropped_until_ns`](Self::dropped_until_ns) tells the time of the newest, so
/// the events dropped cover the recorder's start to that time.
#[derive(Debug, Clone)]
pub struct History {
    capacity: usize,
    /// The OOMs evicted from the ring (its first `kept_ooms` events, oldest first, all older
    /// than the rest), then the ring itself: at most `capacity` events, oldest first.
    events: VecDeque<Event>,
    /// How many events at the front of `events` are OOMs evicted from the ring.
    kept_ooms: usize,
    /// Events pushed out of the ring by newer ones and not kept.
    dropped: u64,
    /// `time_ns` of the newest dropped event.
    dropped_until_ns: Option<u64>,
    start: Instant,
}

/// The `name` of the Chrome trace's instant event that marks dropped events.
fn dropped_name(dropped: u64) -> String {
    format!("{dropped} earlier events dropped")
}

impl History {
    /// A recorder that keeps the last `capacity` events, and every OOM.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            events: VecDeque::with_capacity(capacity.min(1 << 16)),
            kept_ooms: 0,
            dropped: 0,
            dropped_until_ns: None,
            start: Instant::now(),
        }
    }

    /// Nanoseconds since the recorder started.
    pub(crate) fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Appends an event, evicting the oldest of the ring when it is full: an OOM is kept aside,
    /// anything else dropped.
    pub(crate) fn push(&mut self, event: Event) {
        if self.capacity == 0 {
            return;
        }
        if self.events.len() - self.kept_ooms == self.capacity {
            let oldest = self.events[self.kept_ooms];
            if oldest.kind == EventKind::Oom {
                // It stays where it is, now ahead of the ring.
                self.kept_ooms += 1;
            } else {
                // Shifts the shorter side: the kept OOMs or the ring.
                self.events.remove(self.kept_ooms);
                self.dropped += 1;
                self.dropped_until_ns = Some(oldest.time_ns);
            }
        }
        self.events.push_back(event);
    }

    /// Every kept event, oldest first: the OOMs evicted from the ring, then the ring.
    pub fn events(&self) -> impl ExactSizeIterator<Item = &Event> {
        self.events.iter()
    }

    /// Events evicted because the ring was full, and not kept (every event but an OOM).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The time (`time_ns`) of the newest dropped event: the dropped events happened between
    /// the recorder's start and then. `None` when nothing was dropped.
    pub fn dropped_until_ns(&self) -> Option<u64> {
        self.dropped_until_ns
    }

    /// How many events the ring keeps (OOMs evicted from it are kept besides).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The summary of what was dropped, `{"dropped_events": N, "dropped_until_ns": T}` (T is
    /// null when nothing was).
    fn dropped_summary(&self) -> serde_json::Value {
        serde_json::json!({"dropped_events": self.dropped,
                           "dropped_until_ns": self.dropped_until_ns})
    }

    /// Writes one JSON object per event per line, oldest first. When events were dropped, the
    /// first line is instead `{"dropped_events": N, "dropped_until_ns": T}`, which a reader
    /// tells from an event by its keys; without drops, every line is an [`Event`].
    pub fn write_json_lines(&self, mut out: impl Write) -> io::Result<()> {
        if self.dropped > 0 {
            serde_json::to_writer(&mut out, &self.dropped_summary())?;
            out.write_all(b"\n")?;
        }
        for event in &self.events {
            serde_json::to_writer(&mut out, event)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Writes Chrome trace-event JSON (opens in Perfetto and `chrome://tracing`): counter tracks
    /// for bytes in use, bytes reserved and live bytes per tag, and instant events for OOMs.
    ///
    /// What was dropped is said twice: in the top-level `"otherData": {"dropped_events": N,
    /// "dropped_until_ns": T}` (Perfetto shows it as the trace's metadata), and, when N > 0, by a
    /// first instant event named "N earlier events dropped" at time T, whose arguments give the
    /// count and the range (`from_ns` 0 to `until_ns` T).
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
        if let Some(until_ns) = self.dropped_until_ns.filter(|_| self.dropped > 0) {
            emit(
                &mut out,
                serde_json::json!({"name": dropped_name(self.dropped), "ph": "i", "s": "g",
                                   "ts": until_ns as f64 / 1000.0, "pid": 1, "tid": 1,
                                   "args": {"dropped_events": self.dropped, "from_ns": 0,
                                            "until_ns": until_ns}}),
            )?;
        }
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
        out.write_all(b"\n],\"displayTimeUnit\":\"ns\",\"otherData\":")?;
        serde_json::to_writer(&mut out, &self.dropped_summary())?;
        out.write_all(b"}\n")
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

    #[test]
    fn evicted_ooms_are_kept_in_order_and_the_newest_drop_is_timed() {
        let mut history = History::new(2);
        assert_eq!(history.dropped_until_ns(), None);
        let kinds = [
            EventKind::Alloc,
            EventKind::Oom,
            EventKind::Alloc,
            EventKind::Oom,
            EventKind::Alloc,
            EventKind::Free,
            EventKind::Alloc,
        ];
        for (time, kind) in (1..).zip(kinds) {
            history.push(event(kind, time));
        }
        let kept: Vec<(u64, EventKind)> = history.events().map(|e| (e.time_ns, e.kind)).collect();
        assert_eq!(
            kept,
            [
                (2, EventKind::Oom),
                (4, EventKind::Oom),
                (6, EventKind::Free),
                (7, EventKind::Alloc)
            ]
        );
        assert_eq!(history.events().len(), 4);
        assert_eq!(
            (history.dropped(), history.dropped_until_ns()),
            (3, Some(5))
        );
        // The ring still holds its capacity of the newest events.
        history.push(event(EventKind::Alloc, 8));
        let times: Vec<u64> = history.events().map(|e| e.time_ns).collect();
        assert_eq!(times, [2, 4, 7, 8]);
        assert_eq!(
            (history.dropped(), history.dropped_until_ns()),
            (4, Some(6))
        );
    }

    #[test]
    fn exports_say_how_many_events_were_dropped_and_until_when() {
        let mut history = History::new(1);
        for time in [1000, 2000, 3000] {
            history.push(event(EventKind::Alloc, time));
        }
        let mut lines = Vec::new();
        history.write_json_lines(&mut lines).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(lines)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            serde_json::json!({"dropped_events": 2, "dropped_until_ns": 2000})
        );
        let kept: Event = serde_json::from_value(lines[1].clone()).unwrap();
        assert_eq!(kept.time_ns, 3000);

        let mut trace = Vec::new();
        history.write_chrome_trace(&mut trace).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&trace).unwrap();
        assert_eq!(value["otherData"]["dropped_events"], 2);
        assert_eq!(value["otherData"]["dropped_until_ns"], 2000);
        let first = &value["traceEvents"][0];
        assert_eq!(first["name"], "2 earlier events dropped");
        assert_eq!(
            (first["ph"].as_str(), first["ts"].as_f64()),
            (Some("i"), Some(2.0))
        );
        assert_eq!(first["args"]["from_ns"], 0);
        assert_eq!(first["args"]["until_ns"], 2000);
        assert_eq!(first["args"]["dropped_events"], 2);

        // Nothing dropped: no marker, and the metadata says so.
        let mut whole = History::new(8);
        whole.push(event(EventKind::Alloc, 1));
        let mut trace = Vec::new();
        whole.write_chrome_trace(&mut trace).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&trace).unwrap();
        assert_eq!(value["otherData"]["dropped_events"], 0);
        assert!(value["otherData"]["dropped_until_ns"].is_null());
        assert_eq!(value["traceEvents"][0]["name"], "in use");
    }
}
