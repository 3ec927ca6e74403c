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
