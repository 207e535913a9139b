//! A plain first-fit free list: the textbook baseline.

use std::collections::BTreeMap;

use super::{GRANULE, TraceAllocator};

/// First fit over one fixed pool: free blocks kept by address, the lowest that fits is taken and
/// split, and a freed block merges with free neighbours. Allocation scans the free list.
pub struct FirstFit {
    /// Free blocks: start to length.
    free: BTreeMap<u64, u64>,
    /// Live blocks: start to length.
    live: BTreeMap<u64, u64>,
    high_water: u64,
}

impl FirstFit {
    /// A pool of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self {
            free: BTreeMap::from([(0, capacity / GRANULE * GRANULE)]),
            live: BTreeMap::new(),
            high_water: 0,
        }
    }
}

impl TraceAllocator for FirstFit {
    type Handle = u64;

    fn name(&self) -> &'static str {
        "first-fit"
    }

    fn allocate(&mut self, size: u64) -> Option<u64> {
        let size = size.max(1).div_ceil(GRANULE) * GRANULE;
        let (&start, &length) = self.free.iter().find(|&(_, &length)| length >= size)?;
        self.free.remove(&start);
        if length > size {
            self.free.insert(start + size, length - size);
        }
        self.live.insert(start, size);
        self.high_water = self.high_water.max(start + size);
        Some(start)
    }

    fn free(&mut self, start: u64) {
        let Some(mut length) = self.live.remove(&start) else {
            panic!("the harness freed an address first-fit never handed out");
        };
        let mut start = start;
        if let Some(next_length) = self.free.remove(&(start + length)) {
            length += next_length;
        }
        if let Some((&prev, &prev_length)) = self.free.range(..start).next_back()
            && prev + prev_length == start
        {
            self.free.remove(&prev);
            start = prev;
            length += prev_length;
        }
        self.free.insert(start, length);
    }

    fn peak_reserved(&self) -> u64 {
        self.high_water
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_takes_the_lowest_hole_and_coalesces() {
        let mut pool = FirstFit::new(4096);
        let a = pool.allocate(1024).unwrap();
        let b = pool.allocate(1024).unwrap();
        let c = pool.allocate(1024).unwrap();
        pool.free(a);
        pool.free(c);
        assert_eq!(pool.allocate(512), Some(0));
        pool.free(0);
        pool.free(b);
        assert_eq!(pool.free, BTreeMap::from([(0, 4096)]));
        assert_eq!(pool.peak_reserved(), 3072);
        assert_eq!(pool.allocate(8192), None);
    }
}
