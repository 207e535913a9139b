"""Runs a Headroom bench binary and its PyTorch peer in alternation, in one process tree on one
machine, and prints each result side by side with the ratio Headroom / PyTorch.

    python3 benches/peers/compare.py gemm [--rounds 3]
    python3 benches/peers/compare.py elementwise
    python3 benches/peers/compare.py embedding
    python3 benches/peers/compare.py attention
    python3 benches/peers/compare.py fit --rounds 1    (GPT-2 small: minutes)
    python3 benches/peers/compare.py fit --device cuda:0 --binary BIN   (on a GPU, bf16)
    python3 benches/peers/compare.py limits   (what fits under 4 and 8 GiB: GPT-2 small, f32)
    python3 benches/peers/compare.py limits --device cuda:0 --binary BIN   (on a GPU, bf16)
    python3 benches/peers/compare.py train
    python3 benches/peers/compare.py finetune --gguf FILE [f32] [generate]   (SmolLM2-135M)
    python3 benches/peers/compare.py cuda --binary target/release/cuda-compare   (on a GPU)
    python3 benches/peers/compare.py cuda --binary BIN --smoke --peer-device cpu (a dry run)
    python3 benches/peers/compare.py allreduce --binary BIN   (NCCL over every GPU, and torch.distributed)
    python3 benches/peers/compare.py shard [--ranks 2]   (parameters sharded: MPI ranks beside FSDP2 over gloo)

Both sides print one JSON line per result; lines are matched on the bench's key fields, and each
side's figure is the median over the rounds. Alternating the two evens out a shared machine's
slow and fast phases. For `cuda`, `fit` and `shard`, the figures are then checked against their
targets, and the exit status is 1 when one is missed (not with --smoke, whose figures mean
nothing: its targets are printed, not checked).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# name: (bench binary, peer script, key fields, figures compared)
BENCHES = {
    "gemm": ("gemm-compare", "torch_gemm.py", ("op", "dtype", "shape"), ("gflops",)),
    "elementwise": ("elementwise-bandwidth", "torch_elementwise.py", ("op", "dtype"), ("gbps",)),
    "embedding": ("embedding-backward", "torch_embedding.py", ("op", "ids", "dtype"), ("gbps",)),
    "attention": ("attention-compare", "torch_attention.py", ("op", "dtype", "shape"), ("gflops",)),
    "fit": (
        "fit-compare",
        "torch_fit.py",
        ("model", "precision", "micro_batch"),
        ("activation_bytes_per_sample", "peak_bytes", "samples_per_s", "tokens_per_s"),
    ),
    "train": (
        "train-compare",
        "torch_train.py",
        ("model", "precision"),
        ("samples_per_s", "peak_bytes"),
    ),
    "finetune": (
        "finetune-compare",
        "torch_finetune.py",
        ("bench", "precision", "shape"),
        ("samples_per_s", "tokens_per_s", "gflops"),
    ),
    "cuda": ("cuda-compare", "torch_cuda.py", ("op", "dtype", "shape"), ("value",)),
    "allreduce": (
        "allreduce-compare",
        "torch_allreduce.py",
        ("op", "dtype", "bytes", "ranks"),
        ("alg_gbps", "bus_gbps"),
    ),
    "shard": (
        "shard-compare",
        "torch_shard.py",
        ("model", "recompute", "ranks"),
        ("samples_per_s", "peak_bytes"),
    ),
}

# "Beyond one device, part 2": with every parameter sharded over the ranks and the same
# recomputation as FSDP2's, each rank's peak at most 0.8 of FSDP2's, and the step at least as fast.
SHARD_PEAK_MOST = 0.8
SHARD_SPEED_LEAST = 1.0

# The GPU backend's targets: bf16 GEMM at 8192 against torch.matmul, every elementwise, softmax and
# layer-norm case against the device's copy bandwidth, alloc + free against the driver's.
GEMM_TARGET = (("gemm", "bf16", "8192x8192x8192"), 0.80)
OF_COPY_TARGET = 0.70
ALLOC_SPEEDUP_TARGET = 100.0

# "More headroom, part 1": activation bytes per sample at most half of PyTorch's in every
# precision; samples/s at least 0.85 of PyTorch's in f32 on the CPU, tokens/s at least 0.9 of
# PyTorch eager's in bf16 on a GPU.
FIT_ACTIVATION_MOST = 0.5
FIT_SPEED_LEAST = {"cpu": ("f32", "samples_per_s", 0.85), "gpu": ("bf16", "tokens_per_s", 0.9)}

# "More headroom, part 2", what fits under a limit: on the CPU's simulated device in f32, at least 3
# samples a step under 4 GiB without whole-block recomputation and at least 10 under 8 GiB with
# any technique; on the CPU in f32 and on a GPU in bf16, at PyTorch's largest micro-batch at least
# 0.9 of its samples/s (tokens/s alike: the same context).
LIMITS = ("4GiB", "8GiB")
LIMITS_LEAST = {("no-blocks", 4 << 30): 3, ("any", 8 << 30): 10}
LIMITS_SPEED_LEAST = 0.9

Key = tuple[str, ...]
Lines = dict[Key, list[dict]]


def json_lines(command: list[str]) -> list[dict]:
    out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def median_of(lines: list[dict], figure: str) -> float | None:
    """The median of `figure` over the lines that have it, or None when none has."""
    values = [float(line[figure]) for line in lines if figure in line]
    return round(statistics.median(values), 3) if values else None


def side_by_side(sides: dict[str, Lines], keys: tuple[str, ...], figures: tuple[str, ...]) -> list[dict]:
    """One record per key seen on either side: its key fields, and per figure each side's
    median and the ratio Headroom / PyTorch (None where a side has no such result)."""
    order: list[Key] = []
    for lines in sides.values():
        order += [key for key in lines if key not in order]
    records = []
    for key in order:
        record: dict = dict(zip(keys, key))
        for figure in figures:
            ours, theirs = (median_of(sides[side].get(key, []), figure) for side in ("headroom", "pytorch"))
            ratio = round(ours / theirs, 3) if ours is not None and theirs else None
            record |= {f"{figure}_headroom": ours, f"{figure}_pytorch": theirs, f"{figure}_ratio": ratio}
        records.append(record)
    return records


def cuda_targets(ours: Lines, records: list[dict]) -> list[dict]:
    """The GPU backend's targets, each with the figure measured (None when it is missing) and
    whether it was met."""
    gemm_key, gemm_least = GEMM_TARGET
    gemm = next((r["value_ratio"] for r in records if (r["op"], r["dtype"], r["shape"]) == gemm_key), None)
    checks = [(f"{' '.join(gemm_key)} / torch.matmul", gemm, gemm_least)]
    for key, lines in ours.items():
        of_copy = median_of(lines, "of_copy")
        if of_copy is not None:
            checks.append((f"{' '.join(key)} / copy bandwidth", of_copy, OF_COPY_TARGET))
    alloc = next((median_of(lines, "speedup") for key, lines in ours.items() if key[0] == "alloc_free"), None)
    checks.append(("alloc_free 8 sizes / cuMemAlloc+cuMemFree", alloc, ALLOC_SPEEDUP_TARGET))
    return [
        {"target": what, "value": value, "least": least, "met": value is not None and value >= least}
        for what, value, least in checks
    ]


def fit_targets(records: list[dict], device: str) -> list[dict]:
    """The fit bench's targets on `device`, each with the ratio measured (None when missing)
    and whether it was met."""
    precision, speed, least = FIT_SPEED_LEAST["cpu" if device == "cpu" else "gpu"]
    checks = []
    for r in records:
        what = f"{r['model']} {r['precision']} micro-batch {r['micro_batch']}"
        ratio = r.get("activation_bytes_per_sample_ratio")
        checks.append((f"{what}: activation bytes / sample, at most", ratio, FIT_ACTIVATION_MOST, False))
        if r["precision"] == precision:
            checks.append((f"{what}: {speed}, at least", r.get(f"{speed}_ratio"), least, True))
    return [
        {
            "target": what,
            "value": value,
            "bound": bound,
            "met": value is not None and (value >= bound if at_least else value <= bound),
        }
        for what, value, bound, at_least in checks
    ]


def limits_targets(theirs: list[dict], ours: list[dict], device: str = "cpu") -> list[dict]:
    """The targets of what fits, from PyTorch's lines (one per limit and precision) and
    Headroom's (`fit-compare --limit`): each with the figure measured (None when missing),
    the least it may be, and whether it was met. On the CPU f32 has targets (sizes and speed),
    on a GPU bf16 (speed)."""
    gpu = device != "cpu"
    checks = []
    for line in theirs:
        limit, precision = line["limit_bytes"], line["precision"]
        if precision != ("bf16" if gpu else "f32"):
            continue
        mine = [o for o in ours if o["limit_bytes"] == limit and o["precision"] == precision]
        for techniques in ("any", "no-blocks"):
            least = LIMITS_LEAST.get((techniques, limit))
            if least is None or gpu:
                continue
            found = [o["micro_batch"] for o in mine if o["bench"] == "largest-micro-batch" and o["techniques"] == techniques]
            checks.append((f"{precision} {limit >> 30} GiB, {techniques}: largest micro-batch", max(found, default=None), least))
        at_size = [o["samples_per_s"] for o in mine if o["bench"] == "at-size" and o["micro_batch"] == line["micro_batch"]]
        ratio = statistics.median(at_size) / line["samples_per_s"] if at_size and line["samples_per_s"] else None
        checks.append((f"{precision} {limit >> 30} GiB: samples/s at PyTorch's largest", ratio, LIMITS_SPEED_LEAST))
    return [
        {"target": what, "value": value, "least": least, "met": value is not None and value >= least}
        for what, value, least in checks
    ]


def limits(binary: str, rounds: int, device: str) -> int:
    """What fits under each of LIMITS: PyTorch's largest micro-batch first (plain and
    checkpointed), then Headroom's largest with each family of techniques and a step at
    PyTorch's largest, side by side with the targets checked. Exit status 1 when one is
    missed."""
    flags = [f for limit in LIMITS for f in ("--limit", limit)]
    if device != "cpu":
        flags += ["--device", device, "--precision", "bf16"]
    theirs = json_lines([sys.executable, str(ROOT / "benches" / "peers" / "torch_fit.py"), *flags])
    at = [f for line in theirs for f in ("--at", str(max(line["micro_batch"], 1)))]
    ours: list[dict] = []
    for _ in range(rounds):
        ours += json_lines([binary, *flags, *at])
    for line in theirs:
        limit, precision = line["limit_bytes"], line["precision"]
        print(
            f"{precision} under {limit >> 30} GiB: PyTorch fits {line['micro_batch']} "
            f"({line['checkpointed_micro_batch']} with torch.utils.checkpoint), "
            f"{line['samples_per_s']:.3f} samples/s at {line['micro_batch']}"
        )
        for o in ours:
            if o["limit_bytes"] == limit and o["precision"] == precision:
                what = o.get("techniques", "at PyTorch's size")
                print(f"  Headroom {o['bench']} ({what}): {o['micro_batch']}, {o['samples_per_s']:.3f} samples/s, {o['policy']}")
                print(json.dumps(o, separators=(",", ":")))
        print(json.dumps(line, separators=(",", ":")))
    checks = limits_targets(theirs, ours, device)
    print("\ntargets")
    for check in checks:
        verdict = "met" if check["met"] else "MISSED"
        print(f"  {check['target']:<60} {show(check['value'], 9, 3)}  at least {check['least']:<6} {verdict}")
        print(json.dumps(check, separators=(",", ":")))
    return 0 if all(check["met"] for check in checks) else 1


def shard_targets(records: list[dict]) -> list[dict]:
    """Per recomputation: each rank's peak against FSDP2's, and samples/s against its."""
    checks = []
    for record in records:
        what = f"{record['model']} recompute {record['recompute']} on {record['ranks']} ranks"
        peak, speed = record["peak_bytes_ratio"], record["samples_per_s_ratio"]
        checks.append(
            {"target": f"{what}: peak per rank / FSDP2's", "value": peak, "bound": f"at most {SHARD_PEAK_MOST}",
             "met": peak is not None and peak <= SHARD_PEAK_MOST}
        )
        checks.append(
            {"target": f"{what}: samples/s / FSDP2's", "value": speed, "least": SHARD_SPEED_LEAST,
             "met": speed is not None and speed >= SHARD_SPEED_LEAST}
        )
    return checks


def launched(bench: str, ranks: int, commands: dict[str, list[str]]) -> dict[str, list[str]]:
    """`commands` as `shard` runs them: Headroom's under `mpirun -n ranks`, PyTorch's under
    `torchrun --nproc_per_node ranks`; other benches' as they are."""
    if bench != "shard":
        return commands
    mpirun = ["mpirun", "-n", str(ranks), "--oversubscribe"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    torchrun = [commands["pytorch"][0], "-m", "torch.distributed.run", "--nproc_per_node", str(ranks)]
    return {"headroom": mpirun + commands["headroom"], "pytorch": torchrun + commands["pytorch"][1:]}


def show(value: float | None, width: int, decimals: int = 2) -> str:
    return f"{value:>{width}.{decimals}f}" if value is not None else f"{'-':>{width}}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=sorted([*BENCHES, "limits"]))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--binary", help="a bench binary built elsewhere (no cargo here)")
    parser.add_argument("--smoke", action="store_true", help="cuda, allreduce: both sides at small sizes")
    parser.add_argument("--peer-device", help="cuda, allreduce: PyTorch's device (cpu for a dry run)")
    parser.add_argument("--device", help="fit, limits: both sides' device (cpu, the default, or cuda:N)")
    parser.add_argument("--gguf", help="finetune: the real model's GGUF file (random weights without it)")
    parser.add_argument("--ranks", type=int, default=2, help="shard: the ranks each side runs")
    parser.add_argument("names", nargs="*", help="finetune: benches, precisions and shapes both sides run")
    args = parser.parse_intermixed_args()
    if (args.gguf or args.names) and args.bench != "finetune":
        parser.error("--gguf and names apply to the finetune bench only")
    if (args.smoke or args.peer_device) and args.bench not in ("cuda", "allreduce"):
        parser.error("--smoke and --peer-device apply to the cuda and allreduce benches only")
    if args.device and args.bench not in ("fit", "limits"):
        parser.error("--device applies to the fit and limits benches only")
    if args.bench == "limits":
        device = args.device or "cpu"
        if args.binary is None:
            features = ["--features", "cuda"] if device != "cpu" else []
            subprocess.run(
                ["cargo", "build", "--release", "-q", "-p", "headroom-benches", "--bin", "fit-compare", *features],
                cwd=ROOT,
                check=True,
            )
        return limits(args.binary or str(ROOT / "target" / "release" / "fit-compare"), args.rounds, device)
    binary, script, keys, figures = BENCHES[args.bench]
    if args.binary is None:
        gpu = args.bench in ("cuda", "allreduce") or (args.device or "cpu") != "cpu"
        features = ["--features", "nccl" if args.bench == "allreduce" else "cuda"] if gpu else []
        if args.bench == "shard":
            features = ["--features", "mpi"]
        subprocess.run(
            ["cargo", "build", "--release", "-q", "-p", "headroom-benches", "--bin", binary, *features],
            cwd=ROOT,
            check=True,
        )
    smoke = ["--smoke"] if args.smoke else []
    peer_device = ["--device", args.peer_device] if args.peer_device else []
    device = ["--device", args.device] if args.device else []
    picked = (["--gguf", args.gguf] if args.gguf else []) + args.names
    commands = {
        "headroom": [args.binary or str(ROOT / "target" / "release" / binary), *smoke, *device, *picked],
        "pytorch": [sys.executable, str(ROOT / "benches" / "peers" / script), *smoke, *peer_device, *device, *picked],
    }
    commands = launched(args.bench, args.ranks, commands)
    sides: dict[str, Lines] = {side: {} for side in commands}
    for _ in range(args.rounds):
        for side, command in commands.items():
            for line in json_lines(command):
                sides[side].setdefault(tuple(str(line[k]) for k in keys), []).append(line)
    records = side_by_side(sides, keys, figures)
    width = max(len(" ".join(str(r[k]) for k in keys)) for r in records)
    header = "".join(f" {f + ' ours':>22} {'pytorch':>14} {'ratio':>7}" for f in figures)
    print(f"{'':<{width}}{header}   (median of {args.rounds} rounds)")
    for record in records:
        row = f"{' '.join(str(record[k]) for k in keys):<{width}}"
        for f in figures:
            ours, theirs, ratio = (record[f"{f}_{part}"] for part in ("headroom", "pytorch", "ratio"))
            row += f" {show(ours, 22)} {show(theirs, 14)} {show(ratio, 7)}"
        print(row)
        print(json.dumps(record, separators=(",", ":")))
    if args.bench == "fit":
        checks = fit_targets(records, args.device or "cpu")
    elif args.bench == "cuda":
        checks = cuda_targets(sides["headroom"], records)
    elif args.bench == "shard":
        checks = shard_targets(records)
    else:
        return 0
    print("\ntargets" + (" (--smoke: not checked)" if args.smoke else ""))
    for check in checks:
        verdict = "met" if check["met"] else "MISSED"
        bound = f"at least {check['least']}" if "least" in check else check["bound"]
        print(f"  {check['target']:<60} {show(check['value'], 9, 3)}  {bound:<14} {verdict}")
        print(json.dumps(check, separators=(",", ":")))
    return 0 if args.smoke or all(check["met"] for check in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
