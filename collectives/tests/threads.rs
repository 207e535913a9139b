//! A world of threads: three ranks, each on its own device, get what MPI's ranks get from
//! every collective; a planned rank checks arguments on a meta device; a shared handle runs
//! the world it wraps, and an agreeing one stops where another rank stopped.

use std::thread;

use headroom_collectives::{Collective, PlannedRank, ReduceOp, SharedWorld, Threads};
use headroom_kernels::{Array, DType, Device, DeviceConfig};

fn cpu() -> Device {
    Device::cpu(DeviceConfig::new(1 << 20)).unwrap()
}

/// What rank `rank` of three gets from each collective, its inputs drawn from its rank.
fn run_rank(mut world: impl Collective) -> Vec<Vec<f32>> {
    let device = world.device().clone();
    let r = world.rank() as f32;
    let mut out = Vec::new();
    let mut sum = Array::from_host(&device, [2], &[r, 10.0 * r]).unwrap();
    world.all_reduce(&mut sum, ReduceOp::Sum).unwrap();
    out.push(sum.to_host::<f32>().unwrap());
    let mut max = Array::from_host(&device, [1], &[-r]).unwrap();
    world.all_reduce(&mut max, ReduceOp::Max).unwrap();
    out.push(max.to_host::<f32>().unwrap());
    let input: Vec<f32> = (0..6).map(|i| i as f32 + r).collect();
    let input = Array::from_host(&device, [6], &input).unwrap();
    let mut mine = Array::zeros(&device, [2], DType::F32).unwrap();
    world
        .reduce_scatter(&input, &mut mine, ReduceOp::Sum)
        .unwrap();
    out.push(mine.to_host::<f32>().unwrap());
    let mut all = Array::zeros(&device, [3, 2], DType::F32).unwrap();
    world.all_gather(&mine, &mut all).unwrap();
    out.push(all.to_host::<f32>().unwrap());
    let mut root = Array::from_host(&device, [1], &[r + 1.0]).unwrap();
    world.broadcast(&mut root, 2).unwrap();
    out.push(root.to_host::<f32>().unwrap());
    world.barrier().unwrap();
    out
}

/// What `f` gives on each of three ranks (threads), each with its shared handle on the world.
fn on_three_ranks<T: Send>(f: impl Fn(SharedWorld) -> T + Sync) -> Vec<T> {
    let devices = [cpu(), cpu(), cpu()];
    let ranks = Threads::world(&devices);
    let f = &f;
    thread::scope(|s| {
        let handles: Vec<_> = (ranks.into_iter())
            .map(|rank| s.spawn(move || f(SharedWorld::new(Box::new(rank)))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn three_threads_get_what_every_collective_promises() {
    let results = on_three_ranks(|shared| {
        // An agreeing handle runs every collective as the plain one does.
        let agreeing = shared.agreeing().unwrap();
        (run_rank(shared), run_rank(agreeing))
    });
    for (rank, (got, agreeing)) in results.iter().enumerate() {
        assert_eq!(got, agreeing, "rank {rank}");
        let r = rank as f32;
        // Sums over ranks 0, 1, 2 of (i + r): 3i + 3.
        let mine = [(6 * rank) as f32 + 3.0, (6 * rank) as f32 + 6.0];
        assert_eq!(got[0], [3.0, 30.0], "rank {rank}");
        assert_eq!(got[1], [0.0], "rank {rank}");
        assert_eq!(got[2], mine, "rank {rank} ({r})");
        assert_eq!(got[3], [3.0, 6.0, 9.0, 12.0, 15.0, 18.0], "rank {rank}");
        assert_eq!(got[4], [3.0], "rank {rank}");
    }
}

#[test]
fn a_planned_rank_checks_chunks_and_runs_only_on_a_meta_device() {
    assert!(PlannedRank::new(&cpu(), 0, 2).is_err());
    let meta = Device::meta(DeviceConfig::new(1 << 20)).unwrap();
    assert!(PlannedRank::new(&meta, 2, 2).is_err());
    let mut rank = PlannedRank::new(&meta, 1, 4).unwrap();
    assert_eq!((rank.rank(), rank.world_size()), (1, 4));
    let chunk = Array::zeros(&meta, [3], DType::F32).unwrap();
    let mut whole = Array::zeros(&meta, [12], DType::F32).unwrap();
    rank.all_gather(&chunk, &mut whole).unwrap();
    let mut wrong = Array::zeros(&meta, [9], DType::F32).unwrap();
    assert!(rank.all_gather(&chunk, &mut wrong).is_err());
    let mut mine = Array::zeros(&meta, [3], DType::F32).unwrap();
    rank.reduce_scatter(&whole, &mut mine, ReduceOp::Sum)
        .unwrap();
}

/// Rank 2 of three stops before the all-gather the others call through their agreeing
/// handles, and says so in an all-reduce through its plain handle: the others' all-gathers
/// fail at once, naming the stop, and give the values rank 2 sent; the next collective runs.
#[test]
fn a_rank_that_stops_stops_the_others_agreeing_collective() {
    let results = on_three_ranks(|mut plain| {
        let mut agreeing = plain.agreeing().unwrap();
        let device = plain.device().clone();
        let stopped = match plain.rank() {
            2 => {
                let stop = [0.0, 3.0, 5.0, 0.0];
                let mut said = Array::from_host(&device, [4], &stop).unwrap();
                plain.all_reduce(&mut said, ReduceOp::Max).unwrap();
                None
            }
            _ => {
                let chunk = Array::zeros(&device, [2], DType::F32).unwrap();
                let mut whole = Array::zeros(&device, [6], DType::F32).unwrap();
                let err = agreeing.all_gather(&chunk, &mut whole).unwrap_err();
                Some((err.to_string(), agreeing.take_stop(), agreeing.take_stop()))
            }
        };
        let mut after = Array::from_host(&device, [1], &[1.0f32]).unwrap();
        agreeing.all_reduce(&mut after, ReduceOp::Sum).unwrap();
        (stopped, after.to_host::<f32>().unwrap())
    });
    for (rank, (stopped, after)) in results.into_iter().enumerate() {
        assert_eq!(after, [3.0], "rank {rank}");
        if rank == 2 {
            continue;
        }
        let (err, stop, again) = stopped.unwrap();
        let want = format!("all_gather on rank {rank} of 3 was not run: another rank stopped");
        assert!(err.contains(&want), "{err}");
        assert_eq!(stop, Some([0.0, 3.0, 5.0, 0.0]), "rank {rank}");
        assert_eq!(again, None, "rank {rank}: a stop is taken once");
    }
}
