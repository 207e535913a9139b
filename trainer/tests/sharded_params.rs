//! Parameters sharded over MPI ranks (ZeRO stage 3, `--shard-params`): two ranks, each
//! keeping half of every tensor, its gradient and its optimizer state, train as one process
//! does on the whole batch; each rank's first step peaks at exactly its plan; a checkpoint
//! holds the whole model and resumes on one rank or four. Without `mpirun` on the PATH the
//! tests say why and pass, unless `HEADROOM_REQUIRE_MPI` is set (`.ci/run` sets it).

mod common;

use std::path::Path;
use std::process::Command;

use common::TempDir;
use common::ranks::{assert_same_losses, assert_same_weights, losses, succeeded, summary};

fn headroom() -> Command {
    Command::new(env!("CARGO_BIN_EXE_headroom"))
}

fn mpirun(ranks: usize) -> Command {
    common::mpirun(ranks, Path::new(env!("CARGO_BIN_EXE_headroom")))
}

/// A configuration file in `dir` holding `text`.
fn config(dir: &TempDir, name: &str, text: &str) -> String {
    let file = dir.0.join(name);
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_owned()
}

/// Trains `command` for `steps` steps of batches of 16 with `options` into `dir`.
fn train(mut command: Command, steps: usize, options: &[&str], dir: &Path) -> String {
    let steps = steps.to_string();
    let args = [
        "train",
        "--steps",
        &steps,
        "--batch-size",
        "16",
        "--eval-every",
        "0",
    ];
    succeeded(
        command
            .args(args)
            .args(options)
            .args(["--quiet", "--run-dir"])
            .arg(dir),
    )
}

/// GPT-2's family (with its optimizer state and updates in the host tier too), a Llama with
/// LoRA adapters recomputing whole blocks (each block gathered again for its backward pass),
/// a Llama whose vocabulary the ranks share by whole rows, GPT-2 with its gathered weights kept
/// through each step (`--shard grads`, ZeRO stage 2), QLoRA over an NF4 base sharded by
/// blocks of codes, and the tiny SmolLM2's pretrained weights loaded into the chunks:
/// the same losses and weights as one process whose tensors are whole, and each planned
/// sharded run's first step peaking at exactly its plan. SGD moves each weight by its gradient, so the weights agree as closely
/// as the gradients do (AdamW would move a weight whose gradient is rounding noise by up to
/// the learning rate).
#[test]
fn two_ranks_sharding_the_parameters_train_as_one_process_does() {
    if common::mpi_missing() {
        return;
    }
    let dir = TempDir::new("zero3-config");
    let sgd = config(&dir, "sgd.toml", "[optimizer]\nkind = \"sgd\"\nlr = 0.1\n");
    let llama = "[model]\nfamily = \"llama\"\n[model.lora]\nrank = 4\n\
                 [optimizer]\nkind = \"sgd\"\nlr = 0.1\n";
    let llama = config(&dir, "llama.toml", llama);
    let qlora = "[model]\nfamily = \"llama\"\n[model.lora]\nrank = 4\nbase = \"nf4\"\n\
                 [optimizer]\nkind = \"sgd\"\nlr = 0.1\n";
    let qlora = config(&dir, "qlora.toml", qlora);
    // A vocabulary the ranks share by whole rows, larger than the tokens they look up: each
    // rank's head spans its half of the vocabulary, and the embedding's gradient is formed for
    // each rank's rows alone.
    let wide = "[model]\nfamily = \"llama\"\nvocab = 4096\n[data]\nkind = \"uniform-tokens\"\n\
                [optimizer]\nkind = \"sgd\"\nlr = 0.1\n";
    let wide = config(&dir, "wide.toml", wide);
    let smollm2 = common::tiny::tiny_smollm2();
    let pretrained = [
        "--init-from",
        smollm2.to_str().unwrap(),
        "--data",
        "uniform-tokens",
        "--context",
        "32",
    ];
    let runs: [(&str, Vec<&str>); 7] = [
        ("gpt2", vec!["--config", &sgd, "--micro-batch", "4"]),
        // Each rank's chunks of state in its host tier, updated there (ZeRO-Offload).
        (
            "gpt2-offload",
            vec!["--config", &sgd, "--offload-optimizer"],
        ),
        (
            "llama-lora",
            vec!["--config", &llama, "--recompute", "blocks"],
        ),
        ("llama-wide", vec!["--config", &wide]),
        // ZeRO stage 2: whole weights gathered once a step, gradients and state sharded.
        ("gpt2-grads", vec!["--config", &sgd, "--shard", "grads"]),
        // The NF4 base's codes sharded by whole blocks, gathered as each block runs.
        ("llama-qlora", vec!["--config", &qlora]),
        // Pretrained weights loaded into the chunks of a model drawn sharded, its base NF4.
        (
            "smollm2-qlora",
            [&pretrained[..], &["--config", &sgd, "--base", "nf4"]].concat(),
        ),
    ];
    for (name, options) in runs {
        let (one, two) = (
            TempDir::new(&format!("{name}-one")),
            TempDir::new(&format!("{name}-two")),
        );
        train(headroom(), 4, &options, &one.0);
        let sharded: Vec<&str> = options.iter().copied().chain(["--shard-params"]).collect();
        train(mpirun(2), 4, &sharded, &two.0);
        assert_same_losses(&one.0, &two.0, 4);
        assert_same_weights(&one.0, &two.0);
        // A run that sets its micro-batch is not planned.
        if !options.contains(&"--micro-batch") {
            let sharded = summary(&two.0);
            let plan = sharded.plan.as_ref().expect("the run was planned");
            assert_eq!(sharded.first_step_peak, Some(plan.predicted_peak), "{name}");
            assert_eq!(sharded.host_peak, plan.predicted_host_peak, "{name}");
        }
    }
}

