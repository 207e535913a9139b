//! Kernel arguments: the C types a launch passes, and the strided walk through an array that
//! the broadcast and gather kernels take by value.

use cudarc::driver::DeviceRepr;

use crate::buffer::Buffer;
use crate::error::{Error, Result};

/// One kernel argument, of the C type its kernel declares.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    /// A pointer (a device address) or a `u64` size.
    U64(u64),
    /// An `unsigned int`.
    U32(u32),
    /// An `int`.
    I32(i32),
    /// A `double`.
    F64(f64),
    /// A [`Walk`] by value.
    Walk(Box<Walk>),
}

impl From<u64> for Arg {
    fn from(v: u64) -> Self {
        Arg::U64(v)
    }
}

impl From<usize> for Arg {
    fn from(v: usize) -> Self {
        Arg::U64(v as u64)
    }
}

impl From<u32> for Arg {
    fn from(v: u32) -> Self {
        Arg::U32(v)
    }
}

impl From<i32> for Arg {
    fn from(v: i32) -> Self {
        Arg::I32(v)
    }
}

impl From<bool> for Arg {
    fn from(v: bool) -> Self {
        Arg::I32(i32::from(v))
    }
}

impl From<f64> for Arg {
    fn from(v: f64) -> Self {
        Arg::F64(v)
    }
}

impl From<&Buffer> for Arg {
    fn from(buffer: &Buffer) -> Self {
        Arg::U64(buffer.addr())
    }
}

impl From<&mut Buffer> for Arg {
    fn from(buffer: &mut Buffer) -> Self {
        Arg::U64(buffer.addr())
    }
}

impl From<Walk> for Arg {
    fn from(walk: Walk) -> Self {
        Arg::Walk(Box::new(walk))
    }
}

impl Arg {
    /// The C type this argument is passed as, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Arg::U64(_) => "a 64-bit integer or pointer",
            Arg::U32(_) => "an unsigned int",
            Arg::I32(_) => "an int",
            Arg::F64(_) => "a double",
            Arg::Walk(_) => "a struct Walk",
        }
    }
}

/// The most dimensions a strided kernel walks (`MAX_DIMS` in `prelude.cuh`).
pub(crate) const MAX_DIMS: usize = 8;

/// The walk of one operand through an array's dimensions: `struct Walk` of `prelude.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walk {
    dims: [u64; MAX_DIMS],
    strides: [u64; MAX_DIMS],
    rank: u32,
}

// SAFETY: `Walk` is `#[repr(C)]` plain data laid out as the C struct the kernels declare (two
// arrays of eight u64, then a u32, padded to 8 bytes), so passing its bytes by value is sound.
unsafe impl DeviceRepr for Walk {}

impl Walk {
    /// The length of the innermost dimension when its elements are contiguous (stride 1),
    /// else 0.
    pub(crate) fn contiguous_run(&self) -> u64 {
        match self.rank as usize {
            0 => 0,
            rank if self.strides[rank - 1] == 1 => self.dims[rank - 1],
            _ => 0,
        }
    }

    /// The strides of the dimensions walked.
    pub(crate) fn strides(&self) -> &[u64] {
        &self.strides[..self.rank as usize]
    }

    /// The walk in units of `per` elements: its innermost dimension a contiguous run, and the
    /// run and every other stride multiples of `per`.
    pub(crate) fn in_units(mut self, per: u64) -> Walk {
        let rank = self.rank as usize;
        if rank > 0 {
            self.dims[rank - 1] /= per;
            for stride in &mut self.strides[..rank - 1] {
                *stride /= per;
            }
        }
        self
    }

