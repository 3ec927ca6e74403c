/*
 * dp/nvml.c - the NVML backend, loaded with dlopen at run time.
 *
 * The binary has no build-time dependency on the NVIDIA driver: the same
 * image runs on GPU nodes and elsewhere. We declare the few NVML types and
 * functions we call ourselves, from the NVML API reference (x86-64 layouts
 * checked with _Static_assert), and always call the versioned symbol names
 * (_v2/_v3): the plain names keep older ABIs with other struct layouts.
 *
 * Functions every driver since R470 exports are required; the MIG, NVLink,
 * topology and attribute functions are optional (a missing one just leaves
 * that part of the inventory out).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/gpu.h"
#include "util/clock.h"

/* ---- NVML declarations (only what we use) --------------------------------- */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_TIMEOUT = 10,
};

#define NVML_EVENT_XID_CRITICAL 0x8ULL
#define NVML_NVLINK_MAX_LINKS 36
#define NVML_DEVICE_BUF 96

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount,
        computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp; /* microseconds */
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t is 24 bytes");
_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32,
               "nvmlProcessUtilizationSample_t is 32 bytes");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t (v2/v3) is 68 bytes");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t is 32 bytes");
_Static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "nvmlDeviceAttributes_t is 40 bytes");

/* X-macro: name, required, return-less prototype arguments. */
#define NVML_FUNCS(X)                                                                            \
    X(nvmlInit_v2, 1, (void))                                                                    \
    X(nvmlShutdown, 1, (void))                                                                   \
    X(nvmlSystemGetDriverVersion, 1, (char *, unsigned))                                         \
    X(nvmlDeviceGetCount_v2, 1, (unsigned *))                                                    \
    X(nvmlDeviceGetHandleByIndex_v2, 1, (unsigned, nvmlDevice_t *))                              \
    X(nvmlDeviceGetHandleByUUID, 1, (const char *, nvmlDevice_t *))                              \
    X(nvmlDeviceGetUUID, 1, (nvmlDevice_t, char *, unsigned))                                    \
    X(nvmlDeviceGetName, 1, (nvmlDevice_t, char *, unsigned))                                    \
    X(nvmlDeviceGetMemoryInfo, 1, (nvmlDevice_t, nvmlMemory_t *))                                \
    X(nvmlDeviceGetMinorNumber, 1, (nvmlDevice_t, unsigned *))                                   \
    X(nvmlDeviceGetPciInfo_v3, 1, (nvmlDevice_t, nvmlPciInfo_t *))                               \
    X(nvmlDeviceGetIndex, 1, (nvmlDevice_t, unsigned *))                                         \
    X(nvmlEventSetCreate, 1, (nvmlEventSet_t *))                                                 \
    X(nvmlEventSetFree, 1, (nvmlEventSet_t))                                                     \
    X(nvmlDeviceGetSupportedEventTypes, 1, (nvmlDevice_t, unsigned long long *))                 \
    X(nvmlDeviceRegisterEvents, 1, (nvmlDevice_t, unsigned long long, nvmlEventSet_t))           \
    X(nvmlEventSetWait_v2, 1, (nvmlEventSet_t, nvmlEventData_t *, unsigned))                     \
    X(nvmlDeviceGetMigMode, 0, (nvmlDevice_t, unsigned *, unsigned *))                           \
    X(nvmlDeviceGetMaxMigDeviceCount, 0, (nvmlDevice_t, unsigned *))                             \
    X(nvmlDeviceGetMigDeviceHandleByIndex, 0, (nvmlDevice_t, unsigned, nvmlDevice_t *))          \
    X(nvmlDeviceGetGpuInstanceId, 0, (nvmlDevice_t, unsigned *))                                 \
    X(nvmlDeviceGetComputeInstanceId, 0, (nvmlDevice_t, unsigned *))                             \
    X(nvmlDeviceGetAttributes_v2, 0, (nvmlDevice_t, nvmlDeviceAttributes_t *))                   \
    X(nvmlDeviceGetTopologyCommonAncestor, 0, (nvmlDevice_t, nvmlDevice_t, int *))               \
    X(nvmlDeviceGetNvLinkState, 0, (nvmlDevice_t, unsigned, int *))                              \
    X(nvmlDeviceGetNvLinkRemotePciInfo_v2, 0, (nvmlDevice_t, unsigned, nvmlPciInfo_t *))      \
    X(nvmlDeviceGetProcessUtilization, 0,                                                        \
      (nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned *, unsigned long long))

