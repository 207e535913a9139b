//! Memory behaviour: the meta backend plans exactly what the CPU allocates, and every op fails
//! cleanly, with the allocator's report, at each allocation it makes.

mod common;

use common::{random, rng};
use headroom_alloc::{AllocatorConfig, EventKind, FaultInjecting, HostMemory, OomCause, Tag};
use headroom_kernels::ops::{elementwise as ew, gemm, reduce};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error, Result};

fn config() -> DeviceConfig {
    DeviceConfig::new(64 << 20).with_allocator(AllocatorConfig::default().with_history(10_000))
}

/// A little program touching every op family; returns what it keeps alive.
fn program(device: &Device) -> Result<Vec<Array>> {
    let data: Vec<f64> = (0..96).map(|i| (i as f64 * 0.37).sin() + 1.5).collect();
    let x = Array::from_f64(device, [8, 12], DType::F32, &data)?;
    let w = Array::from_f64(device, [12, 6], DType::BF16, &data[..72])?;
    let bias = Array::full(device, [6], DType::F32, 0.25)?;
    let xh = x.cast(DType::BF16)?;
    let h = gemm::matmul(&xh, &w, false, false)?; // casts through f32 workspace
    let h = ew::add(&h.cast(DType::F32)?, &bias)?;
    let g = ew::gelu(&h)?;
    let grads = {
        let _scope = device.scoped_tag(Tag::GRADIENTS);
        ew::gelu_backward(&h, &g)?
    };
    let s = reduce::sum(&g, 1)?;
    let m = reduce::reduce(reduce::ReduceOp::Max, &x, 0, true)?;
    drop(xh);
    Ok(vec![w, grads, s, m, ew::exp(&ew::scale(&x, 0.1)?)?])
}

/// The allocation events of a device: (kind, size, requested, tag).
fn events(device: &Device) -> Vec<(EventKind, u64, u64, Option<Tag>)> {
    device.allocator().with(|alloc| {
        alloc
            .history()
            .expect("recording is on")
            .events()
            .filter(|e| matches!(e.kind, EventKind::Alloc | EventKind::Free | EventKind::Oom))
            .map(|e| (e.kind, e.size, e.requested, e.tag))
            .collect()
    })
}

#[test]
fn meta_plans_exactly_the_allocations_and_peak_of_the_cpu() {
    let cpu = Device::cpu(config()).unwrap();
    let meta = Device::meta(config()).unwrap();
    let kept_cpu = program(&cpu).unwrap();
    let kept_meta = program(&meta).unwrap();
    let (cpu_events, meta_events) = (events(&cpu), events(&meta));
    assert!(
        cpu_events.len() > 20,
        "the program allocates: {}",
        cpu_events.len()
    );
    assert_eq!(cpu_events, meta_events);
    let (cpu_stats, meta_stats) = (cpu.allocator().stats(), meta.allocator().stats());
    assert_eq!(cpu_stats.peak_in_use, meta_stats.peak_in_use);
    assert_eq!(cpu_stats.peak_reserved, meta_stats.peak_reserved);
    assert_eq!(cpu_stats.tags, meta_stats.tags);
    let gradients = cpu_stats
        .tags
        .iter()
        .find(|t| t.tag == Tag::GRADIENTS)
        .unwrap();
    assert_eq!(
        gradients.live, 256,
        "8 x 6 f32 gradients take one 256-byte granule"
    );
    assert!(
        cpu_stats
            .tags
            .iter()
            .any(|t| t.tag == Tag::WORKSPACE && t.peak > 0)
    );
    drop((kept_cpu, kept_meta));
    assert_eq!(cpu.allocator().stats().in_use, 0);
    assert_eq!(meta.allocator().stats().in_use, 0);
}

