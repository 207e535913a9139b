//! The CUDA backend's own checks. Without a GPU, asking for one must be a typed error and every
//! kernel must still compile (NVRTC needs no GPU); with one, device memory must behave as the
//! allocator promises. The op suites of the other test files run on CUDA too (`devices()`).
#![cfg(feature = "cuda")]

mod common;

use headroom_alloc::{AllocatorConfig, Growth};
use headroom_kernels::cuda::{
    Family, check_machine_code, compile_ptx, device_memory, is_available,
};
use headroom_kernels::ops::norm::row_kernels as norm_row_kernels;
use headroom_kernels::ops::softmax::row_kernels as softmax_row_kernels;
use headroom_kernels::{Array, DType, Device, Error, PlanTarget};

/// Architectures every kernel must compile for: the oldest CUDA 13 supports (Turing) and Hopper.
const ARCHES: [&str; 2] = ["compute_75", "compute_90"];

/// The kernels the Rust side launches, per family (dtype suffixes added below).
fn kernels(family: Family) -> Vec<String> {
    let floats = ["f32", "f64", "f16", "bf16"];
    let every = ["f32", "f64", "f16", "bf16", "u32", "i32", "u8"];
    let per_float = |stems: &[&str]| -> Vec<String> {
        stems
            .iter()
            .flat_map(|s| floats.iter().map(move |d| format!("{s}_{d}")))
            .collect()
    };
    match family {
        Family::Data => every
            .iter()
            .flat_map(|s| every.iter().map(move |d| format!("cast_{s}_{d}")))
            .chain(every.iter().map(|d| format!("fill_{d}")))
            .collect(),
        Family::Elementwise => per_float(&[
            "unary",
            "binary",
            "binary_assign",
            "binary_strided",
            "scale_by",
            "swiglu",
            "swiglu_backward",
        ]),
        Family::Reduce => per_float(&["reduce_rows", "reduce_columns"]),
        Family::Softmax => per_float(
            &softmax_row_kernels()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        ),
        Family::Norm => {
            let mut stems = norm_row_kernels();
            stems.extend(
                [
                    "layer_norm_dparams_partial",
                    "layer_norm_dparams_sum",
                    "rms_norm_dgamma_partial",
                    "rms_norm_dgamma_sum",
                ]
                .map(String::from),
            );
            per_float(&stems.iter().map(String::as_str).collect::<Vec<_>>())
        }
        Family::Index => per_float(&["embedding", "embedding_backward", "causal_mask"]),
        Family::Loss => {
            let mut names = per_float(&["cross_entropy_32", "cross_entropy_256", "mean_loss"]);
            for group in [32, 256] {
                for logits in floats {
                    for dloss in floats {
                        names.push(format!("cross_entropy_backward_{group}_{logits}_{dloss}"));
                    }
                }
            }
            names
        }
        Family::Layout => ["gather", "concat_piece"]
            .iter()
            .flat_map(|s| [1, 2, 4, 8].map(|b| format!("{s}_{b}")))
            .collect(),
        Family::Optim => {
            let mut names = per_float(&["adamw", "sgd"]);
            names.extend(["f32", "f16", "bf16"].map(|p| format!("adamw_bf16_state_{p}")));
            names.extend(["f32", "f16", "bf16"].map(|p| format!("adamw_8bit_{p}")));
            names
        }
        Family::Random => per_float(&["dropout"]),
        Family::Quant => {
            let mut names = per_float(&[
                "dequantize_nf4",
                "dequantize_int8",
                "gather_nf4",
                "gather_int8",
            ]);
            names.push("dequantize_dynamic_f32".into());
            names
        }
        Family::Attention => {
            let mut names = per_float(&[
                "attention",
                "attention_delta",
                "attention_backward_kv",
                "attention_backward_q",
            ]);
            for stem in ["attention", "attention_backward_kv", "attention_backward_q"] {
                for (head, dtype) in [64, 128]
                    .into_iter()
                    .flat_map(|h| [(h, "bf16"), (h, "f16")])
                {
                    names.push(format!("{stem}_mma{head}_{dtype}"));
                }
            }
            names
        }
        Family::Rotary => per_float(&["rotary", "rotary_backward"]),
    }
}

