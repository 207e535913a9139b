//! Conversations placed into training windows: packed (whole conversations in order, as many
//! as fit, a new window when the next does not) or one a window; and a window's arrays built
//! from its conversations.

use std::ops::Range;

use crate::data::IGNORE;
use crate::data::shards::SCORED;

/// A window: the conversations it holds, by index.
pub type Window = Range<usize>;

/// Windows of `context` tokens packed greedily, in order, from conversations of `lengths`
/// tokens; a conversation longer than the context fills a window alone (truncated).
pub fn pack(lengths: &[usize], context: usize) -> Vec<Window> {
    let mut windows = Vec::new();
    let mut start = 0;
    let mut used = 0;
    for (at, &len) in lengths.iter().enumerate() {
        let len = len.min(context);
        if at > start && used + len > context {
            windows.push(start..at);
            start = at;
            used = 0;
        }
        used += len;
    }
    if start < lengths.len() {
        windows.push(start..lengths.len());
    }
    windows
}

/// One window a conversation, for `count` conversations.
pub fn one_each(count: usize) -> Vec<Window> {
    (0..count).map(|at| at..at + 1).collect()
}

/// A window's arrays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowArrays {
    /// The ids, padded to the context.
    pub inputs: Vec<u32>,
    /// The next token where it is scored and in the same conversation, else [`IGNORE`].
    pub targets: Vec<u32>,
    /// Each position's conversation's first position in the window (padding is a document of
    /// its own).
    pub starts: Vec<u32>,
}

/// The arrays of a window of `context` positions holding `conversations` (each its ids and
/// flags, truncated to what fits), padded with `pad`.
pub fn assemble(conversations: &[(Vec<u32>, Vec<u8>)], context: usize, pad: u32) -> WindowArrays {
    let mut arrays = WindowArrays {
        inputs: Vec::with_capacity(context),
        targets: Vec::with_capacity(context),
        starts: Vec::with_capacity(context),
    };
    for (ids, flags) in conversations {
        let start = arrays.inputs.len();
        let len = ids.len().min(context - start);
        for at in 0..len {
            arrays.inputs.push(ids[at]);
            let next_scored = at + 1 < len && flags[at + 1] & SCORED != 0;
            arrays
                .targets
                .push(if next_scored { ids[at + 1] } else { IGNORE });
            arrays.starts.push(start as u32);
        }
    }
    let padding = arrays.inputs.len();
    arrays.inputs.resize(context, pad);
    arrays.targets.resize(context, IGNORE);
    arrays.starts.resize(context, padding as u32);
    arrays
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversations_pack_in_order_and_a_long_one_fills_a_window() {
        assert_eq!(pack(&[3, 4, 2, 9, 1], 8), vec![0..2, 2..3, 3..4, 4..5]);
        assert_eq!(pack(&[2, 2, 2, 2], 8), vec![0..4]);
        assert_eq!(pack(&[], 8), Vec::<Window>::new());
        assert_eq!(one_each(2), vec![0..1, 1..2]);
    }

    #[test]
    fn targets_stay_inside_their_conversation_and_padding_is_its_own_document() {
        let s = SCORED;
        let a = (vec![10, 11, 12], vec![2, s, s]);
        let b = (vec![20, 21], vec![2, s]);
        let window = assemble(&[a, b], 7, 0);
        assert_eq!(window.inputs, [10, 11, 12, 20, 21, 0, 0]);
        let i = IGNORE;
        assert_eq!(window.targets, [11, 12, i, 21, i, i, i]);
        assert_eq!(window.starts, [0, 0, 0, 3, 3, 5, 5]);
        let long = (vec![1, 2, 3, 4], vec![2, 0, s, s]);
        let cut = assemble(&[long], 3, 0);
        assert_eq!(cut.inputs, [1, 2, 3]);
        assert_eq!(cut.targets, [i, 3, i]);
        assert_eq!(cut.starts, [0, 0, 0]);
    }
}
