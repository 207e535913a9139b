//! Bytes per allocator tag: what weights, gradients, optimizer state and each kind of layer's
//! activations hold, as a step's record, a run's summary and the planner's table give them.

use headroom_alloc::Stats;
use serde::{Deserialize, Serialize};

/// Live and peak bytes of one tag during a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagBytes {
    /// The tag's name.
    pub tag: String,
    /// Held at the end of the step.
    pub live: u64,
    /// The most held during the step.
    pub peak: u64,
}

/// Per-tag bytes from allocator statistics.
pub fn tag_bytes(stats: &Stats) -> Vec<TagBytes> {
    stats
        .tags
        .iter()
        .filter(|t| t.peak > 0)
        .map(|t| TagBytes {
            tag: t.tag.name().to_owned(),
            live: t.live,
            peak: t.peak,
        })
        .collect()
}
