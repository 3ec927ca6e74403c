/*
 * tests/gpu/fake_nvml.c - a stand-in libnvidia-ml.so.1 for CI, which has no GPU.
 *
 * The device plugin's NVML backend (src/dp/nvml.c) dlopens the driver's
 * library. This file, built as a shared library by
 * tests/blackbox/test_device_plugin_nvml.py, exports the same symbols with
 * the NVML API's signatures and struct layouts (written here independently
 * of src/dp/nvml.c, from the NVML reference) so that the backend's real code
 * path runs in CI: discovery, PCI/NUMA, MIG, topology, NVLink, events, probes.
 *
 * It models two H100s, NVLinked (4 links) and on one PCIe switch, plus a
 * third GPU in MIG mode with one 1g.10gb instance. Control files, named by
 * environment variables:
 *   FAKE_NVML_XID   "<gpu index> <xid> [<gi> <ci>]": the next
 *                   nvmlEventSetWait_v2 returns that XID event (on the MIG
 *                   instance of those GPU / compute instance ids, as NVML
 *                   names one: the GPU's handle and the ids), then the file
 *                   is removed. The MIG instances have GPU instance ids 7
 *                   and 9, compute instance id 0; "<gpu index> dbe": a
 *                   double-bit ECC event instead, if the GPU was registered
 *                   for those;
 *   FAKE_NVML_LOST  while it exists, GPU 1 answers GPU_IS_LOST, cannot be
 *                   registered for events, and an event set holding it
 *                   fails every wait;
 *   FAKE_NVML_WAIT_FAIL  while it exists, nvmlEventSetWait_v2 fails;
 *   FAKE_NVML_CREATE_FAIL  while it exists, nvmlEventSetCreate fails;
 *   FAKE_NVML_MIG_FAIL  while it exists, GPU 2's MIG mode query fails
 *                   (NVML_ERROR_UNKNOWN);
 *   FAKE_NVML_MIG_LIST  "count": GPU 2's MIG device count fails
 *                   (NVML_ERROR_UNKNOWN); "empty": GPU 2 has no MIG
 *                   device; "uuid": the UUID of its first one fails;
 *   FAKE_NVML_HANG  while it exists, nvmlDeviceGetMemoryInfo of GPU 1 does
 *                   not return (a GPU whose queries hang);
 *   FAKE_CUDA_BUSY  the busy-time file of the stand-in libcuda.so.1
 *                   (tests/limiter/fake_cuda.c): the utilisation of GPU
 *                   FAKE_NVML_BUSY_GPU (default 0) is the share of wall
 *                   time it grew by since the previous query in this
 *                   process (the limiter's tests); other GPUs are idle.
 *   FAKE_NVML_EXTRA_BUSY  a percent added to that utilisation (a busy
 *                   neighbour on the GPU);
 *   FAKE_NVML_UTIL_LAG  when set, each query answers the previous one's
 *                   utilisation, and the first one 3 %: a real GPU's
 *                   figure is that of its last sampling period, from
 *                   before the container started when first read;
 *   FAKE_NVML_PROCS lines "<gpu index> <pid> <sm %>": each
 *                   nvmlDeviceGetProcessUtilization answers one sample per
 *                   line of its GPU, stamped now (none: NOT_FOUND).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int ret_t;
enum { OK = 0, INVALID_ARG = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6, TIMEOUT = 10, GPU_LOST = 15 };

/* FAKE_NVML_MIG_LIST's word, "" without one */
static const char *mig_list(char *buf, size_t cap)
{
    const char *f = getenv("FAKE_NVML_MIG_LIST");
    FILE *fp = f ? fopen(f, "r") : NULL;
    buf[0] = 0;
    if (fp) {
        if (!fgets(buf, (int)cap, fp))
            buf[0] = 0;
        buf[strcspn(buf, "\n")] = 0;
        fclose(fp);
    }
    return buf;
}

struct dev {
    int idx, mig_parent, is_mig, slot; /* slot: the MIG device's index on its parent */
};
typedef struct dev *handle_t;

typedef struct {
    unsigned long long total, free, used;
} mem_t;
typedef struct {
    char legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} pci_t;
typedef struct {
    handle_t device;
    unsigned long long type, data;
    unsigned gi, ci;
} event_t;
typedef struct {
    unsigned mp, ce, dec, enc, jpg, ofa, gi_slices, ci_slices;
    unsigned long long mem_mb;
} attr_t;

