/*
 * limiter/lim_nvml.c - NVML reports the share, so nvidia-smi (and pynvml)
 * inside the container show the container's memory: total = the limit (at
 * most the card), used = the container's ledger, free = the rest.
 *
 * NVML names GPUs by index; the limiter counts by CUDA device ordinal. They
 * agree for the GPUs Allocate hands a container (NVIDIA_VISIBLE_DEVICES
 * and CUDA_VISIBLE_DEVICES list the same GPUs in the same order) unless
 * CUDA_DEVICE_ORDER reorders CUDA's view.
 */
#include "limiter/lim.h"

static int share(nvmlDevice_t dev, unsigned long long *total, unsigned long long *used)
{
    nvmlReturn_t (*idx)(nvmlDevice_t, unsigned *) =
        (nvmlReturn_t(*)(nvmlDevice_t, unsigned *))lim_helper(LIM_H_nvmlDeviceGetIndex);
    unsigned i;
    uint64_t lim;
    if (!lim_state()->cfg.mem_on || !idx || idx(dev, &i) != 0 || i >= LIM_MAX_DEV ||
        !(lim = lim_mem_limit((int)i)))
        return 0;
    if (lim < *total)
        *total = lim;
    *used = lim_mem_used((int)i);
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
