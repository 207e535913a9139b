//! An operand as a backward rule keeps it: held from the forward pass, or formed again when the
//! rule runs ([`Again`]).

use headroom_kernels::{Array, DType};

use crate::again::Again;
use crate::error::Result;
use crate::tensor::Tensor;

/// An operand as a backward rule keeps it: its array, or the way to form it again.
pub(crate) enum Kept {
    /// Held from the forward pass.
    Held(Array),
    /// Formed again when the rule runs, of this dtype.
    Again(Again, DType),
}

impl Kept {
    /// How a rule keeps `t`: formed again where `t` says how, held otherwise.
    pub(crate) fn of(t: &Tensor) -> Self {
        match t.again() {
            Some(again) => Kept::Again(again.clone(), t.dtype()),
            None => Kept::Held(t.array().clone()),
        }
    }

    /// The array it holds, if it holds one (for the tape's account).
    pub(crate) fn held(&self) -> Option<&Array> {
        match self {
            Kept::Held(array) => Some(array),
            Kept::Again(..) => None,
        }
    }

    /// Its values: the array held, or formed again.
    pub(crate) fn array(&self) -> Result<Array> {
        match self {
            Kept::Held(array) => Ok(array.clone()),
            Kept::Again(again, ..) => again.form(),
        }
    }

    /// Its dtype.
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Kept::Held(array) => array.dtype(),
            Kept::Again(_, dtype) => *dtype,
        }
    }
}