static struct dev gpus[3] = {{0, -1, 0, 0}, {1, -1, 0, 0}, {2, -1, 0, 0}};
static struct dev mig0 = {2, 2, 1, 0};
/* one compute instance of 1 slice in a GPU instance of 2 ("1c.2g.20gb"):
 * NVIDIA's plugin leaves it out, and so must ours */
static struct dev mig1 = {2, 2, 1, 1};
static int inited;
static unsigned long long registered[3]; /* the event types asked for */

static int lost(const struct dev *d)
{
    const char *f = getenv("FAKE_NVML_LOST");
    return d->idx == 1 && !d->is_mig && f && access(f, F_OK) == 0;
}

ret_t nvmlInit_v2(void) { inited++; return OK; }
ret_t nvmlShutdown(void) { inited--; return OK; }
const char *nvmlErrorString(ret_t r)
{
    return r == GPU_LOST ? "GPU is lost" : r == NOT_SUPPORTED ? "Not Supported" : "fake error";
}
ret_t nvmlSystemGetDriverVersion(char *buf, unsigned len)
{
    snprintf(buf, len, "580.159.04-fake");
    return OK;
}
ret_t nvmlDeviceGetCount_v2(unsigned *n) { *n = 3; return inited ? OK : 1; }
ret_t nvmlDeviceGetHandleByIndex_v2(unsigned i, handle_t *h)
{
    if (i >= 3)
        return INVALID_ARG;
    *h = &gpus[i];
    return OK;
}
ret_t nvmlDeviceGetUUID(handle_t h, char *buf, unsigned len)
{
    char w[16];
    if (lost(h))
        return GPU_LOST;
    if (h->is_mig && h->slot == 0 && strcmp(mig_list(w, sizeof w), "uuid") == 0)
        return 999;
    if (h->is_mig)
        snprintf(buf, len, "MIG-fa4e0000-0000-4000-8000-0000000000%02d", h->idx + 10 * h->slot);
    else
        snprintf(buf, len, "GPU-fa4e0000-0000-4000-8000-00000000000%d", h->idx);
    return OK;
}
ret_t nvmlDeviceGetHandleByUUID(const char *uuid, handle_t *h)
{
    for (int i = 0; i < 3; i++) {
        char u[96];
        nvmlDeviceGetUUID(&gpus[i], u, sizeof u);
        if (strcmp(u, uuid) == 0) {
            *h = &gpus[i];
            return lost(&gpus[i]) ? GPU_LOST : OK;
        }
    }
    return lost(&gpus[1]) && strstr(uuid, "0001") ? GPU_LOST : NOT_FOUND;
}
ret_t nvmlDeviceGetName(handle_t h, char *buf, unsigned len)
{
    snprintf(buf, len, h->idx == 2 ? "NVIDIA A100-SXM4-40GB" : "NVIDIA H100 80GB HBM3");
    return OK;
}
ret_t nvmlDeviceGetMemoryInfo(handle_t h, mem_t *m)
{
    const char *hf = getenv("FAKE_NVML_HANG");
    while (h->idx == 1 && !h->is_mig && hf && access(hf, F_OK) == 0)
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    if (lost(h))
        return GPU_LOST;
    m->total = (h->idx == 2 ? 40960ULL : 81559ULL) << 20;
    m->used = 0;
    m->free = m->total;
    return OK;
}
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} mem2_t;
ret_t nvmlDeviceGetMemoryInfo_v2(handle_t h, mem2_t *m)
{
    mem_t v1;
    ret_t rc = nvmlDeviceGetMemoryInfo(h, &v1);
    if (rc != OK)
        return rc;
    m->total = v1.total;
    m->reserved = 0;
    m->used = v1.used;
    m->free = v1.free;
    return OK;
}
typedef struct {
    unsigned gpu, memory;
} util_t;
ret_t nvmlDeviceGetUtilizationRates(handle_t h, util_t *u)
{
    static unsigned long long prev_busy;
    static double prev_t;
    static unsigned lagged = 3;
    const char *f = getenv("FAKE_CUDA_BUSY");
    unsigned long long b = 0;
    struct timespec ts;
    FILE *fp;

    const char *busy_gpu = getenv("FAKE_NVML_BUSY_GPU");
    u->gpu = u->memory = 0;
    if (h->is_mig || h->idx != (busy_gpu ? atoi(busy_gpu) : 0) || !f || !(fp = fopen(f, "rb")))
        return OK;
    if (fread(&b, sizeof b, 1, fp) != 1)
        b = 0;
    fclose(fp);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (prev_t > 0 && t > prev_t && b >= prev_busy) {
        double pct = (double)(b - prev_busy) / 1e9 / (t - prev_t) * 100.0;
        if (getenv("FAKE_NVML_EXTRA_BUSY"))
            pct += atof(getenv("FAKE_NVML_EXTRA_BUSY"));
        u->gpu = pct > 100 ? 100 : (unsigned)(pct + 0.5);
    }
    if (getenv("FAKE_NVML_UTIL_LAG")) {
        unsigned now_pct = u->gpu;
        u->gpu = lagged;
        lagged = now_pct;
    }
    prev_busy = b;
    prev_t = t;
    return OK;
}
ret_t nvmlDeviceGetMinorNumber(handle_t h, unsigned *m) { *m = (unsigned)h->idx + 4; return OK; }
ret_t nvmlDeviceGetPciInfo_v3(handle_t h, pci_t *p)
{
    if (lost(h))
        return GPU_LOST;
    memset(p, 0, sizeof *p);
    p->bus = 0x19 + (unsigned)h->idx;
    snprintf(p->legacy, sizeof p->legacy, "0000:%02X:00.0", p->bus);
    snprintf(p->bus_id, sizeof p->bus_id, "00000000:%02X:00.0", p->bus);
    p->pci_device_id = 0x233010de;
    return OK;
}
ret_t nvmlDeviceGetIndex(handle_t h, unsigned *i) { *i = (unsigned)h->idx; return OK; }
ret_t nvmlDeviceGetMigMode(handle_t h, unsigned *cur, unsigned *pend)
{
    const char *mf = getenv("FAKE_NVML_MIG_FAIL");
    if (h->idx != 2)
        return NOT_SUPPORTED;
    if (mf && access(mf, F_OK) == 0)
        return 999; /* NVML_ERROR_UNKNOWN */
    *cur = *pend = 1;
    return OK;
}
ret_t nvmlDeviceGetMaxMigDeviceCount(handle_t h, unsigned *n)
{
    char w[16];
    if (h->idx == 2 && strcmp(mig_list(w, sizeof w), "count") == 0)
        return 999;
    *n = h->idx == 2 ? 7 : 0;
    return OK;
}
ret_t nvmlDeviceGetMigDeviceHandleByIndex(handle_t h, unsigned i, handle_t *m)
{
    char w[16];
    if (h->idx != 2 || i > 1 || strcmp(mig_list(w, sizeof w), "empty") == 0)
        return NOT_FOUND;
    *m = i ? &mig1 : &mig0;
    return OK;
}
ret_t nvmlDeviceGetGpuInstanceId(handle_t h, unsigned *id)
{
    if (!h->is_mig)
        return INVALID_ARG;
    *id = h->slot ? 9 : 7;
    return OK;
}
ret_t nvmlDeviceGetComputeInstanceId(handle_t h, unsigned *id) { (void)h; *id = 0; return OK; }
ret_t nvmlDeviceGetAttributes_v2(handle_t h, attr_t *a)
{
    if (!h->is_mig)
        return NOT_SUPPORTED;
    memset(a, 0, sizeof *a);
    a->gi_slices = 1 + h->slot;
    a->ci_slices = 1;
    a->mem_mb = 9856 * (1 + (unsigned long long)h->slot);
    return OK;
}
ret_t nvmlDeviceGetTopologyCommonAncestor(handle_t a, handle_t b, int *level)
{
    *level = (a->idx + b->idx == 1) ? 10 /* one switch */ : 50 /* system */;
    return OK;
}
ret_t nvmlDeviceGetNvLinkState(handle_t h, unsigned link, int *active)
{
    if (h->idx == 2 || link >= 6)
        return NOT_SUPPORTED;
    *active = link < 4; /* links 0-3 up, 4-5 down */
    return OK;
}
ret_t nvmlDeviceGetNvLinkRemotePciInfo_v2(handle_t h, unsigned link, pci_t *p)
{
    (void)link;
    return nvmlDeviceGetPciInfo_v3(&gpus[1 - h->idx], p);
}
ret_t nvmlEventSetCreate(void **set)
{
    static int s;
    const char *cf = getenv("FAKE_NVML_CREATE_FAIL");
    if (cf && access(cf, F_OK) == 0)
        return 999; /* NVML_ERROR_UNKNOWN */
    *set = &s;
    memset(registered, 0, sizeof registered);
    return OK;
}
ret_t nvmlEventSetFree(void *set) { (void)set; return OK; }
ret_t nvmlDeviceGetSupportedEventTypes(handle_t h, unsigned long long *mask)
{
    (void)h;
    *mask = 0xff9f; /* what an H100 reports, in MIG mode too */
    return OK;
}
ret_t nvmlDeviceRegisterEvents(handle_t h, unsigned long long mask, void *set)
{
    (void)set;
    if (h->is_mig || !(mask & 0x8))
        return INVALID_ARG;
    if (lost(h))
        return GPU_LOST;
    registered[h->idx] = mask;
    return OK;
}
ret_t nvmlEventSetWait_v2(void *set, event_t *ev, unsigned timeout_ms)
{
    const char *f = getenv("FAKE_NVML_XID");
    FILE *fp = f ? fopen(f, "r") : NULL;
    int idx, n;
    unsigned long long xid;
    unsigned gi = 0xFFFFFFFFu, ci = 0xFFFFFFFFu;

    (void)set;
    const char *wf = getenv("FAKE_NVML_WAIT_FAIL");
    if (wf && access(wf, F_OK) == 0) {
        if (fp)
            fclose(fp);
        return 999; /* NVML_ERROR_UNKNOWN */
    }
    /* the XID waiting first: the driver reports a GPU's last XID (79), and
     * then fails every wait of a set that holds it */
    if (!fp && registered[1] && lost(&gpus[1]))
        return GPU_LOST;
    if (fp) {
        char kind[8] = "";
        n = fscanf(fp, "%d %llu %u %u", &idx, &xid, &gi, &ci);
        if (n == 1 && fscanf(fp, "%7s", kind) == 1 && strcmp(kind, "dbe") == 0 && idx >= 0 &&
            idx < 3) {
            fclose(fp);
            unlink(f);
            if (!(registered[idx] & 0x2))
                return TIMEOUT; /* not asked for: the driver keeps it */
            memset(ev, 0, sizeof *ev);
            ev->device = &gpus[idx];
            ev->type = 0x2; /* nvmlEventTypeDoubleBitEccError */
            ev->gi = ev->ci = 0xFFFFFFFFu;
            return OK;
        }
        fclose(fp);
        unlink(f);
        if ((n == 2 || n == 4) && idx >= 0 && idx < 3 && registered[idx]) {
            memset(ev, 0, sizeof *ev);
            ev->device = &gpus[idx];
            ev->type = 0x8;
            ev->data = xid;
            ev->gi = gi;
            ev->ci = ci;
            return OK;
        }
    }
    struct timespec ts = {0, (long)(timeout_ms < 100 ? timeout_ms : 100) * 1000000L};
    nanosleep(&ts, NULL);
    return TIMEOUT;
}

typedef struct {
    unsigned pid;
    unsigned long long ts;
    unsigned sm, mem, enc, dec;
} proc_util_t;
ret_t nvmlDeviceGetProcessUtilization(handle_t h, proc_util_t *out, unsigned *n,
                                      unsigned long long last)
{
    const char *f = getenv("FAKE_NVML_PROCS");
    FILE *fp = f ? fopen(f, "r") : NULL;
    struct timespec ts;
    unsigned k = 0;
    int gpu, pid, sm;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long now = (unsigned long long)ts.tv_sec * 1000000ULL +
                             (unsigned long long)ts.tv_nsec / 1000;
    if (!n)
        return INVALID_ARG;
    while (fp && k < *n && fscanf(fp, "%d %d %d", &gpu, &pid, &sm) == 3)
        if (gpu == h->idx && !h->is_mig && now > last) {
            memset(&out[k], 0, sizeof out[k]);
            out[k].pid = (unsigned)pid;
            out[k].ts = now;
            out[k].sm = (unsigned)sm;
            k++;
        }
    if (fp)
        fclose(fp);
    *n = k;
    return k ? OK : NOT_FOUND;
}
