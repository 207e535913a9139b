//! Data parallelism over MPI: `mpirun -n 2 headroom train` splits every batch between two
//! processes and trains as one process does on the whole batch, to float tolerance (the sums
//! run in another order): the same losses step by step and the same final weights. Without
//! `mpirun` on the PATH the test says why and passes, unless `HEADROOM_REQUIRE_MPI` is set
//! (`.ci/run` sets it).

mod common;

use std::path::Path;
use std::process::Command;

use common::TempDir;
use common::ranks::{assert_same_losses, assert_same_weights, losses, succeeded, summary};

/// The training run both sides make: the default GPT on addition, batches of 16 in
/// micro-batches of 4, six steps, no evaluation.
const ARGS: [&str; 9] = [
    "train",
    "--steps",
    "6",
    "--batch-size",
    "16",
    "--micro-batch",
    "4",
    "--eval-every",
    "0",
];

fn headroom() -> Command {
    Command::new(env!("CARGO_BIN_EXE_headroom"))
}

/// `mpirun` with `ranks` processes of the headroom binary.
fn mpirun(ranks: usize) -> Command {
    common::mpirun(ranks, Path::new(env!("CARGO_BIN_EXE_headroom")))
}

/// Runs `command` with `ARGS` and `options` into `dir`; panics with its output if it fails,
/// and returns that output.
fn train(mut command: Command, options: &[&str], dir: &Path) -> String {
    succeeded(
        command
            .args(ARGS)
            .args(options)
            .args(["--quiet", "--run-dir"])
            .arg(dir),
    )
}

/// A configuration file in `dir` that trains with SGD.
fn sgd(dir: &TempDir) -> String {
    let file = dir.0.join("sgd.toml");
    std::fs::write(&file, "[optimizer]\nkind = \"sgd\"\nlr = 0.1\n").unwrap();
    file.to_str().unwrap().to_owned()
}

/// Trains `options` in one process and in two ranks; returns both run directories.
fn both(name: &str, options: &[&str]) -> (TempDir, TempDir) {
    let (one, two) = (
        TempDir::new(&format!("{name}-one")),
        TempDir::new(&format!("{name}-two")),
    );
    train(headroom(), options, &one.0);
    train(mpirun(2), options, &two.0);
    (one, two)
}

/// With SGD each weight moves by its gradient, so the runs' weights agree as closely as their
/// gradients do: to rounding.
#[test]
fn two_ranks_train_as_one_process_does() {
    if common::mpi_missing() {
        return;
    }
    let config = TempDir::new("dp-config");
    let (one, two) = both("dp-sgd", &["--config", &sgd(&config)]);
    assert_same_losses(&one.0, &two.0, 6);
    assert_same_weights(&one.0, &two.0);
}

/// Rank 1 runs under a limit its first micro-batch of 32 does not fit (10 MiB, where SGD's step
/// peaks at 11.4 MiB with 32 samples and 8.8 MiB with 16) (`mpirun`'s MPMD form
/// gives each rank its own arguments): both ranks agree to go on in micro-batches of 16, rank 1
/// redoes its shard, and the run still trains as one process does.
#[test]
fn an_out_of_memory_on_one_rank_is_recovered_by_both() {
    if common::mpi_missing() {
        return;
    }
    let config = TempDir::new("dp-oom-config");
    let file = sgd(&config);
    let (one, two) = (TempDir::new("dp-oom-one"), TempDir::new("dp-oom-two"));
    let run = |dir: &TempDir| -> Vec<String> {
        let args = [
            "train",
            "--steps",
            "3",
            "--batch-size",
            "64",
            "--micro-batch",
            "32",
        ];
        let rest = ["--eval-every", "0", "--config", &file, "--run-dir"];
        let dir = dir.0.to_str().unwrap();
        args.iter()
            .chain(&rest)
            .map(|a| a.to_string())
            .chain([dir.to_owned()])
            .collect()
    };
    succeeded(headroom().args(run(&one)));
    let headroom = env!("CARGO_BIN_EXE_headroom");
    let output = succeeded(
        mpirun(1)
            .args(run(&two))
            .args([":", "-n", "1", headroom])
            .args(run(&two))
            .args(["--memory-limit", "10MiB"]),
    );
    let want = "rank 1 ran out of memory in a micro-batch of 32";
    assert!(output.contains(want), "{want:?} missing:\n{output}");
    assert_same_losses(&one.0, &two.0, 3);
    assert_same_weights(&one.0, &two.0);
}

