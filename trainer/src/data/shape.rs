//! What a dataset's samples look like: named arrays (ids, features, labels, masks), each of one
//! dtype and one shape in every sample, in the order a sample gives them. The built-in kinds
//! are two instances of it: token sequences ([`INPUTS`] and [`TARGETS`], U32 `[len]` each, ids
//! below the vocabulary) and feature vectors ([`INPUTS`] F32 `[dim]`, [`TARGETS`] a U32 class
//! below the number of classes).

use std::fmt;

use headroom_kernels::DType;

use super::device_batch::{INPUTS, STARTS, TARGETS, repeated};
use crate::error::{Error, Result};

/// One named array of every sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The array's name, by which a model's loss reads it.
    pub name: String,
    /// Its dtype.
    pub dtype: DType,
    /// Its shape in one sample (`[]` for a single value); a batch adds the samples in front.
    pub dims: Vec<usize>,
    /// For ids and classes: every value is below this (the vocabulary, the classes).
    pub bound: Option<usize>,
}

impl Field {
    /// An array named `name` of `dtype` and shape `dims` in each sample.
    pub fn new(name: impl Into<String>, dtype: DType, dims: &[usize]) -> Self {
        Self {
            name: name.into(),
            dtype,
            dims: dims.to_vec(),
            bound: None,
        }
    }

    /// The same, its values ids or classes below `bound`.
    pub fn below(self, bound: usize) -> Self {
        Self {
            bound: Some(bound),
            ..self
        }
    }

    /// Elements in one sample.
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {:?}", self.name, self.dtype, self.dims)?;
        match self.bound {
            Some(bound) => write!(f, " below {bound}"),
            None => Ok(()),
        }
    }
}

/// Token sequences: `len` tokens below `vocab`, a target per position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenShape {
    /// Distinct tokens.
    pub vocab: usize,
    /// Tokens per sample.
    pub len: usize,
}

/// Feature vectors: `dim` features, one class below `classes` per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureShape {
    /// Features per sample.
    pub dim: usize,
    /// Distinct classes.
    pub classes: usize,
}

/// The arrays of every sample of a dataset: at least one, no name twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataShape {
    fields: Vec<Field>,
}

impl DataShape {
    /// Samples of these arrays; none, or a name given twice, is an error.
    pub fn new(fields: Vec<Field>) -> Result<Self> {
        if fields.is_empty() {
            return Err(Error::config("data: a sample holds at least one array"));
        }
        if let Some(name) = repeated(&fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>()) {
            return Err(Error::config(format!(
                "data: a sample names `{name}` twice"
            )));
        }
        Ok(Self { fields })
    }

    /// Token sequences of `len` ids below `vocab`, with the next token at each position as
    /// the targets ([`IGNORE`](super::IGNORE) where not scored).
    pub fn tokens(vocab: usize, len: usize) -> Self {
        let ids = |name| Field::new(name, DType::U32, &[len]).below(vocab);
        Self {
            fields: vec![ids(INPUTS), ids(TARGETS)],
        }
    }

    /// Token sequences as [`tokens`](Self::tokens) gives them, several documents packed in
    /// each, with [`STARTS`]: each position's document's first position.
    pub fn packed_tokens(vocab: usize, len: usize) -> Self {
        let mut shape = Self::tokens(vocab, len);
        shape
            .fields
            .push(Field::new(STARTS, DType::U32, &[len]).below(len));
        shape
    }

    /// True where the samples pack several documents and say where each starts ([`STARTS`]).
    pub fn has_starts(&self) -> bool {
        self.field(STARTS).is_some()
    }

    /// Vectors of `dim` features, each of one class below `classes`.
    pub fn features(dim: usize, classes: usize) -> Self {
        Self {
            fields: vec![
                Field::new(INPUTS, DType::F32, &[dim]),
                Field::new(TARGETS, DType::U32, &[]).below(classes),
            ],
        }
    }

    /// The arrays, in the order a sample gives them.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The array named `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The token sequences these samples are, if they are ([`tokens`](Self::tokens), or
    /// [`packed_tokens`](Self::packed_tokens)).
    pub fn as_tokens(&self) -> Option<TokenShape> {
        let inputs = self.fields.first()?;
        let shape = TokenShape {
            vocab: inputs.bound?,
            len: *inputs.dims.first()?,
        };
        let (vocab, len) = (shape.vocab, shape.len);
        (*self == Self::tokens(vocab, len) || *self == Self::packed_tokens(vocab, len))
            .then_some(shape)
    }

    /// The feature vectors these samples are, if they are ([`features`](Self::features)).
    pub fn as_features(&self) -> Option<FeatureShape> {
        let [inputs, targets] = self.fields.as_slice() else {
            return None;
        };
        let shape = FeatureShape {
            dim: *inputs.dims.first()?,
            classes: targets.bound?,
        };
        (*self == Self::features(shape.dim, shape.classes)).then_some(shape)
    }
}

impl fmt::Display for DataShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{field}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_kinds_are_recognized_and_nothing_else_is() {
        let tokens = DataShape::tokens(13, 9);
        assert_eq!(tokens.as_tokens(), Some(TokenShape { vocab: 13, len: 9 }));
        assert_eq!(tokens.as_features(), None);
        let features = DataShape::features(8, 4);
        let want = FeatureShape { dim: 8, classes: 4 };
        assert_eq!(features.as_features(), Some(want));
        assert_eq!(features.as_tokens(), None);
        assert_eq!(
            features.to_string(),
            "inputs f32 [8], targets u32 [] below 4"
        );
        let with_mask = DataShape::new(vec![
            Field::new(INPUTS, DType::U32, &[9]).below(13),
            Field::new(TARGETS, DType::U32, &[9]).below(13),
            Field::new("mask", DType::U8, &[9]),
        ])
        .unwrap();
        assert_eq!(with_mask.as_tokens(), None);
        let packed = DataShape::packed_tokens(13, 9);
        assert_eq!(packed.as_tokens(), Some(TokenShape { vocab: 13, len: 9 }));
        assert!(packed.has_starts() && !tokens.has_starts());
        assert_eq!(with_mask.field("mask").unwrap().numel(), 9);
    }

    #[test]
    fn no_arrays_or_a_name_twice_is_an_error() {
        assert!(DataShape::new(Vec::new()).is_err());
        let twice = vec![
            Field::new("a", DType::F32, &[2]),
            Field::new("a", DType::U32, &[]),
        ];
        let err = DataShape::new(twice).unwrap_err().to_string();
        assert!(err.contains("`a` twice"), "{err}");
    }
}
