//! An out-of-memory on one rank of two at each allocation of a data-parallel step, recovered by
//! both: every rank ends the step with the weights of the same micro-batches run without the
//! failure, bit for bit, and with the clean step's weights where the failure struck outside the
//! micro-batches, with the optimizer state or the parameters sharded or neither (a pass of
//! sharded parameters stopped on every rank at once). A checkpoint of a sharded state that one rank has no room to receive
//! stops both ranks at once, naming it, and a rank whose memory is full at the run's end leaves
//! no rank waiting. Run by `cargo test`, this binary launches itself under
//! `mpirun -n 2`;
//! the ranks join MPI once and train a fresh run for each allocation, handing the world from run
//! to run. Without `mpirun` on the PATH it says why and passes, unless `HEADROOM_REQUIRE_MPI` is
//! set (`.ci/run` sets it).

mod common;

use std::time::Duration;

use common::{TempDir, mpi_missing, mpirun, small_config, weights};
use headroom_collectives::{Collective, MpiCollective, ReduceOp};
use headroom_kernels::{Array, Device};
use headroom_trainer::Trainer;
use headroom_trainer::callback::{Callback, Flow};
use headroom_trainer::config::TrainConfig;
use headroom_trainer::data::Metric;
use headroom_trainer::planning::run_device;
use headroom_trainer::step::{Phase, StepReport};

/// The variable that tells a launched process it is a rank.
const RANK: &str = "HEADROOM_RANK_OOM";

fn main() {
    if std::env::var_os(RANK).is_some() {
        rank();
    } else {
        launch();
    }
}

