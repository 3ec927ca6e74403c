/*
 * sim/sim_run.c - one benchmark replay, and the grid of them on threads.
 *
 * Follows docs/benchmark.md: the GPU nodes become a fresh cluster; pods are
 * sorted by name, shuffled with the seed, tuned to `tune` x capacity (clones
 * drawn with replacement, or random removals), then submitted one by one
 * through core_schedule_one(); a pod that does not fit is dropped. After each
 * pod the arrived workload, the allocated share and the fragmentation are
 * sampled; samples are averaged per integer arrived %.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "sim/sim_run.h"
#include "util/clock.h"

/* ---- workload classes ------------------------------------------------- */

int sim_config_init(struct sim_config *cfg, const struct sim_trace *t, double tune,
                    struct gs_err *e)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->trace = t;
    cfg->tune = tune;
    cfg->coverage = 0.95;
    if (!(tune > 0 && tune <= 100))
        return gs_errf(e, GS_EINVAL, "--tune: %g is out of range (0, 100]", tune);
    cfg->classes = calloc((size_t)t->n_pods + 1, sizeof *cfg->classes);
    if (!cfg->classes)
        return gs_errf(e, GS_ENOMEM, "workload classes: out of memory");
    /* pods of one class share (cpu, gpu_milli, num_gpu, gpu_spec); a small
     * open-addressing table keeps this linear */
    int cap = 64;
    while (cap < 2 * t->n_pods + 2)
        cap *= 2;
    int *slot = calloc((size_t)cap, sizeof *slot);
    if (!slot) {
        sim_config_clear(cfg);
        return gs_errf(e, GS_ENOMEM, "workload classes: out of memory");
    }
    for (int i = 0; i < t->n_pods; i++) {
        const struct sim_pod *p = &t->pods[i];
        uint64_t h = (uint64_t)p->cpu_milli * 0x9e3779b97f4a7c15ULL ^
                     (uint64_t)(p->gpu_milli * 31 + p->num_gpu) * 0xbf58476d1ce4e5b9ULL;
        for (const char *s = p->gpu_spec; *s; s++)
            h = (h ^ (unsigned char)*s) * 1099511628211ULL;
        size_t k = h & (size_t)(cap - 1);
        for (;;) {
            if (!slot[k]) {
                struct core_class *c = &cfg->classes[cfg->n_classes];
                c->cpu_milli = p->cpu_milli;
                c->num_gpu = p->num_gpu;
                c->milli = p->gpu_milli;
                snprintf(c->gpu_spec, sizeof c->gpu_spec, "%s", p->gpu_spec);
                c->weight = 1;
                slot[k] = ++cfg->n_classes;
                break;
            }
            struct core_class *c = &cfg->classes[slot[k] - 1];
            if (c->cpu_milli == p->cpu_milli && c->num_gpu == p->num_gpu &&
                c->milli == p->gpu_milli && strcmp(c->gpu_spec, p->gpu_spec) == 0) {
                c->weight++;
                break;
            }
            k = (k + 1) & (size_t)(cap - 1);
        }
    }
    free(slot);
    return 0;
}

void sim_config_clear(struct sim_config *cfg)
{
    free(cfg->classes);
    cfg->classes = NULL;
    cfg->n_classes = 0;
}

/* ---- one run ---------------------------------------------------------- */

static uint64_t rnd(uint64_t *s, uint64_t n)
{
    *s += 0x9e3779b97f4a7c15ULL;
    uint64_t x = *s;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x % n;
}

static int cmp_pod_name(const void *a, const void *b, void *arg)
{
    const struct sim_pod *pods = arg;
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(pods[x].name, pods[y].name);
    return c ? c : (x > y) - (x < y);
}

