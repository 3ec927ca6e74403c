/*
 * core/frag.c - the target workload M and a node's expected fragmentation
 * F_n(M) (Weng et al., "Beware of Fragmentation", USENIX ATC'23, §2 of
 * docs/benchmark.md).
 *
 * F_n(m) is the free GPU share on node n that a pod of class m could not
 * use: all of it when m asks for no GPU, for a model the node lacks, or for
 * more than the node has free (GPUs or CPU); otherwise the free share of the
 * GPUs too small for one of m's GPUs. F_n(M) weights the classes by their
 * popularity. M is set explicitly (the simulator: the trace's classes) or
 * learned from the pods reserved so far (the extender): a learned class is
 * the pod's CPU, GPU count, share and the models it was allowed.
 */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#define SEEN_MAX 4096
/* A learned M is rebuilt when a class appears, or once the pods counted
 * have grown by 1/REFRESH_DIV since the last rebuild: every rebuild makes
 * every cached score and F_n(M) stale, and one pod more moves no class's
 * share by more than 1/count. */
#define REFRESH_DIV 32

void core_workload_free(struct core_cluster *c)
{
    free(c->wsrc);
    free(c->wclasses);
    free(c->seen);
    c->wsrc = NULL;
    c->wclasses = NULL;
    c->seen = NULL;
    c->n_wsrc = c->n_wclasses = c->n_seen = c->cap_seen = 0;
    c->seen_total = c->seen_at_prepare = 0;
}

int core_cluster_set_workload(struct core_cluster *c, const struct core_class *classes, int n,
                              double coverage, struct gs_err *e)
{
    if (n < 0 || (n > 0 && !classes))
        return gs_errf(e, GS_EINVAL, "workload: bad class array");
    if (!(coverage > 0 && coverage <= 1))
        return gs_errf(e, GS_EINVAL, "workload: coverage %g is outside (0, 1]", coverage);
    for (int i = 0; i < n; i++) {
        const struct core_class *k = &classes[i];
        if (k->cpu_milli < 0 || k->num_gpu < 0 || k->num_gpu > CORE_MAX_GPUS ||
            k->milli < 0 || k->milli > CORE_MILLI || (k->num_gpu > 0 && k->milli == 0) ||
            !(k->weight >= 0) || !memchr(k->gpu_spec, 0, sizeof k->gpu_spec))
            return gs_errf(e, GS_EINVAL, "workload: class %d: bad cpu/num_gpu/milli/weight", i);
    }
    struct core_class *copy = calloc((size_t)n + 1, sizeof *copy);
    if (!copy)
        return gs_errf(e, GS_ENOMEM, "workload: out of memory");
    if (n)
        memcpy(copy, classes, (size_t)n * sizeof *copy);
    free(c->wsrc);
    c->wsrc = copy;
    c->n_wsrc = n;
    c->wcoverage = coverage;
    c->explicit_workload = 1;
    c->wdirty = 1;
    c->wver++;
    return 0;
}

int core_cluster_workload_size(const struct core_cluster *c)
{
    return c->n_wclasses;
}

const struct core_learned *core_cluster_learned(const struct core_cluster *c, int *n)
{
    *n = c->explicit_workload ? 0 : c->n_seen;
    return c->seen;
}

uint64_t core_spec_mask(const struct core_cluster *c, const char *spec)
{
    if (!spec[0])
        return ~0ULL;
    uint64_t m = 0;
    const char *p = spec;
    while (*p) {
        size_t len = strcspn(p, "|");
        for (int i = 0; i < c->n_models; i++)
            if (strlen(c->models[i]) == len && memcmp(c->models[i], p, len) == 0)
                m |= 1ULL << i;
        p += len;
        if (*p == '|')
            p++;
    }
    return m;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

char *core_models_spec(const struct core_cluster *c, uint64_t mask, char *buf, size_t cap)
{
    const char *names[CORE_MAX_MODELS];
    int n = 0;
    size_t len = 0;
    for (int t = 0; mask != ~0ULL && t < c->n_models; t++)
        if ((mask >> t) & 1)
            names[n++] = c->models[t];
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    if (cap)
        buf[0] = '\0';
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? "|" : "", names[i]);
    return buf;
}

