/*
 * limiter/lim_nvml.c - NVML reports the share, so nvidia-smi (and pynvml)
 * inside the container show the container's memory: total = the limit (at
 * most the card), used = the container's ledger, free = the rest.
 *
 * NVML names GPUs by index; the limiter counts by the container's device
 * index (lim.h): an NVML device's position in GPUSCHED_GPU_UUIDS, found by
 * its UUID. Without that list, by CUDA device ordinal: CUDA's ordinals
 * follow CUDA_VISIBLE_DEVICES, which Allocate sets to the GPUs' UUIDs in
 * assignment order, while NVML enumerates by PCI bus: the ordinal of an
 * NVML device is its position in CUDA_VISIBLE_DEVICES (by UUID, or by index
 * for numeric entries), else its NVML index.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "limiter/lim.h"

#define VIS_MAX 16
#define VIS_LEN 96

static char g_vis[VIS_MAX][VIS_LEN];
static int g_n_vis;
static pthread_once_t g_vis_once = PTHREAD_ONCE_INIT;

static void vis_init(void)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    while (v && *v && g_n_vis < VIS_MAX) {
        size_t len = strcspn(v, ",");
        if (len > 0 && len < VIS_LEN) {
            memcpy(g_vis[g_n_vis], v, len);
            g_vis[g_n_vis][len] = '\0';
        }
        g_n_vis++; /* an unusable entry keeps its position */
        v += len + (v[len] == ',');
    }
}

/* The device index (lim.h) of NVML device `dev` (NVML index `idx`), -1
 * when it is not one of the container's. */
static int dev_index(nvmlDevice_t dev, unsigned idx)
{
    static nvmlReturn_t (*uuid_fn)(nvmlDevice_t, char *, unsigned);
    char uuid[VIS_LEN] = "";
    pthread_once(&g_vis_once, vis_init);
    if (!__atomic_load_n(&uuid_fn, __ATOMIC_ACQUIRE))
        __atomic_store_n(&uuid_fn, (nvmlReturn_t(*)(nvmlDevice_t, char *, unsigned))lim_sym(
                             "nvmlDeviceGetUUID", 1), __ATOMIC_RELEASE);
    if (uuid_fn && uuid_fn(dev, uuid, sizeof uuid) != 0)
        uuid[0] = '\0';
    if (lim_state()->cfg.n_uuids) /* Allocate's list, whatever this process sees */
        return lim_uuid_index(uuid);
    for (int k = 0; k < g_n_vis; k++) {
        const char *e = g_vis[k];
        if (!e[0])
            continue;
        if (e[0] >= '0' && e[0] <= '9') {
            char *end;
            unsigned long n = strtoul(e, &end, 10);
            if (!*end && n == idx)
                return k;
        } else if (uuid[0] && strncmp(uuid, e, strlen(e)) == 0) {
            return k; /* CUDA also takes a unique prefix of the UUID */
        }
    }
    return g_n_vis ? -1 : (int)idx;
}

int lim_nvml_handle(int d, nvmlDevice_t *out)
{
    const struct lim_state *st = lim_state();
    int cuda_dev = d;
    static nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
    static nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *);
    pthread_once(&g_vis_once, vis_init);
    if (!__atomic_load_n(&by_index, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&by_uuid, (nvmlReturn_t(*)(const char *, nvmlDevice_t *))lim_sym(
                             "nvmlDeviceGetHandleByUUID", 1), __ATOMIC_RELEASE);
        __atomic_store_n(&by_index, (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))lim_sym(
                             "nvmlDeviceGetHandleByIndex_v2", 1), __ATOMIC_RELEASE);
    }
    if (!by_index || cuda_dev < 0)
        return -1;
    if (st->cfg.n_uuids)
        return d < st->cfg.n_uuids && by_uuid && by_uuid(st->cfg.uuids[d], out) == 0 ? 0 : -1;
    if (cuda_dev >= g_n_vis)
        return g_n_vis ? -1 : (by_index((unsigned)cuda_dev, out) == 0 ? 0 : -1);
    const char *e = g_vis[cuda_dev];
    if (e[0] >= '0' && e[0] <= '9')
        return by_index((unsigned)strtoul(e, NULL, 10), out) == 0 ? 0 : -1;
    return e[0] && by_uuid && by_uuid(e, out) == 0 ? 0 : -1;
}

static int share(nvmlDevice_t dev, unsigned long long *total, unsigned long long *used)
{
    nvmlReturn_t (*idx)(nvmlDevice_t, unsigned *) =
        (nvmlReturn_t(*)(nvmlDevice_t, unsigned *))lim_helper(LIM_H_nvmlDeviceGetIndex);
    unsigned i;
    int d;
    uint64_t lim;
    if (!lim_state()->cfg.mem_on || !idx || idx(dev, &i) != 0 ||
        (d = dev_index(dev, i)) < 0 || d >= LIM_MAX_DEV || !(lim = lim_mem_limit(d)))
        return 0;
    if (lim < *total)
        *total = lim;
    *used = lim_mem_used(d);
    if (*used > *total)
        *used = *total;
    return 1;
}

LIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m)
{
    nvmlReturn_t (*f)(nvmlDevice_t, nvmlMemory_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))lim_real(LIM_nvmlDeviceGetMemoryInfo);
    if (!f)
        return 1; /* NVML_ERROR_UNINITIALIZED */
    nvmlReturn_t rc = f(dev, m);
    if (rc == 0 && m && share(dev, &m->total, &m->used))
        m->free = m->total - m->used;
    return rc;
}

LIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m)
{
    nvmlReturn_t (*f)(nvmlDevice_t, nvmlMemory_v2_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_v2_t *))lim_real(LIM_nvmlDeviceGetMemoryInfo_v2);
    if (!f)
        return 1;
    nvmlReturn_t rc = f(dev, m);
    if (rc == 0 && m && share(dev, &m->total, &m->used)) {
        unsigned long long rest = m->total - m->used;
        if (m->reserved > rest)
            m->reserved = rest;
        m->free = rest - m->reserved;
    }
    return rc;
}
