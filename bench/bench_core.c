/*
 * bench/bench_core.c - how fast is one scheduling decision?
 *
 * A synthetic cluster of N nodes x 8 GPUs (three GPU models) is filled to a
 * steady load (default 60 % of GPU capacity) with openb-shaped pods from the
 * generator; then each measured decision is filter + score + choose node +
 * choose GPUs (core_schedule_one) + core_reserve, and the oldest pod leaves
 * after each one so the load stays put. Prints, per policy, the mean and
 * percentiles of the decision's CPU time (thread CPU clock, so a busy
 * machine does not inflate it) and decisions per CPU second.
 *
 *   build/bench_core [--nodes 5000] [--decisions 20000] [--load 0.6]
 *                    [--policy bestfit,fgd,...] [--learned]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/policy.h"
#include "sim/sim_gen.h"
#include "sim/sim_run.h"
#include "util/opt.h"

/* CPU time of this thread: what a decision costs, not what other processes
 * on a shared machine take from it. */
static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void to_pod(const struct sim_pod *p, long uid, struct core_pod *cp)
{
    memset(&cp->req, 0, sizeof cp->req);
    snprintf(cp->uid, sizeof cp->uid, "b%ld", uid);
    snprintf(cp->name, sizeof cp->name, "%s", p->name);
    cp->req.cpu_milli = p->cpu_milli;
    cp->req.mem_bytes = p->mem_mib << 20;
    if (p->num_gpu == 0) {
        cp->req.kind = CORE_REQ_NONE;
    } else if (p->gpu_milli == 1000) {
        cp->req.kind = CORE_REQ_WHOLE;
        cp->req.num_gpu = p->num_gpu;
        cp->req.milli = 1000;
    } else {
        cp->req.kind = CORE_REQ_SHARED;
        cp->req.num_gpu = 1;
        cp->req.milli = p->gpu_milli;
    }
}

/* learned: no target workload, so the core learns M from the pods it
 * reserves, as the extender does */
static struct core_cluster *make_cluster(int n_nodes, const struct sim_config *cfg, int learned)
{
    static const char *const models[] = {"G2", "T4", "V100M32"};
    struct core_cluster *c = core_cluster_new();
    struct core_node_spec *s = calloc(1, sizeof *s);
    char name[64];
    for (int i = 0; i < n_nodes; i++) {
        memset(s, 0, sizeof *s);
        snprintf(name, sizeof name, "bench-node-%05d", i);
        s->name = name;
        s->cpu_milli = 96000;
        s->mem_bytes = (int64_t)393216 << 20;
        s->n_gpus = 8;
        for (int g = 0; g < 8; g++) {
            s->gpus[g].index = g;
            snprintf(s->gpus[g].model, CORE_MODEL_MAX, "%s", models[i % 3]);
            s->gpus[g].healthy = 1;
            s->gpus[g].numa = g / 4;
        }
        if (core_cluster_upsert_node(c, s, NULL) < 0)
            abort();
    }
    free(s);
    if (!learned)
        core_cluster_set_workload(c, cfg->classes, cfg->n_classes, 0.95, NULL);
    core_cluster_set_seed(c, 42);
    return c;
}

