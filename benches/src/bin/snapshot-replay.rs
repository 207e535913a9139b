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
//! ```text
//! cargo run --release -p headroom-benches --bin snapshot-replay [-- --events N] [--rounds N]
//! ```

use std::time::Instant;

use headroom_alloc::pytorch::{Snapshot, replay_snapshot};

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
        let report = replay_snapshot(&snapshot, None, false).expect("the snapshot replays");
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
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// A pickled snapshot of `events` events (protocol 2, as Python writes plain values).
fn snapshot(events: usize) -> Vec<u8> {
    let mut out = vec![0x80, 2];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let base = 0x7e00_0000_0000u64;
    let mut trace = vec![("segment_alloc", base, 8u64 << 30)];
    let (mut live, mut addr) = (Vec::new(), base);
    while trace.len() < events {
        if !live.is_empty() && (next() % 2 == 0 || live.len() > 2000) {
            let at = if next() % 5 == 0 {
                (next() % live.len() as u64) as usize
            } else {
                live.len() - 1
            };
            let (a, s) = live.swap_remove(at);
            trace.push(("free_requested", a, s));
            trace.push(("free_completed", a, s));
        } else {
            let size = SIZES[(next() % SIZES.len() as u64) as usize];
            live.push((addr, size));
            trace.push(("alloc", addr, size));
            addr += size.next_multiple_of(512);
        }
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
