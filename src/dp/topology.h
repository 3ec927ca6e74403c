/*
 * dp/topology.h - which GPUs of this node go together, for kubelet's
 * GetPreferredAllocation.
 *
 * The answer must be the one the scheduling core's `topology` policy gives
 * for the same GPUs (NVLink, then one PCIe switch, then same NUMA), so that
 * kubelet's pick and the extender's agree. This module translates the
 * plugin's inventory into the core's view of a node and asks the core.
 */
#ifndef GPUSCHED_DP_TOPOLOGY_H
#define GPUSCHED_DP_TOPOLOGY_H

#include <stdint.h>

#include "dp/gpu.h"

/* Among `candidates` (bitmask of inventory positions) choose `count` GPUs
 * that include `must`. Returns 0 with *chosen, or -GS_ENOFIT. */
int dp_topology_pick(const struct dp_inventory *inv, uint32_t candidates, uint32_t must,
                     int count, uint32_t *chosen);

#endif
