//! The positions of an embedding's ids grouped by id, for its gradient: each table row is the
//! sum of the rows of `dy` at its id's positions, in a fixed order, so the result is
//! deterministic and no two tasks write one row (no atomics).
//!
//! A row summed by one task is serial work as long as its id's run of positions: one frequent id
//! (a padding token, a tiny vocabulary, the position table of a large batch) would leave every
//! other thread idle. So runs longer than [`piece_len`] positions are cut into pieces of that
//! length, summed in parallel into partial rows, and the row then sums its pieces' partials in
//! order (PyTorch's CUDA embedding backward splits its segments the same way). The piece length
//! depends on the number of positions alone, never on the thread count, so the order of every
//! sum, and the result, is fixed by the input.

use std::ops::Range;

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::DeviceMemory;

/// The shortest piece: below this, cutting a run costs more than it spreads.
const MIN_PIECE: usize = 32;

/// The length of the pieces that runs longer than it are cut into, for `positions` positions in
/// all: at least [`MIN_PIECE`], and about their square root, so that neither a piece's sum nor
/// a row's sum of partials is longer than about `sqrt(positions)`.
pub(super) fn piece_len(positions: usize) -> usize {
    positions.isqrt().max(MIN_PIECE)
}

/// The most pieces `positions` positions can be cut into, whatever the ids: the size of the
/// scratch the CUDA backend (and the meta device, planning it) sets aside for partial rows.
///
/// A run of `r > L` positions makes `ceil(r / L) = floor(r / L) + (r % L != 0)` pieces. The
/// first terms add up to at most `floor(n / L)` (the runs share `n` positions), and at most
/// `floor(n / (L + 1))` runs are longer than `L`.
pub(super) fn most_pieces(positions: usize) -> usize {
    let len = piece_len(positions);
    positions / len + positions / (len + 1)
}

/// An embedding's positions grouped by id, with long runs cut into pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct IdGroups {
    /// Pairs per row `v` of the rows grouped, and one more after the last: the start of `v`'s
    /// run in `positions`, and the index of `v`'s first piece. Laid out for the CUDA kernels as
    /// they read it.
    rows: Vec<u32>,
    /// Every position whose id lies in the rows grouped, grouped by id, in increasing order
    /// within an id.
    positions: Vec<u32>,
    /// Pairs per piece: the range of `positions` it sums.
    pieces: Vec<u32>,
}

impl IdGroups {
    /// Groups the positions of `ids` whose id lies in `rows` (every id checked against its
    /// range first), each by its row within `rows`, by a counting sort. Fails with
    /// [`Error::Argument`] for `op` when there are more ids than 32 bits count (the positions
    /// are u32, as the CUDA kernels read them).
    pub(super) fn new(ids: &[u32], rows: Range<usize>, op: &'static str) -> Result<Self> {
        if u32::try_from(ids.len()).is_err() {
            return Err(Error::Argument {
                op,
                detail: format!("{} ids; positions are counted in 32 bits", ids.len()),
            });
        }
        // The row within `rows` of each id that lies there.
        let row = |id: u32| {
            (id as usize)
                .checked_sub(rows.start)
                .filter(|&r| r < rows.len())
        };
        let count = rows.len();
        // Counts, then the end of each row's run, in place at starts[2 r]; the scatter, walking
        // the positions backwards, moves each back to its run's start, and fills each run in
        // increasing order.
        let mut starts = vec![0u32; 2 * (count + 1)];
        let mut inside = 0;
        for r in ids.iter().filter_map(|&id| row(id)) {
            starts[2 * r] += 1;
            inside += 1;
        }
        let mut end = 0;
        for r in 0..count {
            end += starts[2 * r];
            starts[2 * r] = end;
        }
        let mut positions = vec![0u32; inside];
        for (p, &id) in (0..ids.len() as u32).zip(ids).rev() {
            if let Some(r) = row(id) {
                let cursor = &mut starts[2 * r];
                *cursor -= 1;
                positions[*cursor as usize] = p;
            }
        }
        starts[2 * count] = end;

        // Cut by the length of all the ids, inside the rows or not: the bound the scratch for
        // the pieces is sized by.
        let len = piece_len(ids.len());
        let mut pieces = Vec::new();
        for r in 0..count {
            let (start, end) = (starts[2 * r] as usize, starts[2 * r + 2] as usize);
            starts[2 * r + 1] = (pieces.len() / 2) as u32;
            if end - start > len {
                for piece in (start..end).step_by(len) {
                    pieces.extend([piece as u32, (piece + len).min(end) as u32]);
                }
            }
        }
        starts[2 * count + 1] = (pieces.len() / 2) as u32;
        Ok(IdGroups {
            rows: starts,
            positions,
            pieces,
        })
    }

