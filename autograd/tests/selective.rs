//! Selective recomputation: each product that computes its cheap operand again in the backward
//! pass (`layer_norm_linear`, `rms_norm_linear(s)`, `gelu_linear`, `swiglu_linear`,
//! `merged_heads_linear`, and `rms_norm_swiglu` beside the first ones) gives what the ops apart
//! give, values and every gradient bit for bit, in f32 and under bf16 autocast;
//! keeps exactly one operand-sized array less; and the meta device plans what the CPU allocates.

mod common;

use common::{device, rng, values};
use headroom_alloc::{AllocatorConfig, EventKind, GRANULE, Tag};
use headroom_autograd::{Result, Tape, Tensor, autocast};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Shape};

/// An op on the case's inputs.
type Op = fn(&[Tensor]) -> Result<Tensor>;

/// A selective op, the two ops apart it stands for, and the inputs (shape, value range) both
/// take, every one a variable.
struct Case {
    name: &'static str,
    inputs: &'static [(&'static [usize], f64, f64)],
    selective: Op,
    apart: Op,
    /// The shape of the product's operand, the array the selective op does not keep.
    operand: &'static [usize],
}

const EPS: f64 = 1e-5;

/// Every selective op, with and without a bias, and a SwiGLU whose gate and up are products
/// (in bf16 under autocast, as in a Llama MLP).
const CASES: &[Case] = &[
    Case {
        name: "rms_norm_linear",
        inputs: &[
            (&[2, 5, 16], -2.0, 2.0),
            (&[16], 0.5, 1.5),
            (&[24, 16], -0.5, 0.5),
            (&[24], -0.5, 0.5),
        ],
        selective: |x| x[0].rms_norm_linear((&x[1], EPS), &x[2], Some(&x[3])),
        apart: |x| x[0].rms_norm(&x[1], EPS)?.linear(&x[2], Some(&x[3])),
        operand: &[2, 5, 16],
    },
    Case {
        name: "rms_norm_linear without a bias",
        inputs: &[
            (&[10, 16], -2.0, 2.0),
            (&[16], 0.5, 1.5),
            (&[24, 16], -0.5, 0.5),
        ],
        selective: |x| x[0].rms_norm_linear((&x[1], EPS), &x[2], None),
        apart: |x| x[0].rms_norm(&x[1], EPS)?.linear(&x[2], None),
        operand: &[10, 16],
    },
    Case {
        name: "swiglu_linear",
        inputs: &[
            (&[2, 5, 24], -4.0, 4.0),
            (&[2, 5, 24], -2.0, 2.0),
            (&[16, 24], -0.5, 0.5),
            (&[16], -0.5, 0.5),
        ],
        selective: |x| x[0].swiglu_linear(&x[1], &x[2], Some(&x[3])),
        apart: |x| x[0].swiglu(&x[1])?.linear(&x[2], Some(&x[3])),
        operand: &[2, 5, 24],
    },
    Case {
        name: "swiglu_linear of products, without a bias",
        inputs: &[
            (&[10, 16], -2.0, 2.0),
            (&[24, 16], -0.5, 0.5),
            (&[24, 16], -0.5, 0.5),
            (&[16, 24], -0.5, 0.5),
        ],
        selective: |x| {
            x[0].linear(&x[1], None)?
                .swiglu_linear(&x[0].linear(&x[2], None)?, &x[3], None)
        },
        apart: |x| {
            x[0].linear(&x[1], None)?
                .swiglu(&x[0].linear(&x[2], None)?)?
                .linear(&x[3], None)
        },
        operand: &[10, 24],
    },
    Case {
        name: "rms_norm_linears: a SwiGLU MLP's gate and up",
        inputs: &[
            (&[10, 16], -2.0, 2.0),
            (&[16], 0.5, 1.5),
            (&[24, 16], -0.5, 0.5),
            (&[24, 16], -0.5, 0.5),
            (&[16, 24], -0.5, 0.5),
        ],
        selective: |x| {
            let gate_up = x[0].rms_norm_linears((&x[1], EPS), &[(&x[2], None), (&x[3], None)])?;
            gate_up[0].swiglu_linear(&gate_up[1], &x[4], None)
        },
        apart: |x| {
            // The norm's output cast once for both products, as a block casts it.
            let h = x[0].rms_norm(&x[1], EPS)?.for_matmul()?;
            h.linear(&x[2], None)?
                .swiglu_linear(&h.linear(&x[3], None)?, &x[4], None)
        },
        operand: &[10, 16],
    },
    Case {
        name: "rms_norm_swiglu: a Llama MLP keeping its gate alone",
        inputs: &[
            (&[2, 5, 16], -2.0, 2.0),
            (&[16], 0.5, 1.5),
            (&[24, 16], -0.5, 0.5),
            (&[24, 16], -0.5, 0.5),
            (&[16, 24], -0.5, 0.5),
        ],
        selective: |x| x[0].rms_norm_swiglu((&x[1], EPS), [&x[2], &x[3], &x[4]]),
        apart: |x| {
            let gate_up = x[0].rms_norm_linears((&x[1], EPS), &[(&x[2], None), (&x[3], None)])?;
            gate_up[0].swiglu_linear(&gate_up[1], &x[4], None)
        },
        // The up projection's output.
        operand: &[2, 5, 24],
    },
    Case {
        name: "rms_norm_linears, one with a bias",
        inputs: &[
            (&[2, 5, 16], -2.0, 2.0),
            (&[16], 0.5, 1.5),
            (&[24, 16], -0.5, 0.5),
            (&[24], -0.5, 0.5),
            (&[24, 16], -0.5, 0.5),
        ],
        selective: |x| {
            let ys = x[0].rms_norm_linears((&x[1], EPS), &[(&x[2], Some(&x[3])), (&x[4], None)])?;
            ys[0].mul(&ys[1])
        },
        apart: |x| {
            let h = x[0].rms_norm(&x[1], EPS)?.for_matmul()?;
            h.linear(&x[2], Some(&x[3]))?.mul(&h.linear(&x[4], None)?)
        },
        operand: &[2, 5, 16],
    },
    Case {
        name: "merged_heads_linear",
        inputs: &[
            (&[2, 3, 5, 8], -2.0, 2.0),
            (&[16, 24], -0.5, 0.5),
            (&[16], -0.5, 0.5),
        ],
        selective: |x| x[0].merged_heads_linear(&x[1], Some(&x[2])),
        apart: |x| {
            x[0].permute(&[0, 2, 1, 3])?
                .reshape([2, 5, 24])?
                .linear(&x[1], Some(&x[2]))
        },
        operand: &[2, 5, 24],
    },
    Case {
        name: "layer_norm_linear",
        inputs: &[
            (&[2, 5, 16], -2.0, 2.0),
            (&[16], 0.5, 1.5),
            (&[16], -0.5, 0.5),
            (&[24, 16], -0.5, 0.5),
            (&[24], -0.5, 0.5),
        ],
        selective: |x| x[0].layer_norm_linear((&x[1], &x[2], EPS), &x[3], Some(&x[4])),
        apart: |x| {
            x[0].layer_norm(&x[1], &x[2], EPS)?
                .linear(&x[3], Some(&x[4]))
        },
        operand: &[2, 5, 16],
    },
    Case {
        name: "gelu_linear",
        inputs: &[
            (&[10, 24], -3.0, 3.0),
            (&[16, 24], -0.5, 0.5),
            (&[16], -0.5, 0.5),
        ],
        selective: |x| x[0].gelu_linear(&x[1], Some(&x[2])),
        apart: |x| x[0].gelu()?.linear(&x[1], Some(&x[2])),
        operand: &[10, 24],
    },
];

