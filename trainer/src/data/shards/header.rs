//! The header of a token shard: 64 bytes, little-endian, before the tokens.
//!
//! | bytes  | field                                                     |
//! | ------ | --------------------------------------------------------- |
//! | 0..8   | the magic `HRTOKENS`                                      |
//! | 8..12  | the format version, [`VERSION`]                           |
//! | 12..16 | bytes per token: 2 (u16) or 4 (u32)                       |
//! | 16..24 | the vocabulary size: every token is below it              |
//! | 24..32 | the tokenizer's hash (FNV-1a of its `tokenizer.json`)     |
//! | 32..40 | the hash of the shard's sources (names and sizes)         |
//! | 40..48 | the number of tokens                                      |
//! | 48..52 | the CRC-32 of every byte after the header                 |
//! | 52..56 | sections after the tokens: bit 0, a flags byte per token  |
//! | 56..64 | zero                                                      |
//!
//! A chat shard has the flags section: one byte per token after the tokens, [`SCORED`] where
//! the token is a target the loss scores, [`STARTS_CONVERSATION`] where a conversation begins.
//! Version 2 (no sections) still reads.

/// The first bytes of every shard.
pub const MAGIC: &[u8; 8] = b"HRTOKENS";

/// The format version this code writes (2 added the checksum, 3 the flags section).
pub const VERSION: u32 = 3;

/// The oldest version this code reads.
const OLDEST: u32 = 2;

/// A token's flag: the loss scores it (it is the target of the position before it).
pub const SCORED: u8 = 1;

/// A token's flag: a conversation begins at it.
pub const STARTS_CONVERSATION: u8 = 2;

/// The header's bit for the flags section.
const FLAGS_SECTION: u32 = 1;

/// Bytes before the first token.
pub const HEADER_BYTES: usize = 64;

/// What a shard's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardHeader {
    /// Bytes per token: 2 when the vocabulary fits in a u16, else 4.
    pub token_bytes: usize,
    /// Every token is below it.
    pub vocab: u64,
    /// The FNV-1a hash of the tokenizer's `tokenizer.json`.
    pub tokenizer_hash: u64,
    /// The hash of the names and sizes of the files tokenized into the shard: a re-run keeps a
    /// shard only when its sources are the same.
    pub sources_hash: u64,
    /// Tokens in the shard.
    pub tokens: u64,
    /// The CRC-32 of the bytes after the header (tokens and flags): a token changed since the
    /// shard was written is found.
    pub checksum: u32,
    /// A flags byte per token follows the tokens ([`SCORED`], [`STARTS_CONVERSATION`]).
    pub token_flags: bool,
}

impl ShardHeader {
    /// The width of tokens below `vocab`: 2 bytes up to 65,536 distinct tokens, else 4.
    pub fn token_bytes_for(vocab: u64) -> usize {
        if vocab <= 1 << 16 { 2 } else { 4 }
    }

    /// The checksum of `tokens`, the bytes after a header.
    pub fn checksum_of(tokens: &[u8]) -> u32 {
        crc32fast::hash(tokens)
    }

    /// Checks `tokens`, the bytes after this header, against its checksum; the error says
    /// what to do.
    pub fn check(&self, tokens: &[u8]) -> Result<(), String> {
        let actual = Self::checksum_of(tokens);
        if actual == self.checksum {
            return Ok(());
        }
        Err(format!(
            "its tokens do not match the checksum in its header ({actual:08x}, not {:08x}): the \
             file was changed or damaged after `headroom prepare` wrote it (run it again to \
             rewrite the shard)",
            self.checksum
        ))
    }

    /// The header as written.
    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let mut bytes = [0; HEADER_BYTES];
        bytes[0..8].copy_from_slice(MAGIC);
        bytes[8..12].copy_from_slice(&VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&(self.token_bytes as u32).to_le_bytes());
        for (at, value) in [
            (16, self.vocab),
            (24, self.tokenizer_hash),
            (32, self.sources_hash),
            (40, self.tokens),
        ] {
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        bytes[48..52].copy_from_slice(&self.checksum.to_le_bytes());
        let sections = if self.token_flags { FLAGS_SECTION } else { 0 };
        bytes[52..56].copy_from_slice(&sections.to_le_bytes());
        bytes
    }

    /// Bytes after the header: the tokens, and their flags where the shard has them.
    pub fn body_bytes(&self) -> Option<u64> {
        let per_token = self.token_bytes as u64 + u64::from(self.token_flags);
        self.tokens.checked_mul(per_token)
    }

