// The emulated driver's virtual memory management against the driver API's documentation: a
// range grown page by page holds data across its pages, memory is counted from cuMemCreate to
// the later of unmap and release, and the documented misuses are refused.

#include <cstring>
#include <vector>

#include "check.h"
#include "context.h"
#include "cuda_api.h"
#include "virtual_memory_calls.h"

CU_API CUresult cuMemGetInfo_v2(size_t*, size_t*);
CU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void*, size_t);
CU_API CUresult cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
CU_API CUresult cuMemGetAllocationGranularity(size_t*, const CUmemAllocationProp*, int);

namespace {

CUmemAllocationProp pinned() {
    CUmemAllocationProp prop;
    std::memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    return prop;
}

size_t in_use() {
    size_t free = 0, total = 0;
    cuMemGetInfo_v2(&free, &total);
    return total - free;
}

// Maps a fresh page of `page` bytes at `at` and opens it for reading and writing.
CUresult map_page(CUdeviceptr at, size_t page) {
    const CUmemAllocationProp prop = pinned();
    CUmemGenericAllocationHandle handle = 0;
    if (CUresult r = cuMemCreate(&handle, page, &prop, 0)) return r;
    if (CUresult r = cuMemMap(at, page, 0, handle, 0)) return r;
    // The mapping keeps the memory alive; releasing now frees it when the page is unmapped.
    if (CUresult r = cuMemRelease(handle)) return r;
    const CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    return cuMemSetAccess(at, page, &access, 1);
}

void test_a_range_grows_and_shrinks_page_by_page(size_t page) {
    const size_t before = in_use();
    CUdeviceptr base = 0;
    CHECK(cuMemAddressReserve(&base, 8 * page, 0, 0, 0) == CUDA_SUCCESS, "reserve");
    CHECK(base % page == 0, "base %#llx is not aligned to a page", base);
    CHECK(in_use() == before, "a reservation takes no memory");
    for (size_t i = 0; i < 3; ++i) CHECK(map_page(base + i * page, page) == CUDA_SUCCESS, "page %zu", i);
    CHECK(in_use() == before + 3 * page, "three pages in use: %zu", in_use() - before);

    // A copy across the pages' boundaries reads back; fresh memory holds the poison byte.
    std::vector<unsigned char> data(2 * page);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7);
    const CUdeviceptr middle = base + page / 2;
    CHECK(cuMemcpyHtoD_v2(middle, data.data(), data.size()) == CUDA_SUCCESS, "copy in");
    std::vector<unsigned char> back(data.size());
    CHECK(cuMemcpyDtoH_v2(back.data(), middle, back.size()) == CUDA_SUCCESS, "copy out");
    CHECK(back == data, "the data read back differs");
    unsigned char fresh = 0;
    cuMemcpyDtoH_v2(&fresh, base, 1);
    CHECK(fresh == 0xff, "fresh memory holds %#x", fresh);
    // Past the mapped pages, or into them from before the range, a copy is refused.
    CHECK(cuMemcpyDtoH_v2(back.data(), base + 2 * page, page + 1) == CUDA_ERROR_INVALID_VALUE,
          "a copy past the mapped pages");

    // Pages go back one at a time, each whole; their memory returns once unmapped (released).
    CHECK(cuMemUnmap(base + 2 * page, page / 2) == CUDA_ERROR_INVALID_VALUE, "half a mapping");
    CHECK(cuMemUnmap(base + 2 * page, page) == CUDA_SUCCESS, "the last page");
    CHECK(in_use() == before + 2 * page, "two pages in use: %zu", in_use() - before);
    CHECK(cuMemAddressFree(base, 8 * page) == CUDA_ERROR_INVALID_VALUE, "free while mapped");
    CHECK(cuMemUnmap(base, 2 * page) == CUDA_SUCCESS, "two whole mappings at once");
    CHECK(in_use() == before, "nothing in use: %zu", in_use() - before);
    CHECK(cuMemAddressFree(base, 4 * page) == CUDA_ERROR_INVALID_VALUE, "the wrong size");
    CHECK(cuMemAddressFree(base, 8 * page) == CUDA_SUCCESS, "free");
}