struct nvml {
    struct dp_backend b;
    void *dl;
    const char *(*nvmlErrorString)(nvmlReturn_t);
#define X(name, req, args) nvmlReturn_t(*name) args;
    NVML_FUNCS(X)
#undef X
    nvmlEventSet_t events;
    int64_t events_built_ms; /* when the event set was last built */
    int64_t events_tried_ms; /* when the unwatched GPUs were last tried */
    int n;
    unsigned char unwatched[DP_MAX_GPUS]; /* its registration failed (lost) */
    nvmlDevice_t dev[DP_MAX_GPUS];
    char uuid[DP_MAX_GPUS][DP_UUID_MAX];
};

static const char *errstr(struct nvml *v, nvmlReturn_t r)
{
    const char *s = v->nvmlErrorString ? v->nvmlErrorString(r) : NULL;
    return s ? s : "unknown NVML error";
}

/* ---- discovery ------------------------------------------------------------ */

/* "00000000:3B:00.0" -> /sys/bus/pci/devices/0000:3b:00.0/numa_node */
static int numa_of(const char *bus_id)
{
    char path[128], dom[64];
    size_t n = strlen(bus_id);
    int node = -1;

    if (n < 12 || n >= sizeof dom)
        return -1;
    snprintf(dom, sizeof dom, "%s", bus_id + (n > 12 ? 4 : 0));
    for (char *p = dom; *p; p++)
        if (*p >= 'A' && *p <= 'F')
            *p = (char)(*p - 'A' + 'a');
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", dom);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    if (fscanf(f, "%d", &node) != 1 || node < 0)
        node = -1;
    fclose(f);
    return node;
}

/* Registers GPU i's health events in the set; NOT_SUPPORTED (no such
 * events) is not a failure. */
static nvmlReturn_t events_register(struct nvml *v, int i)
{
    unsigned long long sup = 0;
    /* XIDs only, as NVIDIA's plugin: an uncorrectable ECC error comes as
     * its own XID too (48 before Ampere; 94 contained, 95 not, after), and
     * a double-bit ECC event would mark a contained one fatal */
    unsigned long long want = NVML_EVENT_XID_CRITICAL;
    nvmlReturn_t r = v->nvmlDeviceGetSupportedEventTypes(v->dev[i], &sup);
    if (r == NVML_SUCCESS && (sup & want))
        r = v->nvmlDeviceRegisterEvents(v->dev[i], sup & want, v->events);
    v->unwatched[i] = r != NVML_SUCCESS && r != NVML_ERROR_NOT_SUPPORTED;
    return r;
}

/* (Re)builds the event set for the GPUs we have now. A GPU that cannot be
 * registered (lost) is left out, and marked in inv when given. */
static int events_build(struct nvml *v, struct dp_inventory *inv, struct gs_err *e)
{
    nvmlReturn_t r;

    if (v->events)
        v->nvmlEventSetFree(v->events);
    v->events = NULL;
    v->events_built_ms = v->events_tried_ms = (int64_t)(gs_mono_s() * 1000);
    if ((r = v->nvmlEventSetCreate(&v->events)) != NVML_SUCCESS) {
        v->events = NULL;
        return gs_errf(e, GS_EIO, "nvmlEventSetCreate: %s", errstr(v, r));
    }
    for (int i = 0; i < v->n; i++) {
        r = events_register(v, i);
        if (v->unwatched[i] && inv) {
            inv->gpu[i].healthy = 0;
            snprintf(inv->gpu[i].reason, sizeof inv->gpu[i].reason,
                     "cannot watch health events: %s", errstr(v, r));
        }
    }
    return 0;
}

/* The GPUs left out of the set, registered again when they answer (a GPU
 * back after a reset); now and then, as each try on a lost GPU is slow. */
static void events_retry(struct nvml *v, int64_t now)
{
    v->events_tried_ms = now;
    for (int i = 0; i < v->n; i++)
        if (v->unwatched[i])
            events_register(v, i);
}

