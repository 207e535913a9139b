//! `memory.link_bandwidth`: the link between ranks the planner prices their collectives at, a
//! rate such as `300GB/s` or the name of a kind of link, written back as it was given.

use std::fmt;
use std::str::FromStr;

use headroom_alloc::parse_size;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The kinds of link a rate may be named by, each with the bytes a second a rank's ring
/// collectives reach over it (NCCL's bus bandwidth, roughly), and what it is.
pub const NAMED_LINKS: [(&str, f64, &str); 4] = [
    (
        "nvlink",
        360e9,
        "NVLink 4 between the GPUs of an H100 SXM machine",
    ),
    ("pcie4", 20e9, "PCIe 4.0 x16 between GPUs without NVLink"),
    ("pcie5", 40e9, "PCIe 5.0 x16 between GPUs without NVLink"),
    (
        "infiniband",
        45e9,
        "InfiniBand NDR, one 400 Gb/s port a GPU, between machines",
    ),
];

/// A link's rate, as text (a named link, or bytes with a unit over `/s`) and in bytes a second.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkBandwidth {
    text: String,
    bytes_per_second: f64,
}

impl LinkBandwidth {
    /// Bytes a second a rank sends over the link.
    pub fn bytes_per_second(&self) -> f64 {
        self.bytes_per_second
    }
}

impl FromStr for LinkBandwidth {
    type Err = String;

    /// A named link (`nvlink`, `pcie4`, `pcie5`, `infiniband`) or a rate such as `300GB/s`.
    fn from_str(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        let named = NAMED_LINKS
            .iter()
            .find(|(name, ..)| name.eq_ignore_ascii_case(trimmed));
        let bytes_per_second = match (named, trimmed.strip_suffix("/s")) {
            (Some(&(_, rate, _)), _) => rate,
            (None, Some(size)) => parse_size(size).map_err(|err| err.to_string())? as f64,
            (None, None) => {
                let names: Vec<&str> = NAMED_LINKS.iter().map(|(name, ..)| *name).collect();
                return Err(format!(
                    "memory.link_bandwidth: {text:?} is neither a rate such as \"300GB/s\" nor \
                     a named link ({})",
                    names.join(", ")
                ));
            }
        };
        if bytes_per_second <= 0.0 {
            return Err(format!("memory.link_bandwidth: {text:?} moves nothing"));
        }
        Ok(Self {
            text: text.to_owned(),
            bytes_per_second,
        })
    }
}

impl fmt::Display for LinkBandwidth {
    /// The rate as written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for LinkBandwidth {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for LinkBandwidth {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_named_links_parse_and_are_written_back_as_given() {
        let rate: LinkBandwidth = "300GB/s".parse().unwrap();
        assert_eq!(rate.bytes_per_second(), 300e9);
        assert_eq!(rate.to_string(), "300GB/s");
        assert_eq!(
            "25 GiB/s"
                .parse::<LinkBandwidth>()
                .unwrap()
                .bytes_per_second(),
            25.0 * (1u64 << 30) as f64
        );
        assert_eq!(
            "NVLink"
                .parse::<LinkBandwidth>()
                .unwrap()
                .bytes_per_second(),
            360e9
        );
        let err = "fast".parse::<LinkBandwidth>().unwrap_err();
        assert!(err.contains("nvlink, pcie4, pcie5, infiniband"), "{err}");
        assert!("300GB".parse::<LinkBandwidth>().is_err());
        assert!("0GB/s".parse::<LinkBandwidth>().is_err());
    }
}
