//! Memory behaviour of every op, in one place: the meta backend plans exactly what the CPU
//! allocates (sizes, order, tags, peak), and what the CUDA backend does when planning for it,
//! and every op fails cleanly, with the allocator's report, at each allocation it makes.

mod common;

use common::{random, rng};
use headroom_alloc::trace::SplitMix64;
use headroom_alloc::{AllocatorConfig, EventKind, FaultInjecting, HostMemory, OomCause, Tag};
use headroom_kernels::ops::elementwise::{self as ew, BinaryOp, UnaryOp};
use headroom_kernels::ops::optim::{AdamW, Sgd, Update, adamw_step, sgd_step};
use headroom_kernels::ops::reduce::{self, ReduceOp};
use headroom_kernels::ops::{gemm, index, layout, loss, norm, random as rand, rotary, softmax};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error, PlanTarget, Result};

fn config() -> DeviceConfig {
    DeviceConfig::new(64 << 20).with_allocator(AllocatorConfig::default().with_history(10_000))
}

/// A little program touching every op family; returns what it keeps alive.
fn program(device: &Device) -> Result<Vec<Array>> {
    let data: Vec<f64> = (0..600).map(|i| (i as f64 * 0.37).sin() + 1.5).collect();
    let x = Array::from_f64(device, [8, 12], DType::F32, &data[..96])?;
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
    let m = reduce::reduce(ReduceOp::Max, &x, 0, true)?;
    drop(xh);
    let probs = softmax::softmax(&g)?;
    let dprobs = softmax::log_softmax_backward(&softmax::log_softmax(&g)?, &probs)?;
    let gamma = Array::full(device, [6], DType::F32, 1.5)?;
    let ln = norm::layer_norm(&h, &gamma, &bias, 1e-5)?;
    let ln_grads = norm::layer_norm_backward(&h, &gamma, &ln.mean, &ln.rstd, &dprobs)?;
    let rms = norm::rms_norm(&h, &gamma, 1e-6)?;
    let rms_grads = norm::rms_norm_backward(&h, &gamma, &rms.rstd, &dprobs)?;
    let gated = ew::swiglu(&h, &g)?;
    let gated_grads = ew::swiglu_backward(&h, &g, &dprobs)?;
    let ids = Array::from_host(device, [2, 4], &[0u32, 5, 11, 2, 2, 7, 1, 0])?;
    let emb = index::embedding(&x.deep_copy()?.reshape([12, 8])?, &ids)?;
    let demb = index::embedding_backward(&ids, &emb, 12)?;
    // 80 positions of two ids: runs long enough to be cut into pieces on CUDA.
    let frequent: Vec<u32> = (0..80).map(|p| u32::from(p % 5 == 0)).collect();
    let frequent = Array::from_host(device, [80], &frequent)?;
    let dy = Array::from_f64(device, [80, 1], DType::F32, &data[..80])?;
    let dfrequent = index::embedding_backward(&frequent, &dy, 2)?;
    let targets = Array::from_host(device, [8], &[0u32, 1, 2, 3, 4, 5, 0, 1])?;
    let loss = loss::cross_entropy(&h, &targets, Some(5))?;
    let dloss = Array::full(device, [], DType::F32, 0.125)?;
    let dlogits = loss::cross_entropy_backward(&h, &targets, &dloss, Some(5))?;
    let scores = Array::from_f64(device, [2, 5, 5], DType::F16, &data[..50])?;
    let masked = index::causal_mask(&scores, f64::NEG_INFINITY)?;
    let moved = layout::permute(&emb, &[2, 0, 1])?;
    let spread = layout::broadcast_to(&bias, [3, 8, 6])?;
    let folded = reduce::sum_to(&spread, [8, 1])?;
    let halves = layout::split(&folded, 0, &[3, 5])?;
    let whole = layout::concat(&[&halves[1], &halves[0]], 0)?;
    let dropped = rand::dropout(&moved, 0.25, 9)?;
    let freq = Array::from_f64(device, [3], DType::F32, &rotary::inv_freq(6, 1e4, None)?)?;
    let turned = rotary::rotary(&h.reshape([2, 4, 6])?, &freq, 3)?;
    let turned_back = rotary::rotary_backward(&turned, &freq, 3)?;
    let mut param = Array::from_f64(device, [8, 6], DType::F32, &data[..48])?;
    let (mut m1, mut m2) = {
        let _scope = device.scoped_tag(Tag::OPTIMIZER_STATE);
        (
            Array::zeros(device, [8, 6], DType::F32)?,
            Array::zeros(device, [8, 6], DType::F32)?,
        )
    };
    adamw_step(
        &AdamW::default(),
        Update::new(1),
        &mut param,
        &dlogits,
        &mut m1,
        &mut m2,
    )?;
    Ok(vec![
        w,
        grads,
        s,
        m,
        ew::exp(&ew::scale(&x, 0.1)?)?,
        ln.y,
        ln_grads.dx,
        ln_grads.dgamma,
        rms.y,
        rms_grads.dx,
        rms_grads.dgamma,
        gated,
        gated_grads.dgate,
        demb,
        dfrequent,
        loss,
        masked,
        dropped,
        param,
        m1,
        m2,
        whole,
        turned_back,
    ])
}

