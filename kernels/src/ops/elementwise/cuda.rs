//! CUDA kernels: unary and binary maps (`elementwise.cu`).

use crate::backend::elementwise::{BinaryOp, ElementwiseKernels, UnaryOp};
use crate::buffer::Buffer;
use crate::cuda::{CudaBackend, Family, Walk, float_kernel};
use crate::error::Result;
use crate::shape::Shape;

/// The op's code in `enum Unary` of `elementwise.cu`, and its parameter.
fn unary_code(op: UnaryOp) -> (i32, f64) {
    match op {
        UnaryOp::Neg => (0, 0.0),
        UnaryOp::Relu => (1, 0.0),
        UnaryOp::Gelu => (2, 0.0),
        UnaryOp::Exp => (3, 0.0),
        UnaryOp::Log => (4, 0.0),
        UnaryOp::Tanh => (5, 0.0),
        UnaryOp::Sqrt => (6, 0.0),
        UnaryOp::Scale(s) => (7, s),
        UnaryOp::Powf(p) => (8, p),
    }
}

/// The op's code in `enum Binary` of `elementwise.cu`, and its parameter.
fn binary_code(op: BinaryOp) -> (i32, f64) {
    match op {
        BinaryOp::Add => (0, 0.0),
        BinaryOp::Sub => (1, 0.0),
        BinaryOp::Mul => (2, 0.0),
        BinaryOp::Div => (3, 0.0),
        BinaryOp::ReluBackward => (4, 0.0),
        BinaryOp::GeluBackward => (5, 0.0),
        BinaryOp::TanhBackward => (6, 0.0),
        BinaryOp::SqrtBackward => (7, 0.0),
        BinaryOp::PowfBackward(p) => (8, p),
        BinaryOp::Equal => (9, 0.0),
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
}
