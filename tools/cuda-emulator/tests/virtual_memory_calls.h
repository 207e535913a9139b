// The driver's virtual memory management calls, as the emulator's own tests call them.
#pragma once

#include "cuda_api.h"

CU_API CUresult cuMemAddressReserve(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
CU_API CUresult cuMemAddressFree(CUdeviceptr, size_t);
CU_API CUresult cuMemCreate(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                            unsigned long long);
CU_API CUresult cuMemRelease(CUmemGenericAllocationHandle);
CU_API CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                         unsigned long long);
CU_API CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
CU_API CUresult cuMemUnmap(CUdeviceptr, size_t);
