//! A bounded little-endian reader over a GGUF file's bytes: every read checks that the bytes
//! are there first, and says where they ran out when they are not.

/// A position in a file's bytes, read forward.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A reader at the start of `bytes`.
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// The offset of the next byte read.
    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    /// How many bytes are left after the position.
    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes, or where the file ends before them.
    pub(super) fn take(&mut self, n: u64) -> Result<&'a [u8], String> {
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "truncated: {n} bytes needed at byte {} of a file of {} bytes",
                    self.pos,
                    self.bytes.len()
                )
            })?;
        let taken = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(taken)
    }

    /// The next `N` bytes as an array.
    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N as u64)?);
        Ok(out)
    }

    /// A little-endian `u32`.
    pub(super) fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }

    /// A little-endian `u64`.
    pub(super) fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }

    /// A GGUF string: a `u64` length, then that many bytes of UTF-8 (no terminating zero).
    pub(super) fn string(&mut self) -> Result<String, String> {
        let len = self.u64()?;
        let at = self.pos;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|err| format!("the string at byte {at} is not UTF-8: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_end() {
        let bytes = [1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3];
        let mut cur = Cursor::new(&bytes);
        assert_eq!(cur.u32(), Ok(1));
        assert_eq!(cur.u64(), Ok(2));
        assert_eq!(cur.remaining(), 1);
        let err = cur.u32().unwrap_err();
        assert!(err.contains("4 bytes needed at byte 12"), "{err}");
        assert_eq!(cur.pos(), 12);
        assert!(cur.take(u64::MAX).is_err());
    }

    #[test]
    fn a_string_longer_than_the_file_is_an_error_before_any_allocation() {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        assert!(Cursor::new(&bytes).string().is_err());
        let mut bytes = 3u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe, 0xfd]);
        assert!(
            Cursor::new(&bytes)
                .string()
                .unwrap_err()
                .contains("not UTF-8")
        );
    }
}
