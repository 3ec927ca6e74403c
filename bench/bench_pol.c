/*
 * bench/bench_pol.c - CPU time of one scheduling decision per policy on a
 * large, partly filled cluster (default 5,000 nodes x 8 GPUs), the extender's
 * budget being well under a millisecond.
 *
 * The cluster mixes two GPU models (a quarter of the nodes "V100", the rest
 * "G2", 96 cores each) and is filled to --fill of its GPU share by pods of
 * an openb-like class mix placed on random nodes, so that node states are
 * varied and the per-decision memo of identical nodes helps little. The
 * target workload M is the same class mix, one class restricted to V100 so
 * that cpufrag's model pressure is on. Each timed decision is
 * core_schedule_one() + core_reserve() + core_unreserve() (the state stays
 * the same), on the process CPU clock.
 *
 *   bench_pol [--nodes N] [--decisions D] [--fill F] [--policy a,b,...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/policy.h"

struct pclass {
    int64_t cpu;
    int num_gpu, milli;
    const char *spec;
    double weight;
};

/* the shape of openb's default trace: shares, whole GPUs, a few multi-GPU
 * and CPU-only pods, one class tied to a model */
static const struct pclass mix[] = {
    {3152, 1, 810, "", 13}, {11300, 1, 1000, "", 11}, {11400, 1, 1000, "", 7},
    {11908, 1, 470, "", 5}, {12500, 0, 0, "", 5},     {8000, 1, 470, "", 4},
    {12000, 1, 1000, "", 4}, {32000, 0, 0, "", 4},     {11908, 1, 650, "", 3},
    {4000, 1, 320, "", 3},  {18708, 1, 1000, "V100", 3}, {4000, 1, 230, "", 2},
    {6000, 1, 460, "", 2},  {32000, 2, 1000, "", 1},  {64000, 8, 1000, "", 0.5},
};
#define N_MIX ((int)(sizeof mix / sizeof mix[0]))

static uint64_t rng = 0x1234567;
static uint64_t next(uint64_t n)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (rng >> 33) % n;
}

static const struct pclass *draw(void)
{
    double total = 0;
    for (int i = 0; i < N_MIX; i++)
        total += mix[i].weight;
    double x = (double)next(1000000) / 1000000 * total;
    for (int i = 0; i < N_MIX; i++) {
        if (x < mix[i].weight)
            return &mix[i];
        x -= mix[i].weight;
    }
    return &mix[0];
}

static void to_pod(const struct pclass *k, int id, struct core_pod *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->uid, sizeof p->uid, "p%d", id);
    snprintf(p->name, sizeof p->name, "p%d", id);
    p->req.cpu_milli = k->cpu;
    p->req.mem_bytes = 1 << 30;
    p->req.num_gpu = k->num_gpu;
    p->req.milli = k->milli;
    p->req.kind = k->num_gpu == 0 ? CORE_REQ_NONE
                  : k->milli >= CORE_MILLI ? CORE_REQ_WHOLE : CORE_REQ_SHARED;
    if (k->spec[0]) {
        snprintf(p->req.types[0], sizeof p->req.types[0], "%s", k->spec);
        p->req.n_types = 1;
    }
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static struct core_cluster *build(int nodes, double fill)
{
    struct core_cluster *c = core_cluster_new();
    struct core_node_spec s;
    struct gs_err e = GS_ERR_INIT;
    char name[32];
    if (!c)
        return NULL;
    for (int i = 0; i < nodes; i++) {
        memset(&s, 0, sizeof s);
        snprintf(name, sizeof name, "node-%05d", i);
        s.name = name;
        s.cpu_milli = 96000;
        s.mem_bytes = 512LL << 30;
        s.n_gpus = 8;
        for (int g = 0; g < 8; g++) {
            s.gpus[g].index = g;
            snprintf(s.gpus[g].uuid, sizeof s.gpus[g].uuid, "GPU-%d-%d", i, g);
            snprintf(s.gpus[g].model, sizeof s.gpus[g].model, "%s", i % 4 ? "G2" : "V100");
            s.gpus[g].healthy = 1;
            s.gpus[g].numa = -1;
        }
        if (core_cluster_upsert_node(c, &s, &e) < 0) {
            fprintf(stderr, "bench_pol: %s\n", e.msg);
            core_cluster_free(c);
            return NULL;
        }
    }
    struct core_class m[N_MIX];
    for (int i = 0; i < N_MIX; i++) {
        m[i] = (struct core_class){mix[i].cpu, mix[i].num_gpu, mix[i].milli, "", mix[i].weight};
        snprintf(m[i].gpu_spec, sizeof m[i].gpu_spec, "%s", mix[i].spec);
    }
    if (core_cluster_set_workload(c, m, N_MIX, 0.95, &e) < 0) {
        fprintf(stderr, "bench_pol: %s\n", e.msg);
        core_cluster_free(c);
        return NULL;
    }
    /* fill: random pods on random nodes, best-fit GPUs, no scoring */
    const struct core_policy *bf = core_policy_find("bestfit");
    double target = fill * nodes * 8 * CORE_MILLI, used = 0;
    struct core_pod p;
    struct core_alloc a;
    for (int id = 0, misses = 0; used < target && misses < 100000; id++) {
        const struct pclass *k = draw();
        to_pod(k, id, &p);
        struct core_node *n = core_cluster_node(c, (int)next((uint64_t)nodes));
        if (core_pick_gpus(c, bf, n, &p, &a, NULL) == 0 && core_reserve(c, &a, NULL) == 0) {
            used += (double)k->num_gpu * k->milli;
            misses = 0;
        } else {
            misses++;
        }
    }
    return c;
}