/// What NVRTC made of `family` for `arch`, or `None` once said why where NVRTC is missing and
/// `HEADROOM_REQUIRE_NVRTC` is unset (CI sets it, so there a missing NVRTC fails).
fn compiled<T>(result: Result<T, Error>, family: Family, arch: &str) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(Error::NoCudaLibrary { detail, .. })
            if std::env::var_os("HEADROOM_REQUIRE_NVRTC").is_none() =>
        {
            eprintln!("skipped: NVRTC is not installed here ({detail})");
            None
        }
        Err(err) => panic!("{} for {arch}: {err}", family.file()),
    }
}

#[test]
fn every_kernel_family_compiles_to_ptx_with_every_kernel_the_backend_launches() {
    // One thread per architecture: each NVRTC compilation runs on one core.
    std::thread::scope(|scope| {
        for arch in ARCHES {
            scope.spawn(move || {
                for family in Family::ALL {
                    let Some(ptx) = compiled(compile_ptx(family, arch), family, arch) else {
                        return;
                    };
                    for name in kernels(family) {
                        assert!(
                            ptx.contains(&format!(".entry {name}(")),
                            "{} for {arch} has no kernel `{name}`",
                            family.file()
                        );
                    }
                }
            });
        }
    });
}

#[test]
fn every_kernel_assembles_for_turing_and_hopper_without_spilling_registers() {
    // One thread per architecture: each NVRTC compilation runs on one core.
    std::thread::scope(|scope| {
        for arch in ["sm_75", "sm_90"] {
            scope.spawn(move || {
                for family in Family::ALL {
                    if compiled(check_machine_code(family, arch), family, arch).is_none() {
                        return;
                    }
                }
            });
        }
    });
}

#[test]
fn asking_for_a_cuda_device_is_a_device_or_a_typed_error_never_a_panic() {
    match Device::cuda(0, AllocatorConfig::default()) {
        Ok(device) => {
            assert!(is_available());
            assert_eq!(device.to_string().split('#').next(), Some("cuda:0"));
            // The memory a budget is checked against before opening is the device's capacity.
            let capacity = device.allocator().with(|a| a.capacity());
            assert_eq!(device_memory(0).unwrap(), capacity);
            assert!(matches!(device.plan_target(), PlanTarget::Cuda { .. }));
        }
        Err(err @ (Error::NoCudaDriver { .. } | Error::NoCudaLibrary { .. })) => {
            assert!(!is_available());
            assert!(device_memory(0).is_err());
            let message = err.to_string();
            assert!(message.contains("not found") || message.contains("no CUDA driver found"));
            common::cuda_skipped(&message);
        }
        Err(other) => panic!("an unexpected error: {other}"),
    }
    assert!(device_memory(u32::MAX).is_err());
    if let Err(err) = Device::cuda(u32::MAX, AllocatorConfig::default()) {
        assert!(!err.to_string().is_empty());
    } else {
        panic!("device u32::MAX exists");
    }
}

#[test]
fn device_memory_under_a_limit_reports_an_oom_and_recovers() {
    let config = AllocatorConfig::default()
        .with_limit_bytes(64 << 20)
        .with_growth(Growth::OnDemand);
    let device = match Device::cuda(0, config) {
        Ok(device) => device,
        Err(why) => return common::cuda_skipped(&why.to_string()),
    };
    let mut held = Vec::new();
    let err = loop {
        match Array::zeros(&device, [1 << 20], DType::F32) {
            Ok(array) => held.push(array),
            Err(err) => break err,
        }
        assert!(
            held.len() <= 16,
            "a 64 MiB limit held more than 16 arrays of 4 MiB"
        );
    };
    assert!(err.is_out_of_memory(), "{err}");
    let report = err.oom_report().expect("an OOM report");
    assert!(report.source.starts_with("cuda:0"), "{}", report.source);
    assert!(
        held.len() >= 14,
        "only {} arrays of 4 MiB under 64 MiB",
        held.len()
    );
    // Freeing some makes room again, and the data written there reads back.
    held.truncate(held.len() / 2);
    let values: Vec<f64> = (0..1 << 20).map(|i| (i % 977) as f64).collect();
    let array =
        Array::from_f64(&device, [1 << 20], DType::F32, &values).expect("room after freeing");
    assert_eq!(array.to_f64().unwrap(), values);
    device.synchronize().unwrap();
}

