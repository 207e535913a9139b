//! Blocks on several streams: a block freed on one stream serves it again at once, and other
//! streams only once the work queued on it before the free has completed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use headroom_alloc::{
    Allocator, AllocatorConfig, Error, InvalidFreeReason, SourceError, StreamClock, StreamEvent,
    StreamId, Tag, VirtualMemory,
};

const MIB: u64 = 1 << 20;

/// A stream's work as a count of queued items, of which the first `done` have run.
#[derive(Default)]
struct Work {
    queued: u64,
    done: u64,
}

/// A clock whose streams run their work only when the test says so.
#[derive(Clone, Default)]
struct TestClock(Arc<Mutex<Clock>>);

#[derive(Default)]
struct Clock {
    streams: HashMap<StreamId, Work>,
    /// Every event recorded: its stream and how much work it follows.
    events: Vec<(StreamId, u64)>,
    synchronized: usize,
}

impl TestClock {
    /// Queues an item of work on `stream`, as a kernel that uses its blocks would be.
    fn queue(&self, stream: StreamId) {
        self.0
            .lock()
            .unwrap()
            .streams
            .entry(stream)
            .or_default()
            .queued += 1;
    }

    /// Runs all the work queued on `stream`.
    fn run(&self, stream: StreamId) {
        let mut clock = self.0.lock().unwrap();
        let work = clock.streams.entry(stream).or_default();
        work.done = work.queued;
    }

    fn events(&self) -> usize {
        self.0.lock().unwrap().events.len()
    }

    fn synchronized(&self) -> usize {
        self.0.lock().unwrap().synchronized
    }
}

impl StreamClock for TestClock {
    fn record(&mut self, stream: StreamId) -> Result<StreamEvent, SourceError> {
        let mut clock = self.0.lock().unwrap();
        let queued = clock.streams.entry(stream).or_default().queued;
        clock.events.push((stream, queued));
        Ok(StreamEvent(clock.events.len() as u64 - 1))
    }

    fn completed(&mut self, event: StreamEvent) -> Result<bool, SourceError> {
        let clock = self.0.lock().unwrap();
        let (stream, after) = clock.events[event.0 as usize];
        Ok(clock.streams[&stream].done >= after)
    }

    fn synchronize(&mut self, event: StreamEvent) -> Result<(), SourceError> {
        let mut clock = self.0.lock().unwrap();
        let (stream, after) = clock.events[event.0 as usize];
        let work = clock.streams.get_mut(&stream).unwrap();
        work.done = work.done.max(after);
        clock.synchronized += 1;
        Ok(())
    }
}

const COMPUTE: StreamId = StreamId(1);
const COPY: StreamId = StreamId(2);

fn with_clock(limit: u64) -> (Allocator, TestClock) {
    let config = AllocatorConfig::default().with_limit_bytes(limit);
    let mut alloc = Allocator::new(VirtualMemory::new(limit), config).unwrap();
    let clock = TestClock::default();
    alloc.set_stream_clock(clock.clone()).unwrap();
    (alloc, clock)
}

#[test]
fn one_stream_records_no_event_and_frees_at_once() {
    let (mut alloc, clock) = with_clock(64 * MIB);
    for _ in 0..10 {
        let a = alloc.allocate_on(MIB, Tag::ACTIVATIONS, COMPUTE).unwrap();
        clock.queue(COMPUTE);
        alloc.free(a.addr).unwrap();
        assert_eq!(alloc.stats().in_use, 0);
    }
    assert_eq!(clock.events(), 0);
}

