/*
 * limiter/lim_proc.c - the cuGetProcAddress wrappers: how CUDA 12+
 * runtimes get every driver entry point, so how most calls reach the
 * limiter (see lim_hook.c).
 */
#include "limiter/lim.h"

LIM_EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    CUresult (*f)(const char *, void **, int, cuuint64_t) =
        (CUresult(*)(const char *, void **, int, cuuint64_t))lim_real(LIM_cuGetProcAddress);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = f(sym, pfn, ver, flags);
    if (rc == CUDA_SUCCESS && pfn)
        *pfn = lim_map_proc(sym, *pfn, ver, flags);
    return rc;
}

LIM_EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *status)
{
    CUresult (*f)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t,
                     CUdriverProcAddressQueryResult *))lim_real(LIM_cuGetProcAddress_v2);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = f(sym, pfn, ver, flags, status);
    if (rc == CUDA_SUCCESS && pfn)
        *pfn = lim_map_proc(sym, *pfn, ver, flags);
    return rc;
}
