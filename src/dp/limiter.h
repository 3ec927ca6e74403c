/*
 * dp/limiter.h - injecting the in-container limiter (libgpusched-cuda.so,
 * src/limiter/) into shared-GPU containers, and reading back what they use.
 *
 * The plugin owns a host directory (--limiter-dir, a hostPath in the
 * DaemonSet, seen by the plugin at the same path):
 *   <dir>/libgpusched-cuda.so     installed by the plugin at start
 *   <dir>/ld.so.preload           one line naming the library's container path
 *   <dir>/containers/<uid>_<ctr>/ the container's ledger directory, plus an
 *                                 "owner" file: namespace/pod/container, on
 *                                 a second line its number of GPUs, on a
 *                                 third their UUIDs in CUDA device order
 *                                 (comma-separated); and the "util" file
 *                                 (dp/busy.h), and the "limits" file: the
 *                                 limiter's variables as KEY=VALUE lines,
 *                                 for processes started with an
 *                                 environment of their own; removed once
 *                                 the pod has left the node or finished
 * Allocate mounts the first two read-only at /usr/local/gpusched/ and
 * /etc/ld.so.preload, and the third read-write at /usr/local/gpusched/ledger
 * (GPUSCHED_LIMITER_DIR), so every process of the container loads the
 * limiter, with no image change, and all share one budget; the plugin reads
 * the ledgers for its metrics.
 */
#ifndef GPUSCHED_DP_LIMITER_H
#define GPUSCHED_DP_LIMITER_H

#include <stdint.h>
#include <stdio.h>

#include "dp/gpu.h"
#include "limiter/lim_env.h"
#include "util/err.h"

#define DP_LIM_LIB "libgpusched-cuda.so"
#define DP_LIM_CTR_LIB "/usr/local/gpusched/" DP_LIM_LIB
#define DP_LIM_CTR_LEDGER LIM_MOUNT_DIR
#define DP_LIM_MOUNTS 3

struct dp_limiter_mount {
    char host[700], container[128];
    int read_only;
};

/* Copies lib_src to <dir>/libgpusched-cuda.so (through a rename, so
 * running containers keep the copy they mapped) and writes
 * <dir>/ld.so.preload. 0 or -GS_E* naming the file. */
int dp_limiter_install(const char *dir, const char *lib_src, struct gs_err *e);

/* Creates the container's ledger directory, its owner file and its limits
 * file (the text limits, NULL: none) and fills the three mounts. uid and
 * container must be non-empty names of letters, digits, '-', '.', '_';
 * n_gpus is how many GPUs (CUDA devices) the container gets, uuids (NULL:
 * not known) which, in CUDA device order. 0 or -GS_E*. */
int dp_limiter_container(const char *dir, const char *uid, const char *ns, const char *pod,
                         const char *container, int n_gpus, const char (*uuids)[DP_UUID_MAX],
                         const char *limits, struct dp_limiter_mount m[DP_LIM_MOUNTS],
                         struct gs_err *e);

/* One device of one container, from its ledger. */
struct dp_limiter_usage {
    char owner[800]; /* namespace/pod/container */
    int dev;
    uint64_t used, limit;
    int procs;
    int util; /* the container's own utilisation of it (dp/busy.h), permille, averaged
               * over about LIM_UTIL_AVG_S; -1 none fresh */
};

/* Does the row count memory (a limit or use)? A compute share alone has none. */
static inline int dp_limiter_has_memory(const struct dp_limiter_usage *u)
{
    return u->limit || u->used;
}

#define DP_UTIL_FRESH_S 2.0 /* a util file entry older than this is shown as none */

/* Calls fn for each of the container's GPUs (and any other device with
 * usage) of every container ledger under <dir>/containers; limit is 0 on
 * the GPUs of a container with a compute share alone. Unreadable or corrupt ledgers are skipped
 * (counted in *bad when bad is not NULL). Returns the number of ledgers. */
int dp_limiter_scan(const char *dir, void (*fn)(void *ud, const struct dp_limiter_usage *u),
                    void *ud, int *bad);

/* The node's in-container use as a JSON document for the node annotation
 * <prefix>gpu-usage: {"updated_at": now, "containers": [{"container":
 * "ns/pod/ctr", "device": 0, "used_mib": 100, "limit_mib": 256, "procs": 1},
 * ...]} sorted by container and device, at most DP_LIM_USAGE_MAX rows.
 * Caller frees; NULL when out of memory. */
#define DP_LIM_USAGE_MAX 512
char *dp_limiter_usage_json(const char *dir, const char *now);

/* Removes the ledger directories of pods no longer on the node: those
 * whose pod uid is not in uids[0..n), no process holds, and that are older
 * than min_age_s (a pod just allocated may not be listed yet). Returns how
 * many were removed. */
/* Opens a file of a container's directory for reading: that directory is
 * the container's to change, so a FIFO or a symbolic link put in the file's
 * place is refused (NULL), never waited on or followed. */
FILE *dp_limiter_fopen(const char *path);

int dp_limiter_prune(const char *dir, char *const *uids, int n, int min_age_s);

#endif
