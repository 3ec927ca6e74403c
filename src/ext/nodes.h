/*
 * ext/nodes.h - a Kubernetes Node object as the scheduling core's node spec.
 *
 * The extender learns nodes from a NodeList file (standalone) or a watch
 * (cluster). GPUs come from the device plugin's inventory annotation
 * (<prefix>gpu-inventory, docs/annotations.md) or, without it, from the
 * node's GPU capacity plus the nvidia.com/gpu.product and
 * nvidia.com/gpu.memory labels (then GPU UUIDs are "<node>/gpu<i>", stable
 * across restarts). Labels, NoSchedule/NoExecute taints and allocatable
 * CPU, memory and pods are carried over.
 *
 * Ownership: the spec's strings point into the Node JSON and into *buf;
 * both must outlive its use (core_cluster_upsert_node copies it).
 */
#ifndef GPUSCHED_EXT_NODES_H
#define GPUSCHED_EXT_NODES_H

#include <jansson.h>

#include "core/cluster.h"
#include "core/request.h"
#include "util/err.h"

struct ext_node_buf {
    const char **keys, **values;
    struct core_taint *taints;
};

/* Fills *spec from a Node. *updated_at gets the inventory's updated_at
 * (seconds since the epoch), or 0 when the node has no inventory
 * annotation. Errors name the node and field. */
int ext_node_spec(const json_t *node, const struct core_names *names, struct core_node_spec *spec,
                  struct ext_node_buf *buf, double *updated_at, struct gs_err *e);
void ext_node_buf_clear(struct ext_node_buf *buf);

/* Parses the inventory annotation value into spec->gpus (exposed for tests
 * and the fuzzer). */
int ext_inventory_parse(const char *text, struct core_node_spec *spec, double *updated_at,
                        struct gs_err *e);

#endif
