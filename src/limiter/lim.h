/*
 * limiter/lim.h - what the modules of libgpusched-cuda.so share: the
 * configuration, the ledger, the table of hooked entry points and their real
 * counterparts, the record of live allocations, and the one-time warning.
 *
 * The library is preloaded into every process of a container (also through
 * /etc/ld.so.preload), most of which never touch a GPU, so nothing happens
 * at load time: there is no constructor. The environment is read on the
 * first interposed call (pthread_once), the ledger opened on the first
 * allocation. Internal to the library; nothing here is exported.
 */
#ifndef GPUSCHED_LIM_H
#define GPUSCHED_LIM_H

#include <stdint.h>

#include "limiter/lim_api.h"
#include "limiter/lim_env.h"

#define LIM_EXPORT __attribute__((visibility("default")))

/* Every interposed entry point: exported name, the name cuGetProcAddress
 * is asked with, the least CUDA version that maps that name to it, and
 * whether it is a per-thread-default-stream variant or an NVML function. */
enum lim_hook_kind { LIM_PLAIN, LIM_PTSZ, LIM_NVML };
#define LIM_CUDA_HOOKS(X)                                                      \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, LIM_PLAIN)                                       \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, LIM_PLAIN)                             \
    X(cuMemAllocManaged, "cuMemAllocManaged", 0, LIM_PLAIN)                               \
    X(cuMemAllocAsync, "cuMemAllocAsync", 0, LIM_PLAIN)                                   \
    X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 0, LIM_PTSZ)                              \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 0, LIM_PLAIN)                   \
    X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 0, LIM_PTSZ)              \
    X(cuMemFree_v2, "cuMemFree", 3020, LIM_PLAIN)                                         \
    X(cuMemFreeAsync, "cuMemFreeAsync", 0, LIM_PLAIN)                                     \
    X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 0, LIM_PTSZ)                                \
    X(cuMemCreate, "cuMemCreate", 0, LIM_PLAIN)                                           \
    X(cuMemRelease, "cuMemRelease", 0, LIM_PLAIN)                                         \
    X(cuMemMap, "cuMemMap", 0, LIM_PLAIN)                                                 \
    X(cuMemUnmap, "cuMemUnmap", 0, LIM_PLAIN)                                             \
    X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 0, LIM_PLAIN)           \
    X(cuArrayCreate_v2, "cuArrayCreate", 3020, LIM_PLAIN)                                 \
    X(cuArray3DCreate_v2, "cuArray3DCreate", 3020, LIM_PLAIN)                             \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 0, LIM_PLAIN)                     \
    X(cuArrayDestroy, "cuArrayDestroy", 0, LIM_PLAIN)                                     \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 0, LIM_PLAIN)                   \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, LIM_PLAIN)                                   \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, LIM_PLAIN)                           \
    X(cuLaunchKernel, "cuLaunchKernel", 0, LIM_PLAIN)                                     \
    X(cuLaunchKernel_ptsz, "cuLaunchKernel", 0, LIM_PTSZ)                                \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", 0, LIM_PLAIN)                                 \
    X(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 0, LIM_PTSZ)                            \
    X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 0, LIM_PLAIN)               \
    X(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 0, LIM_PTSZ)          \
    X(cuGraphLaunch, "cuGraphLaunch", 0, LIM_PLAIN)                                       \
    X(cuGraphLaunch_ptsz, "cuGraphLaunch", 0, LIM_PTSZ)                                  \
    X(cuGetProcAddress, "cuGetProcAddress", 0, LIM_PLAIN)                                 \
    X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, LIM_PLAIN)                          \
    X(nvmlDeviceGetMemoryInfo, "", 0, LIM_NVML)                                          \
    X(nvmlDeviceGetMemoryInfo_v2, "", 0, LIM_NVML)

enum lim_id {
#define X(name, base, ver, kind) LIM_##name,
    LIM_CUDA_HOOKS(X)
#undef X
    LIM_N_HOOKS
};

/* Helpers the wrappers call but do not replace. */
enum lim_helper {
    LIM_H_cuCtxGetDevice,
    LIM_H_nvmlDeviceGetIndex,
    LIM_N_HELPERS
};

struct lim_state {
    int active;      /* a limit is set and parsed */
    struct lim_cfg cfg;
};

/* The configuration, read once from the environment on first use. */
const struct lim_state *lim_state(void);

/* The real function behind hook `id` (resolved lazily), NULL if none. */
void *lim_real(enum lim_id id);
void *lim_helper(enum lim_helper h);
/* Any other driver (nvml = 0) or NVML (nvml = 1) function, uncached. */
void *lim_sym(const char *name, int nvml);

/* What cuGetProcAddress returned for `sym`, replaced by the wrapper when
 * it is a hooked function (and limits are on). */
void *lim_map_proc(const char *sym, void *p, int ver, cuuint64_t flags);

/* Devices are counted by the container's numbering: the position of the
 * GPU in GPUSCHED_GPU_UUIDS (Allocate's order), so that every process of
 * the container agrees whatever CUDA_VISIBLE_DEVICES it set for itself;
 * without the list, CUDA's ordinal. lim_dev_index maps CUDA ordinal ord
 * (-1 past LIM_MAX_DEV); lim_uuid_index a UUID (-1: not the container's);
 * lim_cur_dev sets *dev to the index of the calling thread's current
 * context's device: 0 or -1. */
int lim_dev_index(CUdevice ord);
int lim_uuid_index(const char *uuid);
int lim_cur_dev(CUdevice *dev);

/* Memory accounting: reserve before the real allocation (0 = go ahead,
 * 1 = over the limit, -1 = not counted: no limit on that device or the
 * ledger is unusable), commit or undo after it. */
int lim_mem_reserve(int dev, uint64_t bytes);
void lim_mem_undo(int dev, uint64_t bytes);
uint64_t lim_mem_used(int dev);
uint64_t lim_mem_limit(int dev); /* 0 = none */
/* Puts this process in the container's ledger (lim_ledger_claim) so that
 * the device plugin can find its GPU work; once per process. */
void lim_proc_register(void);

/* Live allocations: kind tells address spaces apart. An entry holds one
 * reference when put; aux is the caller's (a mapping's handle). */
enum lim_kind { LIM_K_PTR = 1, LIM_K_HANDLE, LIM_K_ARRAY, LIM_K_MIPMAP, LIM_K_MAP };
void lim_track_put(int kind, uint64_t key, int dev, uint64_t bytes, uint64_t aux);
/* Removes the entry whatever its references: 1 = found (aux may be NULL). */
int lim_track_take(int kind, uint64_t key, int *dev, uint64_t *bytes, uint64_t *aux);
/* Adds delta to the entry's references: -1 = no such entry, 0 = still
 * referenced, 1 = none left (the entry is removed; *dev and *bytes set). */
int lim_track_ref(int kind, uint64_t key, int delta, int *dev, uint64_t *bytes);

/* The NVML device of device index d (lim.h: through GPUSCHED_GPU_UUIDS, or
 * CUDA_VISIBLE_DEVICES as in lim_nvml.c): 0 or -1. */
int lim_nvml_handle(int d, nvmlDevice_t *out);

/* Compute: wait as the share requires before a launch of `cost` blocks. */
void lim_throttle(uint64_t cost);

/* Prints "gpusched-limiter: <msg>" on stderr once per distinct key. */
void lim_warn_once(int key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
enum { LIM_W_ENV, LIM_W_LEDGER, LIM_W_SLOTS, LIM_W_NVML, LIM_W_TRACK, LIM_W_NREAL, LIM_W_UUID, LIM_W_MAX };

#endif