static void discover_mig(struct nvml *v, nvmlDevice_t d, struct dp_gpu *g)
{
    unsigned cur = 0, pend = 0, max = 0;

    nvmlReturn_t r = v->nvmlDeviceGetMigMode ? v->nvmlDeviceGetMigMode(d, &cur, &pend)
                                             : NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_ERROR_NOT_SUPPORTED)
        return; /* no MIG on this GPU */
    if (r != NVML_SUCCESS) {
        /* in MIG mode or not, nobody knows: a whole GPU CUDA cannot use
         * whole must not be handed out as one */
        g->healthy = 0;
        snprintf(g->reason, sizeof g->reason, "NVML MIG mode query failed: %s", errstr(v, r));
        return;
    }
    g->mig_enabled = cur == 1;
    if (!g->mig_enabled)
        return;
    if (!v->nvmlDeviceGetMaxMigDeviceCount || !v->nvmlDeviceGetMigDeviceHandleByIndex) {
        snprintf(g->mig_error, sizeof g->mig_error, "this NVML cannot list MIG devices");
        return;
    }
    if ((r = v->nvmlDeviceGetMaxMigDeviceCount(d, &max)) != NVML_SUCCESS) {
        snprintf(g->mig_error, sizeof g->mig_error, "NVML MIG device count failed: %s",
                 errstr(v, r));
        return;
    }
    for (unsigned i = 0; i < max && g->n_mig < DP_MAX_MIG; i++) {
        nvmlDevice_t m;
        nvmlDeviceAttributes_t a;
        struct dp_mig *mi = &g->mig[g->n_mig];
        if ((r = v->nvmlDeviceGetMigDeviceHandleByIndex(d, i, &m)) != NVML_SUCCESS) {
            /* NOT_FOUND / INVALID_ARGUMENT: an empty slot */
            if (r != NVML_ERROR_NOT_FOUND && r != NVML_ERROR_INVALID_ARGUMENT && !g->mig_error[0])
                snprintf(g->mig_error, sizeof g->mig_error, "NVML MIG device %u: %s", i,
                         errstr(v, r));
            continue;
        }
        if ((r = v->nvmlDeviceGetUUID(m, mi->uuid, sizeof mi->uuid)) != NVML_SUCCESS) {
            if (!g->mig_error[0])
                snprintf(g->mig_error, sizeof g->mig_error, "NVML MIG device %u: UUID: %s", i,
                         errstr(v, r));
            continue;
        }
        memset(&a, 0, sizeof a);
        if (v->nvmlDeviceGetAttributes_v2 && v->nvmlDeviceGetAttributes_v2(m, &a) == NVML_SUCCESS) {
            /* a compute instance smaller than its GPU instance ("1c.2g.20gb"):
             * left out, as NVIDIA's mixed strategy does; no resource, scheduler
             * config or request form names it */
            if (a.computeInstanceSliceCount != a.gpuInstanceSliceCount) {
                g->mig_unnamed++;
                continue;
            }
            dp_mig_name(a.gpuInstanceSliceCount, a.memorySizeMB, g->memory_mib, mi->profile,
                        sizeof mi->profile);
            mi->memory_mib = (int64_t)a.memorySizeMB;
        } else {
            snprintf(mi->profile, sizeof mi->profile, "unknown");
        }
        /* the ids health events name the instance by (dp/health.c) */
        if (!v->nvmlDeviceGetGpuInstanceId ||
            v->nvmlDeviceGetGpuInstanceId(m, &mi->gi) != NVML_SUCCESS)
            mi->gi = DP_NO_INSTANCE;
        if (!v->nvmlDeviceGetComputeInstanceId ||
            v->nvmlDeviceGetComputeInstanceId(m, &mi->ci) != NVML_SUCCESS)
            mi->ci = DP_NO_INSTANCE;
        mi->healthy = 1;
        g->n_mig++;
    }
}

static enum core_link ancestor_link(int level)
{
    switch (level) {
    case 0:
    case 10: return CORE_LINK_PIX;
    case 20: return CORE_LINK_PXB;
    case 30: return CORE_LINK_PHB;
    case 40: return CORE_LINK_NODE;
    default: return CORE_LINK_SYS;
    }
}

/* NVLinks: a link whose remote end is another GPU counts for that pair; a
 * link to something else is an NVSwitch port, and GPUs that both reach
 * NVSwitches talk over NVLink through them. */
