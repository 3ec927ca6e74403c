/*
 * limiter/lim_mem.c - memory: every driver call that takes device memory
 * asks the ledger first and fails with CUDA_ERROR_OUT_OF_MEMORY when the
 * container would pass its limit; the matching frees give it back; the
 * calls that report memory report the share.
 *
 * The device an allocation counts against (in the container's numbering,
 * lim.h) is that of the calling thread's current context, except for
 * cuMemCreate, which names its location: a
 * worker thread with no current context (HAMi-core #169/#172) uses that,
 * and host or host-NUMA locations (HAMi-core #187, llama.cpp) are not device
 * memory and are not counted. A call the limiter cannot attribute (no
 * context, a device past LIM_MAX_DEV) goes to the driver uncounted, and the
 * driver decides.
 */
#include "limiter/lim.h"

#define REAL(name, type) ((type)lim_real(LIM_##name))

static int mem_on(void)
{
    return lim_state()->cfg.mem_on;
}

/* Reserve before an allocation on the current context's device: sets *dev
 * and *counted; returns 1 when the limit refuses it. */
static int pre_cur(uint64_t bytes, int *dev, int *counted)
{
    CUdevice d;
    *counted = 0;
    *dev = -1;
    if (!mem_on() || lim_cur_dev(&d) < 0)
        return 0;
    *dev = d;
    int r = lim_mem_reserve(d, bytes);
    *counted = r == 0;
    return r == 1;
}

static CUresult post(CUresult rc, int kind, uint64_t key, int dev, uint64_t bytes, int counted)
{
    if (!counted)
        return rc;
    if (rc == CUDA_SUCCESS)
        lim_track_put(kind, key, dev, bytes, 0);
    else
        lim_mem_undo(dev, bytes);
    return rc;
}

/* What a free is about to give back: its entry is taken before the real
 * free, so an allocation that gets the same address at once, on another
 * thread (pools hand addresses out again right away), is not taken for it;
 * freed() puts it back when the free fails. */
struct freeing {
    int kind, had, dev;
    uint64_t key, bytes;
};

static struct freeing freeing(int kind, uint64_t key)
{
    struct freeing x = {kind, 0, 0, key, 0};
    x.had = mem_on() && lim_track_take(kind, key, &x.dev, &x.bytes, NULL);
    return x;
}

static CUresult freed(CUresult rc, const struct freeing *x)
{
    if (x->had && rc == CUDA_SUCCESS)
        lim_mem_undo(x->dev, x->bytes);
    else if (x->had)
        lim_track_put(x->kind, x->key, x->dev, x->bytes, 0);
    return rc;
}

/* ---- allocations ------------------------------------------------------- */

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
LIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    alloc_fn f = REAL(cuMemAlloc_v2, alloc_fn);
    int dev, counted;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p || pre_cur(n, &dev, &counted))
        return p ? CUDA_ERROR_OUT_OF_MEMORY : f(p, n);
    CUresult rc = f(p, n);
    return post(rc, LIM_K_PTR, rc ? 0 : *p, dev, n, counted);
}

typedef CUresult (*pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
LIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h,
                                       unsigned elem)
{
    pitch_fn f = REAL(cuMemAllocPitch_v2, pitch_fn);
    int dev, counted;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    /* the pitch is the driver's choice; 512-byte rows until it says */
    uint64_t est = ((uint64_t)w + 511) / 512 * 512 * (uint64_t)h;
    if (!p || !pitch || (w && est / w < h))
        return f(p, pitch, w, h, elem);
    if (pre_cur(est, &dev, &counted))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(p, pitch, w, h, elem);
    if (counted && rc == CUDA_SUCCESS) {
        uint64_t real = (uint64_t)*pitch * h;
        if (real > est && lim_mem_reserve(dev, real - est) == 1) {
            CUresult (*fr)(CUdeviceptr) = REAL(cuMemFree_v2, CUresult(*)(CUdeviceptr));
            if (fr)
                fr(*p);
            lim_mem_undo(dev, est);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (real < est)
            lim_mem_undo(dev, est - real);
        est = real;
    }
    return post(rc, LIM_K_PTR, rc ? 0 : *p, dev, est, counted);
}

typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned);
LIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags)
{
    managed_fn f = REAL(cuMemAllocManaged, managed_fn);
    int dev, counted;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p)
        return f(p, n, flags);
    if (pre_cur(n, &dev, &counted))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(p, n, flags);
    return post(rc, LIM_K_PTR, rc ? 0 : *p, dev, n, counted);
}

typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
static CUresult alloc_async(async_fn f, CUdeviceptr *p, size_t n, CUstream s)
{
    int dev, counted;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p)
        return f(p, n, s);
    if (pre_cur(n, &dev, &counted))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(p, n, s);
    return post(rc, LIM_K_PTR, rc ? 0 : *p, dev, n, counted);
}
LIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s)
{
    return alloc_async(REAL(cuMemAllocAsync, async_fn), p, n, s);
}
LIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s)
{
    return alloc_async(REAL(cuMemAllocAsync_ptsz, async_fn), p, n, s);
}

typedef CUresult (*pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
static CUresult alloc_pool(pool_fn f, CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    int dev, counted;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p)
        return f(p, n, pool, s);
    if (pre_cur(n, &dev, &counted))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(p, n, pool, s);
    return post(rc, LIM_K_PTR, rc ? 0 : *p, dev, n, counted);
}
LIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool,
                                            CUstream s)
{
    return alloc_pool(REAL(cuMemAllocFromPoolAsync, pool_fn), p, n, pool, s);
}
LIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool,
                                                 CUstream s)
{
    return alloc_pool(REAL(cuMemAllocFromPoolAsync_ptsz, pool_fn), p, n, pool, s);
}

typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
LIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n,
                                const CUmemAllocationProp *prop, unsigned long long flags)
{
    create_fn f = REAL(cuMemCreate, create_fn);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    /* the location says where the memory is, whatever thread asks */
    int dev;
    if (!mem_on() || !h || !prop || prop->location.type != LIM_CU_LOC_DEVICE ||
        (dev = lim_dev_index(prop->location.id)) < 0)
        return f(h, n, prop, flags);
    int r = lim_mem_reserve(dev, n);
    if (r == 1)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(h, n, prop, flags);
    return post(rc, LIM_K_HANDLE, rc ? 0 : *h, dev, n, r == 0);
}

/* Bytes of an array, as the driver lays it out at least (no padding). */
static uint64_t array_bytes(size_t w, size_t h, size_t d, int fmt, unsigned ch)
{
    uint64_t e;
    switch (fmt) {
    case 0x01: case 0x08: e = 1; break;            /* (un)signed int8 */
    case 0x02: case 0x09: case 0x10: e = 2; break; /* int16, half */
    default: e = 4; break;                          /* int32, float, others */
    }
    uint64_t n = (uint64_t)(w ? w : 1) * (h ? h : 1);
    if (n / (w ? w : 1) != (h ? h : 1))
        return 0;
    uint64_t m = n * (d ? d : 1);
    if (m / (d ? d : 1) != n || m > (1ULL << 50) / (e * (ch ? ch : 1)))
        return 0;
    return m * e * (ch ? ch : 1);
}

static CUresult pre_array(uint64_t bytes, int *dev, int *counted)
{
    if (!bytes) {
        *counted = 0;
        return 0;
    }
    return pre_cur(bytes, dev, counted) ? CUDA_ERROR_OUT_OF_MEMORY : 0;
}

typedef CUresult (*arr_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
LIM_EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    arr_fn f = REAL(cuArrayCreate_v2, arr_fn);
    int dev = -1, counted = 0;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!a || !d)
        return f(a, d);
    uint64_t b = array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels);
    if (pre_array(b, &dev, &counted))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(a, d);
    return post(rc, LIM_K_ARRAY, rc ? 0 : (uint64_t)(uintptr_t)*a, dev, b, counted);
}

