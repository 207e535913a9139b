//! Packed documents: several sequences in one row, each attending only to itself and with
//! positions that restart at 0. A row's layout is its document starts, a `[batch, len]` U32
//! array: `starts[b][i]` is the index within row `b` of the first token of position `i`'s
//! document, so a document begins where `starts[b][i] == i`. Position `i` sees keys `j` with
//! `starts[b][i] <= j <= i`, and its position within its document is `i - starts[b][i]`.
//!
//! The CPU kernels check the starts ([`check_starts`]); the CUDA kernels take them as they are
//! (a start past its position reads keys that are not there), so whoever builds them on the
//! host checks them there.

use crate::error::{Error, Result};

/// Fails unless `starts` (`batch * len` values, row-major) is a layout of documents: in each
/// row `starts[0] == 0`, and every later `starts[i]` is `i` (a new document) or
/// `starts[i - 1]` (the same document as the position before).
///
/// ```
/// use headroom_kernels::ops::documents::check_starts;
/// assert!(check_starts(&[0, 0, 2, 2, 2], (1, 5), "pack").is_ok());
/// assert!(check_starts(&[0, 0, 1], (1, 3), "pack").is_err()); // 1 starts no document at 1
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn check_starts(starts: &[u32], (batch, len): (usize, usize), op: &'static str) -> Result<()> {
    if starts.len() != batch * len {
        return Err(Error::Shape {
            op,
            detail: format!(
                "{} document starts for [{batch}, {len}] positions",
                starts.len()
            ),
        });
    }
    for (b, row) in starts.chunks(len.max(1)).enumerate() {
        for (i, &start) in row.iter().enumerate() {
            let start = start as usize;
            let previous = i.checked_sub(1).map(|p| row[p] as usize);
            if start == i || Some(start) == previous {
                continue;
            }
            let detail = match previous {
                _ if start > i => format!(
                    "starts[{b}][{i}] = {start} is past its position {i}: a document starts \
                     at or before each of its positions"
                ),
                Some(p) => format!(
                    "starts[{b}][{i}] = {start}: position {i} either starts a document ({i}) \
                     or continues the one of position {} ({p})",
                    i - 1
                ),
                None => format!("starts[{b}][0] = {start}: a row's first document starts at 0"),
            };
            return Err(Error::Argument { op, detail });
        }
    }
    Ok(())
}

/// One past the last position of each position's document, for one row of valid starts.
pub(crate) fn document_ends(starts: &[u32]) -> Vec<usize> {
    let len = starts.len();
    let mut ends = vec![len; len];
    for i in (0..len.saturating_sub(1)).rev() {
        ends[i] = match starts[i + 1] as usize == i + 1 {
            true => i + 1,
            false => ends[i + 1],
        };
    }
    ends
}
