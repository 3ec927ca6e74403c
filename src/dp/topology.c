/* dp/topology.c - see topology.h. */
#include "dp/topology.h"

/* Link strength, best first, as the core ranks it. */
static int strength(enum dp_link l)
{
    switch (l) {
    case DP_LINK_NVLINK: return 6;
    case DP_LINK_PIX: return 5;
    case DP_LINK_PXB: return 4;
    case DP_LINK_PHB: return 3;
    case DP_LINK_NODE: return 2;
    case DP_LINK_SYS: return 1;
    default: return 0;
    }
}

int dp_topology_pick(const struct dp_inventory *inv, uint32_t candidates, uint32_t must,
                     int count, uint32_t *chosen)
{
    int best_min = -1, best_sum = -1;
    uint32_t best = 0;

    if ((must & ~candidates) || __builtin_popcount(candidates) < count || count < 0 ||
        __builtin_popcount(must) > count)
        return -1;
    /* At most 16 GPUs: every subset is cheap to look at. Subsets are walked
     * in increasing order, so ties keep the lowest positions. */
    for (uint32_t s = 0; s < (1u << inv->n); s++) {
        if ((s & ~candidates) || (s & must) != must || __builtin_popcount(s) != count)
            continue;
        int mn = 7, sum = 0;
        for (int i = 0; i < inv->n; i++)
            for (int j = i + 1; j < inv->n; j++)
                if ((s >> i & 1) && (s >> j & 1)) {
                    int st = strength(inv->gpu[i].link[j]);
                    if (st < mn)
                        mn = st;
                    sum += st * 100 + inv->gpu[i].nvlinks[j];
                }
        if (mn > best_min || (mn == best_min && sum > best_sum)) {
            best_min = mn;
            best_sum = sum;
            best = s;
        }
    }
    *chosen = best;
    return best_min < 0 ? -1 : 0;
}
