/*
 * dp/inventory.h - the node's GPUs as the extender reads them.
 *
 * The device plugin publishes its inventory on its Node object: the
 * annotation gpusched.io/gpu-inventory (JSON, format in docs/annotations.md:
 * GPUs with UUID, model, memory, NUMA node, PCI bus id, health and reason,
 * links to every other GPU, MIG instances) and the labels
 * nvidia.com/gpu.product, nvidia.com/gpu.memory and nvidia.com/gpu.count
 * where the node does not already have them. This module builds those;
 * dp/kube.c sends them.
 *
 * Ownership: returned json_t objects belong to the caller.
 */
#ifndef GPUSCHED_DP_INVENTORY_H
#define GPUSCHED_DP_INVENTORY_H

#include <jansson.h>

#include "dp/gpu.h"

/* The annotation's JSON object; updated_at is `now` (RFC 3339, UTC). */
json_t *dp_inventory_json(const struct dp_inventory *inv, const char *now);

/* Labels {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", ...} for the
 * node; nothing for a node without GPUs. The product is the first GPU's
 * model with spaces as '-' and anything a label value cannot hold as '_'. */
json_t *dp_inventory_labels(const struct dp_inventory *inv);

/* The merge patch for a Node whose current labels are `node_labels`
 * (may be NULL): sets the annotation (key `annot_key`) and adds the labels
 * the node lacks. */
json_t *dp_inventory_node_patch(const struct dp_inventory *inv, const char *annot_key,
                                const json_t *node_labels, const char *now);

#endif
