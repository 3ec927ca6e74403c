/*
 * dp/gpu.h - the node's GPUs as the device plugin sees them, and the
 * backends that discover them.
 *
 * Two backends fill the same struct dp_inventory: NVML, loaded with dlopen
 * at run time (dp/nvml.c), and a fake one that reads a JSON file (dp/fake.c)
 * for tests and for machines without GPUs. Everything above them (device
 * IDs, health, Allocate, the inventory annotation) only sees this header,
 * like Redis's ConnectionType: a table of function pointers per backend.
 *
 * Backends also deliver health events (an XID on a GPU) and re-probe a GPU
 * on request; the health policy (which XIDs count, when to re-probe) is in
 * dp/health.c, not here.
 *
 * Links between GPUs use the scheduling core's enum core_link and names, so
 * the inventory annotation and the core's topology choice agree.
 *
 * Ownership: dp_backend_open_*() returns a backend freed by its ->close().
 * struct dp_inventory is plain data, copied by value.
 */
#ifndef GPUSCHED_DP_GPU_H
#define GPUSCHED_DP_GPU_H

#include <stdint.h>

#include "core/cluster.h"
#include "util/err.h"

#define DP_MAX_GPUS 16 /* = CORE_MAX_GPUS */
#define DP_MAX_MIG 8   /* MIG instances per GPU (7 on H100/A100) */
#define DP_UUID_MAX 96
#define DP_NAME_MAX 96

#define DP_NO_INSTANCE 0xFFFFFFFFu /* NVML: no GPU / compute instance id */

struct dp_mig {
    char uuid[DP_UUID_MAX];
    char profile[32];        /* "1g.10gb" */
    int64_t memory_mib;
    unsigned gi, ci;         /* GPU / compute instance ids; DP_NO_INSTANCE unknown */
    int healthy;             /* set by dp/health.c; a device is usable when it */
    char reason[96];         /* and its GPU are healthy; "" when healthy */
};

struct dp_gpu {
    int index;                       /* NVML index */
    char uuid[DP_UUID_MAX];          /* "GPU-..." */
    char model[DP_NAME_MAX];         /* "NVIDIA H100 80GB HBM3" */
    int64_t memory_mib;
    int minor;                       /* /dev/nvidia<minor>; -1 unknown */
    int numa_node;                   /* -1 = no NUMA affinity */
    char pci_bus_id[32];             /* "00000000:19:00.0" */
    int mig_enabled;
    int n_mig;
    struct dp_mig mig[DP_MAX_MIG];
    int mig_unnamed;                 /* MIG devices left out: their compute instance
                                        is smaller than their GPU instance */
    char mig_error[128];             /* the first NVML error met listing its MIG
                                        devices ("" none): those it hid are not offered */
    uint8_t link[DP_MAX_GPUS];       /* enum core_link to the GPU at that position */
    int nvlinks[DP_MAX_GPUS];        /* NVLink count to that GPU */
    int healthy;                     /* set by dp/health.c */
    char reason[128];                /* why unhealthy, "" when healthy */
};

struct dp_inventory {
    int n;
    struct dp_gpu gpu[DP_MAX_GPUS];
    char driver[80];                 /* driver version, "" unknown */
};

/* Finds a GPU by UUID, or a MIG instance's parent GPU by MIG UUID. */
const struct dp_gpu *dp_inventory_find(const struct dp_inventory *inv, const char *uuid);
/* Whether the GPU or MIG instance of that UUID is healthy (0 unknown); the
 * reason (its own, or its GPU's) in *why when not. */
int dp_inventory_healthy(const struct dp_inventory *inv, const char *uuid, const char **why);

/* One health event from a backend. */
struct dp_event {
    char uuid[DP_UUID_MAX];  /* the GPU or MIG instance; "" with all = 1 */
    int all;                 /* the event source failed: every GPU is suspect */
    uint64_t xid;            /* XID number (999 = unknown) */
    int instance;            /* 1: gi (and ci unless DP_NO_INSTANCE) name the MIG
                                instance of GPU uuid it happened on (NVML's event
                                data); one no MIG instance matches is the GPU's */
    unsigned gi, ci;
};

