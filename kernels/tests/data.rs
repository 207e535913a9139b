//! Creating, uploading, downloading, copying and casting, in every dtype.

mod common;

use common::{assert_close, devices, random, rng};
use half::{bf16, f16};
use headroom_kernels::ops::data::copy_into;
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error};

#[test]
fn host_round_trips_are_exact_in_every_dtype() {
    for device in devices() {
        let a = Array::from_host(&device, [2, 3], &[1.5f32, -2.0, 3.25, 0.0, 7.0, -1.0]).unwrap();
        assert_eq!(
            a.to_host::<f32>().unwrap(),
            [1.5, -2.0, 3.25, 0.0, 7.0, -1.0]
        );
        let ids = Array::from_host(&device, [4], &[0u32, 7, 65_535, u32::MAX]).unwrap();
        assert_eq!(ids.to_host::<u32>().unwrap(), [0, 7, 65_535, u32::MAX]);
        let h = Array::from_host(&device, [2], &[f16::from_f32(0.5), f16::MAX]).unwrap();
        assert_eq!(h.to_host::<f16>().unwrap(), [f16::from_f32(0.5), f16::MAX]);
        let b = Array::from_host(&device, [1], &[bf16::from_f32(-3.0)]).unwrap();
        assert_eq!(b.to_f64().unwrap(), [-3.0]);
        let scalar = Array::full(&device, [], DType::I32, -4.0).unwrap();
        assert_eq!(scalar.to_host::<i32>().unwrap(), [-4]);
        let empty = Array::zeros(&device, [0, 3], DType::F64).unwrap();
        assert!(empty.to_f64().unwrap().is_empty());
    }
}

#[test]
fn casts_between_every_pair_of_dtypes_round_to_nearest() {
    let mut rng = rng();
    for device in devices() {
        for from in DType::ALL {
            for to in DType::ALL {
                // Integers are exact in every dtype up to 256; floats keep two decimals or so.
                let (x, xs) = random(&device, &mut rng, &[5, 7], from, 0.0, 200.0);
                let got = x.cast(to).unwrap();
                assert_eq!(got.dtype(), to);
                let want: Vec<f64> = xs
                    .iter()
                    .map(|&v| {
                        Array::from_f64(&device, [1], to, &[v])
                            .unwrap()
                            .to_f64()
                            .unwrap()[0]
                    })
                    .collect();
                assert_eq!(got.to_f64().unwrap(), want, "{from} -> {to}");
            }
        }
    }
}

/// f32 values whose rounding to the half types is decided by the low bits of the f32 mantissa:
/// just above a tie, at a tie (to even), just below one; then 1e-5 (subnormal in f16), 70 000
/// (beyond f16's range), infinity and minus zero.
const ROUNDING_BITS: [u32; 9] = [
    0xbf74_8005,
    0x3f80_8001,
    0x3f80_8000,
    0x3f81_8000,
    0x3f80_7fff,
    0x3727_c5ac,
    0x4788_b800,
    0x7f80_0000,
    0x8000_0000,
];

#[test]
fn half_types_round_f64_and_f32_values_to_nearest_even_on_upload_fill_and_cast() {
    let values: Vec<f32> = ROUNDING_BITS.iter().map(|&b| f32::from_bits(b)).collect();
    let wide: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
    let want_bf16: Vec<u16> = values
        .iter()
        .map(|&v| bf16::from_f32(v).to_bits())
        .collect();
    let want_f16: Vec<u16> = values.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
    let bits = |a: &Array| -> Vec<u16> {
        match a.dtype() {
            DType::BF16 => a
                .to_host::<bf16>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect(),
            _ => a
                .to_host::<f16>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect(),
        }
    };
    let n = values.len();
    for device in devices() {
        let f32s = Array::from_host(&device, [n], &values).unwrap();
        for (dtype, want) in [(DType::BF16, &want_bf16), (DType::F16, &want_f16)] {
            let uploaded = Array::from_f64(&device, [n], dtype, &wide).unwrap();
            assert_eq!(&bits(&uploaded), want, "from_f64 {device} {dtype}");
            let mut written = Array::zeros(&device, [n], dtype).unwrap();
            written.write_f64(&wide).unwrap();
            assert_eq!(&bits(&written), want, "write_f64 {device} {dtype}");
            assert_eq!(
                &bits(&f32s.cast(dtype).unwrap()),
                want,
                "cast {device} {dtype}"
            );
            let filled = Array::full(&device, [1], dtype, wide[0]).unwrap();
            assert_eq!(bits(&filled), [want[0]], "full {device} {dtype}");
            // Widened back, each is exactly its half value.
            let widened: Vec<u32> = (uploaded.cast(DType::F32).unwrap().to_host::<f32>())
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect();
            let exact: Vec<u32> = (uploaded.to_f64().unwrap().iter())
                .map(|&x| (x as f32).to_bits())
                .collect();
            assert_eq!(widened, exact, "widened {device} {dtype}");
        }
    }
}

