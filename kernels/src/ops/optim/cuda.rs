//! CUDA kernels: optimizer updates (`optim.cu`), with the step's constants computed here in f64
//! as on the host.

use cudarc::driver::LaunchConfig;

use super::QUANT_BLOCK;
use super::kernels::{AdamW, AdamWOperands, OptimKernels, QuantizedMut, Sgd, Update};
use crate::buffer::Buffer;
use crate::cuda::{Arg, CudaBackend, Family, float_kernel};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// AdamW's step constants as the kernels take them (the gradient's scale, the betas, the
/// decay factor, the bias-corrected step size, the root of the second correction, epsilon),
/// as [`AdamW::step_constants`] computes them for every backend.
fn adamw_constants(config: &AdamW, update: Update) -> [Arg; 7] {
    let k = config.step_constants(update);
    [
        k.grad_scale.into(),
        k.beta1.into(),
        k.beta2.into(),
        k.decay.into(),
        k.step_size.into(),
        k.root_correction.into(),
        k.eps.into(),
    ]
}

/// The seeds that round an update's first moment, second moment and bf16 parameter
/// ([`Update::rounding_seed`]).
fn rounding_seeds(update: Update) -> [Arg; 3] {
    [0, 1, 2].map(|buffer| update.rounding_seed(buffer).into())
}

/// The suffix of a narrow-state kernel for a parameter of `dtype` (computed in f32).
fn f32_compute(dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::F16 => Ok("f16"),
        DType::BF16 => Ok("bf16"),
        other => Err(Error::DType {
            op: "adamw",
            expected: "a parameter in f32, f16 or bf16".into(),
            got: other,
        }),
    }
}

impl OptimKernels for CudaBackend {
    fn adamw(
        &self,
        config: &AdamW,
        update: Update,
        operands: AdamWOperands<'_, &mut Buffer>,
    ) -> Result<()> {
        let AdamWOperands { param, grad, m, v } = operands;
        let n = param.len();
        if n == 0 {
            return Ok(());
        }
        let constants = adamw_constants(config, update);
        // Narrow moments, or a bf16 parameter (whose moments are bf16 too): rounded
        // stochastically.
        if m.dtype() != param.dtype() || param.dtype() == DType::BF16 {
            let name = format!("adamw_bf16_state_{}", f32_compute(param.dtype())?);
            let mut args: Vec<Arg> = vec![param.into(), grad.into(), m.into(), v.into(), n.into()];
            args.extend(constants);
            args.push(update.rounding_seed(0).into());
            return self.launch("adamw", Family::Optim, &name, self.grid(n as u64), &args);
        }
        let name = float_kernel("adamw", param.dtype(), "adamw")?;
        let mut args: Vec<Arg> = vec![param.into(), grad.into(), m.into(), v.into(), n.into()];
        args.extend(constants);
        self.launch("adamw", Family::Optim, &name, self.grid(n as u64), &args)
    }

    fn adamw_8bit(
        &self,
        config: &AdamW,
        update: Update,
        operands: AdamWOperands<'_, QuantizedMut<'_>>,
    ) -> Result<()> {
        let AdamWOperands { param, grad, m, v } = operands;
        let n = param.len();
        if n == 0 {
            return Ok(());
        }
        let name = format!("adamw_8bit_{}", f32_compute(param.dtype())?);
        let mut args: Vec<Arg> = vec![
            param.into(),
            grad.into(),
            (&*m.codes).into(),
            (&*m.scales).into(),
            (&*v.codes).into(),
            (&*v.scales).into(),
            n.into(),
        ];
        args.extend(adamw_constants(config, update));
        args.extend(rounding_seeds(update));
        // One block of 256 threads per quantization block.
        let blocks = n.div_ceil(QUANT_BLOCK) as u32;
        let launch = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        self.launch("adamw", Family::Optim, &name, launch, &args)
    }

    fn sgd(
        &self,
        config: &Sgd,
        update: Update,
        param: &mut Buffer,
        grad: &Buffer,
        momentum: Option<&mut Buffer>,
    ) -> Result<()> {
        let name = float_kernel("sgd", param.dtype(), "sgd")?;
        let n = param.len();
        if n == 0 {
            return Ok(());
        }
        // A null momentum buffer means plain SGD.
        let buffer = momentum.map_or(0, |b| b.addr());
        let args: [Arg; 12] = [
            param.into(),
            grad.into(),
            buffer.into(),
            n.into(),
            config.lr.into(),
            config.weight_decay.into(),
            config.momentum.into(),
            update.grad_scale.into(),
            (1.0 - config.dampening).into(),
            (update.step == 1).into(),
            config.nesterov.into(),
            update.rounding_seed(2).into(),
        ];
        self.launch("sgd", Family::Optim, &name, self.grid(n as u64), &args)
    }
}
