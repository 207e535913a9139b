//! A thread-safe handle to an allocator and blocks that free themselves.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::allocator::Allocator;
use crate::bookkeeping::error::Result;
use crate::bookkeeping::heap::Allocation;
use crate::bookkeeping::snapshot::MemorySnapshot;
use crate::bookkeeping::stats::Stats;
use crate::bookkeeping::tag::Tag;

/// A cloneable, `Send + Sync` handle to one [`Allocator`] behind a mutex.
///
/// ```
/// use headroom_alloc::{Allocator, AllocatorConfig, SharedAllocator, Tag, VirtualMemory};
/// let alloc = SharedAllocator::new(Allocator::new(
///     VirtualMemory::new(1 << 30),
///     AllocatorConfig::default(),
/// )?);
/// let block = alloc.allocate(4096, Tag::WEIGHTS)?;
/// assert_eq!(alloc.stats().in_use, 4096);
/// drop(block); // freed here
/// assert_eq!(alloc.stats().in_use, 0);
/// # Ok::<(), headroom_alloc::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct SharedAllocator {
    inner: Arc<Mutex<Allocator>>,
}

impl SharedAllocator {
    /// Shares `allocator`.
    pub fn new(allocator: Allocator) -> Self {
        Self {
            inner: Arc::new(Mutex::new(allocator)),
        }
    }

    /// Allocates a [`Block`] that frees itself when dropped.
    pub fn allocate(&self, size: u64, tag: Tag) -> Result<Block> {
        let allocation = self.inner.lock().allocate(size, tag)?;
        Ok(Block {
            owner: self.clone(),
            allocation,
        })
    }

    /// [`Allocator::try_allocate`] as a [`Block`]: `None` when it does not fit without
    /// releasing cached regions, and no out-of-memory is counted.
    pub fn try_allocate(&self, size: u64, tag: Tag) -> Option<Block> {
        let allocation = self.inner.lock().try_allocate(size, tag)?;
        Some(Block {
            owner: self.clone(),
            allocation,
        })
    }

    /// Allocates without a guard; the caller must [`free_raw`](Self::free_raw) the address.
    pub fn allocate_raw(&self, size: u64, tag: Tag) -> Result<Allocation> {
        self.inner.lock().allocate(size, tag)
    }

    /// Frees an address from [`allocate_raw`](Self::allocate_raw).
    pub fn free_raw(&self, addr: u64) -> Result<Allocation> {
        self.inner.lock().free(addr)
    }

    /// Current statistics.
    pub fn stats(&self) -> Stats {
        self.inner.lock().stats()
    }

    /// A map of every region and chunk.
    pub fn snapshot(&self) -> MemorySnapshot {
        self.inner.lock().snapshot()
    }

    /// Gives entirely free regions back to the source; returns the bytes released.
    pub fn release_cached(&self) -> u64 {
        self.inner.lock().release_cached()
    }

    /// Runs `f` with exclusive access to the allocator (for anything else it offers).
    pub fn with<R>(&self, f: impl FnOnce(&mut Allocator) -> R) -> R {
        f(&mut self.inner.lock())
    }
}

/// An allocation that is freed when dropped (RAII), holding its allocator alive.
#[derive(Debug)]
pub struct Block {
    owner: SharedAllocator,
    allocation: Allocation,
}

impl Block {
    /// First byte of the block.
    pub fn addr(&self) -> u64 {
        self.allocation.addr
    }

    /// Bytes reserved for the block (at least the request).
    pub fn size(&self) -> u64 {
        self.allocation.size
    }

    /// Bytes that were asked for.
    pub fn requested(&self) -> u64 {
        self.allocation.requested
    }

    /// What the block holds.
    pub fn tag(&self) -> Tag {
        self.allocation.tag
    }

    /// The allocator this block came from.
    pub fn allocator(&self) -> &SharedAllocator {
        &self.owner
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if let Err(err) = self.owner.free_raw(self.allocation.addr) {
            // Only possible if the address was freed through `free_raw` behind the block's back.
            tracing::error!("dropping a block failed to free it: {err}");
        }
    }
}