#[test]
fn a_block_serves_its_stream_at_once_and_others_after_its_work() {
    let (mut alloc, clock) = with_clock(64 * MIB);
    let weights = alloc.allocate_on(MIB, Tag::WEIGHTS, COMPUTE).unwrap();
    // The copy stream has queued no work on this block: it goes back to the heap at once.
    let staging = alloc.allocate_on(MIB, Tag::DATA, COPY).unwrap();
    alloc.free(staging.addr).unwrap();
    assert_eq!(alloc.stats().held_for_streams, 0);
    let a = alloc.allocate_on(MIB, Tag::ACTIVATIONS, COMPUTE).unwrap();
    clock.queue(COMPUTE); // a kernel reads `a`
    alloc.free(a.addr).unwrap();
    let stats = alloc.stats();
    assert_eq!(stats.held_for_streams, MIB, "{stats:?}");
    assert_eq!(stats.in_use, 2 * MIB, "counted in use while it waits");

    // Another stream must not get it while the kernel may still read it.
    let other = alloc.allocate_on(MIB, Tag::DATA, COPY).unwrap();
    assert_ne!(other.addr, a.addr);
    // Its own stream gets it back at once: its later work runs after the kernel.
    let again = alloc.allocate_on(MIB, Tag::ACTIVATIONS, COMPUTE).unwrap();
    assert_eq!(again.addr, a.addr);
    assert_eq!(alloc.stats().held_for_streams, 0);

    clock.queue(COMPUTE);
    alloc.free(again.addr).unwrap();
    alloc.free(other.addr).unwrap();
    // Once the compute stream's work has run, the block is everyone's.
    clock.run(COMPUTE);
    clock.run(COPY);
    let copy = alloc.allocate_on(MIB, Tag::DATA, COPY).unwrap();
    assert_eq!(alloc.stats().held_for_streams, 0);
    assert!(copy.addr == a.addr || copy.addr == other.addr);
    alloc.free(weights.addr).unwrap();
    alloc.validate().unwrap();
}

#[test]
fn an_allocation_that_would_fail_waits_for_the_streams_first() {
    let (mut alloc, clock) = with_clock(4 * MIB);
    let _warm = alloc.allocate_on(256, Tag::OTHER, COPY).unwrap();
    let big = alloc
        .allocate_on(3 * MIB, Tag::ACTIVATIONS, COMPUTE)
        .unwrap();
    clock.queue(COMPUTE);
    alloc.free(big.addr).unwrap();
    let synchronized = clock.synchronized();
    // Only the held block can make room: the allocator waits for the compute stream.
    let copy = alloc.allocate_on(3 * MIB, Tag::DATA, COPY).unwrap();
    assert_eq!(copy.addr, big.addr);
    assert_eq!(clock.synchronized(), synchronized + 1);
    assert_eq!(alloc.stats().ooms, 0);
}

#[test]
fn a_second_stream_waits_once_for_the_work_of_the_first() {
    let config = AllocatorConfig::default().with_limit_bytes(64 * MIB);
    let mut alloc = Allocator::new(VirtualMemory::new(64 * MIB), config).unwrap();
    // Freed before any clock: no event says when the default stream's work on it ends.
    let early = alloc.allocate(MIB, Tag::ACTIVATIONS).unwrap();
    alloc.free(early.addr).unwrap();
    let clock = TestClock::default();
    clock.queue(StreamId::DEFAULT);
    alloc.set_stream_clock(clock.clone()).unwrap();
    alloc.allocate_on(MIB, Tag::DATA, COPY).unwrap();
    assert_eq!(
        clock.synchronized(),
        1,
        "the default stream's work is waited for"
    );
    alloc.allocate_on(MIB, Tag::DATA, COPY).unwrap();
    assert_eq!(clock.synchronized(), 1, "once");
}

#[test]
fn a_held_block_freed_again_is_a_double_free_and_streams_need_a_clock() {
    let (mut alloc, clock) = with_clock(64 * MIB);
    alloc.allocate_on(256, Tag::OTHER, COPY).unwrap();
    let a = alloc.allocate_on(MIB, Tag::OTHER, COMPUTE).unwrap();
    clock.queue(COMPUTE);
    alloc.free(a.addr).unwrap();
    match alloc.free(a.addr) {
        Err(Error::InvalidFree { reason, .. }) => assert_eq!(reason, InvalidFreeReason::DoubleFree),
        other => panic!("expected a double free, got {other:?}"),
    }
    let mut plain = Allocator::new(VirtualMemory::new(MIB), AllocatorConfig::default()).unwrap();
    assert!(matches!(
        plain.allocate_on(256, Tag::OTHER, COPY),
        Err(Error::InvalidConfig(message)) if message.contains("stream clock")
    ));
    assert!(
        plain
            .allocate_on(256, Tag::OTHER, StreamId::DEFAULT)
            .is_ok()
    );
}
