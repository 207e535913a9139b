#!/usr/bin/env python3
"""Checks that TensorBoard reads a Headroom run directory's event files and shows the values of
its metrics.jsonl.

Usage: check_events.py RUN_DIR

Loads RUN_DIR with the tensorboard package's own reader
(`tensorboard.backend.event_processing.event_accumulator.EventAccumulator`, every value kept),
as `tensorboard --logdir` loads a run, and compares each scalar tag, step by step, with what
metrics.jsonl says (as float32, the type event files hold): train/loss, train/lr,
train/grad_norm, train/loss_scale, train/samples_per_second, train/tokens_per_second,
train/epoch, train/ooms_recovered, train/micro_batch, memory/in_use, memory/peak,
memory/host_peak and memory/tags/<tag> (MiB), and eval/<metric> (loss, accuracy or
exact_match): the records' held-out metric and, from summary.json, the one evaluated at the
end. Prints one line per tag and exits 0 when every tag has exactly the expected steps and
values, 1 otherwise. An evaluation shown at a step where neither file has one (the end of an
earlier process of a resumed run) is printed, not checked.

Needs the tensorboard package (`pip install tensorboard`). For a run to check, from the
repository root:
    cargo run -p headroom-trainer -- train --steps 20 --eval-every 10 --run-dir runs/tb
    scripts/tensorboard/check_events.py runs/tb
"""

import json
import math
import struct
import sys
from pathlib import Path

from tensorboard.backend.event_processing import event_accumulator

MIB = 1 << 20


def number(value) -> float:
    """A value of metrics.jsonl: a number, or "NaN", "inf" or "-inf"."""
    return float(value)


def f32(value: float) -> float:
    """`value` rounded to float32, as an event file holds it."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def expected_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Each tag's (step, value) pairs, from metrics.jsonl and summary.json."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
               if line.strip()]
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    # The tag's name is the metric's, a space written as an underscore ("exact match").
    metric_name = summary["metric_name"].replace(" ", "_") if summary else "loss"
    tags: dict[str, list[tuple[int, float]]] = {}

    def add(tag: str, step: int, value: float) -> None:
        tags.setdefault(tag, []).append((step, f32(value)))

    for r in records:
        step = r["step"]
        add("train/loss", step, number(r["loss"]))
        add("train/lr", step, number(r["lr"]))
        add("train/grad_norm", step, number(r["grad_norm"]))
        add("train/loss_scale", step, number(r["loss_scale"]))
        add("train/samples_per_second", step, number(r["samples_per_s"]))
        add("train/tokens_per_second", step, number(r["tokens_per_s"]))
        add("train/epoch", step, r["epoch"])
        add("train/ooms_recovered", step, len(r["ooms"]))
        if r["micro_sizes"]:
            add("train/micro_batch", step, max(r["micro_sizes"]))
        add("memory/in_use", step, r["in_use"] / MIB)
        add("memory/peak", step, r["peak"] / MIB)
        if r.get("host_peak") is not None:
            add("memory/host_peak", step, r["host_peak"] / MIB)
        for t in r["tags"]:
            add(f"memory/tags/{t['tag']}", step, t["peak"] / MIB)
        if r["metric"] is not None:
            add(f"eval/{metric_name}", step, number(r["metric"]))
    if summary and summary["metric"] is not None:
        add(f"eval/{metric_name}", summary["steps"], number(summary["metric"]))
    return tags


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    run_dir = Path(sys.argv[1])
    files = sorted(p.name for p in run_dir.iterdir() if "tfevents" in p.name)
    print(f"{run_dir}: {len(files)} event files: {', '.join(files)}")
    reader = event_accumulator.EventAccumulator(
        str(run_dir), size_guidance={event_accumulator.SCALARS: 0})
    reader.Reload()
    shown = set(reader.Tags()["scalars"])
    expected = expected_scalars(run_dir)
    ok = True
    for tag in sorted(shown | expected.keys()):
        want = expected.get(tag, [])
        got = [(e.step, e.value) for e in reader.Scalars(tag)] if tag in shown else []
        # A process's evaluation at its last step is in neither metrics.jsonl nor, once the run
        # is resumed, summary.json: shown at steps without an expected value, it is not checked.
        unchecked = []
        if tag.startswith("eval/"):
            steps = {s for s, _ in want}
            unchecked = [(s, v) for s, v in got if s not in steps]
            got = [(s, v) for s, v in got if s in steps]
        steps_match = [s for s, _ in got] == [s for s, _ in want]
        values_match = steps_match and all(same(g, w) for (_, g), (_, w) in zip(got, want))
        status = "ok" if values_match else "FAIL"
        ok &= values_match
        print(f"{status}: {tag}: {len(got)} values shown, {len(want)} expected", end="")
        if got:
            print(f" (step {got[-1][0]}: {got[-1][1]:.6g})", end="")
        if unchecked:
            print(f"; also shown, from earlier processes' last steps: {unchecked}", end="")
        print()
        if not values_match:
            print(f"  shown    {got[:8]}{' ...' if len(got) > 8 else ''}")
            print(f"  expected {want[:8]}{' ...' if len(want) > 8 else ''}")
    print("every tag matches metrics.jsonl" if ok else "FAIL: some tags differ from metrics.jsonl")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