    /// The walks of operands through the same `dims`, one list of strides each, with
    /// dimensions of size 1 dropped and neighbours merged wherever every operand steps through
    /// the pair as through one dimension: fewer divisions per element, and any rank that merges
    /// down to [`MAX_DIMS`] runs. Beyond that, an argument error for `op`.
    pub(crate) fn merged<const K: usize>(
        dims: &[usize],
        strides: [&[usize]; K],
        op: &'static str,
    ) -> Result<[Walk; K]> {
        if let Some(bad) = strides.iter().find(|s| s.len() != dims.len()) {
            return Err(Error::Argument {
                op,
                detail: format!("{} strides for {} dimensions", bad.len(), dims.len()),
            });
        }
        let mut kept_dims: Vec<u64> = Vec::with_capacity(dims.len());
        let mut kept: [Vec<u64>; K] = std::array::from_fn(|_| Vec::with_capacity(dims.len()));
        for (axis, &d) in dims.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let step = |k: usize| strides[k][axis] as u64;
            // The dimension kept last and this one walk as one where every operand's stride
            // there is this one's stride times this one's size.
            let joins = (0..K).all(|k| kept[k].last() == Some(&(step(k) * d as u64)));
            match kept_dims.last_mut() {
                Some(last) if joins => {
                    *last *= d as u64;
                    for (k, list) in kept.iter_mut().enumerate() {
                        list.pop();
                        list.push(step(k));
                    }
                }
                _ => {
                    kept_dims.push(d as u64);
                    for (k, list) in kept.iter_mut().enumerate() {
                        list.push(step(k));
                    }
                }
            }
        }
        if kept_dims.len() > MAX_DIMS {
            return Err(Error::Argument {
                op,
                detail: format!(
                    "CUDA kernels walk at most {MAX_DIMS} dimensions; {} dimensions merge down to {} and no further",
                    dims.len(),
                    kept_dims.len()
                ),
            });
        }
        Ok(std::array::from_fn(|k| {
            let mut walk = Walk {
                dims: [1; MAX_DIMS],
                strides: [0; MAX_DIMS],
                rank: kept_dims.len() as u32,
            };
            walk.dims[..kept_dims.len()].copy_from_slice(&kept_dims);
            walk.strides[..kept_dims.len()].copy_from_slice(&kept[k]);
            walk
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(walk: &Walk) -> (Vec<u64>, Vec<u64>) {
        let rank = walk.rank as usize;
        (walk.dims[..rank].to_vec(), walk.strides[..rank].to_vec())
    }

    #[test]
    fn contiguous_runs_merge_and_unit_dimensions_drop() {
        // a: a contiguous [2, 3, 4]; b: broadcast along the middle axis.
        let [a, b] = Walk::merged(&[2, 1, 3, 4], [&[12, 12, 4, 1], &[4, 0, 0, 1]], "t").unwrap();
        assert_eq!(parts(&a), (vec![2, 3, 4], vec![12, 4, 1]));
        assert_eq!(parts(&b), (vec![2, 3, 4], vec![4, 0, 1]));
        let [alone] = Walk::merged(&[2, 1, 3, 4], [&[12, 12, 4, 1]], "t").unwrap();
        assert_eq!(parts(&alone), (vec![24], vec![1]));
        let [scalar] = Walk::merged(&[1, 1], [&[0, 0]], "t").unwrap();
        assert_eq!(parts(&scalar), (vec![], vec![]));
    }

    #[test]
    fn a_high_rank_walk_runs_when_it_merges_down_and_fails_when_it_does_not() {
        let dims = [2usize; 12];
        let contiguous: Vec<usize> = (0..12).rev().map(|axis| 1 << axis).collect();
        let [walk] = Walk::merged(&dims, [&contiguous], "t").unwrap();
        assert_eq!(parts(&walk), (vec![4096], vec![1]));
        // Every other axis transposed with its neighbour: nothing merges.
        let mut swapped = contiguous.clone();
        for pair in swapped.chunks_mut(2) {
            pair.swap(0, 1);
        }
        let err = Walk::merged(&dims, [&swapped], "permute").unwrap_err();
        assert!(err.to_string().contains("at most 8 dimensions"), "{err}");
        let err = Walk::merged(&[2, 3], [&[3]], "t").unwrap_err();
        assert!(
            err.to_string().contains("1 strides for 2 dimensions"),
            "{err}"
        );
    }
}
