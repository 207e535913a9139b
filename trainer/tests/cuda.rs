//! Training on a CUDA GPU (`device = "cuda:0"`): the planner's prediction is the peak the GPU
//! run hits, an out-of-memory under a tight limit is recovered with no sample lost, and the run
//! follows the same run on the CPU. Without a GPU, or without the `cuda` feature, asking for one
//! is a typed error and the tests say they were skipped (and fail when HEADROOM_REQUIRE_CUDA is
//! set, so that a GPU run cannot pass on the CPU alone).

mod common;

use common::{TempDir, assert_recovers_like, small_config, tight_limit};
use headroom_kernels::{DeviceKind, PlanTarget};
use headroom_trainer::config::{Recompute, TrainConfig};
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

/// A small Llama-family run: width 64, four heads over two key/value heads, two blocks.
fn small_llama(dir: &TempDir) -> TrainConfig {
    let mut config = small_config(dir);
    let model = &mut config.model;
    model.family = headroom_trainer::config::ModelFamily::Llama;
    (model.width, model.heads, model.layers) = (64, 4, 2);
    model.kv_heads = Some(2);
    model.mlp_width = Some(96);
    config
}

#[test]
fn a_qlora_step_on_the_gpu_peaks_as_planned_and_follows_the_cpu() {
    use headroom_nn::lora::{LoraConfig, QuantizedBase};
    use headroom_trainer::config::PrecisionKind;
    let dir = TempDir::new("cuda-qlora");
    // On the device, then with the base streamed from page-locked host memory.
    for streamed in [false, true] {
        let mut config = small_llama(&dir);
        let model = &mut config.model;
        model.tie_embeddings = false;
        model.lora = Some(LoraConfig {
            rank: 4,
            base: Some(QuantizedBase::Nf4),
            ..LoraConfig::default()
        });
        if streamed {
            model.recompute = Some(Recompute::Blocks);
            model.offload_weights = Some(true);
            config.optimizer.offload = Some(true);
        }
        config.batch.micro = None;
        config.precision.dtype = PrecisionKind::Bf16;
        let Some(mut gpu) = on_gpu(&config) else {
            return;
        };
        let plan = gpu.plan().expect("a planned run").clone();
        let on_gpu = gpu.train_step().unwrap().loss;
        assert_eq!(
            gpu.device().allocator().stats().peak_in_use,
            plan.predicted_peak,
            "streamed {streamed}: {plan}"
        );
        if streamed {
            let host = gpu.host_tier().unwrap().allocator().stats().peak_in_use;
            assert_eq!(Some(host), plan.predicted_host_peak, "{plan}");
        }
        let mut cpu = Trainer::new(config).unwrap();
        let on_cpu = cpu.train_step().unwrap().loss;
        assert!(
            (on_gpu - on_cpu).abs() <= 2e-2 * on_cpu.abs(),
            "streamed {streamed}: {on_gpu} on the GPU, {on_cpu} on the CPU"
        );
    }
}

#[test]
fn a_step_offloading_to_the_host_tier_peaks_as_planned_on_both_tiers_and_follows_the_cpu() {
    let dir = TempDir::new("cuda-offload");
    // The activations and the optimizer offloaded, updated after the backward pass and in it
    // (the host tier's thread checks each gradient); then the weights streamed too, fetched
    // one block ahead and in turn.
    let cases = [
        (false, false, true),
        (false, true, true),
        (true, false, true),
        (true, false, false),
    ];
    for (weights, in_backward, ahead) in cases {
        let mut config = small_llama(&dir);
        let model = &mut config.model;
        model.recompute = Some(Recompute::BlocksTiled);
        model.offload_activations = Some(true);
        model.offload_weights = Some(weights);
        model.fetch_ahead = Some(ahead);
        config.optimizer.offload = Some(true);
        config.optimizer.in_backward = Some(in_backward);
        if in_backward {
            // Clipping needs every gradient before the first update.
            config.optimizer.clip = 0.0;
        }
        config.batch.micro = None;
        let Some(mut gpu) = on_gpu(&config) else {
            return;
        };
        let plan = gpu.plan().expect("a planned run").clone();
        let losses: Vec<f64> = (0..2).map(|_| gpu.train_step().unwrap().loss).collect();
        assert_eq!(
            gpu.device().allocator().stats().peak_in_use,
            plan.predicted_peak,
            "weights streamed {weights}, in backward {in_backward}, ahead {ahead}: {plan}"
        );
        let host = gpu.host_tier().unwrap().allocator().stats().peak_in_use;
        assert_eq!(
            Some(host),
            plan.predicted_host_peak,
            "weights streamed {weights}, in backward {in_backward}, ahead {ahead}: {plan}"
        );
        let mut cpu = Trainer::new(config).unwrap();
        for (on_gpu, _) in losses.iter().zip(0..) {
            let on_cpu = cpu.train_step().unwrap().loss;
            assert!(
                (on_gpu - on_cpu).abs() <= 1e-3 * on_cpu.abs(),
                "weights streamed {weights}, in backward {in_backward}, ahead {ahead}: {on_gpu} against {on_cpu}"
            );
        }
    }
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
