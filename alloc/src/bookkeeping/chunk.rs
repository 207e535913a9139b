//! Chunks: the pieces regions are cut into, kept in an index-linked arena.

use crate::bookkeeping::tag::Tag;

/// Index of a chunk in the [`ChunkArena`].
pub(crate) type ChunkId = u32;

/// The absent neighbour.
pub(crate) const NONE: ChunkId = ChunkId::MAX;

/// A contiguous piece of a region, either handed out or free.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunk {
    /// First byte; a multiple of the granule.
    pub addr: u64,
    /// Length in bytes; a positive multiple of the granule. `addr + size` is the next chunk's
    /// `addr` when `next != NONE`, otherwise the end of the region.
    pub size: u64,
    /// Bytes the user asked for; 0 while free.
    pub requested: u64,
    /// The chunk just below in the same region, or `NONE` at the region's base.
    pub prev: ChunkId,
    /// The chunk just above in the same region, or `NONE` at the region's end.
    pub next: ChunkId,
    /// What the allocation holds; meaningless while free.
    pub tag: Tag,
    /// Handed out (true) or sitting in a bin (false). Two free chunks are never neighbours.
    pub in_use: bool,
}

impl Chunk {
    /// True when the chunk spans its whole region.
    pub fn is_whole_region(&self) -> bool {
        self.prev == NONE && self.next == NONE
    }
}

/// Chunks in a `Vec`, linked by index; vacant slots are reused.
#[derive(Debug, Default)]
pub(crate) struct ChunkArena {
    slots: Vec<Chunk>,
    /// Slots not holding a live chunk.
    vacant: Vec<ChunkId>,
}

impl ChunkArena {
    /// Stores `chunk` and returns its id.
    #[inline]
    pub fn insert(&mut self, chunk: Chunk) -> ChunkId {
        match self.vacant.pop() {
            Some(id) => {
                self.slots[id as usize] = chunk;
                id
            }
            None => {
                self.slots.push(chunk);
                (self.slots.len() - 1) as ChunkId
            }
        }
    }

    /// Marks `id` vacant; the caller has unlinked it.
    #[inline]
    pub fn remove(&mut self, id: ChunkId) {
        self.vacant.push(id);
    }

    /// Live chunks.
    pub fn len(&self) -> usize {
        self.slots.len() - self.vacant.len()
    }
}

impl std::ops::Index<ChunkId> for ChunkArena {
    type Output = Chunk;
    #[inline]
    fn index(&self, id: ChunkId) -> &Chunk {
        &self.slots[id as usize]
    }
}

impl std::ops::IndexMut<ChunkId> for ChunkArena {
    #[inline]
    fn index_mut(&mut self, id: ChunkId) -> &mut Chunk {
        &mut self.slots[id as usize]
    }
}
