//! Copies between a device and its host tier: a second device over host memory (ordinary on
//! the CPU, page-locked for a GPU) that holds what the device does not need for a while.

use crate::array::Array;
use crate::cpu::with_element;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::DeviceKind;
use crate::timeline::{Lane, PlannedCopy};
use crate::work::Kernel;

impl Array {
    /// A copy of the array on `target`, tagged as `target`'s current tag: the host tier of
    /// the array's device, or the device from its host tier. One of the two must hold host
    /// memory (a CPU device) unless both are meta devices, which copy nothing and add the
    /// bytes to their accounts of work at the transfer rate.
    ///
    /// ```
    /// use headroom_kernels::{Array, Device, DeviceConfig, DType};
    /// let device = Device::cpu(DeviceConfig::new(1 << 20))?;
    /// let host = Device::cpu(DeviceConfig::new(1 << 20))?;
    /// let a = Array::from_f64(&device, [2, 2], DType::BF16, &[1., 2., 3., 4.])?;
    /// let offloaded = a.to_device(&host)?;
    /// assert_eq!(host.allocator().stats().in_use, 256);
    /// assert_eq!(offloaded.to_device(&device)?.to_f64()?, [1., 2., 3., 4.]);
    /// let mut b = Array::zeros(&device, [2, 2], DType::BF16)?;
    /// b.write_from(&offloaded)?;
    /// assert_eq!(b.to_f64()?, [1., 2., 3., 4.]);
    /// # Ok::<(), headroom_kernels::Error>(())
    /// ```
    pub fn to_device(&self, target: &Device) -> Result<Array> {
        const OP: &str = "to_device";
        check_route(OP, self.device(), target)?;
        let mut out = Array::uninit(target, self.shape().clone(), self.dtype(), OP)?;
        copy(OP, self, &mut out, Arrival::Now)?;
        Ok(out)
    }

    /// [`Array::to_device`] from the host tier to a GPU, fetched ahead: the device's kernels
    /// wait for the copy only once [`Arriving::arrived`] hands the array over, so that the
    /// copy runs beside the kernels queued meanwhile (the next block's input brought back while
    /// this block's backward pass runs). The memory is taken now. On the other routes the copy
    /// has arrived when this returns.
    pub fn to_device_ahead(&self, target: &Device) -> Result<Arriving> {
        const OP: &str = "to_device_ahead";
        check_route(OP, self.device(), target)?;
        let mut out = Array::uninit(target, self.shape().clone(), self.dtype(), OP)?;
        copy(OP, self, &mut out, Arrival::Later)?;
        Ok(Arriving(out))
    }

    /// Overwrites the elements, in place, with those of `src` (of the same shape and dtype) on
    /// another device: the array's host tier, or the device of a host tier's array. Nothing is
    /// allocated; the routes are [`Array::to_device`]'s.
    pub fn write_from(&mut self, src: &Array) -> Result<()> {
        const OP: &str = "write_from";
        check_route(OP, src.device(), self.device())?;
        if src.shape() != self.shape() || src.dtype() != self.dtype() {
            return Err(Error::Argument {
                op: OP,
                detail: format!(
                    "{} of {} into {} of {}",
                    src.shape(),
                    src.dtype(),
                    self.shape(),
                    self.dtype()
                ),
            });
        }
        copy(OP, src, self, Arrival::Now)
    }
}

/// An array whose copy to a GPU may still be running ([`Array::to_device_ahead`]).
#[derive(Debug)]
pub struct Arriving(Array);

impl Arriving {
    /// The array, once the device's kernels queued from now on wait for its copy (the host
    /// does not wait).
    pub fn arrived(self) -> Result<Array> {
        self.0.buffer().settle()?;
        Ok(self.0)
    }

    /// The array, its copy not yet waited for: only to hand it on to a type that settles it
    /// when it arrives.
    pub(crate) fn into_pending(self) -> Array {
        self.0
    }
}

/// When the device's kernels wait for a copy to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// Right after it is queued.
    Now,
    /// When the array is handed over ([`Arriving::arrived`]), written or freed.
    Later,
}

/// Fails unless `from` and `to` are both meta devices, or one of them holds host memory.
fn check_route(op: &'static str, from: &Device, to: &Device) -> Result<()> {
    let meta = [from.kind(), to.kind()].map(|kind| kind == DeviceKind::Meta);
    let host = from.kind() == DeviceKind::Cpu || to.kind() == DeviceKind::Cpu;
    if meta[0] != meta[1] || !(meta[0] || host) {
        return Err(Error::Device {
            op,
            left: from.to_string(),
            right: to.to_string(),
        });
    }
    Ok(())
}

