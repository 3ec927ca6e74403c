/* dp/gpu.c - see gpu.h: inventory lookups. */
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
