//! Gradient checking (`torch.autograd.gradcheck`): the gradients a tape computes, against
//! central finite differences of the same function in f64.

use headroom_kernels::DType;

use crate::error::Result;
use crate::tape::Tape;
use crate::tensor::Tensor;

/// The function checked: from its inputs to one tensor.
pub type Function<'a> = &'a dyn Fn(&[Tensor]) -> Result<Tensor>;

/// Analytic and numeric gradients of `sum(f(inputs) * w)` for fixed weights `w`, per input.
#[derive(Debug, Clone, PartialEq)]
pub struct GradCheck {
    /// The tape's gradients, per input, in the inputs' dtype converted to f64.
    pub analytic: Vec<Vec<f64>>,
    /// Central finite differences in f64, per input.
    pub numeric: Vec<Vec<f64>>,
    /// How far each finite difference may be off from rounding alone: the loss's rounding
    /// error (a few units of its last place) over the step.
    pub rounding: Vec<Vec<f64>>,
}

/// An element whose analytic gradient is off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mismatch {
    /// Which input.
    pub input: usize,
    /// Which element of it.
    pub element: usize,
    /// The tape's value.
    pub analytic: f64,
    /// The finite difference.
    pub numeric: f64,
    /// The largest difference allowed.
    pub bound: f64,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "input {} element {}: analytic {}, numeric {} (allowed difference {})",
            self.input, self.element, self.analytic, self.numeric, self.bound
        )
    }
}

impl GradCheck {
    /// The first element whose analytic gradient differs from the numeric one by more than
    /// `rtol` times the larger of its magnitude and a tenth of the largest magnitude of that
    /// input's gradient (so that elements near zero are judged at their input's scale), plus
    /// what rounding alone may put into its finite difference.
    pub fn first_mismatch(&self, rtol: f64) -> Option<Mismatch> {
        let inputs = self.analytic.iter().zip(&self.numeric).zip(&self.rounding);
        for (input, ((analytic, numeric), rounding)) in inputs.enumerate() {
            let largest = numeric.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let elements = analytic.iter().zip(numeric).zip(rounding);
            for (element, ((&a, &n), &r)) in elements.enumerate() {
                let bound = rtol * n.abs().max(0.1 * largest).max(1e-9) + r;
                if (a - n).abs() > bound || a.is_nan() != n.is_nan() {
                    return Some(Mismatch {
                        input,
                        element,
                        analytic: a,
                        numeric: n,
                        bound,
                    });
                }
            }
        }
        None
    }
}

/// Units in the last place a loss may be off by from rounding, in the finite differences'
/// error bound: a few, for the sums of products the checked functions compute.
const ROUNDING_ULPS: f64 = 8.0;

/// Differentiates `sum(f(inputs) * w)`, with weights `w` drawn from `seed`, with a tape (in the
/// inputs' dtypes, each input watched) and by central differences in f64 at the same points
/// (the inputs' values as stored).
///
/// ```
/// use headroom_autograd::{Tensor, check::gradcheck};
/// use headroom_kernels::{DType, Device, DeviceConfig};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Tensor::from_f64(&cpu, [3], DType::F64, &[0.5, -1.0, 2.0])?;
/// let report = gradcheck(&|t: &[Tensor]| t[0].tanh(), &[x], 7)?;
/// assert!(report.first_mismatch(1e-6).is_none());
/// # Ok::<(), headroom_autograd::Error>(())
/// ```
pub fn gradcheck(f: Function<'_>, inputs: &[Tensor], seed: u64) -> Result<GradCheck> {
    let out = f(inputs)?;
    let weights: Vec<f64> = (0..out.numel() as u64)
        .map(|i| 2.0 * headroom_kernels::ops::random::uniform(seed, i) - 1.0)
        .collect();
    let loss = |values: &[Tensor]| -> Result<Tensor> {
        let y = f(values)?;
        let w = Tensor::from_f64(y.device(), y.shape().clone(), y.dtype(), &weights)?;
        y.mul(&w)?.sum_all()
    };
    let tape = Tape::new();
    for input in inputs {
        tape.watch(input);
    }
    let target = tape.record(|| loss(inputs))?;
    let sources: Vec<&Tensor> = inputs.iter().collect();
    let grads = tape.gradient(&target, &sources)?;
    let analytic = inputs
        .iter()
        .map(|t| grads.get_or_zeros(t)?.to_f64().map_err(Into::into))
        .collect::<Result<Vec<_>>>()?;
    let points = inputs
        .iter()
        .map(Tensor::to_f64)
        .collect::<Result<Vec<_>>>()?;
    let loss_at = |k: usize, values: &[f64]| -> Result<f64> {
        let tensors = inputs
            .iter()
            .enumerate()
            .map(|(j, t)| {
                let v = if j == k { values } else { &points[j] };
                Tensor::from_f64(t.device(), t.shape().clone(), DType::F64, v)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(loss(&tensors)?.to_f64()?[0])
    };
    let (mut numeric, mut rounding) = (Vec::new(), Vec::new());
    for (k, point) in points.iter().enumerate() {
        let (mut column, mut noise) = (Vec::new(), Vec::new());
        for e in 0..point.len() {
            let h = 1e-6 * point[e].abs().max(1.0);
            let (mut plus, mut minus) = (point.clone(), point.clone());
            plus[e] += h;
            minus[e] -= h;
            let (above, below) = (loss_at(k, &plus)?, loss_at(k, &minus)?);
            column.push((above - below) / (2.0 * h));
            noise.push(ROUNDING_ULPS * f64::EPSILON * above.abs().max(below.abs()) / h);
        }
        numeric.push(column);
        rounding.push(noise);
    }
    Ok(GradCheck {
        analytic,
        numeric,
        rounding,
    })
}

#[cfg(test)]
mod tests {
    use super::GradCheck;

    #[test]
    fn rounding_widens_the_bound_by_its_own_size_alone() {
        let report = |analytic: f64| GradCheck {
            analytic: vec![vec![1.0, analytic]],
            numeric: vec![vec![1.0, 2e-4]],
            rounding: vec![vec![0.0, 2e-9]],
        };
        // Within rtol of a tenth of the largest, plus the rounding: accepted.
        assert!(report(2e-4 + 1e-7 + 1e-9).first_mismatch(1e-6).is_none());
        // A real error, far beyond both: caught.
        assert!(report(2.1e-4).first_mismatch(1e-6).is_some());
        assert!(report(2e-4 + 1e-7 + 3e-9).first_mismatch(1e-6).is_some());
    }
}
