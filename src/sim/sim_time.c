/*
 * sim/sim_time.c - the time-driven replay: an event loop over arrivals (a
 * sorted array), departures and backoff expiries (binary heaps), with the
 * waiting pods queued the way kube-scheduler v1.20 queues them:
 *
 * - activeQ order (PrioritySort): priority, then the pod's queue timestamp,
 *   which is its arrival, refreshed to the time of each failed attempt; ties
 *   keep the order of those attempts. The trace has no priorities, so this
 *   is first come first served with a failing pod never blocking the next.
 * - A pod that fits nowhere goes to the unschedulable set. A departure (an
 *   assigned pod deleted) moves every unschedulable pod back: to the active
 *   queue when its backoff (1 s doubling per failed attempt, at most 10 s,
 *   counted from the last attempt) is over, else to the backoff queue, which
 *   releases it when the backoff ends.
 * - The 60 s leftover flush is not replayed: nothing was freed since those
 *   pods failed, so the core would refuse them again.
 *
 * Result-preserving shortcuts keep one trace well under 10 s: a pod is tried
 * through core_schedule_one unless a pod with the same request (CPU, memory,
 * GPUs, share, models) already failed and no node freed since then fits it
 * (core_filter on the freed nodes). Placements only take resources away, so
 * such a pod would fail; it counts as a failed attempt at that time all the
 * same (timestamp, backoff).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sim/sim_report.h"
#include "sim/sim_time.h"
#include "util/clock.h"

static const char *const cls_names[SIM_N_CLS] = {"all", "whole", "multi_gpu", "sharing",
                                                 "model_constrained"};

const char *sim_cls_name(int cls)
{
    return cls >= 0 && cls < SIM_N_CLS ? cls_names[cls] : "?";
}

/* ---- a binary min-heap of (time, seq, pod) ------------------------------ */

struct hent {
    double t;
    int64_t seq;
    int id;
};

struct heap {
    struct hent *a;
    int n, cap;
};

static int hless(const struct hent *x, const struct hent *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static int heap_push(struct heap *h, double t, int64_t seq, int id)
{
    if (h->n == h->cap) {
        int nc = h->cap ? 2 * h->cap : 256;
        struct hent *na = realloc(h->a, (size_t)nc * sizeof *na);
        if (!na)
            return -1;
        h->a = na;
        h->cap = nc;
    }
    int i = h->n++;
    struct hent v = {t, seq, id};
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!hless(&v, &h->a[p]))
            break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = v;
    return 0;
}

static struct hent heap_pop(struct heap *h)
{
    struct hent top = h->a[0], v = h->a[--h->n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const struct hent *best = &v;
        if (l < h->n && hless(&h->a[l], best)) {
            m = l;
            best = &h->a[l];
        }
        if (r < h->n && hless(&h->a[r], best))
            m = r;
        if (m == i)
            break;
        h->a[i] = h->a[m];
        i = m;
    }
    if (h->n > 0)
        h->a[i] = v;
    return top;
}

/* ---- pods and their request classes ------------------------------------ */

enum { ST_FUTURE, ST_ACTIVE, ST_UNSCHED, ST_BACKOFF, ST_RUNNING, ST_DONE };

struct tpod {
    double arrive, dur, stamp, placed;
    int64_t seq;
    int attempts, cls;
    int64_t milli; /* num_gpu x gpu_milli */
    unsigned char status;
};

struct req_arg {
    const struct sim_pod *pods;
    const int *src;
};

static int cmp_req(const void *a, const void *b, void *arg)
{
    const struct req_arg *ra = arg;
    const struct sim_pod *x = &ra->pods[ra->src[*(const int *)a]];
    const struct sim_pod *y = &ra->pods[ra->src[*(const int *)b]];
    if (x->cpu_milli != y->cpu_milli)
        return x->cpu_milli < y->cpu_milli ? -1 : 1;
    if (x->mem_mib != y->mem_mib)
        return x->mem_mib < y->mem_mib ? -1 : 1;
    if (x->num_gpu != y->num_gpu)
        return x->num_gpu - y->num_gpu;
    if (x->gpu_milli != y->gpu_milli)
        return x->gpu_milli - y->gpu_milli;
    return strcmp(x->gpu_spec, y->gpu_spec);
}

