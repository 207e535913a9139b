// Streams and events of the emulated driver in both modes: `stream_test deferred` sets
// CUDA_EMULATOR_DEFER=1 before the first driver call and checks that work waits in its stream
// until something synchronizes (a stream, an event, a stream waiting on an event, a synchronous
// call), in order; `stream_test immediate` checks that without it everything completes at once.
// Device memory is host memory here, so a test reads it directly to see what has run.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "check.h"
#include "context.h"
#include "cublas_api.h"
#include "cuda_api.h"
#include "virtual_memory_calls.h"

CU_API CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CU_API CUresult cuMemFree_v2(CUdeviceptr);
CU_API CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CU_API CUresult cuMemGetInfo_v2(size_t*, size_t*);
CU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void*, size_t, CUstream);
CU_API CUresult cuMemHostAlloc(void**, size_t, unsigned int);
CU_API CUresult cuMemFreeHost(void*);
CU_API CUresult cuMemcpyDtoHAsync_v2(void*, CUdeviceptr, size_t, CUstream);
CU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CU_API CUresult cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
CU_API CUresult cuMemsetD32Async(CUdeviceptr, unsigned int, size_t, CUstream);
CU_API CUresult cuMemsetD32_v2(CUdeviceptr, unsigned int, size_t);
CU_API CUresult cuStreamCreate(CUstream*, unsigned int);
CU_API CUresult cuStreamDestroy_v2(CUstream);
CU_API CUresult cuStreamSynchronize(CUstream);
CU_API CUresult cuStreamQuery(CUstream);
CU_API CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned int);
CU_API CUresult cuEventCreate(CUevent*, unsigned int);
CU_API CUresult cuEventDestroy_v2(CUevent);
CU_API CUresult cuEventRecord(CUevent, CUstream);
CU_API CUresult cuEventSynchronize(CUevent);
CU_API CUresult cuEventQuery(CUevent);
CU_API CUresult cuCtxSynchronize();
CUBLAS_API cublasStatus_t cublasCreate_v2(cublasHandle_t*);
CUBLAS_API cublasStatus_t cublasDestroy_v2(cublasHandle_t);
CUBLAS_API cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t);
CUBLAS_API cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t, int);
CUBLAS_API cublasStatus_t cublasGemmEx(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, int,
                                       const void*, int, int, const void*, void*, int, int, int, int);