int main(int argc, char **argv)
{
    int nodes = 5000, decisions = 2000;
    double fill = 0.7;
    const char *list = "fgd,cpufrag";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc)
            nodes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--decisions") == 0 && i + 1 < argc)
            decisions = atoi(argv[++i]);
        else if (strcmp(argv[i], "--fill") == 0 && i + 1 < argc)
            fill = atof(argv[++i]);
        else if (strcmp(argv[i], "--policy") == 0 && i + 1 < argc)
            list = argv[++i];
        else {
            fprintf(stderr, "usage: bench_pol [--nodes N] [--decisions D] [--fill F] "
                            "[--policy a,b,...]\n");
            return 2;
        }
    }
    if (nodes < 1 || decisions < 1 || !(fill >= 0 && fill < 1)) {
        fprintf(stderr, "bench_pol: --nodes and --decisions must be >= 1, --fill in [0, 1)\n");
        return 2;
    }
    struct core_cluster *c = build(nodes, fill);
    double *t = malloc((size_t)decisions * sizeof *t);
    char *names = strdup(list);
    if (!c || !t || !names) {
        fprintf(stderr, "bench_pol: out of memory\n");
        return 1;
    }
    printf("%d nodes x 8 GPUs, filled to %.0f%%, %d decisions per policy (CPU time)\n", nodes,
           fill * 100, decisions);
    printf("%-10s %10s %10s %10s %8s\n", "policy", "mean ms", "p50 ms", "p99 ms", "placed");
    int rc = 0;
    char *save = NULL;
    for (char *name = strtok_r(names, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        const struct core_policy *pol = core_policy_find(name);
        if (!pol) {
            fprintf(stderr, "bench_pol: unknown policy '%s'\n", name);
            rc = 2;
            break;
        }
        uint64_t saved = rng;
        int placed = 0;
        double sum = 0;
        for (int i = 0; i < decisions; i++) {
            struct core_pod p;
            struct core_decision d;
            to_pod(draw(), 1000000 + i, &p);
            double t0 = now();
            int ok = core_schedule_one(c, pol, &p, &d, NULL) == 0 &&
                     core_reserve(c, &d.alloc, NULL) == 0;
            t[i] = (now() - t0) * 1e3;
            sum += t[i];
            if (ok) {
                placed++;
                core_unreserve(c, p.uid, NULL);
            }
        }
        rng = saved; /* every policy sees the same pods */
        qsort(t, (size_t)decisions, sizeof *t, cmp_double);
        printf("%-10s %10.3f %10.3f %10.3f %8d\n", name, sum / decisions, t[decisions / 2],
               t[(int)(decisions * 0.99)], placed);
    }
    free(names);
    free(t);
    core_cluster_free(c);
    return rc;
}
