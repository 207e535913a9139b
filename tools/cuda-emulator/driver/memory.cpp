// Device memory: host memory, 256-byte aligned as cuMemAlloc's, within a fixed emulated total.
// A device pointer is the host address, so kernels and cuBLAS read it directly. Every copy is
// checked to lie inside one live allocation, or in mapped virtual memory (virtual_memory.cpp),
// as the driver checks (beyond what it checks, the emulator also reports a device-to-device
// copy whose ranges overlap).
//
// Async copies and fills are stream work (queue.h): checked when called, run in their stream's
// order. An async copy from pageable host memory stages the host bytes when called (as the
// driver does); one from page-locked memory (cuMemHostAlloc) reads them when it runs, as the
// GPU's copy engine does, so the host must not write them before then; one to the host writes
// them when it runs, so the host must synchronize before reading. Page-locked memory is
// 256-byte aligned host memory that does not count against the device's. Synchronous copies and fills, and cuMemFree, first run every stream's queued
// work: cuMemFree does not wait on a GPU, but here memory freed under queued work would be
// freed under the emulator's own hands, so it never is. cuMemFreeAsync frees in stream order.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "queue.h"
#include "state.h"

namespace {

constexpr size_t kAlignment = 256;

std::map<CUdeviceptr, size_t> allocations;  // base -> bytes, under the driver lock
size_t in_use = 0;  // bytes of allocations and physical handles, under the driver lock
std::map<const void*, size_t> page_locked;  // cuMemHostAlloc's base -> bytes, under the lock

// True when [address, address + bytes) lies inside one page-locked allocation.
bool is_page_locked(const void* address, size_t bytes) {
    auto next = page_locked.upper_bound(address);
    if (next == page_locked.begin()) return false;
    const auto& [base, size] = *std::prev(next);
    const auto offset = static_cast<const unsigned char*>(address) - static_cast<const unsigned char*>(base);
    return offset >= 0 && static_cast<size_t>(offset) <= size && bytes <= size - offset;
}

// True when [address, address + bytes) lies inside one live allocation or mapped range.
bool is_device_range(CUdeviceptr address, size_t bytes) {
    auto next = allocations.upper_bound(address);
    if (next != allocations.begin()) {
        const auto& [base, size] = *std::prev(next);
        if (address - base <= size && bytes <= size - (address - base)) return true;
    }
    return emu::is_mapped_range(address, bytes);
}

CUresult allocate(CUdeviceptr* pointer, size_t bytes) {
    if (CUresult r = emu::check_context()) return r;
    if (!pointer || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::take_memory(rounded)) return CUDA_ERROR_OUT_OF_MEMORY;
    void* memory = std::aligned_alloc(kAlignment, rounded);
    if (!memory) {
        emu::give_memory(rounded);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    std::memset(memory, emu::kPoison, rounded);
    *pointer = reinterpret_cast<CUdeviceptr>(memory);
    allocations.emplace(*pointer, bytes);
    return CUDA_SUCCESS;
}

// Gives an allocation back. Call under the driver lock.
bool free_allocation(CUdeviceptr pointer) {
    const auto found = allocations.find(pointer);
    if (found == allocations.end()) return false;
    emu::give_memory((found->second + kAlignment - 1) / kAlignment * kAlignment);
    allocations.erase(found);
    std::free(reinterpret_cast<void*>(pointer));
    return true;
}

CUresult release(CUdeviceptr pointer) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (allocations.count(pointer) == 0) return CUDA_ERROR_INVALID_VALUE;
    emu::run_all_queues();
    free_allocation(pointer);
    return CUDA_SUCCESS;
}

// A free queued on a stream; a pointer freed twice that way is refused when the second runs.
CUresult release_on(CUdeviceptr pointer, CUstream stream) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::is_valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    if (allocations.count(pointer) == 0) return CUDA_ERROR_INVALID_VALUE;
    emu::enqueue(stream, [pointer] {
        if (!free_allocation(pointer))
            emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemFreeAsync(%#llx): freed already", pointer);
    });
    return CUDA_SUCCESS;
}

CUresult check_copy(CUstream stream) {
    if (CUresult r = emu::check_context()) return r;
    return emu::is_valid_stream(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

void* host(CUdeviceptr pointer) { return reinterpret_cast<void*>(pointer); }

// Runs a copy or fill: queued on `stream` when `async`, else now, once every queue has run.
void submit(bool async, CUstream stream, emu::Work work) {
    if (async) return emu::enqueue(stream, std::move(work));
    emu::run_all_queues();
    work();
}

CUresult copy_to_device(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream, bool async) {
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (CUresult r = check_copy(stream)) return r;
    if (!src || !is_device_range(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
    if (!async || !emu::deferred() || is_page_locked(src, bytes)) {
        submit(async, stream, [dst, src, bytes] { std::memcpy(host(dst), src, bytes); });
        return CUDA_SUCCESS;
    }
    const auto* first = static_cast<const unsigned char*>(src);
    const auto staged = std::make_shared<std::vector<unsigned char>>(first, first + bytes);
    emu::enqueue(stream, [dst, staged] { std::memcpy(host(dst), staged->data(), staged->size()); });
    return CUDA_SUCCESS;
}

CUresult copy_to_host(void* dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async) {
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (CUresult r = check_copy(stream)) return r;
    if (!dst || !is_device_range(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
    submit(async, stream, [dst, src, bytes] { std::memcpy(dst, host(src), bytes); });
    return CUDA_SUCCESS;
}

CUresult copy_on_device(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async) {
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (CUresult r = check_copy(stream)) return r;
    if (!is_device_range(dst, bytes) || !is_device_range(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
    submit(async, stream, [dst, src, bytes] {
        if (dst != src && dst < src + bytes && src < dst + bytes)
            emu::complain(CUDA_SUCCESS, "cuMemcpyDtoD of %zu bytes between overlapping ranges %#llx "
                          "and %#llx: undefined on a GPU", bytes, src, dst);
        std::memmove(host(dst), host(src), bytes);
    });
    return CUDA_SUCCESS;
}

template <typename T>
CUresult fill(CUdeviceptr dst, T value, size_t count, CUstream stream, bool async) {
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (CUresult r = check_copy(stream)) return r;
    if (dst % sizeof(T) != 0 || !is_device_range(dst, count * sizeof(T))) return CUDA_ERROR_INVALID_VALUE;
    submit(async, stream, [dst, value, count] {
        T* out = static_cast<T*>(host(dst));
        for (size_t i = 0; i < count; ++i) out[i] = value;
    });
    return CUDA_SUCCESS;
}

}  // namespace

namespace emu {

bool take_memory(size_t bytes) {
    if (bytes > limits::kTotalMemory - in_use) return false;
    in_use += bytes;
    return true;
}

void give_memory(size_t bytes) { in_use -= bytes; }

size_t memory_in_use() { return in_use; }

}  // namespace emu

CU_API CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes) { return allocate(pointer, bytes); }
CU_API CUresult cuMemFree_v2(CUdeviceptr pointer) { return release(pointer); }

CU_API CUresult cuMemAllocAsync(CUdeviceptr* pointer, size_t bytes, CUstream) {
    return allocate(pointer, bytes);
}

CU_API CUresult cuMemFreeAsync(CUdeviceptr pointer, CUstream stream) { return release_on(pointer, stream); }

CU_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
    if (CUresult r = emu::check_context()) return r;
    if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    *total = emu::limits::kTotalMemory;
    *free = emu::limits::kTotalMemory - emu::memory_in_use();
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemHostAlloc(void** pointer, size_t bytes, unsigned int) {
    if (CUresult r = emu::check_context()) return r;
    if (!pointer || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* memory = std::aligned_alloc(kAlignment, rounded);
    if (!memory) return CUDA_ERROR_OUT_OF_MEMORY;
    std::memset(memory, emu::kPoison, rounded);
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    page_locked.emplace(memory, bytes);
    *pointer = memory;
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemFreeHost(void* pointer) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (page_locked.count(pointer) == 0) return CUDA_ERROR_INVALID_VALUE;
    // The driver does not wait for queued copies; freeing under them would free under the
    // emulator's own hands, so they run first.
    emu::run_all_queues();
    page_locked.erase(pointer);
    std::free(pointer);
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
    return copy_to_device(dst, src, bytes, stream, true);
}

CU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
    return copy_to_device(dst, src, bytes, nullptr, false);
}

CU_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    return copy_to_host(dst, src, bytes, stream, true);
}

CU_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
    return copy_to_host(dst, src, bytes, nullptr, false);
}

CU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    return copy_on_device(dst, src, bytes, stream, true);
}

CU_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    return copy_on_device(dst, src, bytes, nullptr, false);
}

CU_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
    return fill<unsigned char>(dst, value, count, stream, true);
}

CU_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
    return fill<unsigned char>(dst, value, count, nullptr, false);
}

CU_API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream) {
    return fill<unsigned int>(dst, value, count, stream, true);
}

CU_API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count) {
    return fill<unsigned int>(dst, value, count, nullptr, false);
}

// Not a CUDA call: lets the emulated cuBLAS check that the matrices it is given lie in device
// memory, which the real one would find out as an illegal address, or not at all.
CU_API CUresult cuEmulatorCheckRange(CUdeviceptr address, size_t bytes) {
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    return is_device_range(address, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
