"""Timing shared by the PyTorch peers, as headroom_benches::timing times the Rust side."""

import statistics
import time


def median_seconds(f, runs: int) -> float:
    """The median seconds of `runs` calls of `f`, after one untimed call (a warm-up)."""
    f()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
