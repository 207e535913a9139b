"""Runs a Headroom bench binary and its PyTorch peer in alternation, in one process tree on one
machine, and prints each result side by side with the ratio Headroom / PyTorch.

    python3 benches/peers/compare.py gemm [--rounds 3]
    python3 benches/peers/compare.py elementwise
    python3 benches/peers/compare.py train
    python3 benches/peers/compare.py cuda --binary target/release/cuda-compare   (on a GPU)

Both sides print one JSON line per result; lines are matched on the bench's key fields, and each
side's figure is the median over the rounds. Alternating the two evens out a shared machine's
slow and fast phases.
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# name: (bench binary, peer script, key fields, figures compared)
BENCHES = {
    "gemm": ("gemm-compare", "torch_gemm.py", ("op", "dtype", "shape"), ("gflops",)),
    "elementwise": ("elementwise-bandwidth", "torch_elementwise.py", ("op", "dtype"), ("gbps",)),
    "train": (
        "train-compare",
        "torch_train.py",
        ("model", "precision"),
        ("samples_per_s", "peak_bytes"),
    ),
    "cuda": ("cuda-compare", "torch_cuda.py", ("op", "dtype", "shape"), ("value",)),
}


def json_lines(command: list[str]) -> list[dict]:
    out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=sorted(BENCHES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--binary", help="a bench binary built elsewhere (no cargo here)")
    args = parser.parse_args()
    binary, script, keys, figures = BENCHES[args.bench]
    if args.binary is None:
        features = ["--features", "cuda"] if args.bench == "cuda" else []
        subprocess.run(
            ["cargo", "build", "--release", "-q", "-p", "headroom-benches", "--bin", binary, *features],
            cwd=ROOT,
            check=True,
        )
    sides = {
        "headroom": [args.binary or str(ROOT / "target" / "release" / binary)],
        "pytorch": [sys.executable, str(ROOT / "benches" / "peers" / script)],
    }
    results: dict[str, dict[tuple, list[dict]]] = {side: {} for side in sides}
    order: list[tuple] = []
    for _ in range(args.rounds):
        for side, command in sides.items():
            for line in json_lines(command):
                key = tuple(str(line[k]) for k in keys)
                if key not in order:
                    order.append(key)
                results[side].setdefault(key, []).append(line)
    width = max(len(" ".join(key)) for key in order)
    header = "".join(f" {f + ' ours':>22} {'pytorch':>14} {'ratio':>7}" for f in figures)
    print(f"{'':<{width}}{header}   (median of {args.rounds} rounds)")
    for key in order:
        record = dict(zip(keys, key))
        row = f"{' '.join(key):<{width}}"
        for figure in figures:
            ours, theirs = (
                statistics.median(float(l[figure]) for l in results[s].get(key, [{figure: "nan"}]))
                for s in sides
            )
            ratio = ours / theirs if theirs else float("nan")
            row += f" {ours:>22.2f} {theirs:>14.2f} {ratio:>7.3f}"
            record |= {f"{figure}_headroom": ours, f"{figure}_pytorch": theirs, f"{figure}_ratio": round(ratio, 3)}
        print(row)
        print(json.dumps(record, separators=(",", ":")))


if __name__ == "__main__":
    main()
