/*
 * tests/limiter/fake_cuda.c - a stand-in libcuda.so.1 for the limiter's
 * tests in CI, which has no GPU.
 *
 * Written from the driver API reference, independently of src/limiter/: a
 * process sees FAKE_CUDA_DEVICES devices (default 2) of FAKE_CUDA_MEM_MIB
 * MiB each (default 1024), numbered through CUDA_VISIBLE_DEVICES as the
 * driver does (their UUIDs are the stand-in NVML's), contexts are current per thread, every
 * allocation is tracked (fake_cuda_used() tells a test what the "card"
 * holds), and an allocation past the card fails with OUT_OF_MEMORY as the
 * real driver does. cuGetProcAddress(_v2) maps names as the driver does:
 * "_v2" for versions >= 3020 where one exists, "_ptsz" for the per-thread
 * default stream flag. A kernel launch "runs" synchronously for
 * FAKE_CUDA_BLOCK_US (default 10) microseconds per block and adds the time
 * to a busy counter, kept in the file FAKE_CUDA_BUSY when set (8 bytes,
 * nanoseconds), which the stand-in NVML (tests/gpu/fake_nvml.c) turns into
 * utilisation.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cu_types.h"

enum { OK = 0, INVALID_VALUE = 1, OOM = 2, NOT_INIT = 3, INVALID_CTX = 201, NOT_FOUND = 500 };

#define MAX_ALLOC 65536
#define MAX_DEV 8
struct ctx { int dev; };
struct alloc { uint64_t key; int kind, dev; uint64_t bytes; int holds, maps; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc allocs[MAX_ALLOC];
static uint64_t used[MAX_DEV], peak[MAX_DEV], host_used, next_addr = 0x7f0000000000ULL, next_handle = 1;
static struct ctx ctxs[MAX_DEV];
static __thread struct ctx *cur;
static int inited;
static uint64_t *busy;

/* The physical devices: FAKE_CUDA_DEVICES, default 2. */
static int n_phys(void)
{
    const char *s = getenv("FAKE_CUDA_DEVICES");
    int n = s ? atoi(s) : 2;
    return n < 1 ? 1 : n > MAX_DEV ? MAX_DEV : n;
}

/* Physical device p's UUID, as NVML writes it (tests/gpu/fake_nvml.c names
 * the same GPUs): GPU-fa4e0000-0000-4000-8000-00000000000<p>, unless
 * CUDA_VISIBLE_DEVICES named it by another (below). */
static unsigned char adopted[MAX_DEV][16];
static int is_adopted[MAX_DEV];
static void phys_uuid(int p, unsigned char u[16])
{
    static const unsigned char base[16] = {0xfa, 0x4e, 0, 0, 0, 0, 0x40, 0, 0x80, 0};
    memcpy(u, base, 16);
    u[15] = (unsigned char)p;
    if (p >= 0 && p < MAX_DEV && is_adopted[p])
        memcpy(u, adopted[p], 16);
}

/* "GPU-" and 32 hex digits (dashes anywhere) into 16 bytes; 0 or -1. */
static int parse_uuid(const char *e, unsigned char u[16])
{
    int n = 0;
    if (strncmp(e, "GPU-", 4) != 0)
        return -1;
    for (e += 4; *e && n < 32; e++) {
        int v = *e >= '0' && *e <= '9' ? *e - '0' : *e >= 'a' && *e <= 'f' ? *e - 'a' + 10
              : *e >= 'A' && *e <= 'F' ? *e - 'A' + 10 : *e == '-' ? -2 : -1;
        if (v == -2)
            continue;
        if (v < 0)
            return -1;
        u[n / 2] = (unsigned char)(n % 2 ? (u[n / 2] | v) : v << 4);
        n++;
    }
    return n == 32 && !*e ? 0 : -1;
}

/* The ordinals, as the driver reads CUDA_VISIBLE_DEVICES: indices or UUIDs
 * (a unique prefix will do) of physical devices, in the order given; an
 * entry that names none ends the list. phys[ordinal] = physical device. */
