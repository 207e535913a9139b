//! CUDA kernels: unary and binary maps, and SwiGLU (`elementwise.cu`).

use super::kernels::{
    BinaryOp, ElementwiseKernels, SwigluBackwardOperands, SwigluOperands, UnaryOp,
};
use crate::buffer::Buffer;
use crate::cuda::{CudaBackend, Family, Walk, enum_codes, float_kernel};
use crate::error::Result;
use crate::shape::Shape;

// The ops' codes, numbered by `elementwise.cu`'s enums alone: read from its source when the
// crate compiles.
enum_codes!(Family::Elementwise, "Unary":
    U_NEG, U_RELU, U_GELU, U_EXP, U_LOG, U_TANH, U_SQRT, U_SCALE, U_POWF);
enum_codes!(Family::Elementwise, "Binary":
    B_ADD, B_SUB, B_MUL, B_DIV, B_RELU_BW, B_GELU_BW, B_TANH_BW, B_SQRT_BW, B_POWF_BW, B_EQUAL);

/// The op's code in `enum Unary` of `elementwise.cu`, and its parameter.
fn unary_code(op: UnaryOp) -> (i32, f64) {
    match op {
        UnaryOp::Neg => (U_NEG, 0.0),
        UnaryOp::Relu => (U_RELU, 0.0),
        UnaryOp::Gelu => (U_GELU, 0.0),
        UnaryOp::Exp => (U_EXP, 0.0),
        UnaryOp::Log => (U_LOG, 0.0),
        UnaryOp::Tanh => (U_TANH, 0.0),
        UnaryOp::Sqrt => (U_SQRT, 0.0),
        UnaryOp::Scale(s) => (U_SCALE, s),
        UnaryOp::Powf(p) => (U_POWF, p),
    }
}

/// The op's code in `enum Binary` of `elementwise.cu`, and its parameter.
fn binary_code(op: BinaryOp) -> (i32, f64) {
    match op {
        BinaryOp::Add => (B_ADD, 0.0),
        BinaryOp::Sub => (B_SUB, 0.0),
        BinaryOp::Mul => (B_MUL, 0.0),
        BinaryOp::Div => (B_DIV, 0.0),
        BinaryOp::ReluBackward => (B_RELU_BW, 0.0),
        BinaryOp::GeluBackward => (B_GELU_BW, 0.0),
        BinaryOp::TanhBackward => (B_TANH_BW, 0.0),
        BinaryOp::SqrtBackward => (B_SQRT_BW, 0.0),
        BinaryOp::PowfBackward(p) => (B_POWF_BW, p),
        BinaryOp::Equal => (B_EQUAL, 0.0),
    }
}

impl CudaBackend {
    /// A grid for a contiguous map over `buffer`, whose threads move sixteen bytes at a time.
    fn packed_grid(&self, buffer: &Buffer) -> cudarc::driver::LaunchConfig {
        self.grid(buffer.len().div_ceil(16 / buffer.dtype().size()) as u64)
    }
}

impl ElementwiseKernels for CudaBackend {
    fn unary(&self, op: UnaryOp, x: &Buffer, out: &mut Buffer) -> Result<()> {
        let name = float_kernel("unary", x.dtype(), op.name())?;
        if x.is_empty() {
            return Ok(());
        }
        let (code, p) = unary_code(op);
        let grid = self.packed_grid(x);
        let args = [code.into(), p.into(), x.into(), out.into(), x.len().into()];
        self.launch(op.name(), Family::Elementwise, &name, grid, &args)
    }

