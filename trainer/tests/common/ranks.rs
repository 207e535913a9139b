//! What tests of several ranks read back from their runs: a command's output, each step's
//! loss, how far two checkpoints differ, the run's summary.

use std::path::Path;
use std::process::Command;

use super::safetensors_entries;

/// Runs `command`; panics with its output if it fails, and returns its output (standard
/// output, then standard error).
pub fn succeeded(command: &mut Command) -> String {
    let out = command.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    text.into_owned()
}

/// Each step's loss in the run directory's metrics.
pub fn losses(dir: &Path) -> Vec<f64> {
    headroom_trainer::run_dir::read_all(dir)
        .unwrap()
        .iter()
        .map(|record| record.loss)
        .collect()
}

/// Whether two losses agree to the rounding of sums taken in another order.
pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1e-3)
}

/// The largest difference between the entries of two checkpoints, relative to each entry's
/// largest value (at least 1e-3), and the entry it is in.
pub fn worst_difference(a: &Path, b: &Path) -> (f64, String) {
    let (a, b) = (safetensors_entries(a), safetensors_entries(b));
    assert_eq!(a.len(), b.len());
    let mut worst = (0.0, String::new());
    for ((name, x), (other, y)) in a.iter().zip(&b) {
        assert_eq!(name, other);
        let (x, y) = (x.to_f64().unwrap(), y.to_f64().unwrap());
        let scale = x.iter().map(|p| p.abs()).fold(1e-3, f64::max);
        let most = x
            .iter()
            .zip(&y)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f64::max)
            / scale;
        if most > worst.0 {
            worst = (most, name.clone());
        }
    }
    worst
}

/// The summary of the run in `dir`.
pub fn summary(dir: &Path) -> headroom_trainer::run_dir::Summary {
    let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Asserts that two runs recorded the same loss at each of their `steps` steps, to the
/// rounding of sums taken in another order (rank 0 writes one record a step).
pub fn assert_same_losses(one: &Path, other: &Path, steps: usize) {
    let (expected, got) = (losses(one), losses(other));
    assert_eq!(
        (expected.len(), got.len()),
        (steps, steps),
        "one record a step"
    );
    for (step, (a, b)) in expected.iter().zip(&got).enumerate() {
        assert!(close(*a, *b), "step {}: {a} against {b}", step + 1);
    }
}

/// Asserts that the final checkpoints of the runs in two directories agree to rounding.
pub fn assert_same_weights(one: &Path, other: &Path) {
    let path = headroom_trainer::run_dir::checkpoint_path;
    let (worst, name) = worst_difference(&path(one), &path(other));
    assert!(
        worst <= 1e-5,
        "{name} differs by {worst:e} of its largest value"
    );
}
