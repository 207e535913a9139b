#!/usr/bin/env python3
"""Reads a snapshot Headroom wrote (`headroom report RUN_DIR --memory-viz OUT.pickle`, or
`headroom-alloc replay TRACE --memory-viz OUT.pickle`) with PyTorch's own tools, as a PyTorch
user would: `torch.cuda._memory_viz`'s `trace` (the events as Python statements), `segsum`
(the segments' accounting, which raises on a block that does not add up) and `trace_plot` and
`segment_plot` (the HTML pages of pytorch.org/memory_viz's timelines), and checks every key
the viewer reads.

Prints the trace's figures: events per action, the bytes allocated at the end and the peak of
allocated bytes, so that they can be set beside Headroom's report.

Run it with PyTorch installed: `python3 scripts/pytorch/check_memory_viz.py OUT.pickle`.
Exits non-zero, saying what is wrong, where PyTorch's tools refuse the file.
"""

import collections
import pickle
import sys

from torch.cuda import _memory_viz

# The keys pytorch.org/memory_viz (MemoryViz.js) and _memory_viz.py read.
EVENT_KEYS = {"action", "addr", "size", "stream", "frames"}
FRAME_KEYS = {"filename", "line", "name"}
SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "stream", "blocks"}
BLOCK_KEYS = {"size", "state"}
ACTIVE_BLOCK_KEYS = {"size", "state", "requested_size", "frames"}


def missing(record, keys, what):
    absent = keys - set(record)
    if absent:
        sys.exit(f"{what} lacks {sorted(absent)}: {record}")


def check(snapshot):
    traces = snapshot["device_traces"]
    actions = collections.Counter()
    peak = allocated = 0
    live = {}
    for device, trace in enumerate(traces):
        for at, event in enumerate(trace):
            what = f"event {at} of device {device}"
            missing(event, EVENT_KEYS, what)
            for frame in event["frames"]:
                missing(frame, FRAME_KEYS, f"a frame of {what}")
            actions[event["action"]] += 1
            if event["action"] == "oom":
                missing(event, {"device_free"}, what)
            elif event["action"] == "alloc":
                live[event["addr"]] = event["size"]
                allocated += event["size"]
                peak = max(peak, allocated)
            elif event["action"] == "free_completed":
                allocated -= live.pop(event["addr"])
    categories = {e["category"] for trace in traces for e in trace if "category" in e}
    if categories and "unknown" not in categories:
        # Older releases of the viewer fail on categories without "unknown".
        sys.exit(f"categories {sorted(categories)} lack 'unknown'")
    for segment in snapshot["segments"]:
        missing(segment, SEGMENT_KEYS, "a segment")
        if segment["device"] >= len(traces):
            sys.exit(f"a segment of device {segment['device']}, which has no trace")
        for block in segment["blocks"]:
            keys = ACTIVE_BLOCK_KEYS if block["state"] == "active_allocated" else BLOCK_KEYS
            missing(block, keys, "a block")
    return actions, peak, allocated


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as file:
        snapshot = pickle.load(file)
    actions, peak, allocated = check(snapshot)
    trace = _memory_viz.trace(snapshot)
    summary = _memory_viz.segsum(snapshot)
    pages = [_memory_viz.trace_plot(snapshot), _memory_viz.segment_plot(snapshot)]
    if not all("MemoryViz.js" in page for page in pages):
        sys.exit("trace_plot or segment_plot made no viewer page")
    events = sum(actions.values())
    print(f"{sys.argv[1]}: {events} events read by torch.cuda._memory_viz")
    for action, count in sorted(actions.items()):
        print(f"  {action:<16} {count}")
    print(f"  peak allocated   {peak} bytes; {allocated} bytes allocated at the end")
    reserved = next(line for line in summary.splitlines() if line.startswith("total_reserved"))
    print(f"  trace: {trace.count(chr(10))} lines; segsum: {reserved}")


if __name__ == "__main__":
    main()