/// AdamW divides each moment by its square root: where a gradient is zero in exact arithmetic
/// (the attention's key bias, which the softmax does not see), it moves a weight by its
/// rounding noise, up to the learning rate a step. The losses agree as closely as with SGD.
#[test]
fn two_ranks_train_with_adamw_as_one_process_does() {
    if common::mpi_missing() {
        return;
    }
    let (one, two) = both("dp-adamw", &[]);
    assert_same_losses(&one.0, &two.0, 6);
}

/// The process of rank `rank` among those running the headroom binary on `dir`, found by the
/// rank Open MPI gives it in its environment.
fn rank_process(dir: &Path, rank: usize) -> Option<u32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    let dir = dir.to_string_lossy();
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        if !cmdline.contains(env!("CARGO_BIN_EXE_headroom")) || !cmdline.contains(&*dir) {
            return None;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let mine = environ.split(|&b| b == 0).any(|var| var == want.as_bytes());
        mine.then_some(pid)
    })
}

/// Rank 1 killed with SIGKILL once rank 0 has written a few checkpoints: `mpirun` ends rank 0
/// too and names the rank that died, and `--resume` on two ranks ends exactly where two ranks
/// never stopped do. With the parameters sharded each rank writes its file of every
/// checkpoint, so the kill may strike between the ranks' files and the index: the last
/// committed checkpoint resumes, and the files of one never committed are removed.
#[test]
fn a_killed_rank_ends_the_job_and_two_ranks_resume_exactly() {
    if common::mpi_missing() {
        return;
    }
    killed_and_resumed("dp", &[]);
    killed_and_resumed("dp-sharded", &["--shard-params"]);
}

/// [`a_killed_rank_ends_the_job_and_two_ranks_resume_exactly`] with `extra` options, its run
/// directories named after `name`.
fn killed_and_resumed(name: &str, extra: &[&str]) {
    let straight = TempDir::new(&format!("{name}-straight"));
    let killed = TempDir::new(&format!("{name}-killed"));
    let options = |dir: &TempDir| -> Vec<String> {
        let dir = dir.0.to_str().unwrap().to_owned();
        [
            "--steps",
            "60",
            "--batch-size",
            "16",
            "--micro-batch",
            "8",
            "--eval-every",
            "0",
        ]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .chain(["--checkpoint-every".into(), "1".into(), "--quiet".into()])
        .chain(["--run-dir".into(), dir])
        .collect()
    };
    succeeded(mpirun(2).arg("train").args(options(&straight)));

    let mut child = mpirun(2)
        .arg("train")
        .args(options(&killed))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let metrics = killed.0.join(headroom_trainer::run_dir::METRICS_FILE);
    let started = std::time::Instant::now();
    let victim = loop {
        let steps = std::fs::read_to_string(&metrics).map_or(0, |text| text.lines().count());
        if steps >= 5
            && let Some(pid) = rank_process(&killed.0, 1)
        {
            break pid;
        }
        assert!(started.elapsed().as_secs() < 60, "the run never got going");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the kill"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let killed_at = std::time::Instant::now();
    Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the job went on without rank 1:\n{text}"
    );
    assert!(
        killed_at.elapsed().as_secs() < 30,
        "rank 0 was not ended at once"
    );
    assert!(
        text.contains("rank 1") && text.contains("signal 9"),
        "{text}"
    );

    succeeded(mpirun(2).args(["train", "--resume"]).args(options(&killed)));
    common::assert_same_checkpoints(&straight.0, &killed.0);
    let steps: Vec<u64> = headroom_trainer::run_dir::read_all(&killed.0)
        .unwrap()
        .iter()
        .map(|r| r.step)
        .collect();
    assert_eq!(steps, (1..=60).collect::<Vec<_>>(), "each step once");
    let rank_files = std::fs::read_dir(&killed.0).unwrap().filter(|e| {
        let name = e.as_ref().unwrap().file_name();
        name.to_string_lossy().starts_with("checkpoint.step-")
    });
    let want = if extra.is_empty() { 0 } else { 2 };
    assert_eq!(
        rank_files.count(),
        want,
        "the last checkpoint's rank files alone"
    );
}

