//! A serializable map of memory: every region and every chunk in it.

use serde::{Deserialize, Serialize};

use crate::bookkeeping::bins::{BIN_COUNT, bin_index, bin_min_size};
use crate::bookkeeping::tag::Tag;

/// One chunk of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkSnapshot {
    /// First byte.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// Bytes the caller asked for (0 when free).
    pub requested: u64,
    /// Handed out, or free.
    pub in_use: bool,
    /// What it holds (none when free).
    pub tag: Option<Tag>,
}

/// One region reserved from the source, cut into chunks in address order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionSnapshot {
    /// Base address.
    pub base: u64,
    /// Length in bytes.
    pub size: u64,
    /// Its chunks, lowest address first; they tile the region exactly.
    pub chunks: Vec<ChunkSnapshot>,
}

/// Every region and chunk of an allocator, like `torch.cuda.memory_snapshot()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySnapshot {
    /// The memory source's name.
    pub source: String,
    /// The allocator's limit in bytes.
    pub limit: u64,
    /// Regions, lowest base first.
    pub regions: Vec<RegionSnapshot>,
}

/// Chunks and bytes of one size class, in use and free.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinRow {
    /// Bin index.
    pub bin: usize,
    /// Smallest chunk size of the bin.
    pub min_size: u64,
    /// Chunks in use whose size falls in this bin.
    pub used_chunks: u64,
    /// Their bytes.
    pub used_bytes: u64,
    /// Bytes their callers asked for.
    pub used_requested: u64,
    /// Free chunks in this bin.
    pub free_chunks: u64,
    /// Their bytes.
    pub free_bytes: u64,
}

impl MemorySnapshot {
    /// Every chunk, region by region.
    pub fn chunks(&self) -> impl Iterator<Item = &ChunkSnapshot> {
        self.regions.iter().flat_map(|region| &region.chunks)
    }

    /// A per-bin table of chunks in use and free (rows with no chunks left out).
    pub fn bin_table(&self) -> Vec<BinRow> {
        let mut rows: Vec<BinRow> = (0..BIN_COUNT)
            .map(|bin| BinRow {
                bin,
                min_size: bin_min_size(bin),
                ..BinRow::default()
            })
            .collect();
        for chunk in self.chunks() {
            let row = &mut rows[bin_index(chunk.size)];
            if chunk.in_use {
                row.used_chunks += 1;
                row.used_bytes += chunk.size;
                row.used_requested += chunk.requested;
            } else {
                row.free_chunks += 1;
                row.free_bytes += chunk.size;
            }
        }
        rows.retain(|row| row.used_chunks + row.free_chunks > 0);
        rows
    }

    /// The `n` largest live allocations, largest first (lowest address among equals).
    pub fn largest_live(&self, n: usize) -> Vec<ChunkSnapshot> {
        let mut live: Vec<ChunkSnapshot> = self.chunks().filter(|c| c.in_use).copied().collect();
        live.sort_by(|a, b| b.size.cmp(&a.size).then(a.addr.cmp(&b.addr)));
        live.truncate(n);
        live
    }
}

impl RegionSnapshot {
    /// A map of `width` characters, each standing for `size / width` bytes of the region:
    /// `#` all in use, `.` all free, `+` partly in use.
    pub fn occupancy_map(&self, width: usize) -> String {
        let width = width.max(1) as u128;
        let size = u128::from(self.size.max(1));
        let mut used = vec![0u128; width as usize];
        for chunk in self.chunks.iter().filter(|c| c.in_use) {
            let start = u128::from(chunk.addr - self.base);
            let end = start + u128::from(chunk.size);
            // Cell `i` covers bytes [i * size / width, (i + 1) * size / width).
            let first = start * width / size;
            let last = ((end * width).div_ceil(size)).min(width);
            for cell in first..last {
                let cell_start = cell * size / width;
                let cell_end = (cell + 1) * size / width;
                used[cell as usize] += end.min(cell_end) - start.max(cell_start);
            }
        }
        used.iter()
            .enumerate()
            .map(|(cell, &bytes)| {
                let cell = cell as u128;
                let cell_bytes = (cell + 1) * size / width - cell * size / width;
                match bytes {
                    0 => '.',
                    b if b >= cell_bytes => '#',
                    _ => '+',
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(addr: u64, size: u64, in_use: bool) -> ChunkSnapshot {
        ChunkSnapshot {
            addr,
            size,
            requested: if in_use { size } else { 0 },
            in_use,
            tag: in_use.then_some(Tag::WEIGHTS),
        }
    }

    #[test]
    fn occupancy_map_marks_used_free_and_partial_cells() {
        let region = RegionSnapshot {
            base: 0x1000,
            size: 1000 * 256,
            chunks: vec![
                chunk(0x1000, 500 * 256, true),
                chunk(0x1000 + 500 * 256, 5 * 256, false),
                chunk(0x1000 + 505 * 256, 495 * 256, false),
            ],
        };
        let map = region.occupancy_map(100);
        assert_eq!(map.len(), 100);
        assert_eq!(&map[..50], "#".repeat(50));
        assert_eq!(&map[50..], ".".repeat(50));
        let coarse = region.occupancy_map(3);
        assert_eq!(coarse, "#+.");
    }

    #[test]
    fn bin_table_and_largest_live() {
        let snapshot = MemorySnapshot {
            source: "virtual".into(),
            limit: 1 << 20,
            regions: vec![RegionSnapshot {
                base: 0,
                size: 4096,
                chunks: vec![
                    chunk(0, 256, true),
                    chunk(256, 1024, true),
                    chunk(1280, 2816, false),
                ],
            }],
        };
        let rows = snapshot.bin_table();
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[0].bin, rows[0].used_chunks), (0, 1));
        assert_eq!((rows[1].bin, rows[1].used_bytes), (2, 1024));
        assert_eq!((rows[2].bin, rows[2].free_bytes), (3, 2816));
        let top = snapshot.largest_live(1);
        assert_eq!(top[0].size, 1024);
    }
}
