// The work queued on streams. In the default, immediate mode every item runs inside the call
// that queues it. With CUDA_EMULATOR_DEFER=1 an item waits in its stream's queue, in order,
// until something synchronizes: the stream, an event recorded after it, a stream waiting on
// such an event when it reaches the wait, or a synchronous call that runs every queue first.
// Nothing runs by itself, so a query reports work as pending until someone synchronizes.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cuda_api.h"

namespace emu {

// True when CUDA_EMULATOR_DEFER=1: work waits in its stream until synchronized.
bool deferred();

// A place in one stream's queue: reached once the first `position` items queued on it have run.
struct QueuePoint {
    uint64_t queue = 0;
    uint64_t position = 0;
};

using Work = std::function<void()>;

// Everything below is called under the driver lock, with a stream is_valid_stream accepts.

// Gives a new stream its queue; `blocking` streams (flags 0) wait for the legacy default
// stream and it waits for them, as the driver's implicit synchronization has it.
void open_queue(CUstream stream, bool blocking);

// Runs a stream's queued work, then forgets its queue (a destroyed stream's points count as
// reached).
void close_queue(CUstream stream);

// Runs `work` now (immediate mode), or queues it on `stream` to run once the points in `after`
// are reached and everything queued on the stream before it has run.
void enqueue(CUstream stream, Work work, std::vector<QueuePoint> after = {});

// The point after everything queued on `stream` so far.
QueuePoint queue_end(CUstream stream);

bool is_reached(QueuePoint point);

// Runs queued work, in each stream's order, until `point` is reached.
void run_until(QueuePoint point);

// Runs the queued work of every stream: what a call that must see all results does first.
void run_all_queues();

}  // namespace emu