/// Each rank keeps half of AdamW's state, peaks below a rank that keeps every tensor whole,
/// and peaks at exactly what its plan predicted; `headroom plan --world-size 2
/// --shard-params` plans the same rank.
#[test]
fn each_rank_keeps_half_and_peaks_as_planned() {
    if common::mpi_missing() {
        return;
    }
    let dir = TempDir::new("zero3-plan-config");
    let llama = config(&dir, "llama.toml", "[model]\nfamily = \"llama\"\n");
    // Pinned whole: the memory policy would shard these ranks too, their updates halved.
    let pinned = "[model]\nfamily = \"llama\"\n[optimizer]\nshard_params = false\n";
    let pinned = config(&dir, "whole.toml", pinned);
    let options = ["--config", &llama, "--recompute", "blocks"];
    let (whole, sharded) = (TempDir::new("zero3-whole"), TempDir::new("zero3-sharded"));
    train(
        mpirun(2),
        2,
        &["--config", &pinned, "--recompute", "blocks"],
        &whole.0,
    );
    let with_shards: Vec<&str> = options.iter().copied().chain(["--shard-params"]).collect();
    train(mpirun(2), 2, &with_shards, &sharded.0);
    let (whole, sharded) = (summary(&whole.0), summary(&sharded.0));
    let plan = sharded.plan.as_ref().expect("the run was planned");
    assert_eq!(sharded.first_step_peak, Some(plan.predicted_peak));
    assert_eq!(sharded.ranks.len(), 2);
    let all = whole.ranks[0].optimizer_state;
    for rank in &sharded.ranks {
        // Half of every tensor's state, its chunk padded to a whole number of elements.
        assert!(rank.optimizer_state >= all / 2, "{rank:?} of {all}");
        assert!(rank.optimizer_state <= all / 2 + 4096, "{rank:?} of {all}");
        assert!(
            rank.peak < whole.ranks[0].peak,
            "{rank:?} against {:?}",
            whole.ranks[0]
        );
    }

    let planned = succeeded(
        headroom()
            .args(["plan", "--world-size", "2", "--batch-size", "16"])
            .args(with_shards),
    );
    let peak = headroom_alloc::format_bytes(plan.predicted_peak);
    let chosen = format!(
        "chosen: micro-batches of {} (predicted peak {peak}",
        plan.micro
    );
    assert!(planned.contains(&chosen), "{chosen:?} missing:\n{planned}");
    assert!(planned.contains("parameters sharded"), "{planned}");
}

/// A sharded run's checkpoint is each rank's file of its chunks and an index: the run saved on
/// two ranks after three steps goes on to six on one rank and on four (each rank reading its
/// chunks from the files that hold them), each as two ranks that never stopped, and exports
/// the whole model as a run of one process does.
#[test]
fn a_sharded_run_resumes_on_one_rank_and_on_four() {
    if common::mpi_missing() {
        return;
    }
    let dir = TempDir::new("zero3-resume-config");
    let sgd = "[optimizer]\nkind = \"sgd\"\nlr = 0.1\nschedule = \"constant\"\n";
    let sgd = config(&dir, "sgd.toml", sgd);
    let options = ["--config", &sgd, "--micro-batch", "4", "--shard-params"];
    let straight = TempDir::new("zero3-straight");
    train(mpirun(2), 6, &options, &straight.0);
    for ranks in [1, 4] {
        let resumed = TempDir::new(&format!("zero3-resumed-{ranks}"));
        train(mpirun(2), 3, &options, &resumed.0);
        let files = |dir: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("checkpoint"))
                .collect();
            names.sort();
            names
        };
        let rank_files = [
            "checkpoint.safetensors",
            "checkpoint.step-3.rank-0-of-2.safetensors",
            "checkpoint.step-3.rank-1-of-2.safetensors",
        ];
        assert_eq!(files(&resumed.0), rank_files);
        let again: Vec<&str> = options.iter().copied().chain(["--resume"]).collect();
        match ranks {
            1 => train(headroom(), 6, &again, &resumed.0),
            _ => train(mpirun(ranks), 6, &again, &resumed.0),
        };
        assert_same_losses(&straight.0, &resumed.0, 6);
        assert_same_weights(&straight.0, &resumed.0);
        let last = format!(
            "checkpoint.step-6.rank-{}-of-{ranks}.safetensors",
            ranks - 1
        );
        assert!(files(&resumed.0).contains(&last), "{:?}", files(&resumed.0));
    }
    let exported = straight.0.join("exported");
    succeeded(
        headroom()
            .args(["export", "--hf"])
            .arg(&straight.0)
            .arg(&exported),
    );
    let config = std::fs::read_to_string(exported.join("config.json")).unwrap();
    assert!(config.contains("\"vocab_size\""), "{config}");
    let weights = common::safetensors_entries(&exported.join("model.safetensors"));
    assert!(!weights.is_empty());
}

