/*
 * core/framework.c - one scheduling decision: prepare the cycle, filter,
 * score (NODE_STATE policies through per-node score columns, so a node that
 * did not change since the same question was asked is not scored again, and
 * behind them a cache keyed by exact node state and request, so identical
 * nodes are scored once),
 * normalise, choose the node with the seeded tie-break, choose the GPUs.
 *
 * No allocation per decision: the scratch arrays live in the cluster and
 * grow with the node count.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/internal.h"

static int validate_request(const struct core_request *r, struct gs_err *e)
{
    switch (r->kind) {
    case CORE_REQ_NONE:
        break;
    case CORE_REQ_WHOLE:
    case CORE_REQ_SHARED:
        if (r->num_gpu < 1 || r->num_gpu > CORE_MAX_GPUS)
            return gs_errf(e, GS_EINVAL, "request: num_gpu: %d is out of range 1..%d", r->num_gpu,
                           CORE_MAX_GPUS);
        if (r->milli < 0 || r->milli > CORE_MILLI || r->mem_mib < 0)
            return gs_errf(e, GS_EINVAL, "request: per-GPU share out of range (%d thousandths, "
                           "%lld MiB)", r->milli, (long long)r->mem_mib);
        break;
    case CORE_REQ_MIG:
        if (r->mig_count < 1 || r->mig_count > CORE_MAX_GPUS || !r->mig_profile[0])
            return gs_errf(e, GS_EINVAL, "request: MIG: %d instances of '%s'", r->mig_count,
                           r->mig_profile);
        break;
    default:
        return gs_errf(e, GS_EINVAL, "request: kind: %d is unknown", (int)r->kind);
    }
    if (r->cpu_milli < 0 || r->mem_bytes < 0)
        return gs_errf(e, GS_EINVAL, "request: negative CPU or memory");
    return 0;
}

static void pod_key(const struct core_cycle *cy, struct core_pod_key *k)
{
    memset(k, 0, sizeof *k);
    k->cpu_milli = cy->req->cpu_milli;
    k->mem_mib = cy->req->kind == CORE_REQ_SHARED ? cy->req->mem_mib : 0;
    k->model_mask = cy->model_mask;
    k->kind = cy->req->kind;
    k->num_gpu = cy->req->num_gpu;
    k->milli = cy->req->milli;
    k->tag = cy->tag;
}

int core_cycle_init(struct core_cycle *cy, struct core_cluster *c, const struct core_policy *pol,
                    const struct core_pod *pod, struct gs_err *e)
{
    const struct core_request *r = &pod->req;
    int rc = validate_request(r, e);
    if (rc < 0)
        return rc;
    cy->cluster = c;
    cy->pod = pod;
    cy->req = r;
    cy->pol = pol;
    cy->rng = &c->rng;
    cy->hot = NULL;
    cy->tainted = -1;
    cy->model_mask = ~0ULL;
    if (r->n_types || r->n_types_exclude) {
        cy->model_mask = 0;
        for (int i = 0; i < c->n_models; i++)
            if (core_request_model_ok(r, c->models[i]))
                cy->model_mask |= 1ULL << i;
    }
    switch (r->kind) {
    case CORE_REQ_NONE: cy->tag = CORE_TAG_NONE; break;
    case CORE_REQ_MIG: cy->tag = CORE_TAG_MIG; break;
    case CORE_REQ_SHARED: cy->tag = r->num_gpu == 1 ? CORE_TAG_SHARE : r->num_gpu; break;
    default: cy->tag = r->num_gpu; break;
    }
    struct core_pod_key k;
    pod_key(cy, &k);
    cy->pod_hash = core_mix64((uint64_t)k.cpu_milli) ^ core_mix64((uint64_t)k.mem_mib + 1) ^
                   core_mix64(k.model_mask + 2) ^
                   core_mix64(((uint64_t)(uint32_t)k.kind << 48) ^ ((uint64_t)k.num_gpu << 32) ^
                              ((uint64_t)(uint32_t)k.milli << 8) ^ (uint64_t)k.tag);
    return 0;
}

/* ---- helpers for policies -------------------------------------------- */

int core_pod_share(const struct core_cycle *cy, const struct core_gpu *g)
{
    const struct core_request *r = cy->req;
    if (r->kind == CORE_REQ_WHOLE)
        return CORE_MILLI;
    if (r->kind != CORE_REQ_SHARED)
        return 0;
    int share = r->milli;
    if (r->mem_mib > 0 && g->mem_mib > 0) {
        int64_t m = (r->mem_mib * CORE_MILLI + g->mem_mib - 1) / g->mem_mib;
        if (m > share)
            share = m > CORE_MILLI ? CORE_MILLI : (int)m;
    }
    /* never more than the GPU's free share: a pod asking for compute alone
     * fits a GPU whose memory is mostly taken (its share is the smaller of
     * the two), and the rounding of memory to thousandths may go either way */
    int free = core_gpu_free_share(g);
    return share < free ? share : free;
}

