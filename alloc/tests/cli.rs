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
            "peak_reserved",
            "recorded_ooms",
            "recorded_ooms_fitted",
            "settings"
        ]
    );
    // The built-in trace needs about 210 MiB, so 64 MiB must run out: a capacity OOM.
    assert!(value["ooms"].as_u64().unwrap() > 0);
    assert_eq!(value["first_oom_verdict"], "capacity");
    // Growing in place, the default splits what it grows for, so it fits as many allocations as
    // splitting every chunk does; one preallocated region under TensorFlow's split rule pads
    // chunks handed out whole and fits fewer.
    let replay_allocs = |extra: &[&str]| {
        let args = [&["replay", "--limit", "64MiB", "--json"], extra].concat();
        let out: serde_json::Value = serde_json::from_slice(&headroom_alloc(&args).stdout).unwrap();
        out["allocs"].as_u64().unwrap()
    };
    let split = replay_allocs(&["--max-internal-fragmentation", "256"]);
    assert_eq!(value["allocs"].as_u64().unwrap(), split);
    assert!(replay_allocs(&["--growth", "preallocate"]) < split);
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

#[test]
fn zero_slack_replays_an_exact_fit() {
    let trace = concat!(
        "{\"op\":\"alloc\",\"id\":1,\"size\":256}\n",
        "{\"op\":\"alloc\",\"id\":2,\"size\":256}\n",
        "{\"op\":\"free\",\"id\":1}\n",
        "{\"op\":\"alloc\",\"id\":3,\"size\":256}\n",
        "{\"op\":\"free\",\"id\":2}\n",
    );
    let path = write_temp("exact.jsonl", trace);
    let out = headroom_alloc(&[
        "replay",
        path.to_str().unwrap(),
        "--max-internal-fragmentation",
        "0",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (value["allocs"].as_u64(), value["frees"].as_u64()),
        (Some(3), Some(2))
    );
    std::fs::remove_file(path).unwrap();
}

#[test]
fn replay_errors_name_the_file_and_its_line() {
    let trace = concat!(
        "{\"op\":\"alloc\",\"id\":1,\"size\":256}\n",
        "\n",
        "\n",
        "{\"op\":\"alloc\",\"id\":2,\"size\":1073741824}\n",
        "{\"op\":\"free\",\"id\":7}\n",
    );
    let path = write_temp("unknown-id.jsonl", trace);
    let out = headroom_alloc(&["replay", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    let expected = format!("trace {} line 5: free of id 7", path.display());
    assert!(err.contains(&expected), "{err}");
    // OOMs are named by line too: the 1 GiB request on line 4.
    std::fs::write(&path, &trace[..trace.rfind("{\"op\":\"free\"").unwrap()]).unwrap();
    let out = headroom_alloc(&["replay", path.to_str().unwrap(), "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["first_oom_op"], 4);
    let bad = headroom_alloc(&["replay", path.to_str().unwrap(), "--find-limit"]);
    assert!(bad.status.success());
    std::fs::write(&path, "\n{\"op\":\"free\"}\n").unwrap();
    let out = headroom_alloc(&["replay", path.to_str().unwrap(), "--find-limit"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!("trace {} line 2:", path.display())),
        "{err}"
    );
    std::fs::remove_file(path).unwrap();
}

#[test]
fn find_limit_gives_the_smallest_limit_that_fits() {
    let out = headroom_alloc(&["replay", "--find-limit", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let limit = value["limit"].as_u64().unwrap();
    assert_eq!(limit % 256, 0);
    assert!(limit >= value["packed_peak"].as_u64().unwrap());
    assert!(value["peak_in_use"].as_u64().unwrap() <= limit);
    let verdict = value["below"]["verdict"].as_str().unwrap();
    assert!(["capacity", "fragmentation"].contains(&verdict), "{value}");
    let at = |limit: u64| {
        let out = headroom_alloc(&["replay", "--limit", &limit.to_string(), "--json"]);
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            value["ooms"].as_u64().unwrap(),
            value["first_oom_verdict"].clone(),
        )
    };
    assert_eq!(at(limit).0, 0);
    let (ooms, first_verdict) = at(limit - 256);
    assert!(ooms > 0);
    assert_eq!(first_verdict, verdict);

    let human = headroom_alloc(&["replay", "--find-limit", "--growth", "preallocate"]);
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(text.contains("smallest limit without an OOM:"), "{text}");
    assert!(text.contains("one granule below"), "{text}");
}

#[test]
fn a_reader_that_closes_its_end_is_no_error() {
    // As `headroom-alloc generate transformer | head` does once it has its lines.
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom-alloc"))
        .args(["generate", "lognormal"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn a_trace_replays_under_its_recorded_settings_unless_a_flag_changes_one() {
    let trace = concat!(
        "{\"op\":\"allocator\",\"limit\":2097152,\"growth\":\"preallocate\",",
        "\"max_internal_fragmentation\":256,\"garbage_collection\":true}\n",
        "{\"op\":\"alloc\",\"id\":1,\"size\":1048576,\"tag\":\"weights\"}\n",
        "{\"op\":\"oom\",\"size\":4194304,\"tag\":\"activations\"}\n",
        "{\"op\":\"free\",\"id\":1}\n",
    );
    let path = write_temp("recorded.jsonl", trace);
    let out = headroom_alloc(&["replay", path.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("limit 2.00 MiB (the trace's), growth preallocate (the trace's)")
            && text.contains("256 B or more would be left (the trace's)"),
        "{text}"
    );
    assert!(text.contains("1 allocs, 1 frees, 1 OOMs"), "{text}");
    assert!(
        text.contains("records 1 failed request: 1 failed here too, 0 fitted"),
        "{text}"
    );
    let out = headroom_alloc(&[
        "replay",
        path.to_str().unwrap(),
        "--limit",
        "8MiB",
        "--json",
    ]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["settings"]["limit"], 8 << 20);
    assert_eq!(value["settings"]["limit_from"], "flag");
    assert_eq!(value["settings"]["growth_from"], "trace");
    assert_eq!(
        (
            value["ooms"].as_u64(),
            value["recorded_ooms_fitted"].as_u64()
        ),
        (Some(0), Some(1))
    );

    let help = headroom_alloc(&["replay", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("default: the trace's") && !help.contains("embeds"),
        "{help}"
    );

    let empty = write_temp("empty.jsonl", "");
    let out = headroom_alloc(&["replay", empty.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("holds no allocation"), "{stderr}");
    std::fs::remove_file(path).ok();
    std::fs::remove_file(empty).ok();
}

#[test]
fn a_pytorch_snapshot_replays_beside_what_pytorch_held() {
    let snapshot = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/torch-cpu-step.pickle"
    );
    let out = headroom_alloc(&["replay", snapshot]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("device 0: 4416 events, 1530 blocks allocated")
            && text.contains("peak requested")
            && text.contains("on-demand")
            && text.contains("expandable"),
        "{text}"
    );
    let out = headroom_alloc(&["replay", snapshot, "--json", "--find-limit"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let device = &value["devices"][0];
    assert_eq!(device["peak_requested"], 3_275_132);
    assert!(
        device["replays"][1]["smallest_limit"]["limit"]
            .as_u64()
            .unwrap()
            > 0
    );
    // A file that is a pickle but not a snapshot names itself and what is wrong.
    let path =
        std::env::temp_dir().join(format!("headroom-alloc-{}-list.pickle", std::process::id()));
    std::fs::write(&path, b"\x80\x02]q\x00.").unwrap();
    let out = headroom_alloc(&["replay", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not a PyTorch memory snapshot"),
        "{err}"
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_trace_replays_into_a_snapshot_for_pytorchs_viewer() {
    let viz =
        std::env::temp_dir().join(format!("headroom-alloc-{}-viz.pickle", std::process::id()));
    let viz_arg = viz.to_str().unwrap();
    let out = headroom_alloc(&["replay", "--limit", "64MiB", "--memory-viz", viz_arg]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("820 events") && err.contains("pytorch.org/memory_viz"),
        "{err}"
    );
    // The snapshot replays as PyTorch's do.
    let out = headroom_alloc(&["replay", viz_arg, "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["devices"][0]["held_before"], 0);
    // A PyTorch snapshot's replay is written the same way; --find-limit replays no history.
    let again = viz.with_extension("again.pickle");
    let out = headroom_alloc(&["replay", viz_arg, "--memory-viz", again.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("on-demand replay"),
        "{err}"
    );
    std::fs::remove_file(&again).ok();
    let out = headroom_alloc(&["replay", "--find-limit", "--memory-viz", viz_arg]);
    assert!(!out.status.success());
    std::fs::remove_file(&viz).ok();
}
