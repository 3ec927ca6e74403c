/*
 * limiter/lim_api.h - the few CUDA driver API and NVML types the limiter
 * needs, declared from NVIDIA's public API reference (no CUDA headers are
 * needed to build gpusched). Only what the wrappers read is spelled out;
 * everything else is an opaque pointer passed through untouched.
 */
#ifndef GPUSCHED_LIM_API_H
#define GPUSCHED_LIM_API_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NOT_FOUND = 500,
};
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* _v2: 64-bit */
typedef uint64_t cuuint64_t;
typedef void *CUcontext, *CUstream, *CUmemoryPool, *CUarray, *CUmipmappedArray, *CUfunction,
    *CUgraphExec;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef int CUdriverProcAddressQueryResult;

/* cuGetProcAddress flags */
#define LIM_CU_PROC_PER_THREAD_STREAM 2ULL

/* CUmemLocationType */
enum {
    LIM_CU_LOC_INVALID = 0,
    LIM_CU_LOC_DEVICE = 1,
    LIM_CU_LOC_HOST = 2,
    LIM_CU_LOC_HOST_NUMA = 3,
    LIM_CU_LOC_HOST_NUMA_CURRENT = 4,
};
typedef struct {
    int type; /* CUmemLocationType */
    int id;
} CUmemLocation;
typedef struct {
    int type;                 /* CUmemAllocationType */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType, gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct {
    size_t Width, Height;
    int Format; /* CUarray_format */
    unsigned NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct {
    size_t Width, Height, Depth;
    int Format;
    unsigned NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

/* cuLaunchKernelEx's config: only the grid is read */
typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

/* NVML */
typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned gpu, memory;
} nvmlUtilization_t;

#endif