int sim_build_cluster(struct core_cluster *c, const struct sim_trace *t, struct gs_err *e)
{
    struct core_node_spec *spec = calloc(1, sizeof *spec);
    if (!spec)
        return gs_errf(e, GS_ENOMEM, "cluster: out of memory");
    int rc = 0;
    for (int i = 0; i < t->n_nodes && rc == 0; i++) {
        const struct sim_node *n = &t->nodes[i];
        memset(spec, 0, sizeof *spec);
        spec->name = n->name;
        spec->cpu_milli = n->cpu_milli;
        spec->mem_bytes = n->mem_mib << 20;
        spec->n_gpus = n->gpus;
        for (int g = 0; g < n->gpus; g++) {
            struct core_gpu_spec *gs = &spec->gpus[g];
            gs->index = g;
            snprintf(gs->uuid, sizeof gs->uuid, "GPU-%d-%d", i, g);
            snprintf(gs->model, sizeof gs->model, "%s", n->model);
            gs->healthy = 1;
            gs->numa = -1;
        }
        rc = core_cluster_upsert_node(c, spec, e);
    }
    free(spec);
    return rc;
}

int sim_cluster_init(struct core_cluster *c, const struct sim_config *cfg, uint64_t seed,
                     struct gs_err *e)
{
    int rc = sim_build_cluster(c, cfg->trace, e);
    if (rc == 0 && !cfg->learned)
        rc = core_cluster_set_workload(c, cfg->classes, cfg->n_classes, cfg->coverage, e);
    core_cluster_set_seed(c, seed);
    return rc;
}

void sim_core_pod(const struct sim_pod *p, int uid, struct core_pod *cp)
{
    struct core_request *r = &cp->req;
    memset(r, 0, sizeof *r);
    snprintf(cp->uid, sizeof cp->uid, "p%d", uid);
    snprintf(cp->name, sizeof cp->name, "%s", p->name);
    r->cpu_milli = p->cpu_milli;
    r->mem_bytes = p->mem_mib << 20;
    if (p->num_gpu == 0) {
        r->kind = CORE_REQ_NONE;
    } else if (p->gpu_milli >= CORE_MILLI) {
        r->kind = CORE_REQ_WHOLE;
        r->num_gpu = p->num_gpu;
        r->milli = CORE_MILLI;
    } else {
        r->kind = CORE_REQ_SHARED;
        r->num_gpu = p->num_gpu;
        r->milli = p->gpu_milli;
    }
    for (const char *s = p->gpu_spec; *s && r->n_types < CORE_MAX_TYPES;) {
        size_t len = strcspn(s, "|");
        snprintf(r->types[r->n_types++], CORE_MODEL_MAX, "%.*s", (int)len, s);
        s += len;
        if (*s)
            s++;
    }
}

struct sample {
    double arrived, unalloc, frag, rate;
};

/* Per the benchmark: mean of the samples whose arrived % rounds to the bin,
 * else of those within +-1, else NaN. */
static void bin_samples(const struct sample *s, int n, struct sim_run_result *r)
{
    double sum[SIM_BINS][3] = {{0}}, near[SIM_BINS][3] = {{0}};
    int cnt[SIM_BINS] = {0}, ncnt[SIM_BINS] = {0};
    for (int i = 0; i < n; i++) {
        double a = s[i].arrived;
        long b = lround(a);
        if (b >= 0 && b < SIM_BINS) {
            sum[b][0] += s[i].unalloc;
            sum[b][1] += s[i].frag;
            sum[b][2] += s[i].rate;
            cnt[b]++;
        }
        for (long k = (long)floor(a - 1); k <= (long)ceil(a + 1); k++)
            if (k >= 0 && k < SIM_BINS && fabs(a - (double)k) <= 1.0) {
                near[k][0] += s[i].unalloc;
                near[k][1] += s[i].frag;
                near[k][2] += s[i].rate;
                ncnt[k]++;
            }
    }
    for (int b = 0; b < SIM_BINS; b++) {
        double (*src)[3] = cnt[b] ? sum : near;
        int c = cnt[b] ? cnt[b] : ncnt[b];
        r->unalloc[b] = c ? src[b][0] / c : NAN;
        r->frag[b] = c ? src[b][1] / c : NAN;
        r->frag_rate[b] = c ? src[b][2] / c : NAN;
    }
}