static int phys[MAX_DEV], n_ord = -1;
static pthread_once_t vis_once = PTHREAD_ONCE_INIT;
static void vis_init(void)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    n_ord = 0;
    if (!v) {
        for (; n_ord < n_phys(); n_ord++)
            phys[n_ord] = n_ord;
        return;
    }
    while (*v && n_ord < MAX_DEV) {
        size_t len = strcspn(v, ",");
        char e[80];
        int p = -1;
        snprintf(e, sizeof e, "%.*s", (int)(len < sizeof e ? len : sizeof e - 1), v);
        if (e[0] >= '0' && e[0] <= '9') {
            p = atoi(e) < n_phys() ? atoi(e) : -1;
        } else {
            for (int i = 0; i < n_phys() && p < 0; i++) {
                unsigned char u[16];
                char s[48];
                phys_uuid(i, u);
                snprintf(s, sizeof s,
                         "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                         u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
                         u[11], u[12], u[13], u[14], u[15]);
                if (e[0] && strncmp(s, e, strlen(e)) == 0)
                    p = i;
            }
            /* a GPU the stand-in does not know by that UUID (a container's
             * GPU as a test cluster named it): the next physical device
             * not named yet takes it */
            unsigned char u[16];
            for (int i = 0; p < 0 && i < n_phys() && parse_uuid(e, u) == 0; i++) {
                int taken = 0;
                for (int k = 0; k < n_ord; k++)
                    taken |= phys[k] == i;
                if (!taken) {
                    memcpy(adopted[i], u, 16);
                    is_adopted[i] = 1;
                    p = i;
                }
            }
        }
        if (p < 0)
            break;
        phys[n_ord++] = p;
        v += len + (v[len] == ',');
    }
}
static int n_dev(void)
{
    pthread_once(&vis_once, vis_init);
    return n_ord;
}

static uint64_t card_bytes(void)
{
    const char *s = getenv("FAKE_CUDA_MEM_MIB");
    return (uint64_t)(s ? atoll(s) : 1024) << 20;
}

__attribute__((visibility("default"))) uint64_t fake_cuda_used(int dev)
{
    return dev >= 0 && dev < MAX_DEV ? used[dev] : host_used;
}

/* The most the card held at once in this process. */
__attribute__((visibility("default"))) uint64_t fake_cuda_peak(int dev)
{
    return dev >= 0 && dev < MAX_DEV ? peak[dev] : 0;
}

