//! A device's memory as its buffers see it: the allocator every byte comes from, the tag new
//! buffers get, the device's name in messages, and the time spent in its kernels and
//! allocations. Buffers hold this, not the [`Device`](crate::Device): the kernel traits take
//! buffers, so buffers sit below the device, which holds a backend that implements them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use headroom_alloc::{SharedAllocator, Tag};
use parking_lot::Mutex;

/// What kind of device this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The host: real memory and arithmetic.
    Cpu,
    /// Allocations only, no data: plans the memory of another device's run.
    Meta,
    /// An NVIDIA GPU, by ordinal.
    Cuda(u32),
}

/// Time a device spent in its kernels and allocations, and how many calls that was: what a
/// layer above can subtract from its own time to find its overhead. For an asynchronous backend
/// this is the time to queue the work; the meta device counts its calls and spends no time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelTime {
    /// Kernel calls and allocations.
    pub calls: u64,
    /// Time spent in them.
    pub busy: Duration,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A handle to one device's memory, shared by the device and by every buffer made on it (cheap
/// to clone). Two handles are the same memory exactly when they come from the same device.
#[derive(Clone)]
pub(crate) struct DeviceMemory(Arc<Inner>);

struct Inner {
    kind: DeviceKind,
    allocator: SharedAllocator,
    /// The tag new buffers are made with.
    tag: Mutex<Tag>,
    /// Distinguishes devices in messages.
    id: u64,
    /// Nanoseconds spent in kernel calls and allocations, and how many there were.
    busy_ns: AtomicU64,
    calls: AtomicU64,
}

impl DeviceMemory {
    /// The memory of a new device of `kind`, managed by `allocator`; new buffers are tagged as
    /// activations until a [`TagScope`] says otherwise.
    pub(crate) fn new(kind: DeviceKind, allocator: SharedAllocator) -> Self {
        Self(Arc::new(Inner {
            kind,
            allocator,
            tag: Mutex::new(Tag::ACTIVATIONS),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            busy_ns: AtomicU64::new(0),
            calls: AtomicU64::new(0),
        }))
    }

    /// What kind of device this memory belongs to.
    pub(crate) fn kind(&self) -> DeviceKind {
        self.0.kind
    }

    /// The allocator every byte comes from.
    pub(crate) fn allocator(&self) -> &SharedAllocator {
        &self.0.allocator
    }

    /// True when both handles name the same device's memory.
    pub(crate) fn same(&self, other: &DeviceMemory) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The tag new buffers get.
    pub(crate) fn tag(&self) -> Tag {
        *self.0.tag.lock()
    }

    /// Tags every buffer made in this memory with `tag` until the scope is dropped.
    pub(crate) fn scoped_tag(&self, tag: Tag) -> TagScope<'_> {
        let previous = std::mem::replace(&mut *self.0.tag.lock(), tag);
        TagScope {
            memory: self,
            previous,
        }
    }

    /// Time spent in kernels and allocations on this device so far.
    pub(crate) fn kernel_time(&self) -> KernelTime {
        KernelTime {
            calls: self.0.calls.load(Ordering::Relaxed),
            busy: Duration::from_nanos(self.0.busy_ns.load(Ordering::Relaxed)),
        }
    }

    /// Counts one call, and the time until the returned timer drops, in the kernel time. A
    /// meta device reads no clock: a planning step makes a million calls, and the reads were
    /// a sixth of its time.
    pub(crate) fn timer(&self) -> Timer<'_> {
        Timer {
            memory: &self.0,
            start: (self.0.kind != DeviceKind::Meta).then(Instant::now),
        }
    }
}

impl std::fmt::Display for DeviceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.kind {
            DeviceKind::Cpu => write!(f, "cpu#{}", self.0.id),
            DeviceKind::Meta => write!(f, "meta#{}", self.0.id),
            DeviceKind::Cuda(ordinal) => write!(f, "cuda:{ordinal}#{}", self.0.id),
        }
    }
}

impl std::fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceMemory({self})")
    }
}

/// Adds the time from its start to its drop to a device's kernel time, as one call.
pub(crate) struct Timer<'d> {
    memory: &'d Inner,
    /// When the call began; none on a meta device.
    start: Option<Instant>,
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        if let Some(start) = self.start {
            let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.memory.busy_ns.fetch_add(nanos, Ordering::Relaxed);
        }
        self.memory.calls.fetch_add(1, Ordering::Relaxed);
    }
}

/// Restores a device's previous tag when dropped.
#[must_use = "the tag applies only while the scope lives"]
pub struct TagScope<'d> {
    memory: &'d DeviceMemory,
    previous: Tag,
}

impl Drop for TagScope<'_> {
    fn drop(&mut self) {
        *self.memory.0.tag.lock() = self.previous;
    }
}