int sim_order(const struct sim_config *cfg, uint64_t seed, int **out, int *out_len,
              struct gs_err *e)
{
    const struct sim_trace *t = cfg->trace;
    int rc = 0;
    *out = NULL;
    *out_len = 0;
    int *order = malloc(((size_t)t->n_pods + 1) * sizeof *order);
    if (!order)
        return gs_errf(e, GS_ENOMEM, "run: out of memory");
    /* sort by name, then a seeded uniform shuffle */
    uint64_t rng = seed * 0x2545f4914f6cdd1dULL + 1;
    int n = t->n_pods;
    for (int i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, cmp_pod_name, (void *)t->pods);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rnd(&rng, (uint64_t)i + 1);
        int x = order[i];
        order[i] = order[j];
        order[j] = x;
    }

    /* workload tuning to cfg->tune x capacity */
    const double cap = (double)t->total_gpus * CORE_MILLI;
    const double target = cfg->tune * cap;
    double req = 0;
    for (int i = 0; i < n; i++)
        req += (double)t->pods[i].num_gpu * t->pods[i].gpu_milli;
    int len = n, cap_order = n + 1;
    if (req < target) {
        for (;;) {
            int pick = order[rnd(&rng, (uint64_t)n)];
            const struct sim_pod *p = &t->pods[pick];
            if (req + p->gpu_milli > target)
                break;
            if (len == cap_order) {
                cap_order *= 2;
                int *no = realloc(order, (size_t)cap_order * sizeof *order);
                if (!no) {
                    rc = gs_errf(e, GS_ENOMEM, "tuning: out of memory");
                    goto fail;
                }
                order = no;
            }
            order[len++] = pick;
            req += (double)p->num_gpu * p->gpu_milli;
            if (len > 100 * n + 1000000) {
                rc = gs_errf(e, GS_EINVAL, "tuning: the trace's pods ask for too few GPUs to "
                             "reach %.0f%% of capacity", cfg->tune * 100);
                goto fail;
            }
        }
    } else {
        while (req > target && len > 0) {
            int k = (int)rnd(&rng, (uint64_t)len);
            req -= (double)t->pods[order[k]].num_gpu * t->pods[order[k]].gpu_milli;
            memmove(order + k, order + k + 1, (size_t)(len - k - 1) * sizeof *order);
            len--;
        }
    }

    *out = order;
    *out_len = len;
    return 0;
fail:
    free(order);
    return rc;
}

int sim_run(const struct sim_config *cfg, const struct core_policy *pol, uint64_t seed,
            struct sim_run_result *r, struct gs_err *e)
{
    const struct sim_trace *t = cfg->trace;
    double t0 = gs_mono_s();
    memset(r, 0, sizeof *r);
    r->policy = pol;
    r->seed = seed;
    if (t->total_gpus <= 0)
        return gs_errf(e, GS_EINVAL, "the node list has no GPUs");

    struct core_cluster *c = core_cluster_new();
    int *order = NULL;
    struct core_pod *cp = calloc(1, sizeof *cp);
    int rc = 0;
    if (!c || !cp) {
        rc = gs_errf(e, GS_ENOMEM, "run: out of memory");
        goto out;
    }
    if ((rc = sim_cluster_init(c, cfg, seed, e)) < 0)
        goto out;

    int len;
    if ((rc = sim_order(cfg, seed, &order, &len, e)) < 0)
        goto out;
    const double cap = (double)t->total_gpus * CORE_MILLI;
    struct sample *s = malloc(((size_t)len + 1) * sizeof *s);
    if (!s) {
        rc = gs_errf(e, GS_ENOMEM, "run: out of memory");
        goto out;
    }
    double arrived = 0, alloc = 0;
    struct core_decision d;
    for (int i = 0; i < len; i++) {
        const struct sim_pod *p = &t->pods[order[i]];
        sim_core_pod(p, i, cp);
        arrived += (double)p->num_gpu * p->gpu_milli;
        if (core_schedule_one(c, pol, cp, &d, NULL) == 0 && core_reserve(c, &d.alloc, NULL) == 0)
            alloc += (double)p->num_gpu * p->gpu_milli;
        else
            r->failed++;
        double frag = core_cluster_frag(c);
        s[i].arrived = 100.0 * arrived / cap;
        s[i].unalloc = 100.0 - 100.0 * alloc / cap;
        s[i].frag = 100.0 * frag / cap;
        s[i].rate = cap - alloc > 0 ? 100.0 * frag / (cap - alloc) : 0;
    }
    r->pods = len;
    bin_samples(s, len, r);
    free(s);
out:
    core_cluster_free(c);
    free(order);
    free(cp);
    r->elapsed_s = gs_mono_s() - t0;
    return rc;
}

