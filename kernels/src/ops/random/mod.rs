//! Dropout from a seeded counter-based generator: the mask is a pure function of (seed, element
//! index), so the backward pass regenerates it instead of storing it, and every backend draws
//! the same mask.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod kernels;
mod meta;

pub use kernels::{RandomKernels, keeps, uniform};

use crate::array::Array;
use crate::error::{Error, Result};

fn check_probability(p: f64, op: &'static str) -> Result<()> {
    if (0.0..1.0).contains(&p) {
        Ok(())
    } else {
        Err(Error::Argument {
            op,
            detail: format!("dropout probability {p} is outside [0, 1)"),
        })
    }
}

/// Inverted dropout: each element is zeroed with probability `p` and the rest scaled by
/// `1 / (1 - p)`, with the mask drawn from `seed`.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::random::dropout};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::full(&cpu, [1000], DType::F32, 1.0)?;
/// let y = dropout(&x, 0.25, 42)?.to_f64()?;
/// assert!(y.iter().all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-6));
/// assert_eq!(y, dropout(&x, 0.25, 42)?.to_f64()?); // same seed, same mask
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn dropout(x: &Array, p: f64, seed: u64) -> Result<Array> {
    x.check_float("dropout")?;
    check_probability(p, "dropout")?;
    let mut out = Array::uninit(x.device(), x.shape().clone(), x.dtype(), "dropout")?;
    x.device()
        .backend()
        .dropout(x.buffer(), out.buffer_mut("dropout")?, p, seed)?;
    Ok(out)
}

/// The gradient of [`dropout`] with the same `p` and `seed`: the same mask and scale applied to
/// the upstream gradient.
pub fn dropout_backward(dy: &Array, p: f64, seed: u64) -> Result<Array> {
    dropout(dy, p, seed)
}