namespace {

constexpr size_t kWords = 64;

// A device buffer of kWords 32-bit words, all `value`.
CUdeviceptr words(unsigned value) {
    CUdeviceptr p = 0;
    cuMemAlloc_v2(&p, kWords * 4);
    cuMemsetD32_v2(p, value, kWords);
    return p;
}

// Word i of a device buffer as the device holds it now, whatever is still queued.
unsigned peek(CUdeviceptr p, size_t i = 0) { return reinterpret_cast<const unsigned*>(p)[i]; }

bool all_are(CUdeviceptr p, unsigned value) {
    for (size_t i = 0; i < kWords; ++i)
        if (peek(p, i) != value) return false;
    return true;
}

CUstream stream() {
    CUstream s = nullptr;
    cuStreamCreate(&s, 0);
    return s;
}

CUevent event() {
    CUevent e = nullptr;
    cuEventCreate(&e, 0);
    return e;
}

void test_copies_wait_for_their_stream_synchronized() {
    const CUstream a = stream();
    const CUdeviceptr d = words(0);
    unsigned host[kWords], back[kWords];
    for (unsigned& h : host) h = 7;
    CHECK(cuMemcpyHtoDAsync_v2(d, host, sizeof host, a) == CUDA_SUCCESS, "queue a copy to the device");
    for (unsigned& h : host) h = 9;  // staged when queued: this does not reach the device
    std::memset(back, 0, sizeof back);
    CHECK(cuMemcpyDtoHAsync_v2(back, d, sizeof back, a) == CUDA_SUCCESS, "queue a copy to the host");
    CHECK(all_are(d, 0), "the copy to the device ran before the stream was synchronized");
    CHECK(back[0] == 0, "the copy to the host wrote %u before the stream was synchronized", back[0]);
    CHECK(cuStreamQuery(a) == CUDA_ERROR_NOT_READY, "a stream with queued work is not ready");
    CHECK(all_are(d, 0), "a query ran queued work");
    CHECK(cuStreamSynchronize(a) == CUDA_SUCCESS, "synchronize");
    CHECK(all_are(d, 7), "the device holds %u, not the bytes staged when the copy was queued", peek(d));
    CHECK(back[0] == 7 && back[kWords - 1] == 7, "the host got %u", back[0]);
    CHECK(cuStreamQuery(a) == CUDA_SUCCESS, "a synchronized stream is ready");
    cuMemFree_v2(d);
    cuStreamDestroy_v2(a);
}

void test_a_copy_from_page_locked_memory_reads_it_when_it_runs() {
    const CUstream a = stream();
    const CUdeviceptr d = words(0);
    void* pinned = nullptr;
    CHECK(cuMemHostAlloc(&pinned, kWords * 4, 0) == CUDA_SUCCESS, "page-locked memory");
    CHECK(reinterpret_cast<uintptr_t>(pinned) % 256 == 0, "aligned to 256 bytes");
    auto* host = static_cast<unsigned*>(pinned);
    for (size_t i = 0; i < kWords; ++i) host[i] = 7;
    CHECK(cuMemcpyHtoDAsync_v2(d, host, kWords * 4, a) == CUDA_SUCCESS, "queue a copy to the device");
    for (size_t i = 0; i < kWords; ++i) host[i] = 9;  // not staged: the copy reads this
    size_t free_before = 0, free_after = 0, total = 0;
    cuMemGetInfo_v2(&free_before, &total);
    CHECK(cuStreamSynchronize(a) == CUDA_SUCCESS, "synchronize");
    CHECK(all_are(d, 9), "the copy read %u, not the page-locked bytes as they were when it ran", peek(d));
    cuMemGetInfo_v2(&free_after, &total);
    CHECK(free_before == free_after, "page-locked memory is not the device's");
    CHECK(cuMemFreeHost(pinned) == CUDA_SUCCESS, "free it");
    CHECK(cuMemFreeHost(pinned) == CUDA_ERROR_INVALID_VALUE, "a second free is refused");
    cuMemFree_v2(d);
    cuStreamDestroy_v2(a);
}

void test_a_stream_runs_its_queue_in_order() {
    const CUstream a = stream();
    const CUdeviceptr x = words(0), y = words(0), z = words(0);
    cuMemsetD32Async(x, 1, kWords, a);
    cuMemcpyDtoDAsync_v2(y, x, kWords * 4, a);
    cuMemsetD32Async(x, 2, kWords, a);
    cuMemcpyDtoDAsync_v2(z, x, kWords * 4, a);
    cuMemsetD32Async(x, 3, kWords, a);
    CHECK(all_are(x, 0) && all_are(y, 0) && all_are(z, 0), "work ran when queued");
    cuStreamSynchronize(a);
    CHECK(all_are(y, 1) && all_are(z, 2) && all_are(x, 3), "out of order: x %u, y %u, z %u",
          peek(x), peek(y), peek(z));
    cuMemFree_v2(x);
    cuMemFree_v2(y);
    cuMemFree_v2(z);
    cuStreamDestroy_v2(a);
}

void test_an_event_pends_until_synchronized() {
    const CUstream a = stream();
    const CUevent e = event();
    const CUdeviceptr x = words(0);
    CHECK(cuEventQuery(e) == CUDA_SUCCESS, "an event never recorded is complete");
    cuMemsetD32Async(x, 1, kWords, a);
    CHECK(cuEventRecord(e, a) == CUDA_SUCCESS, "record");
    cuMemsetD32Async(x, 2, kWords, a);
    CHECK(cuEventQuery(e) == CUDA_ERROR_NOT_READY, "an event after queued work is not ready");
    CHECK(all_are(x, 0), "a query ran queued work");
    CHECK(cuEventSynchronize(e) == CUDA_SUCCESS, "synchronize the event");
    CHECK(cuEventQuery(e) == CUDA_SUCCESS, "a synchronized event is complete");
    CHECK(all_are(x, 1), "the event ran %u, not the work before its record only", peek(x));
    CHECK(cuStreamQuery(a) == CUDA_ERROR_NOT_READY, "the work after the record still waits");
    cuStreamSynchronize(a);
    CHECK(all_are(x, 2), "the stream finished with %u", peek(x));
    cuEventDestroy_v2(e);
    cuMemFree_v2(x);
    cuStreamDestroy_v2(a);
}

void test_a_stream_waiting_on_an_event_runs_after_it() {
    const CUstream a = stream(), b = stream();
    const CUevent e = event();
    const CUdeviceptr x = words(0), y = words(0), z = words(0);
    cuMemsetD32Async(x, 5, kWords, a);
    cuEventRecord(e, a);
    cuMemsetD32Async(x, 6, kWords, a);  // after the event: B does not wait for it
    CHECK(cuStreamWaitEvent(b, e, 0) == CUDA_SUCCESS, "wait");
    cuMemcpyDtoDAsync_v2(y, x, kWords * 4, b);
    CHECK(all_are(x, 0) && all_are(y, 0), "a wait ran work");
    cuStreamSynchronize(b);
    CHECK(all_are(y, 5), "B copied %u: it did not run after A's event", peek(y));
    CHECK(cuEventQuery(e) == CUDA_SUCCESS, "the event B waited on is complete");
    CHECK(cuStreamQuery(a) == CUDA_ERROR_NOT_READY, "A's work after the event ran for B");
    // Without a wait, B does not wait for A.
    cuMemcpyDtoDAsync_v2(z, x, kWords * 4, b);
    cuStreamSynchronize(b);
    CHECK(all_are(z, 5), "B copied %u: it waited for A without an event", peek(z));
    cuStreamSynchronize(a);
    CHECK(all_are(x, 6), "A finished with %u", peek(x));
    cuEventDestroy_v2(e);
    cuMemFree_v2(x);
    cuMemFree_v2(y);
    cuMemFree_v2(z);
    cuStreamDestroy_v2(a);
    cuStreamDestroy_v2(b);
}

// cuCtxSynchronize, a synchronous copy, the legacy default stream, cuMemFree and destroying a
// stream each run what was queued before.
void test_synchronous_calls_run_every_queue() {
    const CUstream a = stream(), b = stream();
    const CUdeviceptr x = words(0), y = words(0);
    cuMemsetD32Async(x, 1, kWords, a);
    cuMemsetD32Async(y, 2, kWords, b);
    unsigned back = 0;
    cuMemcpyDtoH_v2(&back, y, sizeof back);
    CHECK(back == 2 && all_are(x, 1), "a synchronous copy ran before the queues: %u, %u", back, peek(x));

    cuMemsetD32Async(x, 3, kWords, a);
    cuMemsetD32Async(y, 4, kWords, b);
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS, "context synchronize");
    CHECK(all_are(x, 3) && all_are(y, 4), "cuCtxSynchronize left work queued");
    CHECK(cuStreamQuery(a) == CUDA_SUCCESS && cuStreamQuery(b) == CUDA_SUCCESS, "queues are empty");

