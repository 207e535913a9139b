//! NCCL at world size 1 on CUDA device 0 (NCCL refuses two ranks on one GPU): every collective
//! keeps or copies its array in every dtype, and bad arguments are refused before NCCL runs.
//! Without a GPU or without NCCL the GPU tests say why and pass, unless `HEADROOM_REQUIRE_CUDA`
//! or `HEADROOM_REQUIRE_NCCL` is set (`scripts/gpu-check.sh run` sets both).
#![cfg(feature = "nccl")]

mod common;

use common::assert_refused;
use headroom_alloc::AllocatorConfig;
use headroom_collectives::{
    Collective, DEFAULT_TIMEOUT, Error, NcclCollective, ReduceOp, UniqueId,
};
use headroom_kernels::{Array, DType, Device, DeviceConfig};

/// Says why a check did not run, or fails where `variable` asks that it run.
fn skipped(variable: &str, why: &str) {
    if std::env::var_os(variable).is_some() {
        panic!("{variable} is set, and the NCCL check did not run: {why}");
    }
    eprintln!("nccl skipped: {why}");
}

/// CUDA device 0 under a 256 MiB limit.
fn gpu() -> Option<Device> {
    let config = AllocatorConfig::default().with_limit_bytes(256 << 20);
    Device::cuda(0, config)
        .map_err(|err| skipped("HEADROOM_REQUIRE_CUDA", &format!("no CUDA device: {err}")))
        .ok()
}

/// A new job's id, where NCCL is installed.
fn unique_id() -> Option<UniqueId> {
    match UniqueId::new() {
        Ok(id) => Some(id),
        Err(err @ Error::NoLibrary { .. }) => {
            skipped("HEADROOM_REQUIRE_NCCL", &err.to_string());
            None
        }
        Err(err) => panic!("NCCL is installed but gave no id: {err}"),
    }
}

/// The values of `array` as f64.
fn values(array: &Array) -> Vec<f64> {
    array.to_f64().unwrap()
}

#[test]
fn collectives_of_one_rank_on_a_gpu_keep_or_copy_their_arrays() {
    let Some(device) = gpu() else { return };
    let Some(id) = unique_id() else { return };
    let mut rank = NcclCollective::new(&device, 0, 1, &id, DEFAULT_TIMEOUT).unwrap();
    assert_eq!((rank.rank(), rank.world_size()), (0, 1));
    let data: Vec<f32> = (0..1000).map(|i| (i % 97) as f32 - 13.0).collect();
    let unsigned: Vec<f32> = data.iter().map(|x| x.abs()).collect();
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U32,
        DType::U8,
    ] {
        let source = if matches!(dtype, DType::U32 | DType::U8) {
            &unsigned
        } else {
            &data
        };
        let host = Array::from_host(&device, [10, 100], source).unwrap();
        let want = values(&host.cast(dtype).unwrap());
        for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
            let integer = matches!(dtype, DType::I32 | DType::U32 | DType::U8);
            if integer && op == ReduceOp::Avg {
                continue;
            }
            let mut array = host.cast(dtype).unwrap();
            rank.all_reduce(&mut array, op).unwrap();
            assert_eq!(values(&array), want, "all_reduce {op:?} {dtype}");
        }
        let input = host.cast(dtype).unwrap();
        let mut output = Array::zeros(&device, [1000], dtype).unwrap();
        rank.reduce_scatter(&input, &mut output, ReduceOp::Sum)
            .unwrap();
        assert_eq!(values(&output), want, "reduce_scatter {dtype}");
        let mut gathered = Array::zeros(&device, [10, 100], dtype).unwrap();
        rank.all_gather(&output, &mut gathered).unwrap();
        assert_eq!(values(&gathered), want, "all_gather {dtype}");
        rank.broadcast(&mut gathered, 0).unwrap();
        assert_eq!(values(&gathered), want, "broadcast {dtype}");
    }
    rank.barrier().unwrap();
}

#[test]
fn a_collective_refuses_an_array_of_another_device_or_the_wrong_size() {
    let Some(device) = gpu() else { return };
    let Some(id) = unique_id() else { return };
    let mut rank = NcclCollective::new(&device, 0, 1, &id, DEFAULT_TIMEOUT).unwrap();
    let cpu = Device::cpu(DeviceConfig::new(1 << 20)).unwrap();
    let mut elsewhere = Array::zeros(&cpu, [4], DType::F32).unwrap();
    let err = rank.all_reduce(&mut elsewhere, ReduceOp::Sum).unwrap_err();
    assert!(err.to_string().contains("where rank 0 runs on"), "{err}");
    let input = Array::zeros(&device, [4], DType::F32).unwrap();
    let mut output = Array::zeros(&device, [3], DType::F32).unwrap();
    let err = rank.all_gather(&input, &mut output).unwrap_err();
    assert_refused(&err, "all_gather");
    let err = rank.broadcast(&mut output, 1).unwrap_err();
    assert!(
        err.to_string()
            .contains("root 1 is not a rank of a world of 1"),
        "{err}"
    );
    // The refusals left the communicator working.
    rank.barrier().unwrap();
}

#[test]
fn a_rank_outside_its_world_or_off_a_cuda_device_is_refused_before_nccl_is_needed() {
    let id = UniqueId::from_bytes([7; 128]);
    let cpu = Device::cpu(DeviceConfig::new(1 << 20)).unwrap();
    let err = NcclCollective::new(&cpu, 0, 1, &id, DEFAULT_TIMEOUT)
        .err()
        .unwrap();
    assert!(err.to_string().contains("is not a CUDA device"), "{err}");
    let Some(device) = gpu() else { return };
    for (rank, world) in [(1, 1), (0, 0), (3, 2)] {
        let err = NcclCollective::new(&device, rank, world, &id, DEFAULT_TIMEOUT)
            .err()
            .unwrap();
        let want = format!("rank {rank} is not a rank of a world of {world}");
        assert!(err.to_string().contains(&want), "{err}");
    }
}

#[test]
fn a_unique_id_goes_through_text_and_back() {
    let bytes: [u8; 128] = std::array::from_fn(|i| (i * 37 % 256) as u8);
    let id = UniqueId::from_bytes(bytes);
    let text = id.to_string();
    assert_eq!(text.len(), 256);
    assert!(text.starts_with("00254a6f"), "{text}");
    let back: UniqueId = text.parse().unwrap();
    assert_eq!(back.bytes(), bytes);
    assert_eq!(back, id);
    for bad in ["", "00", &text[..255], &format!("{}zz", &text[..254])] {
        let err = bad.parse::<UniqueId>().unwrap_err();
        assert!(matches!(err, Error::Argument { .. }), "{bad:?}: {err}");
    }
}

#[test]
fn a_rank_whose_peer_never_joins_times_out_instead_of_hanging() {
    let Some(device) = gpu() else { return };
    let Some(id) = unique_id() else { return };
    let timeout = std::time::Duration::from_secs(3);
    let started = std::time::Instant::now();
    let err = NcclCollective::new(&device, 0, 2, &id, timeout)
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            Error::Timeout {
                op: "NcclCollective::new",
                rank: 0,
                world: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("rank 0 of 2 did not complete within"),
        "{err}"
    );
    // The abort returned: the wait ended near its deadline, not at some later point.
    assert!(started.elapsed() < timeout * 10, "{:?}", started.elapsed());
}