/// One allocation event: (kind, size, requested, tag).
type AllocEvent = (EventKind, u64, u64, Option<Tag>);

/// The allocation events of a device.
fn events(device: &Device) -> Vec<AllocEvent> {
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
        cpu_events.len() > 60,
        "the program allocates: {}",
        cpu_events.len()
    );
    assert_eq!(cpu_events, meta_events);
    for (c, m) in kept_cpu.iter().zip(&kept_meta) {
        assert_eq!((c.shape(), c.dtype()), (m.shape(), m.dtype()));
    }
    let (cpu_stats, meta_stats) = (cpu.allocator().stats(), meta.allocator().stats());
    assert_eq!(cpu_stats.peak_in_use, meta_stats.peak_in_use);
    assert_eq!(cpu_stats.peak_reserved, meta_stats.peak_reserved);
    assert_eq!(cpu_stats.tags, meta_stats.tags);
    let live = |tag| cpu_stats.tags.iter().find(|t| t.tag == tag).unwrap().live;
    assert_eq!(
        live(Tag::GRADIENTS),
        256,
        "8 x 6 f32 gradients take one 256-byte granule"
    );
    assert_eq!(live(Tag::OPTIMIZER_STATE), 512, "two 8 x 6 f32 moments");
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

/// cuBLAS's workspace per product in the CUDA plans below.
const GEMM_WORKSPACE: u64 = 1 << 20;

/// The bytes requested by the allocations of `events` under the workspace tag, and the rest.
fn split_workspace(events: Vec<AllocEvent>) -> (Vec<u64>, Vec<AllocEvent>) {
    let (workspace, rest): (Vec<_>, Vec<_>) = events
        .into_iter()
        .partition(|&(_, _, _, tag)| tag == Some(Tag::WORKSPACE));
    let allocs = workspace
        .iter()
        .filter(|e| e.0 == EventKind::Alloc)
        .map(|e| e.2)
        .collect();
    (allocs, rest)
}

#[test]
fn a_plan_for_cuda_takes_the_cuda_kernels_scratch_instead_of_the_cpus_panels() {
    let cpu_plan = Device::meta(config()).unwrap();
    let target = PlanTarget::Cuda {
        gemm_workspace: GEMM_WORKSPACE,
    };
    let cuda_plan = Device::meta_for(target, config()).unwrap();
    program(&cpu_plan).unwrap();
    program(&cuda_plan).unwrap();
    let (cpu_scratch, cpu_rest) = split_workspace(events(&cpu_plan));
    let (cuda_scratch, cuda_rest) = split_workspace(events(&cuda_plan));
    // Everything the op layer allocates is the same; only the kernels' scratch differs.
    assert_eq!(cpu_rest, cuda_rest);
    assert!(!cpu_scratch.is_empty(), "the CPU widens bf16 panels to f32");
    assert_eq!(
        cuda_scratch,
        [
            GEMM_WORKSPACE, // the one product's cuBLAS workspace
            768,            // layer-norm partial sums: 8 slices x 2 x 6 f64
            384,            // RMS-norm partial sums: 8 slices x 1 x 6 f64
            13 * 2 * 4,     // embedding gradient: where each of 12 ids' positions and pieces start
            8 * 4,          // and the 8 positions grouped by id (too few to cut into pieces)
            3 * 2 * 4,      // 80 positions of 2 ids: where each id's positions and pieces start,
            80 * 4,         // the positions grouped by id,
            4 * 2 * 4,      // room for the most pieces 80 positions make (4), their bounds
            4 * 4,          // and their partial rows (1 f32 each)
            8 * 8,          // cross-entropy: 8 row losses in f64
        ]
    );
    // Under a limit too tight for cuBLAS's preferred workspace, a product plans 16 KiB, as the
    // CUDA backend falls back to, and no out-of-memory.
    let tight = PlanTarget::Cuda {
        gemm_workspace: 1 << 30,
    };
    let plan = Device::meta_for(tight, config()).unwrap();
    program(&plan).unwrap();
    let (scratch, _) = split_workspace(events(&plan));
    assert_eq!(scratch[0], 16 << 10);
    assert_eq!(plan.allocator().stats().ooms, 0);
}

