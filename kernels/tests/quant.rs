//! Weights stored quantized on a device: on every backend and float dtype, the values come back
//! as the host's quantizers give them, to the bit; the device holds codes and scales alone; bad
//! operands are typed errors.

mod common;

use common::{assert_fails, devices, rng, values};
use headroom_kernels::ops::gemm::matmul;
use headroom_kernels::ops::quant::{Codes, QuantFormat, Quantized, dequantize};
use headroom_kernels::quantize::double::DoubleQuantized;
use headroom_kernels::quantize::int8::Int8;
use headroom_kernels::{Array, DType, Device, DeviceConfig, Element, PlanTarget};

/// Shapes with partial blocks, odd counts, several blocks of scales (256 blocks of 64 values
/// is one block of scales) and more values than one pass of a GPU's grid covers.
const SHAPES: [&[usize]; 5] = [&[1, 3], &[7, 9], &[64, 64], &[300, 129], &[17, 1000]];

/// The host's values of `format`, as `T` rounds them.
fn host_values<T: Element>(values: &[f32], format: QuantFormat) -> Vec<T> {
    let back = match format {
        QuantFormat::Nf4 => DoubleQuantized::quantize(values, 64).unwrap().dequantize(),
        QuantFormat::Int8 => Int8::quantize(values, 64).unwrap().dequantize(),
    };
    back.iter().map(|&v| T::from_f64(f64::from(v))).collect()
}

