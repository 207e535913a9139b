//! MPI between CPU processes. Run by `cargo test`, this binary launches itself under `mpirun`:
//! two ranks and one check every collective in every dtype against the values each rank knows
//! the others hold, and a rank whose peer never takes part times out, names itself, and ends
//! the job instead of hanging it. Without `mpirun` on the PATH it says why and passes, unless
//! `HEADROOM_REQUIRE_MPI` is set (`.ci/run` sets it).

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::assert_refused;
use headroom_collectives::{Collective, Error, MpiCollective, ReduceOp};
use headroom_kernels::{Array, DType, Device, DeviceConfig};

/// The variable that tells a launched process which case it runs.
const CASE: &str = "HEADROOM_MPI_CASE";

fn main() {
    match std::env::var(CASE) {
        Ok(case) => rank(&case),
        Err(_) => launch(),
    }
}

/// `mpirun` running `ranks` copies of this binary on `case`.
fn mpirun(ranks: usize, case: &str) -> Output {
    Command::new("mpirun")
        .args(["-n", &ranks.to_string(), "--oversubscribe"])
        .arg(std::env::current_exe().unwrap())
        .env(CASE, case)
        // Open MPI refuses root unless told; harmless for other users.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap()
}

fn launch() {
    if Command::new("mpirun").arg("--version").output().is_err() {
        let why = "mpirun is not on the PATH (Open MPI: openmpi-bin and libopenmpi-dev)";
        if std::env::var_os("HEADROOM_REQUIRE_MPI").is_some() {
            panic!("HEADROOM_REQUIRE_MPI is set, and MPI did not run: {why}");
        }
        eprintln!("mpi skipped: {why}");
        return;
    }
    for ranks in [2, 1] {
        let out = mpirun(ranks, "collectives");
        let text = String::from_utf8_lossy(&out.stdout);
        let errors = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{ranks} ranks: {text}\n{errors}");
        for r in 0..ranks {
            let line = format!("rank {r} of {ranks}: every collective agreed");
            assert!(text.contains(&line), "{line:?} missing:\n{text}\n{errors}");
        }
        println!("mpi: every collective agreed on every rank of {ranks}");
    }
    let started = Instant::now();
    let out = mpirun(2, "stuck");
    let text = String::from_utf8_lossy(&out.stderr) + String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a stuck job succeeded:\n{text}");
    let want = "all_reduce on rank 0 of 2 did not complete within";
    assert!(text.contains(want), "{want:?} missing:\n{text}");
    // Rank 1 sleeps for a minute: the job ended when rank 0 gave up, not when rank 1 woke.
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "{:?}",
        started.elapsed()
    );
    println!("mpi: a rank whose peer never took part timed out and ended the job");
}

/// What rank `r` holds at element `i`: small integers, exact in every dtype and in sums of two.
fn held(r: usize, i: usize) -> f32 {
    ((r + 1) * (i % 7) + r) as f32
}

/// `values` as an array of `dtype` on `device`.
fn array(device: &Device, values: &[f32], dtype: DType) -> Array {
    Array::from_host(device, [values.len()], values)
        .unwrap()
        .cast(dtype)
        .unwrap()
}

fn read(array: &Array) -> Vec<f64> {
    array.to_f64().unwrap()
}

fn rank(case: &str) {
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let meta = Device::meta(DeviceConfig::new(1 << 20)).unwrap();
    let err = MpiCollective::init(&meta, Duration::from_secs(1))
        .err()
        .unwrap();
    assert!(err.to_string().contains("is not a CPU device"), "{err}");
    let timeout = Duration::from_secs(if case == "stuck" { 2 } else { 60 });
    let mut world = MpiCollective::init(&device, timeout).unwrap();
    let again = MpiCollective::init(&device, timeout).err().unwrap();
    assert!(
        again
            .to_string()
            .contains("initialized in this process already"),
        "{again}"
    );
    let (r, n) = (world.rank(), world.world_size());
    if case == "stuck" {
        if r == 1 {
            std::thread::sleep(Duration::from_secs(60));
            return;
        }
        let mut grads = array(&device, &[1.0; 8], DType::F32);
        match world.all_reduce(&mut grads, ReduceOp::Sum) {
            Err(err @ Error::Timeout { .. }) => {
                eprintln!("{err}");
                std::process::exit(1);
            }
            other => panic!("rank 0 expected a timeout, got {other:?}"),
        }
    }
    let m = 10;
    let mine: Vec<f32> = (0..n * m).map(|i| held(r, i)).collect();
    let each = |i: usize| (0..n).map(move |q| held(q, i) as f64);
    for dtype in [
        DType::F32,
        DType::F64,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::U32,
        DType::U8,
    ] {
        let integer = matches!(dtype, DType::I32 | DType::U32 | DType::U8);
        let reduced = |i: usize, op: ReduceOp| match op {
            ReduceOp::Sum => each(i).sum(),
            ReduceOp::Avg => each(i).sum::<f64>() / n as f64,
            ReduceOp::Max => each(i).fold(f64::MIN, f64::max),
            ReduceOp::Min => each(i).fold(f64::MAX, f64::min),
        };
        // Neither reduction allocates on the device: an out-of-memory there cannot stop one
        // rank between the ranks' collectives.
        let allocations = || device.allocator().stats().allocations;
        for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
            let mut a = array(&device, &mine, dtype);
            let before = allocations();
            let got = world.all_reduce(&mut a, op);
            if integer && op == ReduceOp::Avg {
                assert!(matches!(got, Err(Error::Argument { .. })), "{got:?}");
                continue;
            }
            got.unwrap();
            assert_eq!(allocations(), before, "all_reduce {op:?} {dtype} allocated");
            let want: Vec<f64> = (0..n * m).map(|i| reduced(i, op)).collect();
            assert_eq!(read(&a), want, "all_reduce {op:?} {dtype} on rank {r}");

            let input = array(&device, &mine, dtype);
            let mut part = Array::zeros(&device, [m], dtype).unwrap();
            let before = allocations();
            world.reduce_scatter(&input, &mut part, op).unwrap();
            assert_eq!(
                allocations(),
                before,
                "reduce_scatter {op:?} {dtype} allocated"
            );
            let want: Vec<f64> = (r * m..(r + 1) * m).map(|i| reduced(i, op)).collect();
            assert_eq!(
                read(&part),
                want,
                "reduce_scatter {op:?} {dtype} on rank {r}"
            );
        }

        let mut gathered = Array::zeros(&device, [n * m], dtype).unwrap();
        world
            .all_gather(&array(&device, &mine[..m], dtype), &mut gathered)
            .unwrap();
        let want: Vec<f64> = (0..n * m).map(|i| held(i / m, i % m) as f64).collect();
        assert_eq!(read(&gathered), want, "all_gather {dtype} on rank {r}");

        let mut shared = array(&device, &mine, dtype);
        world.broadcast(&mut shared, n - 1).unwrap();
        let want: Vec<f64> = (0..n * m).map(|i| held(n - 1, i) as f64).collect();
        assert_eq!(read(&shared), want, "broadcast {dtype} on rank {r}");
    }
    let mut short = Array::zeros(&device, [m + 1], DType::F32).unwrap();
    let err = world
        .all_gather(&array(&device, &mine[..m], DType::F32), &mut short)
        .unwrap_err();
    assert_refused(&err, "all_gather");
    world.barrier().unwrap();
    println!("rank {r} of {n}: every collective agreed");
}
