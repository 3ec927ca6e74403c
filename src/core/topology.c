/*
 * core/topology.c - which GPUs of a node belong together: link names and the
 * topology choice that the `topology` policy and the device plugin's
 * GetPreferredAllocation share.
 *
 * A set is judged by its weakest internal link first (a 4-GPU job is as slow
 * as its slowest pair), then by the sum of its links, then by the sum of
 * the links left among the candidates it does not take (a GPU cut off from
 * its NVLink partner goes before one that would break a pair), then by the
 * lowest positions. Sets are enumerated exhaustively: at most C(16, 8) =
 * 12,870 subsets, each scored in O(k^2). A pod of several shared GPUs gets
 * the best weakest link too, then the GPUs its policy ranks first
 * (core_topology_pick_ranked): its shares, not the links, decide the rest.
 */
#include <string.h>

#include "core/core.h"

static const char *const link_names[] = {
    [CORE_LINK_UNKNOWN] = "unknown", [CORE_LINK_SYS] = "sys", [CORE_LINK_NODE] = "node",
    [CORE_LINK_PHB] = "phb",         [CORE_LINK_PXB] = "pxb", [CORE_LINK_PIX] = "pix",
    [CORE_LINK_NVLINK] = "nvlink",
};

int core_link_parse(const char *s)
{
    for (int i = CORE_LINK_SYS; i <= CORE_LINK_NVLINK; i++)
        if (s && strcasecmp(s, link_names[i]) == 0)
            return i;
    return -1;
}

const char *core_link_name(enum core_link l)
{
    return (unsigned)l <= CORE_LINK_NVLINK ? link_names[l] : "unknown";
}

/* Lexicographic key: weakest link, then link sum; positions compared by the
 * caller through enumeration order (lowest masks first). */
static void set_quality(const struct core_node *n, uint32_t set, int *weakest, int *sum)
{
    int w = CORE_LINK_NVLINK, s = 0;
    for (int a = 0; a < n->n_gpus; a++) {
        if (!(set & (1u << a)))
            continue;
        for (int b = a + 1; b < n->n_gpus; b++) {
            if (!(set & (1u << b)))
                continue;
            int l = n->gpus[a].link[b];
            if (l < w)
                w = l;
            s += l;
        }
    }
    *weakest = w;
    *sum = s;
}

_Static_assert(CORE_MAX_GPUS * (CORE_MAX_GPUS - 1) / 2 * CORE_LINK_NVLINK < CORE_LINK_SUM_MAX,
               "a set's link sum must stay below CORE_LINK_SUM_MAX");

int core_topology_quality(const struct core_node *n, uint32_t set)
{
    int w, s;
    set_quality(n, set, &w, &s);
    return w * CORE_LINK_SUM_MAX + s;
}

/* Is subset x (over the positions listed in pos[]) lower-positioned than y?
 * Compares the sorted position lists lexicographically. */
static int lower_positions(uint32_t x, uint32_t y)
{
    while (x && y) {
        int a = __builtin_ctz(x), b = __builtin_ctz(y);
        if (a != b)
            return a < b;
        x &= x - 1;
        y &= y - 1;
    }
    return 0;
}

/* Is every pair of GPUs in mask joined by the same link? */
static int links_alike(const struct core_node *n, uint32_t mask)
{
    int ref = -1;
    for (int a = 0; a < n->n_gpus; a++)
        for (int b = a + 1; b < n->n_gpus; b++)
            if ((mask >> a & 1) && (mask >> b & 1)) {
                int l = n->gpus[a].link[b];
                if (ref >= 0 && l != ref)
                    return 0;
                ref = l;
            }
    return 1;
}

/* The ranked search: sets in lexicographic order of their ranks, depth
 * first; a prefix whose weakest link is no better than the best set's
 * cannot win (every completion is weaker or equal, and comes later), so it
 * is cut, and the search ends once a set reaches the best link present. */
struct ranked {
    const struct core_node *n;
    const int *pos;
    int k, count, top;
    int take[CORE_MAX_GPUS], best[CORE_MAX_GPUS], best_w;
};

