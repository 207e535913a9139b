//! What the tape keeps for the backward pass, op by op: every recorded op names the arrays its
//! backward rule holds, and [`crate::Tape::saved`] gives the account. Several ops may hold one
//! buffer (a layer's input feeds three projections; a view shares its source's memory), so
//! totals count each buffer once, for the first op that saved it.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use headroom_alloc::{Tag, format_bytes};
use headroom_kernels::{Array, DType, Shape};
use smallvec::SmallVec;

/// One array an op's backward rule holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedArray {
    /// Its shape.
    pub shape: Shape,
    /// Its element type.
    pub dtype: DType,
    /// Bytes its buffer costs the device (the allocator's reservation).
    pub bytes: usize,
    /// What its buffer was allocated as: activations of a kind of layer, parameters, and so on.
    pub tag: Tag,
    /// Its buffer's address: entries with one address share memory.
    pub addr: u64,
}

/// The arrays one op saved, as [`SavedArray`]s.
pub(crate) type Saved = SmallVec<[SavedArray; 4]>;

/// The account of `arrays`, for [`crate::tape`]'s `finish`.
pub(crate) fn saves(arrays: &[&Array]) -> Saved {
    arrays
        .iter()
        .map(|a| SavedArray {
            shape: a.shape().clone(),
            dtype: a.dtype(),
            bytes: a.buffer().reserved_bytes(),
            tag: a.buffer().tag(),
            addr: a.buffer().addr(),
        })
        .collect()
}

/// What one recorded op saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpSaved {
    /// The op's name (`"matmul"`, `"layer_norm"`, `"attention"`, ...).
    pub op: &'static str,
    /// The arrays its backward rule holds.
    pub arrays: Vec<SavedArray>,
}

/// What a tape holds for its backward pass: its ops in the order they ran, each with what it
/// saved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedReport {
    /// One entry per op not yet run backwards.
    pub ops: Vec<OpSaved>,
}

impl SavedReport {
    /// Each saved buffer once, with the op that saved it first.
    fn distinct(&self) -> impl Iterator<Item = (&'static str, &SavedArray)> {
        let mut seen = HashSet::new();
        self.ops.iter().flat_map(move |op| {
            let fresh: Vec<_> = op
                .arrays
                .iter()
                .filter(|a| seen.insert(a.addr))
                .map(|a| (op.op, a))
                .collect();
            fresh
        })
    }

    /// Bytes the saved buffers hold, each buffer once.
    pub fn bytes(&self) -> usize {
        self.distinct().map(|(_, a)| a.bytes).sum()
    }

    /// Bytes the saved activations hold (buffers tagged as activations), each buffer once:
    /// what the forward pass keeps beyond the model.
    pub fn activation_bytes(&self) -> usize {
        self.distinct()
            .filter(|(_, a)| a.tag.is_activations())
            .map(|(_, a)| a.bytes)
            .sum()
    }

    /// Bytes per tag, each buffer once, largest first.
    pub fn bytes_by_tag(&self) -> Vec<(Tag, usize)> {
        let mut by = BTreeMap::<usize, (Tag, usize)>::new();
        for (_, a) in self.distinct() {
            by.entry(a.tag.index()).or_insert((a.tag, 0)).1 += a.bytes;
        }
        largest_first(by.into_values().collect())
    }

    /// Bytes of saved activations per op name, each buffer counted for the first op that
    /// saved it, largest first: which ops make the forward pass's memory.
    pub fn activation_bytes_by_op(&self) -> Vec<(&'static str, usize)> {
        let mut by = BTreeMap::<&'static str, usize>::new();
        for (op, a) in self.distinct().filter(|(_, a)| a.tag.is_activations()) {
            *by.entry(op).or_default() += a.bytes;
        }
        largest_first(by.into_iter().collect())
    }
}

/// `entries` sorted by bytes, largest first.
fn largest_first<K>(mut entries: Vec<(K, usize)>) -> Vec<(K, usize)> {
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    entries
}

impl fmt::Display for SavedReport {
    /// The activation bytes saved by each kind of op, and the bytes in each tag, each buffer
    /// once.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} ops saved {} ({} of activations)",
            self.ops.len(),
            format_bytes(self.bytes() as u64),
            format_bytes(self.activation_bytes() as u64)
        )?;
        for (op, bytes) in self.activation_bytes_by_op() {
            writeln!(f, "  {op:<32} {:>12}", format_bytes(bytes as u64))?;
        }
        for (tag, bytes) in self.bytes_by_tag() {
            writeln!(
                f,
                "  in {:<29} {:>12}",
                tag.name(),
                format_bytes(bytes as u64)
            )?;
        }
        Ok(())
    }
}
