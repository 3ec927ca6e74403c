/*
 * core/pol_cpufrag.c - CPU-aware fragmentation descent: FGD's expected
 * fragmentation plus the GPU share that the node's CPU can no longer feed,
 * descended in coarse steps with FGD's seeded tie-break.
 *
 * Why: on the openb traces a GPU pod asks for about 11 cores per GPU, and
 * the 8-GPU nodes that hold most of the GPUs have only 12. FGD's F_n(M) asks
 * whether *one* pod of each class still fits, so it does not see that a node
 * with 8 free GPUs and 12 free cores can feed only one of them; CPU-only
 * pods then land on those nodes and strand their GPUs, while nodes rich in
 * CPU (2 x T4 with 104 cores) stay idle. This policy adds to F_n(M) the
 * stranded share
 *
 *   S_n = max(0, G_n - c_n / r)
 *
 * where G_n is the node's free GPU share (milli), c_n its free CPU (milli)
 * and r the CPU per milli-GPU of the target workload's GPU classes
 * (popularity-weighted). When some classes may only use some GPU models
 * (gpu_spec), every milli-GPU the pod takes on model t also costs
 * MODEL_W * rho_t, the pressure of the restricted classes on t, so that pods
 * free to go anywhere leave scarce, wanted models to the pods that need
 * them. A pod goes where D = dF + LAMBDA * dS + MODEL_W * sum rho_t * share
 * grows least.
 * D is compared in steps of STEP milli-GPU, and equal steps go to the seeded
 * node order, as FGD's integer-truncated sigmoid does: descending the exact
 * value packs too greedily and leaves more behind (docs/policy-cpufrag.md).
 *
 * A sharing pod (one GPU, a share below 1000) tries every GPU it fits on and
 * takes the one with the least exact D, the fullest on ties. For it, D also
 * has FILL_W * (waste(f - s) - waste(f)), f the GPU's free share and s the
 * pod's: waste(x) is what is left of x when it is packed as fully as it can
 * be with the popular sharing sizes of M. FGD only asks whether one pod of
 * a class still fits, so it cannot tell 700 - 300 = 400 (filled exactly by a
 * 400) from 1000 - 300 = 700 (a 600 leaves 100). The sizes small enough for
 * the hole that the most popular sharing size leaves do not count when they
 * are fewer than that size's pods: those holes take them all (on openb the
 * 810s leave 190, and the 160s are 7 % as many). Other pods take GPUs as
 * FGD does. LAMBDA and STEP were chosen on `default` and `cpu200`, MODEL_W
 * on `gpuspec20` and `gpuspec25`, FILL_W on `default`, `gpushare40` and
 * `gpushare80`; all were confirmed on the other openb traces
 * (docs/policy-cpufrag.md).
 *
 * State: the fill table, per thread, keyed on the exact set of popular
 * sizes; the target workload M and F_n(M) come from core/frag.c.
 */
#include <math.h>
#include <string.h>

#include "core/builtin.h"
#include "core/core.h"
#include "core/internal.h"

#define LAMBDA 2.0   /* weight of a stranded milli-GPU against a fragmented one */
#define STEP 50.0    /* D values within one step (milli-GPU) tie */
#define MODEL_W 0.5  /* weight of a milli-GPU of a model under pressure 1 */
#define FILL_W 6.0      /* weight of a milli-GPU that no filling sharing size can fill */
#define FILL_MIN_P 0.01 /* a sharing class is popular from this share of the sharing pods */
#define MAX_STEPS 100000

static int sharing(const struct core_request *r)
{
    return r->kind == CORE_REQ_SHARED && r->num_gpu == 1;
}

/* CPU (milli) per milli-GPU over the target workload's GPU classes; 0 when
 * M has none (then nothing counts as stranded). */
static double cpu_per_milli(const struct core_cluster *c)
{
    double cpu = 0, gpu = 0;
    for (int m = 0; m < c->n_wclasses; m++) {
        const struct core_wclass *k = &c->wclasses[m];
        if (k->num_gpu == 0)
            continue;
        cpu += k->p * (double)k->cpu_milli;
        gpu += k->p * k->num_gpu * k->milli;
    }
    return gpu > 0 ? cpu / gpu : 0;
}

/* Model pressure: how much of the target workload's GPU demand can only
 * run on model t (or a set of models including it), per GPU of that set,
 * relative to the whole workload's demand per GPU of the cluster. 1 means
 * the pods restricted to t alone would fill it as fast as the average pod
 * fills the cluster. Classes open to every model add nothing. It counts
 * every class of the workload (explicit, or every class learned so far),
 * not only the typical ones that M keeps for F_n(M): a rare class held to a
 * scarce model is what the price is for. Fills
 * rho[0..n_models-1]; returns 0 when no class is restricted. */
