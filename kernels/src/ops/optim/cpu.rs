//! CPU kernels: fused optimizer updates.

use rayon::prelude::*;

use crate::backend::optim::{AdamW, OptimKernels, Sgd, Update};
use crate::buffer::Buffer;
use crate::cpu::{CHUNK, CpuBackend, with_float};
use crate::dtype::{Compute, Float};
use crate::error::Result;

impl OptimKernels for CpuBackend {
    fn adamw(
        &self,
        config: &AdamW,
        update: Update,
        param: &mut Buffer,
        grad: &Buffer,
        m: &mut Buffer,
        v: &mut Buffer,
    ) -> Result<()> {
        with_float!(param.dtype(), "adamw", |T| {
            type C = <T as Float>::C;
            let c = |x: f64| C::of(x);
            let t = i32::try_from(update.step).unwrap_or(i32::MAX);
            let scale = c(update.grad_scale);
            let (b1, b2) = (c(config.beta1), c(config.beta2));
            let decay = c(1.0 - config.lr * config.weight_decay);
            let step_size = c(config.lr / (1.0 - config.beta1.powi(t)));
            let root_correction = c((1.0 - config.beta2.powi(t)).sqrt());
            let eps = c(config.eps);
            let grad = grad.host::<T>("adamw")?;
            let m = m.host_mut::<T>("adamw")?;
            let v = v.host_mut::<T>("adamw")?;
            param
                .host_mut::<T>("adamw")?
                .par_chunks_mut(CHUNK)
                .zip(grad.par_chunks(CHUNK))
                .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
                .for_each(|((p, g), (m, v))| {
                    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
                        let g = g.load() * scale;
                        let m_new = b1 * m.load() + (C::ONE - b1) * g;
                        let v_new = b2 * v.load() + (C::ONE - b2) * g * g;
                        let denom = v_new.sqrt() / root_correction + eps;
                        *p = T::store(p.load() * decay - step_size * m_new / denom);
                        *m = T::store(m_new);
                        *v = T::store(v_new);
                    }
                });
            Ok(())
        })
    }

    fn sgd(
        &self,
        config: &Sgd,
        update: Update,
        param: &mut Buffer,
        grad: &Buffer,
        momentum: Option<&mut Buffer>,
    ) -> Result<()> {
        with_float!(param.dtype(), "sgd", |T| {
            type C = <T as Float>::C;
            let c = |x: f64| C::of(x);
            let (lr, wd, mu) = (c(config.lr), c(config.weight_decay), c(config.momentum));
            let (scale, undamped) = (c(update.grad_scale), c(1.0 - config.dampening));
            let (first, nesterov) = (update.step == 1, config.nesterov);
            let grad = grad.host::<T>("sgd")?;
            let param = param.host_mut::<T>("sgd")?;
            match momentum {
                None => param
                    .par_chunks_mut(CHUNK)
                    .zip(grad.par_chunks(CHUNK))
                    .for_each(|(p, g)| {
                        for (p, &g) in p.iter_mut().zip(g) {
                            let d = g.load() * scale + wd * p.load();
                            *p = T::store(p.load() - lr * d);
                        }
                    }),
                Some(buffer) => param
                    .par_chunks_mut(CHUNK)
                    .zip(grad.par_chunks(CHUNK))
                    .zip(buffer.host_mut::<T>("sgd")?.par_chunks_mut(CHUNK))
                    .for_each(|((p, g), b)| {
                        for ((p, &g), b) in p.iter_mut().zip(g).zip(b) {
                            let d = g.load() * scale + wd * p.load();
                            let buf = if first {
                                d
                            } else {
                                mu * b.load() + undamped * d
                            };
                            let step = if nesterov { d + mu * buf } else { buf };
                            *b = T::store(buf);
                            *p = T::store(p.load() - lr * step);
                        }
                    }),
            }
            Ok(())
        })
    }
}