static void discover_links(struct nvml *v, struct dp_inventory *inv)
{
    int to_switch[DP_MAX_GPUS] = {0};

    for (int i = 0; i < inv->n; i++) {
        struct dp_gpu *g = &inv->gpu[i];
        for (int j = 0; j < inv->n; j++) {
            int level;
            if (j == i)
                continue;
            if (v->nvmlDeviceGetTopologyCommonAncestor &&
                v->nvmlDeviceGetTopologyCommonAncestor(v->dev[i], v->dev[j], &level) ==
                    NVML_SUCCESS)
                g->link[j] = ancestor_link(level);
            else
                g->link[j] = g->numa_node == inv->gpu[j].numa_node ? CORE_LINK_NODE : CORE_LINK_SYS;
        }
        if (!v->nvmlDeviceGetNvLinkState || !v->nvmlDeviceGetNvLinkRemotePciInfo_v2)
            continue;
        for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
            int active = 0;
            nvmlPciInfo_t pci;
            /* NOT_SUPPORTED (no NVLink, or a disabled link) or past the
             * GPU's last link: look at every index, as links may have gaps. */
            if (v->nvmlDeviceGetNvLinkState(v->dev[i], l, &active) != NVML_SUCCESS || !active)
                continue;
            memset(&pci, 0, sizeof pci);
            if (v->nvmlDeviceGetNvLinkRemotePciInfo_v2(v->dev[i], l, &pci) != NVML_SUCCESS)
                continue;
            pci.busId[sizeof pci.busId - 1] = '\0';
            int peer = -1;
            for (int j = 0; j < inv->n; j++)
                if (j != i && strcasecmp(inv->gpu[j].pci_bus_id, pci.busId) == 0)
                    peer = j;
            if (peer >= 0) {
                g->link[peer] = CORE_LINK_NVLINK;
                g->nvlinks[peer]++;
            } else {
                to_switch[i]++;
            }
        }
    }
    for (int i = 0; i < inv->n; i++)
        for (int j = 0; j < inv->n; j++)
            if (i != j && to_switch[i] && to_switch[j] && inv->gpu[i].nvlinks[j] == 0) {
                inv->gpu[i].link[j] = CORE_LINK_NVLINK;
                inv->gpu[i].nvlinks[j] = to_switch[i] < to_switch[j] ? to_switch[i] : to_switch[j];
            }
}

static int nvml_discover(struct dp_backend *b, struct dp_inventory *inv, struct gs_err *e)
{
    struct nvml *v = (struct nvml *)b;
    unsigned count = 0;
    nvmlReturn_t r;

    memset(inv, 0, sizeof *inv);
    if (v->nvmlSystemGetDriverVersion(inv->driver, sizeof inv->driver) != NVML_SUCCESS)
        inv->driver[0] = '\0';
    if ((r = v->nvmlDeviceGetCount_v2(&count)) != NVML_SUCCESS)
        return gs_errf(e, GS_EIO, "nvmlDeviceGetCount_v2: %s", errstr(v, r));
    if (count > DP_MAX_GPUS)
        count = DP_MAX_GPUS;
    v->n = 0;
    for (unsigned i = 0; i < count; i++) {
        struct dp_gpu *g = &inv->gpu[inv->n];
        nvmlDevice_t d;
        nvmlMemory_t mem;
        nvmlPciInfo_t pci;
        unsigned idx = i, minor = 0;

        /* A GPU we cannot even name is left out; one that fails a later
         * query is listed, unhealthy, with the reason. */
        memset(g, 0, sizeof *g);
        if (v->nvmlDeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS ||
            v->nvmlDeviceGetUUID(d, g->uuid, sizeof g->uuid) != NVML_SUCCESS)
            continue;
        g->healthy = 1;
        memset(&mem, 0, sizeof mem);
        memset(&pci, 0, sizeof pci);
        if ((r = v->nvmlDeviceGetName(d, g->model, sizeof g->model)) != NVML_SUCCESS ||
            (r = v->nvmlDeviceGetMemoryInfo(d, &mem)) != NVML_SUCCESS ||
            (r = v->nvmlDeviceGetPciInfo_v3(d, &pci)) != NVML_SUCCESS) {
            g->healthy = 0;
            snprintf(g->reason, sizeof g->reason, "NVML query failed: %s", errstr(v, r));
        }
        pci.busId[sizeof pci.busId - 1] = '\0';
        v->nvmlDeviceGetIndex(d, &idx);
        g->index = (int)idx;
        g->minor = v->nvmlDeviceGetMinorNumber(d, &minor) == NVML_SUCCESS ? (int)minor : -1;
        g->memory_mib = (int64_t)(mem.total / (1024 * 1024));
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%s", pci.busId);
        g->numa_node = numa_of(g->pci_bus_id);
        discover_mig(v, d, g);
        v->dev[inv->n] = d;
        snprintf(v->uuid[inv->n], sizeof v->uuid[0], "%s", g->uuid);
        inv->n++;
    }
    v->n = inv->n;
    discover_links(v, inv);

    return events_build(v, inv, e);
}

