// Stream queues for the deferred mode (queue.h). Each stream has a FIFO of items and counts how
// many were queued and how many have run; a point is reached once its count has run. An item
// first runs the points it waits for (an event of another stream, or the other side of the
// legacy default stream's implicit synchronization), then its work. A point an item waits for
// was taken before the item was queued, so running it never needs the item itself: the waits
// cannot form a cycle.

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <unordered_map>

#include "queue.h"

namespace {

struct Queue {
    bool blocking;  // synchronizes with the legacy default stream
    std::deque<emu::Work> items;
    uint64_t queued = 0;  // items ever queued
    uint64_t done = 0;    // items that have run, the first `done` of them
};

// The default-stream handles of cuda.h: CU_STREAM_LEGACY and CU_STREAM_PER_THREAD. The
// per-thread default stream is one queue for all threads here, which only orders more.
const CUstream kLegacyStream = reinterpret_cast<CUstream>(0x1);
const CUstream kPerThreadStream = reinterpret_cast<CUstream>(0x2);
constexpr uint64_t kLegacy = 0, kPerThread = 1;

// Under the driver lock. A stream's queue has a number of its own, never reused, so that a
// point outlives its stream.
std::map<uint64_t, Queue> queues = {{kLegacy, Queue{false, {}}}, {kPerThread, Queue{true, {}}}};
std::unordered_map<CUstream, uint64_t> numbers;
uint64_t next_number = 2;

uint64_t number_of(CUstream stream) {
    if (stream == nullptr || stream == kLegacyStream) return kLegacy;
    if (stream == kPerThreadStream) return kPerThread;
    return numbers.at(stream);
}

bool is_pending(const Queue& queue) { return queue.done < queue.queued; }

// The implicit synchronization of the legacy default stream: its work waits for what blocking
// streams queued before, and a blocking stream's work waits for what it queued before.
void add_implicit_waits(uint64_t number, std::vector<emu::QueuePoint>& after) {
    const Queue& queue = queues.at(number);
    if (number == kLegacy) {
        for (const auto& [other, other_queue] : queues)
            if (other != kLegacy && other_queue.blocking && is_pending(other_queue))
                after.push_back({other, other_queue.queued});
    } else if (queue.blocking && is_pending(queues.at(kLegacy))) {
        after.push_back({kLegacy, queues.at(kLegacy).queued});
    }
}

}  // namespace

namespace emu {

bool deferred() {
    static const bool defer = [] {
        const char* value = std::getenv("CUDA_EMULATOR_DEFER");
        return value != nullptr && std::strcmp(value, "1") == 0;
    }();
    return defer;
}

void open_queue(CUstream stream, bool blocking) {
    numbers[stream] = next_number;
    queues.emplace(next_number++, Queue{blocking, {}});
}

void close_queue(CUstream stream) {
    const uint64_t number = number_of(stream);
    run_until({number, queues.at(number).queued});
    queues.erase(number);
    numbers.erase(stream);
}

void enqueue(CUstream stream, Work work, std::vector<QueuePoint> after) {
    if (!deferred()) {
        work();
        return;
    }
    const uint64_t number = number_of(stream);
    add_implicit_waits(number, after);
    Queue& queue = queues.at(number);
    queue.items.push_back([after = std::move(after), work = std::move(work)] {
        for (const QueuePoint& point : after) run_until(point);
        work();
    });
    queue.queued++;
}

QueuePoint queue_end(CUstream stream) {
    const uint64_t number = number_of(stream);
    return {number, queues.at(number).queued};
}

bool is_reached(QueuePoint point) {
    const auto found = queues.find(point.queue);
    return found == queues.end() || found->second.done >= point.position;
}

void run_until(QueuePoint point) {
    const auto found = queues.find(point.queue);
    if (found == queues.end()) return;
    Queue& queue = found->second;
    while (queue.done < point.position) {
        const Work work = std::move(queue.items.front());
        queue.items.pop_front();
        work();
        queue.done++;
    }
}

void run_all_queues() {
    for (auto& [number, queue] : queues) run_until({number, queue.queued});
}

}  // namespace emu