static int cmp_weight_desc(const void *a, const void *b, void *arg)
{
    const struct core_class *src = arg;
    int x = *(const int *)a, y = *(const int *)b;
    double wx = src[x].weight, wy = src[y].weight;
    if (wx != wy)
        return wx < wy ? 1 : -1;
    return (x > y) - (x < y);
}

/* Rebuilds M from the explicit classes or from the learned histogram. */
void core_workload_prepare(struct core_cluster *c)
{
    struct core_class *learned = NULL;
    const struct core_class *src = c->wsrc;
    int n = c->n_wsrc;
    double coverage = c->wcoverage;

    c->wdirty = 0;
    c->wver++;
    c->n_wclasses = 0;
    if (!c->explicit_workload) {
        learned = calloc((size_t)c->n_seen + 1, sizeof *learned);
        if (!learned)
            return;
        for (int i = 0; i < c->n_seen; i++) {
            learned[i].cpu_milli = c->seen[i].cpu_milli;
            learned[i].num_gpu = c->seen[i].num_gpu;
            learned[i].milli = c->seen[i].milli;
            learned[i].weight = (double)c->seen[i].count;
        }
        src = learned;
        n = c->n_seen;
        coverage = 0.95;
        c->seen_at_prepare = c->seen_total;
    }
    int *order = calloc((size_t)n + 1, sizeof *order);
    struct core_wclass *w = realloc(c->wclasses, ((size_t)n + 1) * sizeof *w);
    if (!order || !w) {
        free(order);
        free(learned);
        if (w)
            c->wclasses = w;
        return;
    }
    c->wclasses = w;
    double total = 0, kept = 0;
    for (int i = 0; i < n; i++) {
        order[i] = i;
        total += src[i].weight;
    }
    qsort_r(order, (size_t)n, sizeof *order, cmp_weight_desc, (void *)src);
    int k = 0;
    while (k < n && total > 0 && kept < coverage * total - 1e-9) {
        const struct core_class *s = &src[order[k]];
        w[k].cpu_milli = s->cpu_milli;
        w[k].num_gpu = s->num_gpu;
        w[k].milli = s->milli;
        w[k].model_mask = learned ? c->seen[order[k]].model_mask : core_spec_mask(c, s->gpu_spec);
        w[k].p = s->weight;
        kept += s->weight;
        k++;
    }
    for (int i = 0; i < k; i++)
        w[i].p /= kept;
    c->n_wclasses = k;
    free(order);
    free(learned);
}

/* Recomputes F_n(M) and the per-class counts from scratch. */
static double frag_full(struct core_cluster *c, const struct core_node *n)
{
    struct core_node_priv *p = n->priv;
    if (p->fc_cap < c->n_wclasses) {
        int cap = c->n_wclasses;
        int *a = realloc(p->fc_cnt, (size_t)cap * sizeof *a);
        if (a)
            p->fc_cnt = a;
        int *b = realloc(p->fc_small, (size_t)cap * sizeof *b);
        if (b)
            p->fc_small = b;
        if (!a || !b)
            return 0;
        p->fc_cap = cap;
    }
    int total = p->free_share;
    /* on a one-model node the GPUs big enough for a class are the top of the
     * sorted usable shares (the node key's), so suffix sums answer each
     * class in a short scan; with a learned M this runs for every feasible
     * node on every decision */
    const int *sorted = p->key.share;
    int nu = p->key.n_usable, above[CORE_MAX_GPUS + 1];
    above[nu] = 0;
    for (int j = nu - 1; j >= 0; j--)
        above[j] = above[j + 1] + sorted[j];
    /* locals, so the stores below need not reload them */
    int *fc_cnt = p->fc_cnt, *fc_small = p->fc_small, one_model = p->homogeneous;
    uint64_t models = p->model_mask;
    int64_t free_cpu = n->free_cpu_milli;
    double f = 0;
    for (int m = 0; m < c->n_wclasses; m++) {
        const struct core_wclass *k = &c->wclasses[m];
        int cnt = 0, small = 0;
        if (one_model) {
            int j = nu;
            if (k->model_mask & models)
                while (j > 0 && sorted[j - 1] >= k->milli)
                    j--;
            cnt = nu - j;
            small = total - above[j];
        } else {
            for (int i = 0; i < n->n_gpus; i++) {
                if (!p->usable[i])
                    continue;
                if (((k->model_mask >> n->gpus[i].model_id) & 1) && p->share[i] >= k->milli)
                    cnt++;
                else
                    small += p->share[i];
            }
        }
        fc_cnt[m] = cnt;
        fc_small[m] = small;
        int fm = k->num_gpu > 0 && free_cpu >= k->cpu_milli && cnt >= k->num_gpu ? small : total;
        f += k->p * fm;
    }
    return f;
}

