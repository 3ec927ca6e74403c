/*
 * dp/devices.h - from GPUs to the resources and device IDs kubelet sees.
 *
 * Kubelet counts devices, not GPUs. The plugin serves one resource per
 * kind of device (one gRPC server each):
 *   - nvidia.com/gpu: every GPU not in MIG mode. With replicas = 1 the ID is
 *     the GPU UUID, as in NVIDIA's plugin; with replicas = R > 1 each GPU
 *     is advertised R times as "<uuid>::<k>", so that several shared pods
 *     (DESIGN.md's share model) fit on one GPU as far as kubelet's counting
 *     goes; the extender decides which GPU and how much of it.
 *   - nvidia.com/mig-<profile>: every MIG instance of that profile (NVIDIA's
 *     "mixed" strategy), ID = the MIG UUID.
 * A device is healthy when its GPU is (and its MIG instance, for one); its
 * NUMA node is its GPU's.
 *
 * GetPreferredAllocation picks whole GPUs by the scheduling core's
 * topology choice, so kubelet's pick matches what the extender would do.
 *
 * Plain data, no locks; callers pass a consistent inventory.
 */
#ifndef GPUSCHED_DP_DEVICES_H
#define GPUSCHED_DP_DEVICES_H

#include <stddef.h>
#include <stdint.h>

#include "dp/gpu.h"

#define DP_MAX_REPLICAS 64
/* Devices per GPU by default with an API server: kubelet then admits up to
 * 10 pods per GPU on a node (HAMi's default split count), and the extender
 * never binds more pods than that (ext/devices.h). */
#define DP_DEFAULT_API_REPLICAS 10
#define DP_MAX_RESOURCES 8
#define DP_MAX_DEVICES (DP_MAX_GPUS * DP_MAX_REPLICAS)
#define DP_ID_MAX 64        /* kubelet: device IDs are at most 63 characters */
#define DP_RESOURCE_MAX 64

struct dp_device {
    char id[DP_ID_MAX];
    int gpu;                /* position in the inventory */
    int mig;                /* MIG instance on that GPU, -1 for a whole GPU */
};

struct dp_resource {
    char name[DP_RESOURCE_MAX];   /* "nvidia.com/gpu", "nvidia.com/mig-1g.10gb" */
    int n;
    struct dp_device dev[DP_MAX_DEVICES];
};

struct dp_devices_cfg {
    char prefix[32];        /* "nvidia.com/" */
    int replicas;           /* 1..DP_MAX_REPLICAS */
};

/* Builds the resources for an inventory: nvidia.com/gpu first, then one per
 * MIG profile in order of first appearance. No GPU, no resource: like
 * NVIDIA's plugin, a node without GPUs advertises and registers nothing.
 * Returns the number of resources. */
int dp_devices_build(const struct dp_inventory *inv, const struct dp_devices_cfg *cfg,
                     struct dp_resource *out, int max);

/* The device with this ID in the resource, or NULL. */
const struct dp_device *dp_devices_find(const struct dp_resource *r, const char *id);

/* Socket file name for a resource: "gpusched-gpu.sock",
 * "gpusched-mig-1g.10gb.sock". */
void dp_devices_socket_name(const char *resource, char *buf, size_t cap);

/* The ListAndWatch message: every device with its health and NUMA node.
 * Returns 0 with a malloc'd packed V1beta1__ListAndWatchResponse. */
int dp_devices_pack_list(const struct dp_resource *r, const struct dp_inventory *inv,
                         uint8_t **out, size_t *len, struct gs_err *e);

/* GetPreferredAllocation for one container: out of `avail` choose `size`
 * IDs including every `must` ID. Whole GPUs are chosen with the core's
 * topology rule (NVLink, then one PCIe switch, ..., then same NUMA) over the
 * GPUs the IDs belong to, one replica per GPU while GPUs last. Fills
 * out_ids[0..size-1] (pointers into avail/must). Errors name the bad ID. */
int dp_devices_prefer(const struct dp_resource *r, const struct dp_inventory *inv,
                      char *const *avail, size_t n_avail, char *const *must, size_t n_must,
                      int size, const char **out_ids, struct gs_err *e);

#endif