fn launch() {
    if mpi_missing() {
        return;
    }
    let out = mpirun(2, &std::env::current_exe().unwrap())
        .env(RANK, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for rank in 0..2 {
        let want = format!("rank {rank}: recovered an out-of-memory on rank 1 at each of");
        assert_eq!(text.matches(&want).count(), 3, "{want:?} thrice:\n{text}");
        for sharded in ["the optimizer state sharded", "the parameters sharded"] {
            let want = format!("allocations, {sharded}");
            assert!(text.contains(&want), "{want:?} missing:\n{text}");
        }
        let stopped =
            format!("rank {rank}: a checkpoint without room on rank 1 stopped both ranks");
        assert!(text.contains(&stopped), "{stopped:?} missing:\n{text}");
        let ended = format!("rank {rank}: the run ended with no room left on rank 1");
        assert!(text.contains(&ended), "{ended:?} missing:\n{text}");
    }
    println!("rank_oom: an out-of-memory at each allocation of a step on rank 1 was recovered");
}

/// The run of one trial: the tests' small GPT with dropout, a batch of 8 (4 samples a rank) in
/// one micro-batch.
fn config(dir: &TempDir) -> TrainConfig {
    let mut config = small_config(dir);
    config.model.dropout = 0.1; // a failed attempt must not shift the masks of the retry
    config
}

/// A fresh run of `config` on `world`'s ranks: its first step, with an out-of-memory after
/// `inject` more allocations when given, or cut into `sizes` when given. Returns the run (to
/// hand its world on), the step's report and the allocations the step made.
fn step(
    config: &TrainConfig,
    world: Box<dyn Collective + Send>,
    inject: Option<u64>,
    sizes: Option<&[usize]>,
) -> (Trainer, StepReport, u64) {
    let mut run = Trainer::builder()
        .config(config.clone())
        .overwrite()
        .world(world)
        .build()
        .unwrap_or_else(|e| panic!("start: {e}"));
    if let Some(successes) = inject {
        run.device().allocator().with(|a| a.inject_oom(successes));
    }
    let before = run.device().allocator().stats().allocations;
    let report = match sizes {
        Some(sizes) => run.train_step_with(sizes),
        None => run.train_step(),
    };
    let report = report.unwrap_or_else(|e| panic!("{inject:?}: {e}"));
    let allocations = run.device().allocator().stats().allocations - before;
    (run, report, allocations)
}

fn rank() {
    let dir = TempDir::new("rank-oom");
    let mut config = config(&dir);
    let device = run_device::open(&config, &run_device::budget(&config).unwrap()).unwrap();
    let mut world: Box<dyn Collective + Send> =
        Box::new(MpiCollective::init(&device, Duration::from_secs(120)).unwrap());
    let me = world.rank();
    config.optimizer.launched_as = Some((me, world.world_size()));
    for (shard_state, shard_params) in [(false, false), (true, false), (false, true)] {
        config.optimizer.shard_state = shard_state;
        config.optimizer.shard_params = Some(shard_params);
        world = every_allocation(&config, world);
    }
    (config.optimizer.shard_state, config.optimizer.shard_params) = (true, Some(false));
    world = checkpoint_without_room(&config, world);
    config.optimizer.shard_state = false;
    no_room_at_the_end(&config, world);
}

/// Leaves no room on its device once the run's last evaluation is done: the next allocation
/// fails.
struct FullAfterEvaluation(Device);

impl Callback for FullAfterEvaluation {
    fn after_evaluation(&mut self, _step: u64, _metric: Metric, _value: f64) -> Flow {
        self.0.allocator().with(|a| a.inject_oom(0));
        Flow::Continue
    }
}

/// A whole run whose rank 1 has no room left after its last evaluation: the run still ends on
/// both ranks (its checkpoint written, every rank's peaks gathered), none left waiting in a
/// collective for rank 1.
fn no_room_at_the_end(config: &TrainConfig, world: Box<dyn Collective + Send>) {
    let me = world.rank();
    let mut run = Trainer::builder()
        .config(config.clone())
        .overwrite()
        .world(world)
        .build()
        .unwrap_or_else(|e| panic!("start: {e}"));
    if me == 1 {
        run.add_callback(FullAfterEvaluation(run.device().clone()));
    }
    let summary = run.run(false).unwrap_or_else(|e| panic!("rank {me}: {e}"));
    let ranks: Vec<usize> = summary.ranks.iter().map(|peak| peak.rank).collect();
    assert_eq!(ranks, [0, 1], "rank {me}");
    assert!(summary.ranks.iter().all(|peak| peak.peak > 0), "rank {me}");
    println!("rank {me}: the run ended with no room left on rank 1");
}

/// A checkpoint of the sharded state where rank 1 has no room to receive a buffer: both ranks
/// stop at once, each naming the reason, none left waiting in a broadcast.
fn checkpoint_without_room(
    config: &TrainConfig,
    world: Box<dyn Collective + Send>,
) -> Box<dyn Collective + Send> {
    let me = world.rank();
    let (mut run, ..) = step(config, world, None, None);
    if me == 1 {
        run.device().allocator().with(|a| a.inject_oom(0));
    }
    let err = run.save_checkpoint().unwrap_err().to_string();
    let want = match me {
        1 => "no room on this rank (rank 1) to receive",
        _ => "rank 1 of the run failed (no room to receive the optimizer state",
    };
    assert!(err.contains(want), "rank {me}: {err}");
    println!("rank {me}: a checkpoint without room on rank 1 stopped both ranks");
    run.into_world()
}

/// Runs a step of `config` with an out-of-memory on rank 1 at each of its allocations, and
/// checks each against the same micro-batches without it; hands the world back.
fn every_allocation(
    config: &TrainConfig,
    world: Box<dyn Collective + Send>,
) -> Box<dyn Collective + Send> {
    let me = world.rank();
    // How many allocations rank 1's step makes, which both ranks learn.
    let (clean, _, mine) = step(config, world, None, None);
    let clean_weights = weights(&clean);
    let mut world = clean.into_world();
    let device = world.device().clone();
    let mut count =
        Array::from_host(&device, [1], &[if me == 1 { mine as f64 } else { 0.0 }]).unwrap();
    world.all_reduce(&mut count, ReduceOp::Max).unwrap();
    let allocations = count.to_host::<f64>().unwrap()[0] as u64;
    drop(count);
    assert!(allocations > 50, "a step allocates: {allocations}");

    // Rank 1's out-of-memory failures by phase: micro-batches, gradient buckets, the update.
    let mut phases = [0usize; 3];
    for k in 0..allocations {
        let inject = (me == 1).then_some(k);
        let (failed, report, _) = step(config, world, inject, None);
        let got = weights(&failed);
        if me == 1 {
            assert_eq!(report.ooms.len(), 1, "allocation {k}: one out-of-memory");
            let phase = match report.ooms[0].phase {
                Phase::MicroBatch => 0,
                Phase::Gradients => 1,
                Phase::Optimizer => 2,
            };
            phases[phase] += 1;
        }
        // The same micro-batches without a failure, on every rank.
        let (replay, ..) = step(config, failed.into_world(), None, Some(&report.micro_sizes));
        assert!(
            got == weights(&replay),
            "rank {me}, allocation {k}: {:?}",
            report.micro_sizes
        );
        // Outside the micro-batches no rank's micro-batches changed: the weights are the clean
        // step's.
        let in_micro_batches = match me {
            1 => report.ooms[0].phase == Phase::MicroBatch,
            _ => report.peer_ooms > 0,
        };
        if !in_micro_batches {
            assert!(got == clean_weights, "rank {me}, allocation {k}");
        }
        world = replay.into_world();
    }
    // Sharded parameters' gradients are summed inside the passes: there are no buckets.
    let buckets = !config.optimizer.shards_params();
    if me == 1 {
        assert!(
            phases[0] > 0 && phases[2] > 0 && (phases[1] > 0) == buckets,
            "failures hit micro-batches, buckets and the update: {phases:?}"
        );
    }
    let sharded = match (
        config.optimizer.shard_state,
        config.optimizer.shards_params(),
    ) {
        (true, _) => ", the optimizer state sharded",
        (_, true) => ", the parameters sharded",
        _ => "",
    };
    println!(
        "rank {me}: recovered an out-of-memory on rank 1 at each of {allocations} allocations{sharded} \
         (on rank 1: {phases:?} in micro-batches, gradient buckets and the update)"
    );
    world
}
