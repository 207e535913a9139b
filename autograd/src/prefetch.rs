//! Offloaded inputs brought back one segment ahead. Each recomputed segment whose inputs wait
//! in the host tier knows the one recorded before it on the same tape; the backward pass runs
//! their rules in the reverse order, so the rule that brings its segment's inputs back to the
//! device starts bringing the earlier segment's too ([`Array::to_device_ahead`]). That copy
//! runs beside this rule's kernels, and the earlier rule finds its inputs on the device,
//! its kernels waiting for the copy only as they start. The device holds two segments' inputs
//! meanwhile, as the planner, which runs the same rules, predicts.

use std::sync::{Arc, Weak};

use headroom_kernels::ops::data::Arriving;
use headroom_kernels::{Array, Device};
use parking_lot::Mutex;

use crate::error::Result;

/// One segment's inputs in the host tier.
#[derive(Debug)]
pub(crate) struct OffloadedInputs {
    /// The inputs, in the host tier.
    kept: Vec<Array>,
    /// Their copies to the device, started by the later segment's rule.
    ahead: Mutex<Option<Vec<Arriving>>>,
    /// The segment recorded before this one on the same tape with its inputs in the host
    /// tier, while its rule has not run.
    earlier: Option<Weak<OffloadedInputs>>,
}

impl OffloadedInputs {
    /// `kept` (in the host tier), after the segment `earlier`.
    pub fn new(kept: Vec<Array>, earlier: Option<Weak<OffloadedInputs>>) -> Arc<Self> {
        Arc::new(Self {
            kept,
            ahead: Mutex::new(None),
            earlier,
        })
    }

    /// The inputs on `device`: the copies the later segment's rule started, or copies made
    /// now; then the earlier segment's copies start.
    pub fn fetch(&self, device: &Device) -> Result<Vec<Array>> {
        let ahead = self.ahead.lock().take();
        let inputs = match ahead {
            Some(arriving) => arriving
                .into_iter()
                .map(Arriving::arrived)
                .collect::<Result<_, _>>()?,
            None => self
                .kept
                .iter()
                .map(|a| a.to_device(device))
                .collect::<Result<_, _>>()?,
        };
        if let Some(earlier) = self.earlier.as_ref().and_then(Weak::upgrade) {
            earlier.start(device)?;
        }
        Ok(inputs)
    }

    /// Starts the copies of the inputs to `device`, unless they were started.
    fn start(&self, device: &Device) -> Result<()> {
        let mut ahead = self.ahead.lock();
        if ahead.is_none() {
            let copies = self.kept.iter().map(|a| a.to_device_ahead(device));
            *ahead = Some(copies.collect::<Result<_, _>>()?);
        }
        Ok(())
    }
}