#[test]
fn an_allocation_beyond_the_device_is_a_refusal_reported_as_an_oom() {
    let device = match Device::cuda(0, AllocatorConfig::default()) {
        Ok(device) => device,
        Err(why) => return common::cuda_skipped(&why.to_string()),
    };
    let total = device.allocator().stats().limit;
    let err = Array::zeros(&device, [(total / 2) as usize + 1], DType::F32).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    // The device still works after the refusal.
    let small = Array::from_f64(&device, [3], DType::F32, &[1.0, 2.0, 3.0]).unwrap();
    assert_eq!(small.to_f64().unwrap(), [1.0, 2.0, 3.0]);
}

#[test]
fn a_product_too_tight_for_the_preferred_workspace_runs_with_a_small_one_and_no_oom() {
    // 8 MiB holds the operands but not cuBLAS's preferred 32 (Hopper) or 4 MiB workspace
    // beside regions already cut for them.
    let config = AllocatorConfig::default()
        .with_limit_bytes(8 << 20)
        .with_growth(Growth::OnDemand);
    let device = match Device::cuda(0, config) {
        Ok(device) => device,
        Err(why) => return common::cuda_skipped(&why.to_string()),
    };
    let n = 512;
    let a_values: Vec<f64> = (0..n * n).map(|i| ((i % 7) as f64 - 3.0) / 4.0).collect();
    let b_values: Vec<f64> = (0..n * n).map(|i| ((i % 5) as f64 - 2.0) / 2.0).collect();
    let a = Array::from_f64(&device, [n, n], DType::F32, &a_values).unwrap();
    let b = Array::from_f64(&device, [n, n], DType::F32, &b_values).unwrap();
    let product = headroom_kernels::ops::gemm::matmul(&a, &b, false, false).unwrap();
    let got = product.to_f64().unwrap();
    for (row, col) in [(0, 0), (17, 300), (511, 511)] {
        let want: f64 = (0..n)
            .map(|k| a_values[row * n + k] * b_values[k * n + col])
            .sum();
        assert_eq!(got[row * n + col], want, "({row}, {col})");
    }
    assert_eq!(device.allocator().stats().ooms, 0);
}

/// CUDA device 0 and its host tier of `bytes` of page-locked memory of the device's context,
/// or none where the GPU test is skipped.
fn gpu_with_host_tier(bytes: u64) -> Option<(Device, Device)> {
    match Device::cuda(0, AllocatorConfig::default()) {
        Ok(device) => {
            let config = headroom_kernels::DeviceConfig::new(bytes);
            let host = Device::host_tier_of(&device, config).unwrap();
            Some((device, host))
        }
        Err(why) => {
            common::cuda_skipped(&why.to_string());
            None
        }
    }
}

