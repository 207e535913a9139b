//! CPU kernels: fused optimizer updates.

use half::bf16;
use rayon::prelude::*;

use super::QUANT_BLOCK;
use super::dynamic_map::{decode_signed, decode_unsigned, encode_signed, encode_unsigned};
use super::kernels::{AdamW, AdamWOperands, OptimKernels, QuantizedMut, Sgd, Update};
use super::rounding::{bf16_stochastic, split_draw, store_drawn, store_param};
use crate::buffer::Buffer;
use crate::cpu::{CHUNK, CpuBackend, with_float};
use crate::dtype::{Compute, DType, Float};
use crate::error::{Error, Result};
use crate::ops::elementwise::isa::in_best_isa;
use crate::ops::random::kernels::random_bits;

/// AdamW's constants for one step, in the compute type `C`.
struct AdamConstants<C> {
    scale: C,
    b1: C,
    b2: C,
    decay: C,
    step_size: C,
    root_correction: C,
    eps: C,
}

impl<C: Compute> AdamConstants<C> {
    fn new(config: &AdamW, update: Update) -> Self {
        let c = |x: f64| C::of(x);
        let k = config.step_constants(update);
        Self {
            scale: c(k.grad_scale),
            b1: c(k.beta1),
            b2: c(k.beta2),
            decay: c(k.decay),
            step_size: c(k.step_size),
            root_correction: c(k.root_correction),
            eps: c(k.eps),
        }
    }

    /// The new moments from the old ones and the gradient, and the parameter moved by them.
    #[inline]
    fn apply(&self, p: C, g: C, m: C, v: C) -> (C, C, C) {
        let g = g * self.scale;
        let m = self.b1 * m + (C::ONE - self.b1) * g;
        let v = self.b2 * v + (C::ONE - self.b2) * g * g;
        let denom = v.sqrt() / self.root_correction + self.eps;
        (p * self.decay - self.step_size * m / denom, m, v)
    }
}

/// The rounding streams of one update: AdamW's two moments and a bf16 parameter.
#[derive(Debug, Clone, Copy)]
struct Seeds {
    m: u64,
    v: u64,
    param: u64,
}

impl Seeds {
    fn of(update: Update) -> Self {
        Self {
            m: update.rounding_seed(0),
            v: update.rounding_seed(1),
            param: update.rounding_seed(2),
        }
    }
}

/// AdamW with its moments in bf16 for a parameter `T` computed in f32, rounded stochastically,
/// and the parameter too where it is bf16: one draw an element (on the first moment's seed),
/// 16 of its 64 bits for each rounding.
fn adamw_bf16_state<T: Float<C = f32>>(
    consts: &AdamConstants<f32>,
    seeds: Seeds,
    param: &mut [T],
    grad: &[T],
    m: &mut [bf16],
    v: &mut [bf16],
) {
    param
        .par_chunks_mut(CHUNK)
        .zip(grad.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
        .enumerate()
        .for_each(|(chunk, ((p, g), (m, v)))| {
            let first = (chunk * CHUNK) as u64;
            in_best_isa(
                #[inline(always)]
                || {
                    for (i, (((p, &g), m), v)) in p.iter_mut().zip(g).zip(m).zip(v).enumerate() {
                        let at = first + i as u64;
                        let (p_new, m_new, v_new) =
                            consts.apply(p.load(), g.load(), m.load(), v.load());
                        let [m_draw, v_draw, p_draw] = split_draw(random_bits(seeds.m, at));
                        *p = store_drawn::<T>(p_new, p_draw);
                        *m = bf16_stochastic(m_new, m_draw);
                        *v = bf16_stochastic(v_new, v_draw);
                    }
                },
            )
        });
}

/// AdamW with its moments block-wise in 8 bits, for a parameter `T` computed in f32 (rounded
/// stochastically where it is bf16): one block of [`QUANT_BLOCK`] elements a task.
fn adamw_8bit_state<T: Float<C = f32>>(
    consts: &AdamConstants<f32>,
    seeds: Seeds,
    param: &mut [T],
    grad: &[T],
    (m, m_scales): (&mut [u8], &mut [f32]),
    (v, v_scales): (&mut [u8], &mut [f32]),
) {
    param
        .par_chunks_mut(QUANT_BLOCK)
        .zip(grad.par_chunks(QUANT_BLOCK))
        .zip(m.par_chunks_mut(QUANT_BLOCK).zip(m_scales.par_iter_mut()))
        .zip(v.par_chunks_mut(QUANT_BLOCK).zip(v_scales.par_iter_mut()))
        .enumerate()
        .for_each(|(block, (((p, g), (m, m_scale)), (v, v_scale)))| {
            let mut moments = [(0f32, 0f32); QUANT_BLOCK];
            let (mut m_max, mut v_max) = (0f32, 0f32);
            let first = (block * QUANT_BLOCK) as u64;
            for (i, (p, &g)) in p.iter_mut().zip(g).enumerate() {
                let m_old = decode_signed(m[i]) * *m_scale;
                let v_old = decode_unsigned(v[i]) * *v_scale;
                let (p_new, m_new, v_new) = consts.apply(p.load(), g.load(), m_old, v_old);
                *p = store_param::<T>(p_new, seeds.param, first + i as u64);
                moments[i] = (m_new, v_new);
                // NaN-propagating, as the CUDA kernel reduces.
                m_max = Compute::max(m_max, m_new.abs());
                v_max = Compute::max(v_max, v_new);
            }
            for (i, &(m_new, v_new)) in moments[..p.len()].iter().enumerate() {
                let at = first + i as u64;
                m[i] = encode_signed(relative(m_new, m_max), random_bits(seeds.m, at));
                v[i] = encode_unsigned(relative(v_new, v_max), random_bits(seeds.v, at));
            }
            *m_scale = m_max;
            *v_scale = v_max;
        });
}

/// `x / scale`, and 0 in a block of zeros.
#[inline]
fn relative(x: f32, scale: f32) -> f32 {
    if scale == 0.0 { 0.0 } else { x / scale }
}

/// Runs `$body` with `$t` bound to the Rust type of a parameter computed in f32.
macro_rules! with_f32_compute {
    ($dtype:expr, $op:expr, |$t:ident| $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F16 => {
                type $t = half::f16;
                $body
            }
            DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            other => Err(Error::DType {
                op: $op,
                expected: "a parameter in f32, f16 or bf16".into(),
                got: other,
            }),
        }
    };
}