static int model_pressure(const struct core_cluster *c, double *rho)
{
    double all = 0, gpus = 0;
    int any = 0, n = c->explicit_workload ? c->n_wsrc : c->n_seen;
    for (int t = 0; t < c->n_models; t++) {
        rho[t] = 0;
        gpus += c->model_gpus[t];
    }
    for (int m = 0; m < n; m++) {
        double demand;
        uint64_t mask;
        if (c->explicit_workload) {
            const struct core_class *k = &c->wsrc[m];
            demand = k->weight * k->num_gpu * k->milli;
            mask = core_spec_mask(c, k->gpu_spec);
        } else {
            const struct core_learned *k = &c->seen[m];
            demand = (double)k->count * k->num_gpu * k->milli;
            mask = k->model_mask;
        }
        double set = 0;
        all += demand;
        if (demand <= 0)
            continue;
        for (int t = 0; t < c->n_models; t++)
            if ((mask >> t) & 1)
                set += c->model_gpus[t];
        if (set <= 0 || set >= gpus)
            continue;
        for (int t = 0; t < c->n_models; t++)
            if ((mask >> t) & 1)
                rho[t] += demand / set;
        any = 1;
    }
    if (!any || all <= 0)
        return 0;
    for (int t = 0; t < c->n_models; t++)
        rho[t] /= all / gpus;
    return 1;
}

static double stranded(double r, int64_t free_cpu, int free_share)
{
    if (r <= 0)
        return 0;
    double s = free_share - (double)free_cpu / r;
    return s > 0 ? s : 0;
}

/* r, and whether some class is restricted, and rho: derived once per
 * target workload and model capacity, kept in the cluster: wstats[0] = r,
 * wstats[1] = 1 when some class is restricted, wstats[2 + t] = rho_t.
 * Expects M prepared (core_node_frag does that). */
static const double *workload_stats(struct core_cluster *c)
{
    if (c->wstats_wver != c->wver || c->wstats_cap_ver != c->cap_ver) {
        c->wstats[0] = cpu_per_milli(c);
        c->wstats[1] = model_pressure(c, c->wstats + 2);
        c->wstats_wver = c->wver;
        c->wstats_cap_ver = c->cap_ver;
    }
    return c->wstats;
}

/* Per thread, the fill table of the last set of filling sizes (popular,
 * and not all taken by the top size's holes): waste[x] is x minus the
 * largest sum of those sizes (repeats allowed) that fits in x milli. Keyed
 * on the exact set, so it can never be stale. */
struct fill_cache {
    uint64_t sizes[16]; /* bit s: size s milli fills (s < 1000) */
    int valid;
    short waste[1001];
};
static _Thread_local struct fill_cache fill;

static int shared_one(const struct core_wclass *k)
{
    return k->num_gpu == 1 && k->milli > 0 && k->milli < 1000;
}

static const short *fill_waste(const struct core_cluster *c)
{
    uint64_t sizes[16] = {0};
    double all = 0, top = 0, demand = 0, supply = 0;
    int big = 1000; /* the size of the most popular sharing class */
    for (int m = 0; m < c->n_wclasses; m++) {
        const struct core_wclass *k = &c->wclasses[m];
        if (shared_one(k)) {
            all += k->p;
            if (k->p > top) {
                top = k->p;
                big = k->milli;
            }
        }
    }
    /* The sizes that fit the hole a `big` pod leaves: if they are fewer
     * than the `big` pods, those holes take them all, and no other GPU can
     * count on them (openb: 810 leaves 190, and the 160s are 7 % as many).
     * A big of 500 or less fills its own holes. */
    for (int m = 0; m < c->n_wclasses; m++) {
        const struct core_wclass *k = &c->wclasses[m];
        if (!shared_one(k))
            continue;
        if (k->milli == big)
            demand += k->p;
        else if (k->milli <= 1000 - big)
            supply += k->p;
        if (k->p >= FILL_MIN_P * all)
            sizes[k->milli >> 6] |= UINT64_C(1) << (k->milli & 63);
    }
    if (2 * big > 1000 && supply < demand) /* clear sizes 0..1000 - big */
        for (int w = 0, last = 1000 - big; w <= last >> 6; w++)
            sizes[w] &= last - 64 * w >= 63 ? 0 : ~((UINT64_C(2) << (last - 64 * w)) - 1);
    if (fill.valid && memcmp(sizes, fill.sizes, sizeof sizes) == 0)
        return fill.waste;
    char ok[1001] = {1};
    int list[1000], n = 0, best = 0;
    for (int sz = 1; sz < 1000; sz++)
        if ((sizes[sz >> 6] >> (sz & 63)) & 1)
            list[n++] = sz;
    fill.waste[0] = 0;
    for (int v = 1; v <= 1000; v++) {
        for (int j = 0; j < n && list[j] <= v && !ok[v]; j++)
            ok[v] = ok[v - list[j]];
        if (ok[v])
            best = v;
        fill.waste[v] = (short)(v - best);
    }
    memcpy(fill.sizes, sizes, sizeof sizes);
    fill.valid = 1;
    return fill.waste;
}

