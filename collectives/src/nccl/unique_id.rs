//! The id that names one NCCL job: rank 0 makes it and every rank needs it to join.

use std::fmt;
use std::str::FromStr;

use cudarc::nccl::{result, sys};

use super::library::{nccl_error, require_nccl};
use crate::{Error, Result};

/// The 128 bytes NCCL's ranks share to find each other: made once, by one rank
/// ([`UniqueId::new`]), and passed to the others as text (`Display` writes it in hexadecimal,
/// `FromStr` reads it back) through a file, the environment or another transport.
#[derive(Clone, PartialEq, Eq)]
pub struct UniqueId(sys::ncclUniqueId);

impl UniqueId {
    /// A new id, from NCCL.
    pub fn new() -> Result<Self> {
        require_nccl()?;
        result::get_uniqueid()
            .map(Self)
            .map_err(|err| nccl_error("ncclGetUniqueId", 0, 1, err, None))
    }

    /// NCCL's form of the id.
    pub(crate) fn raw(&self) -> sys::ncclUniqueId {
        self.0
    }

    /// The id's bytes.
    pub fn bytes(&self) -> [u8; 128] {
        self.0.internal.map(|byte| byte as u8)
    }

    /// The id with these bytes.
    pub fn from_bytes(bytes: [u8; 128]) -> Self {
        Self(sys::ncclUniqueId {
            internal: bytes.map(|byte| byte as std::ffi::c_char),
        })
    }
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.bytes()
            .iter()
            .try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqueId({self})")
    }
}

impl FromStr for UniqueId {
    type Err = Error;

    /// Reads the 256 hexadecimal digits that `Display` writes.
    fn from_str(text: &str) -> Result<Self> {
        let bad = |detail: String| Error::Argument {
            op: "UniqueId::from_str",
            detail,
        };
        let text = text.trim();
        if text.len() != 256 || !text.is_ascii() {
            return Err(bad(format!(
                "an NCCL unique id is 256 hexadecimal digits, not {:?}",
                text.chars().take(300).collect::<String>()
            )));
        }
        let mut bytes = [0u8; 128];
        for (i, byte) in bytes.iter_mut().enumerate() {
            let pair = &text[2 * i..2 * i + 2];
            *byte = u8::from_str_radix(pair, 16)
                .map_err(|_| bad(format!("{pair:?} at digit {} is not hexadecimal", 2 * i)))?;
        }
        Ok(Self::from_bytes(bytes))
    }
}
