//! The `headroom` command line: bad configurations and data files give clear errors and a
//! failing exit, never a panic; plan, report and replay do their jobs.

mod common;

use std::process::{Command, Output};

use common::{TempDir, fails, headroom, small_config, succeeds};

/// Asserts the command failed cleanly and its error mentions every one of `words`.
fn fails_with(output: &Output, words: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "expected a failure: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for word in words {
        assert!(stderr.contains(word), "`{word}` not in: {stderr}");
    }
}

#[test]
fn bad_configurations_list_every_problem() {
    let dir = TempDir::new("cli-config");
    let file = dir.0.join("bad.toml");
    std::fs::write(&file, "steps = 10\n[model]\nwidht = 64\n").unwrap();
    let path = file.to_str().unwrap();
    fails_with(
        &headroom(&["train", "--config", path]),
        &["bad.toml", "unknown field `widht`"],
    );
    std::fs::write(
        &file,
        "[batch]\nsize = 0\n[optimizer]\nlr = -1.0\n[model]\nheads = 3\n",
    )
    .unwrap();
    fails_with(
        &headroom(&["train", "--config", path]),
        &["batch.size", "optimizer.lr", "model.heads"],
    );
    fails_with(
        &headroom(&["train", "--memory-limit", "lots"]),
        &["memory.limit", "lots"],
    );
    fails_with(
        &headroom(&["train", "--memory-limit", "1TiB"]),
        &["exceeds the device"],
    );
    fails_with(&headroom(&["plan", "--model", "mlp"]), &["data.kind"]);
    fails_with(
        &headroom(&["train", "--expandable-segments"]),
        &["memory.expandable_segments", "cuda"],
    );
    fails_with(
        &headroom(&["train", "--expandable-segments", "--preallocate"]),
        &["--expandable-segments", "--preallocate"],
    );
}

#[test]
fn missing_and_corrupt_data_files_are_named() {
    let dir = TempDir::new("cli-data");
    let missing = dir.0.join("nowhere.txt");
    let output = headroom(&[
        "train",
        "--data",
        "text",
        "--data-path",
        missing.to_str().unwrap(),
    ]);
    fails_with(&output, &["nowhere.txt"]);
    let (images, labels) = (dir.0.join("images.idx"), dir.0.join("labels.idx"));
    std::fs::write(&images, b"this is not an idx file").unwrap();
    std::fs::write(&labels, [0u8, 0, 8, 1, 0, 0, 0, 1, 3]).unwrap();
    let config = dir.0.join("idx.toml");
    std::fs::write(
        &config,
        format!(
            "[model]\nkind = \"mlp\"\n[data]\nkind = \"idx\"\nimages = {:?}\nlabels = {:?}\n",
            images, labels
        ),
    )
    .unwrap();
    fails_with(
        &headroom(&["train", "--config", config.to_str().unwrap()]),
        &["images.idx", "magic"],
    );
    let csv = dir.0.join("rows.csv");
    std::fs::write(&csv, "1,2,0\n3,4\n").unwrap();
    let output = headroom(&[
        "train",
        "--model",
        "mlp",
        "--data",
        "csv",
        "--data-path",
        csv.to_str().unwrap(),
    ]);
    fails_with(&output, &["rows.csv", "line 2"]);
}

#[test]
fn resuming_without_a_checkpoint_and_a_model_that_cannot_fit_are_explained() {
    let dir = TempDir::new("cli-fit");
    let run = dir.0.to_str().unwrap();
    fails_with(
        &headroom(&["train", "--resume", "--run-dir", run]),
        &["--resume", "no checkpoint"],
    );
    // (Under 2 MiB the default model trains with its weights streamed from the host tier.)
    let output = headroom(&["plan", "--memory-limit", "1MiB"]);
    fails_with(
        &output,
        &["weights", "optimizer state", "suggestion", "--memory-limit"],
    );
    // Room for the model but not for one sample's activations: the cures for activations,
    // recomputation among them until it is on.
    let manual = [
        "plan",
        "--memory-limit",
        "6400KiB",
        "--memory-policy",
        "manual",
    ];
    let output = headroom(&manual);
    fails_with(
        &output,
        &["left for activations", "--precision bf16", "--recompute"],
    );
    let output = headroom(&[&manual[..], &["--recompute"]].concat());
    fails_with(&output, &["left for activations", "--precision bf16"]);
    assert!(!String::from_utf8_lossy(&output.stderr).contains("(--recompute)"));
    // The automatic policy finds room in the host tier, before a narrower optimizer state,
    // and says so.
    let output = headroom(&["plan", "--memory-limit", "6400KiB"]);
    let stdout = succeeds(&output);
    assert!(
        stdout.contains("nothing without the host tier fits")
            && stdout.contains("the host tier: predicted peak"),
        "{stdout}"
    );
    assert!(!String::from_utf8_lossy(&output.stderr).contains("(--recompute)"));
}