double core_node_frag(struct core_cluster *c, const struct core_node *n)
{
    struct core_node_priv *p = n->priv;
    if (c->wdirty)
        core_workload_prepare(c);
    if (p->frag_wver != c->wver) {
        p->frag = frag_full(c, n);
        p->frag_wver = c->wver;
    }
    return p->frag;
}

double core_frag_after(struct core_cluster *c, const struct core_node *n, int64_t free_cpu,
                       const int *pos, const int *take, int k)
{
    const struct core_node_priv *p = n->priv;
    int total = p->free_share;
    for (int j = 0; j < k; j++)
        total -= take[j];
    double f = 0;
    /* branch-free: this loop is most of an fgd decision */
    for (int m = 0; m < c->n_wclasses; m++) {
        const struct core_wclass *w = &c->wclasses[m];
        int cnt = p->fc_cnt[m], small = p->fc_small[m];
        for (int j = 0; j < k; j++) {
            int g = p->share[pos[j]], g2 = g - take[j];
            int ok = (int)((w->model_mask >> p->gmodel[pos[j]]) & 1);
            int was = ok & (g >= w->milli), is = ok & (g2 >= w->milli);
            cnt += is - was;
            small += g2 * !is - g * !was;
        }
        int fit = (w->num_gpu > 0) & (free_cpu >= w->cpu_milli) & (cnt >= w->num_gpu);
        f += w->p * (fit ? small : total);
    }
    return f;
}

/* The learned class of an allocation (count left 0): its CPU, GPU count,
 * share (the memory share when larger) and models. */
static struct core_learned alloc_class(const struct core_cluster *c, const struct core_alloc *a)
{
    int milli = 0;
    if (a->n > 0) {
        milli = a->milli[0];
        const struct core_node *n = core_cluster_find(c, a->node);
        if (n && n->gpus[a->gpu[0]].mem_mib > 0) {
            int64_t gm = n->gpus[a->gpu[0]].mem_mib;
            int64_t m = (a->mem_mib[0] * CORE_MILLI + gm - 1) / gm;
            if (m > milli)
                milli = m > CORE_MILLI ? CORE_MILLI : (int)m;
        }
        if (milli == 0)
            milli = 1;
    }
    uint64_t models = a->n > 0 ? core_models_norm(c, a->model_mask) : ~0ULL;
    return (struct core_learned){a->cpu_milli, a->n, milli, models, 0};
}

static int same_class(const struct core_learned *x, const struct core_learned *y)
{
    return x->cpu_milli == y->cpu_milli && x->num_gpu == y->num_gpu && x->milli == y->milli &&
           x->model_mask == y->model_mask;
}

/* Index of class k in c->seen, or -1. */
static int seen_find(const struct core_cluster *c, const struct core_learned *k)
{
    for (int i = 0; i < c->n_seen; i++)
        if (same_class(&c->seen[i], k))
            return i;
    return -1;
}

/* Counts `count` more pods of class k (a new class is dropped when there is
 * no room for it, as SEEN_MAX says). */
