/* core/nodepos.c - a node's position and state stamp, and the cluster's
 * version (core.h): for callers outside the core that remember nodes by
 * position and keep answers across requests (the extender). */
#include "core/core.h"
#include "core/internal.h"

int core_node_pos(const struct core_node *n) { return n->priv->pos; }

int core_tie_keys_at(struct core_cluster *c, const struct core_pod *pod, const int *pos, int n,
                     uint64_t *keys, struct gs_err *e)
{
    struct core_cycle cy;
    int rc = core_cycle_init(&cy, c, NULL, pod, e);
    if (rc < 0)
        return rc;
    for (int j = 0; j < n; j++)
        keys[j] = core_tie_key(&cy, c->nodes[pos[j]], c->hot[pos[j]].rank);
    return 0;
}

int core_soft_at(struct core_cluster *c, const struct core_pod *pod, const int *pos, int n,
                 int *soft, struct gs_err *e)
{
    struct core_cycle cy;
    int rc = core_cycle_init(&cy, c, NULL, pod, e);
    if (rc < 0)
        return rc;
    return core_soft_scores(&cy, NULL, pos, NULL, n, soft);
}

int core_choice_at(struct core_cluster *c, const struct core_pod *pod, const int *pos,
                   const int *scores, const unsigned char *fit, int n)
{
    struct core_cycle cy;
    struct gs_err e = GS_ERR_INIT;
    if (core_cycle_init(&cy, c, NULL, pod, &e) < 0)
        return -1;
    return core_choose(&cy, NULL, pos, scores, NULL, fit, n);
}

const uint64_t *core_cluster_stamps(const struct core_cluster *c) { return c->stamps; }

/* Every counter here only grows, except wdirty, which drops to 0 exactly
 * when core_workload_prepare bumps wver (a rebuild that changes no answer:
 * every score prepares first). So the sum moves on every change. */
uint64_t core_cluster_version(const struct core_cluster *c)
{
    return c->stamp_seq + c->wver + c->cap_ver + (uint64_t)c->wdirty;
}
