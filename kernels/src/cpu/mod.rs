//! The CPU backend: real host memory from headroom-alloc, parallel with rayon, GEMM by `gemm`.
//! Each op's CPU kernels live beside the op (`ops/<op>/cpu.rs`).

/// Runs kernels on the host.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuBackend;

/// Elements per parallel task: big enough to amortize scheduling, small enough to balance.
pub(crate) const CHUNK: usize = 1 << 14;

/// Runs `$body` with `$t` bound to the Rust type of a float `$dtype`, or fails naming `$op`.
macro_rules! with_float {
    ($dtype:expr, $op:expr, |$t:ident| $body:expr) => {
        match $dtype {
            $crate::dtype::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::dtype::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::dtype::DType::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::dtype::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            other => Err($crate::error::Error::DType {
                op: $op,
                expected: "a float dtype".into(),
                got: other,
            }),
        }
    };
}

/// Runs `$body` with `$t` bound to the Rust type of any `$dtype`.
macro_rules! with_element {
    ($dtype:expr, |$t:ident| $body:expr) => {
        match $dtype {
            $crate::dtype::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::dtype::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::dtype::DType::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::dtype::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            $crate::dtype::DType::U32 => {
                type $t = u32;
                $body
            }
            $crate::dtype::DType::I32 => {
                type $t = i32;
                $body
            }
        }
    };
}

pub(crate) use {with_element, with_float};
