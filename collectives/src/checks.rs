//! The arguments every backend checks the same way before a collective runs.

use headroom_kernels::Array;

use headroom_kernels::DType;

use crate::{Error, ReduceOp, Result};

/// Which side of a collective holds one chunk per rank.
#[derive(Clone, Copy)]
pub(crate) enum Chunks {
    /// The input (reduce-scatter).
    Input,
    /// The output (all-gather).
    Output,
}

/// Fails unless `input` and `output` share dtype and device and the side that `whole` names
/// holds `world` chunks of the other's size.
pub(crate) fn chunked(
    op: &'static str,
    input: &Array,
    output: &Array,
    whole: Chunks,
    world: usize,
) -> Result<()> {
    let bad = |detail: String| Err(Error::Argument { op, detail });
    if input.dtype() != output.dtype() {
        return bad(format!(
            "the input holds {} and the output {}",
            input.dtype(),
            output.dtype()
        ));
    }
    if !input.device().same(output.device()) {
        return bad(format!(
            "the input is on {} and the output on {}",
            input.device(),
            output.device()
        ));
    }
    let (all, all_name, one, one_name) = match whole {
        Chunks::Input => (input.numel(), "input", output.numel(), "output"),
        Chunks::Output => (output.numel(), "output", input.numel(), "input"),
    };
    if one.checked_mul(world) != Some(all) {
        return bad(format!(
            "the {all_name}'s {all} elements are not {world} chunks (one per rank) of the \
             {one_name}'s {one}"
        ));
    }
    Ok(())
}

/// Fails unless `root` is a rank of a world of `world`.
pub(crate) fn root(op: &'static str, root: usize, world: usize) -> Result<()> {
    if root >= world {
        return Err(Error::Argument {
            op,
            detail: format!("root {root} is not a rank of a world of {world}"),
        });
    }
    Ok(())
}

/// Fails where `op` has no meaning for `dtype`: the mean of integers is no integer.
pub(crate) fn reducible(name: &'static str, op: ReduceOp, dtype: DType) -> Result<()> {
    let integer = matches!(dtype, DType::U32 | DType::I32 | DType::U8);
    if op == ReduceOp::Avg && integer {
        return Err(Error::Argument {
            op: name,
            detail: format!("the mean of {dtype} values is not a {dtype}: sum them instead"),
        });
    }
    Ok(())
}