    fn binary(
        &self,
        op: BinaryOp,
        (a, a_strides): (&Buffer, &[usize]),
        (b, b_strides): (&Buffer, &[usize]),
        out: &mut Buffer,
        shape: &Shape,
    ) -> Result<()> {
        let name = float_kernel("binary", a.dtype(), op.name())?;
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let (code, p) = binary_code(op);
        let contiguous = shape.strides();
        if a_strides == contiguous.as_slice() && b_strides == contiguous.as_slice() {
            let args = [
                code.into(),
                p.into(),
                a.into(),
                b.into(),
                out.into(),
                n.into(),
            ];
            return self.launch(
                op.name(),
                Family::Elementwise,
                &name,
                self.packed_grid(out),
                &args,
            );
        }
        let [wa, wb] = Walk::merged(shape.dims(), [a_strides, b_strides], op.name())?;
        let args = [
            code.into(),
            p.into(),
            a.into(),
            b.into(),
            out.into(),
            n.into(),
            wa.into(),
            wb.into(),
        ];
        let name = float_kernel("binary_strided", a.dtype(), op.name())?;
        self.launch(
            op.name(),
            Family::Elementwise,
            &name,
            self.grid(n as u64),
            &args,
        )
    }

    fn binary_assign(&self, op: BinaryOp, a: &Buffer, b: &mut Buffer) -> Result<()> {
        let name = float_kernel("binary_assign", a.dtype(), op.name())?;
        if b.is_empty() {
            return Ok(());
        }
        let (code, p) = binary_code(op);
        let grid = self.packed_grid(b);
        let args = [code.into(), p.into(), a.into(), b.into(), b.len().into()];
        self.launch(op.name(), Family::Elementwise, &name, grid, &args)
    }

    fn scale_by(&self, factor: &Buffer, x: &mut Buffer) -> Result<()> {
        const OP: &str = "scale_by";
        let name = float_kernel(OP, x.dtype(), OP)?;
        if x.is_empty() {
            return Ok(());
        }
        let grid = self.grid(x.len() as u64);
        let args = [factor.into(), x.into(), x.len().into()];
        self.launch(OP, Family::Elementwise, &name, grid, &args)
    }

    fn swiglu(&self, operands: SwigluOperands<'_>) -> Result<()> {
        let SwigluOperands { gate, up, out } = operands;
        const OP: &str = "swiglu";
        let name = float_kernel(OP, gate.dtype(), OP)?;
        if out.is_empty() {
            return Ok(());
        }
        let grid = self.packed_grid(out);
        let args = [gate.into(), up.into(), out.into(), out.len().into()];
        self.launch(OP, Family::Elementwise, &name, grid, &args)
    }

    fn swiglu_backward(&self, operands: SwigluBackwardOperands<'_>) -> Result<()> {
        let SwigluBackwardOperands {
            gate,
            up,
            dy,
            dgate,
            dup,
        } = operands;
        const OP: &str = "swiglu_backward";
        let name = float_kernel(OP, gate.dtype(), OP)?;
        let n = gate.len();
        if n == 0 {
            return Ok(());
        }
        let args = [
            gate.into(),
            up.into(),
            dy.into(),
            dgate.into(),
            dup.into(),
            n.into(),
        ];
        self.launch(OP, Family::Elementwise, &name, self.grid(n as u64), &args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::enum_codes::enum_len;

    /// Every enumerator of `enumeration` is the code of exactly one of `codes`.
    fn assert_one_to_one(enumeration: &str, mut codes: Vec<i32>) {
        codes.sort_unstable();
        let len = enum_len(Family::Elementwise.body(), enumeration);
        assert_eq!(
            codes,
            (0..len as i32).collect::<Vec<_>>(),
            "enum {enumeration}"
        );
    }

    #[test]
    fn every_op_has_its_own_code_and_every_code_an_op() {
        let unary = UnaryOp::EVERY.map(|op| unary_code(op).0);
        assert_one_to_one("Unary", unary.to_vec());
        let binary = BinaryOp::EVERY.map(|op| binary_code(op).0);
        assert_one_to_one("Binary", binary.to_vec());
        // The parameter travels with the ops that take one.
        assert_eq!(unary_code(UnaryOp::Scale(2.0)).1, 2.0);
        assert_eq!(binary_code(BinaryOp::PowfBackward(3.0)).1, 3.0);
    }
}
