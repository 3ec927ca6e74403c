/* dp/gpu.c - see gpu.h: link names and inventory lookups. */
#include <string.h>

#include "dp/gpu.h"

static const char *const link_names[] = {
    [DP_LINK_NONE] = "", [DP_LINK_NVLINK] = "nvlink", [DP_LINK_PIX] = "pix",
    [DP_LINK_PXB] = "pxb", [DP_LINK_PHB] = "phb",      [DP_LINK_NODE] = "node",
    [DP_LINK_SYS] = "sys",
};

const char *dp_link_name(enum dp_link l)
{
    return (unsigned)l <= DP_LINK_SYS ? link_names[l] : "";
}

enum dp_link dp_link_parse(const char *s)
{
    for (int i = DP_LINK_NVLINK; i <= DP_LINK_SYS; i++)
        if (strcmp(s, link_names[i]) == 0)
            return (enum dp_link)i;
    return DP_LINK_NONE;
}

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
