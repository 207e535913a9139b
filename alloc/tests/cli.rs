//! The `headroom-alloc` binary: replay output, JSON keys, errors.

use std::process::Command;

fn headroom_alloc(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_headroom-alloc"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn write_temp(name: &str, text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("headroom-alloc-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn json_replay_has_exactly_the_documented_keys() {
    let out = headroom_alloc(&["replay", "--limit", "64MiB", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "allocs",
            "first_oom_op",
            "first_oom_verdict",
            "fragmentation_at_first_oom",
            "frees",
            "largest_free_at_first_oom",
            "ooms",
            "ops",
            "peak_in_use",
            "peak_reserved"
        ]
    );
    // The built-in trace needs about 210 MiB, so 64 MiB must run out. The first OOM would fit if
    // chunks handed out whole were not padded: a fragmentation OOM, which splitting always cures
    // for that request, and which leaves room for more allocations.
    assert!(value["ooms"].as_u64().unwrap() > 0);
    assert_eq!(value["first_oom_verdict"], "fragmentation");
    let split = headroom_alloc(&[
        "replay",
        "--limit",
        "64MiB",
        "--max-internal-fragmentation",
        "256",
        "--json",
    ]);
    let split: serde_json::Value = serde_json::from_slice(&split.stdout).unwrap();
    assert_eq!(split["first_oom_verdict"], "capacity");
    assert!(split["allocs"].as_u64() > value["allocs"].as_u64());
    let roomy = headroom_alloc(&["replay", "--limit", "512MiB", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&roomy.stdout).unwrap();
    assert_eq!(value["ooms"], 0);
    assert!(value["first_oom_verdict"].is_null());
}

#[test]
fn a_trace_file_replays_with_a_human_report() {
    let trace = concat!(
        "{\"op\":\"alloc\",\"id\":1,\"size\":1048576,\"tag\":\"weights\"}\n",
        "{\"op\":\"alloc\",\"id\":2,\"size\":4194304,\"tag\":\"activations\"}\n",
        "{\"op\":\"free\",\"id\":2}\n",
        "{\"op\":\"free\",\"id\":1}\n",
    );
    let path = write_temp("ok.jsonl", trace);
    let out = headroom_alloc(&["replay", path.to_str().unwrap(), "--limit", "2MiB"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    assert!(text.contains("1 OOMs"), "{text}");
    assert!(text.contains("capacity OOM"), "{text}");
    assert!(text.contains("weights"), "{text}");
    let preallocated = headroom_alloc(&[
        "replay",
        path.to_str().unwrap(),
        "--limit",
        "8MiB",
        "--growth",
        "preallocate",
        "--json",
    ]);
    let value: serde_json::Value = serde_json::from_slice(&preallocated.stdout).unwrap();
    assert_eq!(value["peak_reserved"], 8 << 20);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn bad_input_is_reported_with_its_line_and_a_failing_status() {
    let path = write_temp(
        "bad.jsonl",
        "{\"op\":\"alloc\",\"id\":1,\"size\":10}\n{\"op\":\"free\"}\n",
    );
    let out = headroom_alloc(&["replay", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("line 2"), "{err}");
    std::fs::remove_file(path).unwrap();
    let missing = headroom_alloc(&["replay", "/nonexistent/trace.jsonl"]);
    assert!(!missing.status.success());
    let bad_limit = headroom_alloc(&["replay", "--limit", "lots"]);
    assert!(!bad_limit.status.success());
    assert!(String::from_utf8_lossy(&bad_limit.stderr).contains("lots"));
}

#[test]
fn generated_traces_replay() {
    let out = headroom_alloc(&["generate", "lognormal", "--scale", "1"]);
    assert!(out.status.success());
    let path = write_temp("lognormal.jsonl", std::str::from_utf8(&out.stdout).unwrap());
    let replayed = headroom_alloc(&[
        "replay",
        path.to_str().unwrap(),
        "--limit",
        "4GiB",
        "--json",
    ]);
    let value: serde_json::Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(value["allocs"], 20_000);
    std::fs::remove_file(path).unwrap();
}
