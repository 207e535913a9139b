//! The invariant walker: every rule the allocator relies on, checked from scratch.

use crate::allocator::inspect::AllocatorView;
use crate::bookkeeping::bins::{BIN_COUNT, bin_index};
use crate::bookkeeping::chunk::NONE;
use crate::bookkeeping::error::{Error, Result};
use crate::bookkeeping::free_set::FreeKey;
use crate::bookkeeping::size::{GRANULE, round_size};

/// Walks every region and chunk of the allocator seen through `view` and checks every invariant
/// written on the fields of the heap, the counters and the allocator; the first broken one is
/// [`Error::Corrupted`]. O(chunks).
pub(crate) fn validate(view: AllocatorView<'_>) -> Result<()> {
    let AllocatorView {
        heap,
        counters,
        tags,
        limit,
        source_name: _,
        reservation: _,
        held_for_streams,
    } = view;
    let fail = |message: String| Err(Error::Corrupted(message));
    let mut in_use = 0u64;
    let mut requested = 0u64;
    let mut packed = 0u64;
    let mut reserved = 0u64;
    let mut chunk_count = 0usize;
    let mut free_count = 0usize;
    let mut previous_end = 0u64;
    for (&base, &size) in heap.regions() {
        if base == 0 {
            return fail("a region starts at address 0".into());
        }
        if base < previous_end {
            return fail(format!("region {base:#x} overlaps the one before it"));
        }
        if base % GRANULE != 0 || size == 0 || size % GRANULE != 0 {
            return fail(format!("region {base:#x}+{size} is not granule-aligned"));
        }
        previous_end = base + size;
        reserved += size;
        let Some(first) = heap.by_addr().get(base) else {
            return fail(format!("no chunk starts region {base:#x}"));
        };
        if heap.chunks()[first].prev != NONE {
            return fail(format!(
                "the first chunk of region {base:#x} has a predecessor"
            ));
        }
        let (mut id, mut prev, mut addr, mut prev_free) = (first, NONE, base, false);
        while id != NONE {
            let chunk = &heap.chunks()[id];
            chunk_count += 1;
            if chunk.addr != addr {
                return fail(format!(
                    "chunk at {:#x} should start at {addr:#x}",
                    chunk.addr
                ));
            }
            if chunk.prev != prev {
                return fail(format!("chunk at {addr:#x} has a wrong prev link"));
            }
            if chunk.size == 0 || !chunk.size.is_multiple_of(GRANULE) {
                return fail(format!("chunk at {addr:#x} has size {}", chunk.size));
            }
            if heap.by_addr().get(addr) != Some(id) {
                return fail(format!("address map disagrees at {addr:#x}"));
            }
            if chunk.in_use {
                in_use += chunk.size;
                requested += chunk.requested;
                packed += round_size(chunk.requested).unwrap_or(u64::MAX);
                if chunk.requested > chunk.size {
                    return fail(format!("chunk at {addr:#x} holds more than its size"));
                }
            } else {
                free_count += 1;
                if prev_free {
                    return fail(format!("free chunk at {addr:#x} follows a free chunk"));
                }
                let key = FreeKey::new(chunk.size, addr, id);
                if !heap.bins().contains(key) {
                    return fail(format!("free chunk at {addr:#x} is not in its bin"));
                }
            }
            prev_free = !chunk.in_use;
            addr += chunk.size;
            prev = id;
            id = chunk.next;
        }
        if addr != base + size {
            return fail(format!("chunks of region {base:#x} end at {addr:#x}"));
        }
    }
    for bin in 0..BIN_COUNT {
        let mut count = 0;
        for key in heap.bins().bin(bin) {
            count += 1;
            if bin_index(key.size) != bin {
                return fail(format!("chunk at {:#x} sits in bin {bin}", key.addr));
            }
        }
        if (count > 0) != heap.bins().marked_non_empty(bin) {
            return fail(format!("bin {bin} bitmap bit is wrong"));
        }
    }
    if heap.bins().len() != free_count {
        return fail(format!(
            "{} chunks in bins, {free_count} free",
            heap.bins().len()
        ));
    }
    if heap.chunks().len() != chunk_count || heap.by_addr().len() != chunk_count {
        return fail(format!(
            "{chunk_count} chunks in regions, {} in the arena, {} in the address map",
            heap.chunks().len(),
            heap.by_addr().len()
        ));
    }
    if let Some(growable) = heap.growable() {
        let Some(&size) = heap.regions().get(&growable.base) else {
            return fail(format!("growable region {:#x} is not held", growable.base));
        };
        let tail = &heap.chunks()[growable.tail];
        if tail.next != NONE || tail.addr + tail.size != growable.base + size {
            return fail(format!(
                "growable region {:#x} has a wrong tail",
                growable.base
            ));
        }
    }
    let c = counters;
    if c.packed_in_use != packed {
        return fail(format!(
            "packed counter {} disagrees with {packed}",
            c.packed_in_use
        ));
    }
    if (c.in_use, c.requested_in_use, c.reserved) != (in_use, requested, reserved) {
        return fail(format!(
            "counters say in use {} / requested {} / reserved {}, chunks say {in_use} / \
             {requested} / {reserved}",
            c.in_use, c.requested_in_use, c.reserved
        ));
    }
    if held_for_streams > in_use {
        return fail(format!(
            "{held_for_streams} bytes wait for streams, only {in_use} are in use"
        ));
    }
    if reserved > limit || c.peak_in_use < in_use || c.peak_reserved < reserved {
        return fail("reserved passes the limit or a peak is below its value".into());
    }
    let tag_total: u64 = tags.used().iter().map(|usage| usage.live).sum();
    if tag_total != in_use {
        return fail(format!("tags hold {tag_total} bytes, chunks {in_use}"));
    }
    Ok(())
}
