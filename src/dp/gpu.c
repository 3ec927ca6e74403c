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

const struct dp_mig *dp_inventory_find_mig(const struct dp_inventory *inv, const char *uuid)
{
    const struct dp_gpu *g = dp_inventory_find(inv, uuid);
    for (int m = 0; g && m < g->n_mig; m++)
        if (strcmp(g->mig[m].uuid, uuid) == 0)
            return &g->mig[m];
    return NULL;
}

int dp_inventory_healthy(const struct dp_inventory *inv, const char *uuid, const char **why)
{
    const struct dp_gpu *g = dp_inventory_find(inv, uuid);
    const struct dp_mig *m = dp_inventory_find_mig(inv, uuid);
    *why = !g ? "not on this node" : !g->healthy ? g->reason : m && !m->healthy ? m->reason : "";
    return g && g->healthy && (!m || m->healthy);
}