    /// The positions of row `v` of the rows grouped, in increasing order.
    pub(super) fn run(&self, v: usize) -> &[u32] {
        &self.positions[self.rows[2 * v] as usize..self.rows[2 * v + 2] as usize]
    }

    /// The pieces of row `v`: empty when its run is summed whole.
    pub(super) fn pieces_of(&self, v: usize) -> Range<usize> {
        self.rows[2 * v + 1] as usize..self.rows[2 * v + 3] as usize
    }

    /// The positions piece `k` sums.
    pub(super) fn piece(&self, k: usize) -> &[u32] {
        &self.positions[self.pieces[2 * k] as usize..self.pieces[2 * k + 1] as usize]
    }

    /// How many pieces there are, at most [`most_pieces`] of the positions.
    pub(super) fn piece_count(&self) -> usize {
        self.pieces.len() / 2
    }

    /// The per-row pairs (run start, first piece), one more than the rows, flattened.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(super) fn rows(&self) -> &[u32] {
        &self.rows
    }

    /// Every position inside the rows, grouped by id.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(super) fn positions(&self) -> &[u32] {
        &self.positions
    }

    /// The per-piece pairs (start, end) into [`IdGroups::positions`], flattened.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(super) fn pieces(&self) -> &[u32] {
        &self.pieces
    }
}

/// The device scratch of an embedding's gradient on CUDA, sized by the geometry alone (never by
/// the ids), so that the meta device, which holds no ids, plans exactly what the GPU takes.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(super) struct GradScratch {
    /// For [`IdGroups::rows`]: u32, `2 (rows + 1)`.
    pub(super) rows: Buffer,
    /// For [`IdGroups::positions`]: u32, one per position (at least one).
    pub(super) positions: Buffer,
    /// When any run can be cut: room for [`IdGroups::pieces`] (u32, two per piece) and for the
    /// pieces' partial rows (`dim` each, f64 for an f64 gradient, f32 otherwise), for
    /// [`most_pieces`] pieces.
    pub(super) pieces: Option<(Buffer, Buffer)>,
}

