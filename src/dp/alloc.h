/*
 * dp/alloc.h - what a container gets: finding its assignment, and the
 * Allocate answer.
 *
 * Kubelet's Allocate names device IDs, not the pod. Without an API server
 * the IDs are the answer (NVIDIA's behaviour: the GPUs of the IDs kubelet
 * picked). With one, the GPUs are the ones the extender wrote on the pod
 * (docs/annotations.md), whatever replica IDs kubelet picked: the plugin
 * lists the pods on its node and takes the pending pod whose next
 * unallocated GPU container asks for as many devices of this resource as
 * kubelet is allocating. Containers that already hold devices (kubelet's
 * pod-resources API, and this plugin's own record of earlier answers) are
 * skipped, and so are pods marked <prefix>allocated-at (all done). kubelet
 * allocates a pod's containers one after another inside its admission, so
 * a pod with some containers served is the one; otherwise there must be
 * exactly one candidate, which the extender's node lock ensures (one GPU
 * pod per node waits for kubelet at a time). No match, or several, is an
 * error: a container never gets a GPU the extender did not assign to it,
 * nor another pod's.
 *
 * Pure functions over parsed JSON and plain structs; no I/O, no locks.
 */
#ifndef GPUSCHED_DP_ALLOC_H
#define GPUSCHED_DP_ALLOC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "dp/gpu.h"
#include "util/err.h"

#define DP_KEY_MAX 800  /* "namespace/pod/container" */

/* What one container is to get. */
struct dp_assign {
    char ns[254], pod[254], uid[64], container[254]; /* "" without an API server */
    char kind[16];           /* "whole", "shared", "mig" */
    char assigned_at[40];
    int n;
    char uuids[DP_MAX_GPUS][DP_UUID_MAX];
    int64_t mem_mib;         /* per GPU, shared only (0 = none) */
    int milli;               /* per GPU compute, thousandths (0 = none) */
    int last;                /* no other container of the pod still waits for devices of
                                this resource: the pod's Allocates are done after this one */
    int started;             /* another container of the pod already got its devices */
    int n_ctrs;              /* the pod's containers asking for this resource */
    int limiter_off;         /* the pod's gpusched.io/limiter: "off" */
};

/* The two keys of a container in the claimed set: "ns/pod/container" (what
 * kubelet's pod-resources names) and "uid:<pod uid>/container" (which tells
 * a pod re-created under the same name from the old one). */
void dp_assign_key(const struct dp_assign *a, char *buf, size_t cap);
void dp_assign_uid_key(const struct dp_assign *a, char *buf, size_t cap);

/* Picks the container being admitted. `pods` is a PodList (or an array of
 * Pods); `claimed` holds "ns/pod/container" keys of containers that already
 * have devices of this resource (or "uid:<pod uid>/container" keys, which
 * tell apart a pod recreated under the same name). annot_prefix is "gpusched.io/". Returns 0
 * with *out, -GS_ENOENT when nothing matches, -GS_ECONFLICT when several
 * pods could be the one (the message names them), -GS_EINVAL when the
 * matching pod's annotations are broken (the message names the pod and
 * field). */
int dp_alloc_match(const json_t *pods, const char *node, const char *resource,
                   const char *annot_prefix, int n_ids, char *const *claimed, int n_claimed,
                   struct dp_assign *out, struct gs_err *e);

/* Options of the Allocate answer. */
struct dp_alloc_opts {
    const char *dev_dir;      /* where the plugin sees the host's /dev ("/dev",
                                 or a mount of it): DeviceSpecs are added
                                 for the NVIDIA nodes that exist there.
                                 NULL = none. */
    const char *caps_dir;     /* where the driver lists MIG capabilities
                                 ("/proc/driver/nvidia/capabilities"): a MIG
                                 instance also gets its GPU and compute
                                 instance's /dev/nvidia-caps nodes (those
                                 under dev_dir). NULL = none. */
    const char *annot_prefix; /* "gpusched.io/" */
    const char *limiter_dir;  /* shared-GPU containers get the in-container
                                 limiter from here (dp/limiter.h); NULL =
                                 no injection */
    unsigned lists;           /* how the devices are named to the runtime:
                                 DP_LIST_* bits; 0 = DP_LIST_ENVVAR */
    const char *cdi_kind;     /* CDI kind of the device names ("nvidia.com/gpu");
                                 NULL = DP_CDI_KIND_DEFAULT */
};

/* How a container's devices are named to the container runtime (what
 * NVIDIA's plugin calls DEVICE_LIST_STRATEGY; any combination):
 * - ENVVAR: NVIDIA_VISIBLE_DEVICES=<uuid,...>, read by the NVIDIA container
 *   runtime (legacy mode) and its CDI mode alike;
 * - MOUNTS: NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices and
 *   /dev/null mounted there as one file per UUID, for a toolkit that ignores
 *   the variable in unprivileged containers
 *   (accept-nvidia-visible-devices-as-volume-mounts);
 * - CDI_ANNOTATIONS: the annotation cdi.k8s.io/gpusched_<first uuid> =
 *   <kind>=<uuid>,..., which a CDI-enabled runtime (containerd 1.7+, CRI-O)
 *   resolves against the node's CDI specs (`nvidia-ctk cdi generate`, whose
 *   device names include the UUIDs);
 * - CDI_CRI: the same names in the response's CDIDevices (kubelet 1.28+
 *   with DevicePluginCDIDevices, on by default from 1.29).
 * Without ENVVAR or MOUNTS, NVIDIA_VISIBLE_DEVICES is "void": a CUDA image's
 * own NVIDIA_VISIBLE_DEVICES=all must not hand the container every GPU of
 * the node through a legacy NVIDIA runtime. */
#define DP_LIST_ENVVAR 0x1u
#define DP_LIST_MOUNTS 0x2u
#define DP_LIST_CDI_ANNOTATIONS 0x4u
#define DP_LIST_CDI_CRI 0x8u
#define DP_CDI_KIND_DEFAULT "nvidia.com/gpu"
#define DP_LIST_MOUNT_DIR "/var/run/nvidia-container-devices"

/* Parses a comma-separated list of envvar, volume-mounts, cdi-annotations
 * and cdi-cri into DP_LIST_* bits; an unknown or empty word is an error
 * naming it. */
int dp_alloc_parse_lists(const char *s, unsigned *out, struct gs_err *e);

/* Checks a CDI kind: "<vendor>/<class>", the vendor a domain-like name
 * (letters, digits, '-', '_', '.'), the class letters, digits, '-' and '_',
 * each starting and ending with a letter or digit. */
int dp_alloc_check_cdi_kind(const char *kind, struct gs_err *e);

/* Packs a V1beta1__AllocateResponse with one ContainerAllocateResponse per
 * assignment: NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES = the UUIDs,
 * limits for shared GPUs (GPUSCHED_GPU_MEMORY_MIB, GPUSCHED_GPU_MILLI and
 * HAMi-core's CUDA_DEVICE_MEMORY_LIMIT / CUDA_DEVICE_SM_LIMIT), device
 * nodes, and annotations; with o->limiter_dir, a shared container (unless
 * its pod opted out) also gets the limiter's mounts and GPUSCHED_LIMITER_DIR.
 * Every UUID must be a GPU or MIG instance in inv. */
int dp_alloc_pack(const struct dp_inventory *inv, const struct dp_assign *a, int n,
                  const struct dp_alloc_opts *o, uint8_t **out, size_t *len, struct gs_err *e);

#endif
