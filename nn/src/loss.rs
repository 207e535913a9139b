//! Losses.

use headroom_autograd::Tensor;

use crate::error::{Error, Result};

/// The mean cross-entropy of `logits` (`[..., C]`) against class `targets` (U32, the logits'
/// shape without the last axis), over the positions whose target is not `ignore`. Fused and
/// stable; f32 under autocast.
///
/// ```
/// use headroom_nn::loss::cross_entropy;
/// use headroom_autograd::Tensor;
/// use headroom_kernels::{Device, DeviceConfig, DType};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let logits = Tensor::from_f64(&cpu, [1, 2, 2], DType::F32, &[0., 0., 9., 0.])?;
/// let targets = Tensor::from_host(&cpu, [1, 2], &[1u32, 0])?;
/// let loss = cross_entropy(&logits, &targets, None)?.to_f64()?[0];
/// let want = (2f64.ln() + (1. + (-9f64).exp()).ln()) / 2.;
/// assert!((loss - want).abs() < 1e-6);
/// # Ok::<(), headroom_nn::Error>(())
/// ```
pub fn cross_entropy(logits: &Tensor, targets: &Tensor, ignore: Option<u32>) -> Result<Tensor> {
    let dims = logits.dims();
    let Some((&classes, rows)) = dims.split_last() else {
        return Err(Error::config(
            "cross-entropy",
            "scalar logits have no classes",
        ));
    };
    if targets.dims() != rows {
        return Err(Error::config(
            "cross-entropy",
            format!(
                "targets {} do not match logits {} without their class axis",
                targets.shape(),
                logits.shape()
            ),
        ));
    }
    let n: usize = rows.iter().product();
    let logits = logits.reshape([n, classes])?;
    let targets = targets.reshape([n])?;
    Ok(logits.cross_entropy(&targets, ignore)?)
}

/// The mean squared error of `prediction` against `target` (same shape).
pub fn mse(prediction: &Tensor, target: &Tensor) -> Result<Tensor> {
    if prediction.shape() != target.shape() {
        return Err(Error::config(
            "mean squared error",
            format!(
                "prediction {} against target {}",
                prediction.shape(),
                target.shape()
            ),
        ));
    }
    let diff = prediction.sub(target)?;
    Ok(diff.mul(&diff)?.mean_all()?)
}
