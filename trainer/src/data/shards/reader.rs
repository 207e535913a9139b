//! A token shard opened for reading: memory-mapped, its header, every token and the tokens'
//! checksum checked once when it opens, so a damaged shard is an error naming the file, never
//! a wrong sample.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::header::{HEADER_BYTES, ShardHeader};
use crate::error::{Error, Result};

/// A shard's tokens, mapped from its file.
#[derive(Debug)]
pub struct ShardFile {
    path: PathBuf,
    /// What its header says; its `tokens` tokens follow the header in the map.
    header: ShardHeader,
    /// The whole file: the header, then `header.tokens` little-endian tokens of
    /// `header.token_bytes` bytes, each below `header.vocab`.
    map: Mmap,
}

impl ShardFile {
    /// Maps the shard at `path` and checks its header, its length, its tokens and their
    /// checksum.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(Error::io(path))?;
        // SAFETY: shards are written whole under a temporary name and renamed into place, and
        // never modified afterwards; the map is read-only. Another process truncating the file
        // while it is mapped is outside what Headroom supports (as with any mapped file).
        let map = unsafe { Mmap::map(&file) }.map_err(Error::io(path))?;
        let data = |detail: String| Error::Data {
            path: path.to_owned(),
            detail,
        };
        let header = ShardHeader::parse(&map, map.len() as u64).map_err(data)?;
        let shard = Self {
            path: path.to_owned(),
            header,
            map,
        };
        if let Some((at, token)) = shard.first_out_of_range() {
            return Err(data(format!(
                "token {at} is {token}, outside the vocabulary of {} its header gives",
                header.vocab
            )));
        }
        header.check(&shard.map[HEADER_BYTES..]).map_err(data)?;
        Ok(shard)
    }

    /// Its header.
    pub fn header(&self) -> &ShardHeader {
        &self.header
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokens in it.
    pub fn len(&self) -> usize {
        self.header.tokens as usize
    }

    /// True without tokens.
    pub fn is_empty(&self) -> bool {
        self.header.tokens == 0
    }

    /// Tokens `start..start + count` (which must lie in the shard).
    pub fn tokens(&self, start: usize, count: usize) -> Vec<u32> {
        let width = self.header.token_bytes;
        let bytes = &self.map[HEADER_BYTES + start * width..HEADER_BYTES + (start + count) * width];
        decode(bytes, width)
    }

    /// The flags of tokens `start..start + count` (which must lie in the shard), where the
    /// shard has a flags section.
    pub fn flags(&self, start: usize, count: usize) -> Option<&[u8]> {
        let at = HEADER_BYTES + self.len() * self.header.token_bytes;
        self.header
            .token_flags
            .then(|| &self.map[at + start..at + start + count])
    }

    /// The first token not below the vocabulary, with its index.
    fn first_out_of_range(&self) -> Option<(usize, u32)> {
        let width = self.header.token_bytes;
        let vocab = self.header.vocab;
        self.map[HEADER_BYTES..HEADER_BYTES + self.len() * width]
            .chunks(width * 4096)
            .enumerate()
            .find_map(|(chunk, bytes)| {
                let tokens = decode(bytes, width);
                let at = tokens.iter().position(|&t| u64::from(t) >= vocab)?;
                Some((chunk * 4096 + at, tokens[at]))
            })
    }
}

/// Little-endian tokens of `width` bytes.
fn decode(bytes: &[u8], width: usize) -> Vec<u32> {
    match width {
        2 => bytes
            .chunks_exact(2)
            .map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])))
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    }
}

/// `tokens` as little-endian bytes of `width` (2 or 4) each.
pub fn encode(tokens: &[u32], width: usize) -> Vec<u8> {
    match width {
        2 => tokens
            .iter()
            .flat_map(|&t| (t as u16).to_le_bytes())
            .collect(),
        _ => tokens.iter().flat_map(|&t| t.to_le_bytes()).collect(),
    }
}