CUresult cuInit(unsigned flags)
{
    (void)flags;
    inited = 1;
    const char *f = getenv("FAKE_CUDA_BUSY");
    if (f && !busy) {
        int fd = open(f, O_RDWR | O_CREAT, 0644);
        if (fd >= 0 && ftruncate(fd, 8) == 0) {
            void *m = mmap(NULL, 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            busy = m == MAP_FAILED ? NULL : m;
        }
        if (fd >= 0)
            close(fd);
    }
    return OK;
}
CUresult cuDriverGetVersion(int *v) { *v = 12040; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = n_dev(); return inited ? OK : NOT_INIT; }
CUresult cuDeviceGet(int *d, int ord) { if (ord < 0 || ord >= n_dev()) return INVALID_VALUE; *d = ord; return OK; }
CUresult cuDevicePrimaryCtxRetain(void **c, int dev)
{
    if (!inited) return NOT_INIT;
    if (dev < 0 || dev >= n_dev()) return INVALID_VALUE;
    ctxs[dev].dev = dev;
    *c = &ctxs[dev];
    return OK;
}
CUresult cuCtxSetCurrent(void *c) { cur = c; return OK; }
CUresult cuCtxGetCurrent(void **c) { *c = cur; return OK; }
CUresult cuCtxGetDevice(int *d)
{
    if (!cur) return INVALID_CTX;
    *d = cur->dev;
    return OK;
}

static CUresult take(int dev, uint64_t n, int kind, unsigned long long *key)
{
    CUresult rc = OOM;
    pthread_mutex_lock(&mu);
    uint64_t *pool = dev >= 0 ? &used[dev] : &host_used;
    if (n == 0)
        rc = INVALID_VALUE;
    else if (dev >= 0 && *pool + n > card_bytes())
        rc = OOM;
    else {
        for (int i = 0; i < MAX_ALLOC; i++)
            if (!allocs[i].kind) {
                *key = kind == 2 ? next_handle++ : next_addr;
                if (kind != 2)
                    next_addr += (n + 0xfffff) & ~0xfffffULL;
                allocs[i] = (struct alloc){*key, kind, dev, n, 1, 0};
                *pool += n;
                if (dev >= 0 && used[dev] > peak[dev])
                    peak[dev] = used[dev];
                rc = OK;
                break;
            }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static CUresult give(uint64_t key, int kind)
{
    CUresult rc = INVALID_VALUE;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_ALLOC; i++)
        if (allocs[i].kind == kind && allocs[i].key == key) {
            if (allocs[i].dev >= 0)
                used[allocs[i].dev] -= allocs[i].bytes;
            else
                host_used -= allocs[i].bytes;
            allocs[i].kind = 0;
            rc = OK;
            break;
        }
    pthread_mutex_unlock(&mu);
    return rc;
}

static CUresult on_ctx(uint64_t n, int kind, unsigned long long *key)
{
    if (!cur) return INVALID_CTX;
    return take(phys[cur->dev], n, kind, key);
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return on_ctx(n, 1, p); }
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e)
{
    (void)e;
    *pitch = (w + 511) / 512 * 512;
    return on_ctx(*pitch * h, 1, p);
}
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f) { (void)f; return on_ctx(n, 1, p); }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *s) { (void)s; return on_ctx(n, 1, p); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, void *s) { (void)s; return on_ctx(n, 1, p); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, void *s)
{
    (void)pool; (void)s;
    return on_ctx(n, 1, p);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, void *pool, void *s)
{
    (void)pool; (void)s;
    return on_ctx(n, 1, p);
}
CUresult cuMemFree_v2(CUdeviceptr p) { return give(p, 1); }
CUresult cuMemFreeAsync(CUdeviceptr p, void *s) { (void)s; return give(p, 1); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, void *s) { (void)s; return give(p, 1); }
CUresult cuMemCreate(handle_t *h, size_t n, const prop_t *prop, unsigned long long flags)
{
    (void)flags;
    if (!inited) return NOT_INIT;
    if (!prop) return INVALID_VALUE;
    /* no context needed: the location says where */
    if (prop->location.type == 1) {
        if (prop->location.id < 0 || prop->location.id >= n_dev()) return INVALID_VALUE;
        return take(phys[prop->location.id], n, 2, h);
    }
    if (prop->location.type >= 2 && prop->location.type <= 4)
        return take(-1, n, 2, h);
    return INVALID_VALUE;
}

/* A handle's memory is freed once the handle (and every handle retained
 * from a mapping) is released and no mapping of it is left. */
#define MAX_MAP 1024
static struct { uint64_t va, n, h; int on; } maps[MAX_MAP];

static struct alloc *handle_locked(uint64_t h)
{
    for (int i = 0; i < MAX_ALLOC; i++)
        if (allocs[i].kind == 2 && allocs[i].key == h)
            return &allocs[i];
    return NULL;
}

static void settle_locked(struct alloc *a)
{
    if (a->holds || a->maps)
        return;
    if (a->dev >= 0)
        used[a->dev] -= a->bytes;
    else
        host_used -= a->bytes;
    a->kind = 0;
}

