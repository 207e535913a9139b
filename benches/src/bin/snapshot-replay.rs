//! How long headroom-alloc takes to read and replay a PyTorch memory snapshot of a million
//! events: the pickle read (`pytorch::Snapshot::from_bytes`) and the replay under the default
//! and the expandable policy (`pytorch::replay_snapshot`), as `headroom-alloc replay
//! SNAPSHOT.pickle` runs them. The target: under 2 seconds for a million events.
//!
//! The snapshot is made here, in the shape `torch.cuda.memory._dump_snapshot` writes: one
//! device, an 8 GiB segment, then allocations of 512 B to 16 MiB (a training step's sizes), each
//! freed with a `free_requested` and a `free_completed` event, mostly in stack order, at most
//! 2000 blocks live. Prints a table and one JSON line, the medians of `--rounds N` (3)
//! rounds.
//!
//! Then the other way: a Headroom trace of the same sizes, replayed with its history and
//! written as a snapshot of as many events (`pytorch::write_trace_memory_viz`, as `headroom
//! report RUN_DIR --memory-viz` runs it), and that snapshot read back.
//!
//! ```text
//! cargo run --release -p headroom-benches --bin snapshot-replay [-- --events N] [--rounds N]
//! ```

use std::time::Instant;

use headroom_alloc::pytorch::{
    SNAPSHOT_POLICIES, Snapshot, replay_snapshot, write_trace_memory_viz,
};
use headroom_alloc::trace::{TraceOp, TraceSettings};
use headroom_alloc::{AllocatorConfig, EXPANSION_STEP, Tag};

/// Sizes a block may have.
const SIZES: [u64; 6] = [512, 4096, 65536, 1 << 20, 4 << 20, 16 << 20];

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut events, mut rounds) = (1_000_000usize, 3usize);
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|v| v.parse().ok());
        match (flag.as_str(), value) {
            ("--events", Some(n)) => events = n,
            ("--rounds", Some(n)) => rounds = n,
            _ => {
                eprintln!("usage: snapshot-replay [--events N] [--rounds N]");
                std::process::exit(2);
            }
        }
    }
    let bytes = snapshot(events);
    let (mut read, mut replay) = (Vec::new(), Vec::new());
    let mut peak = 0;
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let snapshot = Snapshot::from_bytes(&bytes).expect("the snapshot reads");
        read.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let report = replay_snapshot(&snapshot, &SNAPSHOT_POLICIES, None, false)
            .expect("the snapshot replays");
        replay.push(started.elapsed().as_secs_f64());
        peak = report.devices[0].peak_requested;
    }
    let (read, replay) = (median(read), median(replay));
    let mib = bytes.len() as f64 / (1 << 20) as f64;
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>10}",
        "events", "pickle", "read", "replay", "total"
    );
    println!(
        "{events:>10} {mib:>7.1} MiB {read:>8.3} s {replay:>8.3} s {:>8.3} s",
        read + replay
    );
    println!(
        "{{\"bench\":\"snapshot-replay\",\"events\":{events},\"pickle_bytes\":{},\"read_s\":{read:.4},\"replay_s\":{replay:.4},\"total_s\":{:.4},\"peak_requested\":{peak},\"target_s\":2.0}}",
        bytes.len(),
        read + replay
    );
    export(events, rounds);
}

/// Times the export of a Headroom trace of `events` snapshot events, and its reading back.
fn export(events: usize, rounds: usize) {
    let ops = headroom_trace(events);
    let settings = TraceSettings::of(&AllocatorConfig::default(), 64 << 30, EXPANSION_STEP);
    let path = std::env::temp_dir().join(format!("snapshot-replay-{}.pickle", std::process::id()));
    let (mut write, mut read) = (Vec::new(), Vec::new());
    let mut written = 0;
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let counts = write_trace_memory_viz(&ops, &settings, &path).expect("the trace exports");
        write.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let snapshot = Snapshot::read(&path).expect("the export reads back");
        read.push(started.elapsed().as_secs_f64());
        assert_eq!(snapshot.devices[0].events.len(), counts.events());
        written = counts.events();
    }
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    std::fs::remove_file(&path).ok();
    let (write, read) = (median(write), median(read));
    let mib = bytes as f64 / (1 << 20) as f64;
    println!(
        "{:>10} {:>10} {:>10} {:>10}",
        "exported", "pickle", "write", "read"
    );
    println!("{written:>10} {mib:>7.1} MiB {write:>8.3} s {read:>8.3} s");
    println!(
        "{{\"bench\":\"snapshot-export\",\"events\":{written},\"pickle_bytes\":{bytes},\"write_s\":{write:.4},\"read_s\":{read:.4}}}"
    );
}