static int cmp_arrival(const void *a, const void *b, void *arg)
{
    const struct tpod *tp = arg;
    int x = *(const int *)a, y = *(const int *)b;
    if (tp[x].arrive != tp[y].arrive)
        return tp[x].arrive < tp[y].arrive ? -1 : 1;
    return (x > y) - (x < y);
}

static double backoff_s(int attempts)
{
    double b = 1;
    for (int i = 1; i < attempts && b < 10; i++)
        b *= 2;
    return b < 10 ? b : 10;
}

/* Everything one run owns, freed in one place. */
struct state {
    struct core_cluster *c;
    struct tpod *tp;
    int *src, *order, *unsched, *freed; /* src[i]: the trace pod that replay pod i is */
    int n_unsched, n_freed, cap_freed;
    struct core_pod *reps; /* one request per class */
    unsigned char *blocked;
    int n_cls;
    struct core_pod *cp;
    struct heap dep, act, boff;
    double *delays;
};

static void state_free(struct state *s)
{
    core_cluster_free(s->c);
    free(s->tp);
    free(s->src);
    free(s->order);
    free(s->unsched);
    free(s->freed);
    free(s->reps);
    free(s->blocked);
    free(s->cp);
    free(s->dep.a);
    free(s->act.a);
    free(s->boff.a);
    free(s->delays);
}

static int in_class(const struct sim_pod *p, int cls)
{
    if (p->num_gpu == 0)
        return 0;
    switch (cls) {
    case SIM_CLS_ALL: return 1;
    case SIM_CLS_WHOLE: return p->num_gpu == 1 && p->gpu_milli >= 1000;
    case SIM_CLS_MULTI: return p->num_gpu > 1;
    case SIM_CLS_SHARE: return p->gpu_milli < 1000;
    case SIM_CLS_MODEL: return p->gpu_spec[0] != '\0';
    default: return 0;
    }
}

int sim_time_run(const struct sim_config *cfg, const struct sim_time_opts *o,
                 const struct core_policy *pol, uint64_t seed, struct sim_time_result *r,
                 struct gs_err *e)
{
    const struct sim_trace *t = cfg->trace;
    double w0 = gs_mono_s();
    memset(r, 0, sizeof *r);
    r->policy = pol;
    r->seed = seed;
    r->load = o->load;
    r->scale = o->scale;
    if (!t->has_times)
        return gs_errf(e, GS_EINVAL, "the time-driven replay needs the pod list's "
                       "creation_time column (and deletion_time, scheduled_time)");
    if (!(o->load >= 0.01 && o->load <= 1e6))
        return gs_errf(e, GS_EINVAL, "--load: %g is out of range [0.01, 1e6]", o->load);
    if (!(o->scale >= 1 && o->scale <= 100))
        return gs_errf(e, GS_EINVAL, "--scale: %g is out of range [1, 100]", o->scale);
    if (t->total_gpus <= 0)
        return gs_errf(e, GS_EINVAL, "the node list has no GPUs");