fn bits<T: Element>(values: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

#[test]
fn stored_weights_come_back_as_the_host_quantizers_give_them_to_the_bit() {
    let mut rng = rng();
    for device in devices() {
        for shape in SHAPES {
            let n: usize = shape.iter().product();
            let mut input: Vec<f32> = values(&mut rng, n, -0.2, 0.2)
                .iter()
                .map(|&v| v as f32)
                .collect();
            // One block of zeros and one outlier, as real weights have.
            input.iter_mut().take(64.min(n)).for_each(|v| *v = 0.0);
            input[n - 1] = 3.5;
            for format in [QuantFormat::Nf4, QuantFormat::Int8] {
                let stored =
                    Quantized::quantize(&device, shape, &input, format, DType::BF16).unwrap();
                assert_eq!(stored.dims(), shape);
                let what = format!("{device} {format} {shape:?}");
                for dtype in [DType::F32, DType::BF16, DType::F16, DType::F64] {
                    let got = stored.dequantize(dtype).unwrap();
                    assert_eq!((got.shape().dims(), got.dtype()), (shape, dtype), "{what}");
                    let (got, want) = match dtype {
                        DType::F32 => (
                            got.to_bytes().unwrap(),
                            bits(&host_values::<f32>(&input, format)),
                        ),
                        DType::F64 => (
                            got.to_bytes().unwrap(),
                            bits(&host_values::<f64>(&input, format)),
                        ),
                        DType::F16 => (
                            got.to_bytes().unwrap(),
                            bits(&host_values::<half::f16>(&input, format)),
                        ),
                        _ => (
                            got.to_bytes().unwrap(),
                            bits(&host_values::<half::bf16>(&input, format)),
                        ),
                    };
                    assert!(got == want, "{what} in {dtype}: not the host's values");
                }
            }
        }
    }
}

#[test]
fn rows_gathered_by_id_are_the_rows_of_the_dequantized_table_to_the_bit() {
    let mut rng = rng();
    for device in devices() {
        // 600 rows of 96: a row's blocks straddle rows and blocks of scales.
        let (rows, width) = (600, 96);
        let input: Vec<f32> = values(&mut rng, rows * width, -0.1, 0.1)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let ids: Vec<u32> = [0, 599, 7, 7, 300, 2, 511, 256, 1, 598].to_vec();
        let ids_array = Array::from_host(&device, [2, 5], &ids).unwrap();
        for format in [QuantFormat::Nf4, QuantFormat::Int8] {
            let stored =
                Quantized::quantize(&device, [rows, width], &input, format, DType::BF16).unwrap();
            let table = stored
                .dequantize(DType::F32)
                .unwrap()
                .to_host::<f32>()
                .unwrap();
            for dtype in [DType::F32, DType::BF16] {
                let got = stored.gather_rows(&ids_array, dtype).unwrap();
                assert_eq!(got.shape().dims(), [2, 5, width]);
                let got = got.cast(DType::F32).unwrap().to_host::<f32>().unwrap();
                let want: Vec<f32> = ids
                    .iter()
                    .flat_map(|&id| &table[id as usize * width..][..width])
                    .map(|&v| f32::from(half::bf16::from_f32(v)))
                    .collect();
                let want = match dtype {
                    DType::F32 => ids
                        .iter()
                        .flat_map(|&id| table[id as usize * width..][..width].to_vec())
                        .collect(),
                    _ => want,
                };
                assert!(
                    got == want,
                    "{device} {format} in {dtype}: not the table's rows"
                );
            }
            let bad = Array::from_host(&device, [2], &[3u32, rows as u32]).unwrap();
            assert_fails(stored.gather_rows(&bad, DType::F32), "gather_rows", &["id"]);
        }
    }
}

#[test]
fn writing_new_values_reuses_the_storage_and_changes_the_values() {
    for device in devices() {
        let mut stored = Quantized::zeros(&device, [8, 64], QuantFormat::Nf4, DType::F32).unwrap();
        assert!(
            stored
                .dequantize(DType::F32)
                .unwrap()
                .to_f64()
                .unwrap()
                .iter()
                .all(|&v| v == 0.0)
        );
        let before = device.allocator().with(|a| a.stats().in_use);
        let input: Vec<f32> = (0..512).map(|i| (i as f32 - 256.0) / 100.0).collect();
        stored.write(&input).unwrap();
        assert_eq!(device.allocator().with(|a| a.stats().in_use), before);
        let got = stored
            .dequantize(DType::F32)
            .unwrap()
            .to_host::<f32>()
            .unwrap();
        assert_eq!(got, host_values::<f32>(&input, QuantFormat::Nf4));
    }
}

#[test]
fn nf4_holds_about_a_quarter_of_the_bf16_bytes_on_the_device() {
    let meta = Device::meta(DeviceConfig::new(1 << 30)).unwrap();
    // Llama 3.1 8B's up projection: quantized on the meta device (sizes only).
    let stored =
        Quantized::quantize(&meta, [14336, 4096], &[], QuantFormat::Nf4, DType::BF16).unwrap();
    let bf16 = 14336 * 4096 * 2;
    let ratio = stored.bytes() as f64 / bf16 as f64;
    assert!(
        (0.25..0.27).contains(&ratio),
        "NF4 holds {ratio} of bf16's bytes"
    );
    let int8 =
        Quantized::quantize(&meta, [14336, 4096], &[], QuantFormat::Int8, DType::BF16).unwrap();
    let ratio = int8.bytes() as f64 / bf16 as f64;
    assert!(
        (0.5..0.54).contains(&ratio),
        "int8 holds {ratio} of bf16's bytes"
    );
}

#[test]
fn bad_values_and_operands_are_typed_errors() {
    let cpu = Device::cpu(DeviceConfig::new(1 << 20)).unwrap();
    let nan = [0.0, f32::NAN, 1.0, 2.0];
    assert_fails(
        Quantized::quantize(&cpu, [2, 2], &nan, QuantFormat::Nf4, DType::F32),
        "nf4",
        &["value 1 is NaN"],
    );
    assert_fails(
        Quantized::quantize(&cpu, [2, 2], &[1.0; 3], QuantFormat::Int8, DType::F32),
        "quantize",
        &["4"],
    );
    assert_fails(
        Quantized::zeros(&cpu, [2, 2], QuantFormat::Int8, DType::U32),
        "quantize",
        &["float"],
    );
    let codes = Array::zeros(&cpu, [3], DType::U8).unwrap();
    let scales = Array::zeros(&cpu, [1], DType::F32).unwrap();
    assert_fails(
        dequantize(&codes, &scales, None, Codes::Nf4, 64, [8], DType::F32),
        "dequantize",
        &["codes of 3 u8", "needs 4"],
    );
    assert_fails(
        dequantize(
            &codes,
            &scales,
            None,
            Codes::Dynamic { offset: 0.0 },
            64,
            [3],
            DType::F32,
        ),
        "dequantize",
        &["code book"],
    );
    assert_fails(
        dequantize(&codes, &scales, None, Codes::Int8, 64, [3], DType::U8),
        "dequantize",
        &["float"],
    );
}

#[test]
fn stored_weights_go_to_the_host_tier_and_back_unchanged() {
    let mut rng = rng();
    for device in devices() {
        let host = Device::host_tier_of(&device, DeviceConfig::new(64 << 20)).unwrap();
        let input: Vec<f32> = values(&mut rng, 300 * 129, -0.2, 0.2)
            .iter()
            .map(|&v| v as f32)
            .collect();
        for format in [QuantFormat::Nf4, QuantFormat::Int8] {
            let stored =
                Quantized::quantize(&device, [300, 129], &input, format, DType::BF16).unwrap();
            let offloaded = stored.to_device(&host).unwrap();
            assert!(offloaded.device().same(&host));
            assert_eq!(host.allocator().stats().in_use, offloaded.bytes() as u64);
            let back = offloaded.to_device(&device).unwrap();
            let values = |q: &Quantized| q.dequantize(DType::BF16).unwrap().to_f64().unwrap();
            assert_eq!(values(&back), values(&stored), "{device} {format}");
            drop(offloaded);
            assert_eq!(host.allocator().stats().in_use, 0);
        }
    }
}

#[test]
fn a_few_rows_against_nf4_codes_multiply_as_the_dequantized_weight_does_to_the_bit() {
    // Rows of whole blocks, more weight rows than one task takes (64) and fewer; one to eight
    // rows of `x`, in a batch too; every float dtype a product takes.
    let mut rng = rng();
    for device in devices() {
        for (n, k) in [(130, 128), (7, 192)] {
            let w: Vec<f32> = values(&mut rng, n * k, -0.2, 0.2)
                .iter()
                .map(|&v| v as f32)
                .collect();
            let stored =
                Quantized::quantize(&device, [n, k], &w, QuantFormat::Nf4, DType::BF16).unwrap();
            for x_dims in [&[1, k][..], &[2, 3, k], &[8, k]] {
                for dtype in [DType::F32, DType::BF16, DType::F16] {
                    let count = x_dims.iter().product();
                    let x = values(&mut rng, count, -1.0, 1.0);
                    let x = Array::from_f64(&device, x_dims, dtype, &x).unwrap();
                    let dense = stored.dequantize(dtype).unwrap();
                    let want = matmul(&x, &dense, false, true).unwrap();
                    let Some(got) = stored.few_rows_product(&x).unwrap() else {
                        assert_ne!(
                            device.plan_target(),
                            PlanTarget::Cpu,
                            "a CPU has the kernel"
                        );
                        continue;
                    };
                    let what = format!("{device} {n}x{k} {x_dims:?} {dtype}");
                    assert_eq!(got.shape(), want.shape(), "{what}");
                    assert_eq!(got.to_bytes().unwrap(), want.to_bytes().unwrap(), "{what}");
                }
            }
        }
    }
}

#[test]
fn nf4_codes_are_multiplied_as_stored_only_where_the_kernel_applies() {
    let cpu = &devices()[0];
    let weight = |format, k| {
        Quantized::quantize(cpu, [16, k], &vec![0.1; 16 * k], format, DType::F32).unwrap()
    };
    let rows = |m, k| Array::full(cpu, [m, k], DType::F32, 0.5).unwrap();
    let (nf4, int8) = (weight(QuantFormat::Nf4, 64), weight(QuantFormat::Int8, 64));
    assert!(nf4.few_rows_product(&rows(8, 64)).unwrap().is_some());
    assert!(
        nf4.few_rows_product(&rows(9, 64)).unwrap().is_none(),
        "too many rows"
    );
    assert!(
        int8.few_rows_product(&rows(1, 64)).unwrap().is_none(),
        "not NF4"
    );
    let partial = weight(QuantFormat::Nf4, 96);
    assert!(
        partial.few_rows_product(&rows(1, 96)).unwrap().is_none(),
        "rows not whole blocks"
    );
    assert!(
        nf4.few_rows_product(&rows(1, 32)).unwrap().is_none(),
        "mismatched: matmul says"
    );
}

#[test]
fn a_generation_step_against_nf4_codes_holds_no_dequantized_weight() {
    // A CPU's plan of one token through a 2048 x 2048 layer: the output and the block scales
    // beside the codes, where a dequantized bf16 weight would take 8 MiB.
    let meta = Device::meta(DeviceConfig::new(1 << 30)).unwrap();
    let stored = Quantized::quantize(&meta, [2048, 2048], &[], QuantFormat::Nf4, DType::BF16);
    let stored = stored.unwrap();
    let x = Array::zeros(&meta, [1, 2048], DType::BF16).unwrap();
    let in_use = meta.allocator().stats().in_use;
    meta.allocator().with(|a| a.reset_peak());
    let y = stored
        .few_rows_product(&x)
        .unwrap()
        .expect("a plan for a CPU has the kernel");
    let held = meta.allocator().stats().peak_in_use - in_use;
    assert_eq!(y.shape().dims(), [1, 2048]);
    assert!(
        held <= (2048 * 2048 / 64 * 4 + 2048 * 2) as u64 + 4096,
        "{held} bytes"
    );
    assert!(meta.planned_work().unwrap().matrix_flops >= 2.0 * 2048.0 * 2048.0);
}
