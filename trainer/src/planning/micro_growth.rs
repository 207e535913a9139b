//! When the micro-batch may grow: only to a size whose step, probed on the meta device, fits
//! the bytes a step may use. A size that failed all the same (memory the probe could not see,
//! such as another process's on a GPU) is tried again only once the memory other processes
//! leave has changed.

use headroom_kernels::Device;

use crate::config::TrainConfig;
use crate::planning::probe::Prober;
use crate::planning::run_device;
use crate::step::micro::MicroBatcher;

/// The check a run makes before its micro-batch grows.
pub struct GrowthCheck {
    prober: Prober,
    /// The most a step may use: the limit less the planner's margin.
    step_limit: u64,
    /// The device's memory that other processes do not hold (its free memory and what this
    /// run has reserved) when last looked at; none on the CPU, where nothing else takes any.
    available: Option<u64>,
}

impl GrowthCheck {
    /// Growth checked by `prober`'s steps against `step_limit` bytes.
    pub fn new(prober: Prober, step_limit: u64) -> Self {
        Self {
            prober,
            step_limit,
            available: None,
        }
    }

    /// Tells `micro` that `step` is done (`clean` without an out-of-memory), letting it grow
    /// only where a probe predicts the step fits.
    pub fn finish_step(
        &mut self,
        micro: &mut MicroBatcher,
        step: u64,
        clean: bool,
        (config, device): (&TrainConfig, &Device),
    ) {
        let reserved = device.allocator().stats().reserved;
        let available = run_device::free_memory(config).map(|free| free + reserved);
        if available != self.available {
            self.available = available;
            micro.forget_ceiling();
        }
        let (prober, step_limit) = (&mut self.prober, self.step_limit);
        let mut fits = |size: usize| {
            prober.fits(size, step_limit).unwrap_or_else(|err| {
                tracing::warn!("no growth to micro-batches of {size}: {err}");
                false
            })
        };
        micro.finished(step, clean, &mut fits);
    }
}