static void ranked_from(struct ranked *r, int depth, int from, int w)
{
    if (depth == r->count) {
        r->best_w = w; /* better than the best so far: the cut saw to it */
        memcpy(r->best, r->take, (size_t)r->count * sizeof *r->take);
        return;
    }
    for (int i = from; i <= r->k - (r->count - depth) && r->best_w < r->top; i++) {
        int wi = w;
        for (int j = 0; j < depth; j++) {
            int l = r->n->gpus[r->pos[i]].link[r->pos[r->take[j]]];
            if (l < wi)
                wi = l;
        }
        if (wi <= r->best_w)
            continue;
        r->take[depth] = i;
        ranked_from(r, depth + 1, i + 1, wi);
    }
}

int core_topology_pick_ranked(const struct core_node *n, int *pos, int k, int count)
{
    if (count > k || count < 0)
        return -GS_ENOFIT;
    if (count < 2 || count == k)
        return 0;
    struct ranked r = {.n = n, .pos = pos, .k = k, .count = count, .best_w = -1, .top = -1};
    for (int a = 0; a < k; a++)
        for (int b = a + 1; b < k; b++)
            if (n->gpus[pos[a]].link[pos[b]] > r.top)
                r.top = n->gpus[pos[a]].link[pos[b]];
    ranked_from(&r, 0, 0, CORE_LINK_NVLINK);
    /* the chosen first, each part in rank order */
    int out[CORE_MAX_GPUS], j = 0;
    uint32_t chosen = 0;
    for (int i = 0; i < count; i++)
        chosen |= 1u << r.best[i];
    for (int i = 0; i < k; i++)
        if (chosen & (1u << i))
            out[j++] = pos[i];
    for (int i = 0; i < k; i++)
        if (!(chosen & (1u << i)))
            out[j++] = pos[i];
    memcpy(pos, out, (size_t)k * sizeof *pos);
    return 0;
}

int core_topology_pick(const struct core_node *n, uint32_t candidates, uint32_t must, int count,
                       uint32_t *chosen)
{
    uint32_t valid = n->n_gpus >= 32 ? ~0u : ((1u << n->n_gpus) - 1);
    candidates &= valid;
    if ((must & ~candidates) || count < 0 || __builtin_popcount(candidates) < count ||
        __builtin_popcount(must) > count)
        return -GS_ENOFIT;
    int pos[CORE_MAX_GPUS], k = 0;
    for (int i = 0; i < n->n_gpus; i++)
        if ((candidates & (1u << i)) && !(must & (1u << i)))
            pos[k++] = i;
    int need = count - __builtin_popcount(must);
    if (need == 0) {
        *chosen = must;
        return 0;
    }
    /* every candidate linked alike (no topology, or all NVLink): every set
     * ties on the links, so the lowest positions, without enumerating */
    if (links_alike(n, candidates)) {
        uint32_t set = must;
        for (int i = 0; i < need; i++)
            set |= 1u << pos[i];
        *chosen = set;
        return 0;
    }
    uint32_t best = 0;
    int best_w = -1, best_s = -1, best_r = -1;
    /* Gosper's hack over k-bit combinations of the free candidates */
    for (uint32_t comb = (1u << need) - 1; comb < (1u << k);) {
        uint32_t set = must;
        for (int i = 0; i < k; i++)
            if (comb & (1u << i))
                set |= 1u << pos[i];
        int w, s, rw, rs;
        set_quality(n, set, &w, &s);
        set_quality(n, candidates & ~set, &rw, &rs);
        if (w > best_w || (w == best_w && s > best_s) ||
            (w == best_w && s == best_s && rs > best_r) ||
            (w == best_w && s == best_s && rs == best_r && lower_positions(set, best))) {
            best = set;
            best_w = w;
            best_s = s;
            best_r = rs;
        }
        uint32_t c = comb & -comb, r = comb + c;
        comb = (((r ^ comb) >> 2) / c) | r;
    }
    *chosen = best;
    return 0;
}
