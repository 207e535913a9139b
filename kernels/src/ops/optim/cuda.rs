//! CUDA kernels: optimizer updates (`optim.cu`), with the step's constants computed here in f64
//! as on the host.

use crate::backend::optim::{AdamW, OptimKernels, Sgd, Update};
use crate::buffer::Buffer;
use crate::cuda::{Arg, CudaBackend, Family, float_kernel};
use crate::error::Result;

impl OptimKernels for CudaBackend {
    fn adamw(
        &self,
        config: &AdamW,
        update: Update,
        param: &mut Buffer,
        grad: &Buffer,
        m: &mut Buffer,
        v: &mut Buffer,
    ) -> Result<()> {
        let name = float_kernel("adamw", param.dtype(), "adamw")?;
        let n = param.len();
        if n == 0 {
            return Ok(());
        }
        let t = i32::try_from(update.step).unwrap_or(i32::MAX);
        let args: [Arg; 12] = [
            param.into(),
            grad.into(),
            m.into(),
            v.into(),
            n.into(),
            update.grad_scale.into(),
            config.beta1.into(),
            config.beta2.into(),
            (1.0 - config.lr * config.weight_decay).into(),
            (config.lr / (1.0 - config.beta1.powi(t))).into(),
            (1.0 - config.beta2.powi(t)).sqrt().into(),
            config.eps.into(),
        ];
        self.launch("adamw", Family::Optim, &name, self.grid(n as u64), &args)
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
        let args: [Arg; 11] = [
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
        ];
        self.launch("sgd", Family::Optim, &name, self.grid(n as u64), &args)
    }
}