/// The figures a suggestion line of a plan that fits nothing gives: the micro-batch, the
/// predicted peak and the step limit, and the host tier's peak where it names one.
fn suggested_figures(line: &str) -> (String, Option<String>) {
    let (_, figures) = line
        .split_once("micro-batches of ")
        .unwrap_or_else(|| panic!("no micro-batch in: {line}"));
    let (micro, rest) = figures.split_once(", predicted peak ").unwrap();
    let (peak, rest) = rest.split_once(" of the ").unwrap();
    let (limit, rest) = rest.split_once(" a step may use").unwrap();
    let chosen = format!(
        "chosen: micro-batches of {micro} (predicted peak {peak} of the {limit} a step may use)"
    );
    let host = rest
        .split_once("the host tier's ")
        .map(|(_, host)| host.split(" (").next().unwrap().to_owned());
    (chosen, host)
}

/// A plan that fits nothing suggests only runs it planned that fit, each with its micro-batch
/// and both tiers' peaks, exactly as `headroom plan` then plans it; none already in force,
/// none naming `headroom plan` itself; and its diagnosis says when the weights it counts are
/// only what stays on the device while the blocks stream.
#[test]
fn a_plan_that_fits_nothing_suggests_planned_runs_that_fit() {
    // Under 1 MiB the default model fits nothing, the lightest candidate streaming its
    // blocks' weights.
    let output = headroom(&["plan", "--memory-limit", "1MiB"]);
    fails_with(&output, &["what stays on the device", "suggestion: "]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("headroom plan"), "{stderr}");
    let suggestions: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("suggestion: "))
        .collect();
    // More memory, bf16 parameters, LoRA and QLoRA: bf16 parameters fit, so nothing says
    // that a full fine-tune does not.
    assert!(suggestions.len() >= 4, "{stderr}");
    assert!(
        suggestions
            .iter()
            .any(|s| s.starts_with("--param-dtype bf16 (")),
        "{stderr}"
    );
    assert!(!stderr.contains("fits nothing"), "{stderr}");
    let lora = suggestions
        .iter()
        .find(|s| s.starts_with("--lora --param-dtype bf16 ("))
        .unwrap_or_else(|| panic!("no LoRA in: {stderr}"));
    assert!(
        lora.contains("the host tier's") && lora.contains("weights, streamed"),
        "{lora}"
    );
    for line in &suggestions {
        let (flags, _) = line.split_once(" (").unwrap();
        let mut args = vec!["plan"];
        args.extend(flags.split(' '));
        if !flags.contains("--memory-limit") {
            args.extend(["--memory-limit", "1MiB"]);
        }
        let planned = headroom(&args);
        let stdout = succeeds(&planned);
        let (chosen, host) = suggested_figures(line);
        assert!(stdout.contains(&chosen), "{line}\n{stdout}");
        match host {
            Some(host) => assert!(
                stdout.contains(&format!("the host tier: predicted peak {host}")),
                "{line}\n{stdout}"
            ),
            None => assert!(!stdout.contains("the host tier:"), "{line}\n{stdout}"),
        }
    }
    // With bf16 parameters, whose products are bf16 already, neither is suggested again.
    let output = headroom(&["plan", "--memory-limit", "600KiB", "--param-dtype", "bf16"]);
    fails_with(&output, &["suggestion: "]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("--precision bf16") && !stderr.contains("suggestion: --param-dtype"),
        "{stderr}"
    );
    assert!(!stderr.contains("headroom plan"), "{stderr}");
}

