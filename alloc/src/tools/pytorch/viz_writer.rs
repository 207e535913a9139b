//! An allocator's history written as a PyTorch memory snapshot, the pickle
//! `torch.cuda.memory._dump_snapshot` writes, so that `pytorch.org/memory_viz` and
//! `python -m torch.cuda._memory_viz` draw a Headroom run as they draw a PyTorch one.
//!
//! The rule: an allocation is an `alloc` of its chunk; a free is a `free_requested` and at once
//! a `free_completed` (the allocator holds no block back for other streams); a region reserved
//! is a `segment_alloc`, or a `segment_map` where it extends a region in place; a region given
//! back is a `segment_free`, or a `segment_unmap` where part of a region goes; a failed request
//! is an `oom` of the bytes asked for, with the bytes under the limit not reserved as the
//! device's free memory. An allocation's tag is its category (the profiler's names for the
//! built-in kinds) and its one frame. The segments written with the trace are those its events
//! leave, with their blocks; a block allocated before the history's oldest kept event is not
//! among them.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use super::category;
use super::pickler::Pickler;
use crate::bookkeeping::history::{Event, EventKind, History};
use crate::bookkeeping::tag::Tag;

/// How many events of each action an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportCounts {
    /// `alloc` events.
    pub allocs: usize,
    /// Frees, each a `free_requested` and a `free_completed`.
    pub frees: usize,
    /// `segment_alloc`, `segment_map`, `segment_free` and `segment_unmap` events.
    pub segment_events: usize,
    /// `oom` events.
    pub ooms: usize,
    /// Segments held at the end.
    pub segments: usize,
}

impl ExportCounts {
    /// Events in the snapshot's trace.
    pub fn events(&self) -> usize {
        self.allocs + 2 * self.frees + self.segment_events + self.ooms
    }
}

impl std::fmt::Display for ExportCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} events, {} blocks allocated, segments held at the end: {}",
            self.events(),
            self.allocs,
            self.segments
        )
    }
}
/// Writes `history`, recorded by an allocator limited to `limit` bytes, as a PyTorch memory
/// snapshot of one device, and says what it wrote.
pub fn write_memory_viz(
    history: &History,
    limit: u64,
    out: impl Write,
) -> io::Result<ExportCounts> {
    write_devices_memory_viz(&[Some((history, limit))], out)
}

/// Writes a PyTorch memory snapshot of several devices, each device's index its place in
/// `devices`: its history and its allocator's limit, or none for a device without a trace.
pub fn write_devices_memory_viz(
    devices: &[Option<(&History, u64)>],
    out: impl Write,
) -> io::Result<ExportCounts> {
    let mut writer = SnapshotWriter {
        pickle: Pickler::new(io::BufWriter::new(out))?,
        frames: HashMap::new(),
        no_frames: None,
        segments: BTreeMap::new(),
        blocks: BTreeMap::new(),
        held_at_end: Vec::new(),
        counts: ExportCounts::default(),
    };
    writer.pickle.begin_dict()?;
    writer.pickle.str("device_traces")?;
    writer.pickle.begin_list()?;
    for (device, recorded) in devices.iter().enumerate() {
        writer.pickle.begin_list()?;
        if let Some((history, limit)) = recorded {
            for event in history.events() {
                writer.event(event, *limit)?;
            }
        }
        writer.pickle.end_list()?;
        writer.end_device(device);
    }
    writer.pickle.end_list()?;
    writer.pickle.str("segments")?;
    writer.segments()?;
    writer.pickle.end_dict()?;
    let counts = writer.counts;
    writer.pickle.finish()?.flush()?;
    Ok(counts)
}

/// A snapshot being written: the pickle, its shared frames, and the segments and blocks the
/// events written so far leave.
struct SnapshotWriter<W: Write> {
    pickle: Pickler<W>,
    /// The memo index of each tag's frames.
    frames: HashMap<Tag, u32>,
    /// The memo index of the empty frames of a segment event.
    no_frames: Option<u32>,
    /// Live segments: address to size.
    segments: BTreeMap<u64, u64>,
    /// Live blocks: address to size, bytes requested and tag.
    blocks: BTreeMap<u64, (u64, u64, Tag)>,
    /// What each device written so far held at its end: its index, its segments and blocks.
    held_at_end: Vec<HeldAtEnd>,
    counts: ExportCounts,
}

/// A device's segments and blocks when its trace ended.
struct HeldAtEnd {
    device: usize,
    segments: BTreeMap<u64, u64>,
    blocks: BTreeMap<u64, (u64, u64, Tag)>,
}