/* D for the pod on node n (lower is better); for a sharing pod, *best_pos
 * is the GPU that earns it (-1 if none fits). */
static double cpufrag_eval(const struct core_cycle *cy, const struct core_node *n, int *best_pos)
{
    struct core_cluster *c = cy->cluster;
    const struct core_node_priv *p = n->priv;
    double before = core_node_frag(c, n); /* also prepares M */
    const double *ws = workload_stats(c);
    double r = ws[0];
    int64_t cpu_after = n->free_cpu_milli - cy->req->cpu_milli;
    int pos[CORE_MAX_GPUS], take[CORE_MAX_GPUS], k = 0;
    int pressure = cy->req->num_gpu > 0 && ws[1] > 0;
    const double *rho = ws + 2;

    before += LAMBDA * stranded(r, n->free_cpu_milli, p->free_share);
    *best_pos = -1;
    if (sharing(cy->req)) {
        double best = 0;
        const short *waste = fill_waste(c);
        for (int i = 0; i < n->n_gpus; i++) {
            if (!core_fits_pos(cy, n, i))
                continue;
            /* on a one-model node, GPUs with equal free shares are alike */
            int seen = 0;
            for (int j = 0; p->homogeneous && j < k && !seen; j++)
                seen = p->share[pos[j]] == p->share[i];
            if (seen)
                continue;
            int one = core_pod_share(cy, &n->gpus[i]);
            pos[k++] = i;
            double d = core_frag_after(c, n, cpu_after, &i, &one, 1) +
                       LAMBDA * stranded(r, cpu_after, p->free_share - one) - before +
                       (pressure ? MODEL_W * rho[n->gpus[i].model_id] * one : 0) +
                       FILL_W * (waste[p->share[i] - one] - waste[p->share[i]]);
            if (*best_pos < 0 || d < best - 1e-9 ||
                (d < best + 1e-9 && p->share[i] < p->share[*best_pos])) {
                best = d;
                *best_pos = i;
            }
        }
        return best;
    }
    int used = 0;
    double pen = 0;
    if (cy->req->kind == CORE_REQ_WHOLE || cy->req->kind == CORE_REQ_SHARED) {
        k = core_least_free_fitting(cy, n, pos);
        for (int i = 0; i < k; i++) {
            take[i] = core_pod_share(cy, &n->gpus[pos[i]]);
            used += take[i];
            if (pressure)
                pen += MODEL_W * rho[n->gpus[pos[i]].model_id] * take[i];
        }
    }
    return core_frag_after(c, n, cpu_after, pos, take, k) +
           LAMBDA * stranded(r, cpu_after, p->free_share - used) - before + pen;
}

/* Raw score: minus the number of STEPs D takes (higher is better). */
static int cpufrag_score(const struct core_cycle *cy, const struct core_node *n)
{
    int pos;
    double steps = floor(cpufrag_eval(cy, n, &pos) / STEP);
    if (steps > MAX_STEPS)
        steps = MAX_STEPS;
    if (steps < -MAX_STEPS)
        steps = -MAX_STEPS;
    return -(int)steps;
}

/* The best raw score becomes 100 (the node that wins, with the seeded
 * tie-break among equals); the others are rescaled to 0..98, so the
 * extender's prioritize keeps their order. */
static void cpufrag_normalize(const struct core_cycle *cy, int *s, int n)
{
    (void)cy;
    int lo, hi;
    pol_range(s, n, &lo, &hi);
    for (int i = 0; i < n; i++)
        s[i] = s[i] == hi ? CORE_MAX_SCORE
                          : (int)((int64_t)(s[i] - lo) * (CORE_MAX_SCORE - 2) / (hi - lo));
}

static int cpufrag_pick(const struct core_cycle *cy, const struct core_node *n,
                        struct core_alloc *a)
{
    if (!sharing(cy->req))
        return cy->req->kind == CORE_REQ_WHOLE ? core_pick_order(cy, n, a, 0)
                                               : core_pick_order(cy, n, a, 1);
    int pos;
    cpufrag_eval(cy, n, &pos);
    if (pos < 0)
        return -GS_ENOFIT;
    core_alloc_init(cy, n, a);
    core_alloc_add_gpu(cy, n, a, pos);
    return 0;
}

const struct core_policy core_policy_cpufrag = {
    "cpufrag",
    "CPU-aware fragmentation descent: FGD plus GPUs stranded for lack of CPU and scarce models",
    CORE_POLICY_NODE_STATE, cpufrag_score, cpufrag_normalize, cpufrag_pick,
};
