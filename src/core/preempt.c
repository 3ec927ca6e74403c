/*
 * core/preempt.c - which lower-priority pods to evict so that a pod fits.
 *
 * Greedy, then pruned: take the node's lower-priority pods away in order of
 * priority (lowest first; among equals, the largest GPU holders first) until
 * the pod fits; then give back every victim, highest priority first, whose
 * return still leaves room. The result is minimal (no victim can be spared)
 * and favours evicting the least important pods. Pods a disruption budget
 * protects (the guard's marks) come after all others, so they are taken
 * last and given back first, as kube-scheduler's selectVictimsOnNode
 * reprieves them first. The node is restored exactly before returning.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/internal.h"

static int64_t held(const struct core_alloc *a)
{
    int64_t m = 0;
    for (int i = 0; i < a->n; i++)
        m += a->kind == CORE_REQ_MIG ? CORE_MILLI : a->milli[i] + a->mem_mib[i];
    return m;
}

static int cmp_victim(const void *x, const void *y)
{
    const struct core_alloc *a = *(const struct core_alloc *const *)x;
    const struct core_alloc *b = *(const struct core_alloc *const *)y;
    if (a->priority != b->priority)
        return a->priority < b->priority ? -1 : 1;
    int64_t ha = held(a), hb = held(b);
    if (ha != hb)
        return ha > hb ? -1 : 1;
    return strcmp(a->pod_uid, b->pod_uid);
}

/* Puts the candidates the guard marks after the others, each part in its
 * order. cand is in victim order (least important first); the guard sees
 * the reverse. 0, or -1 out of memory. */
static int guard_order(const struct core_preempt_guard *g, const struct core_alloc **cand, int k,
                       unsigned char *viol)
{
    const struct core_alloc **rev = malloc(((size_t)k + 1) * sizeof *rev);
    unsigned char *rviol = calloc((size_t)k + 1, 1);
    if (!rev || !rviol) {
        free(rev);
        free(rviol);
        return -1;
    }
    for (int i = 0; i < k; i++)
        rev[i] = cand[k - 1 - i];
    g->mark(g->ud, rev, k, rviol);
    int j = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = k - 1; i >= 0; i--)
            if ((rviol[i] != 0) == pass) {
                cand[j] = rev[i];
                viol[j++] = (unsigned char)pass;
            }
    free(rev);
    free(rviol);
    return 0;
}

int core_preempt(struct core_cluster *c, const struct core_node *node, const struct core_pod *pod,
                 const struct core_preempt_guard *guard, const char **victims, int max,
                 int *n_victims, int *n_violating, struct gs_err *e)
{
    struct core_cycle cy;
    struct core_status st;
    int rc = core_cycle_init(&cy, c, NULL, pod, e);
    *n_victims = 0;
    if (n_violating)
        *n_violating = 0;
    if (rc < 0)
        return rc;
    struct core_node *n = core_cluster_find(c, node->name);
    if (!n)
        return gs_errf(e, GS_ENOENT, "node %s: not in the cluster", node->name);
    if (core_filter_cycle(&cy, n, &st))
        return 0;
    if (st.code == CORE_UNRESOLVABLE)
        return gs_errf(e, GS_ENOFIT, "node %s: %s", n->name, st.reason);

    int on = 0, k = 0;
    for (const struct core_alloc *a = core_node_alloc_next(n, NULL); a;
         a = core_node_alloc_next(n, a))
        on++;
    const struct core_alloc **cand = malloc(((size_t)on + 1) * sizeof *cand);
    char *out = calloc((size_t)on + 1, 1);
    unsigned char *viol = calloc((size_t)on + 1, 1);
    if (cand && out && viol) {
        for (const struct core_alloc *a = core_node_alloc_next(n, NULL); a;
             a = core_node_alloc_next(n, a))
            if (a->priority < pod->priority)
                cand[k++] = a;
        qsort(cand, (size_t)k, sizeof *cand, cmp_victim);
    }
    if (!cand || !out || !viol || (guard && k && guard_order(guard, cand, k, viol) < 0)) {
        free(cand);
        free(out);
        free(viol);
        return gs_errf(e, GS_ENOMEM, "preempt: out of memory");
    }

    int taken = 0, fits = 0;
    while (taken < k && !fits) {
        core_alloc_apply(n, cand[taken], -1, 0, NULL);
        out[taken++] = 1;
        core_node_refresh(c, n);
        fits = core_filter_cycle(&cy, n, &st);
    }
    if (fits) {
        for (int i = taken - 1; i >= 0; i--) {
            if (core_alloc_apply(n, cand[i], 1, 1, NULL) < 0)
                continue;
            core_alloc_apply(n, cand[i], 1, 0, NULL);
            core_node_refresh(c, n);
            if (core_filter_cycle(&cy, n, NULL)) {
                out[i] = 0;
                continue;
            }
            core_alloc_apply(n, cand[i], -1, 0, NULL);
            core_node_refresh(c, n);
        }
    }
    int nv = 0, nviol = 0;
    for (int i = 0; i < taken; i++)
        if (out[i]) {
            if (fits && nv < max)
                victims[nv] = cand[i]->pod_uid;
            nv++;
            nviol += viol[i];
            core_alloc_apply(n, cand[i], 1, 0, NULL);
        }
    core_node_refresh(c, n);
    free(cand);
    free(out);
    free(viol);
    if (!fits)
        return gs_errf(e, GS_ENOFIT, "node %s: evicting all %d lower-priority pods would not be "
                       "enough (%s)", n->name, k, st.reason);
    if (nv > max)
        return gs_errf(e, GS_ENOFIT, "node %s: %d victims needed, at most %d allowed", n->name, nv,
                       max);
    *n_victims = nv;
    if (n_violating)
        *n_violating = nviol;
    return 0;
}