    // The legacy default stream waits for the blocking streams' earlier work.
    cuMemsetD32Async(x, 5, kWords, a);
    cuMemcpyDtoDAsync_v2(y, x, kWords * 4, nullptr);
    cuStreamSynchronize(nullptr);
    CHECK(all_are(y, 5), "the legacy stream did not wait for stream A: %u", peek(y));

    cuMemsetD32Async(x, 6, kWords, a);
    cuStreamDestroy_v2(a);
    CHECK(all_are(x, 6), "destroying a stream dropped its work");

    cuMemsetD32Async(y, 7, kWords, b);
    size_t free_before = 0, free_after = 0, total = 0;
    cuMemGetInfo_v2(&free_before, &total);
    CHECK(cuMemFreeAsync(y, b) == CUDA_SUCCESS, "free on a stream");
    cuMemGetInfo_v2(&free_after, &total);
    CHECK(free_after == free_before && all_are(y, 5), "cuMemFreeAsync did not wait for its stream");
    cuStreamSynchronize(b);
    cuMemGetInfo_v2(&free_after, &total);
    CHECK(free_after > free_before, "cuMemFreeAsync freed nothing once its stream ran");

    cuMemsetD32Async(x, 8, kWords, b);
    CHECK(cuMemFree_v2(x) == CUDA_SUCCESS, "free");
    CHECK(cuStreamQuery(b) == CUDA_SUCCESS, "cuMemFree left work queued on the memory it freed");
    cuStreamDestroy_v2(b);
}

