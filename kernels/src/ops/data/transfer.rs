//! Copies between a device and its host tier: a second device over host memory (ordinary on
//! the CPU, page-locked for a GPU) that holds what the device does not need for a while.

use crate::array::Array;
use crate::cpu::with_element;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::DeviceKind;
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
    /// assert_eq!(host.allocator().stats().in_use, 512);
    /// assert_eq!(offloaded.to_device(&device)?.to_f64()?, [1., 2., 3., 4.]);
    /// # Ok::<(), headroom_kernels::Error>(())
    /// ```
    pub fn to_device(&self, target: &Device) -> Result<Array> {
        const OP: &str = "to_device";
        let source = self.device();
        let (from, to) = (source.kind(), target.kind());
        let meta = [from, to].map(|kind| kind == DeviceKind::Meta);
        if meta[0] != meta[1] || !(meta[0] || from == DeviceKind::Cpu || to == DeviceKind::Cpu) {
            return Err(Error::Device {
                op: OP,
                left: source.to_string(),
                right: target.to_string(),
            });
        }
        let mut out = Array::uninit(target, self.shape().clone(), self.dtype(), OP)?;
        if meta[0] {
            for device in [source, target] {
                device.record_work(Kernel::transfer(self.buffer().bytes()));
            }
        } else if to == DeviceKind::Cpu {
            with_element!(self.dtype(), |T| {
                let bytes = bytemuck::cast_slice_mut(out.buffer_mut(OP)?.host_mut::<T>(OP)?);
                source.backend().read(self.buffer(), bytes)
            })?;
        } else {
            with_element!(self.dtype(), |T| {
                let bytes = bytemuck::cast_slice(self.buffer().host::<T>(OP)?);
                target.backend().write(out.buffer_mut(OP)?, bytes)
            })?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Array, DType, Device, DeviceConfig};

    #[test]
    fn meta_copies_move_nothing_but_are_priced_and_mixed_pairs_are_refused() {
        let planned = Device::meta(DeviceConfig::new(1 << 20)).unwrap();
        let host = Device::meta(DeviceConfig::new(1 << 20)).unwrap();
        let a = Array::zeros(&planned, [1024], DType::F32).unwrap();
        let before = planned.planned_work().unwrap();
        let b = a.to_device(&host).unwrap();
        assert_eq!(host.allocator().stats().in_use, 4096);
        let after = planned.planned_work().unwrap();
        assert_eq!(after.transferred - before.transferred, 4096.0);
        assert!(after.seconds > before.seconds);
        assert_eq!(host.planned_work().unwrap().transferred, 4096.0);
        let cpu = Device::cpu(DeviceConfig::new(1 << 20)).unwrap();
        assert!(
            b.to_device(&cpu).is_err(),
            "a meta array has no data to copy"
        );
    }
}