/// Each rank plans its micro-batch for its shard of the batch, and rank 0's first step peaks
/// at exactly the planner's prediction; `headroom plan --world-size 2` plans the same rank.
#[test]
fn each_rank_plans_its_shard_and_peaks_as_predicted() {
    if common::mpi_missing() {
        return;
    }
    let dir = TempDir::new("dp-plan");
    let args = [
        "train",
        "--steps",
        "2",
        "--batch-size",
        "64",
        "--eval-every",
        "0",
        "--quiet",
    ];
    succeeded(mpirun(2).args(args).arg("--run-dir").arg(&dir.0));
    let whole = summary(&dir.0);
    let plan = whole.plan.expect("the run was planned");
    assert_eq!(plan.micro, 32, "planned for a shard of 32 samples");
    assert_eq!(whole.first_step_peak, Some(plan.predicted_peak));

    let planned = succeeded(headroom().args(["plan", "--world-size", "2", "--batch-size", "64"]));
    assert!(
        planned.contains("each of 2 ranks plans for its shard: 32 samples of each batch of 64")
    );
    let alone = succeeded(headroom().args(["plan", "--batch-size", "32"]));
    let chosen = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("chosen: micro"))
            .map(str::to_owned)
    };
    assert_eq!(chosen(&planned), chosen(&alone), "{planned}\n{alone}");

    // With the optimizer's state sharded, each rank plans for its share of it too.
    let sharded = TempDir::new("dp-plan-sharded");
    succeeded(
        mpirun(2)
            .args(args)
            .arg("--shard-state")
            .arg("--run-dir")
            .arg(&sharded.0),
    );
    let sharded = summary(&sharded.0);
    let plan = sharded.plan.expect("the run was planned");
    assert_eq!(sharded.first_step_peak, Some(plan.predicted_peak));
    let planned = succeeded(headroom().args([
        "plan",
        "--world-size",
        "2",
        "--batch-size",
        "64",
        "--shard-state",
    ]));
    assert!(
        planned.contains("this is the plan of rank 0, which keeps the largest share"),
        "{planned}"
    );
}

/// With the optimizer's state sharded (ZeRO stage 1), each of two ranks keeps and updates half
/// of AdamW's moments, as its allocator measures them, and the run is the run whose every rank
/// keeps all of them, bit for bit: the same weights and, gathered into the checkpoint, the
/// same state.
#[test]
fn two_ranks_sharding_the_optimizer_state_keep_half_of_it_each_and_train_alike() {
    if common::mpi_missing() {
        return;
    }
    let (whole, sharded) = (TempDir::new("dp-whole"), TempDir::new("dp-sharded"));
    train(mpirun(2), &[], &whole.0);
    train(mpirun(2), &["--shard-state"], &sharded.0);
    common::assert_same_checkpoints(&whole.0, &sharded.0);
    assert_eq!(losses(&whole.0), losses(&sharded.0));

    let (whole, sharded) = (summary(&whole.0).ranks, summary(&sharded.0).ranks);
    assert_eq!(whole.len(), 2, "each rank's peaks are in the summary");
    assert_eq!(sharded.len(), 2);
    let all = whole[0].optimizer_state;
    assert!(
        all > 0 && whole.iter().all(|r| r.optimizer_state == all),
        "{whole:?}"
    );
    assert_eq!(
        sharded[0].optimizer_state + sharded[1].optimizer_state,
        all,
        "every buffer on one rank: {sharded:?}"
    );
    for rank in &sharded {
        let share = rank.optimizer_state as f64 / all as f64;
        assert!(
            (0.45..=0.55).contains(&share),
            "rank {} keeps {share:.3} of the state",
            rank.rank
        );
        assert!(
            rank.peak < whole[rank.rank].peak,
            "{sharded:?} against {whole:?}"
        );
    }
}

