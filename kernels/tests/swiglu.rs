//! SwiGLU against f64 references and finite differences; the half types' rounding order;
//! operand checks. (Memory planning and OOM behaviour: `memory.rs`.)

mod common;

use common::{
    FD_TOLERANCE, assert_close, assert_close_scaled, assert_fails, devices, dot, numeric_gradient,
    random, rng, tolerance,
};
use headroom_kernels::ops::elementwise::{swiglu, swiglu_backward};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error};

/// Shapes: empty, single elements, odd lengths (a tail past the 16-byte packs on CUDA), and
/// more elements than one pass of a GPU's grid covers.
const SHAPES: [&[usize]; 7] = [&[0], &[1], &[7], &[3, 5], &[2, 1, 9], &[64, 33], &[300_001]];

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn swiglu_and_its_gradients_match_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in SHAPES {
                let (gate, gs) = random(&device, &mut rng, shape, dtype, -6.0, 6.0);
                let (up, us) = random(&device, &mut rng, shape, dtype, -2.0, 2.0);
                let (dy, dys) = random(&device, &mut rng, shape, dtype, -1.0, 1.0);
                let what = format!("{dtype} {shape:?}");
                let out = swiglu(&gate, &up).unwrap();
                assert_eq!((out.shape().dims(), out.dtype()), (shape, dtype));
                let want: Vec<f64> = gs
                    .iter()
                    .zip(&us)
                    .map(|(g, u)| g * sigmoid(*g) * u)
                    .collect();
                let scale: Vec<f64> = gs.iter().zip(&us).map(|(g, u)| (g * u).abs()).collect();
                let got = out.to_f64().unwrap();
                assert_close_scaled(
                    &format!("swiglu {what}"),
                    &got,
                    &want,
                    &scale,
                    tolerance(dtype),
                );

                let grads = swiglu_backward(&gate, &up, &dy).unwrap();
                let (mut dgate, mut dgate_scale, mut dup, mut dup_scale) =
                    (vec![], vec![], vec![], vec![]);
                for ((&g, &u), &d) in gs.iter().zip(&us).zip(&dys) {
                    let s = sigmoid(g);
                    dgate.push(d * u * s * (1.0 + g * (1.0 - s)));
                    dgate_scale.push((d * u).abs() * s * (1.0 + g.abs() * (1.0 - s)));
                    dup.push(d * g * s);
                    dup_scale.push((d * g * s).abs());
                }
                for (name, got, want, scale) in [
                    ("dgate", &grads.dgate, dgate, dgate_scale),
                    ("dup", &grads.dup, dup, dup_scale),
                ] {
                    assert_eq!((got.shape().dims(), got.dtype()), (shape, dtype));
                    let what = format!("swiglu_backward {name} {what}");
                    let got = got.to_f64().unwrap();
                    assert_close_scaled(&what, &got, &want, &scale, tolerance(dtype));
                }
            }
        }
    }
}

/// Rounds an f32 value to `dtype` (exact in f64, so rounded once).
fn round_to(dtype: DType, device: &Device, v: f32) -> f32 {
    let a = Array::from_f64(device, [1], dtype, &[f64::from(v)]).unwrap();
    a.to_f64().unwrap()[0] as f32
}

#[test]
fn half_types_round_the_silu_before_the_product_as_transformers_does() {
    let mut rng = rng();
    for device in devices() {
        for dtype in [DType::BF16, DType::F16] {
            let (gate, gs) = random(&device, &mut rng, &[200], dtype, -4.0, 4.0);
            let (up, us) = random(&device, &mut rng, &[200], dtype, -2.0, 2.0);
            let got = swiglu(&gate, &up).unwrap().to_f64().unwrap();
            let round = |v: f32| round_to(dtype, &device, v);
            let (mut checked, mut telling) = (0, 0);
            for (i, ((&g, &u), &got)) in gs.iter().zip(&us).zip(&got).enumerate() {
                let (g, u) = (g as f32, u as f32);
                let silu = g / (1.0 + (-g).exp());
                // A SiLU within some f32 ulps of a rounding boundary of the dtype rounds
                // either way, as the kernel's exp may differ from this one in the last bit.
                if round(silu * (1.0 + 2e-6)) != round(silu * (1.0 - 2e-6)) {
                    continue;
                }
                // act_fn(gate) * up: the SiLU rounded to the dtype, then the product (exact
                // in f32 for two half values) rounded.
                let want = f64::from(round(round(silu) * u));
                assert_eq!(got, want, "{dtype} {i}: gate {g}, up {u}");
                checked += 1;
                telling += usize::from(f64::from(round(silu * u)) != want);
            }
            // Enough elements checked, and some where the other order rounds differently.
            assert!(checked > 150 && telling > 0, "{dtype}: {checked} {telling}");
        }
    }
}

#[test]
fn swiglu_backward_matches_finite_differences() {
    let mut rng = rng();
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let upload = |v: &[f64]| Array::from_f64(&device, [v.len()], DType::F64, v).unwrap();
    let (gate, gs) = random(&device, &mut rng, &[23], DType::F64, -5.0, 5.0);
    let (up, us) = random(&device, &mut rng, &[23], DType::F64, -2.0, 2.0);
    let (dy, dys) = random(&device, &mut rng, &[23], DType::F64, -2.0, 2.0);
    let loss = |g: &[f64], u: &[f64]| {
        dot(
            &swiglu(&upload(g), &upload(u)).unwrap().to_f64().unwrap(),
            &dys,
        )
    };
    let grads = swiglu_backward(&gate, &up, &dy).unwrap();
    let checks = [
        (
            "dgate",
            &grads.dgate,
            numeric_gradient(&gs, |v| loss(v, &us)),
        ),
        ("dup", &grads.dup, numeric_gradient(&us, |v| loss(&gs, v))),
    ];
    for (name, got, want) in checks {
        assert_close(name, &got.to_f64().unwrap(), &want, FD_TOLERANCE);
    }
}

#[test]
fn bad_operands_give_typed_errors_naming_the_op() {
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let f32s = |shape: &[usize]| Array::full(&device, shape, DType::F32, 0.5).unwrap();
    let (a, b, row) = (f32s(&[3, 5]), f32s(&[5, 3]), f32s(&[5]));
    let a64 = Array::full(&device, [3, 5], DType::F64, 1.0).unwrap();
    let ids = Array::from_host(&device, [3, 5], &[0u32; 15]).unwrap();
    let in_use = device.allocator().stats().in_use;

    let err = assert_fails(swiglu(&a, &b), "swiglu", &["up", "[5, 3]"]);
    assert!(matches!(err, Error::Shape { op: "swiglu", .. }), "{err:?}");
    // No broadcasting, even where it would apply.
    let err = assert_fails(swiglu(&a, &row), "swiglu", &["broadcasting"]);
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    let err = assert_fails(swiglu(&a, &a64), "swiglu", &["f64"]);
    assert!(matches!(err, Error::DType { .. }), "{err:?}");
    let err = assert_fails(swiglu(&ids, &ids), "swiglu", &["u32"]);
    assert!(matches!(err, Error::DType { .. }), "{err:?}");
    const BACK: &str = "swiglu_backward";
    let err = assert_fails(swiglu_backward(&a, &a, &b), BACK, &["dy"]);
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    let err = assert_fails(swiglu_backward(&a, &b, &a), BACK, &["up"]);
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    let err = assert_fails(swiglu_backward(&a, &a, &a64), BACK, &["f64"]);
    assert!(matches!(err, Error::DType { .. }), "{err:?}");

    assert_eq!(device.allocator().stats().in_use, in_use);
}
