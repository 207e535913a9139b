//! A two-layer MLP's gradients against the formula derived by hand.

mod common;

use common::{rng, shared_device, values};
use headroom_autograd::{Tape, Tensor};
use headroom_kernels::{Array, DType};

/// `a [n, k] @ b [k, m]` on the host.
fn matmul(a: &[f64], b: &[f64], n: usize, k: usize, m: usize) -> Vec<f64> {
    let mut c = vec![0.0; n * m];
    for i in 0..n {
        for j in 0..m {
            c[i * m + j] = (0..k).map(|p| a[i * k + p] * b[p * m + j]).sum();
        }
    }
    c
}

/// The transpose of `a [n, m]`.
fn transpose(a: &[f64], n: usize, m: usize) -> Vec<f64> {
    let mut t = vec![0.0; n * m];
    for i in 0..n {
        for j in 0..m {
            t[j * n + i] = a[i * m + j];
        }
    }
    t
}

/// The sum of the rows of `a [n, m]`.
fn column_sums(a: &[f64], n: usize, m: usize) -> Vec<f64> {
    (0..m).map(|j| (0..n).map(|i| a[i * m + j]).sum()).collect()
}

#[test]
fn two_layer_mlp_gradients_equal_the_hand_derived_formula() {
    let device = shared_device();
    let mut rng = rng();
    let (n, d, h, c) = (5, 4, 6, 3);
    let x = values(&mut rng, n * d, -1.0, 1.0);
    let w1 = values(&mut rng, d * h, -1.0, 1.0);
    let b1 = values(&mut rng, h, -0.5, 0.5);
    let w2 = values(&mut rng, h * c, -1.0, 1.0);
    let b2 = values(&mut rng, c, -0.5, 0.5);
    let targets: Vec<u32> = (0..n).map(|i| (i % c) as u32).collect();

    let variable = |shape: &[usize], v: &[f64]| {
        Tensor::variable(Array::from_f64(&device, shape, DType::F64, v).unwrap())
    };
    let (tw1, tb1, tw2, tb2) = (
        variable(&[d, h], &w1),
        variable(&[h], &b1),
        variable(&[h, c], &w2),
        variable(&[c], &b2),
    );
    let tx = Tensor::from_f64(&device, [n, d], DType::F64, &x).unwrap();
    let tt = Tensor::from_host(&device, [n], &targets).unwrap();
    let tape = Tape::new();
    let loss = tape
        .record(|| {
            let a = tx.matmul(&tw1)?.add(&tb1)?;
            let z = a.relu()?.matmul(&tw2)?.add(&tb2)?;
            z.cross_entropy(&tt, None)
        })
        .unwrap();
    let grads = tape.gradient(&loss, &[&tw1, &tb1, &tw2, &tb2]).unwrap();
    let got = |t: &Tensor| grads.get(t).unwrap().to_f64().unwrap();

    // Forward: a = x W1 + b1, h = relu(a), z = h W2 + b2, loss = mean_i CE(z_i, t_i).
    let mut a = matmul(&x, &w1, n, d, h);
    for (i, v) in a.iter_mut().enumerate() {
        *v += b1[i % h];
    }
    let hidden: Vec<f64> = a.iter().map(|&v| v.max(0.0)).collect();
    let mut z = matmul(&hidden, &w2, n, h, c);
    for (i, v) in z.iter_mut().enumerate() {
        *v += b2[i % c];
    }
    // dL/dz_i = (softmax(z_i) - onehot(t_i)) / n.
    let mut dz = vec![0.0; n * c];
    for i in 0..n {
        let row = &z[i * c..(i + 1) * c];
        let max = row.iter().cloned().fold(f64::MIN, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        for j in 0..c {
            let onehot = if j == targets[i] as usize { 1.0 } else { 0.0 };
            dz[i * c + j] = ((row[j] - max).exp() / sum - onehot) / n as f64;
        }
    }
    // dW2 = h^T dz, db2 = sum over rows of dz.
    let dw2 = matmul(&transpose(&hidden, n, h), &dz, h, n, c);
    let db2 = column_sums(&dz, n, c);
    // dh = dz W2^T; da = dh where a > 0, else 0.
    let dh = matmul(&dz, &transpose(&w2, h, c), n, c, h);
    let da: Vec<f64> = dh
        .iter()
        .zip(&a)
        .map(|(g, &v)| if v > 0.0 { *g } else { 0.0 })
        .collect();
    // dW1 = x^T da, db1 = sum over rows of da.
    let dw1 = matmul(&transpose(&x, n, d), &da, d, n, h);
    let db1 = column_sums(&da, n, h);

    for (name, got, want) in [
        ("W1", got(&tw1), dw1),
        ("b1", got(&tb1), db1),
        ("W2", got(&tw2), dw2),
        ("b2", got(&tb2), db2),
    ] {
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "{name}[{k}]: {g} against {w}"
            );
        }
    }
}
