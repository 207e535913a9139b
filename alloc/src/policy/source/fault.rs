//! A wrapper that makes a source fail on purpose, to test every failure path.

use super::{MemorySource, SourceError};

/// Wraps a source and refuses chosen reserves: the k-th one, or any that would take the bytes
/// reserved through this wrapper past a threshold.
///
/// ```
/// use headroom_alloc::{FaultInjecting, MemorySource, VirtualMemory};
/// let mut source = FaultInjecting::new(VirtualMemory::new(1 << 30)).fail_reserve_number(2);
/// assert!(source.reserve(1024).is_ok());
/// assert!(source.reserve(1024).is_err()); // the second reserve fails
/// assert!(source.reserve(1024).is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct FaultInjecting<S> {
    inner: S,
    /// One-based numbers of the reserves that must fail.
    fail_numbers: Vec<u64>,
    /// Refuse any reserve that would take `reserved` above this.
    threshold: Option<u64>,
    /// Reserves attempted so far (failed ones included).
    attempts: u64,
    /// Bytes currently reserved through this wrapper.
    reserved: u64,
}

impl<S: MemorySource> FaultInjecting<S> {
    /// Wraps `inner` with no faults armed.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            fail_numbers: Vec::new(),
            threshold: None,
            attempts: 0,
            reserved: 0,
        }
    }

    /// Makes the `k`-th reserve (counting from 1, failed attempts included) fail.
    pub fn fail_reserve_number(mut self, k: u64) -> Self {
        self.fail_numbers.push(k);
        self
    }

    /// Makes every reserve fail that would take the bytes reserved past `bytes`.
    pub fn fail_beyond(mut self, bytes: u64) -> Self {
        self.threshold = Some(bytes);
        self
    }

    /// Reserves attempted so far, failed ones included.
    pub fn attempts(&self) -> u64 {
        self.attempts
    }

    /// The wrapped source.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: MemorySource> MemorySource for FaultInjecting<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        self.admit(bytes)?;
        let base = self.inner.reserve(bytes)?;
        self.reserved += bytes;
        Ok(base)
    }

    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        self.inner.release(base, bytes)?;
        self.reserved = self.reserved.saturating_sub(bytes);
        Ok(())
    }

    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    fn can_resize(&self) -> bool {
        self.inner.can_resize()
    }

    fn growth_step(&self) -> u64 {
        self.inner.growth_step()
    }

    /// Counts as a reserve of `extra` bytes for the armed faults.
    fn extend(&mut self, base: u64, size: u64, extra: u64) -> Result<(), SourceError> {
        self.admit(extra)?;
        self.inner.extend(base, size, extra)?;
        self.reserved += extra;
        Ok(())
    }

    fn shrink(&mut self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        self.inner.shrink(base, size, bytes)?;
        self.reserved = self.reserved.saturating_sub(bytes);
        Ok(())
    }
}

impl<S: MemorySource> FaultInjecting<S> {
    /// Counts an attempt to take `bytes` more and refuses it if a fault is armed for it.
    fn admit(&mut self, bytes: u64) -> Result<(), SourceError> {
        self.attempts += 1;
        if self.fail_numbers.contains(&self.attempts) {
            return Err(SourceError::new(format!(
                "injected fault: reserve number {} refused",
                self.attempts
            )));
        }
        if let Some(threshold) = self.threshold
            && self.reserved.saturating_add(bytes) > threshold
        {
            return Err(SourceError::new(format!(
                "injected fault: {bytes} more bytes would pass the threshold of {threshold}"
            )));
        }
        Ok(())
    }
}