/// A checkpoint of a sharded state holds the whole state, gathered: two sharded ranks resume
/// it exactly, one process resumes it and two sharded ranks resume one process's checkpoint,
/// each training on as one process does.
#[test]
fn a_sharded_checkpoint_resumes_on_any_number_of_ranks() {
    if common::mpi_missing() {
        return;
    }
    let config = TempDir::new("dp-reshard-config");
    let constant = config.0.join("constant.toml");
    // A constant learning rate: a run of 3 steps resumed to 6 trains as one run of 6 does.
    std::fs::write(&constant, "[optimizer]\nschedule = \"constant\"\n").unwrap();
    let constant = constant.to_str().unwrap();
    let run = |mut command: Command, steps: &str, extra: &[&str], dir: &TempDir| {
        succeeded(
            command
                .args(["train", "--steps", steps, "--batch-size", "16"])
                .args([
                    "--micro-batch",
                    "4",
                    "--eval-every",
                    "0",
                    "--config",
                    constant,
                ])
                .args(extra)
                .args(["--quiet", "--run-dir"])
                .arg(&dir.0),
        )
    };
    let sharded = ["--shard-state"];
    let straight = TempDir::new("dp-reshard-straight");
    run(mpirun(2), "6", &sharded, &straight);
    let alone = TempDir::new("dp-reshard-alone");
    run(headroom(), "6", &[], &alone);

    // Two sharded ranks, then two sharded ranks again: exact.
    let again = TempDir::new("dp-reshard-again");
    run(mpirun(2), "3", &sharded, &again);
    run(mpirun(2), "6", &["--shard-state", "--resume"], &again);
    common::assert_same_checkpoints(&straight.0, &again.0);

    // Two sharded ranks, then one process; one process, then two sharded ranks.
    let to_one = TempDir::new("dp-reshard-to-one");
    run(mpirun(2), "3", &sharded, &to_one);
    run(headroom(), "6", &["--resume"], &to_one);
    let to_two = TempDir::new("dp-reshard-to-two");
    run(headroom(), "3", &[], &to_two);
    run(mpirun(2), "6", &["--shard-state", "--resume"], &to_two);
    for dir in [&to_one, &to_two] {
        assert_same_losses(&alone.0, &dir.0, 6);
    }
}

/// Two ranks on a CUDA device where NCCL is missing (CI's emulated driver): rank 0 finds no
/// NCCL to make the job's id, and both ranks stop at once with its reason, none left waiting
/// for an id. (With NCCL installed, two ranks need two GPUs: `scripts/gpu-check.sh` is where
/// that runs.)
#[cfg(feature = "nccl")]
#[test]
fn ranks_on_cuda_devices_without_nccl_stop_together_naming_it() {
    if common::mpi_missing() {
        return;
    }
    if !a_cuda_device_without_nccl() {
        return;
    }
    let dir = TempDir::new("dp-nccl");
    let started = std::time::Instant::now();
    let out = mpirun(2)
        .args([
            "train",
            "--device",
            "cuda:0",
            "--steps",
            "1",
            "--eval-every",
            "0",
        ])
        .args(["--quiet", "--run-dir"])
        .arg(&dir.0)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("NCCL"), "{text}");
    assert!(
        started.elapsed().as_secs() < 60,
        "the ranks waited: {:?}",
        started.elapsed()
    );
}

/// Whether a CUDA device is here and NCCL is not, as the tests of a rank 0 without NCCL need
/// (with NCCL installed, two ranks would need two GPUs); says why not where not.
#[cfg(feature = "nccl")]
fn a_cuda_device_without_nccl() -> bool {
    if headroom_collectives::UniqueId::new().is_ok() {
        eprintln!("skipped: NCCL is installed, and two ranks would need two GPUs");
        return false;
    }
    if let Err(err) = headroom_kernels::Device::cuda(0, Default::default()) {
        assert!(
            std::env::var_os("HEADROOM_REQUIRE_CUDA").is_none(),
            "HEADROOM_REQUIRE_CUDA is set, and there is no CUDA device: {err}"
        );
        eprintln!("skipped: no CUDA device: {err}");
        return false;
    }
    true
}

/// Two ranks started with torchrun's variables (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
/// `MASTER_PORT`) instead of by MPI, on CUDA devices without NCCL: rank 0 hands the other its
/// answer over TCP at the master's port, and both stop at once, naming NCCL.
#[cfg(feature = "nccl")]
#[test]
fn ranks_started_with_torchruns_variables_meet_over_tcp_and_stop_together_without_nccl() {
    if !a_cuda_device_without_nccl() {
        return;
    }
    let dirs = [TempDir::new("dp-tcp-0"), TempDir::new("dp-tcp-1")];
    let started = std::time::Instant::now();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            headroom()
                .args(["train", "--device", "cuda:0", "--steps", "1", "--quiet"])
                .arg("--run-dir")
                .arg(&dirs[rank].0)
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", "29533")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let texts: Vec<String> = ranks
        .into_iter()
        .map(|rank| {
            let out = rank.wait_with_output().unwrap();
            assert!(!out.status.success());
            (String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr)).into()
        })
        .collect();
    assert!(texts[0].contains("NCCL"), "{}", texts[0]);
    assert!(
        texts[1].contains("rank 0 could not make the job's id"),
        "{}",
        texts[1]
    );
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
}