int main(int argc, char **argv)
{
    long n_nodes = 5000, decisions = 20000;
    double load = 0.6;
    int learned = 0;
    const char *policies = "random,dotprod,clustering,packing,bestfit,fgd,binpack,spread,topology";
    int npos = 0;
    struct gs_err e = GS_ERR_INIT;
    const struct opt opts[] = {
        OPT_INT("nodes", &n_nodes, "N", "nodes of 8 GPUs (default 5000)", 1, 1000000),
        OPT_INT("decisions", &decisions, "N", "measured decisions per policy (default 20000)", 1,
                100000000),
        OPT_DBL("load", &load, "F", "GPU share held before measuring (default 0.6)"),
        OPT_STR("policy", &policies, "LIST", "comma-separated policies (default: all)"),
        OPT_BOOL("learned", &learned, "no target workload: M is learned from reserved pods "
                 "(the extender's configuration)"),
        OPT_END(),
    };
    int rc = opt_parse(argc, argv, opts, &npos, &e);
    if (rc == OPT_HELP) {
        opt_usage(stdout, "bench_core [options]", opts);
        return 0;
    }
    if (rc < 0 || !(load >= 0 && load < 0.95)) {
        fprintf(stderr, "bench_core: %s\n", rc < 0 ? e.msg : "--load must be in [0, 0.95)");
        return 2;
    }
    /* the workload: openb-shaped pods, enough for warm-up and measurement */
    struct sim_trace t;
    long n_pods = decisions + n_nodes * 8 + 1000;
    if (sim_gen(&t, 1, (int)n_pods, 1, &e) < 0) {
        fprintf(stderr, "bench_core: %s\n", e.msg);
        return 1;
    }
    struct sim_config cfg;
    if (sim_config_init(&cfg, &t, 1.3, &e) < 0) {
        fprintf(stderr, "bench_core: %s\n", e.msg);
        return 1;
    }
    double *lat = malloc((size_t)decisions * sizeof *lat);
    long *held = malloc((size_t)n_pods * sizeof *held);
    struct core_pod *cp = calloc(1, sizeof *cp);
    printf("%ld nodes x 8 GPUs, load %.0f %%, %ld decisions per policy "
           "(filter + score + choose GPUs + reserve), workload %s\n\n", n_nodes, load * 100,
           decisions, learned ? "learned" : "set");
    printf("%-12s %10s %10s %10s %10s %12s\n", "policy", "mean_us", "p50_us", "p99_us", "max_us",
           "per_cpu_s");

    for (const char *p = policies; *p;) {
        size_t len = strcspn(p, ",");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)len, p);
        p += len + (p[len] == ',');
        const struct core_policy *pol = core_policy_find(name);
        if (!pol) {
            fprintf(stderr, "bench_core: unknown policy '%s'\n", name);
            return 2;
        }
        struct core_cluster *c = make_cluster((int)n_nodes, &cfg, learned);
        struct core_decision d;
        struct core_stats st;
        long next = 0, head = 0, tail = 0;
        core_cluster_stats(c, &st);
        double want = load * (double)st.milli_total, alloc = 0;
        while (alloc < want && next < n_pods) {
            to_pod(&t.pods[next], next, cp);
            if (core_schedule_one(c, pol, cp, &d, NULL) == 0 && core_reserve(c, &d.alloc, NULL) == 0) {
                held[tail++] = next;
                alloc += (double)t.pods[next].num_gpu * t.pods[next].gpu_milli;
            }
            next++;
        }
        long done = 0;
        while (done < decisions) {
            const struct sim_pod *sp = &t.pods[next % n_pods];
            to_pod(sp, next, cp);
            double t0 = now_us();
            int ok = core_schedule_one(c, pol, cp, &d, NULL) == 0 &&
                     core_reserve(c, &d.alloc, NULL) == 0;
            lat[done++] = now_us() - t0;
            if (ok)
                held[tail++ % n_pods] = next;
            next++;
            if (head < tail) { /* the oldest pod leaves: the load stays put */
                char uid[32];
                snprintf(uid, sizeof uid, "b%ld", held[head++ % n_pods]);
                core_unreserve(c, uid, NULL);
            }
        }
        double sum = 0;
        for (long i = 0; i < decisions; i++)
            sum += lat[i];
        qsort(lat, (size_t)decisions, sizeof *lat, cmp_double);
        double mean = sum / (double)decisions;
        printf("%-12s %10.1f %10.1f %10.1f %10.1f %12.0f\n", name, mean,
               lat[decisions / 2], lat[(long)(decisions * 0.99)], lat[decisions - 1],
               1e6 / mean);
        fflush(stdout);
        core_cluster_free(c);
    }
    free(lat);
    free(held);
    free(cp);
    sim_config_clear(&cfg);
    sim_trace_clear(&t);
    return 0;
}
