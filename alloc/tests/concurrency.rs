//! The shared handle under contention, and blocks that free themselves.

use std::thread;

use headroom_alloc::trace::SplitMix64;
use headroom_alloc::{Allocator, AllocatorConfig, HostMemory, SharedAllocator, Tag, VirtualMemory};

fn shared(limit: u64) -> SharedAllocator {
    let config = AllocatorConfig::default().with_limit_bytes(limit);
    SharedAllocator::new(Allocator::new(VirtualMemory::new(limit), config).unwrap())
}

#[test]
fn threads_allocating_and_freeing_never_overlap_and_leave_nothing_behind() {
    let alloc = shared(256 << 20);
    let workers: Vec<_> = (0..8u64)
        .map(|seed| {
            let alloc = alloc.clone();
            thread::spawn(move || {
                let mut rng = SplitMix64::new(seed);
                let mut blocks = Vec::new();
                let mut ooms = 0;
                for _ in 0..2000 {
                    if blocks.len() > 20 || (rng.below(3) == 0 && !blocks.is_empty()) {
                        let index = rng.below(blocks.len() as u64) as usize;
                        blocks.swap_remove(index);
                    } else {
                        match alloc.allocate(256 << rng.below(14), Tag::ACTIVATIONS) {
                            Ok(block) => blocks.push(block),
                            Err(err) if err.is_out_of_memory() => ooms += 1,
                            Err(err) => panic!("{err}"),
                        }
                    }
                    if rng.below(50) == 0 {
                        // Blocks held by this thread never overlap anyone's.
                        let snapshot = alloc.snapshot();
                        for block in &blocks {
                            let chunk = snapshot
                                .chunks()
                                .find(|c| c.addr == block.addr())
                                .expect("a live block is a chunk");
                            assert!(chunk.in_use && chunk.size == block.size());
                        }
                    }
                }
                ooms
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let stats = alloc.stats();
    assert_eq!(stats.in_use, 0);
    assert_eq!(stats.allocations, stats.frees);
    alloc.with(|a| a.validate()).unwrap();
}

#[test]
fn host_memory_blocks_are_real_writable_memory() {
    let config = AllocatorConfig::default().with_limit_bytes(8 << 20);
    let alloc = SharedAllocator::new(Allocator::new(HostMemory::new(8 << 20), config).unwrap());
    let block = alloc.allocate(4096, Tag::DATA).unwrap();
    assert_eq!(block.addr() % 256, 0);
    assert_eq!(block.tag(), Tag::DATA);
    let other = alloc.allocate(4096, Tag::DATA).unwrap();
    // SAFETY: the blocks are live, 4096 bytes long, disjoint, and only this thread touches them.
    let (mine, theirs) = unsafe {
        (
            std::slice::from_raw_parts_mut(block.addr() as *mut u8, 4096),
            std::slice::from_raw_parts_mut(other.addr() as *mut u8, 4096),
        )
    };
    assert!(mine.iter().all(|&b| b == 0), "fresh host memory is zeroed");
    mine.fill(0xAB);
    theirs.fill(0xCD);
    assert!(mine.iter().all(|&b| b == 0xAB));
    drop(other);
    let snapshot = alloc.snapshot();
    assert_eq!(snapshot.source, "host");
    assert!(
        snapshot
            .chunks()
            .any(|c| c.addr == block.addr() && c.in_use)
    );
    drop(block);
    assert_eq!(alloc.stats().in_use, 0);
    assert_eq!(alloc.release_cached(), 2 << 20);
}

#[test]
fn handles_and_blocks_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<SharedAllocator>();
    send::<headroom_alloc::Block>();
    send::<Allocator>();
    let alloc = shared(1 << 20);
    let block = alloc.allocate(1024, Tag::WORKSPACE).unwrap();
    // A block made on one thread is freed by dropping it on another.
    thread::spawn(move || drop(block)).join().unwrap();
    assert_eq!(alloc.stats().frees, 1);
}
