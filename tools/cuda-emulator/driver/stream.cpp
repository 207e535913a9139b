// Streams and events. Their work runs as queue.h says: inside the call that queues it by
// default, or, with CUDA_EMULATOR_DEFER=1, when something synchronizes. An event is a point in
// the queue of the stream it was last recorded on: complete once the work queued before it has
// run. A query never runs work: it reports CUDA_ERROR_NOT_READY while work is pending, and only
// synchronization runs it. Handles are checked to be live when used.

#include <chrono>
#include <unordered_set>

#include "queue.h"
#include "state.h"

struct EmuStream {
    unsigned flags;
};

struct EmuEvent {
    std::chrono::steady_clock::time_point recorded;
    bool was_recorded = false;
    emu::QueuePoint point;  // reached at once when never recorded
};

namespace {

// The default-stream handles of cuda.h: CU_STREAM_LEGACY and CU_STREAM_PER_THREAD.
const CUstream kLegacyStream = reinterpret_cast<CUstream>(0x1);
const CUstream kPerThreadStream = reinterpret_cast<CUstream>(0x2);

std::unordered_set<CUstream> streams;
std::unordered_set<CUevent> events;

}  // namespace

namespace emu {

bool is_valid_stream(CUstream stream) {
    return stream == nullptr || stream == kLegacyStream || stream == kPerThreadStream ||
           streams.count(stream) > 0;
}

}  // namespace emu

CU_API CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
    if (CUresult r = emu::check_context()) return r;
    if (!stream || flags > 1) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    *stream = new EmuStream{flags};
    streams.insert(*stream);
    // Flag 1 is CU_STREAM_NON_BLOCKING: no implicit synchronization with the legacy stream.
    emu::open_queue(*stream, flags == 0);
    return CUDA_SUCCESS;
}

CU_API CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int) {
    return cuStreamCreate(stream, flags);
}

// The driver lets queued work finish after the stream is destroyed; here it runs first.
CU_API CUresult cuStreamDestroy_v2(CUstream stream) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (streams.erase(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
    emu::close_queue(stream);
    delete stream;
    return CUDA_SUCCESS;
}

CU_API CUresult cuStreamSynchronize(CUstream stream) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::is_valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    emu::run_until(emu::queue_end(stream));
    return CUDA_SUCCESS;
}

CU_API CUresult cuStreamQuery(CUstream stream) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::is_valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    return emu::is_reached(emu::queue_end(stream)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// Work queued on `stream` after this waits for the event's point, as it is now.
CU_API CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::is_valid_stream(stream) || events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
    if (!emu::is_reached(event->point)) emu::enqueue(stream, [] {}, {event->point});
    return CUDA_SUCCESS;
}

CU_API CUresult cuEventCreate(CUevent* event, unsigned int) {
    if (CUresult r = emu::check_context()) return r;
    if (!event) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    *event = new EmuEvent;
    events.insert(*event);
    return CUDA_SUCCESS;
}

CU_API CUresult cuEventDestroy_v2(CUevent event) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (events.erase(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
    delete event;
    return CUDA_SUCCESS;
}

// The record is an item of its own, so that on the legacy stream it also waits for what the
// blocking streams queued before (an empty item in immediate mode).
CU_API CUresult cuEventRecord(CUevent event, CUstream stream) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::is_valid_stream(stream) || events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
    emu::enqueue(stream, [] {});
    event->point = emu::queue_end(stream);
    event->recorded = std::chrono::steady_clock::now();
    event->was_recorded = true;
    return CUDA_SUCCESS;
}

CU_API CUresult cuEventSynchronize(CUevent event) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
    emu::run_until(event->point);
    return CUDA_SUCCESS;
}

CU_API CUresult cuEventQuery(CUevent event) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
    return emu::is_reached(event->point) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// Host time between the records: it says nothing of how long the work takes on a GPU. As the
// driver does, it waits for neither event: one not complete yet is CUDA_ERROR_NOT_READY.
CU_API CUresult cuEventElapsedTime_v2(float* milliseconds, CUevent start, CUevent end) {
    if (CUresult r = emu::check_context()) return r;
    if (!milliseconds) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (events.count(start) == 0 || events.count(end) == 0) return CUDA_ERROR_INVALID_HANDLE;
    if (!start->was_recorded || !end->was_recorded) return CUDA_ERROR_NOT_READY;
    if (!emu::is_reached(start->point) || !emu::is_reached(end->point)) return CUDA_ERROR_NOT_READY;
    *milliseconds = std::chrono::duration<float, std::milli>(end->recorded - start->recorded).count();
    return CUDA_SUCCESS;
}

CU_API CUresult cuEventElapsedTime(float* milliseconds, CUevent start, CUevent end) {
    return cuEventElapsedTime_v2(milliseconds, start, end);
}

// Not a CUDA call: lets the emulated cuBLAS run a product as work of the handle's stream.
// `run(item)` is called once: now, without the driver lock, outside the deferred mode, or when
// the stream's queue reaches it.
CU_API CUresult cuEmulatorEnqueue(CUstream stream, void (*run)(void*), void* item) {
    {
        std::lock_guard<std::mutex> guard(emu::driver_lock());
        if (!emu::is_valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
        if (emu::deferred()) {
            emu::enqueue(stream, [run, item] { run(item); });
            return CUDA_SUCCESS;
        }
    }
    run(item);
    return CUDA_SUCCESS;
}
