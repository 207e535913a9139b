"""Timing shared by the PyTorch peers, as headroom_benches::timing times the Rust side."""

import statistics
import time


def median_seconds(f, runs: int, warmup: int = 1) -> float:
    """The median seconds of `runs` calls of `f`, after `warmup` untimed calls."""
    for _ in range(warmup):
        f()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