/// Grows a device's memory by a few megabytes, frees some of it and gives what it can back.
#[cfg(feature = "cuda")]
fn grow_and_trim(device: &Device) -> Result<Vec<Array>> {
    let mib = |n: usize| Array::zeros(device, [n << 18], DType::F32);
    let mut kept = vec![mib(1)?, mib(2)?, mib(3)?, mib(4)?];
    kept.remove(1);
    device.allocator().release_cached();
    kept.push(mib(5)?);
    kept.remove(3);
    device.allocator().release_cached();
    Ok(kept)
}

/// On a GPU: the plan for CUDA makes the very allocations a CUDA run makes, in order, and
/// reserves as it does, whether regions are allocated whole or grow in place.
#[cfg(feature = "cuda")]
#[test]
fn a_plan_for_cuda_matches_a_cuda_run_allocation_for_allocation() {
    use headroom_alloc::Growth;
    use headroom_kernels::cuda::CudaOptions;
    let options = CudaOptions {
        gemm_workspace: Some(GEMM_WORKSPACE),
        ..CudaOptions::default()
    };
    for growth in [Growth::OnDemand, Growth::Expandable] {
        let config = DeviceConfig {
            allocator: config().allocator.with_growth(growth),
            ..config()
        };
        let allocator = config.allocator.clone().with_limit_bytes(config.memory);
        let gpu = match Device::cuda_with(0, allocator, options) {
            Ok(device) => device,
            Err(why) => return common::cuda_skipped(&why.to_string()),
        };
        let target = PlanTarget::Cuda {
            gemm_workspace: GEMM_WORKSPACE,
        };
        let plan = Device::meta_for(target, config).unwrap();
        let kept_gpu = (program(&gpu).unwrap(), grow_and_trim(&gpu).unwrap());
        let kept_plan = (program(&plan).unwrap(), grow_and_trim(&plan).unwrap());
        assert_eq!(events(&gpu), events(&plan), "{growth:?}");
        let (gpu_stats, plan_stats) = (gpu.allocator().stats(), plan.allocator().stats());
        assert_eq!(gpu_stats.peak_in_use, plan_stats.peak_in_use, "{growth:?}");
        assert_eq!(gpu_stats.tags, plan_stats.tags, "{growth:?}");
        let reserving = |s: &headroom_alloc::Stats| {
            (s.peak_reserved, s.reserved, s.regions, s.regions_reserved)
        };
        assert_eq!(reserving(&gpu_stats), reserving(&plan_stats), "{growth:?}");
        if growth == Growth::Expandable {
            assert_eq!(gpu_stats.regions, 1, "the GPU's region grew in place");
        }
        drop((kept_gpu, kept_plan));
    }
}

