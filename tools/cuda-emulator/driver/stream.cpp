// Streams and events. Every call runs its work before it returns, so a stream is always idle
// and an event always complete; what is checked is that handles are live when used.

#include <chrono>
#include <unordered_set>

#include "state.h"

struct EmuStream {
    unsigned flags;
};

struct EmuEvent {
    std::chrono::steady_clock::time_point recorded;
    bool was_recorded = false;
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
    return CUDA_SUCCESS;
}

CU_API CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int) {
    return cuStreamCreate(stream, flags);
}

CU_API CUresult cuStreamDestroy_v2(CUstream stream) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (streams.erase(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
    delete stream;
    return CUDA_SUCCESS;
}

CU_API CUresult cuStreamSynchronize(CUstream stream) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    return emu::is_valid_stream(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CU_API CUresult cuStreamQuery(CUstream stream) { return cuStreamSynchronize(stream); }

CU_API CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::is_valid_stream(stream) || events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
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

CU_API CUresult cuEventRecord(CUevent event, CUstream stream) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::is_valid_stream(stream) || events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
    event->recorded = std::chrono::steady_clock::now();
    event->was_recorded = true;
    return CUDA_SUCCESS;
}

CU_API CUresult cuEventSynchronize(CUevent event) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    return events.count(event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CU_API CUresult cuEventQuery(CUevent event) { return cuEventSynchronize(event); }

// Host time between the records: it says nothing of how long the work takes on a GPU.
CU_API CUresult cuEventElapsedTime_v2(float* milliseconds, CUevent start, CUevent end) {
    if (CUresult r = emu::check_context()) return r;
    if (!milliseconds) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (events.count(start) == 0 || events.count(end) == 0) return CUDA_ERROR_INVALID_HANDLE;
    if (!start->was_recorded || !end->was_recorded) return CUDA_ERROR_NOT_READY;
    *milliseconds = std::chrono::duration<float, std::milli>(end->recorded - start->recorded).count();
    return CUDA_SUCCESS;
}

CU_API CUresult cuEventElapsedTime(float* milliseconds, CUevent start, CUevent end) {
    return cuEventElapsedTime_v2(milliseconds, start, end);
}