impl<W: Write> SnapshotWriter<W> {
    /// Writes the trace's events for one of the history's.
    fn event(&mut self, event: &Event, limit: u64) -> io::Result<()> {
        let time_us = event.time_ns / 1000;
        match event.kind {
            EventKind::Alloc => {
                let tag = event.tag.unwrap_or(Tag::OTHER);
                self.blocks
                    .insert(event.addr, (event.size, event.requested, tag));
                self.counts.allocs += 1;
                self.trace_event("alloc", event.addr, event.size, time_us, Some(tag), true)
            }
            EventKind::Free => {
                let tag = event.tag.unwrap_or(Tag::OTHER);
                self.blocks.remove(&event.addr);
                self.counts.frees += 1;
                for action in ["free_requested", "free_completed"] {
                    self.trace_event(action, event.addr, event.size, time_us, Some(tag), false)?;
                }
                Ok(())
            }
            EventKind::RegionReserve => {
                let action = self.reserve(event.addr, event.size);
                self.counts.segment_events += 1;
                self.trace_event(action, event.addr, event.size, time_us, None, false)
            }
            EventKind::RegionRelease => {
                let action = self.release(event.addr, event.size);
                self.counts.segment_events += 1;
                self.trace_event(action, event.addr, event.size, time_us, None, false)
            }
            EventKind::Oom => {
                let device_free = limit.saturating_sub(event.reserved);
                self.counts.ooms += 1;
                let p = &mut self.pickle;
                p.begin_dict()?;
                for (key, value) in [
                    ("addr", device_free),
                    ("size", event.requested),
                    ("device_free", device_free),
                    ("stream", 0),
                    ("time_us", time_us),
                ] {
                    p.str(key)?;
                    p.int(value.into())?;
                }
                let tag = event.tag.unwrap_or(Tag::OTHER);
                p.str("action")?;
                p.str("oom")?;
                p.str("category")?;
                p.str(category::of_tag(tag))?;
                self.frames_of(tag)?;
                self.pickle.end_dict()
            }
        }
    }

    /// Writes one event of the trace: a block's (with its tag's frames, and its category when
    /// `categorized`: on its `alloc`, as the profiler's snapshots have it) or a segment's (no
    /// tag).
    fn trace_event(
        &mut self,
        action: &str,
        addr: u64,
        size: u64,
        time_us: u64,
        tag: Option<Tag>,
        categorized: bool,
    ) -> io::Result<()> {
        let p = &mut self.pickle;
        p.begin_dict()?;
        p.str("action")?;
        p.str(action)?;
        for (key, value) in [
            ("addr", addr),
            ("size", size),
            ("stream", 0),
            ("time_us", time_us),
        ] {
            p.str(key)?;
            p.int(value.into())?;
        }
        // A segment holds no tensor: its category is the profiler's `unknown`, which
        // pytorch.org/memory_viz expects among the categories wherever there are any.
        match (tag, categorized) {
            (Some(tag), true) => {
                p.str("category")?;
                p.str(category::of_tag(tag))?;
            }
            (None, _) => {
                p.str("category")?;
                p.str(category::of_tag(Tag::OTHER))?;
            }
            (Some(_), false) => {}
        }
        match tag {
            Some(tag) => self.frames_of(tag)?,
            None => self.no_frames()?,
        }
        self.pickle.end_dict()
    }

    /// Writes the `frames` key and the one frame that names `tag`, shared by its events.
    fn frames_of(&mut self, tag: Tag) -> io::Result<()> {
        self.pickle.str("frames")?;
        if let Some(&index) = self.frames.get(&tag) {
            return self.pickle.get(index);
        }
        let p = &mut self.pickle;
        p.begin_list()?;
        p.begin_dict()?;
        p.str("filename")?;
        p.str("headroom")?;
        p.str("line")?;
        p.int(0)?;
        p.str("name")?;
        p.str(tag.name())?;
        p.end_dict()?;
        p.end_list()?;
        let index = p.memoize()?;
        self.frames.insert(tag, index);
        Ok(())
    }

    /// Writes the `frames` key and an empty list, shared by every segment event.
    fn no_frames(&mut self) -> io::Result<()> {
        self.pickle.str("frames")?;
        if let Some(index) = self.no_frames {
            return self.pickle.get(index);
        }
        self.pickle.begin_list()?;
        self.pickle.end_list()?;
        self.no_frames = Some(self.pickle.memoize()?);
        Ok(())
    }