    /// Reads a header from the start of a shard of `file_len` bytes; the error says what does
    /// not fit.
    pub fn parse(bytes: &[u8], file_len: u64) -> Result<Self, String> {
        let Some(header) = bytes.get(..HEADER_BYTES) else {
            return Err(format!(
                "{} bytes: shorter than a shard's {HEADER_BYTES}-byte header",
                bytes.len()
            ));
        };
        if &header[0..8] != MAGIC {
            return Err("not a token shard (its first bytes are not HRTOKENS)".into());
        }
        let u32_at = |at: usize| u32::from_le_bytes([0, 1, 2, 3].map(|i| header[at + i]));
        let u64_at =
            |at: usize| u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7].map(|i| header[at + i]));
        let version = u32_at(8);
        if !(OLDEST..=VERSION).contains(&version) {
            return Err(format!(
                "format version {version}; this build reads {OLDEST} to {VERSION} (run \
                 `headroom prepare` again to rewrite the shard)"
            ));
        }
        let sections = if version >= 3 { u32_at(52) } else { 0 };
        if sections & !FLAGS_SECTION != 0 {
            return Err(format!(
                "sections {sections:#x}: this build knows only the flags section (bit 0)"
            ));
        }
        let token_bytes = u32_at(12) as usize;
        if token_bytes != 2 && token_bytes != 4 {
            return Err(format!("{token_bytes} bytes per token; shards hold 2 or 4"));
        }
        let header = Self {
            token_bytes,
            vocab: u64_at(16),
            tokenizer_hash: u64_at(24),
            sources_hash: u64_at(32),
            tokens: u64_at(40),
            checksum: u32_at(48),
            token_flags: sections & FLAGS_SECTION != 0,
        };
        if header.vocab == 0 || header.vocab > 1 << (8 * token_bytes as u32) {
            return Err(format!(
                "a vocabulary of {} in {token_bytes}-byte tokens",
                header.vocab
            ));
        }
        let expected = header
            .body_bytes()
            .and_then(|b| b.checked_add(HEADER_BYTES as u64));
        if expected != Some(file_len) {
            let flags = if header.token_flags {
                " and their flags"
            } else {
                ""
            };
            return Err(format!(
                "{file_len} bytes where its header's {} tokens of {token_bytes} bytes{flags} \
                 need {}: the shard is truncated or was not finished",
                header.tokens,
                expected.map_or("more than 2^64".into(), |b| b.to_string())
            ));
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> ShardHeader {
        ShardHeader {
            token_bytes: 2,
            vocab: 8192,
            tokenizer_hash: 0x1234_5678_9abc_def0,
            sources_hash: 42,
            tokens: 10,
            checksum: 0xdead_beef,
            token_flags: false,
        }
    }

    #[test]
    fn a_header_reads_back_as_written() {
        let bytes = header().to_bytes();
        assert_eq!(ShardHeader::parse(&bytes, 64 + 20), Ok(header()));
    }

    #[test]
    fn a_flags_section_counts_in_the_length_and_version_2_still_reads() {
        let flagged = ShardHeader {
            token_flags: true,
            ..header()
        };
        let bytes = flagged.to_bytes();
        assert_eq!(ShardHeader::parse(&bytes, 64 + 30), Ok(flagged));
        assert!(ShardHeader::parse(&bytes, 64 + 20).is_err());
        let mut old = header().to_bytes();
        old[8] = 2;
        assert_eq!(ShardHeader::parse(&old, 64 + 20), Ok(header()));
    }

    #[test]
    fn damage_is_named() {
        let bytes = header().to_bytes();
        let truncated = ShardHeader::parse(&bytes, 64 + 19).unwrap_err();
        assert!(truncated.contains("truncated"), "{truncated}");
        let mut other = bytes;
        other[0] = b'X';
        assert!(
            ShardHeader::parse(&other, 84)
                .unwrap_err()
                .contains("not a token shard")
        );
        let mut version = bytes;
        version[8] = 9;
        assert!(
            ShardHeader::parse(&version, 84)
                .unwrap_err()
                .contains("version 9")
        );
        let mut width = bytes;
        width[12] = 3;
        assert!(
            ShardHeader::parse(&width, 84)
                .unwrap_err()
                .contains("3 bytes per token")
        );
        let mut vocab = bytes;
        vocab[16..24].copy_from_slice(&70_000u64.to_le_bytes());
        assert!(
            ShardHeader::parse(&vocab, 84)
                .unwrap_err()
                .contains("vocabulary of 70000")
        );
        assert!(
            ShardHeader::parse(&bytes[..10], 84)
                .unwrap_err()
                .contains("shorter")
        );
    }

    #[test]
    fn the_checksum_finds_a_changed_token() {
        let tokens = [1u8, 0, 2, 0, 3, 0];
        let header = ShardHeader {
            checksum: ShardHeader::checksum_of(&tokens),
            ..header()
        };
        assert_eq!(header.check(&tokens), Ok(()));
        let mut flipped = tokens;
        flipped[2] ^= 1;
        let message = header.check(&flipped).unwrap_err();
        assert!(message.contains("checksum"), "{message}");
        let parsed = ShardHeader::parse(&header.to_bytes(), 64 + 20).unwrap();
        assert_eq!(parsed.checksum, header.checksum);
    }

    #[test]
    fn token_width_follows_the_vocabulary() {
        assert_eq!(ShardHeader::token_bytes_for(50257), 2);
        assert_eq!(ShardHeader::token_bytes_for(65536), 2);
        assert_eq!(ShardHeader::token_bytes_for(65537), 4);
    }
}