/// The case's inputs on `device` as f32 variables, from `seed`, tagged as weights: what the
/// tape keeps of them is no activation.
fn inputs(device: &Device, case: &Case, seed: u64) -> Vec<Tensor> {
    let _weights = device.scoped_tag(Tag::WEIGHTS);
    let mut rng = headroom_alloc::trace::SplitMix64::new(seed);
    case.inputs
        .iter()
        .map(|&(shape, lo, hi)| {
            let v = values(&mut rng, Shape::new(shape).numel(), lo, hi);
            Tensor::variable(Array::from_f64(device, shape, DType::F32, &v).unwrap())
        })
        .collect()
}

/// `sum(op(inputs) * weights)`, with weights drawn from `seed` so that every output element's
/// gradient differs.
fn loss(op: Op, inputs: &[Tensor], seed: u64) -> Result<(Tensor, Tensor)> {
    let y = op(inputs)?;
    let mut rng = headroom_alloc::trace::SplitMix64::new(seed);
    let w = values(&mut rng, y.numel(), -1.0, 1.0);
    let w = Tensor::from_f64(y.device(), y.shape().clone(), DType::F32, &w)?;
    let loss = y.mul(&w)?.sum_all()?;
    Ok((y, loss))
}

/// The op's output (its dtype and values) and the gradient of every input, after one step.
fn step(op: Op, inputs: &[Tensor], seed: u64) -> (DType, Vec<f64>, Vec<Vec<f64>>) {
    let tape = Tape::new();
    let (y, loss) = tape.record(|| loss(op, inputs, seed)).unwrap();
    let sources: Vec<&Tensor> = inputs.iter().collect();
    let grads = tape.gradient(&loss, &sources).unwrap();
    let grads = sources
        .iter()
        .map(|x| {
            grads
                .get(x)
                .expect("every input gets a gradient")
                .to_f64()
                .unwrap()
        })
        .collect();
    (y.dtype(), y.to_f64().unwrap(), grads)
}

