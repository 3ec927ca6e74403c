/*
 * tests/limiter/cu_types.h - the CUDA driver API types that the limiter's
 * test programs share: the stand-in driver (fake_cuda.c) and the
 * "application" that calls it (probe.c).
 *
 * Written from the driver API reference, independently of
 * src/limiter/lim_api.h, so that a wrong layout there is caught by the tests
 * instead of being copied into them.
 */
#ifndef GPUSCHED_TESTS_CU_TYPES_H
#define GPUSCHED_TESTS_CU_TYPES_H

#include <stddef.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long handle_t; /* CUmemGenericAllocationHandle */
typedef struct { int type, id; } loc_t; /* CUmemLocation */
typedef struct {                        /* CUmemAllocationProp */
    int type, handle_types;
    loc_t location;
    void *win32;
    unsigned char flags[8];
} prop_t;
typedef struct { size_t w, h; int fmt; unsigned ch; } desc_t;             /* CUDA_ARRAY_DESCRIPTOR */
typedef struct { size_t w, h, d; int fmt; unsigned ch, flags; } desc3_t; /* CUDA_ARRAY3D_DESCRIPTOR */
typedef struct {                                                          /* CUlaunchConfig */
    unsigned gx, gy, gz, bx, by, bz, shm;
    void *stream, *attrs;
    unsigned n_attrs;
} launch_cfg_t;

#endif