int core_gpu_fits(const struct core_cycle *cy, const struct core_gpu *g)
{
    const struct core_request *r = cy->req;
    if (!g->healthy || g->mig_enabled || !((cy->model_mask >> g->model_id) & 1))
        return 0;
    if (r->kind == CORE_REQ_WHOLE)
        return g->n_pods == 0 && g->free_milli == CORE_MILLI && g->free_mem_mib == g->mem_mib;
    if (r->kind != CORE_REQ_SHARED)
        return 0;
    if (r->mem_mib > 0 && (g->mem_mib <= 0 || g->free_mem_mib < r->mem_mib))
        return 0;
    return g->free_milli >= r->milli;
}

int core_node_free_share(const struct core_node *n)
{
    return n->priv->free_share;
}

uint64_t core_rand(const struct core_cycle *cy, uint64_t n)
{
    /* splitmix64 stream; the modulo bias is below 2^-40 for the sizes used */
    *cy->rng += 0x9e3779b97f4a7c15ULL;
    uint64_t x = *cy->rng;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return n ? x % n : 0;
}

void core_alloc_init(const struct core_cycle *cy, const struct core_node *n,
                     struct core_alloc *a)
{
    const struct core_pod *p = cy->pod;
    memset(a, 0, sizeof *a);
    snprintf(a->pod_uid, sizeof a->pod_uid, "%s", p->uid);
    if (p->ns[0])
        snprintf(a->pod_name, sizeof a->pod_name, "%s/%s", p->ns, p->name);
    else
        snprintf(a->pod_name, sizeof a->pod_name, "%s", p->name);
    snprintf(a->node, sizeof a->node, "%s", n->name);
    a->kind = cy->req->kind;
    a->priority = p->priority;
    a->cpu_milli = cy->req->cpu_milli;
    a->mem_bytes = cy->req->mem_bytes;
    a->model_mask = cy->model_mask;
}

void core_alloc_add_gpu(const struct core_cycle *cy, const struct core_node *n,
                        struct core_alloc *a, int pos)
{
    const struct core_gpu *g = &n->gpus[pos];
    a->gpu[a->n] = pos;
    a->mig[a->n] = -1;
    if (cy->req->kind == CORE_REQ_WHOLE) {
        a->mem_mib[a->n] = g->mem_mib;
        a->milli[a->n] = CORE_MILLI;
    } else {
        a->mem_mib[a->n] = cy->req->mem_mib;
        a->milli[a->n] = cy->req->milli;
    }
    a->n++;
}

/* Sorts GPU positions by free share ascending (dir > 0) or descending
 * (dir < 0), lowest position first on ties; insertion sort, n <= 16. */
static void sort_by_share(const struct core_node *n, int *pos, int k, int dir)
{
    for (int i = 1; i < k; i++) {
        int v = pos[i], j = i;
        while (j > 0) {
            int a = n->priv->share[pos[j - 1]], b = n->priv->share[v];
            if (dir * (a - b) > 0 || (a == b && pos[j - 1] > v))
                pos[j] = pos[j - 1], j--;
            else
                break;
        }
        pos[j] = v;
    }
}

/* Fitting GPU positions in index order; returns how many. */
static int fitting(const struct core_cycle *cy, const struct core_node *n, int *pos)
{
    int k = 0;
    for (int i = 0; i < n->n_gpus; i++)
        if (core_fits_pos(cy, n, i))
            pos[k++] = i;
    return k;
}

/* Above every core_topology_quality: weakest link <= NVLink, sum below
 * CORE_LINK_SUM_MAX; a cost is this minus a quality. */
#define LINK_ABOVE ((CORE_LINK_NVLINK + 1) * CORE_LINK_SUM_MAX)

/* The cost of `count` GPUs every two of which are joined by link l. */
static uint32_t alike_cost(int l, int count)
{
    return (uint32_t)(LINK_ABOVE - (l * CORE_LINK_SUM_MAX + l * (count * (count - 1) / 2)));
}

/* Pods of 2+ whole or shared GPUs: their GPUs' links count. */
static int linked_pod(const struct core_request *r)
{
    return (r->kind == CORE_REQ_WHOLE || r->kind == CORE_REQ_SHARED) && r->num_gpu >= 2;
}