#[test]
fn selective_ops_give_the_ops_apart_bit_for_bit() {
    let device = device();
    let mut rng = rng();
    for policy in [None, Some(DType::BF16)] {
        let _policy = policy.map(autocast);
        for case in CASES {
            let seed = rng.next_u64();
            let x = inputs(&device, case, seed);
            let (dtype, y, grads) = step(case.selective, &x, seed);
            let (apart_dtype, apart_y, apart_grads) = step(case.apart, &x, seed);
            let what = format!("{} under {policy:?}", case.name);
            assert_eq!(dtype, apart_dtype, "{what}");
            assert_eq!(dtype, policy.unwrap_or(DType::F32), "{what}");
            assert!(y == apart_y, "{what}: the values differ");
            assert_eq!(grads.len(), case.inputs.len());
            for (k, (g, apart)) in grads.iter().zip(&apart_grads).enumerate() {
                assert!(
                    g.iter().any(|v| *v != 0.0),
                    "{what}: input {k} has a gradient"
                );
                assert!(g == apart, "{what}: the gradients of input {k} differ");
            }
        }
    }
}

/// A CPU device whose allocator splits every chunk, so that each array takes its request
/// rounded to the granule and no more.
fn exact_device() -> Device {
    let allocator = AllocatorConfig::default().with_max_internal_fragmentation(GRANULE);
    Device::cpu(DeviceConfig::new(64 << 20).with_allocator(allocator)).unwrap()
}

/// The activation bytes the tape's account says it keeps after the forward pass, and the
/// bytes the forward pass left allocated.
fn kept(device: &Device, op: Op, inputs: &[Tensor]) -> (usize, u64) {
    let before = device.allocator().stats().in_use;
    let tape = Tape::new();
    let (y, loss) = tape.record(|| loss(op, inputs, 7)).unwrap();
    let left = device.allocator().stats().in_use - before;
    let saved = tape.saved().activation_bytes();
    drop((y, loss, tape));
    assert_eq!(
        device.allocator().stats().in_use,
        before,
        "the step let go of all"
    );
    (saved, left)
}

#[test]
fn selective_ops_keep_one_operand_sized_array_less() {
    let device = exact_device();
    for policy in [None, Some(DType::BF16)] {
        let _policy = policy.map(autocast);
        // The product's operand is in the weight's dtype: bf16 under autocast.
        let size = if policy.is_some() { 2 } else { 4 };
        for case in CASES {
            let x = inputs(&device, case, 3);
            let (saved, left) = kept(&device, case.selective, &x);
            let (apart_saved, apart_left) = kept(&device, case.apart, &x);
            let operand = (Shape::new(case.operand).numel() * size).div_ceil(GRANULE as usize)
                * GRANULE as usize;
            let what = format!("{} under {policy:?}", case.name);
            assert_eq!(saved + operand, apart_saved, "{what}: the tape's account");
            assert_eq!(left + operand as u64, apart_left, "{what}: the allocator's");
        }
    }
}