#[test]
fn copies_are_independent_and_copy_into_checks_shapes() {
    let mut rng = rng();
    for device in devices() {
        let (x, xs) = random(&device, &mut rng, &[3, 4], DType::F32, -1.0, 1.0);
        let y = x.deep_copy().unwrap();
        assert_ne!(x.buffer().addr(), y.buffer().addr());
        assert_close("clone", &y.to_f64().unwrap(), &xs, 0.0);
        let mut z = Array::zeros(&device, [3, 4], DType::F32).unwrap();
        copy_into(&x, &mut z).unwrap();
        assert_eq!(z.to_f64().unwrap(), xs);
        let mut wrong = Array::zeros(&device, [4, 3], DType::F32).unwrap();
        assert!(matches!(
            copy_into(&x, &mut wrong),
            Err(Error::Shape {
                op: "copy_into",
                ..
            })
        ));
        let reshaped = z.reshape([12]).unwrap();
        assert_eq!(reshaped.shape().dims(), [12]);
        assert!(reshaped.reshape([5]).is_err());
    }
}

#[test]
fn clones_and_views_share_memory_and_refuse_in_place_writes() {
    let mut rng = rng();
    for device in devices() {
        let (x, xs) = random(&device, &mut rng, &[3, 4], DType::F32, -1.0, 1.0);
        let in_use = device.allocator().stats().in_use;
        let mut view = x.reshape([2, 6]).unwrap();
        let shared = x.clone();
        assert_eq!(device.allocator().stats().in_use, in_use, "no new memory");
        assert_eq!(view.buffer().addr(), x.buffer().addr());
        assert_eq!(view.to_f64().unwrap(), xs);
        assert!(view.is_shared());
        let err = copy_into(
            &Array::zeros(&device, [2, 6], DType::F32).unwrap(),
            &mut view,
        );
        assert!(matches!(err, Err(Error::Shared { op: "copy_into" })));
        assert_eq!(x.to_f64().unwrap(), xs, "nothing was written");
        drop((x, shared));
        assert!(!view.is_shared());
        copy_into(
            &Array::zeros(&device, [2, 6], DType::F32).unwrap(),
            &mut view,
        )
        .unwrap();
        assert_eq!(view.to_f64().unwrap(), [0.0; 12]);
        drop(view);
        assert_eq!(device.allocator().stats().in_use, in_use - 256);
    }
}

#[test]
fn bad_host_data_and_meta_reads_are_typed_errors() {
    let device = &devices()[0];
    let err = Array::from_host(device, [2, 2], &[1.0f32; 3]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::HostLength {
                expected: 4,
                got: 3,
                ..
            }
        ),
        "{err}"
    );
    let a = Array::zeros(device, [2], DType::F32).unwrap();
    assert!(matches!(
        a.to_host::<f64>(),
        Err(Error::DType { op: "to_host", .. })
    ));
    let meta = Device::meta(DeviceConfig::new(1 << 20)).unwrap();
    let planned = Array::zeros(&meta, [4], DType::F32).unwrap();
    assert_eq!(meta.allocator().stats().in_use, 256);
    let err = planned.to_f64().unwrap_err();
    assert!(matches!(err, Error::NoData { op: "read", .. }), "{err}");
}

#[test]
fn kernel_time_counts_every_kernel_call_and_allocation() {
    for device in devices() {
        let before = device.kernel_time();
        let a = Array::full(&device, [64, 64], DType::F32, 0.5).unwrap(); // allocate, fill
        let b = headroom_kernels::ops::gemm::matmul(&a, &a, false, false).unwrap(); // allocate, gemm
        let after = device.kernel_time();
        assert_eq!(after.calls - before.calls, 4);
        assert!(after.busy > before.busy);
        drop((a, b));
    }
    // The meta device counts its calls and reads no clock.
    let meta = Device::meta(DeviceConfig::new(1 << 20)).unwrap();
    let a = Array::full(&meta, [64, 64], DType::F32, 0.5).unwrap();
    let b = headroom_kernels::ops::gemm::matmul(&a, &a, false, false).unwrap();
    let time = meta.kernel_time();
    assert_eq!((time.calls, time.busy), (4, std::time::Duration::ZERO));
    drop((a, b));
}

#[test]
fn raw_bytes_round_trip_in_every_dtype_and_lengths_are_checked() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::ALL {
            let (x, xs) = random(&device, &mut rng, &[3, 5], dtype, 1.0, 100.0);
            let bytes = x.to_bytes().unwrap();
            assert_eq!(bytes.len(), 15 * dtype.size());
            let back = Array::from_bytes(&device, [3, 5], dtype, &bytes).unwrap();
            assert_eq!(back.to_f64().unwrap(), xs);
            let err = Array::from_bytes(&device, [3, 5], dtype, &bytes[1..]).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Argument {
                        op: "from_bytes",
                        ..
                    }
                ),
                "{err}"
            );
        }
    }
}

#[test]
fn cast_range_converts_into_a_range_of_another_dtype() {
    for device in devices() {
        let half = Array::from_f64(&device, [3], DType::BF16, &[1.5, -2.0, 0.25]).unwrap();
        let mut wide = Array::zeros(&device, [2, 3], DType::F32).unwrap();
        headroom_kernels::ops::data::cast_range(&half, 1, &mut wide, 3, 2).unwrap();
        assert_eq!(wide.to_f64().unwrap(), [0.0, 0.0, 0.0, -2.0, 0.25, 0.0]);
        let err = headroom_kernels::ops::data::cast_range(&half, 2, &mut wide, 0, 2).unwrap_err();
        assert!(matches!(err, Error::Argument { .. }), "{err}");
    }
}