#[test]
fn plan_report_and_replay_print_their_tables() {
    let dir = TempDir::new("cli-report");
    let output = headroom(&["plan"]);
    let stdout = succeeds(&output);
    assert!(
        stdout.contains("predicted peak") && stdout.contains("chosen: micro-batches of"),
        "{stdout}"
    );
    // The default run needs two micro-batches a step; the memory policy's table says what
    // recomputing would fit, and that it would be slower.
    let micro = |line: &str| -> usize {
        let (_, rest) = line
            .split_once("micro-batches of ")
            .expect("a micro-batch size");
        rest.split(' ').next().unwrap().parse().unwrap()
    };
    let chosen = stdout
        .lines()
        .find(|l| l.starts_with("chosen: micro"))
        .unwrap();
    let row = |recompute: &str| -> usize {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(recompute) && l.contains(" after "))
            .unwrap_or_else(|| panic!("no {recompute} row in {stdout}"));
        line.split_whitespace().nth(4).unwrap().parse().unwrap()
    };
    assert!(row("blocks") > micro(chosen), "{stdout}");
    assert!(stdout.contains("chosen: no recomputation"), "{stdout}");
    let roomy = headroom(&["plan", "--memory-limit", "64MiB"]);
    let roomy = String::from_utf8_lossy(&roomy.stdout);
    assert!(roomy.contains("chosen: micro-batches of 128"), "{roomy}");
    // A GPU that is not here is planned from its memory, less the CUDA context.
    let absent = ["plan", "--device", "cuda", "--device-memory", "2GiB"];
    let gpu = headroom(&absent);
    let gpu = String::from_utf8_lossy(&gpu.stdout);
    if !cfg!(feature = "cuda") {
        assert!(
            gpu.contains("not here") && gpu.contains("CUDA context"),
            "{gpu}"
        );
    }
    assert!(gpu.contains("chosen: micro-batches of"), "{gpu}");
    // Calibrated rates are measured once, kept, and planned with.
    let cache = dir.0.join("cache");
    let calibrated = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["plan", "--calibrate"])
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    let calibrated = String::from_utf8_lossy(&calibrated.stdout);
    assert!(calibrated.starts_with("calibrated cpu"), "{calibrated}");
    assert!(cache.join("headroom/rates-cpu.toml").exists());
    let uncalibrated = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["plan", "--memory-rates", "calibrated"])
        .env("XDG_CACHE_HOME", dir.0.join("empty"))
        .output()
        .unwrap();
    fails_with(&uncalibrated, &["--calibrate"]);
    let manual = headroom(&["plan", "--memory-policy", "manual"]);
    let manual = String::from_utf8_lossy(&manual.stdout);
    assert!(
        manual.contains("with --recompute") && !manual.contains("memory policy"),
        "{manual}"
    );

    let mut config = small_config(&dir);
    config.steps = Some(5);
    config.memory.trace = true;
    let file = dir.0.join("run.toml");
    std::fs::write(&file, config.to_toml()).unwrap();
    let trained = headroom(&["train", "--quiet", "--config", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&trained.stdout);
    assert!(
        trained.status.success(),
        "{}",
        String::from_utf8_lossy(&trained.stderr)
    );
    assert!(
        stdout.contains("== summary") && stdout.contains("held-out exact match"),
        "{stdout}"
    );
    let summary: headroom_trainer::run_dir::Summary =
        serde_json::from_slice(&std::fs::read(dir.0.join("summary.json")).unwrap()).unwrap();
    assert!(
        summary.peak_reserved >= summary.peak && summary.peak_reserved <= summary.limit,
        "{summary:?}"
    );
    // On Linux host memory grows in place, a page at a time.
    let how = if cfg!(target_os = "linux") {
        " reserved, as one region grown in place in steps of "
    } else {
        " reserved, as a region per growth"
    };
    assert!(stdout.contains(how), "{stdout}");
    for file in [
        "metrics.jsonl",
        "summary.json",
        "loss.svg",
        "memory.svg",
        "checkpoint.safetensors",
        "config.toml",
    ] {
        assert!(dir.0.join(file).exists(), "{file}");
    }
    let logdir = format!("tensorboard --logdir {}", dir.0.parent().unwrap().display());
    assert!(stdout.contains(&logdir), "{stdout}");
    std::fs::remove_file(dir.0.join("loss.svg")).unwrap();
    let report = headroom(&["report", dir.0.to_str().unwrap()]);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    assert!(String::from_utf8_lossy(&report.stdout).contains("5 steps recorded"));
    assert!(
        dir.0.join("loss.svg").exists(),
        "the report redraws the plots"
    );
    fails_with(
        &headroom(&["report", dir.0.join("nothing").to_str().unwrap()]),
        &["summary.json"],
    );
    // The run's allocations, written for PyTorch's viewer, read back as a PyTorch snapshot
    // whose peak is the run's.
    let viz = dir.0.join("run.pickle");
    let report = headroom(&[
        "report",
        dir.0.to_str().unwrap(),
        "--memory-viz",
        viz.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.status.success() && text.contains("pytorch.org/memory_viz"),
        "{text}{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let snapshot = headroom_alloc::pytorch::Snapshot::read(&viz).unwrap();
    let stream = headroom_alloc::pytorch::AllocationStream::of(&snapshot.devices[0]);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.0.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(stream.held_before, 0);
    assert!(stream.peak_requested > 0);
    assert_eq!(
        Some(stream.peak_requested),
        summary["peak"].as_u64(),
        "{summary}"
    );

    let replay = headroom(&["replay", "--limit", "512MiB"]);
    assert!(replay.status.success());
    assert!(String::from_utf8_lossy(&replay.stdout).contains("peak"));
}

#[test]
fn impossible_sizes_and_mismatched_files_are_named() {
    fails_with(
        &headroom(&["plan", "--device-memory", "0"]),
        &["memory.capacity", "0 bytes"],
    );
    let dir = TempDir::new("cli-idx");
    let huge = u64::MAX.to_string();
    let run_dir = dir.0.join("run");
    fails_with(
        &headroom(&[
            "train",
            "--epochs",
            &huge,
            "--run-dir",
            run_dir.to_str().unwrap(),
        ]),
        &["epochs", "more steps than a run can count"],
    );
    assert!(!run_dir.exists(), "refused before anything was made");
    let idx = |dims: &[u32], data: &[u8]| {
        let mut bytes = vec![0, 0, 8, dims.len() as u8];
        for d in dims {
            bytes.extend(d.to_be_bytes());
        }
        bytes.extend(data);
        bytes
    };
    let file = |name: &str| dir.0.join(name);
    std::fs::write(file("train-images"), idx(&[2, 2, 2], &[0; 8])).unwrap();
    std::fs::write(file("train-labels"), idx(&[2], &[0, 1])).unwrap();
    std::fs::write(file("test-images"), idx(&[1, 3, 3], &[0; 9])).unwrap();
    std::fs::write(file("test-labels"), idx(&[1], &[1])).unwrap();
    let config = file("idx.toml");
    std::fs::write(
        &config,
        format!(
            "[model]\nkind = \"mlp\"\n[data]\nkind = \"idx\"\nimages = {:?}\nlabels = {:?}\n\
             test_images = {:?}\ntest_labels = {:?}\n",
            file("train-images"),
            file("train-labels"),
            file("test-images"),
            file("test-labels")
        ),
    )
    .unwrap();
    let output = headroom(&["plan", "--config", config.to_str().unwrap()]);
    fails_with(&output, &["test-images:", "9 features", "4"]);
}

#[test]
fn logs_are_plain_when_piped_a_closed_pipe_is_no_error_and_the_log_variable_is_documented() {
    let output = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["plan", "--memory-limit", "16MiB"])
        .env("HEADROOM_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a pipe: {stderr:?}"
    );
    // A reader that closes its end at once, as `head` does after its lines.
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["replay", "--limit", "512MiB"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        !stderr.contains("Broken pipe") && !stderr.contains("panicked"),
        "{stderr}"
    );
    let help = headroom(&["--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("HEADROOM_LOG"));
}

/// Trains `config` through the command line, its file in `dir`; the run's summary.
fn trained(
    config: &headroom_trainer::config::TrainConfig,
    dir: &TempDir,
) -> headroom_trainer::run_dir::Summary {
    let file = dir.0.join("run.toml");
    std::fs::write(&file, config.to_toml()).unwrap();
    succeeds(&headroom(&[
        "train",
        "--quiet",
        "--config",
        file.to_str().unwrap(),
    ]));
    serde_json::from_slice(&std::fs::read(dir.0.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn replay_takes_a_run_directory_and_replays_its_latest_trace() {
    let dir = TempDir::new("cli-replay-run");
    let mut config = small_config(&dir);
    config.memory.trace = true;
    let summary = trained(&config, &dir);
    let replayed = headroom(&[
        "replay",
        dir.0.to_str().unwrap(),
        "--limit",
        "64MiB",
        "--max-internal-fragmentation",
        "256",
        "--json",
    ]);
    assert!(
        replayed.status.success(),
        "{}",
        String::from_utf8_lossy(&replayed.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(report["peak_in_use"], summary.peak, "{report}");
    assert_eq!(report["ooms"], 0);
    let empty = TempDir::new("cli-replay-empty");
    fails_with(
        &headroom(&["replay", empty.0.to_str().unwrap()]),
        &["no allocation trace"],
    );
}

#[test]
fn a_run_that_recovered_ooms_replays_under_its_own_settings_to_its_ooms_and_peak() {
    let dir = TempDir::new("cli-replay-oom");
    let (_, mut tight, _) = common::tight_limit(&dir, 2);
    tight.memory.trace = true;
    let summary = trained(&tight, &dir);
    assert!(summary.ooms_recovered > 0, "the run must recover an OOM");
    let run_dir = dir.0.to_str().unwrap();
    let replayed: serde_json::Value =
        serde_json::from_str(&succeeds(&headroom(&["replay", run_dir, "--json"]))).unwrap();
    assert_eq!(replayed["settings"]["limit"], summary.limit, "{replayed}");
    assert_eq!(replayed["settings"]["limit_from"], "trace", "{replayed}");
    assert_eq!(replayed["settings"]["max_internal_fragmentation"], 256);
    assert_eq!(
        replayed["ooms"], summary.ooms_recovered as u64,
        "{replayed}"
    );
    assert_eq!(replayed["recorded_ooms"], summary.ooms_recovered as u64);
    assert_eq!(replayed["peak_in_use"], summary.peak, "{replayed}");
    assert_eq!(
        replayed["peak_reserved"], summary.peak_reserved,
        "{replayed}"
    );
    let human = succeeds(&headroom(&["replay", run_dir]));
    assert!(human.contains("(the trace's)"), "{human}");
    let search: serde_json::Value = serde_json::from_str(&succeeds(&headroom(&[
        "replay",
        run_dir,
        "--find-limit",
        "--json",
    ])))
    .unwrap();
    let found = search["limit"].as_u64().unwrap();
    assert!(
        found <= summary.limit,
        "{found} above the run's {}",
        summary.limit
    );
    // The help speaks of what a user gives, and of the defaults as they now are.
    let help = succeeds(&headroom(&["replay", "--help"]));
    assert!(
        help.contains("a run directory for its latest trace")
            && help.contains("default: the trace's")
            && !help.contains("embeds"),
        "{help}"
    );
}

#[test]
fn a_recovered_oom_is_logged_with_its_verdict_request_and_largest_free_block() {
    let dir = TempDir::new("cli-oom-log");
    let (_, tight, _) = common::tight_limit(&dir, 2);
    let file = dir.0.join("run.toml");
    std::fs::write(&file, tight.to_toml()).unwrap();
    let output = headroom(&["train", "--quiet", "--config", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // Lack of bytes or of a long enough free range, as the step's frees have it.
    let verdict = ["capacity", "fragmentation"]
        .iter()
        .any(|v| stderr.contains(&format!("step 1: {v} out of memory (")));
    assert!(
        verdict
            && stderr.contains("requested for")
            && stderr.contains("largest free block")
            && stderr.contains("in a micro-batch of 32; retrying in micro-batches of 16"),
        "{stderr}"
    );
}

/// The predicted seconds of the chosen step in `plan`'s table of candidates.
fn chosen_seconds(plan: &str) -> f64 {
    let row = plan
        .lines()
        .find(|l| l.ends_with("<- chosen"))
        .unwrap_or_else(|| panic!("no chosen row in {plan}"));
    let words: Vec<&str> = row.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "<-").unwrap();
    words[at - 2].parse().unwrap()
}

/// Rates as `headroom plan --calibrate` caches them.
fn cached_rates(rates: headroom_kernels::Rates) -> String {
    format!(
        "matrix_flops = {:?}\nhalf_matrix_flops = {:?}\npacking = {:?}\nvector_flops = {:?}\n\
         bytes = {:?}\nlaunch = {:?}\ntransfer = {:?}\n",
        rates.matrix_flops,
        rates.half_matrix_flops,
        rates.packing,
        rates.vector_flops,
        rates.bytes,
        rates.launch,
        rates.transfer
    )
}

#[test]
fn a_calibrated_gpu_plan_prices_an_offloaded_optimizer_at_its_hosts_calibrated_rates() {
    use headroom_kernels::PlanTarget;
    let dir = TempDir::new("cli-host-rates");
    let cache = dir.0.join("cache");
    std::fs::create_dir_all(cache.join("headroom")).unwrap();
    let gpu = [
        "--device",
        "cuda",
        "--device-memory",
        "2GiB",
        "--offload-optimizer",
    ];
    let plan = |host: Option<headroom_kernels::Rates>| {
        let mut args = vec!["plan"];
        args.extend(gpu);
        if let Some(host) = host {
            std::fs::write(cache.join("headroom/rates-cpu.toml"), cached_rates(host)).unwrap();
            args.extend(["--memory-rates", "calibrated"]);
        }
        let output = Command::new(env!("CARGO_BIN_EXE_headroom"))
            .args(&args)
            .env("HEADROOM_LOG", "warn")
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .unwrap();
        chosen_seconds(&succeeds(&output))
    };
    // The GPU's calibrated rates are its fixed ones, so that the host alone differs.
    let cuda = cached_rates(PlanTarget::cuda(9).rates());
    std::fs::write(cache.join("headroom/rates-cuda.toml"), cuda).unwrap();
    let fixed = plan(None);
    assert_eq!(plan(Some(PlanTarget::Cpu.rates())), fixed);
    // A host a hundred times slower than the fixed rates: its AdamW outlasts the GPU's step.
    let cpu = PlanTarget::Cpu.rates();
    let slow = headroom_kernels::Rates {
        vector_flops: cpu.vector_flops / 100.0,
        bytes: cpu.bytes / 100.0,
        ..cpu
    };
    let slower = plan(Some(slow));
    assert!(slower > 10.0 * fixed, "{slower} s against {fixed} s");
    // A cache written before the host was measured asks for a calibration.
    std::fs::remove_file(cache.join("headroom/rates-cpu.toml")).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["plan", "--memory-rates", "calibrated"])
        .args(gpu)
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    fails_with(&output, &["rates-cpu.toml", "--calibrate"]);
}

#[test]
fn gpt2_small_plans_on_uniform_tokens_without_a_corpus() {
    let output = headroom(&[
        "plan",
        "--preset",
        "gpt2",
        "--data",
        "uniform-tokens",
        "--batch-size",
        "4",
        "--device-memory",
        "16GiB",
        "--memory-limit",
        "6GiB",
    ]);
    let stdout = succeeds(&output);
    assert!(stdout.contains("chosen: micro-batches of"), "{stdout}");
}

#[test]
fn the_help_names_every_data_kind_and_negative_numbers_reach_their_checks() {
    let help = succeeds(&headroom(&["train", "--help"]));
    for words in [
        "token-shards",
        "directory of token shards",
        "the whole device",
    ] {
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(words), "`{words}` not in {help}");
    }
    let output = headroom(&[
        "generate",
        "--checkpoint",
        "no-such-run",
        "--temperature",
        "-1",
    ]);
    let stderr = common::fails(&output);
    assert!(!stderr.contains("unexpected argument"), "{stderr}");
}

/// A copy of the tiny SmolLM2 in `dir/name`, its `model.safetensors` passed through `change`.
fn changed_smollm2(dir: &TempDir, name: &str, change: impl FnOnce(Vec<u8>) -> Vec<u8>) -> String {
    let from =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/data/tiny-smollm2");
    let to = dir.0.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
    let weights = to.join("model.safetensors");
    std::fs::write(&weights, change(std::fs::read(&weights).unwrap())).unwrap();
    to.to_str().unwrap().to_owned()
}

#[test]
fn plan_and_train_refuse_truncated_or_mismatched_weights_before_planning() {
    let dir = TempDir::new("cli-weights");
    let whole = std::fs::metadata(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../nn/tests/data/tiny-smollm2/model.safetensors"),
    )
    .unwrap()
    .len() as usize;
    let truncated = changed_smollm2(&dir, "truncated", |mut bytes| {
        bytes.truncate(bytes.len() / 2);
        bytes
    });
    // A name in the header changed, its length kept: the tensor the model needs is missing.
    let renamed = changed_smollm2(&dir, "renamed", |mut bytes| {
        let name = b"model.norm.weight";
        let at = bytes.windows(name.len()).position(|w| w == name).unwrap();
        bytes[at..at + name.len()].copy_from_slice(b"model.norX.weight");
        bytes
    });
    let grouped = |n: usize| headroom_nn::hf::grouped_digits(n as u64);
    let run_dir = dir.0.join("run");
    for command in ["plan", "train"] {
        let run = |init_from: &str| {
            headroom(&[
                command,
                "--init-from",
                init_from,
                "--data",
                "uniform-tokens",
                "--context",
                "16",
                "--batch-size",
                "2",
                "--steps",
                "1",
                "--run-dir",
                run_dir.to_str().unwrap(),
            ])
        };
        fails_with(
            &run(&truncated),
            &[
                "model.init_from",
                "truncated/model.safetensors",
                &format!(
                    "truncated: {} bytes where its header needs {}",
                    grouped(whole / 2),
                    grouped(whole)
                ),
            ],
        );
        fails_with(
            &run(&renamed),
            &["model.init_from", "`model.norm.weight`", "missing"],
        );
        assert!(
            !run_dir.exists(),
            "{command}: a refused start leaves nothing"
        );
    }
}

/// A sharded rank's plan prices its collectives at the link's rate: the bytes sent are the
/// same over any link, and a faster link takes less of the step.
#[test]
fn a_sharded_plan_prices_its_collectives_at_the_links_rate() {
    let plan = |link: &str| {
        succeeds(&headroom(&[
            "plan",
            "--world-size",
            "2",
            "--batch-size",
            "16",
            "--shard-params",
            "--link-bandwidth",
            link,
        ]))
    };
    // "predicted step S s, of which C s in collectives that send B from each rank"
    let parts = |text: &str| {
        let line = text
            .lines()
            .find(|l| l.starts_with("predicted step "))
            .unwrap_or_else(|| panic!("no communication line:\n{text}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let seconds = |i: usize| words[i].parse::<f64>().unwrap();
        (
            seconds(2),
            seconds(6),
            line.split(" send ").nth(1).unwrap().to_owned(),
        )
    };
    let (slow_step, slow, sent) = parts(&plan("1GB/s"));
    let (fast_step, fast, fast_sent) = parts(&plan("100GB/s"));
    assert_eq!(sent, fast_sent);
    assert!(slow > 50.0 * fast && slow > 0.0, "{slow} against {fast}");
    assert!(
        slow_step - fast_step >= 0.9 * (slow - fast),
        "{slow_step} against {fast_step}"
    );
    let alone = succeeds(&headroom(&["plan", "--batch-size", "16"]));
    assert!(!alone.contains("in collectives"), "{alone}");
    let refused = fails(&headroom(&["plan", "--link-bandwidth", "fast"]));
    assert!(refused.contains("nvlink, pcie4"), "{refused}");
}
