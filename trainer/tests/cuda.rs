//! Training on a CUDA GPU (`device = "cuda:0"`): the planner's prediction is the peak the GPU
//! run hits, an out-of-memory under a tight limit is recovered with no sample lost, and the run
//! follows the same run on the CPU. Without a GPU, or without the `cuda` feature, asking for one
//! is a typed error and the tests say they were skipped (and fail when HEADROOM_REQUIRE_CUDA is
//! set, so that a GPU run cannot pass on the CPU alone).

mod common;

use common::{TempDir, assert_recovers_like, small_config, tight_limit};
use headroom_kernels::{DeviceKind, PlanTarget};
use headroom_trainer::config::TrainConfig;
use headroom_trainer::{Error, Trainer};

/// The run on cuda:0, or None (after saying why) where there is no GPU to run it on.
fn on_gpu(config: &TrainConfig) -> Option<Trainer> {
    let mut config = config.clone();
    config.device = "cuda:0".into();
    match Trainer::new(config) {
        Ok(trainer) => Some(trainer),
        Err(err @ (Error::Config { .. } | Error::Nn(_))) => {
            let message = err.to_string();
            assert!(
                message.contains("without its `cuda` feature")
                    || message.contains("no CUDA driver found")
                    || message.contains("not found"),
                "{message}"
            );
            assert!(
                std::env::var_os("HEADROOM_REQUIRE_CUDA").is_none(),
                "HEADROOM_REQUIRE_CUDA is set, but: {message}"
            );
            eprintln!("cuda skipped: {message}");
            None
        }
        Err(other) => panic!("an unexpected error: {other}"),
    }
}

#[test]
fn the_planned_peak_is_the_peak_on_the_gpu() {
    for expandable_segments in [false, true] {
        let dir = TempDir::new("cuda-plan");
        let mut config = small_config(&dir);
        config.batch.size = 32;
        config.batch.micro = None;
        config.memory.expandable_segments = expandable_segments;
        let Some(mut gpu) = on_gpu(&config) else {
            return;
        };
        assert_eq!(gpu.device().kind(), DeviceKind::Cuda(0));
        assert!(matches!(
            gpu.device().plan_target(),
            PlanTarget::Cuda { .. }
        ));
        let plan = gpu.plan().expect("a planned run").clone();
        gpu.train_step().unwrap();
        let stats = gpu.device().allocator().stats();
        assert_eq!(stats.peak_in_use, plan.predicted_peak, "{plan}");
        if expandable_segments {
            assert_eq!(stats.regions, 1, "one region, grown in place");
        }
    }
}

#[test]
fn a_tight_limit_on_the_gpu_is_recovered_and_trains_as_the_cpu_does() {
    let dir = TempDir::new("cuda-tight");
    // On the GPU each product also takes a cuBLAS workspace: under this limit (set from the
    // CPU's peaks) the preferred one (MiBs) never fits and products fall back to the smallest,
    // so the activations decide what fits, as on the CPU.
    let (roomy, tight, limit) = tight_limit(&dir, 4);
    let Some(mut gpu) = on_gpu(&tight) else {
        return;
    };
    let mut cpu = Trainer::new(roomy).unwrap();
    assert_recovers_like(&mut cpu, &mut gpu, 4, limit, 1e-3);
}

#[test]
fn a_device_that_is_neither_cpu_nor_cuda_is_a_configuration_error() {
    let dir = TempDir::new("cuda-bad-device");
    let mut config = small_config(&dir);
    config.device = "gpu0".into();
    let Err(err) = Trainer::new(config) else {
        panic!("a run on `gpu0`");
    };
    assert!(matches!(err, Error::Config { .. }), "{err}");
    assert!(err.to_string().contains("`gpu0`"), "{err}");
}
