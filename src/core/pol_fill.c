/* exploration version */
#include <math.h>
#include <stdlib.h>

#include "core/builtin.h"
#include "core/core.h"
#include "core/internal.h"

static int knob(const char *name, int def)
{
    const char *s = getenv(name);
    return s ? atoi(s) : def;
}

static int K_MODE = -1, K_WEIGHT, K_TB, K_GPUTB, K_CPUW;

static void knobs(void)
{
    if (K_MODE >= 0)
        return;
    K_MODE = knob("P_MODE", 1);    /* 0 fgd frag, 1 cpu-capped, 2 fill */
    K_WEIGHT = knob("P_WEIGHT", 0); /* 0 count, 1 demand */
    K_TB = knob("P_TB", 1);        /* tie-break: 0 none, 1 least free share after, 2 least free cpu after */
    K_GPUTB = knob("P_GPUTB", 1);  /* sharing GPU tie: 0 first, 1 best fit */
    K_CPUW = knob("P_CPUW", 0);    /* weight (x0.01) of a cpu-stranding term */
}

static int sharing(const struct core_request *r)
{
    return r->kind == CORE_REQ_SHARED && r->num_gpu == 1;
}

static double frag(const struct core_cluster *c, const struct core_node *n, int64_t free_cpu,
                   const int *share)
{
    const struct core_node_priv *p = n->priv;
    int total = 0;
    for (int i = 0; i < n->n_gpus; i++)
        total += share[i];
    if (total == 0)
        return 0;
    double f = 0, wsum = 0;
    for (int m = 0; m < c->n_wclasses; m++) {
        const struct core_wclass *k = &c->wclasses[m];
        double w = k->p;
        if (K_WEIGHT == 1)
            w *= k->num_gpu * k->milli / 1000.0;
        if (K_WEIGHT == 2)
            w *= k->num_gpu ? k->num_gpu * k->milli / 1000.0 : 0.2;
        wsum += w;
        int fm = total;
        if (k->num_gpu > 0 && free_cpu >= k->cpu_milli) {
            int cnt = 0, small = 0, slots = 0, fitshare = 0;
            for (int i = 0; i < n->n_gpus; i++) {
                if (!p->usable[i])
                    continue;
                if (((k->model_mask >> n->gpus[i].model_id) & 1) && share[i] >= k->milli) {
                    cnt++;
                    slots += share[i] / k->milli;
                    fitshare += share[i];
                } else {
                    small += share[i];
                }
            }
            if (cnt >= k->num_gpu) {
                if (K_MODE == 0) {
                    fm = small;
                } else {
                    int64_t kc = k->cpu_milli > 0 ? free_cpu / k->cpu_milli : 1000;
                    if (K_MODE == 1) {
                        /* GPUs the class can touch, capped by CPU */
                        int64_t usable_gpus = kc * k->num_gpu;
                        if (usable_gpus >= cnt) {
                            fm = small;
                        } else {
                            /* use the largest-share fitting GPUs: approx avg */
                            fm = total - (int)((double)fitshare * usable_gpus / cnt);
                        }
                    } else {
                        int64_t pods = k->milli >= 1000 ? cnt / k->num_gpu : slots / k->num_gpu;
                        if (kc < pods)
                            pods = kc;
                        fm = total - (int)(pods * k->num_gpu * k->milli);
                    }
                }
            }
        }
        f += w * fm;
    }
    f = wsum > 0 ? f / wsum : 0;
    if (K_CPUW) {
        double num = 0, den = 0;
        for (int m = 0; m < c->n_wclasses; m++) {
            const struct core_wclass *k = &c->wclasses[m];
            if (k->num_gpu == 0)
                continue;
            num += k->p * k->cpu_milli;
            den += k->p * k->num_gpu * k->milli;
        }
        double r = den > 0 ? num / den : 0;
        double strand = r > 0 ? total - free_cpu / r : 0;
        if (strand > 0)
            f += K_CPUW / 100.0 * strand;
    }
    return f;
}

