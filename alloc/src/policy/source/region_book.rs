//! The regions a resizable source has handed out, and the checks every call makes against them.

use std::collections::BTreeMap;

use super::SourceError;

/// The live regions of a source that can grow and shrink them in place, within a capacity.
#[derive(Debug, Clone)]
pub(super) struct RegionBook {
    capacity: u64,
    /// Live regions: base to current size.
    regions: BTreeMap<u64, u64>,
    /// Sum of the sizes in `regions`; never above `capacity`.
    reserved: u64,
}

impl RegionBook {
    /// No regions, room for `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            regions: BTreeMap::new(),
            reserved: 0,
        }
    }

    /// The most bytes the regions may hold together.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes the regions hold now.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Checks that `bytes` more can be reserved: a positive multiple of 256 that fits.
    pub fn check_room(&self, bytes: u64) -> Result<(), SourceError> {
        check_granular(bytes)?;
        let available = self.capacity - self.reserved;
        if bytes > available {
            return Err(SourceError::new(format!(
                "{bytes} bytes requested but only {available} of {} available",
                self.capacity
            )));
        }
        Ok(())
    }

    /// Checks that a region of `size` bytes lives at `base`.
    pub fn check_region(&self, base: u64, size: u64) -> Result<(), SourceError> {
        match self.regions.get(&base) {
            Some(&held) if held == size => Ok(()),
            _ => Err(SourceError::new(format!(
                "no region of {size} bytes at {base:#x} was reserved here"
            ))),
        }
    }

    /// Checks that the region at `base`, now `size` bytes, can give back its last `bytes`.
    pub fn check_shrink(&self, base: u64, size: u64, bytes: u64) -> Result<(), SourceError> {
        self.check_region(base, size)?;
        check_granular(bytes)?;
        if bytes >= size {
            return Err(SourceError::new(format!(
                "cannot shrink a {size}-byte region by {bytes} bytes"
            )));
        }
        Ok(())
    }

    /// Records a region of `size` bytes at `base`, new or resized from `old_size` bytes (0 for a
    /// new one), after the caller's checks.
    pub fn set(&mut self, base: u64, old_size: u64, size: u64) {
        self.regions.insert(base, size);
        self.reserved = self.reserved - old_size + size;
    }

    /// Forgets the region of `size` bytes at `base`, after the caller's checks.
    pub fn remove(&mut self, base: u64, size: u64) {
        self.regions.remove(&base);
        self.reserved -= size;
    }

    /// Takes every region's base out of the book.
    pub fn take_bases(&mut self) -> Vec<u64> {
        self.reserved = 0;
        std::mem::take(&mut self.regions).into_keys().collect()
    }
}

/// Checks that `bytes` is a positive multiple of 256.
fn check_granular(bytes: u64) -> Result<(), SourceError> {
    if bytes == 0 || !bytes.is_multiple_of(256) {
        return Err(SourceError::new(format!(
            "size {bytes} is not a positive multiple of 256"
        )));
    }
    Ok(())
}
