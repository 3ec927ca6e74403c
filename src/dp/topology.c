/* dp/topology.c - see topology.h. */
#include <string.h>

#include "core/cluster.h"
#include "core/core.h"
#include "dp/topology.h"

int dp_topology_pick(const struct dp_inventory *inv, uint32_t candidates, uint32_t must,
                     int count, uint32_t *chosen)
{
    struct core_gpu gpus[DP_MAX_GPUS];
    struct core_node node;

    memset(gpus, 0, sizeof gpus);
    memset(&node, 0, sizeof node);
    for (int i = 0; i < inv->n; i++) {
        const struct dp_gpu *g = &inv->gpu[i];
        gpus[i].index = g->index;
        gpus[i].mem_mib = g->memory_mib;
        gpus[i].healthy = g->healthy;
        gpus[i].numa = g->numa_node;
        for (int j = 0; j < inv->n; j++)
            gpus[i].link[j] = g->link[j];
    }
    node.n_gpus = inv->n;
    node.gpus = gpus;
    return core_topology_pick(&node, candidates, must, count, chosen);
}
