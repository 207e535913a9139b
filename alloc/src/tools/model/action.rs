//! The steps a scenario takes.

/// One step of a scenario.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Action {
    /// Allocate `size << shift % 16` bytes (so sizes span bytes to gigabytes) under built-in
    /// tag `tag % 7`.
    Alloc {
        /// The size before shifting.
        size: u16,
        /// The shift.
        shift: u8,
        /// The tag index.
        tag: u8,
    },
    /// Free the live allocation at `index % live count`.
    Free {
        /// Which live allocation.
        index: u16,
    },
    /// Free an address that must be refused: inside a live allocation, a freed one, or outside.
    FreeInvalid {
        /// Which live or freed allocation to aim near.
        index: u16,
    },
    /// Give entirely free regions back.
    ReleaseCached,
    /// Restart peak statistics.
    ResetPeak,
    /// Allocate again a size asked for before (`index %` the number remembered, the last 16
    /// successful requests), under built-in tag `tag % 7`: training steps repeat their shapes,
    /// so freed chunks are taken again by exact fits.
    AllocAgain {
        /// Which remembered size.
        index: u16,
        /// The tag index.
        tag: u8,
    },
    /// Allocate `size << shift % 16` bytes under built-in tag `tag % 7` on stream
    /// `stream % 3`, and queue work that uses the block there. Scenarios without a clock allocate
    /// on the default stream.
    AllocOn {
        /// The size before shifting.
        size: u16,
        /// The shift.
        shift: u8,
        /// The tag index.
        tag: u8,
        /// The stream index.
        stream: u8,
    },
    /// Run the work queued on stream `stream % 3`.
    RunStream {
        /// The stream index.
        stream: u8,
    },
}
