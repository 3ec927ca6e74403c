/* core/nodepos.c - a node's position and state stamp, and the cluster's
 * version (core.h): for callers outside the core that remember nodes by
 * position and keep answers across requests (the extender). */
#include "core/core.h"
#include "core/internal.h"

int core_node_pos(const struct core_node *n) { return n->priv->pos; }

uint32_t core_rank_at(const struct core_cluster *c, int pos) { return c->hot[pos].rank; }

int core_choice_at(const struct core_cluster *c, const int *pos, const int *scores,
                   const unsigned char *fit, int n)
{
    int top = -1, best = -1;
    for (int j = 0; j < n; j++)
        if ((!fit || fit[j] == CORE_FIT_YES) && scores[j] > top)
            top = scores[j];
    for (int j = 0; j < n; j++)
        if ((!fit || fit[j] == CORE_FIT_YES) && scores[j] == top &&
            (best < 0 || c->hot[pos[j]].rank < c->hot[pos[best]].rank))
            best = j;
    return best;
}

const uint64_t *core_cluster_stamps(const struct core_cluster *c) { return c->stamps; }

/* Every counter here only grows, except wdirty, which drops to 0 exactly
 * when core_workload_prepare bumps wver (a rebuild that changes no answer:
 * every score prepares first). So the sum moves on every change. */
uint64_t core_cluster_version(const struct core_cluster *c)
{
    return c->stamp_seq + c->wver + c->cap_ver + (uint64_t)c->wdirty;
}