void test_memory_is_held_until_unmapped_and_released(size_t page) {
    const size_t before = in_use();
    const CUmemAllocationProp prop = pinned();
    CUdeviceptr base = 0;
    cuMemAddressReserve(&base, page, 0, 0, 0);
    CUmemGenericAllocationHandle handle = 0;
    CHECK(cuMemCreate(&handle, page, &prop, 0) == CUDA_SUCCESS, "create");
    CHECK(in_use() == before + page, "a handle holds its memory");
    CHECK(cuMemMap(base, page, 0, handle, 0) == CUDA_SUCCESS, "map");
    CHECK(cuMemUnmap(base, page) == CUDA_SUCCESS, "unmap");
    CHECK(in_use() == before + page, "an unmapped handle not released still holds its memory");
    CHECK(cuMemRelease(handle) == CUDA_SUCCESS, "release");
    CHECK(in_use() == before, "a handle unmapped and released holds nothing");
    CHECK(cuMemRelease(handle) == CUDA_ERROR_INVALID_VALUE, "a second release");
    cuMemAddressFree(base, page);
}

void test_documented_refusals(size_t page) {
    const CUmemAllocationProp prop = pinned();
    CUmemGenericAllocationHandle handle = 0;
    CHECK(cuMemCreate(&handle, page / 2, &prop, 0) == CUDA_ERROR_INVALID_VALUE,
          "a size off the granularity");
    size_t free = 0, total = 0;
    cuMemGetInfo_v2(&free, &total);
    CHECK(cuMemCreate(&handle, (free / page + 1) * page, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY,
          "more than the device has free");

    CUdeviceptr base = 0;
    cuMemAddressReserve(&base, 2 * page, 0, 0, 0);
    CHECK(cuMemCreate(&handle, page, &prop, 0) == CUDA_SUCCESS, "create");
    CHECK(cuMemMap(base, page, page, handle, 0) == CUDA_ERROR_INVALID_VALUE, "an offset");
    CHECK(cuMemMap(base + page / 2, page, 0, handle, 0) == CUDA_ERROR_INVALID_VALUE,
          "an address off the granularity");
    CHECK(cuMemMap(base + page, 2 * page, 0, handle, 0) == CUDA_ERROR_INVALID_VALUE,
          "more than the handle holds");
    CHECK(cuMemMap(base + 2 * page, page, 0, handle, 0) == CUDA_ERROR_INVALID_VALUE,
          "outside the reservation");
    CHECK(cuMemMap(base, page, 0, handle, 0) == CUDA_SUCCESS, "map");
    CUmemGenericAllocationHandle other = 0;
    cuMemCreate(&other, page, &prop, 0);
    CHECK(cuMemMap(base, page, 0, other, 0) == CUDA_ERROR_INVALID_VALUE, "over a mapping");
    cuMemRelease(other);
    // Mapped but not opened: copies are refused (on a GPU, an illegal address).
    unsigned char byte = 0;
    CHECK(cuMemcpyDtoH_v2(&byte, base, 1) == CUDA_ERROR_INVALID_VALUE, "before cuMemSetAccess");
    const CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(base, 2 * page, &access, 1) == CUDA_ERROR_INVALID_VALUE,
          "access to a range not wholly mapped");
    CHECK(cuMemSetAccess(base, page, &access, 1) == CUDA_SUCCESS, "access");
    CHECK(cuMemcpyDtoH_v2(&byte, base, 1) == CUDA_SUCCESS, "after cuMemSetAccess");
    cuMemUnmap(base, page);
    cuMemRelease(handle);
    CHECK(cuMemAddressFree(base, 2 * page) == CUDA_SUCCESS, "free");
}

}  // namespace

int main() {
    open_device();
    const CUmemAllocationProp prop = pinned();
    size_t page = 0;
    CHECK(cuMemGetAllocationGranularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS,
          "granularity");
    CHECK(page == size_t(2) << 20, "granularity %zu", page);
    test_a_range_grows_and_shrinks_page_by_page(page);
    test_memory_is_held_until_unmapped_and_released(page);
    test_documented_refusals(page);
    std::printf("virtual_memory_test: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