CUresult cuMemRelease(handle_t h)
{
    CUresult rc = INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct alloc *a = handle_locked(h);
    if (a && a->holds) {
        a->holds--;
        settle_locked(a);
        rc = OK;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}
CUresult cuMemMap(CUdeviceptr va, size_t n, size_t off, handle_t h, unsigned long long flags)
{
    CUresult rc = INVALID_VALUE;
    (void)flags;
    pthread_mutex_lock(&mu);
    struct alloc *a = handle_locked(h);
    int slot = -1;
    for (int i = 0; i < MAX_MAP; i++) {
        if (!maps[i].on)
            slot = slot < 0 ? i : slot;
        else if (va < maps[i].va + maps[i].n && maps[i].va < va + n)
            slot = MAX_MAP; /* overlaps a mapping */
    }
    if (a && a->holds && n && off + n <= a->bytes && slot >= 0 && slot < MAX_MAP) {
        maps[slot].va = va;
        maps[slot].n = n;
        maps[slot].h = h;
        maps[slot].on = 1;
        a->maps++;
        rc = OK;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}
CUresult cuMemUnmap(CUdeviceptr va, size_t n)
{
    CUresult rc = INVALID_VALUE;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_MAP; i++)
        if (maps[i].on && maps[i].va >= va && maps[i].va + maps[i].n <= va + n) {
            struct alloc *a = handle_locked(maps[i].h);
            maps[i].on = 0;
            if (a) {
                a->maps--;
                settle_locked(a);
            }
            rc = OK;
        }
    pthread_mutex_unlock(&mu);
    return rc;
}
CUresult cuMemRetainAllocationHandle(handle_t *h, void *addr)
{
    CUresult rc = INVALID_VALUE;
    uint64_t at = (uint64_t)(uintptr_t)addr;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_MAP && rc; i++)
        if (maps[i].on && at >= maps[i].va && at - maps[i].va < maps[i].n) {
            struct alloc *a = handle_locked(maps[i].h);
            if (a) {
                a->holds++;
                *h = maps[i].h;
                rc = OK;
            }
        }
    pthread_mutex_unlock(&mu);
    return rc;
}

static uint64_t elem(int fmt) { return fmt == 1 || fmt == 8 ? 1 : fmt == 2 || fmt == 9 || fmt == 16 ? 2 : 4; }
CUresult cuArrayCreate_v2(void **a, const desc_t *d)
{
    unsigned long long k;
    CUresult rc = on_ctx(d->w * (d->h ? d->h : 1) * elem(d->fmt) * d->ch, 3, &k);
    if (rc == OK) *a = (void *)(uintptr_t)k;
    return rc;
}
CUresult cuArray3DCreate_v2(void **a, const desc3_t *d)
{
    unsigned long long k;
    CUresult rc = on_ctx(d->w * (d->h ? d->h : 1) * (d->d ? d->d : 1) * elem(d->fmt) * d->ch, 3, &k);
    if (rc == OK) *a = (void *)(uintptr_t)k;
    return rc;
}
CUresult cuMipmappedArrayCreate(void **a, const desc3_t *d, unsigned levels)
{
    unsigned long long k; uint64_t n = 0;
    size_t w = d->w, h = d->h, z = d->d;
    for (unsigned l = 0; l < levels; l++) {
        n += w * (h ? h : 1) * (z ? z : 1) * elem(d->fmt) * d->ch;
        w = w > 1 ? w / 2 : w; h = h > 1 ? h / 2 : h; z = z > 1 ? z / 2 : z;
    }
    CUresult rc = on_ctx(n, 4, &k);
    if (rc == OK) *a = (void *)(uintptr_t)k;
    return rc;
}
CUresult cuArrayDestroy(void *a) { return give((uint64_t)(uintptr_t)a, 3); }
CUresult cuMipmappedArrayDestroy(void *a) { return give((uint64_t)(uintptr_t)a, 4); }

CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
    if (!cur) return INVALID_CTX;
    *total = card_bytes();
    *free_b = card_bytes() - used[phys[cur->dev]];
    return OK;
}
CUresult cuDeviceGetUuid_v2(unsigned char *u, int dev)
{
    if (!inited) return NOT_INIT;
    if (!u || dev < 0 || dev >= n_dev()) return INVALID_VALUE;
    phys_uuid(phys[dev], u);
    return OK;
}
CUresult cuDeviceGetUuid(unsigned char *u, int dev) { return cuDeviceGetUuid_v2(u, dev); }
CUresult cuDeviceTotalMem_v2(size_t *b, int dev)
{
    if (dev < 0 || dev >= n_dev()) return INVALID_VALUE;
    *b = card_bytes();
    return OK;
}