/* ---- jobs on threads ------------------------------------------------- */

struct pool {
    int (*job)(void *ud, int j, struct gs_err *e);
    void *ud;
    int n_jobs, next;
    pthread_mutex_t lock;
    int rc;
    struct gs_err err;
};

static void *pool_worker(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int j = p->rc < 0 ? p->n_jobs : p->next++;
        pthread_mutex_unlock(&p->lock);
        if (j >= p->n_jobs)
            return NULL;
        struct gs_err e = GS_ERR_INIT;
        int rc = p->job(p->ud, j, &e);
        if (rc < 0) {
            pthread_mutex_lock(&p->lock);
            if (p->rc == 0) {
                p->rc = rc;
                p->err = e;
            }
            pthread_mutex_unlock(&p->lock);
        }
    }
}

int sim_jobs_run(int n_jobs, int threads, int (*job)(void *ud, int j, struct gs_err *e), void *ud,
                 struct gs_err *e)
{
    struct pool p = {job, ud, n_jobs, 0, PTHREAD_MUTEX_INITIALIZER, 0, GS_ERR_INIT};
    if (threads <= 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = ncpu > 0 ? (int)ncpu : 1;
    }
    if (threads > n_jobs)
        threads = n_jobs;
    if (threads > 64)
        threads = 64;
    pthread_t tid[64];
    int started = 0;
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&tid[started], NULL, pool_worker, &p) != 0)
            break;
        started++;
    }
    pool_worker(&p); /* this thread works too */
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&p.lock);
    if (p.rc < 0) {
        if (e)
            *e = p.err;
        return p.rc;
    }
    return 0;
}

struct grid {
    const struct sim_config *cfg;
    const struct core_policy *const *pols;
    const uint64_t *seeds;
    int n_seeds;
    struct sim_run_result *results;
};

static int grid_job(void *ud, int j, struct gs_err *e)
{
    struct grid *g = ud;
    return sim_run(g->cfg, g->pols[j / g->n_seeds], g->seeds[j % g->n_seeds], &g->results[j], e);
}

int sim_run_grid(const struct sim_config *cfg, const struct core_policy *const *pols, int n_pols,
                 const uint64_t *seeds, int n_seeds, int threads, struct sim_run_result *results,
                 struct gs_err *e)
{
    struct grid g = {cfg, pols, seeds, n_seeds, results};
    return sim_jobs_run(n_pols * n_seeds, threads, grid_job, &g, e);
}

int sim_replay_state(const struct sim_config *cfg, const struct core_policy *pol, uint64_t seed,
                     const int *order, int len, unsigned char *placed,
                     struct core_cluster **state, struct gs_err *e)
{
    struct core_cluster *c = core_cluster_new();
    struct core_pod *cp = calloc(1, sizeof *cp);
    int rc = 0;
    if (state)
        *state = NULL;
    if (!c || !cp) {
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = sim_cluster_init(c, cfg, seed, e)) < 0)
        goto out;
    struct core_decision d;
    for (int i = 0; i < len; i++) {
        sim_core_pod(&cfg->trace->pods[order[i]], i, cp);
        placed[i] = core_schedule_one(c, pol, cp, &d, NULL) == 0 &&
                    core_reserve(c, &d.alloc, NULL) == 0;
    }
    if (state) {
        *state = c;
        c = NULL;
    }
out:
    core_cluster_free(c);
    free(cp);
    return rc;
}

int sim_replay_placed(const struct sim_config *cfg, const struct core_policy *pol, uint64_t seed,
                      const int *order, int len, unsigned char *placed, struct gs_err *e)
{
    return sim_replay_state(cfg, pol, seed, order, len, placed, NULL, e);
}
