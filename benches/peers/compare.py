"""Runs a Headroom bench binary and its PyTorch peer in alternation, in one process tree on one
machine, and prints each result side by side with the ratio Headroom / PyTorch.

    python3 benches/peers/compare.py gemm [--rounds 3]
    python3 benches/peers/compare.py elementwise

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

# name: (bench binary, peer script, key fields, figure, higher is better)
BENCHES = {
    "gemm": ("gemm-compare", "torch_gemm.py", ("op", "dtype", "shape"), "gflops"),
    "elementwise": (
        "elementwise-bandwidth",
        "torch_elementwise.py",
        ("op", "dtype"),
        "gbps",
    ),
}


def json_lines(command: list[str]) -> list[dict]:
    out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=sorted(BENCHES))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    binary, script, keys, figure = BENCHES[args.bench]
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "headroom-benches", "--bin", binary],
        cwd=ROOT,
        check=True,
    )
    sides = {
        "headroom": [str(ROOT / "target" / "release" / binary)],
        "pytorch": [sys.executable, str(ROOT / "benches" / "peers" / script)],
    }
    results: dict[str, dict[tuple, list[float]]] = {side: {} for side in sides}
    order: list[tuple] = []
    for _ in range(args.rounds):
        for side, command in sides.items():
            for line in json_lines(command):
                key = tuple(str(line[k]) for k in keys)
                if key not in order:
                    order.append(key)
                results[side].setdefault(key, []).append(float(line[figure]))
    width = max(len(" ".join(key)) for key in order)
    print(f"{'':<{width}} {'headroom':>10} {'pytorch':>10} {'ratio':>7}   ({figure}, median of {args.rounds})")
    for key in order:
        ours, theirs = (statistics.median(results[s].get(key, [float("nan")])) for s in sides)
        ratio = ours / theirs if theirs else float("nan")
        print(f"{' '.join(key):<{width}} {ours:>10.3f} {theirs:>10.3f} {ratio:>7.2f}")
        record = dict(zip(keys, key)) | {"headroom": ours, "pytorch": theirs, "ratio": round(ratio, 3)}
        print(json.dumps(record, separators=(",", ":")))


if __name__ == "__main__":
    main()
