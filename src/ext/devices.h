/*
 * ext/devices.h - kubelet's count of GPU devices on a node, which the
 * extender must never exceed.
 *
 * kubelet admits a pod only if, for every device resource, the node has as
 * many unallocated devices as the pod's containers ask for: a container
 * asking `nvidia.com/gpu: N` takes N of the node's advertised devices (the
 * device plugin's GPUs x --replicas, healthy ones only), a MIG container N
 * of `nvidia.com/mig-<profile>`. A pod bound past that count fails
 * admission for good ("Requested: 1, Available: 0"), and a failed bare pod
 * is never rescheduled. The extender's own model counts GPU memory and
 * compute, not devices, so it keeps this count beside it: the node's
 * allocatable device counts (from the Node's status.allocatable), and the
 * devices the pods assigned there hold, read from the core's node state
 * (each non-MIG GPU's pod count, each MIG instance in use). Both change only
 * when the node's state stamp moves (a node update, a reserve or release on
 * it), so kept /filter verdicts stay exact.
 *
 * A node whose allocatable names no GPU device resource at all (a
 * standalone node file, a Node written without a kubelet) is not limited.
 *
 * Ownership: plain values, nothing allocated.
 */
#ifndef GPUSCHED_EXT_DEVICES_H
#define GPUSCHED_EXT_DEVICES_H

#include <jansson.h>
#include <stdint.h>

#include "core/cluster.h"
#include "core/core.h"
#include "core/request.h"
#include "util/err.h"

/* MIG device resources counted per node; more distinct profiles than this
 * on one node is refused as a bad Node (no GPU offers half as many). */
#define EXT_DEV_MIG_MAX 16

struct ext_devcap {
    int known;    /* allocatable names the GPU resource or a MIG one */
    int64_t gpu;  /* allocatable <gpu> devices (0 when only MIG ones are named) */
    int n_mig;
    struct {
        char profile[CORE_MIG_PROFILE_MAX];
        int64_t count;
    } mig[EXT_DEV_MIG_MAX];
};

/* Reads the device counts of a Node's status.allocatable. Errors name the
 * node and the field (a bad quantity, too many MIG profiles). */
int ext_devcap_parse(const json_t *node, const struct core_names *names, struct ext_devcap *out,
                     struct gs_err *e);

/* Devices the pod needs: *count of the GPU resource, or of MIG profile
 * *profile (NULL for the GPU resource). 0 for a pod without a GPU request. */
int ext_dev_need(const struct core_pod *pod, const char **profile);

/* Devices the pods assigned to n hold: of the GPU resource (profile NULL),
 * or of one MIG profile. */
int64_t ext_dev_used(const struct core_node *n, const char *profile);

/* Can kubelet admit the pod's devices on n? 1 yes; 0 no, with *st filled
 * as a filter rejection (plugin "DeviceCount"; UNRESOLVABLE when the node
 * has fewer such devices in all than the pod asks for). names gives the
 * resource names for the reason. */
int ext_devcap_fits(const struct ext_devcap *cap, const struct core_node *n,
                    const struct core_pod *pod, const struct core_names *names,
                    struct core_status *st);

#endif