impl OptimKernels for CpuBackend {
    fn adamw(
        &self,
        config: &AdamW,
        update: Update,
        operands: AdamWOperands<'_, &mut Buffer>,
    ) -> Result<()> {
        let AdamWOperands { param, grad, m, v } = operands;
        // Narrow moments, or a bf16 parameter (whose moments are bf16 too): rounded
        // stochastically.
        if m.dtype() != param.dtype() || param.dtype() == DType::BF16 {
            let consts = AdamConstants::new(config, update);
            let seeds = Seeds::of(update);
            return with_f32_compute!(param.dtype(), "adamw", |T| {
                adamw_bf16_state::<T>(
                    &consts,
                    seeds,
                    param.host_mut::<T>("adamw")?,
                    grad.host::<T>("adamw")?,
                    m.host_mut::<bf16>("adamw")?,
                    v.host_mut::<bf16>("adamw")?,
                );
                Ok(())
            });
        }
        with_float!(param.dtype(), "adamw", |T| {
            let consts = AdamConstants::<<T as Float>::C>::new(config, update);
            let grad = grad.host::<T>("adamw")?;
            let m = m.host_mut::<T>("adamw")?;
            let v = v.host_mut::<T>("adamw")?;
            param
                .host_mut::<T>("adamw")?
                .par_chunks_mut(CHUNK)
                .zip(grad.par_chunks(CHUNK))
                .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
                .for_each(|((p, g), (m, v))| {
                    in_best_isa(
                        #[inline(always)]
                        || {
                            for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
                                let (p_new, m_new, v_new) =
                                    consts.apply(p.load(), g.load(), m.load(), v.load());
                                *p = T::store(p_new);
                                *m = T::store(m_new);
                                *v = T::store(v_new);
                            }
                        },
                    )
                });
            Ok(())
        })
    }

    fn adamw_8bit(
        &self,
        config: &AdamW,
        update: Update,
        operands: AdamWOperands<'_, QuantizedMut<'_>>,
    ) -> Result<()> {
        let AdamWOperands { param, grad, m, v } = operands;
        let consts = AdamConstants::new(config, update);
        let seeds = Seeds::of(update);
        with_f32_compute!(param.dtype(), "adamw", |T| {
            adamw_8bit_state::<T>(
                &consts,
                seeds,
                param.host_mut::<T>("adamw")?,
                grad.host::<T>("adamw")?,
                (
                    m.codes.host_mut::<u8>("adamw")?,
                    m.scales.host_mut::<f32>("adamw")?,
                ),
                (
                    v.codes.host_mut::<u8>("adamw")?,
                    v.scales.host_mut::<f32>("adamw")?,
                ),
            );
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
            let seed = update.rounding_seed(2);
            let grad = grad.host::<T>("sgd")?;
            let param = param.host_mut::<T>("sgd")?;
            match momentum {
                None => param
                    .par_chunks_mut(CHUNK)
                    .zip(grad.par_chunks(CHUNK))
                    .enumerate()
                    .for_each(|(chunk, (p, g))| {
                        let at = (chunk * CHUNK) as u64;
                        in_best_isa(
                            #[inline(always)]
                            || {
                                for (i, (p, &g)) in p.iter_mut().zip(g).enumerate() {
                                    let d = g.load() * scale + wd * p.load();
                                    *p = store_param::<T>(p.load() - lr * d, seed, at + i as u64);
                                }
                            },
                        )
                    }),
                Some(buffer) => param
                    .par_chunks_mut(CHUNK)
                    .zip(grad.par_chunks(CHUNK))
                    .zip(buffer.host_mut::<T>("sgd")?.par_chunks_mut(CHUNK))
                    .enumerate()
                    .for_each(|(chunk, ((p, g), b))| {
                        let at = (chunk * CHUNK) as u64;
                        for (i, ((p, &g), b)) in p.iter_mut().zip(g).zip(b).enumerate() {
                            let d = g.load() * scale + wd * p.load();
                            let buf = if first {
                                d
                            } else {
                                mu * b.load() + undamped * d
                            };
                            let step = if nesterov { d + mu * buf } else { buf };
                            *b = T::store(buf);
                            *p = store_param::<T>(p.load() - lr * step, seed, at + i as u64);
                        }
                    }),
            }
            Ok(())
        })
    }
}
