//! A character-level text file: every character a token, samples are consecutive windows, the
//! last tenth held out. A run keeps the characters as its tokenizer, to generate from.

use std::path::Path;

use super::{DataShape, Dataset, Sample};
use crate::error::{Error, Result};

/// Windows of `context` characters of a text, each predicting the next character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharText {
    /// The distinct characters, sorted: token `i` is `vocab[i]`.
    pub vocab: Vec<char>,
    tokens: Vec<u32>,
    context: usize,
}

impl CharText {
    /// Reads `path` (UTF-8) and splits it into training text and the held-out last tenth.
    pub fn read(path: &Path, context: usize) -> Result<(Self, Self)> {
        let text = std::fs::read_to_string(path).map_err(|err| Error::Data {
            path: path.to_owned(),
            detail: format!("cannot read the text: {err}"),
        })?;
        let mut vocab: Vec<char> = text.chars().collect();
        vocab.sort_unstable();
        vocab.dedup();
        let tokens: Vec<u32> = text
            .chars()
            .map(|c| vocab.binary_search(&c).unwrap_or(0) as u32)
            .collect();
        let split = tokens.len() - tokens.len() / 10;
        let (train, eval) = tokens.split_at(split);
        for (part, name) in [(train, "training"), (eval, "held-out")] {
            if part.len() <= context {
                return Err(Error::Data {
                    path: path.to_owned(),
                    detail: format!(
                        "{} characters leave the {name} part ({} characters) no window of {} \
                         and its next character",
                        tokens.len(),
                        part.len(),
                        context
                    ),
                });
            }
        }
        let make = |tokens: &[u32]| Self {
            vocab: vocab.clone(),
            tokens: tokens.to_vec(),
            context,
        };
        Ok((make(train), make(eval)))
    }
}

impl Dataset for CharText {
    fn len(&self) -> usize {
        (self.tokens.len() - 1) / self.context
    }

    fn shape(&self) -> DataShape {
        DataShape::tokens(self.vocab.len(), self.context)
    }

    fn sample(&self, index: usize) -> Result<Sample> {
        let start = index * self.context;
        Ok(Sample::tokens(
            self.tokens[start..start + self.context].to_vec(),
            self.tokens[start + 1..start + self.context + 1].to_vec(),
        ))
    }

    fn characters(&self) -> Option<&[char]> {
        Some(&self.vocab)
    }
}