uint32_t core_link_cost(const struct core_cycle *cy, const struct core_node *n)
{
    const int count = cy->req->num_gpu;
    if (!linked_pod(cy->req))
        return 0;
    const struct core_node_priv *p = n->priv;
    if (p->link_alike >= 0) /* every set alike */
        return alike_cost(p->link_alike, count);
    if (cy->req->kind == CORE_REQ_SHARED) {
        /* the set best fit takes (core_pick_order), as every fragmentation
         * policy does; any order gives the same weakest link */
        struct core_alloc a;
        uint32_t set = 0;
        if (core_pick_order(cy, n, &a, 1) < 0)
            return UINT32_MAX;
        for (int i = 0; i < a.n; i++)
            set |= 1u << a.gpu[i];
        return (uint32_t)(LINK_ABOVE - core_topology_quality(n, set));
    }
    uint32_t mask = p->whole_mask, set, cost;
    if (p->model_mask & ~cy->model_mask) { /* usable GPUs of a model the pod refuses */
        int pos[CORE_MAX_GPUS], k = fitting(cy, n, pos);
        mask = 0;
        for (int i = 0; i < k; i++)
            mask |= 1u << pos[i];
    }
    /* enumerating sets is the costly part: nodes of one design share it */
    struct core_cluster *c = cy->cluster;
    if (!c->link_memo)
        c->link_memo = calloc(CORE_LINK_MEMO, sizeof *c->link_memo);
    uint64_t h = p->link_hash;
    struct core_link_memo *m =
        c->link_memo ? &c->link_memo[core_mix64(h ^ ((uint64_t)mask << 8) ^ (uint64_t)count) &
                                     (CORE_LINK_MEMO - 1)]
                     : NULL;
    if (m && m->link_hash == h && m->mask == mask && m->count == count)
        return m->cost;
    if (core_topology_pick(n, mask, 0, count, &set) < 0)
        cost = UINT32_MAX;
    else
        cost = (uint32_t)(LINK_ABOVE - core_topology_quality(n, set));
    if (m)
        *m = (struct core_link_memo){.link_hash = h, .mask = mask, .cost = cost, .count = count};
    return cost;
}

uint32_t core_link_floor(const struct core_cycle *cy)
{
    const int count = cy->req->num_gpu;
    if (!linked_pod(cy->req))
        return 0;
    int l = CORE_LINK_NVLINK;
    while (l > 0 && !cy->cluster->link_nodes[l])
        l--;
    /* no set has a weakest link above l, nor a sum above l per pair */
    return alike_cost(l, count);
}

uint64_t core_tie_key(const struct core_cycle *cy, const struct core_node *n, uint32_t rank)
{
    return (uint64_t)core_link_cost(cy, n) << 32 | rank;
}

/* Do the pod's terms, or those of placed pods that pick it, rank nodes
 * (core_pod.pod_terms_count)? */
static int pod_terms_apply(const struct core_pod *p)
{
    return p->pod_terms_count &&
           (p->n_pod_terms > 0 || (p->pod_terms_picked && p->pod_terms_picked(p->pod_terms_ud, p)));
}

/* Does the pod prefer a node over another: preferred terms (pod terms
 * where the caller scores them), or a candidate with taints (the hot lines
 * say, without touching the nodes)? */