static void seen_add(struct core_cluster *c, const struct core_learned *k, long count)
{
    int i = seen_find(c, k);
    if (i >= 0) {
        c->seen[i].count += count;
        c->seen_total += count;
        if (c->seen_total - c->seen_at_prepare >= 1 + c->seen_at_prepare / REFRESH_DIV)
            c->wdirty = 1;
        return;
    }
    if (c->n_seen >= SEEN_MAX)
        return;
    if (c->n_seen == c->cap_seen) {
        int cap = c->cap_seen ? 2 * c->cap_seen : 32;
        struct core_learned *s = realloc(c->seen, (size_t)cap * sizeof *s);
        if (!s)
            return;
        c->seen = s;
        c->cap_seen = cap;
    }
    c->seen[c->n_seen] = *k;
    c->seen[c->n_seen++].count = count;
    c->seen_total += count;
    c->wdirty = 1;
}

void core_workload_seen(struct core_cluster *c, const struct core_alloc *a)
{
    if (a->kind == CORE_REQ_MIG)
        return; /* MIG instances never fragment shares */
    struct core_learned k = alloc_class(c, a);
    seen_add(c, &k, 1);
}

static int cmp_class(const void *a, const void *b)
{
    const struct core_learned *x = a, *y = b;
    if (x->cpu_milli != y->cpu_milli)
        return x->cpu_milli < y->cpu_milli ? -1 : 1;
    if (x->num_gpu != y->num_gpu)
        return x->num_gpu - y->num_gpu;
    if (x->milli != y->milli)
        return x->milli - y->milli;
    if (x->model_mask != y->model_mask)
        return x->model_mask < y->model_mask ? -1 : 1;
    return 0;
}

int core_workload_ended(const struct core_cluster *c, struct core_learned **out)
{
    int n = c->explicit_workload ? 0 : c->n_seen, k = 0;
    struct core_learned *l = malloc(((size_t)n + 1) * sizeof *l);
    *out = NULL;
    if (!l)
        return -GS_ENOMEM;
    if (n)
        memcpy(l, c->seen, (size_t)n * sizeof *l);
    qsort(l, (size_t)n, sizeof *l, cmp_class);
    for (int i = 0; n && i < c->n_allocs; i++) {
        const struct core_alloc *a = c->allocs[i];
        if (a->kind == CORE_REQ_MIG)
            continue;
        struct core_learned key = alloc_class(c, a);
        struct core_learned *hit = bsearch(&key, l, (size_t)n, sizeof *l, cmp_class);
        if (hit && hit->count > 0)
            hit->count--;
    }
    for (int i = 0; i < n; i++)
        if (l[i].count > 0)
            l[k++] = l[i];
    *out = l;
    return k;
}

int core_workload_seed(struct core_cluster *c, const struct core_learned *l, int n,
                       struct gs_err *e)
{
    for (int i = 0; i < n; i++) {
        const struct core_learned *k = &l[i];
        if (k->cpu_milli < 0 || k->num_gpu < 0 || k->num_gpu > CORE_MAX_GPUS ||
            k->milli < 0 || k->milli > CORE_MILLI || (k->num_gpu > 0) != (k->milli > 0) ||
            k->count < 1)
            return gs_errf(e, GS_EINVAL, "learned class %d: bad cpu/num_gpu/milli/count", i);
    }
    if (c->explicit_workload)
        return 0;
    for (int i = 0; i < n; i++) {
        struct core_learned k = l[i];
        k.model_mask = k.num_gpu > 0 ? core_models_norm(c, k.model_mask) : ~0ULL;
        seen_add(c, &k, k.count);
    }
    return 0;
}

void core_workload_unseen(struct core_cluster *c, const struct core_alloc *a)
{
    struct core_learned k;
    int i = -1;
    if (a->kind != CORE_REQ_MIG) {
        k = alloc_class(c, a);
        i = seen_find(c, &k);
    }
    if (i < 0)
        return;
    c->seen_total--;
    if (--c->seen[i].count > 0)
        return;
    memmove(&c->seen[i], &c->seen[i + 1], (size_t)(c->n_seen - i - 1) * sizeof *c->seen);
    c->n_seen--;
    c->wdirty = 1; /* M may hold the class */
}
