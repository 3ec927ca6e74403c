/* dp/gpu.c - see gpu.h: inventory lookups, MIG profile names. */
#include <stdio.h>
#include <string.h>

#include "dp/gpu.h"

const struct dp_gpu *dp_inventory_find(const struct dp_inventory *inv, const char *uuid)
{
    for (int i = 0; i < inv->n; i++) {
        const struct dp_gpu *g = &inv->gpu[i];
        if (strcmp(g->uuid, uuid) == 0)
            return g;
        for (int m = 0; m < g->n_mig; m++)
            if (strcmp(g->mig[m].uuid, uuid) == 0)
                return g;
    }
    return NULL;
}

int dp_inventory_healthy(const struct dp_inventory *inv, const char *uuid, const char **why)
{
    const struct dp_gpu *g = dp_inventory_find(inv, uuid);
    const struct dp_mig *m = NULL;
    for (int k = 0; g && k < g->n_mig && !m; k++)
        if (strcmp(g->mig[k].uuid, uuid) == 0)
            m = &g->mig[k];
    *why = !g ? "not on this node" : !g->healthy ? g->reason : m && !m->healthy ? m->reason : "";
    return g && g->healthy && (!m || m->healthy);
}

void dp_mig_name(unsigned slices, uint64_t mem_mib, int64_t gpu_mib, char *out, size_t cap)
{
    uint64_t gb = (mem_mib + 1023) / 1024;
    if (gpu_mib > 0) {
        uint64_t g = (uint64_t)gpu_mib;
        uint64_t eighths = (mem_mib * 8 + g - 1) / g;
        gb = (eighths * ((g + 1023) / 1024) + 4) / 8;
    }
    snprintf(out, cap, "%ug.%llugb", slices, (unsigned long long)gb);
}