    struct state s;
    memset(&s, 0, sizeof s);
    int rc = 0;
    /* the replay's pods: the trace's, then clones drawn uniformly with
     * replacement (seeded) until the GPU request reaches scale x the trace's */
    double req = 0, target;
    int n = t->n_pods, cap_src = n + 1;
    for (int i = 0; i < t->n_pods; i++)
        req += (double)t->pods[i].num_gpu * t->pods[i].gpu_milli;
    target = o->scale * req;
    s.src = malloc((size_t)cap_src * sizeof *s.src);
    if (!s.src)
        return gs_errf(e, GS_ENOMEM, "time replay: out of memory");
    for (int i = 0; i < n; i++)
        s.src[i] = i;
    uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + 7;
    while (o->scale > 1 && req < target) {
        rng += 0x9e3779b97f4a7c15ULL;
        uint64_t x = rng;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        x ^= x >> 31;
        int pick = (int)(x % (uint64_t)t->n_pods);
        if (n == cap_src) {
            cap_src *= 2;
            int *ns = realloc(s.src, (size_t)cap_src * sizeof *ns);
            if (!ns) {
                free(s.src);
                return gs_errf(e, GS_ENOMEM, "time replay: out of memory");
            }
            s.src = ns;
        }
        s.src[n++] = pick;
        req += (double)t->pods[pick].num_gpu * t->pods[pick].gpu_milli;
    }
    r->pods = n;
    s.c = core_cluster_new();
    s.tp = calloc((size_t)n, sizeof *s.tp);
    s.order = malloc((size_t)n * sizeof *s.order);
    s.unsched = malloc((size_t)n * sizeof *s.unsched);
    s.cp = calloc(1, sizeof *s.cp);
    s.delays = malloc((size_t)n * sizeof *s.delays);
    if (!s.c || !s.tp || !s.order || !s.unsched || !s.cp || !s.delays) {
        rc = gs_errf(e, GS_ENOMEM, "time replay: out of memory");
        goto out;
    }
    if ((rc = sim_cluster_init(s.c, cfg, seed, e)) < 0)
        goto out;