/// AdamW's 8-bit state over sharded parameters: each rank quantizes its chunks' moments in
/// blocks of its own and peaks at its plan, and the run trains as one process does to the
/// codes' rounding; a run saved on two ranks resumes on two exactly and is refused on one,
/// which would cut the blocks otherwise.
#[test]
fn int8_state_over_sharded_parameters_resumes_on_as_many_ranks() {
    if common::mpi_missing() {
        return;
    }
    let dir = TempDir::new("zero3-int8-config");
    let int8 = "[model]\nfamily = \"llama\"\n[optimizer]\nstate = \"int8\"\n\
                schedule = \"constant\"\n";
    let int8 = config(&dir, "int8.toml", int8);
    let options = ["--config", &int8, "--shard-params"];
    let (one, straight, resumed) = (
        TempDir::new("zero3-int8-one"),
        TempDir::new("zero3-int8-straight"),
        TempDir::new("zero3-int8-resumed"),
    );
    train(headroom(), 4, &["--config", &int8], &one.0);
    train(mpirun(2), 4, &options, &straight.0);
    let sharded = summary(&straight.0);
    let plan = sharded.plan.as_ref().expect("the run was planned");
    assert_eq!(sharded.first_step_peak, Some(plan.predicted_peak));
    for (a, b) in losses(&one.0).iter().zip(losses(&straight.0)) {
        assert!((a - b).abs() <= 1e-3 * a.abs(), "{a} against {b}");
    }

    train(mpirun(2), 2, &options, &resumed.0);
    let again: Vec<&str> = options.iter().copied().chain(["--resume"]).collect();
    train(mpirun(2), 4, &again, &resumed.0);
    assert_same_losses(&straight.0, &resumed.0, 4);
    assert_same_weights(&straight.0, &resumed.0);

    let output = headroom()
        .args([
            "train",
            "--steps",
            "6",
            "--batch-size",
            "16",
            "--eval-every",
            "0",
        ])
        .args(&again)
        .args(["--quiet", "--run-dir"])
        .arg(&resumed.0)
        .output()
        .unwrap();
    let stderr = common::fails(&output);
    assert!(
        stderr.contains("8-bit optimizer state") && stderr.contains("resume on 2 ranks, not 1"),
        "{stderr}"
    );
}

/// Two ranks that leave sharding to the memory policy, under a limit where no step of a whole
/// model fits: the policy shards the parameters, each rank's first step peaks at its plan, and
/// the run trains as one process does.
#[test]
fn the_memory_policy_shards_the_parameters_where_no_whole_model_fits() {
    if common::mpi_missing() {
        return;
    }
    let dir = TempDir::new("zero3-policy-config");
    let sgd = config(&dir, "sgd.toml", "[optimizer]\nkind = \"sgd\"\nlr = 0.1\n");
    let (one, two) = (
        TempDir::new("zero3-policy-one"),
        TempDir::new("zero3-policy-two"),
    );
    train(headroom(), 4, &["--config", &sgd], &one.0);
    train(
        mpirun(2),
        4,
        &["--config", &sgd, "--memory-limit", "5MiB"],
        &two.0,
    );
    let sharded = summary(&two.0);
    let plan = sharded.plan.as_ref().expect("the run was planned");
    let policy = plan.policy.as_ref().expect("the policy chose");
    assert!(policy.chosen.shard_params, "{}", policy.reason);
    assert!(
        policy
            .candidates
            .iter()
            .all(|c| c.policy.shard_params || c.micro.is_none()),
        "no whole candidate fits"
    );
    assert_eq!(sharded.first_step_peak, Some(plan.predicted_peak));
    assert_same_losses(&one.0, &two.0, 4);
    assert_same_weights(&one.0, &two.0);
}
