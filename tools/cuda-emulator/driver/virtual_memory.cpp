// Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess,
// cuMemUnmap, cuMemRelease, cuMemAddressFree), as the driver API documents it:
//
// - a reservation is a range of host address space with no access (PROT_NONE, nothing behind it);
// - a physical allocation is a handle that claims its bytes of the emulated device's memory
//   and holds no host memory until it is mapped;
// - a mapping puts fresh host pages (filled with the poison byte) at its address, still without
//   access: only cuMemSetAccess makes them readable and writable, as on a GPU;
// - unmapping puts the reservation's inaccessible pages back, and the handle's memory returns
//   to the device once the handle is both unmapped and released.
//
// So a kernel or copy that touches a reserved page nothing maps, or a mapping whose access was
// never set, faults here as it would on a GPU. Beyond what the driver reports, the emulator
// explains each refusal on stderr. A handle is mapped once at a time (the emulator keeps no
// memory behind a handle that would let two mappings share it).
//
// Unmapping, releasing, freeing a reservation and closing access first run every stream's
// queued work (queue.h), which may still use the memory.

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <map>

#include "queue.h"
#include "state.h"

namespace {

using emu::limits::kGranularity;

struct Handle {
    size_t size;
    bool mapped = false;
    bool released = false;
};

struct Mapping {
    size_t size;
    CUmemGenericAllocationHandle handle;
    bool writable = false;  // cuMemSetAccess granted read and write
};

// Everything below is under the driver lock.
std::map<CUdeviceptr, size_t> reservations;  // base -> bytes
std::map<CUmemGenericAllocationHandle, Handle> handles;
std::map<CUdeviceptr, Mapping> mappings;  // address -> mapping
CUmemGenericAllocationHandle next_handle = 1;

bool is_granular(size_t value) { return value % kGranularity == 0; }

void* host(CUdeviceptr address) { return reinterpret_cast<void*>(address); }

// The properties of a pinned allocation on device 0 with no shareable handle, the only kind
// emulated.
bool is_emulated_kind(const CUmemAllocationProp* prop) {
    return prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id == 0 &&
           prop->requestedHandleTypes == 0;
}

// True when [address, address + bytes) lies inside one reservation.
bool is_reserved(CUdeviceptr address, size_t bytes) {
    auto next = reservations.upper_bound(address);
    if (next == reservations.begin()) return false;
    const auto& [base, size] = *std::prev(next);
    return address - base <= size && bytes <= size - (address - base);
}

bool overlaps_a_mapping(CUdeviceptr address, size_t bytes) {
    auto next = mappings.lower_bound(address + bytes);
    if (next == mappings.begin()) return false;
    const auto& [start, mapping] = *std::prev(next);
    return start + mapping.size > address;
}

// The mappings [address, address + bytes) is made of, whole and back to back, or an empty
// range where it is not exactly that.
std::pair<std::map<CUdeviceptr, Mapping>::iterator, std::map<CUdeviceptr, Mapping>::iterator>
whole_mappings(CUdeviceptr address, size_t bytes) {
    const auto first = mappings.find(address);
    auto it = first;
    CUdeviceptr end = address;
    while (it != mappings.end() && it->first == end && end - address < bytes) {
        end += it->second.size;
        ++it;
    }
    if (first == mappings.end() || end - address != bytes) return {mappings.end(), mappings.end()};
    return {first, it};
}

// Puts inaccessible, empty pages over [address, address + bytes) of a reservation.
bool clear(CUdeviceptr address, size_t bytes) {
    return mmap(host(address), bytes, PROT_NONE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != MAP_FAILED;
}

void give_back_if_done(CUmemGenericAllocationHandle id) {
    const auto found = handles.find(id);
    if (found->second.mapped || !found->second.released) return;
    emu::give_memory(found->second.size);
    handles.erase(found);
}

}  // namespace

namespace emu {

bool is_mapped_range(CUdeviceptr address, size_t bytes) {
    auto it = mappings.upper_bound(address);
    if (it == mappings.begin()) return false;
    --it;
    if (address - it->first >= it->second.size) return false;
    while (true) {
        if (!it->second.writable) return false;
        const CUdeviceptr end = it->first + it->second.size;
        if (bytes <= end - address) return true;
        it = mappings.find(end);
        if (it == mappings.end()) return false;
    }
}

}  // namespace emu

CU_API CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                              int option) {
    if (CUresult r = emu::check_context()) return r;
    if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!is_emulated_kind(prop))
        return emu::complain(CUDA_ERROR_NOT_SUPPORTED, "cuMemGetAllocationGranularity: only pinned "
                             "memory on device 0 with no shareable handle is emulated");
    *granularity = kGranularity;
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemAddressReserve(CUdeviceptr* pointer, size_t bytes, size_t alignment,
                                    CUdeviceptr, unsigned long long flags) {
    if (CUresult r = emu::check_context()) return r;
    if (!pointer || bytes == 0 || flags != 0 || (alignment & (alignment - 1)) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes % 4096 != 0)
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemAddressReserve of %zu bytes: not a "
                             "multiple of the host page size", bytes);
    // Aligned to the granularity at least, so that the range can be mapped from its start.
    const size_t align = alignment > kGranularity ? alignment : kGranularity;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    void* raw = mmap(nullptr, bytes + align, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    const auto start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t base = (start + align - 1) / align * align;
    if (base > start) munmap(raw, base - start);
    if (const size_t tail = start + align - base) munmap(host(base + bytes), tail);
    reservations.emplace(base, bytes);
    *pointer = base;
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemAddressFree(CUdeviceptr pointer, size_t bytes) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    const auto found = reservations.find(pointer);
    if (found == reservations.end() || found->second != bytes)
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree(%#llx, %zu): not a "
                             "reservation of that size", pointer, bytes);
    if (overlaps_a_mapping(pointer, bytes))
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree(%#llx, %zu): the range "
                             "is still mapped; unmap it first", pointer, bytes);
    emu::run_all_queues();
    munmap(host(pointer), bytes);
    reservations.erase(found);
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                            const CUmemAllocationProp* prop, unsigned long long flags) {
    if (CUresult r = emu::check_context()) return r;
    if (!handle || !prop || flags != 0 || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!is_granular(bytes))
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemCreate of %zu bytes: not a multiple "
                             "of the granularity (%zu)", bytes, kGranularity);
    if (!is_emulated_kind(prop))
        return emu::complain(CUDA_ERROR_NOT_SUPPORTED, "cuMemCreate: only pinned memory on "
                             "device 0 with no shareable handle is emulated");
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::take_memory(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    *handle = next_handle++;
    handles.emplace(*handle, Handle{bytes});
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    const auto found = handles.find(handle);
    if (found == handles.end() || found->second.released) return CUDA_ERROR_INVALID_VALUE;
    emu::run_all_queues();
    found->second.released = true;
    give_back_if_done(handle);
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemMap(CUdeviceptr pointer, size_t bytes, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags) {
    if (CUresult r = emu::check_context()) return r;
    if (flags != 0 || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (offset != 0)
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemMap: the offset must be zero");
    if (!is_granular(pointer) || !is_granular(bytes))
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemMap(%#llx, %zu): address and size "
                             "must be multiples of the granularity (%zu)", pointer, bytes,
                             kGranularity);
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    const auto found = handles.find(handle);
    if (found == handles.end() || found->second.released)
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemMap: handle %llu is not a live "
                             "allocation", handle);
    if (bytes > found->second.size)
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemMap of %zu bytes from a handle of "
                             "%zu", bytes, found->second.size);
    if (found->second.mapped)
        return emu::complain(CUDA_ERROR_NOT_SUPPORTED, "cuMemMap: handle %llu is mapped already "
                             "(the emulator maps a handle once at a time)", handle);
    if (!is_reserved(pointer, bytes))
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemMap(%#llx, %zu): not inside one "
                             "address reservation", pointer, bytes);
    if (overlaps_a_mapping(pointer, bytes))
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemMap(%#llx, %zu): the range is "
                             "mapped already", pointer, bytes);
    // Fresh pages, poisoned, then closed until cuMemSetAccess opens them.
    if (mmap(host(pointer), bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
             -1, 0) == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    std::memset(host(pointer), emu::kPoison, bytes);
    mprotect(host(pointer), bytes, PROT_NONE);
    found->second.mapped = true;
    mappings.emplace(pointer, Mapping{bytes, handle});
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemSetAccess(CUdeviceptr pointer, size_t bytes, const CUmemAccessDesc* desc,
                               size_t count) {
    if (CUresult r = emu::check_context()) return r;
    if (!desc || count != 1 || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc->location.id != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    const int access = desc->flags;
    if (access != CU_MEM_ACCESS_FLAGS_PROT_NONE && access != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    const auto [first, last] = whole_mappings(pointer, bytes);
    if (first == last)
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess(%#llx, %zu): not a range "
                             "of whole mappings", pointer, bytes);
    if (access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) emu::run_all_queues();
    const int protection = access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
                           : access == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                                        : PROT_NONE;
    mprotect(host(pointer), bytes, protection);
    for (auto it = first; it != last; ++it)
        it->second.writable = access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return CUDA_SUCCESS;
}

CU_API CUresult cuMemUnmap(CUdeviceptr pointer, size_t bytes) {
    if (CUresult r = emu::check_context()) return r;
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    const auto [first, last] = whole_mappings(pointer, bytes);
    if (first == last)
        return emu::complain(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap(%#llx, %zu): not a range of "
                             "whole mappings (a mapping cannot be unmapped in part)", pointer,
                             bytes);
    emu::run_all_queues();
    if (!clear(pointer, bytes)) return CUDA_ERROR_UNKNOWN;
    for (auto it = first; it != last;) {
        const CUmemGenericAllocationHandle id = it->second.handle;
        handles.at(id).mapped = false;
        it = mappings.erase(it);
        give_back_if_done(id);
    }
    return CUDA_SUCCESS;
}