    /* arrivals and durations (docs/benchmark.md states the rule) */
    int64_t tmin = INT64_MAX, tend = 0;
    for (int i = 0; i < n; i++) {
        const struct sim_pod *p = &t->pods[s.src[i]];
        if (p->t_create < 0) {
            rc = gs_errf(e, GS_EINVAL, "pods:%d: column creation_time: empty for pod %s; the "
                         "time-driven replay needs it", p->line, p->name);
            goto out;
        }
        if (p->t_create < tmin)
            tmin = p->t_create;
        int64_t last = p->t_delete > p->t_create ? p->t_delete : p->t_create;
        if (p->t_sched > last)
            last = p->t_sched;
        if (last > tend)
            tend = last;
    }
    const double cap = (double)t->total_gpus * CORE_MILLI;
    for (int i = 0; i < n; i++) {
        const struct sim_pod *p = &t->pods[s.src[i]];
        struct tpod *q = &s.tp[i];
        int64_t start = p->t_sched >= 0 ? p->t_sched : p->t_create;
        int64_t del = p->t_delete >= 0 ? p->t_delete : tend;
        int64_t d = del - start;
        q->dur = d >= 1 ? (double)d : 1.0;
        q->arrive = (double)(p->t_create - tmin) / o->load;
        q->milli = (int64_t)p->num_gpu * p->gpu_milli;
        q->status = ST_FUTURE;
        s.order[i] = i;
        if (p->num_gpu > 0)
            r->gpu_pods++;
    }
    /* request classes, for the skip of pods that cannot fit */
    struct req_arg ra = {t->pods, s.src};
    qsort_r(s.order, (size_t)n, sizeof *s.order, cmp_req, &ra);
    for (int k = 0; k < n; k++) {
        if (k == 0 || cmp_req(&s.order[k - 1], &s.order[k], &ra) != 0)
            s.n_cls++;
        s.tp[s.order[k]].cls = s.n_cls - 1;
    }
    s.reps = calloc((size_t)s.n_cls, sizeof *s.reps);
    s.blocked = calloc((size_t)s.n_cls, 1);
    if (!s.reps || !s.blocked) {
        rc = gs_errf(e, GS_ENOMEM, "time replay: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        sim_core_pod(&t->pods[s.src[i]], i, &s.reps[s.tp[i].cls]);
    for (int i = 0; i < n; i++)
        s.order[i] = i;
    qsort_r(s.order, (size_t)n, sizeof *s.order, cmp_arrival, s.tp);

    const double W0 = s.tp[s.order[n / 100]].arrive, W1 = s.tp[s.order[n - 1]].arrive;
    r->t0 = W0;
    r->t1 = W1;
    double now = s.tp[s.order[0]].arrive, alloc_int = 0, pend_int = 0, total_int = 0, ran_int = 0;
    int64_t alloc_m = 0, pend_m = 0;
    int64_t seq = 0;
    int next_arr = 0, k_sample = 0, placed_once = 0, lost_once = 0, clock_once = 0;
    int at_end_set = 0;

    for (;;) {
        double tn = INFINITY;
        if (next_arr < n)
            tn = s.tp[s.order[next_arr]].arrive;
        if (s.dep.n && s.dep.a[0].t < tn)
            tn = s.dep.a[0].t;
        if (s.boff.n && s.boff.a[0].t < tn)
            tn = s.boff.a[0].t;
        if (tn == INFINITY)
            break;
        if (tn < now) {
            rc = gs_errf(e, GS_ECONFLICT, "time replay: the clock went backwards (an event at "
                         "%.3f s after one at %.3f s)", tn, now);
            goto out;
        }
        /* the state held over [now, tn) */
        for (; k_sample < SIM_TIME_POINTS; k_sample++) {
            double ts = W0 + (W1 - W0) * k_sample / (SIM_TIME_POINTS - 1);
            if (ts >= tn)
                break;
            r->alloc_ts[k_sample] = 100.0 * (double)alloc_m / cap;
            r->pending_ts[k_sample] = 100.0 * (double)pend_m / cap;
        }
        double a = now > W0 ? now : W0, b = tn < W1 ? tn : W1;
        if (b > a) {
            alloc_int += (double)alloc_m * (b - a);
            pend_int += (double)pend_m * (b - a);
        }
        total_int += (double)alloc_m * (tn - now);
        now = tn;

        /* departures at now */
        s.n_freed = 0;
        while (s.dep.n && s.dep.a[0].t == now) {
            struct hent h = heap_pop(&s.dep);
            struct tpod *q = &s.tp[h.id];
            char uid[32];
            snprintf(uid, sizeof uid, "p%d", h.id);
            const struct core_alloc *al = core_alloc_find(s.c, uid);
            if (q->status != ST_RUNNING || !al) {
                rc = gs_errf(e, GS_ECONFLICT, "time replay: pod %s departs but does not run",
                             t->pods[s.src[h.id]].name);
                goto out;
            }
            struct core_node *nd = core_cluster_find(s.c, al->node);
            int pos = nd ? core_node_pos(nd) : -1;
            if ((rc = core_unreserve(s.c, uid, e)) < 0)
                goto out;
            q->status = ST_DONE;
            alloc_m -= q->milli;
            r->departures++;
            if (s.n_freed == s.cap_freed) {
                int nc = s.cap_freed ? 2 * s.cap_freed : 16;
                int *nf = realloc(s.freed, (size_t)nc * sizeof *nf);
                if (!nf) {
                    rc = gs_errf(e, GS_ENOMEM, "time replay: out of memory");
                    goto out;
                }
                s.freed = nf;
                s.cap_freed = nc;
            }
            s.freed[s.n_freed++] = pos;
        }
        if (s.n_freed && o->fault != SIM_FAULT_NO_RETRY) {
            /* classes that may fit now */
            for (int k = 0; k < s.n_cls; k++) {
                if (!s.blocked[k])
                    continue;
                for (int f = 0; f < s.n_freed && s.blocked[k]; f++)
                    if (s.freed[f] >= 0 &&
                        core_filter(s.c, core_cluster_node(s.c, s.freed[f]), &s.reps[k], NULL))
                        s.blocked[k] = 0;
            }
            /* MoveAllToActiveOrBackoffQueue */
            for (int k = 0; k < s.n_unsched; k++) {
                int id = s.unsched[k];
                struct tpod *q = &s.tp[id];
                double until = q->stamp + backoff_s(q->attempts);
                int rc2 = now >= until ? heap_push(&s.act, q->stamp, q->seq, id)
                                       : heap_push(&s.boff, until, q->seq, id);
                if (rc2 < 0) {
                    rc = gs_errf(e, GS_ENOMEM, "time replay: out of memory");
                    goto out;
                }
                q->status = now >= until ? ST_ACTIVE : ST_BACKOFF;
            }
            s.n_unsched = 0;
        }
        /* backoff over */
        while (s.boff.n && s.boff.a[0].t <= now) {
            struct hent h = heap_pop(&s.boff);
            s.tp[h.id].status = ST_ACTIVE;
            if (heap_push(&s.act, s.tp[h.id].stamp, s.tp[h.id].seq, h.id) < 0) {
                rc = gs_errf(e, GS_ENOMEM, "time replay: out of memory");
                goto out;
            }
        }
        /* arrivals */
        while (next_arr < n && s.tp[s.order[next_arr]].arrive == now) {
            int id = s.order[next_arr++];
            struct tpod *q = &s.tp[id];
            q->stamp = now;
            q->seq = seq++;
            q->status = ST_ACTIVE;
            pend_m += q->milli;
            if (heap_push(&s.act, q->stamp, q->seq, id) < 0) {
                rc = gs_errf(e, GS_ENOMEM, "time replay: out of memory");
                goto out;
            }
        }
        /* one scheduling pass over the active queue */
        while (s.act.n) {
            struct hent h = heap_pop(&s.act);
            struct tpod *q = &s.tp[h.id];
            if (q->status != ST_ACTIVE) {
                rc = gs_errf(e, GS_ECONFLICT, "time replay: pod %s is taken from the queue but "
                             "%s (placed twice?)", t->pods[s.src[h.id]].name,
                             q->status == ST_RUNNING || q->status == ST_DONE ? "was placed already"
                                                                           : "was not waiting");
                goto out;
            }
            int ok = 0;
            if (!s.blocked[q->cls] || o->exhaustive) {
                struct core_decision d;
                memcpy(s.cp, &s.reps[q->cls], sizeof *s.cp);
                snprintf(s.cp->uid, sizeof s.cp->uid, "p%d", h.id);
                snprintf(s.cp->name, sizeof s.cp->name, "%s", t->pods[s.src[h.id]].name);
                r->attempts++;
                if (core_schedule_one(s.c, pol, s.cp, &d, NULL) == 0) {
                    if ((rc = core_reserve(s.c, &d.alloc, e)) < 0)
                        goto out;
                    ok = 1;
                } else {
                    s.blocked[q->cls] = 1;
                }
            }
            if (ok) {
                q->status = ST_RUNNING;
                q->placed = now;
                alloc_m += q->milli;
                pend_m -= q->milli;
                ran_int += (double)q->milli * q->dur;
                r->placements++;
                double end = now + q->dur;
                if (o->fault == SIM_FAULT_CLOCK && !clock_once) {
                    clock_once = 1;
                    end = now - 1;
                }
                if (o->fault == SIM_FAULT_LOSE_DEP && !lost_once) {
                    lost_once = 1;
                } else if (heap_push(&s.dep, end, seq++, h.id) < 0) {
                    rc = gs_errf(e, GS_ENOMEM, "time replay: out of memory");
                    goto out;
                }
                if (o->fault == SIM_FAULT_PLACE_TWICE && !placed_once) {
                    placed_once = 1;
                    if (heap_push(&s.act, now, seq++, h.id) < 0) {
                        rc = gs_errf(e, GS_ENOMEM, "time replay: out of memory");
                        goto out;
                    }
                }
            } else {
                q->attempts++;
                q->stamp = now;
                q->seq = seq++;
                q->status = ST_UNSCHED;
                s.unsched[s.n_unsched++] = h.id;
            }
        }
        if (!at_end_set && now >= W1 && next_arr == n) {
            at_end_set = 1;
            r->waiting_at_end = s.n_unsched + s.boff.n;
        }
    }
    for (; k_sample < SIM_TIME_POINTS; k_sample++) {
        r->alloc_ts[k_sample] = 100.0 * (double)alloc_m / cap;
        r->pending_ts[k_sample] = 100.0 * (double)pend_m / cap;
    }

    /* the run's own checks */
    if (core_cluster_alloc_count(s.c) != 0) {
        rc = gs_errf(e, GS_ECONFLICT, "time replay: %d pods still hold resources after the last "
                     "departure (a lost departure)", core_cluster_alloc_count(s.c));
        goto out;
    }
    if (fabs(total_int - ran_int) > 1e-9 * (ran_int > 1 ? ran_int : 1)) {
        rc = gs_errf(e, GS_ECONFLICT, "time replay: GPU time held (%.6g milli-s) differs from "
                     "GPU time run (%.6g milli-s)", total_int, ran_int);
        goto out;
    }
    for (int k = 0; k < s.n_unsched; k++) {
        int id = s.unsched[k];
        struct core_decision d;
        memcpy(s.cp, &s.reps[s.tp[id].cls], sizeof *s.cp);
        if (core_schedule_one(s.c, pol, s.cp, &d, NULL) == 0) {
            rc = gs_errf(e, GS_ECONFLICT, "time replay: pod %s waited to the end though it fits "
                         "the empty cluster (never retried)", t->pods[s.src[id]].name);
            goto out;
        }
    }
    r->never_placed = s.n_unsched;

    /* KPIs */
    if (W1 > W0) {
        r->alloc_pct = 100.0 * alloc_int / (cap * (W1 - W0));
        r->pending_pct = 100.0 * pend_int / (cap * (W1 - W0));
    } else {
        r->alloc_pct = r->pending_pct = NAN;
    }
    r->gpu_hours = alloc_int / CORE_MILLI / 3600.0;
    for (int cls = 0; cls < SIM_N_CLS; cls++) {
        int k = 0;
        double sum = 0;
        for (int i = 0; i < n; i++)
            if (s.tp[i].status == ST_DONE && in_class(&t->pods[s.src[i]], cls)) {
                s.delays[k] = s.tp[i].placed - s.tp[i].arrive;
                sum += s.delays[k++];
            }
        qsort(s.delays, (size_t)k, sizeof *s.delays, sim_cmp_double);
        r->n_delay[cls] = k;
        r->delay[cls][0] = sim_quantile(s.delays, k, 0.50);
        r->delay[cls][1] = sim_quantile(s.delays, k, 0.90);
        r->delay[cls][2] = sim_quantile(s.delays, k, 0.99);
        r->delay_mean[cls] = k ? sum / k : NAN;
        if (cls == SIM_CLS_ALL)
            for (int q = 0; q < SIM_CDF_POINTS; q++)
                r->cdf[q] = sim_quantile(s.delays, k, (double)q / (SIM_CDF_POINTS - 1));
    }
out:
    state_free(&s);
    r->elapsed_s = gs_mono_s() - w0;
    return rc;
}

/* ---- the grid on threads (sim_jobs_run) ------------------------------ */

struct tgrid {
    const struct sim_config *cfg;
    const double *loads;
    double scale;
    const struct core_policy *const *pols;
    const uint64_t *seeds;
    int n_pols, n_seeds;
    struct sim_time_result *results;
};

static int tgrid_job(void *ud, int j, struct gs_err *e)
{
    struct tgrid *g = ud;
    int per_load = g->n_pols * g->n_seeds;
    struct sim_time_opts o = {g->loads[j / per_load], g->scale, SIM_FAULT_NONE, 0};
    return sim_time_run(g->cfg, &o, g->pols[(j % per_load) / g->n_seeds],
                        g->seeds[j % g->n_seeds], &g->results[j], e);
}

int sim_time_grid(const struct sim_config *cfg, const double *loads, int n_loads, double scale,
                  const struct core_policy *const *pols, int n_pols, const uint64_t *seeds,
                  int n_seeds, int threads, struct sim_time_result *results, struct gs_err *e)
{
    struct tgrid g = {cfg, loads, scale, pols, seeds, n_pols, n_seeds, results};
    return sim_jobs_run(n_loads * n_pols * n_seeds, threads, tgrid_job, &g, e);
}