/* How often a failing event set is built again. */
#define NVML_REBUILD_MS 5000

static int nvml_wait(struct dp_backend *b, int timeout_ms, struct dp_event *ev, struct gs_err *e)
{
    struct nvml *v = (struct nvml *)b;
    nvmlEventData_t d;

    memset(ev, 0, sizeof *ev);
    memset(&d, 0, sizeof d);
    int64_t now = (int64_t)(gs_mono_s() * 1000);
    if (!v->events) {
        /* building it again failed: tried again, now and then */
        struct gs_err e2 = GS_ERR_INIT;
        if (now - v->events_built_ms < NVML_REBUILD_MS)
            return gs_errf(e, GS_EIO, "no NVML event set");
        if (events_build(v, NULL, &e2) < 0)
            return gs_errf(e, GS_EIO, "no NVML event set: %s", e2.msg);
    } else if (now - v->events_tried_ms >= NVML_REBUILD_MS) {
        events_retry(v, now);
    }
    nvmlReturn_t r = v->nvmlEventSetWait_v2(v->events, &d, (unsigned)timeout_ms);
    if (r == NVML_ERROR_TIMEOUT)
        return 0;
    if (r != NVML_SUCCESS) {
        ev->all = 1;
        ev->xid = 999;
        gs_errf(e, GS_EIO, "nvmlEventSetWait_v2: %s", errstr(v, r));
        /* a set holding a lost GPU fails every wait: build it again, now
         * and then, without the GPUs that can no longer be registered, so
         * the others' XIDs are seen again */
        struct gs_err e2 = GS_ERR_INIT;
        if (now - v->events_built_ms >= NVML_REBUILD_MS && events_build(v, NULL, &e2) < 0)
            gs_errf(e, GS_EIO, "nvmlEventSetWait_v2: %s; building the set again: %s",
                    errstr(v, r), e2.msg);
        return 1;
    }
    if (d.eventType != NVML_EVENT_XID_CRITICAL)
        return 0;
    ev->xid = d.eventData;
    for (int i = 0; i < v->n; i++)
        if (v->dev[i] == d.device)
            snprintf(ev->uuid, sizeof ev->uuid, "%s", v->uuid[i]);
    if (!ev->uuid[0] && v->nvmlDeviceGetUUID(d.device, ev->uuid, sizeof ev->uuid) != NVML_SUCCESS)
        ev->all = 1;
    /* on a MIG instance: the GPU's handle, and the instance by its ids */
    ev->instance = d.gpuInstanceId != DP_NO_INSTANCE;
    ev->gi = d.gpuInstanceId;
    ev->ci = d.computeInstanceId;
    return 1;
}

static int nvml_probe(struct dp_backend *b, const char *uuid, struct gs_err *e)
{
    struct nvml *v = (struct nvml *)b;
    nvmlDevice_t d;
    nvmlMemory_t mem;
    nvmlPciInfo_t pci;
    nvmlReturn_t r;

    if ((r = v->nvmlDeviceGetHandleByUUID(uuid, &d)) != NVML_SUCCESS)
        return gs_errf(e, GS_EIO, "%s: nvmlDeviceGetHandleByUUID: %s", uuid, errstr(v, r));
    if ((r = v->nvmlDeviceGetMemoryInfo(d, &mem)) != NVML_SUCCESS)
        return gs_errf(e, GS_EIO, "%s: nvmlDeviceGetMemoryInfo: %s", uuid, errstr(v, r));
    if ((r = v->nvmlDeviceGetPciInfo_v3(d, &pci)) != NVML_SUCCESS)
        return gs_errf(e, GS_EIO, "%s: nvmlDeviceGetPciInfo_v3: %s", uuid, errstr(v, r));
    return 0;
}