/* One process's utilisation sample of a GPU. */
struct dp_proc_sample {
    int pid;        /* in the node's (the host's) pid namespace */
    int sm;         /* percent of the GPU's SM time in its period, 0..100 */
    uint64_t ts_us; /* when its period ended: the samples of one period share it */
};
#define DP_PROC_SAMPLES_MAX 256

struct dp_backend {
    const char *name; /* "nvml", "fake" */
    /* Fills *inv with the current GPUs, all marked healthy. */
    int (*discover)(struct dp_backend *b, struct dp_inventory *inv, struct gs_err *e);
    /* Waits up to timeout_ms for one event: 1 = *ev filled, 0 = none,
     * negative = the wait failed (*e says why). A return of 2 means the
     * inventory changed (a GPU appeared or vanished): call discover again. */
    int (*wait_event)(struct dp_backend *b, int timeout_ms, struct dp_event *ev, struct gs_err *e);
    /* Checks that a GPU answers normally again: 0 = passes. */
    int (*probe)(struct dp_backend *b, const char *uuid, struct gs_err *e);
    /* Per-process utilisation samples of a GPU taken after *last_us (the
     * backend's clock, microseconds; moved to the newest returned): how
     * many (0: none new), or negative. NULL: the backend has none. */
    int (*proc_util)(struct dp_backend *b, const char *uuid, uint64_t *last_us,
                     struct dp_proc_sample *out, int max, struct gs_err *e);
    void (*close)(struct dp_backend *b);
};

/* NVML via dlopen("libnvidia-ml.so.1") (or `lib` when non-NULL, for tests).
 * -GS_EUNAVAIL when the library or the driver is missing. */
int dp_backend_open_nvml(const char *lib, struct dp_backend **out, struct gs_err *e);

/* No GPUs and no events (dp/none.c): where NVML cannot be used. */
int dp_backend_open_none(struct dp_backend **out, struct gs_err *e);

/* The fake backend: GPUs described in a JSON file (docs/device-plugin.md),
 * re-read whenever it changes, so tests inject XIDs and vanished GPUs. */
int dp_backend_open_fake(const char *path, struct dp_backend **out, struct gs_err *e);

/* Parses the fake-GPU JSON (exposed for unit tests and the fuzzer). Also
 * returns, per GPU and per MIG instance, the XIDs listed in the file,
 * whether the file marks it lost or failing probes, and the processes
 * whose utilisation its every per-process sample reports. */
struct dp_fake_state {
    struct dp_inventory inv;
    int nxid[DP_MAX_GPUS];
    uint64_t xids[DP_MAX_GPUS][16];
    int mig_nxid[DP_MAX_GPUS][DP_MAX_MIG];        /* a MIG instance's own "xids" */
    uint64_t mig_xids[DP_MAX_GPUS][DP_MAX_MIG][8];
    int lost[DP_MAX_GPUS];
    int probe_fails[DP_MAX_GPUS];
    struct dp_proc_sample procs[DP_MAX_GPUS][16]; /* "procs": what proc_util samples */
    int nproc[DP_MAX_GPUS];
};
int dp_fake_parse(const char *text, size_t len, struct dp_fake_state *out, struct gs_err *e);

/* The MIG profile name NVIDIA's device plugin gives an instance of `slices`
 * GPU slices and mem_mib of memory on a GPU of gpu_mib ("1g.10gb"): the
 * instance's share of the GPU's memory rounded up to eighths, times the
 * GPU's memory rounded up to whole GB, rounded. Without gpu_mib (0): the
 * instance's memory rounded up to GB. */
void dp_mig_name(unsigned slices, uint64_t mem_mib, int64_t gpu_mib, char *out, size_t cap);

#endif