    /// Counts `bytes` reserved at `addr` and names the action: a map where they extend a
    /// segment in place, else a new segment.
    fn reserve(&mut self, addr: u64, bytes: u64) -> &'static str {
        let before = self.segments.range(..addr).next_back();
        if let Some((&start, &size)) = before.filter(|&(&start, &size)| start + size == addr) {
            self.segments.insert(start, size + bytes);
            return "segment_map";
        }
        self.segments.insert(addr, bytes);
        "segment_alloc"
    }

    /// Counts `bytes` at `addr` given back and names the action: a whole segment freed, else
    /// part of one unmapped (its start, its end, or its middle, which splits it).
    fn release(&mut self, addr: u64, bytes: u64) -> &'static str {
        let containing = self.segments.range(..=addr).next_back();
        let Some((&start, &size)) = containing.filter(|&(&start, &size)| addr < start + size)
        else {
            return "segment_free";
        };
        self.segments.remove(&start);
        if start == addr && size == bytes {
            return "segment_free";
        }
        let end = start + size;
        if start < addr {
            self.segments.insert(start, addr - start);
        }
        if addr + bytes < end {
            self.segments.insert(addr + bytes, end - addr - bytes);
        }
        "segment_unmap"
    }

    /// Keeps what device `device`'s trace, just written, left held, for the segments.
    fn end_device(&mut self, device: usize) {
        self.held_at_end.push(HeldAtEnd {
            device,
            segments: std::mem::take(&mut self.segments),
            blocks: std::mem::take(&mut self.blocks),
        });
    }

    /// Writes the segments every device held at its end, each with its blocks and the free
    /// gaps between.
    fn segments(&mut self) -> io::Result<()> {
        self.pickle.begin_list()?;
        for held in std::mem::take(&mut self.held_at_end) {
            for (&start, &size) in &held.segments {
                self.segment(held.device, (start, size), &held.blocks)?;
            }
        }
        self.pickle.end_list()
    }

    /// Writes the segment of `size` bytes at `start` of device `device`, with the `blocks` in it.
    fn segment(
        &mut self,
        device: usize,
        (start, size): (u64, u64),
        blocks: &BTreeMap<u64, (u64, u64, Tag)>,
    ) -> io::Result<()> {
        let end = start + size;
        let blocks: Vec<(u64, (u64, u64, Tag))> = blocks
            .range(start..end)
            .map(|(&addr, &block)| (addr, block))
            .collect();
        let allocated: u64 = blocks.iter().map(|(_, (size, _, _))| size).sum();
        let requested: u64 = blocks.iter().map(|(_, (_, requested, _))| requested).sum();
        let p = &mut self.pickle;
        p.begin_dict()?;
        for (key, value) in [
            ("device", device as u64),
            ("address", start),
            ("total_size", size),
            ("allocated_size", allocated),
            ("active_size", allocated),
            ("requested_size", requested),
            ("stream", 0),
        ] {
            p.str(key)?;
            p.int(value.into())?;
        }
        p.str("segment_type")?;
        p.str("large")?;
        self.no_frames()?;
        self.pickle.str("blocks")?;
        self.pickle.begin_list()?;
        let mut at = start;
        for (addr, (size, requested, tag)) in blocks {
            self.free_block(at, addr - at)?;
            let p = &mut self.pickle;
            p.begin_dict()?;
            for (key, value) in [
                ("address", addr),
                ("size", size),
                ("requested_size", requested),
            ] {
                p.str(key)?;
                p.int(value.into())?;
            }
            p.str("state")?;
            p.str("active_allocated")?;
            self.frames_of(tag)?;
            self.pickle.end_dict()?;
            at = addr + size;
        }
        self.free_block(at, end - at)?;
        self.pickle.end_list()?;
        self.pickle.end_dict()?;
        self.counts.segments += 1;
        Ok(())
    }

    /// Writes a free block of `size` bytes at `addr` (nothing when `size` is 0).
    fn free_block(&mut self, addr: u64, size: u64) -> io::Result<()> {
        if size == 0 {
            return Ok(());
        }
        let p = &mut self.pickle;
        p.begin_dict()?;
        for (key, value) in [("address", addr), ("size", size), ("requested_size", 0)] {
            p.str(key)?;
            p.int(value.into())?;
        }
        p.str("state")?;
        p.str("inactive")?;
        self.no_frames()?;
        self.pickle.end_dict()
    }
}
