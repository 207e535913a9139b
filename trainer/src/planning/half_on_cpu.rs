//! The warning a bf16 or f16 run on the CPU gets once where the CPU has no instructions for
//! it: the CPU's products widen half types to f32 panel by panel, so they save memory but cost
//! time, and what the same run in f32 would need, by its own plan (which prices the widening).

use headroom_alloc::format_bytes;
use headroom_kernels::PlanTarget;
use headroom_kernels::ops::gemm::cpu_multiplies;

use crate::config::{DeviceChoice, ParamDtype, PrecisionKind, TrainConfig};
use crate::data::Task;
use crate::planning::{Budget, Plan, plan};

/// True when `config` runs its products in a half type on the CPU, which widens them (this
/// CPU has no instructions for that type).
pub fn half_on_cpu(config: &TrainConfig) -> bool {
    let cpu = matches!(config.device.parse::<DeviceChoice>(), Ok(DeviceChoice::Cpu));
    let half = config.compute_precision().half_dtype();
    cpu && half.is_some_and(|dtype| !cpu_multiplies(dtype))
}

/// The warning for `config`'s run, planned as `chosen`, when it computes in a half type on the
/// CPU: the slowdown, and the f32 run's predicted peak and step under the same budget (or that
/// it does not fit there).
pub fn half_on_cpu_warning(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    chosen: &Plan,
) -> Option<String> {
    if !half_on_cpu(config) {
        return None;
    }
    let mut f32_run = config.clone();
    f32_run.model.param_dtype = ParamDtype::F32;
    f32_run.precision.dtype = PrecisionKind::F32;
    let f32_figure = match plan(&f32_run, task, budget, PlanTarget::Cpu) {
        Ok(f32_plan) => format!(
            "in f32 (--param-dtype f32 --precision f32) this run's plan predicts a peak of {} \
             and {:.2} s a step, against {} and {:.2} s here",
            format_bytes(f32_plan.predicted_peak),
            f32_plan.predicted_seconds,
            format_bytes(chosen.predicted_peak),
            chosen.predicted_seconds
        ),
        Err(_) => format!(
            "in f32 this run does not fit under its limit of {}: bf16 is what makes it fit",
            format_bytes(budget.limit)
        ),
    };
    Some(format!(
        "{} on the CPU: its products widen {0} to f32 panel by panel (this CPU has no \
         instructions for it), which saves memory but not time; {f32_figure}",
        config.compute_precision().name()
    ))
}
