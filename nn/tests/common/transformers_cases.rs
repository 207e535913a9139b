//! The cases `scripts/hf/make_tiny_*.py` wrote beside each tiny model (`expected.json`): ids,
//! transformers' logits and loss, and how a model here computes the same.

use std::path::{Path, PathBuf};

use headroom_autograd::Tensor;
use headroom_nn::{Gpt, Module};

/// The test data directory `name`.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// One case of `expected.json`: ids (`[rows, len]`), logits and loss.
pub struct Case {
    pub rows: usize,
    pub ids: Vec<u32>,
    pub logits: Vec<f64>,
    pub loss: f64,
}

/// What transformers computed for the tiny model `name`: one row, then a batch of rows.
pub fn expected(name: &str) -> Vec<Case> {
    let text = std::fs::read(data(name).join("expected.json")).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let case = |json: &serde_json::Value| {
        let ids = &json["ids"];
        let (rows, ids): (usize, Vec<u32>) = match ids[0].as_array() {
            Some(_) => {
                let rows = ids.as_array().unwrap();
                let flat = rows.iter().flat_map(|r| r.as_array().unwrap().clone());
                (
                    rows.len(),
                    flat.map(|v| v.as_u64().unwrap() as u32).collect(),
                )
            }
            None => (
                1,
                ids.as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as u32)
                    .collect(),
            ),
        };
        let logits = json["logits"].as_array().unwrap();
        Case {
            rows,
            ids,
            logits: logits.iter().map(|v| v.as_f64().unwrap()).collect(),
            loss: json["loss"].as_f64().unwrap(),
        }
    };
    let mut cases = vec![case(&json)];
    if json.get("batch").is_some() {
        cases.push(case(&json["batch"]));
    }
    cases
}

/// The model's logits and transformers' loss (labels = ids) of `case`.
pub fn run(gpt: &Gpt, case: &Case) -> (Vec<f64>, f64) {
    let device = gpt.tok_emb.weight.device();
    let len = case.ids.len() / case.rows;
    let ids = Tensor::from_host(device, [case.rows, len], &case.ids).unwrap();
    let logits = gpt.forward(&ids).unwrap().to_f64().unwrap();
    let row = |r: usize, from: usize, to: usize| case.ids[r * len + from..r * len + to].to_vec();
    let inputs: Vec<u32> = (0..case.rows).flat_map(|r| row(r, 0, len - 1)).collect();
    let targets: Vec<u32> = (0..case.rows).flat_map(|r| row(r, 1, len)).collect();
    let inputs = Tensor::from_host(device, [case.rows, len - 1], &inputs).unwrap();
    let targets = Tensor::from_host(device, [case.rows, len - 1], &targets).unwrap();
    let loss = gpt.loss(&inputs, &targets, None).unwrap().to_f64().unwrap()[0];
    (logits, loss)
}

pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Asserts that `gpt` gives the logits and loss of every case of the tiny model `name`'s
/// `expected.json`: the logits (about 8 at most, written with 7 significant digits) within 1e-5,
/// the loss within 1e-6 relative.
pub fn assert_transformers_cases(name: &str, gpt: &Gpt) {
    for case in expected(name) {
        let (logits, loss) = run(gpt, &case);
        let diff = max_abs_diff(&logits, &case.logits);
        let relative = (loss - case.loss).abs() / case.loss;
        eprintln!("{name}: logits within {diff:e}, loss {relative:e} relative");
        assert!(diff < 1e-5, "{name}: logits differ by up to {diff}");
        assert!(relative < 1e-6, "{name}: loss {loss} against {}", case.loss);
    }
}
