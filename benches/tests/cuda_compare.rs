//! `cuda-compare --smoke` runs every case and prints one JSON line per result, with the keys
//! `benches/peers/compare.py` matches on. It needs a CUDA device (or the CPU emulation of the
//! driver, `scripts/cuda-emulated-check.sh`); without one it says it was skipped, and fails
//! when HEADROOM_REQUIRE_CUDA is set.
#![cfg(feature = "cuda")]

use std::process::Command;

use serde_json::Value;

fn cuda_compare(arg: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cuda-compare"))
        .arg(arg)
        .output()
        .expect("cuda-compare runs")
}

#[test]
fn an_unknown_argument_is_a_usage_error() {
    let out = cuda_compare("--fast");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: cuda-compare [--smoke]"));
}

#[test]
fn the_smoke_run_prints_every_case_with_the_keys_the_comparison_reads() {
    if !headroom_kernels::cuda::is_available() {
        assert!(
            std::env::var_os("HEADROOM_REQUIRE_CUDA").is_none(),
            "HEADROOM_REQUIRE_CUDA is set, but no CUDA device is available"
        );
        eprintln!("cuda skipped: no CUDA device");
        return;
    }
    let out = cuda_compare("--smoke");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect();
    let ops: Vec<&str> = lines.iter().filter_map(|l| l["op"].as_str()).collect();
    assert_eq!(
        ops,
        [
            "gemm",
            "gemm",
            "gemm",
            "gemm",
            "copy",
            "exp",
            "gelu",
            "add",
            "gelu_backward",
            "softmax",
            "softmax_backward",
            "layer_norm",
            "softmax",
            "softmax_backward",
            "layer_norm",
            "embedding_backward",
            "embedding_backward",
            "embedding_backward",
            "embedding_backward",
            "alloc_free",
            "buffer_alloc_free"
        ]
    );
    for line in &lines {
        for key in ["dtype", "shape", "unit"] {
            assert!(line[key].is_string(), "{key} in {line}");
        }
        let value = line["value"].as_f64().unwrap_or(-1.0);
        assert!(value > 0.0 && value.is_finite(), "{line}");
        match line["op"].as_str() {
            Some("gemm" | "copy" | "embedding_backward") => {}
            Some("alloc_free" | "buffer_alloc_free") => {
                assert!(line["speedup"].as_f64().is_some_and(|s| s > 0.0))
            }
            _ => assert!(line["of_copy"].as_f64().is_some_and(|s| s > 0.0), "{line}"),
        }
    }
}