#[test]
fn a_copy_to_the_host_tier_reads_its_source_before_the_device_reuses_or_writes_it() {
    use headroom_kernels::ops::data::copy_range;
    let Some((device, host)) = gpu_with_host_tier(1 << 20) else {
        return;
    };
    let values: Vec<f64> = (0..4096).map(|i| (i % 97) as f64).collect();
    // Offloaded and freed at once: the device hands the memory out again to work queued after
    // the copy, which runs on a stream of its own. Under CUDA_EMULATOR_DEFER=1 the kernels run
    // first here (the device's synchronization), so the fill would land before the copy read
    // unless the kernels wait for it.
    let on_gpu = Array::from_f64(&device, [4096], DType::F32, &values).unwrap();
    let addr = on_gpu.buffer().addr();
    let offloaded = on_gpu.to_device(&host).unwrap();
    drop(on_gpu);
    let reused = Array::full(&device, [4096], DType::F32, 7.0).unwrap();
    assert_eq!(
        reused.buffer().addr(),
        addr,
        "the freed memory, handed out again"
    );
    device.synchronize().unwrap();
    assert!(
        offloaded.to_f64().unwrap() == values,
        "the copy read its source after the device reused its memory"
    );
    // Written in place by a kernel after the copy was queued: the copy still reads what was.
    let mut source = Array::from_f64(&device, [4096], DType::F32, &values).unwrap();
    let offloaded = source.to_device(&host).unwrap();
    copy_range(&reused, 0, &mut source, 0, 4096).unwrap();
    device.synchronize().unwrap();
    assert!(
        offloaded.to_f64().unwrap() == values,
        "the copy read its source after a kernel wrote it"
    );
    assert_eq!(source.to_f64().unwrap(), vec![7.0; 4096]);
}

#[test]
fn an_array_fetched_ahead_is_waited_for_where_it_is_handed_over() {
    let Some((device, host)) = gpu_with_host_tier(1 << 20) else {
        return;
    };
    let values: Vec<f64> = (0..4096).map(|i| (i % 89) as f64).collect();
    let on_host = Array::from_f64(&host, [4096], DType::F32, &values).unwrap();
    // The copy runs on the copy stream; a kernel queued once the array is handed over waits
    // for it (under CUDA_EMULATOR_DEFER=1 the kernels' stream runs first here, so the product
    // of a kernel that did not wait would be the memory's earlier contents).
    let arriving = on_host.to_device_ahead(&device).unwrap();
    let copied = arriving.arrived().unwrap().deep_copy().unwrap();
    device.synchronize().unwrap();
    assert!(
        copied.to_f64().unwrap() == values,
        "a kernel read the array before its copy arrived"
    );
}

#[test]
fn arrays_go_to_the_host_tier_and_back_and_write_in_place() {
    let Some((device, host)) = gpu_with_host_tier(16 << 20) else {
        return;
    };
    let values: Vec<f64> = (0..4096).map(|i| (i % 251) as f64 - 100.0).collect();
    let on_gpu = Array::from_f64(&device, [64, 64], DType::BF16, &values).unwrap();
    let offloaded = on_gpu.to_device(&host).unwrap();
    assert_eq!(host.allocator().stats().in_use, 8192);
    assert_eq!(offloaded.to_f64().unwrap(), values);
    let back = offloaded.to_device(&device).unwrap();
    // The copy read the page-locked source before its memory could be reused: written over
    // now, it changes nothing the device holds (under CUDA_EMULATOR_DEFER=1 too, where the
    // emulated driver reads page-locked memory when the copy runs, as a GPU does).
    drop(offloaded);
    let over = Array::from_f64(&host, [64, 64], DType::BF16, &vec![0.0; 4096]).unwrap();
    assert!(
        back.to_f64().unwrap() == values,
        "the copy read the host tier after its memory was written over"
    );
    let mut target = Array::zeros(&device, [64, 64], DType::BF16).unwrap();
    target.write_from(&over).unwrap();
    assert_eq!(target.to_f64().unwrap(), vec![0.0; 4096]);
    // A source that stays (a weight streamed to the device) is not waited for when the copy is
    // queued, but before the host writes it in place: the device still gets what it held.
    let mut kept = Array::from_f64(&host, [64, 64], DType::BF16, &values).unwrap();
    let fetched = kept.to_device(&device).unwrap();
    let zeros: Vec<half::bf16> = vec![half::bf16::ZERO; 4096];
    kept.write_host(&zeros).unwrap();
    assert!(
        fetched.to_f64().unwrap() == values,
        "the copy read the host tier after it was written in place"
    );
    device.synchronize().unwrap();
    drop((over, kept, host));
}