/// A Headroom trace whose snapshot holds about `events` events: the program of [`turns`].
fn headroom_trace(events: usize) -> Vec<TraceOp> {
    turns(events)
        .into_iter()
        .enumerate()
        .map(|(at, turn)| match turn {
            Turn::Take(size) => TraceOp::Alloc {
                id: at as u64,
                size,
                tag: Tag::ACTIVATIONS,
            },
            Turn::Give(taken) => TraceOp::Free { id: taken as u64 },
        })
        .collect()
}

/// One turn of the bench's program.
enum Turn {
    /// A block of this many bytes taken.
    Take(u64),
    /// The block taken at this turn given back.
    Give(usize),
}

/// A program of blocks of 512 B to 16 MiB, mostly given back in stack order, at most 2000
/// held, whose snapshot holds about `events` events (a block taken is one, given back two).
fn turns(events: usize) -> Vec<Turn> {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut turns, mut live, mut counted) = (Vec::new(), Vec::new(), 0);
    while counted < events {
        if !live.is_empty() && (next() % 2 == 0 || live.len() > 2000) {
            let at = if next() % 5 == 0 {
                (next() % live.len() as u64) as usize
            } else {
                live.len() - 1
            };
            turns.push(Turn::Give(live.swap_remove(at)));
            counted += 2;
        } else {
            live.push(turns.len());
            turns.push(Turn::Take(SIZES[(next() % SIZES.len() as u64) as usize]));
            counted += 1;
        }
    }
    turns
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// A pickled snapshot of `events` events (protocol 2, as Python writes plain values): the
/// program of [`turns`], each block at the next free address of one 8 GiB segment.
fn snapshot(events: usize) -> Vec<u8> {
    let mut out = vec![0x80, 2];
    let base = 0x7e00_0000_0000u64;
    let mut trace = vec![("segment_alloc", base, 8u64 << 30)];
    // Each turn's block: its address and size (none for a turn that gives one back).
    let (mut placed, mut addr) = (Vec::new(), base);
    for turn in turns(events.saturating_sub(1)) {
        let block = match turn {
            Turn::Take(size) => {
                let at = addr;
                addr += size.next_multiple_of(512);
                trace.push(("alloc", at, size));
                (at, size)
            }
            Turn::Give(taken) => {
                let (a, s) = placed[taken];
                trace.push(("free_requested", a, s));
                trace.push(("free_completed", a, s));
                (0, 0)
            }
        };
        placed.push(block);
    }
    dict_open(&mut out);
    text(&mut out, "segments");
    list_open(&mut out);
    dict_open(&mut out);
    for (key, value) in [("device", 0), ("address", base), ("total_size", 8 << 30)] {
        text(&mut out, key);
        int(&mut out, value);
    }
    dict_close(&mut out);
    list_close(&mut out);
    text(&mut out, "device_traces");
    list_open(&mut out);
    list_open(&mut out);
    for (action, a, s) in trace {
        dict_open(&mut out);
        text(&mut out, "action");
        text(&mut out, action);
        for (key, value) in [("addr", a), ("size", s), ("stream", 0)] {
            text(&mut out, key);
            int(&mut out, value);
        }
        text(&mut out, "frames");
        out.push(b']');
        dict_close(&mut out);
    }
    list_close(&mut out);
    list_close(&mut out);
    dict_close(&mut out);
    out.push(b'.');
    out
}

fn dict_open(out: &mut Vec<u8>) {
    out.extend([b'}', b'(']); // EMPTY_DICT, MARK
}

fn dict_close(out: &mut Vec<u8>) {
    out.push(b'u'); // SETITEMS
}

fn list_open(out: &mut Vec<u8>) {
    out.extend([b']', b'(']); // EMPTY_LIST, MARK
}

fn list_close(out: &mut Vec<u8>) {
    out.push(b'e'); // APPENDS
}

fn text(out: &mut Vec<u8>, s: &str) {
    out.extend([0x8c, s.len() as u8]); // SHORT_BINUNICODE
    out.extend(s.as_bytes());
}

fn int(out: &mut Vec<u8>, n: u64) {
    out.push(0x8a); // LONG1, eight bytes and a zero for the sign
    out.push(9);
    out.extend(n.to_le_bytes());
    out.push(0);
}