typedef CUresult (*arr3_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
LIM_EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    arr3_fn f = REAL(cuArray3DCreate_v2, arr3_fn);
    int dev = -1, counted = 0;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!a || !d)
        return f(a, d);
    uint64_t b = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels);
    if (pre_array(b, &dev, &counted))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(a, d);
    return post(rc, LIM_K_ARRAY, rc ? 0 : (uint64_t)(uintptr_t)*a, dev, b, counted);
}

typedef CUresult (*mip_fn)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
LIM_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                           unsigned levels)
{
    mip_fn f = REAL(cuMipmappedArrayCreate, mip_fn);
    int dev = -1, counted = 0;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!a || !d)
        return f(a, d, levels);
    /* every level halves each dimension (down to 1) */
    uint64_t b = 0;
    size_t w = d->Width, h = d->Height, z = d->Depth;
    for (unsigned l = 0; l < levels && l < 32; l++) {
        b += array_bytes(w, h, z, d->Format, d->NumChannels);
        w = w > 1 ? w / 2 : w;
        h = h > 1 ? h / 2 : h;
        z = z > 1 ? z / 2 : z;
    }
    if (pre_array(b, &dev, &counted))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = f(a, d, levels);
    return post(rc, LIM_K_MIPMAP, rc ? 0 : (uint64_t)(uintptr_t)*a, dev, b, counted);
}

/* ---- frees --------------------------------------------------------------- */

typedef CUresult (*free_fn)(CUdeviceptr);
LIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    free_fn f = REAL(cuMemFree_v2, free_fn);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct freeing x = freeing(LIM_K_PTR, p);
    return freed(f(p), &x);
}

typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
static CUresult free_async(free_async_fn f, CUdeviceptr p, CUstream s)
{
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct freeing x = freeing(LIM_K_PTR, p);
    return freed(f(p, s), &x);
}
LIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    return free_async(REAL(cuMemFreeAsync, free_async_fn), p, s);
}
LIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    return free_async(REAL(cuMemFreeAsync_ptsz, free_async_fn), p, s);
}

/* ---- virtual memory management ----------------------------------------
 *
 * A cuMemCreate handle's memory lives while anything refers to it: the
 * handle, each mapping of it (cuMemMap) and each cuMemRetainAllocationHandle.
 * Programs release the handle right after mapping it (the driver API
 * guide's own pattern; NCCL releases its retained handle before unmapping),
 * so the bytes go back when the last reference goes, not at cuMemRelease.
 * Each reference is dropped before the real call (the driver may hand the
 * value out again at once) and taken back if the call fails. Handles the
 * limiter did not count (imported, host memory) have no entry and are
 * passed through.
 */

/* Drops a reference to handle h taken before a call that failed or
 * succeeded (rc): r is what lim_track_ref said. */
static CUresult unref_done(CUresult rc, uint64_t h, int r, int dev, uint64_t bytes)
{
    if (rc == CUDA_SUCCESS && r == 1)
        lim_mem_undo(dev, bytes);
    else if (rc != CUDA_SUCCESS && r == 1)
        lim_track_put(LIM_K_HANDLE, h, dev, bytes, 0);
    else if (rc != CUDA_SUCCESS && r == 0)
        lim_track_ref(LIM_K_HANDLE, h, 1, NULL, NULL);
    return rc;
}

LIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    CUresult (*f)(CUmemGenericAllocationHandle) =
        REAL(cuMemRelease, CUresult(*)(CUmemGenericAllocationHandle));
    int dev = -1, r = -1;
    uint64_t bytes = 0;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (mem_on())
        r = lim_track_ref(LIM_K_HANDLE, h, -1, &dev, &bytes);
    return unref_done(f(h), h, r, dev, bytes);
}

typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
LIM_EXPORT CUresult cuMemMap(CUdeviceptr va, size_t n, size_t off, CUmemGenericAllocationHandle h,
                             unsigned long long flags)
{
    map_fn f = REAL(cuMemMap, map_fn);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    /* the mapping's reference is taken first: a release racing with it
     * must not give the bytes back */
    int r = mem_on() ? lim_track_ref(LIM_K_HANDLE, h, 1, NULL, NULL) : -1;
    CUresult rc = f(va, n, off, h, flags);
    if (r == 0 && rc == CUDA_SUCCESS)
        lim_track_put(LIM_K_MAP, va, -1, n, h);
    else if (r == 0) {
        int dev;
        uint64_t bytes;
        if (lim_track_ref(LIM_K_HANDLE, h, -1, &dev, &bytes) == 1)
            lim_mem_undo(dev, bytes);
    }
    return rc;
}