static int nvml_proc_util(struct dp_backend *b, const char *uuid, uint64_t *last_us,
                          struct dp_proc_sample *out, int max, struct gs_err *e)
{
    struct nvml *v = (struct nvml *)b;
    nvmlProcessUtilizationSample_t s[DP_PROC_SAMPLES_MAX];
    unsigned n = (unsigned)(max < DP_PROC_SAMPLES_MAX ? max : DP_PROC_SAMPLES_MAX);
    nvmlDevice_t d;
    nvmlReturn_t r;

    if (!v->nvmlDeviceGetProcessUtilization)
        return gs_errf(e, GS_EUNAVAIL, "nvmlDeviceGetProcessUtilization: missing (driver too old?)");
    if ((r = v->nvmlDeviceGetHandleByUUID(uuid, &d)) != NVML_SUCCESS)
        return gs_errf(e, GS_EIO, "%s: nvmlDeviceGetHandleByUUID: %s", uuid, errstr(v, r));
    r = v->nvmlDeviceGetProcessUtilization(d, s, &n, *last_us);
    if (r == NVML_ERROR_NOT_FOUND)
        return 0; /* no sample since *last_us */
    if (r == NVML_ERROR_NOT_SUPPORTED)
        return gs_errf(e, GS_EUNAVAIL, "%s: per-process utilisation not supported", uuid);
    if (r != NVML_SUCCESS)
        return gs_errf(e, GS_EIO, "%s: nvmlDeviceGetProcessUtilization: %s", uuid, errstr(v, r));
    int k = 0;
    for (unsigned i = 0; i < n && k < max; i++) {
        if (s[i].timeStamp > *last_us)
            *last_us = s[i].timeStamp;
        out[k].pid = (int)s[i].pid;
        out[k].sm = s[i].smUtil > 100 ? 100 : (int)s[i].smUtil;
        out[k].ts_us = s[i].timeStamp;
        k++;
    }
    return k;
}

static void nvml_close(struct dp_backend *b)
{
    struct nvml *v = (struct nvml *)b;

    if (v->events)
        v->nvmlEventSetFree(v->events);
    if (v->nvmlShutdown)
        v->nvmlShutdown();
    dlclose(v->dl);
    free(v);
}

int dp_backend_open_nvml(const char *lib, struct dp_backend **out, struct gs_err *e)
{
    const char *name = lib ? lib : "libnvidia-ml.so.1";
    struct nvml *v;
    nvmlReturn_t r;

    *out = NULL;
    void *dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        return gs_errf(e, GS_EUNAVAIL,
                       "cannot load %s (%s): no NVIDIA driver here, or the container does not "
                       "run with the NVIDIA runtime",
                       name, dlerror());
    v = calloc(1, sizeof *v);
    if (!v) {
        dlclose(dl);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    v->dl = dl;
    *(void **)&v->nvmlErrorString = dlsym(dl, "nvmlErrorString");
#define X(fn, req, args)                                                                        \
    *(void **)&v->fn = dlsym(dl, #fn);                                                          \
    if (req && !v->fn) {                                                                        \
        dlclose(dl);                                                                            \
        free(v);                                                                                \
        return gs_errf(e, GS_EUNAVAIL, "%s: symbol %s is missing (driver too old?)", name, #fn); \
    }
    NVML_FUNCS(X)
#undef X
    if ((r = v->nvmlInit_v2()) != NVML_SUCCESS) {
        int rc = gs_errf(e, GS_EUNAVAIL, "nvmlInit_v2: %s", errstr(v, r));
        dlclose(dl);
        free(v);
        return rc;
    }
    v->b.name = "nvml";
    v->b.discover = nvml_discover;
    v->b.wait_event = nvml_wait;
    v->b.probe = nvml_probe;
    v->b.proc_util = nvml_proc_util;
    v->b.close = nvml_close;
    *out = &v->b;
    return 0;
}