impl GradScratch {
    /// Takes the scratch for the gradient of `rows` rows of a table of `dtype` with rows of
    /// `dim`, from `positions` lookups, under the workspace tag, in a fixed order.
    pub(super) fn alloc(
        memory: &DeviceMemory,
        rows: usize,
        dim: usize,
        positions: usize,
        dtype: DType,
        op: &'static str,
    ) -> Result<Self> {
        let runs = memory.alloc_workspace(DType::U32, 2 * (rows + 1), op)?;
        let positions_buffer = memory.alloc_workspace(DType::U32, positions.max(1), op)?;
        let pieces = match most_pieces(positions) {
            0 => None,
            most => {
                let partial = if dtype == DType::F64 {
                    DType::F64
                } else {
                    DType::F32
                };
                let bounds = memory.alloc_workspace(DType::U32, 2 * most, op)?;
                Some((bounds, memory.alloc_workspace(partial, most * dim, op)?))
            }
        };
        Ok(GradScratch {
            rows: runs,
            positions: positions_buffer,
            pieces,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn short_runs_stay_whole_and_long_ones_are_cut_in_order() {
        // 100 positions: pieces of 32. Id 1 holds 70 of them, id 0 the other 30, id 2 none.
        let ids: Vec<u32> = (0..100).map(|p| u32::from(p % 10 < 7)).collect();
        let groups = IdGroups::new(&ids, 0..3, "test").unwrap();
        assert_eq!(piece_len(100), 32);
        assert_eq!(groups.run(0).len(), 30);
        assert!(groups.pieces_of(0).is_empty());
        assert!(groups.run(2).is_empty() && groups.pieces_of(2).is_empty());
        let cut: Vec<usize> = groups.pieces_of(1).map(|k| groups.piece(k).len()).collect();
        assert_eq!(cut, [32, 32, 6]);
        let joined: Vec<u32> = groups
            .pieces_of(1)
            .flat_map(|k| groups.piece(k).iter().copied())
            .collect();
        assert_eq!(joined, groups.run(1));
        assert!(groups.run(1).windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn one_id_everywhere_is_cut_into_equal_pieces_within_the_bound() {
        for n in [0, 1, 32, 33, 64, 65, 1000, 1024, 1025, 4096, 100_000] {
            let groups = IdGroups::new(&vec![0; n], 0..1, "test").unwrap();
            let want = if n > piece_len(n) {
                n.div_ceil(piece_len(n))
            } else {
                0
            };
            assert_eq!(groups.piece_count(), want, "{n} positions");
            assert!(
                want <= most_pieces(n),
                "{n} positions: {want} > {}",
                most_pieces(n)
            );
        }
    }

    proptest! {
        #[test]
        fn every_position_lands_once_in_its_ids_run_and_pieces_tile_long_runs(
            vocab in 1usize..12,
            raw in proptest::collection::vec(0u32..1000, 0..3000),
            skew in 0u32..4,
        ) {
            // `skew` crowds ids towards 0, so some runs are long.
            let ids: Vec<u32> = raw.iter().map(|&r| (r >> (skew * 3)) % vocab as u32).collect();
            let groups = IdGroups::new(&ids, 0..vocab, "test").unwrap();
            let len = piece_len(ids.len());
            let mut seen = vec![false; ids.len()];
            for v in 0..vocab {
                let run = groups.run(v);
                prop_assert!(run.windows(2).all(|w| w[0] < w[1]));
                for &p in run {
                    prop_assert_eq!(ids[p as usize] as usize, v);
                    prop_assert!(!std::mem::replace(&mut seen[p as usize], true));
                }
                let pieces = groups.pieces_of(v);
                prop_assert_eq!(pieces.is_empty(), run.len() <= len);
                let joined: Vec<u32> =
                    pieces.clone().flat_map(|k| groups.piece(k).iter().copied()).collect();
                if !pieces.is_empty() {
                    prop_assert_eq!(&joined[..], run);
                    prop_assert!(pieces.clone().all(|k| (1..=len).contains(&groups.piece(k).len())));
                }
            }
            prop_assert!(seen.iter().all(|&s| s));
            prop_assert!(groups.piece_count() <= most_pieces(ids.len()));
        }

        #[test]
        fn rows_of_a_range_hold_their_ids_positions_alone(
            raw in proptest::collection::vec(0u32..20, 0..500),
            first in 0usize..20,
            len in 0usize..20,
        ) {
            let rows = first..(first + len).min(20);
            let groups = IdGroups::new(&raw, rows.clone(), "test").unwrap();
            let whole = IdGroups::new(&raw, 0..20, "test").unwrap();
            for (r, v) in rows.clone().enumerate() {
                prop_assert_eq!(groups.run(r), whole.run(v));
            }
            let inside = raw.iter().filter(|&&id| rows.contains(&(id as usize))).count();
            prop_assert_eq!(groups.positions().len(), inside);
        }
    }
}