// Unmapping virtual memory runs the work queued on it first: run later, it would fault.
void test_unmapping_runs_the_work_queued_on_the_pages() {
    const size_t page = size_t(2) << 20;
    CUmemAllocationProp prop;
    std::memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    const CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUdeviceptr base = 0;
    CUmemGenericAllocationHandle handle = 0;
    cuMemAddressReserve(&base, page, 0, 0, 0);
    cuMemCreate(&handle, page, &prop, 0);
    cuMemMap(base, page, 0, handle, 0);
    cuMemSetAccess(base, page, &access, 1);
    const CUstream a = stream();
    CHECK(cuMemsetD32Async(base, 1, page / 4, a) == CUDA_SUCCESS, "fill mapped memory");
    CHECK(cuStreamQuery(a) == CUDA_ERROR_NOT_READY, "the fill waits");
    CHECK(cuMemUnmap(base, page) == CUDA_SUCCESS, "unmap");
    CHECK(cuStreamQuery(a) == CUDA_SUCCESS, "cuMemUnmap left work queued on the pages it unmapped");
    cuMemRelease(handle);
    cuMemAddressFree(base, page);
    cuStreamDestroy_v2(a);
}

// Argument checks answer when the work is queued.
void test_errors_are_reported_when_queued() {
    const CUstream a = stream();
    const CUdeviceptr x = words(0);
    unsigned host[2 * kWords] = {};
    CHECK(cuMemcpyHtoDAsync_v2(x, host, sizeof host, a) == CUDA_ERROR_INVALID_VALUE,
          "a copy past the allocation");
    CHECK(cuMemsetD32Async(x, 1, kWords, reinterpret_cast<CUstream>(0x1234)) == CUDA_ERROR_INVALID_HANDLE,
          "a stream that does not exist");
    CHECK(cuStreamQuery(a) == CUDA_SUCCESS, "a refused call queued work");
    cuMemFree_v2(x);
    cuStreamDestroy_v2(a);
}

// A GEMM runs on the handle's stream, reading device scalars when it runs.
void test_a_gemm_runs_on_its_stream() {
    const CUstream a = stream();
    cublasHandle_t handle = nullptr;
    cublasCreate_v2(&handle);
    cublasSetStream_v2(handle, a);
    cublasSetPointerMode_v2(handle, CUBLAS_POINTER_MODE_DEVICE);
    const CUdeviceptr m = words(0);  // A, B, C, alpha, beta as f32 at words 0..4
    const float values[5] = {3, 4, 0, 0, 0}, scales[2] = {2, 0};
    cuMemcpyHtoDAsync_v2(m, values, sizeof values, a);
    cuMemcpyHtoDAsync_v2(m + 12, scales, sizeof scales, a);
    auto* f = reinterpret_cast<float*>(m);
    CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, f + 3, f, CUDA_R_32F, 1, f + 1, CUDA_R_32F,
                       1, f + 4, f + 2, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, -1) == CUBLAS_STATUS_SUCCESS,
          "gemm");
    cuStreamSynchronize(a);
    CHECK(f[2] == 24.0f, "C = %g, not 2 * 3 * 4 with alpha read when the product ran", f[2]);
    cublasDestroy_v2(handle);
    cuMemFree_v2(m);
    cuStreamDestroy_v2(a);
}

void test_immediate_mode_completes_at_once() {
    const CUstream a = stream();
    const CUevent e = event();
    const CUdeviceptr x = words(0);
    cuMemsetD32Async(x, 1, kWords, a);
    CHECK(all_are(x, 1), "a fill waited for synchronization");
    cuEventRecord(e, a);
    CHECK(cuEventQuery(e) == CUDA_SUCCESS, "an event pends");
    CHECK(cuStreamQuery(a) == CUDA_SUCCESS, "a stream has work pending");
    cuEventDestroy_v2(e);
    cuMemFree_v2(x);
    cuStreamDestroy_v2(a);
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode != "deferred" && mode != "immediate") {
        std::printf("usage: stream_test deferred|immediate\n");
        return 2;
    }
    if (mode == "deferred") setenv("CUDA_EMULATOR_DEFER", "1", 1);
    else unsetenv("CUDA_EMULATOR_DEFER");
    open_device();
    if (mode == "deferred") {
        test_copies_wait_for_their_stream_synchronized();
        test_a_copy_from_page_locked_memory_reads_it_when_it_runs();
        test_a_stream_runs_its_queue_in_order();
        test_an_event_pends_until_synchronized();
        test_a_stream_waiting_on_an_event_runs_after_it();
        test_synchronous_calls_run_every_queue();
        test_unmapping_runs_the_work_queued_on_the_pages();
        test_errors_are_reported_when_queued();
        test_a_gemm_runs_on_its_stream();
    } else {
        test_immediate_mode_completes_at_once();
        test_a_gemm_runs_on_its_stream();
    }
    std::printf("stream_test %s: %s\n", mode.c_str(), failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