/// One input of an op under test.
#[derive(Clone, Copy)]
enum Input {
    /// Random floats in [0.5, 1.5) of this shape and dtype.
    Float(&'static [usize], DType),
    /// Random U32 ids below a bound, of this shape.
    Ids(&'static [usize], u32),
}

impl Input {
    fn make(self, device: &Device, rng: &mut SplitMix64) -> Array {
        match self {
            Input::Float(shape, dtype) => random(device, rng, shape, dtype, 0.5, 1.5).0,
            Input::Ids(shape, bound) => {
                let n = shape.iter().product();
                let ids: Vec<u32> = (0..n)
                    .map(|_| (rng.next_u64() % bound as u64) as u32)
                    .collect();
                Array::from_host(device, shape, &ids).unwrap()
            }
        }
    }
}

/// Runs an op on a device and inputs, returning its outputs.
type Run = Box<dyn Fn(&Device, &[Array]) -> Result<Vec<Array>>>;

/// An op under test: its name (what its errors start with), what it runs, its inputs.
struct Case {
    name: &'static str,
    run: Run,
    inputs: Vec<Input>,
}

fn case(
    name: &'static str,
    inputs: &[Input],
    run: impl Fn(&Device, &[Array]) -> Result<Vec<Array>> + 'static,
) -> Case {
    Case {
        name,
        run: Box::new(run),
        inputs: inputs.to_vec(),
    }
}

/// Every op of every family, each on inputs that make it allocate all it can.
fn cases() -> Vec<Case> {
    use Input::{Float, Ids};
    let f32s: &[Input] = &[Float(&[4, 5], DType::F32)];
    let pair: &[Input] = &[Float(&[4, 5], DType::F32), Float(&[4, 5], DType::F32)];
    let mut cases = vec![
        case("full", &[], |d, _| {
            Ok(vec![Array::full(d, [3, 3], DType::F32, 1.0)?])
        }),
        case("from_host", &[], |d, _| {
            Ok(vec![Array::from_f64(d, [2], DType::BF16, &[1.0, 2.0])?])
        }),
        case("cast", f32s, |_, x| Ok(vec![x[0].cast(DType::F16)?])),
        case("copy", &[Float(&[4, 5], DType::BF16)], |_, x| {
            Ok(vec![x[0].deep_copy()?])
        }),
        case("sum", f32s, |_, x| Ok(vec![reduce::sum(&x[0], 0)?])),
        case("mean", &[Float(&[4, 5], DType::F16)], |_, x| {
            Ok(vec![reduce::mean(&x[0], 1)?])
        }),
        case("max", f32s, |_, x| Ok(vec![reduce::max(&x[0], 1)?])),
        // Long rows and long columns reduced in parts, through a workspace on a GPU.
        case("sum_squares", &[Float(&[2, 40_000], DType::F32)], |_, x| {
            Ok(vec![reduce::reduce(ReduceOp::SumSquares, &x[0], 1, false)?])
        }),
        case("sum", &[Float(&[1000, 96], DType::BF16)], |_, x| {
            Ok(vec![reduce::sum(&x[0], 0)?])
        }),
        case("matmul", pair, |_, x| {
            Ok(vec![gemm::matmul(&x[0], &x[1], false, true)?])
        }),
        case(
            "matmul",
            &[Float(&[2, 5, 4], DType::BF16), Float(&[5, 3], DType::BF16)],
            |_, x| Ok(vec![gemm::matmul(&x[0], &x[1], true, false)?]),
        ),
        case(
            "matmul_bias",
            &[
                Float(&[3, 4], DType::BF16),
                Float(&[5, 4], DType::BF16),
                Float(&[5], DType::BF16),
            ],
            |_, x| Ok(vec![gemm::matmul_bias(&x[0], &x[1], &x[2], false, true)?]),
        ),
        case("permute", &[Float(&[2, 3, 4], DType::F64)], |_, x| {
            Ok(vec![layout::permute(&x[0], &[2, 0, 1])?])
        }),
        case("transpose", &[Ids(&[4, 5], 7)], |_, x| {
            Ok(vec![layout::transpose(&x[0], 0, 1)?])
        }),
        case("broadcast_to", &[Float(&[4, 1], DType::BF16)], |_, x| {
            Ok(vec![layout::broadcast_to(&x[0], [3, 4, 5])?])
        }),
        case("split", &[Float(&[4, 6], DType::F16)], |_, x| {
            layout::split(&x[0], 1, &[1, 2, 3])
        }),
        case(
            "concat",
            &[Float(&[4, 2], DType::F32), Float(&[4, 3], DType::F32)],
            |_, x| Ok(vec![layout::concat(&[&x[0], &x[1]], 1)?]),
        ),
        case("sum_to", &[Float(&[2, 3, 4, 5], DType::F32)], |_, x| {
            Ok(vec![reduce::sum_to(&x[0], [3, 1, 5])?])
        }),
        case("dropout", &[Float(&[4, 5], DType::F16)], |_, x| {
            Ok(vec![rand::dropout(&x[0], 0.5, 3)?])
        }),
        case("dropout", f32s, |_, x| {
            Ok(vec![rand::dropout_backward(&x[0], 0.5, 3)?])
        }),
        case("softmax", f32s, |_, x| Ok(vec![softmax::softmax(&x[0])?])),
        case("softmax", &[Float(&[2, 4, 4], DType::BF16)], |_, x| {
            Ok(vec![softmax::attention_softmax(&x[0], 0.5, true)?])
        }),
        case("log_softmax", f32s, |_, x| {
            Ok(vec![softmax::log_softmax(&x[0])?])
        }),
        case("softmax_backward", pair, |_, x| {
            Ok(vec![softmax::softmax_backward(&x[0], &x[1])?])
        }),
        case("log_softmax_backward", pair, |_, x| {
            Ok(vec![softmax::log_softmax_backward(&x[0], &x[1])?])
        }),
        case(
            "layer_norm",
            &[
                Float(&[2, 3, 8], DType::BF16),
                Float(&[8], DType::BF16),
                Float(&[8], DType::BF16),
            ],
            |_, x| {
                let out = norm::layer_norm(&x[0], &x[1], &x[2], 1e-5)?;
                Ok(vec![out.y, out.mean, out.rstd])
            },
        ),
        case(
            "layer_norm_backward",
            &[
                Float(&[2, 3, 8], DType::F16),
                Float(&[8], DType::F16),
                Float(&[2, 3], DType::F32),
                Float(&[2, 3], DType::F32),
                Float(&[2, 3, 8], DType::F16),
            ],
            |_, x| {
                let g = norm::layer_norm_backward(&x[0], &x[1], &x[2], &x[3], &x[4])?;
                Ok(vec![g.dx, g.dgamma, g.dbeta])
            },
        ),
        case(
            "rms_norm",
            &[Float(&[2, 3, 8], DType::BF16), Float(&[8], DType::BF16)],
            |_, x| {
                let out = norm::rms_norm(&x[0], &x[1], 1e-6)?;
                Ok(vec![out.y, out.rstd])
            },
        ),
        case(
            "rms_norm_backward",
            &[
                Float(&[2, 3, 8], DType::F16),
                Float(&[8], DType::F16),
                Float(&[2, 3], DType::F32),
                Float(&[2, 3, 8], DType::F16),
            ],
            |_, x| {
                let g = norm::rms_norm_backward(&x[0], &x[1], &x[2], &x[3])?;
                Ok(vec![g.dx, g.dgamma])
            },
        ),
        case("swiglu", &[Float(&[4, 5], DType::BF16); 2], |_, x| {
            Ok(vec![ew::swiglu(&x[0], &x[1])?])
        }),
        case(
            "swiglu_backward",
            &[Float(&[4, 5], DType::F32); 3],
            |_, x| {
                let g = ew::swiglu_backward(&x[0], &x[1], &x[2])?;
                Ok(vec![g.dgate, g.dup])
            },
        ),
        case(
            "embedding",
            &[Float(&[9, 4], DType::F16), Ids(&[3, 2], 9)],
            |_, x| Ok(vec![index::embedding(&x[0], &x[1])?]),
        ),
        case(
            "embedding_backward",
            &[Ids(&[3, 2], 9), Float(&[3, 2, 4], DType::F32)],
            |_, x| Ok(vec![index::embedding_backward(&x[0], &x[1], 9)?]),
        ),
        // Enough positions for long runs to be cut into pieces, with their partial rows.
        case(
            "embedding_backward",
            &[Ids(&[40, 2], 2), Float(&[40, 2, 4], DType::BF16)],
            |_, x| Ok(vec![index::embedding_backward(&x[0], &x[1], 2)?]),
        ),
        case(
            "cross_entropy",
            &[Float(&[5, 6], DType::BF16), Ids(&[5], 6)],
            |_, x| Ok(vec![loss::cross_entropy(&x[0], &x[1], None)?]),
        ),
        case(
            "cross_entropy_backward",
            &[
                Float(&[5, 6], DType::BF16),
                Ids(&[5], 6),
                Float(&[], DType::F32),
            ],
            |_, x| {
                Ok(vec![loss::cross_entropy_backward(
                    &x[0], &x[1], &x[2], None,
                )?])
            },
        ),
        case(
            "rotary",
            &[Float(&[2, 3, 8], DType::BF16), Float(&[4], DType::F32)],
            |_, x| Ok(vec![rotary::rotary(&x[0], &x[1], 5)?]),
        ),
        case(
            "rotary_backward",
            &[Float(&[3, 4], DType::F64), Float(&[2], DType::F64)],
            |_, x| Ok(vec![rotary::rotary_backward(&x[0], &x[1], 0)?]),
        ),
        case("causal_mask", &[Float(&[2, 3, 3], DType::F64)], |_, x| {
            Ok(vec![index::causal_mask(&x[0], f64::NEG_INFINITY)?])
        }),
    ];
    for op in UnaryOp::EVERY {
        cases.push(case(op.name(), f32s, move |_, x| {
            Ok(vec![ew::unary(op, &x[0])?])
        }));
    }
    for op in BinaryOp::EVERY {
        // Broadcasting too: [4, 5] with [5].
        let inputs: &[Input] = &[Float(&[4, 5], DType::F32), Float(&[5], DType::F32)];
        cases.push(case(op.name(), inputs, move |_, x| {
            Ok(vec![ew::binary(op, &x[0], &x[1])?])
        }));
    }
    cases
}

#[test]
fn every_op_fails_cleanly_at_each_allocation_it_makes() {
    let mut rng = rng();
    for Case { name, run, inputs } in cases() {
        let device = Device::cpu(config()).unwrap();
        let inputs: Vec<Array> = inputs.iter().map(|i| i.make(&device, &mut rng)).collect();
        let before = device.allocator().stats().allocations;
        drop(run(&device, &inputs).unwrap());
        let allocations = device.allocator().stats().allocations - before;
        assert!(allocations >= 1, "{name} allocates");
        for k in 0..allocations {
            let in_use = device.allocator().stats().in_use;
            device.allocator().with(|alloc| alloc.inject_oom(k));
            let err = run(&device, &inputs).expect_err(name);
            let report = err.oom_report().unwrap_or_else(|| panic!("{name}: {err}"));
            assert_eq!(report.cause, OomCause::Injected, "{name}");
            let text = err.to_string();
            assert!(text.starts_with(name), "{name}: {text}");
            assert!(text.contains("out of memory"), "{name}: {text}");
            assert_eq!(
                device.allocator().stats().in_use,
                in_use,
                "{name} leaked at allocation {k}"
            );
            device.allocator().with(|alloc| alloc.validate()).unwrap();
        }
        // And it still works afterwards.
        run(&device, &inputs).unwrap();
    }
}

#[test]
fn the_fused_optimizer_steps_allocate_nothing_so_they_cannot_run_out() {
    let device = Device::cpu(config()).unwrap();
    let mut rng = rng();
    let [mut param, grad, mut m, mut v] =
        [(); 4].map(|_| random(&device, &mut rng, &[7, 3], DType::BF16, 0.5, 1.5).0);
    let before = device.allocator().stats();
    device.allocator().with(|alloc| alloc.inject_oom(0));
    adamw_step(
        &AdamW::default(),
        Update::new(3),
        &mut param,
        &grad,
        &mut m,
        &mut v,
    )
    .unwrap();
    let sgd = Sgd {
        momentum: 0.9,
        ..Sgd::default()
    };
    sgd_step(&sgd, Update::new(2), &mut param, &grad, Some(&mut m)).unwrap();
    let after = device.allocator().stats();
    assert_eq!(after.allocations, before.allocations);
    assert_eq!(after.in_use, before.in_use);
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
