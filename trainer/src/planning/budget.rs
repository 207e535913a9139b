//! The memory a run may use: its budget (the device's capacity, the limit and how regions are
//! reserved), read once from the configuration, whose sizes were parsed where they entered it;
//! the device configuration built from it; and the bytes a step may use once the planner's
//! margin is kept free. From here on a limit is a number of bytes, resolved once from the
//! configuration's size or fraction by the allocator's own rule (clamped to the capacity,
//! rounded down to a 256-byte granule).

use headroom_alloc::{AllocatorConfig, ByteSize, GRANULE, Growth, Limit, format_bytes};
use headroom_kernels::DeviceConfig;

use crate::config::{ADDITION_LIMIT, DataKind, MemoryConfig, TrainConfig};
use crate::error::{Error, Result};

/// Bytes of a meta device that nothing a step allocates can exhaust.
pub const UNLIMITED: u64 = 1 << 50;

/// A memory budget in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The device's memory: the simulated device's on the CPU, a GPU's as its driver reports.
    pub capacity: u64,
    /// What the run may use: at most the capacity, a multiple of 256 bytes.
    pub limit: u64,
    /// How regions are reserved.
    pub growth: Growth,
}

impl Budget {
    /// A budget no step can exhaust, reserving as `growth` says.
    pub fn unlimited(growth: Growth) -> Self {
        Self {
            capacity: UNLIMITED,
            limit: UNLIMITED,
            growth,
        }
    }

    /// The bytes a step may use with `margin` (a fraction of the limit) kept free.
    pub fn step_limit(&self, margin: f64) -> u64 {
        (self.limit as f64 * (1.0 - margin)) as u64
    }

    /// The configuration of a device with this budget, its allocator recording `history`
    /// events. Free chunks are split whenever anything would be left over (as PyTorch's
    /// allocator does for large blocks), instead of handing out up to twice the request: on a
    /// training step's mix of sizes that lowers the peak by several percent and costs no
    /// measurable time.
    pub fn device_config(&self, history: usize) -> DeviceConfig {
        DeviceConfig::new(self.capacity).with_allocator(self.allocator_config(history))
    }

    /// The allocator configuration of [`device_config`](Self::device_config): what a replay of
    /// the run's allocations uses to reproduce them.
    pub fn allocator_config(&self, history: usize) -> AllocatorConfig {
        AllocatorConfig::default()
            .with_limit_bytes(self.limit)
            .with_growth(self.growth)
            .with_max_internal_fragmentation(GRANULE)
            .with_history(history)
    }
}

impl TrainConfig {
    /// The limit of a run that names neither a limit nor a fraction, where its task has one of
    /// its own: the addition task's [`ADDITION_LIMIT`], tight enough for the planner's choice
    /// to matter. Every other run may use the whole device.
    pub fn default_limit(&self) -> Option<u64> {
        (self.data.kind == DataKind::Addition).then_some(ADDITION_LIMIT)
    }
}

impl MemoryConfig {
    /// The simulated device's memory as configured: `capacity`, or its old name `device`.
    pub fn capacity_setting(&self) -> (&'static str, &ByteSize) {
        match &self.device {
            Some(old) => ("memory.device", old),
            None => ("memory.capacity", &self.capacity),
        }
    }

    /// The budget on the CPU's simulated device of [`capacity`](Self::capacity) bytes, whose
    /// whole memory is the limit unless `default_limit` (a task's own) or the settings name
    /// another, or the problems with the settings.
    pub fn budget(&self, default_limit: Option<u64>) -> Result<Budget> {
        let mut problems = Vec::new();
        let (name, size) = self.capacity_setting();
        let capacity = size.bytes();
        if capacity == 0 {
            problems.push(format!(
                "{name}: a device of 0 bytes has no memory to train in"
            ));
        }
        if self.device.is_some() && self.capacity != MemoryConfig::default().capacity {
            problems.push(
                "memory.device is the old name of memory.capacity: give only capacity".into(),
            );
        }
        self.resolve(capacity, default_limit.unwrap_or(capacity), problems)
    }

    /// The budget on a GPU of `capacity` bytes, whose whole memory is the default limit, or the
    /// problems with the settings.
    pub fn budget_on(&self, capacity: u64) -> Result<Budget> {
        self.resolve(capacity, capacity, Vec::new())
    }

    /// The limit as configured: a size, a fraction of the capacity, or `default` bytes.
    fn limit(&self, default: u64, problems: &mut Vec<String>) -> Option<Limit> {
        match (&self.limit, self.fraction) {
            (Some(_), Some(_)) => {
                problems.push("memory: give a limit or a fraction, not both".into());
                None
            }
            (Some(size), None) => Some(Limit::Bytes(size.bytes())),
            (None, Some(f)) if f > 0.0 && f <= 1.0 => Some(Limit::Fraction(f)),
            (None, Some(f)) => {
                problems.push(format!("memory.fraction: {f} is not in (0, 1]"));
                None
            }
            (None, None) => Some(Limit::Bytes(default)),
        }
    }

    fn resolve(&self, capacity: u64, default: u64, mut problems: Vec<String>) -> Result<Budget> {
        let limit = self.limit(default, &mut problems);
        if let (Some(Limit::Bytes(bytes)), true) = (limit, capacity > 0)
            && bytes > capacity
        {
            problems.push(format!(
                "memory.limit: {} exceeds the device's {}",
                format_bytes(bytes),
                format_bytes(capacity)
            ));
        }
        let resolved = match limit {
            Some(limit) if problems.is_empty() => AllocatorConfig::default()
                .with_limit(limit)
                .resolve_limit(capacity)
                .map_err(|_| {
                    problems.push(format!(
                        "memory.limit: {limit} of a {} device is less than the allocator's \
                         smallest block of {GRANULE} bytes",
                        format_bytes(capacity)
                    ))
                })
                .ok(),
            _ => None,
        };
        if self.preallocate && self.expandable_segments {
            problems.push(
                "memory: preallocate reserves the limit whole, expandable_segments grows a region \
                 in place; choose one"
                    .into(),
            );
        }
        match resolved {
            Some(limit) if problems.is_empty() => Ok(Budget {
                capacity,
                limit,
                growth: if self.preallocate {
                    Growth::Preallocate
                } else if self.expandable_segments {
                    Growth::Expandable
                } else {
                    Growth::OnDemand
                },
            }),
            _ => Err(Error::Config { problems }),
        }
    }
}