static int soft_applies(const struct core_cycle *cy, struct core_node *const *nodes,
                        const int *pos, const unsigned char *fit, int n)
{
    const struct core_cluster *c = cy->cluster;
    const struct core_pod *p = cy->pod;
    int any = p->n_prefs > 0 || pod_terms_apply(p) || cy->tainted > 0;
    for (int j = 0; j < n && !any && cy->tainted < 0; j++)
        any = (!fit || fit[j] == CORE_FIT_YES) &&
              c->hot[pos ? pos[j] : nodes[j]->priv->pos].tainted;
    return any;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds to soft[] of the candidates that fit what kube-scheduler's
 * InterPodAffinity (weight 1) and PodTopologySpread (weight 2) would score
 * for the pod's terms and the placed pods' terms that pick it, from the
 * caller's counts (core_pod.pod_terms_count). 0 when out of memory. */
static int pod_terms_fill(const struct core_cycle *cy, struct core_node *const *nodes,
                          const int *pos, const unsigned char *fit, int n, int *soft)
{
    struct core_cluster *c = cy->cluster;
    const struct core_pod *p = cy->pod;
    int nt = p->n_pod_terms, rc = 0;
    long long *cnt = calloc((size_t)n * (size_t)nt + 1, sizeof *cnt);
    long long *ipa = calloc((size_t)n + 1, sizeof *ipa), *pts = calloc((size_t)n + 1, sizeof *pts);
    double *w = calloc((size_t)nt + 1, sizeof *w);
    const char **vals = calloc((size_t)n + 1, sizeof *vals);
    unsigned char *ignored = calloc((size_t)n + 1, 1);
    if (!cnt || !ipa || !pts || !w || !vals || !ignored)
        goto out;
#define NODE(j) (nodes ? nodes[j] : c->nodes[pos[j]])
#define FITS(j) (!fit || fit[j] == CORE_FIT_YES)
    for (int j = 0; j < n; j++)
        if (FITS(j))
            ipa[j] = p->pod_terms_count(p->pod_terms_ud, p, NODE(j), &cnt[(size_t)j * nt]);
    /* a spread constraint's weight: log(its domains among the candidates + 2);
     * a candidate without one of its keys scores 0 */
    for (int t = 0; t < nt; t++) {
        if (!p->pod_terms[t].max_skew)
            continue;
        int k = 0, domains = 0;
        for (int j = 0; j < n; j++) {
            const char *v = FITS(j) ? core_node_label(NODE(j), p->pod_terms[t].topology_key) : NULL;
            if (v)
                vals[k++] = v;
            else
                ignored[j] = 1;
        }
        qsort(vals, (size_t)k, sizeof *vals, cmp_str);
        for (int i = 0; i < k; i++)
            domains += i == 0 || strcmp(vals[i], vals[i - 1]) != 0;
        w[t] = log((double)domains + 2);
    }
    long long imin = 0, imax = 0, smin = LLONG_MAX, smax = 0;
    int spread = 0;
    for (int j = 0; j < n; j++) {
        if (!FITS(j))
            continue;
        double s = 0;
        for (int t = 0; t < nt; t++) {
            const struct core_pod_term *pt = &p->pod_terms[t];
            long long k = cnt[(size_t)j * nt + t];
            if (pt->max_skew) {
                spread = 1;
                s += (double)k * w[t] + (double)(pt->max_skew - 1);
            } else {
                ipa[j] += (long long)pt->weight * k;
            }
        }
        pts[j] = (long long)s;
        imin = ipa[j] < imin ? ipa[j] : imin;
        imax = ipa[j] > imax ? ipa[j] : imax;
        if (!ignored[j]) {
            smin = pts[j] < smin ? pts[j] : smin;
            smax = pts[j] > smax ? pts[j] : smax;
        }
    }
    /* InterPodAffinity over its range (from 0); PodTopologySpread fewest
     * best, (max + min - s) / max */
    for (int j = 0; j < n; j++) {
        if (!FITS(j))
            continue;
        if (imax > imin)
            soft[j] += (int)((ipa[j] - imin) * CORE_MAX_SCORE / (imax - imin));
        if (spread && !ignored[j])
            soft[j] += 2 * (int)(smax ? CORE_MAX_SCORE * (smax + smin - pts[j]) / smax
                                      : CORE_MAX_SCORE);
    }
#undef NODE
#undef FITS
    rc = 1;
out:
    free(cnt);
    free(ipa);
    free(pts);
    free(w);
    free(vals);
    free(ignored);
    return rc;
}

/* Fills soft[] for candidates soft_applies found something in: 0 when out
 * of memory (the policy alone), else 1. */
static int soft_fill(const struct core_cycle *cy, struct core_node *const *nodes, const int *pos,
                     const unsigned char *fit, int n, int *soft)
{
    struct core_cluster *c = cy->cluster;
    const struct core_pod *p = cy->pod;
    int max_aff = 0, max_taint = 0;
    int *taint = malloc((size_t)n * sizeof *taint + 1);
    if (!taint)
        return 0;
    for (int j = 0; j < n; j++) {
        const struct core_node *nd = nodes ? nodes[j] : c->nodes[pos[j]];
        soft[j] = taint[j] = 0;
        if (fit && fit[j] != CORE_FIT_YES)
            continue;
        core_pod_soft_counts(p, nd->name, nd->n_labels, nd->label_keys, nd->label_values,
                             nd->n_taints, nd->taints, &soft[j], &taint[j]);
        max_aff = soft[j] > max_aff ? soft[j] : max_aff;
        max_taint = taint[j] > max_taint ? taint[j] : max_taint;
    }
    /* kube-scheduler's normalisation: NodeAffinity by its maximum, and
     * TaintToleration reversed (fewest intolerable taints best) */
    for (int j = 0; j < n; j++)
        soft[j] = (max_aff ? soft[j] * CORE_MAX_SCORE / max_aff : 0) +
                  (max_taint ? CORE_MAX_SCORE - taint[j] * CORE_MAX_SCORE / max_taint
                             : CORE_MAX_SCORE);
    free(taint);
    return pod_terms_apply(p) ? pod_terms_fill(cy, nodes, pos, fit, n, soft) : 1;
}

int core_soft_scores(const struct core_cycle *cy, struct core_node *const *nodes, const int *pos,
                     const unsigned char *fit, int n, int *soft)
{
    return soft_applies(cy, nodes, pos, fit, n) && soft_fill(cy, nodes, pos, fit, n, soft);
}

/* The pod's soft preferences for the candidates (core_soft_scores) in a
 * malloc'd array, and the best of those that fit in *top; NULL when none
 * applies (or out of memory). */
static int *soft_best(const struct core_cycle *cy, struct core_node *const *nodes,
                      const int *pos, const unsigned char *fit, int n, int *top)
{
    int *soft = soft_applies(cy, nodes, pos, fit, n) ? malloc((size_t)n * sizeof *soft + 1)
                                                     : NULL;
    if (soft && !soft_fill(cy, nodes, pos, fit, n, soft)) {
        free(soft);
        return NULL;
    }
    *top = -1;
    for (int j = 0; soft && j < n; j++)
        if ((!fit || fit[j] == CORE_FIT_YES) && soft[j] > *top)
            *top = soft[j];
    return soft;
}

int core_choose(const struct core_cycle *cy, struct core_node *const *nodes, const int *pos,
                const int *scores, const uint32_t *ranks, const unsigned char *fit, int n)
{
    struct core_cluster *c = cy->cluster;
    /* the pod's soft preferences first: the policy chooses among the nodes
     * they rank best */
    int top;
    int *soft = soft_best(cy, nodes, pos, fit, n, &top);
#define NODE(j) (nodes ? nodes[j] : c->nodes[pos[j]])
#define RANK(j) (ranks ? ranks[j] : c->hot[pos[j]].rank)
#define FITS(j) ((!fit || fit[j] == CORE_FIT_YES) && (!soft || soft[j] == top))
    int best = -1;
    for (int j = 0; j < n; j++)
        if (FITS(j) && (best < 0 || scores[j] > scores[best] ||
                        (scores[j] == scores[best] && RANK(j) < RANK(best))))
            best = j;
    if (best < 0) {
        free(soft);
        return -1;
    }
    /* pods of 2+ whole or shared GPUs: of the nodes scored equal, the
     * best-linked GPUs (every other pod costs 0 everywhere, the floor) */
    uint64_t key = core_tie_key(cy, NODE(best), RANK(best));
    if ((key >> 32) <= core_link_floor(cy)) {
        free(soft);
        return best;
    }
    int first = best;
    for (int j = 0; j < n; j++)
        if (FITS(j) && scores[j] == scores[first] && j != first) {
            uint64_t kj = core_tie_key(cy, NODE(j), RANK(j));
            if (kj < key || (kj == key && j < best)) {
                best = j;
                key = kj;
            }
        }
#undef NODE
#undef RANK
#undef FITS
    free(soft);
    return best;
}

int core_pick_order(const struct core_cycle *cy, const struct core_node *n, struct core_alloc *a,
                    int dir)
{
    int pos[CORE_MAX_GPUS];
    int k = fitting(cy, n, pos);
    if (k < cy->req->num_gpu)
        return -GS_ENOFIT;
    if (!dir) {
        /* whole GPUs: any free set leaves the node the same free shares, so
         * the set is chosen by its links and those it leaves (the lowest
         * positions when the node has none) */
        uint32_t mask = 0, set;
        for (int i = 0; i < k; i++)
            mask |= 1u << pos[i];
        if (core_topology_pick(n, mask, 0, cy->req->num_gpu, &set) < 0)
            return -GS_ENOFIT;
        for (int i = 0, j = 0; i < n->n_gpus; i++)
            if (set & (1u << i))
                pos[j++] = i;
    } else {
        sort_by_share(n, pos, k, dir);
        core_topology_pick_ranked(n, pos, k, cy->req->num_gpu); /* shares, after the links */
    }
    core_alloc_init(cy, n, a);
    for (int i = 0; i < cy->req->num_gpu; i++)
        core_alloc_add_gpu(cy, n, a, pos[i]);
    return 0;
}

static int pick_mig(const struct core_cycle *cy, const struct core_node *n, struct core_alloc *a)
{
    const struct core_request *r = cy->req;
    int free_on[CORE_MAX_GPUS] = {0}, order[CORE_MAX_GPUS], k = 0;

    core_alloc_init(cy, n, a);
    for (int i = 0; i < n->n_gpus; i++) {
        const struct core_gpu *g = &n->gpus[i];
        if (!g->healthy || !g->mig_enabled || !((cy->model_mask >> g->model_id) & 1) ||
            core_gpu_held_whole(g))
            continue;
        for (int m = 0; m < g->n_mig; m++)
            free_on[i] += !g->mig[m].used && !g->mig[m].unhealthy &&
                          strcmp(g->mig[m].profile, r->mig_profile) == 0;
        if (free_on[i])
            order[k++] = i;
    }
    /* most free instances first, so the pod spans the fewest GPUs */
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && free_on[order[j]] > free_on[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int o = 0; o < k && a->n < r->mig_count; o++) {
        const struct core_gpu *g = &n->gpus[order[o]];
        for (int m = 0; m < g->n_mig && a->n < r->mig_count; m++)
            if (!g->mig[m].used && !g->mig[m].unhealthy &&
                strcmp(g->mig[m].profile, r->mig_profile) == 0) {
                a->gpu[a->n] = order[o];
                a->mig[a->n] = m;
                a->mem_mib[a->n] = g->mig[m].mem_mib;
                a->milli[a->n] = 0;
                a->n++;
            }
    }
    return a->n == r->mig_count ? 0 : -GS_ENOFIT;
}

int core_pick_default(const struct core_cycle *cy, const struct core_node *n,
                      struct core_alloc *a)
{
    switch (cy->req->kind) {
    case CORE_REQ_NONE:
        core_alloc_init(cy, n, a);
        return 0;
    case CORE_REQ_MIG:
        return pick_mig(cy, n, a);
    case CORE_REQ_WHOLE:
        return core_pick_order(cy, n, a, 0);
    default:
        return core_pick_order(cy, n, a, 1);
    }
}

static int pick(const struct core_cycle *cy, const struct core_node *n, struct core_alloc *a)
{
    if (cy->req->kind == CORE_REQ_NONE || cy->req->kind == CORE_REQ_MIG || !cy->pol->pick_gpus)
        return core_pick_default(cy, n, a);
    return cy->pol->pick_gpus(cy, n, a);
}

/* ---- scoring ---------------------------------------------------------- */

/* Raw score of a feasible node; NODE_STATE policies go through the cache
 * (one-model nodes only: the key does not say which GPU has which model;
 * serial, the node key's serial from its hot line, is 0 for the others). */
static int raw_score(struct core_cluster *c, const struct core_cycle *cy,
                     const struct core_pod_key *pk, const struct core_node *n, uint64_t serial)
{
    const struct core_policy *pol = cy->pol;
    /* a pod of several shared GPUs takes them by their places on the links
     * (core_least_free_fitting), which the key does not say */
    if (!(pol->flags & CORE_POLICY_NODE_STATE) || !serial ||
        (cy->req->kind == CORE_REQ_SHARED && cy->req->num_gpu > 1))
        return pol->score(cy, n);
    if (!c->memo) {
        c->memo = calloc(CORE_MEMO_SLOTS, sizeof *c->memo);
        if (!c->memo)
            return pol->score(cy, n);
    }
    uint64_t h = core_mix64(core_mix64(serial) ^ cy->pod_hash);
    struct core_memo_slot *m = &c->memo[h & (CORE_MEMO_SLOTS - 1)];
    if (m->valid && m->hash == h && m->node == serial && m->pol == pol && m->wver == c->wver &&
        m->cap_ver == c->cap_ver && memcmp(&m->pod, pk, sizeof *pk) == 0)
        return m->score;
    int score = pol->score(cy, n);
    /* fgd reads M through core_node_frag, which may have rebuilt it */
    m->hash = h;
    m->node = serial;
    m->pod = *pk;
    m->pol = pol;
    m->wver = c->wver;
    m->cap_ver = c->cap_ver;
    m->score = score;
    m->valid = 1;
    return score;
}

/* The score column for this decision's question: the one asked before if
 * it is still current, else the least recently used one, emptied and
 * re-keyed. NULL when out of memory (then every node goes to raw_score). */
static struct core_score_col *score_col(struct core_cluster *c, const struct core_cycle *cy,
                                        const struct core_pod_key *pk)
{
    if (!c->cols) {
        c->cols = calloc(CORE_COLS, sizeof *c->cols);
        if (!c->cols)
            return NULL;
    }
    c->col_tick++;
    struct core_score_col *col = &c->cols[0];
    for (int i = 0; i < CORE_COLS; i++) {
        struct core_score_col *k = &c->cols[i];
        if (k->used && k->pod_hash == cy->pod_hash && k->pol == cy->pol && k->wver == c->wver &&
            k->cap_ver == c->cap_ver && memcmp(&k->pod, pk, sizeof *pk) == 0) {
            col = k;
            if (k->cap >= c->n_nodes) {
                k->used = c->col_tick;
                return k;
            }
            break; /* the cluster grew: start the column again */
        }
        if (k->used < col->used)
            col = k;
    }
    if (col->cap < c->n_nodes) {
        struct core_col_entry *e = realloc(col->e, (size_t)c->n_nodes * sizeof *e);
        if (!e)
            return NULL;
        col->e = e;
        col->cap = c->n_nodes;
    }
    memset(col->e, 0, (size_t)col->cap * sizeof *col->e);
    col->pod = *pk;
    col->pol = cy->pol;
    col->pod_hash = cy->pod_hash;
    col->wver = c->wver;
    col->cap_ver = c->cap_ver;
    col->used = c->col_tick;
    return col;
}

static int clamp_score(int s)
{
    return s < 0 ? 0 : s > CORE_MAX_SCORE ? CORE_MAX_SCORE : s;
}

/* The filters decided from the node's hot line alone: 1 fits, 0 does not,
 * -1 when the full chain must decide (taints, selectors, MIG, mixed-model
 * nodes, memory requests, several shared GPUs). Must agree with the chain. */
static int hot_fit(const struct core_cycle *cy, const struct core_node_hot *h)
{
    const struct core_request *r = cy->req;
    if (!h->available || h->pods_left <= 0 || r->cpu_milli > h->free_cpu ||
        r->mem_bytes > h->free_mem)
        return 0;
    if (h->tainted || cy->pod->n_selector || cy->pod->n_terms)
        return -1;
    switch (r->kind) {
    case CORE_REQ_NONE:
        return 1;
    case CORE_REQ_WHOLE:
        if ((h->model_mask & cy->model_mask) != h->model_mask || !h->model_mask)
            return -1;
        return h->n_whole >= r->num_gpu;
    case CORE_REQ_SHARED:
        if ((h->model_mask & cy->model_mask) != h->model_mask || !h->model_mask ||
            r->num_gpu != 1 || r->mem_mib != 0)
            return -1;
        return h->max_free_milli >= r->milli;
    default:
        return -1;
    }
}

/* Filters every node in `nodes`, or at the positions `at`, or the whole
 * cluster when both are NULL, leaving the feasible ones in c->feasible and
 * their normalised scores in c->scores. known (optional, with nodes or at):
 * core_score_fit's verdicts, used where set and written where decided.
 * With `at`, a node whose verdict is known and whose score column entry is
 * current is never dereferenced: only the dense per-position arrays are
 * read. Returns how many are feasible. */
static int score_feasible(struct core_cluster *c, struct core_cycle *cy,
                          struct core_node *const *nodes, const int *at, int n,
                          unsigned char *known)
{
    int k = 0, tainted = 0;
    int random = cy->pol->flags & CORE_POLICY_RANDOM_NODE;
    struct core_pod_key pk; /* what the score cache compares, the same for every node */
    pod_key(cy, &pk);
    struct core_score_col *col = NULL;
    if (!random && (cy->pol->flags & CORE_POLICY_NODE_STATE)) {
        if (c->wdirty)
            core_workload_prepare(c); /* before the caches compare versions */
        col = score_col(c, cy, &pk);
    }
    for (int i = 0; i < n; i++) {
        int pos = nodes ? nodes[i]->priv->pos : at ? at[i] : i;
        const struct core_node_hot *h = &c->hot[pos];
        struct core_node *node = nodes ? nodes[i] : c->nodes[pos];
        cy->hot = h;
        if (known && known[i]) {
            if (known[i] != CORE_FIT_YES)
                continue;
        } else {
            int fit = hot_fit(cy, h);
            if (fit < 0)
                fit = core_filter_cycle(cy, node, NULL);
            if (known)
                known[i] = fit ? CORE_FIT_YES : CORE_FIT_NO;
            if (!fit)
                continue;
        }
        c->feasible[k] = node;
        c->ranks[k] = h->rank;
        tainted |= h->tainted;
        if (col) {
            struct core_col_entry *ce = &col->e[pos];
            if (ce->stamp != c->stamps[pos]) {
                ce->score = raw_score(c, cy, &pk, node, h->key_serial);
                ce->stamp = c->stamps[pos];
            }
            c->scores[k] = ce->score;
        } else {
            c->scores[k] = random ? 0 : raw_score(c, cy, &pk, node, h->key_serial);
        }
        k++;
    }
    cy->tainted = tainted;
    if (!random && cy->pol->normalize && k > 0)
        cy->pol->normalize(cy, c->scores, k);
    for (int i = 0; i < k; i++)
        c->scores[i] = clamp_score(c->scores[i]);
    return k;
}

int core_filter_nodes(struct core_cluster *c, const struct core_pod *pod,
                      struct core_node *const *nodes, int n, unsigned char *fit,
                      struct gs_err *e)
{
    struct core_cycle cy;
    int rc = core_cycle_init(&cy, c, NULL, pod, e);
    if (rc < 0) {
        memset(fit, 0, (size_t)n);
        return rc;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        const struct core_node *node = nodes[i];
        int f = 0;
        if (node && (f = hot_fit(&cy, &c->hot[node->priv->pos])) < 0)
            f = core_filter_cycle(&cy, node, NULL);
        fit[i] = (unsigned char)f;
        k += f;
    }
    return k;
}

int core_score(struct core_cluster *c, const struct core_policy *pol, const struct core_pod *pod,
               struct core_node *const *nodes, int n, int *scores, struct gs_err *e)
{
    return core_score_fit(c, pol, pod, nodes, n, NULL, scores, e);
}

/* core_score_fit and core_score_fit_at: the nodes given by pointer or by
 * position. */
static int score_fit(struct core_cluster *c, const struct core_policy *pol,
                     const struct core_pod *pod, struct core_node *const *nodes, const int *at,
                     int n, unsigned char *fit, int *scores, struct gs_err *e)
{
    struct core_cycle cy;
    int rc = core_cycle_init(&cy, c, pol, pod, e);
    if (rc < 0)
        return rc;
    if (n > c->n_nodes)
        return gs_errf(e, GS_EINVAL, "score: %d nodes given, the cluster has %d", n, c->n_nodes);
    for (int i = 0; at && i < n; i++)
        if (at[i] < 0 || at[i] >= c->n_nodes)
            return gs_errf(e, GS_EINVAL, "score: position %d: out of range 0..%d", at[i],
                           c->n_nodes - 1);
    int k = score_feasible(c, &cy, nodes, at, n, fit);
    for (int i = 0, j = 0; i < n; i++) {
        if (j < k && c->feasible[j] == (nodes ? nodes[i] : c->nodes[at[i]])) {
            scores[i] = (pol->flags & CORE_POLICY_RANDOM_NODE)
                            ? (int)core_rand(&cy, CORE_MAX_SCORE + 1) : c->scores[j];
            j++;
        } else {
            scores[i] = 0;
        }
    }
    return 0;
}

int core_score_fit(struct core_cluster *c, const struct core_policy *pol,
                   const struct core_pod *pod, struct core_node *const *nodes, int n,
                   unsigned char *fit, int *scores, struct gs_err *e)
{
    return score_fit(c, pol, pod, nodes, NULL, n, fit, scores, e);
}

int core_score_fit_at(struct core_cluster *c, const struct core_policy *pol,
                      const struct core_pod *pod, const int *pos, int n, unsigned char *fit,
                      int *scores, struct gs_err *e)
{
    return score_fit(c, pol, pod, NULL, pos, n, fit, scores, e);
}

int core_pick_gpus(struct core_cluster *c, const struct core_policy *pol,
                   const struct core_node *n, const struct core_pod *pod, struct core_alloc *out,
                   struct gs_err *e)
{
    struct core_cycle cy;
    struct core_status st;
    int rc = core_cycle_init(&cy, c, pol, pod, e);
    if (rc < 0)
        return rc;
    if (!core_filter_cycle(&cy, n, &st))
        return gs_errf(e, GS_ENOFIT, "node %s: %s", n->name, st.reason);
    if (pick(&cy, n, out) < 0)
        return gs_errf(e, GS_ENOFIT, "node %s: no GPU choice fits the pod", n->name);
    return 0;
}

int core_schedule_one(struct core_cluster *c, const struct core_policy *pol,
                      const struct core_pod *pod, struct core_decision *d, struct gs_err *e)
{
    struct core_cycle cy;
    int rc = core_cycle_init(&cy, c, pol, pod, e);
    if (rc < 0)
        return rc;
    d->node = NULL;
    d->score = 0;
    int k = score_feasible(c, &cy, NULL, NULL, c->n_nodes, NULL);
    d->n_feasible = k;
    if (k == 0)
        return gs_errf(e, GS_ENOFIT, "pod %s: no node fits (%d nodes)", pod->name, c->n_nodes);
    int best = 0;
    if (pol->flags & CORE_POLICY_RANDOM_NODE) {
        /* uniformly among the nodes the pod's soft preferences rank best */
        int top, n = 0;
        int *soft = soft_best(&cy, c->feasible, NULL, NULL, k, &top);
        for (int j = 0; j < k; j++)
            n += !soft || soft[j] == top;
        best = (int)core_rand(&cy, (uint64_t)n);
        for (int j = 0; soft && j < k; j++) /* the best-th of them */
            if (soft[j] == top && best-- == 0) {
                best = j;
                break;
            }
        free(soft);
    } else {
        best = core_choose(&cy, c->feasible, NULL, c->scores, c->ranks, NULL, k);
    }
    d->node = c->feasible[best];
    d->score = c->scores[best];
    if (pick(&cy, d->node, &d->alloc) < 0)
        return gs_errf(e, GS_ENOFIT, "pod %s: node %s passed the filters but no GPU choice fits",
                       pod->name, d->node->name);
    return 0;
}
