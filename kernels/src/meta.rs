//! The meta backend: allocations only, so that a run's memory can be planned exactly.

use headroom_alloc::{MemorySource, SourceError, VirtualMemory};

/// A virtual address space that resizes regions in place only if the device it plans for can,
/// so that the allocator makes the same decisions, and reaches the same peak, as it would there.
#[derive(Debug, Clone)]
pub struct PlanningMemory {
    inner: VirtualMemory,
    resizable: bool,
}

impl PlanningMemory {
    /// Plans over `inner`, resizing in place only if `resizable`.
    pub fn new(inner: VirtualMemory, resizable: bool) -> Self {
        Self { inner, resizable }
    }
}

impl MemorySource for PlanningMemory {
    fn name(&self) -> &str {
        "meta"
    }
    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        self.inner.reserve(bytes)
    }
    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        self.inner.release(base, bytes)
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn can_resize(&self) -> bool {
        self.resizable
    }
    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        if !self.resizable {
            return Err(SourceError::new("the planned device cannot resize regions"));
        }
        self.inner.extend(base, size, extra)
    }
    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        if !self.resizable {
            return Err(SourceError::new("the planned device cannot resize regions"));
        }
        self.inner.shrink(base, size, bytes)
    }
}

/// Runs no kernel: every op's allocations happen in the op layer, identically for every backend,
/// so a meta run allocates exactly what a real run would.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaBackend;

mod kernels {
    use super::MetaBackend;
    use crate::backend::{DataKernels, ElementwiseKernels, GemmKernels, ReduceKernels};
    use crate::buffer::Buffer;
    use crate::error::{Error, Result};
    use crate::ops::elementwise::{BinaryOp, UnaryOp};
    use crate::ops::gemm::GemmSpec;
    use crate::ops::reduce::{ReduceOp, ReduceSpec};
    use crate::shape::Shape;

    impl DataKernels for MetaBackend {
        fn fill(&self, _: &mut Buffer, _: f64) -> Result<()> {
            Ok(())
        }
        fn write(&self, _: &mut Buffer, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn read(&self, src: &Buffer, _: &mut [u8]) -> Result<()> {
            Err(Error::NoData {
                op: "read",
                device: src.device().to_string(),
            })
        }
        fn copy(&self, _: &Buffer, _: &mut Buffer) -> Result<()> {
            Ok(())
        }
        fn cast(&self, _: &Buffer, _: &mut Buffer) -> Result<()> {
            Ok(())
        }
    }

    impl ElementwiseKernels for MetaBackend {
        fn unary(&self, _: UnaryOp, _: &Buffer, _: &mut Buffer) -> Result<()> {
            Ok(())
        }
        fn binary(
            &self,
            _: BinaryOp,
            _: (&Buffer, &[usize]),
            _: (&Buffer, &[usize]),
            _: &mut Buffer,
            _: &Shape,
        ) -> Result<()> {
            Ok(())
        }
    }

    impl ReduceKernels for MetaBackend {
        fn reduce(&self, _: ReduceOp, _: ReduceSpec, _: &Buffer, _: &mut Buffer) -> Result<()> {
            Ok(())
        }
    }

    impl GemmKernels for MetaBackend {
        fn gemm(&self, _: &GemmSpec, _: &Buffer, _: &Buffer, _: &mut Buffer) -> Result<()> {
            Ok(())
        }
    }
}
