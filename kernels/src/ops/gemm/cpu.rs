//! CPU GEMM through the `gemm` crate, a few rows against a half weight by `few_rows`, and bf16
//! on the CPU's bf16 instructions (AMX or AVX512-BF16) by `bf16`.

use gemm::Parallelism;
use rayon::prelude::*;

use super::bf16;
use super::few_rows::{few_rows, is_few_rows};
use super::kernels::{GemmKernels, GemmSpec};
use crate::buffer::Buffer;
use crate::cpu::CpuBackend;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};

/// Up to this many multiply-adds per product (a 128-cube), batches run in parallel instead of
/// each product: for small products the gemm crate's own threading costs more than it gains.
const SMALL_PRODUCT: usize = 1 << 21;

impl GemmKernels for CpuBackend {
    fn gemm(&self, spec: &GemmSpec, a: &Buffer, b: &Buffer, out: &mut Buffer) -> Result<()> {
        let own_type = out.dtype() == a.dtype();
        match a.dtype() {
            DType::F32 if is_few_rows(spec) => few_rows::<f32>(spec, a, b, out),
            DType::F32 => gemm_typed::<f32>(spec, a, b, out),
            DType::F64 => gemm_typed::<f64>(spec, a, b, out),
            DType::BF16 if own_type && is_few_rows(spec) => few_rows::<half::bf16>(spec, a, b, out),
            DType::F16 if own_type && is_few_rows(spec) => few_rows::<half::f16>(spec, a, b, out),
            DType::BF16 if bf16::takes(spec, a.dtype(), out.dtype()) => gemm_bf16(spec, a, b, out),
            other => Err(Error::DType {
                op: "gemm",
                expected: "f32 or f64 (or a half type, for a few rows against a transposed weight \
                           or bf16 on a CPU with AMX or AVX512-BF16)"
                    .into(),
                got: other,
            }),
        }
    }

    fn gemm_half(&self, dtype: DType) -> bool {
        super::cpu_multiplies(dtype)
    }
}

/// A bf16 product on the CPU's bf16 instructions, into a bf16 or an f32 output, its operands
/// packed in workspace memory.
fn gemm_bf16(spec: &GemmSpec, a: &Buffer, b: &Buffer, out: &mut Buffer) -> Result<()> {
    const OP: &str = "gemm";
    let words = bf16::scratch_words(spec);
    let mut scratch = (words > 0)
        .then(|| out.memory().alloc_workspace(DType::U32, words, OP))
        .transpose()?;
    let scratch = match scratch.as_mut() {
        Some(scratch) => scratch.host_mut::<u32>(OP)?,
        None => &mut [],
    };
    let (a, b) = (a.host::<half::bf16>(OP)?, b.host::<half::bf16>(OP)?);
    match out.dtype() {
        DType::F32 => bf16::product(spec, (a, b), out.host_mut::<f32>(OP)?, scratch, true),
        _ => bf16::product(spec, (a, b), out.host_mut::<half::bf16>(OP)?, scratch, true),
    }
    Ok(())
}

fn gemm_typed<T: Element + Default>(
    spec: &GemmSpec,
    a: &Buffer,
    b: &Buffer,
    out: &mut Buffer,
) -> Result<()> {
    let (a, b) = (a.host::<T>("gemm")?, b.host::<T>("gemm")?);
    let out = out.host_mut::<T>("gemm")?;
    let &GemmSpec { m, n, k, .. } = spec;
    if out.is_empty() {
        return Ok(());
    }
    let product = |c: &mut [T], index: usize, parallelism: Parallelism| {
        let a = &a[index * spec.a_batch_stride..];
        let b = &b[index * spec.b_batch_stride..];
        one_product(spec, (a, b), c, parallelism);
    };
    if spec.batch > 1 && m * n * k <= SMALL_PRODUCT {
        out.par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(index, c)| product(c, index, Parallelism::None));
    } else {
        for (index, c) in out.chunks_mut(m * n).enumerate() {
            product(c, index, Parallelism::Rayon(0));
        }
    }
    Ok(())
}

/// `c (+)= op(a) op(b)`: one product of `spec`'s geometry on the `gemm` crate (its batch
/// ignored), `a` and `b` stored row-major from their first element, `c` holding `m x n`
/// (added into when `spec.accumulate`).
pub(crate) fn one_product<T: Element>(
    spec: &GemmSpec,
    (a, b): (&[T], &[T]),
    c: &mut [T],
    parallelism: Parallelism,
) {
    let &GemmSpec { m, n, k, .. } = spec;
    if m == 0 || n == 0 {
        return;
    }
    let c = &mut c[..m * n];
    if k == 0 {
        if !spec.accumulate {
            c.fill(T::from_f64(0.0));
        }
        return;
    }
    let (a, b) = (&a[..m * k], &b[..k * n]);
    // Row and column strides of op(a) [m, k] and op(b) [k, n] in their row-major storage.
    let (a_rs, a_cs) = if spec.trans_a { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if spec.trans_b { (1, k) } else { (n, 1) };
    let one = T::from_f64(1.0);
    // SAFETY: `a` holds `m * k` elements and `b` `k * n` (sliced above, so in bounds); the
    // strides address exactly those elements; `c` holds `m * n` elements written with row
    // stride `n`; `c` is a slice distinct from `a` and `b`, so nothing aliases; with `read_dst`
    // false, `c`'s previous contents are neither read nor required, and with it true they are
    // initialized values of `T`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            spec.accumulate,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            if spec.accumulate {
                one
            } else {
                T::from_f64(0.0)
            },
            one,
            false,
            false,
            false,
            parallelism,
        );
    }
}
