//! The allocator settings a trace was recorded under: its first line, so that a replay can
//! reproduce the run without being told them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::bookkeeping::size::format_bytes;
use crate::policy::config::{AllocatorConfig, EXPANSION_STEP, Growth};

/// The settings of the allocator a trace was streamed from, written as the trace's first line:
///
/// ```text
/// {"op":"allocator","limit":25165824,"growth":"on-demand","growth_step":4096,"max_internal_fragmentation":256,"garbage_collection":true}
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename = "allocator")]
pub struct TraceSettings {
    /// The limit in bytes the allocator resolved.
    pub limit: u64,
    /// When it reserved regions.
    pub growth: Growth,
    /// The step its source grew a region in place in (a host page, CUDA's 2 MiB; 2 MiB when
    /// absent).
    #[serde(default = "default_growth_step")]
    pub growth_step: u64,
    /// Its split rule: a free chunk is split when at least this many bytes would be left.
    pub max_internal_fragmentation: u64,
    /// Whether it released entirely free regions before reporting an out-of-memory.
    pub garbage_collection: bool,
}

impl TraceSettings {
    /// The settings of an allocator configured with `config` whose limit resolved to `limit`,
    /// over a source that grows a region in place in steps of `growth_step`.
    pub fn of(config: &AllocatorConfig, limit: u64, growth_step: u64) -> Self {
        Self {
            limit,
            growth: config.growth,
            growth_step,
            max_internal_fragmentation: config.max_internal_fragmentation,
            garbage_collection: config.garbage_collection,
        }
    }

    /// An allocator configuration with these settings (and no history).
    pub fn allocator_config(&self) -> AllocatorConfig {
        AllocatorConfig::default()
            .with_limit_bytes(self.limit)
            .with_growth(self.growth)
            .with_max_internal_fragmentation(self.max_internal_fragmentation)
            .with_garbage_collection(self.garbage_collection)
    }
}

/// The growth step of a trace that does not give one: CUDA's page, the default source's.
fn default_growth_step() -> u64 {
    EXPANSION_STEP
}

/// The name a command line and a configuration give a growth policy.
pub fn growth_name(growth: Growth) -> &'static str {
    match growth {
        Growth::OnDemand => "on-demand",
        Growth::Preallocate => "preallocate",
        Growth::Expandable => "expandable",
    }
}

impl fmt::Display for TraceSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "limit {}, growth {} in steps of {}, chunks split when {} or more would be left, \
             garbage collection {}",
            format_bytes(self.limit),
            growth_name(self.growth),
            format_bytes(self.growth_step),
            format_bytes(self.max_internal_fragmentation),
            if self.garbage_collection { "on" } else { "off" }
        )
    }
}
