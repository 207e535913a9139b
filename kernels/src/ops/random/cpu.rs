//! CPU kernels: dropout.

use rayon::prelude::*;

use super::kernels::{RandomKernels, keeps};
use crate::buffer::Buffer;
use crate::cpu::{CHUNK, CpuBackend, with_float};
use crate::dtype::{Compute, Float};
use crate::error::Result;

impl RandomKernels for CpuBackend {
    fn dropout(&self, x: &Buffer, out: &mut Buffer, p: f64, seed: u64) -> Result<()> {
        with_float!(x.dtype(), "dropout", |T| {
            let x = x.host::<T>("dropout")?;
            let scale = <T as Float>::C::of(1.0 / (1.0 - p));
            out.host_mut::<T>("dropout")?
                .par_chunks_mut(CHUNK)
                .zip(x.par_chunks(CHUNK))
                .enumerate()
                .for_each(|(task, (out, x))| {
                    let first = (task * CHUNK) as u64;
                    for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
                        let keep = keeps(seed, first + i as u64, p);
                        *o = T::store(if keep {
                            v.load() * scale
                        } else {
                            Compute::ZERO
                        });
                    }
                });
            Ok(())
        })
    }
}