/// A 64 MiB device, meta or CPU, that records its allocations.
fn recording(meta: bool) -> Device {
    let config =
        DeviceConfig::new(64 << 20).with_allocator(AllocatorConfig::default().with_history(10_000));
    if meta {
        Device::meta(config).unwrap()
    } else {
        Device::cpu(config).unwrap()
    }
}

/// One allocation event: (kind, size, requested, tag).
type AllocEvent = (EventKind, u64, u64, Option<Tag>);

/// The allocation events of a step of `case` on `device`, and its peak.
fn planned(device: &Device, case: &Case) -> (Vec<AllocEvent>, u64) {
    let x = inputs(device, case, 5);
    let tape = Tape::new();
    let (_, loss) = tape.record(|| loss(case.selective, &x, 5)).unwrap();
    let grads = tape.gradient(&loss, &x.iter().collect::<Vec<_>>()).unwrap();
    let events = device.allocator().with(|alloc| {
        alloc
            .history()
            .expect("recording is on")
            .events()
            .filter(|e| matches!(e.kind, EventKind::Alloc | EventKind::Free | EventKind::Oom))
            .map(|e| (e.kind, e.size, e.requested, e.tag))
            .collect()
    });
    // The gradients go in the order their map holds them, which differs from map to map.
    drop((grads, loss, tape, x));
    (events, device.allocator().stats().peak_in_use)
}

#[test]
fn the_meta_device_plans_what_the_cpu_allocates() {
    for policy in [None, Some(DType::BF16)] {
        let _policy = policy.map(autocast);
        for case in CASES {
            let (cpu, meta) = (recording(false), recording(true));
            let (cpu_events, cpu_peak) = planned(&cpu, case);
            let (meta_events, meta_peak) = planned(&meta, case);
            let what = format!("{} under {policy:?}", case.name);
            assert!(cpu_events.len() > 20, "{what}: {} events", cpu_events.len());
            assert_eq!(cpu_events, meta_events, "{what}");
            assert_eq!(cpu_peak, meta_peak, "{what}");
            assert_eq!(cpu.allocator().stats().in_use, 0, "{what}");
            assert_eq!(meta.allocator().stats().in_use, 0, "{what}");
        }
    }
}

#[test]
fn mismatched_operands_are_typed_errors() {
    let device = device();
    let t = |shape: &[usize]| Tensor::full(&device, shape, DType::F32, 0.5).unwrap();
    let (x, gamma, w) = (t(&[3, 8]), t(&[8]), t(&[4, 8]));
    let tape = Tape::new();
    let _recording = tape.start();
    let errors = [
        x.rms_norm_linear((&t(&[7]), EPS), &w, None).unwrap_err(),
        x.rms_norm_linear((&gamma, -1.0), &w, None).unwrap_err(),
        x.rms_norm_linear((&gamma, EPS), &t(&[4, 7]), None)
            .unwrap_err(),
        x.rms_norm_linear((&gamma, EPS), &w, Some(&t(&[5])))
            .unwrap_err(),
        x.swiglu_linear(&t(&[3, 7]), &t(&[4, 7]), None).unwrap_err(),
        x.swiglu_linear(&x, &t(&[4, 7]), None).unwrap_err(),
        t(&[2, 3, 5, 8])
            .merged_heads_linear(&t(&[4, 20]), None)
            .unwrap_err(),
    ];
    for err in errors {
        assert!(matches!(err, headroom_autograd::Error::Kernel(_)), "{err}");
        assert!(!err.is_out_of_memory(), "{err}");
    }
    let err = t(&[2, 3, 8])
        .merged_heads_linear(&t(&[4, 24]), None)
        .unwrap_err();
    assert!(
        err.to_string().contains("[batch, heads, time, head]"),
        "{err}"
    );
}
