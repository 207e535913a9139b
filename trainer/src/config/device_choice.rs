//! `device`: which device a run trains on, parsed from its name.

use std::fmt;
use std::str::FromStr;

/// Which device a run trains on, as the configuration's `device` names it: `cpu`, `cuda`
/// (the first GPU) or `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The CPU backend.
    Cpu,
    /// The CUDA GPU of this ordinal.
    Cuda(u32),
}

impl FromStr for DeviceChoice {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            _ => text
                .strip_prefix("cuda:")
                .and_then(|ordinal| ordinal.parse().ok())
                .map(Self::Cuda)
                .ok_or_else(|| format!("device: `{text}` is not cpu, cuda or cuda:N")),
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(ordinal) => write!(f, "cuda:{ordinal}"),
        }
    }
}
