//! A tensor's entry in a GGUF file's header: its name, shape, type and where its data lies.

use super::GgufType;
use super::cursor::Cursor;

/// The most dimensions a ggml tensor has (`GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;

/// One tensor of a GGUF file.
///
/// GGUF stores dimensions innermost first (`ne[0]` is the length of a row); [`shape`] gives
/// them in row-major order, as PyTorch and Headroom do: `[rows, cols]` for a 2-D weight.
///
/// [`shape`]: TensorInfo::shape
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    name: String,
    shape: Vec<usize>,
    ty: GgufType,
    offset: u64,
    rows: usize,
    elements: usize,
    bytes: u64,
}

impl TensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The shape in row-major order, outermost first: the reverse of the file's `ne`.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// How its values are stored.
    pub fn ty(&self) -> GgufType {
        self.ty
    }

    /// Where its data starts, in bytes from the start of the file's data section.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How many bytes its data takes.
    pub fn n_bytes(&self) -> u64 {
        self.bytes
    }

    /// How many values it holds.
    pub fn n_elements(&self) -> usize {
        self.elements
    }

    /// The length of a row: the last dimension (1 for a scalar).
    pub fn row_len(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// How many rows it holds: the product of every dimension but the last.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The bytes of one row.
    pub(super) fn row_bytes(&self) -> usize {
        self.row_len() / self.ty.block_len() * self.ty.block_bytes()
    }
}

/// The fewest bytes a tensor's entry takes: an empty name, no dimensions, its type and offset.
pub(super) const MIN_ENTRY: usize = 8 + 4 + 4 + 8;

/// Reads the entry of tensor `name` after its name: the dimensions, the type and the offset,
/// checking that its rows are whole blocks and that its size fits in 64 bits.
pub(super) fn read_entry(cur: &mut Cursor<'_>, name: String) -> Result<TensorInfo, String> {
    let n_dims = cur.u32()?;
    if n_dims > MAX_DIMS {
        return Err(format!("{n_dims} dimensions, more than ggml's {MAX_DIMS}"));
    }
    let mut ne = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        ne.push(cur.u64()?);
    }
    let id = cur.u32()?;
    let ty = GgufType::from_id(id).ok_or_else(|| format!("unknown tensor type id {id}"))?;
    let offset = cur.u64()?;
    let too_big = || format!("dimensions {ne:?} (innermost first) overflow 64 bits");
    let row = ne.first().copied().unwrap_or(1);
    let mut rows: u64 = 1;
    for &n in ne.iter().skip(1) {
        rows = rows.checked_mul(n).ok_or_else(too_big)?;
    }
    let (block_len, block_bytes) = (ty.block_len() as u64, ty.block_bytes() as u64);
    if row % block_len != 0 {
        return Err(format!(
            "rows of {row} values are not whole blocks of {block_len} ({ty})"
        ));
    }
    let elements = rows.checked_mul(row).ok_or_else(too_big)?;
    let bytes = (row / block_len)
        .checked_mul(block_bytes)
        .and_then(|row_bytes| row_bytes.checked_mul(rows))
        .ok_or_else(too_big)?;
    let as_usize = |n: u64| usize::try_from(n).map_err(|_| too_big());
    let shape = ne
        .iter()
        .rev()
        .map(|&n| as_usize(n))
        .collect::<Result<Vec<_>, _>>()?;
    let (rows, elements) = (as_usize(rows)?, as_usize(elements)?);
    as_usize(bytes)?;
    Ok(TensorInfo {
        name,
        shape,
        ty,
        offset,
        rows,
        elements,
        bytes,
    })
}