/// Copies `src` into `dst` (of its size) over a route [`check_route`] allowed; on a GPU the
/// kernels wait for a copy to the device at `arrival`.
fn copy(op: &'static str, src: &Array, dst: &mut Array, arrival: Arrival) -> Result<()> {
    let (source, target) = (src.device().clone(), dst.device().clone());
    if source.kind() == DeviceKind::Meta {
        plan_copy(src, dst, arrival)
    } else if target.kind() == DeviceKind::Cpu {
        let buffer = dst.buffer_mut(op)?;
        let done = with_element!(src.dtype(), |T| {
            let bytes = bytemuck::cast_slice_mut(buffer.host_mut::<T>(op)?);
            // SAFETY: `bytes` is the memory of `buffer`, which waits for the copy's mark before
            // the host reads, writes or frees it (noted below, before anything else can).
            unsafe { source.backend().read_queued(src.buffer(), bytes) }
        })?;
        // The host waits for the copy only where it touches the array: an offloaded input,
        // which goes back to the device after it, is never waited for.
        buffer.touched_later_by(done)
    } else {
        let done = with_element!(src.dtype(), |T| {
            let bytes = bytemuck::cast_slice(src.buffer().host::<T>(op)?);
            // SAFETY: `bytes` is the memory of the host tier's `src` (page-locked for a GPU),
            // which waits for the copy's mark before the host writes or frees it (noted
            // below, before anything else can).
            unsafe { target.backend().write_queued(dst.buffer_mut(op)?, bytes) }
        })?;
        if arrival == Arrival::Now {
            dst.buffer().settle()?;
        }
        // A GPU reads page-locked memory when the copy runs, not when it is queued: the host
        // waits for the copy before it writes the source or frees it (the host tier could
        // hand the memory out again at once), and not before, so that the copy is queued with
        // the work around it instead of draining the device's queue.
        src.buffer().touched_later_by(done)
    }
}

/// A planned copy between meta devices: priced once, on the copy queue of the device's
/// timeline (the one that is not a host tier), and waited for where a real copy is: by the
/// kernels at `arrival` for a copy to the device, by the host where it reads or frees the
/// array for a copy to the host tier.
fn plan_copy(src: &Array, dst: &Array, arrival: Arrival) -> Result<()> {
    let on_host = |device: &Device| {
        device
            .work_log()
            .is_some_and(|log| log.lane() == Lane::Host)
    };
    let to_host = on_host(dst.device());
    let device = if to_host { src.device() } else { dst.device() };
    let Some(log) = device.work_log() else {
        return Ok(());
    };
    let at = log.record(Kernel::transfer(src.buffer().bytes()));
    let timeline = log.timeline().clone();
    let lane = match to_host {
        true => Lane::Host,
        false if arrival == Arrival::Now => {
            timeline.wait(Lane::Kernels, at);
            return Ok(());
        }
        false => Lane::Kernels,
    };
    let copy = PlannedCopy { timeline, lane, at };
    dst.buffer().touched_later_by(Some(Box::new(copy)))
}

#[cfg(test)]
mod tests {
    use crate::ops::gemm::matmul;
    use crate::{Array, DType, Device, DeviceConfig, PlanTarget};

    /// The predicted seconds of a copy of 16 MiB from the host tier and a product of 4096 x
    /// 4096 matrices planned for `target`, the copy fetched ahead of the product or before it.
    fn copy_and_product(target: PlanTarget, ahead: bool) -> f64 {
        let device = Device::meta_for(target, DeviceConfig::new(1 << 30)).unwrap();
        let host =
            Device::meta_host_tier_of(&device, DeviceConfig::new(1 << 30), PlanTarget::Cpu.rates())
                .unwrap();
        let offloaded = Array::zeros(&host, [4 << 20], DType::F32).unwrap();
        let a = Array::zeros(&device, [4096, 4096], DType::F32).unwrap();
        if ahead {
            let arriving = offloaded.to_device_ahead(&device).unwrap();
            matmul(&a, &a, false, false).unwrap();
            arriving.arrived().unwrap();
        } else {
            offloaded.to_device(&device).unwrap();
            matmul(&a, &a, false, false).unwrap();
        }
        device.planned_work().unwrap().seconds
    }

    #[test]
    fn a_planned_gpu_copy_fetched_ahead_runs_beside_the_kernels_and_a_cpu_one_in_turn() {
        let gpu = PlanTarget::cuda(9);
        let (ahead, now) = (copy_and_product(gpu, true), copy_and_product(gpu, false));
        let rates = gpu.rates();
        let copy = rates.launch + (16 << 20) as f64 / rates.transfer;
        assert!(
            (now - ahead - copy).abs() < 1e-12,
            "fetched ahead {ahead} s, before the product {now} s: the copy takes {copy} s"
        );
        let cpu = PlanTarget::Cpu;
        assert_eq!(copy_and_product(cpu, true), copy_and_product(cpu, false));
    }

    #[test]
    fn meta_copies_move_nothing_but_are_priced_and_mixed_pairs_are_refused() {
        let planned = Device::meta(DeviceConfig::new(1 << 20)).unwrap();
        let host = Device::meta_host_tier_of(
            &planned,
            DeviceConfig::new(1 << 20),
            PlanTarget::Cpu.rates(),
        )
        .unwrap();
        let a = Array::zeros(&planned, [1024], DType::F32).unwrap();
        let before = planned.planned_work().unwrap();
        let b = a.to_device(&host).unwrap();
        assert_eq!(host.allocator().stats().in_use, 4096);
        let after = planned.planned_work().unwrap();
        assert_eq!(after.transferred - before.transferred, 4096.0);
        assert!(after.seconds > before.seconds);
        // Priced once, on the device; the host tier shares its clocks.
        assert_eq!(host.planned_work().unwrap().transferred, 0.0);
        assert_eq!(host.planned_work().unwrap().seconds, after.seconds);
        let cpu = Device::cpu(DeviceConfig::new(1 << 20)).unwrap();
        assert!(
            b.to_device(&cpu).is_err(),
            "a meta array has no data to copy"
        );
    }
}