static CUresult run(uint64_t blocks)
{
    if (!cur) return INVALID_CTX;
    const char *s = getenv("FAKE_CUDA_BLOCK_US");
    struct timespec a, b, d;
    uint64_t us = blocks * (uint64_t)(s ? atoi(s) : 10);
    d.tv_sec = (time_t)(us / 1000000);
    d.tv_nsec = (long)(us % 1000000) * 1000;
    clock_gettime(CLOCK_MONOTONIC, &a);
    nanosleep(&d, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (busy)
        __atomic_add_fetch(busy, (uint64_t)((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec)),
                           __ATOMIC_RELAXED);
    return OK;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shm, void *s, void **p, void **e)
{
    (void)f; (void)bx; (void)by; (void)bz; (void)shm; (void)s; (void)p; (void)e;
    return run((uint64_t)gx * gy * gz);
}
CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shm, void *s, void **p, void **e)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, p, e);
}
CUresult cuLaunchKernelEx(const launch_cfg_t *c, void *f, void **p, void **e)
{
    (void)f; (void)p; (void)e;
    return run((uint64_t)c->gx * c->gy * c->gz);
}
CUresult cuLaunchKernelEx_ptsz(const launch_cfg_t *c, void *f, void **p, void **e)
{
    return cuLaunchKernelEx(c, f, p, e);
}
CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned shm, void *s, void **p)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, p, NULL);
}
CUresult cuLaunchCooperativeKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned shm,
                                        void *s, void **p)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, p, NULL);
}
CUresult cuGraphLaunch(void *g, void *s) { (void)g; (void)s; return run(100); }
CUresult cuGraphLaunch_ptsz(void *g, void *s) { (void)g; (void)s; return run(100); }

/* ---- cuGetProcAddress ------------------------------------------------- */

#define E(n) {#n, (void *)n}
static const struct { const char *name; void *fn; } table[] = {
    E(cuInit), E(cuDriverGetVersion), E(cuDeviceGetCount), E(cuDeviceGet),
    E(cuDevicePrimaryCtxRetain), E(cuCtxSetCurrent), E(cuCtxGetCurrent), E(cuCtxGetDevice),
    E(cuDeviceGetUuid), E(cuDeviceGetUuid_v2),
    E(cuMemAlloc_v2), E(cuMemAllocPitch_v2), E(cuMemAllocManaged), E(cuMemAllocAsync),
    E(cuMemAllocAsync_ptsz), E(cuMemAllocFromPoolAsync), E(cuMemAllocFromPoolAsync_ptsz),
    E(cuMemFree_v2), E(cuMemFreeAsync), E(cuMemFreeAsync_ptsz), E(cuMemCreate), E(cuMemRelease),
    E(cuMemMap), E(cuMemUnmap), E(cuMemRetainAllocationHandle),
    E(cuArrayCreate_v2), E(cuArray3DCreate_v2), E(cuMipmappedArrayCreate), E(cuArrayDestroy),
    E(cuMipmappedArrayDestroy), E(cuMemGetInfo_v2), E(cuDeviceTotalMem_v2), E(cuLaunchKernel),
    E(cuLaunchKernel_ptsz), E(cuLaunchKernelEx), E(cuLaunchKernelEx_ptsz),
    E(cuLaunchCooperativeKernel), E(cuLaunchCooperativeKernel_ptsz), E(cuGraphLaunch),
    E(cuGraphLaunch_ptsz), {"cuGetProcAddress", NULL}, {"cuGetProcAddress_v2", NULL},
};

static void *lookup(const char *name)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, name) == 0)
            return table[i].fn;
    return NULL;
}

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags,
                             int *status);
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags);

static CUresult gpa(const char *sym, void **pfn, int ver, unsigned long long flags)
{
    char n[128];
    void *p = NULL;
    if (!sym || !pfn || strlen(sym) > 100)
        return INVALID_VALUE;
    if (strcmp(sym, "cuGetProcAddress") == 0)
        p = ver >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
    if (!p && (flags & 2)) {
        snprintf(n, sizeof n, "%s_ptsz", sym);
        p = lookup(n);
    }
    if (!p && ver >= 3020) {
        snprintf(n, sizeof n, "%s_v2", sym);
        p = lookup(n);
    }
    if (!p)
        p = lookup(sym);
    *pfn = p;
    return p ? OK : NOT_FOUND;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags)
{
    return gpa(sym, pfn, ver, flags);
}
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags,
                             int *status)
{
    CUresult rc = gpa(sym, pfn, ver, flags);
    if (status)
        *status = rc == OK ? 0 : 1;
    return rc;
}
