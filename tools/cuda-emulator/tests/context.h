// The emulated device's primary context, made current, as each of the emulator's own tests
// starts.
#pragma once

#include "cuda_api.h"

CU_API CUresult cuInit(unsigned int);
CU_API CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
CU_API CUresult cuCtxSetCurrent(CUcontext);

inline void open_device() {
    CUcontext context;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&context, 0);
    cuCtxSetCurrent(context);
}
