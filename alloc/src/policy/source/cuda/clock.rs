//! CUDA streams as a [`StreamClock`]: the allocator's events are CUDA events.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaStream};

use super::error::CudaError;
use crate::policy::source::SourceError;
use crate::policy::stream::{StreamClock, StreamEvent, StreamId};

/// The streams of a cudarc program, each under the [`StreamId`] it allocates with
/// ([`Allocator::allocate_on`](crate::Allocator::allocate_on)), for
/// [`Allocator::set_stream_clock`](crate::Allocator::set_stream_clock). An event is a CUDA event
/// recorded on the stream (timing off), polled with `cuEventQuery` and waited for with
/// `cuEventSynchronize`.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use headroom_alloc::{Allocator, AllocatorConfig, CudaMemory, CudaStreamClock, StreamId, Tag};
/// let context = cudarc::driver::CudaContext::new(0)?;
/// let (compute, copy) = (context.new_stream()?, context.new_stream()?);
/// let memory = CudaMemory::new(context.clone(), compute.clone(), true)?;
/// let mut alloc = Allocator::new(memory, AllocatorConfig::default())?;
/// let clock = CudaStreamClock::new()
///     .with_stream(StreamId::DEFAULT, compute)
///     .with_stream(StreamId(1), copy);
/// alloc.set_stream_clock(clock)?;
/// let staging = alloc.allocate_on(1 << 20, Tag::DATA, StreamId(1))?;
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct CudaStreamClock {
    streams: HashMap<StreamId, Arc<CudaStream>>,
    /// Events recorded and not yet seen complete, by number.
    events: HashMap<u64, CudaEvent>,
    /// The number of the next event.
    next: u64,
}

impl CudaStreamClock {
    /// A clock of no streams yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `stream` under `id`.
    pub fn with_stream(mut self, id: StreamId, stream: Arc<CudaStream>) -> Self {
        self.streams.insert(id, stream);
        self
    }

    /// The event numbered `event`, or a fault for one never recorded.
    fn event(&self, event: StreamEvent) -> Result<&CudaEvent, SourceError> {
        self.events
            .get(&event.0)
            .ok_or_else(|| SourceError::fault(format!("no CUDA event {} is pending", event.0)))
    }
}

/// A driver call's failure as a fault: more memory would not help.
fn fault(call: &'static str, err: cudarc::driver::DriverError) -> SourceError {
    SourceError::fault(CudaError::driver(call, err).to_string())
}

impl StreamClock for CudaStreamClock {
    fn record(&mut self, stream: StreamId) -> Result<StreamEvent, SourceError> {
        let cuda = self.streams.get(&stream).ok_or_else(|| {
            SourceError::fault(format!(
                "stream {} has no CUDA stream (CudaStreamClock::with_stream)",
                stream.0
            ))
        })?;
        let event = cuda
            .record_event(None)
            .map_err(|err| fault("cuEventRecord", err))?;
        let number = self.next;
        self.next += 1;
        self.events.insert(number, event);
        Ok(StreamEvent(number))
    }

    fn completed(&mut self, event: StreamEvent) -> Result<bool, SourceError> {
        let done = self
            .event(event)?
            .try_is_complete()
            .map_err(|err| fault("cuEventQuery", err))?;
        if done {
            self.events.remove(&event.0);
        }
        Ok(done)
    }

    fn synchronize(&mut self, event: StreamEvent) -> Result<(), SourceError> {
        self.event(event)?
            .synchronize()
            .map_err(|err| fault("cuEventSynchronize", err))?;
        self.events.remove(&event.0);
        Ok(())
    }
}
