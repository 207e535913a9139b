//! Out of memory anywhere in a step: the allocator's report reaches the caller, and once the
//! caller drops what it holds, bytes in use are exactly what they were before the step.

mod common;

use common::{Mlp, TinyTransformer, batch, device};
use headroom_alloc::OomCause;
use headroom_autograd::{Gradients, Result, Tape, Tensor, autocast};
use headroom_kernels::{DType, Device};

/// A forward and backward pass: the gradients of `loss()` for `params`.
fn step(loss: impl FnOnce() -> Result<Tensor>, params: &[&Tensor]) -> Result<Gradients> {
    let tape = Tape::new();
    let loss = tape.record(loss)?;
    tape.gradient(&loss, params)
}

/// Injects an OOM at every allocation of `run` in turn and checks the failure and the memory.
fn fails_cleanly_everywhere(device: &Device, name: &str, run: &dyn Fn() -> Result<Gradients>) {
    let before = device.allocator().stats();
    drop(run().unwrap());
    let allocations = device.allocator().stats().allocations - before.allocations;
    assert_eq!(device.allocator().stats().in_use, before.in_use);
    assert!(allocations > 10, "{name}: a step allocates ({allocations})");
    for k in 0..allocations {
        device.allocator().with(|a| a.inject_oom(k));
        let err = run().expect_err("an injected OOM");
        let report = err
            .oom_report()
            .unwrap_or_else(|| panic!("{name} at {k}: {err}"));
        assert_eq!(report.cause, OomCause::Injected, "{name} at {k}");
        assert!(err.to_string().contains("out of memory"), "{name}: {err}");
        assert_eq!(
            device.allocator().stats().in_use,
            before.in_use,
            "{name}: bytes left behind after an OOM at allocation {k} of {allocations}"
        );
        device.allocator().with(|a| a.validate()).unwrap();
    }
    // The device still trains afterwards.
    drop(run().unwrap());
}

#[test]
fn an_mlp_step_fails_cleanly_at_every_allocation() {
    let device = device();
    let mlp = Mlp::new(&device, &[12, 16, 16, 5], DType::F32, 5);
    let (x, targets) = batch(&device, 6, 12, 5, 6);
    let params = mlp.variables();
    let run = || step(|| mlp.forward(&x)?.cross_entropy(&targets, None), &params);
    fails_cleanly_everywhere(&device, "mlp", &run);
}

#[test]
fn a_recomputed_mlp_step_fails_cleanly_at_every_allocation_including_the_recomputation() {
    let device = device();
    let mlp = Mlp::new(&device, &[12, 16, 16, 16, 5], DType::F32, 5);
    let (x, targets) = batch(&device, 6, 12, 5, 6);
    let params = mlp.variables();
    let run = || {
        step(
            || mlp.recomputed_forward(&x)?.cross_entropy(&targets, None),
            &params,
        )
    };
    fails_cleanly_everywhere(&device, "recomputed mlp", &run);
}

#[test]
fn a_transformer_step_fails_cleanly_at_every_allocation_in_f32_and_under_autocast() {
    let device = device();
    let model = TinyTransformer::new(&device, 11, 8, 8, 2);
    let ids = Tensor::from_host(&device, [2, 5], &[1u32, 4, 2, 9, 0, 3, 3, 7, 10, 5]).unwrap();
    let targets = Tensor::from_host(&device, [10], &[4u32, 2, 9, 0, 1, 3, 7, 10, 5, 6]).unwrap();
    let params = model.variables();
    let run = || step(|| model.loss(&ids, &targets), &params);
    fails_cleanly_everywhere(&device, "transformer f32", &run);
    let run_bf16 = || {
        let _bf16 = autocast(DType::BF16);
        step(|| model.loss(&ids, &targets), &params)
    };
    fails_cleanly_everywhere(&device, "transformer bf16", &run_bf16);
}
