/*
 * dp/busy.h - each shared container's own GPU utilisation, written where
 * its limiter reads it.
 *
 * The limiter's compute throttle holds a container to its share of a GPU
 * by the GPU's busy time. NVML's utilisation of a GPU counts every tenant,
 * so two shared containers, both busy, each held themselves to about half
 * their share. NVML also samples per process, by pid in the node's pid
 * namespace; a container's processes are listed in its ledger by pid and
 * pid namespace inode (limiter/lim_ledger.h). Each pass here reads, for
 * every GPU some container's owner file names, the samples since the last
 * pass, finds each sampled process's namespace and pid there through
 * /proc (which shows every process only in the node's pid namespace: the
 * DaemonSet's hostPID), adds its SM percent to the container that holds
 * it, and writes each container's mean over the sampling periods of the
 * pass (a period that names none of its processes counts 0) to its util
 * file (limiter/lim_util.h), by the container's CUDA device order. One
 * period says little: a driver may name only one process a period, the
 * whole GPU's busy time given to it (an H200 did, with two busy
 * processes), so the limiter averages these over seconds.
 *
 * A process's namespace link (/proc/PID/ns/pid) is readable only with
 * ptrace access to it, which a plugin without CAP_SYS_PTRACE lacks for a
 * container's processes. Then the process is found by its pod (the pod
 * UID in /proc/PID/cgroup, which anyone may read) and its pid in its own
 * namespace (NSpid in /proc/PID/status): the one container of that pod
 * whose ledger lists that pid. Two containers of a pod listing the same
 * pid (each its own namespace's pid 1, say) cannot be told apart that way,
 * and such a sample counts for neither.
 *
 * A GPU with no new sample at all is left out of that pass (the limiter
 * keeps waiting for one rather than read an idle GPU); one whose samples
 * name none of a container's processes is 0 for it.
 */
#ifndef GPUSCHED_DP_BUSY_H
#define GPUSCHED_DP_BUSY_H

#include <stdint.h>

#include "dp/gpu.h"

/* What passes remember: per GPU, the backend's time of its newest sample. */
struct dp_busy {
    int n;
    char uuid[64][DP_UUID_MAX];
    uint64_t last_us[64];
};

/* One pass over <dir>/containers, with the samples of backend b and the
 * processes under proc_root ("/proc"; another root for tests). Returns how
 * many util files were written, or -1 when b has no per-process samples. */
int dp_busy_pass(struct dp_busy *st, const char *dir, struct dp_backend *b,
                 const char *proc_root);

/* A process as proc_root/<pid> shows it: its pid namespace inode (*ns, 0
 * when the link cannot be read), its pid there (the last NSpid) and its pod
 * UID from its cgroup ("" when it is in no pod's cgroup; pod_uid holds 64
 * bytes). 0, or -1 when it is gone or its status cannot be read. */
int dp_busy_proc(const char *proc_root, int pid, uint64_t *ns, int *nspid, char *pod_uid);

#endif