/* One cuMemUnmap may end several mappings laid end to end; this many are
 * followed (a longer run stays counted: the safe side). */
#define LIM_UNMAP_MAX 64

LIM_EXPORT CUresult cuMemUnmap(CUdeviceptr va, size_t n)
{
    CUresult (*f)(CUdeviceptr, size_t) = REAL(cuMemUnmap, CUresult(*)(CUdeviceptr, size_t));
    struct { uint64_t va, n, h; } m[LIM_UNMAP_MAX];
    int k = 0, dev;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    for (uint64_t at = va; mem_on() && k < LIM_UNMAP_MAX && at - va < n;) {
        if (!lim_track_take(LIM_K_MAP, at, &dev, &m[k].n, &m[k].h))
            break;
        m[k].va = at;
        at += m[k++].n;
    }
    CUresult rc = f(va, n);
    for (int i = 0; i < k; i++) {
        if (rc != CUDA_SUCCESS) {
            lim_track_put(LIM_K_MAP, m[i].va, -1, m[i].n, m[i].h);
            continue;
        }
        uint64_t bytes;
        if (lim_track_ref(LIM_K_HANDLE, m[i].h, -1, &dev, &bytes) == 1)
            lim_mem_undo(dev, bytes);
    }
    return rc;
}

typedef CUresult (*retain_fn)(CUmemGenericAllocationHandle *, void *);
LIM_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    retain_fn f = REAL(cuMemRetainAllocationHandle, retain_fn);
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = f(h, addr);
    if (rc == CUDA_SUCCESS && h && mem_on())
        lim_track_ref(LIM_K_HANDLE, *h, 1, NULL, NULL);
    return rc;
}

LIM_EXPORT CUresult cuArrayDestroy(CUarray a)
{
    CUresult (*f)(CUarray) = REAL(cuArrayDestroy, CUresult(*)(CUarray));
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct freeing x = freeing(LIM_K_ARRAY, (uint64_t)(uintptr_t)a);
    return freed(f(a), &x);
}

LIM_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
    CUresult (*f)(CUmipmappedArray) =
        REAL(cuMipmappedArrayDestroy, CUresult(*)(CUmipmappedArray));
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct freeing x = freeing(LIM_K_MIPMAP, (uint64_t)(uintptr_t)a);
    return freed(f(a), &x);
}

/* ---- what the program is told ---------------------------------------- */

LIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    CUresult (*f)(size_t *, size_t *) = REAL(cuMemGetInfo_v2, CUresult(*)(size_t *, size_t *));
    CUdevice d;
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = f(free_b, total_b);
    uint64_t lim;
    if (rc != CUDA_SUCCESS || !free_b || !total_b || !mem_on() || lim_cur_dev(&d) < 0 ||
        !(lim = lim_mem_limit(d)))
        return rc;
    /* the share, never more than the card has (HAMi-core #81) */
    uint64_t total = lim < *total_b ? lim : *total_b;
    uint64_t used = lim_mem_used(d);
    uint64_t free_s = used < total ? total - used : 0;
    *total_b = (size_t)total;
    *free_b = (size_t)(free_s < *free_b ? free_s : *free_b);
    return rc;
}

LIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult (*f)(size_t *, CUdevice) = REAL(cuDeviceTotalMem_v2, CUresult(*)(size_t *, CUdevice));
    if (!f)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = f(bytes, dev);
    uint64_t lim;
    if (rc == CUDA_SUCCESS && bytes && mem_on() && (lim = lim_mem_limit(lim_dev_index(dev))) &&
        lim < *bytes)
        *bytes = (size_t)lim;
    return rc;
}