/* lower is better */
static double eval(const struct core_cycle *cy, const struct core_node *n, int *best_pos,
                   double *tb)
{
    struct core_cluster *c = cy->cluster;
    const struct core_node_priv *p = n->priv;
    int64_t cpu_after = n->free_cpu_milli - cy->req->cpu_milli;
    int share[CORE_MAX_GPUS];
    for (int i = 0; i < n->n_gpus; i++)
        share[i] = p->share[i];
    double before = frag(c, n, n->free_cpu_milli, share);
    *best_pos = -1;
    int used = 0;
    if (sharing(cy->req)) {
        double best = 1e18;
        for (int i = 0; i < n->n_gpus; i++) {
            if (!core_gpu_fits(cy, &n->gpus[i]))
                continue;
            int take = core_pod_share(cy, &n->gpus[i]);
            share[i] -= take;
            double d = frag(c, n, cpu_after, share) - before;
            share[i] += take;
            if (d < best - 1e-9 ||
                (K_GPUTB && d < best + 1e-9 && share[i] < share[*best_pos])) {
                best = d;
                *best_pos = i;
                used = take;
            }
        }
        *tb = p->free_share - used;
        if (K_TB == 2)
            *tb = (double)cpu_after / 1000;
        return best;
    }
    if (cy->req->kind == CORE_REQ_WHOLE || cy->req->kind == CORE_REQ_SHARED) {
        int pos[CORE_MAX_GPUS], k = 0;
        for (int i = 0; i < n->n_gpus; i++)
            if (core_gpu_fits(cy, &n->gpus[i]))
                pos[k++] = i;
        for (int i = 1; i < k; i++)
            for (int j = i; j > 0 && share[pos[j]] < share[pos[j - 1]]; j--) {
                int t = pos[j];
                pos[j] = pos[j - 1];
                pos[j - 1] = t;
            }
        for (int i = 0; i < cy->req->num_gpu && i < k; i++) {
            int take = core_pod_share(cy, &n->gpus[pos[i]]);
            share[pos[i]] -= take;
            used += take;
        }
    }
    *tb = p->free_share - used;
    if (K_TB == 2)
        *tb = (double)cpu_after / 1000;
    return frag(c, n, cpu_after, share) - before;
}

static int fill_score(const struct core_cycle *cy, const struct core_node *n)
{
    int pos;
    double tb;
    knobs();
    if (cy->cluster->wdirty)
        core_workload_prepare(cy->cluster);
    double d = eval(cy, n, &pos, &tb);
    long q = lround(d * 10);
    if (q > 100000)
        q = 100000;
    if (q < -100000)
        q = -100000;
    long t = K_TB ? lround(tb) : 0;
    if (t < 0)
        t = 0;
    if (t > 16000)
        t = 16000;
    return (int)(-q * 16001 - t);
}

/* the best raw score maps to 100, the others to 0..98 */
static void fill_normalize(const struct core_cycle *cy, int *s, int n)
{
    (void)cy;
    int lo = s[0], hi = s[0];
    for (int i = 1; i < n; i++) {
        if (s[i] < lo)
            lo = s[i];
        if (s[i] > hi)
            hi = s[i];
    }
    for (int i = 0; i < n; i++)
        s[i] = s[i] == hi ? CORE_MAX_SCORE
                          : (int)((double)(s[i] - lo) * (CORE_MAX_SCORE - 2) / ((double)hi - lo));
}

static int fill_pick(const struct core_cycle *cy, const struct core_node *n, struct core_alloc *a)
{
    if (!sharing(cy->req))
        return cy->req->kind == CORE_REQ_WHOLE ? core_pick_order(cy, n, a, 0)
                                               : core_pick_order(cy, n, a, 1);
    int pos;
    double tb;
    knobs();
    if (cy->cluster->wdirty)
        core_workload_prepare(cy->cluster);
    eval(cy, n, &pos, &tb);
    if (pos < 0)
        return -GS_ENOFIT;
    core_alloc_init(cy, n, a);
    core_alloc_add_gpu(cy, n, a, pos);
    return 0;
}

const struct core_policy core_policy_fill = {
    "fill", "exploration",
    CORE_POLICY_NODE_STATE, fill_score, fill_normalize, fill_pick,
};