type Op = fn(&[Array]) -> Result<Array>;
/// The shape and dtype of one input.
type Input = (&'static [usize], DType);

/// Every op family, each with the inputs it is run on.
fn ops() -> Vec<(&'static str, Op, Vec<Input>)> {
    vec![
        (
            "full",
            |_| Array::full(&device_of_thread(), [3, 3], DType::F32, 1.0),
            vec![],
        ),
        (
            "cast",
            |x| x[0].cast(DType::F16),
            vec![(&[4, 5], DType::F32)],
        ),
        ("clone", |x| x[0].try_clone(), vec![(&[4, 5], DType::BF16)]),
        ("gelu", |x| ew::gelu(&x[0]), vec![(&[4, 5], DType::F32)]),
        (
            "add",
            |x| ew::add(&x[0], &x[1]),
            vec![(&[4, 5], DType::F64), (&[5], DType::F64)],
        ),
        (
            "sum",
            |x| reduce::sum(&x[0], 0),
            vec![(&[4, 5], DType::F32)],
        ),
        (
            "matmul",
            |x| gemm::matmul(&x[0], &x[1], false, true),
            vec![(&[4, 5], DType::F32), (&[3, 5], DType::F32)],
        ),
        (
            "matmul bf16",
            |x| gemm::matmul(&x[0], &x[1], true, false),
            vec![(&[5, 4], DType::BF16), (&[5, 3], DType::BF16)],
        ),
    ]
}

thread_local! {
    static DEVICE: std::cell::RefCell<Option<Device>> = const { std::cell::RefCell::new(None) };
}

/// The device the current test made (for ops that take no input array).
fn device_of_thread() -> Device {
    DEVICE.with(|d| d.borrow().clone().expect("a device was set"))
}

#[test]
fn every_op_fails_cleanly_at_each_allocation_it_makes() {
    let mut rng = rng();
    for (name, op, inputs) in ops() {
        let device = Device::cpu(config()).unwrap();
        DEVICE.with(|d| *d.borrow_mut() = Some(device.clone()));
        let inputs: Vec<Array> = inputs
            .iter()
            .map(|&(shape, dtype)| random(&device, &mut rng, shape, dtype, 0.5, 1.5).0)
            .collect();
        let before = device.allocator().stats().allocations;
        drop(op(&inputs).unwrap());
        let allocations = device.allocator().stats().allocations - before;
        assert!(allocations >= 1, "{name} allocates");
        for k in 0..allocations {
            let in_use = device.allocator().stats().in_use;
            device.allocator().with(|alloc| alloc.inject_oom(k));
            let err = op(&inputs).expect_err(name);
            let report = err.oom_report().unwrap_or_else(|| panic!("{name}: {err}"));
            assert_eq!(report.cause, OomCause::Injected, "{name}");
            assert!(err.to_string().contains("out of memory"), "{name}: {err}");
            assert_eq!(
                device.allocator().stats().in_use,
                in_use,
                "{name} leaked at {k}"
            );
            device.allocator().with(|alloc| alloc.validate()).unwrap();
        }
        // And it still works afterwards.
        op(&inputs).unwrap();
    }
}

#[test]
fn a_refusing_source_surfaces_as_an_oom_with_the_report_intact() {
    let source = FaultInjecting::new(HostMemory::new(64 << 20)).fail_beyond(2 << 20);
    let device = Device::cpu_over(source, AllocatorConfig::default()).unwrap();
    let small = Array::zeros(&device, [1000], DType::F32).unwrap();
    let err = Array::zeros(&device, [1 << 20], DType::F32).unwrap_err();
    match &err {
        Error::OutOfMemory { op: "full", report } => {
            assert!(
                matches!(report.cause, OomCause::SourceRefused(_)),
                "{:?}",
                report.cause
            );
            assert_eq!(report.requested, 4 << 20);
        }
        other => panic!("expected an OOM, got {other}"),
    }
    assert_eq!(device.allocator().stats().in_use, 4096);
    drop(small);
}

#[test]
fn a_device_limit_makes_the_cpu_run_out_like_a_gpu() {
    let device = Device::cpu(DeviceConfig::new(1 << 20)).unwrap();
    let a = Array::zeros(&device, [128, 1024], DType::F32).unwrap(); // 512 KiB
    let b = Array::zeros(&device, [128, 1024], DType::F32).unwrap();
    let err = gemm::matmul(&a, &b, false, true).unwrap_err(); // needs 64 KiB more
    assert!(err.is_out_of_memory(), "{err}");
    let text = err.to_string();
    assert!(text.starts_with("matmul: out of memory"), "{text}");
    assert!(text.contains("activations"), "{text}");
}
