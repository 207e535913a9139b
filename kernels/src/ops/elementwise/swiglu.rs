//! SwiGLU, the gate of the Llama family's MLP: `silu(gate) * up`, forward and backward, each in
//! one pass over its operands.

use super::kernels::{SwigluBackwardOperands, SwigluOperands};
use crate::array::Array;
use crate::error::{Error, Result};

/// The gradients computed by [`swiglu_backward`].
#[derive(Debug)]
pub struct SwigluGrads {
    /// The gradient of the gate.
    pub dgate: Array,
    /// The gradient of the up projection.
    pub dup: Array,
}

/// Fails unless `other` (called `what`) is a peer of the float array `gate` of its very shape.
fn check_like(gate: &Array, other: &Array, what: &str, op: &'static str) -> Result<()> {
    gate.check_peer(other, op)?;
    if gate.shape() != other.shape() {
        return Err(Error::Shape {
            op,
            detail: format!(
                "{what} has shape {}, the gate {} (no broadcasting)",
                other.shape(),
                gate.shape()
            ),
        });
    }
    Ok(())
}

/// SwiGLU: `silu(gate) * up` elementwise, `silu(x) = x sigmoid(x)`; `gate` and `up` of one
/// float dtype and shape. Half types compute in f32 and round the SiLU to their dtype before the
/// product, as Hugging Face's `act_fn(gate_proj(x)) * up_proj(x)` does.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::elementwise::swiglu};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let gate = Array::from_f64(&cpu, [2], DType::F64, &[0., 2.])?;
/// let up = Array::from_f64(&cpu, [2], DType::F64, &[5., 3.])?;
/// let silu2 = 2.0 / (1.0 + (-2.0f64).exp());
/// assert_eq!(swiglu(&gate, &up)?.to_f64()?, [0., silu2 * 3.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn swiglu(gate: &Array, up: &Array) -> Result<Array> {
    const OP: &str = "swiglu";
    gate.check_float(OP)?;
    check_like(gate, up, "up", OP)?;
    let mut out = Array::uninit(gate.device(), gate.shape().clone(), gate.dtype(), OP)?;
    let operands = SwigluOperands {
        gate: gate.buffer(),
        up: up.buffer(),
        out: out.buffer_mut(OP)?,
    };
    gate.device().backend().swiglu(operands)?;
    Ok(out)
}

/// The gradients of [`swiglu`] from its operands and the upstream gradient `dy` (their shape
/// and dtype): `dgate = dy up s (1 + gate (1 - s))` with `s = sigmoid(gate)`, and
/// `dup = dy silu(gate)`.
pub fn swiglu_backward(gate: &Array, up: &Array, dy: &Array) -> Result<SwigluGrads> {
    const OP: &str = "swiglu_backward";
    gate.check_float(OP)?;
    check_like(gate, up, "up", OP)?;
    check_like(gate, dy, "dy", OP)?;
    let device = gate.device();
    let mut dgate = Array::uninit(device, gate.shape().clone(), gate.dtype(), OP)?;
    let mut dup = Array::uninit(device, gate.shape().clone(), gate.dtype(), OP)?;
    let operands = SwigluBackwardOperands {
        gate: gate.buffer(),
        up: up.buffer(),
        dy: dy.buffer(),
        dgate: dgate.buffer_mut(OP)?,
        dup: dup.buffer_mut(OP)?,
    };
    device.backend().swiglu_backward(operands)?;
    Ok(SwigluGrads { dgate, dup })
}
