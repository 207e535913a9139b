//! Criterion benches of allocate + free: headroom-alloc against offset-allocator and first fit.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use headroom_benches::alloc_traces::{LOGNORMAL_CAPACITY, lognormal, lognormal_seed};
use headroom_benches::harness::{CompactTrace, contender};
use headroom_benches::peers::{FirstFit, Headroom, OffsetAllocator, TraceAllocator};

const CAPACITY: u64 = 1 << 30;

/// One allocate + free of the same size: the fast path.
fn pair<A: TraceAllocator>(c: &mut Criterion, mut allocator: A) {
    let name = format!("alloc+free 4KiB/{}", allocator.name());
    c.bench_function(&name, |b| {
        b.iter(|| {
            let handle = allocator.allocate(black_box(4096)).expect("roomy pool");
            allocator.free(handle);
        })
    });
}

/// A ring of 256 live allocations of mixed sizes: each step frees the oldest and allocates anew,
/// so free chunks of many sizes coexist and coalesce.
fn ring<A: TraceAllocator>(c: &mut Criterion, mut allocator: A) {
    let sizes: Vec<u64> = (0..256u64).map(|i| 256 + (i * 7919 % 61) * 1000).collect();
    let mut live: Vec<A::Handle> = sizes
        .iter()
        .map(|&size| allocator.allocate(size).expect("roomy pool"))
        .collect();
    let mut step = 0usize;
    let name = format!("alloc+free ring of 256 mixed/{}", allocator.name());
    c.bench_function(&name, |b| {
        b.iter(|| {
            let slot = step % live.len();
            allocator.free(live[slot]);
            let size = sizes[(step * 31) % sizes.len()];
            live[slot] = allocator.allocate(black_box(size)).expect("roomy pool");
            step += 1;
        })
    });
}

/// Warm replays of alloc-compare's `lognormal-x1` trace (20 000 allocations of log-normal sizes
/// and lifetimes over 64 MiB): many sizes, chunks handed out whole and split, frees that merge
/// and frees that do not. Timed per allocate + free pair.
fn lognormal_replay(c: &mut Criterion) {
    let trace = CompactTrace::new(&lognormal(1, lognormal_seed()));
    let capacity = LOGNORMAL_CAPACITY;
    let mut group = c.benchmark_group("alloc+free log-normal trace");
    group.throughput(Throughput::Elements(trace.allocs() as u64));
    let mut contenders = [
        contender(&trace, Headroom::new(capacity)),
        contender(&trace, OffsetAllocator::new(capacity)),
        contender(&trace, FirstFit::new(capacity)),
    ];
    for contender in &mut contenders {
        group.bench_function(contender.name, |b| b.iter(|| contender.replay_warm()));
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    pair(c, Headroom::new(CAPACITY));
    pair(c, OffsetAllocator::new(CAPACITY));
    pair(c, FirstFit::new(CAPACITY));
    ring(c, Headroom::new(CAPACITY));
    ring(c, OffsetAllocator::new(CAPACITY));
    ring(c, FirstFit::new(CAPACITY));
    lognormal_replay(c);
}

criterion_group!(alloc, benches);
criterion_main!(alloc);
