/*
 * bench/bench_bound_wc.c - the bound for work-conserving schedulers against
 * the offline bound (docs/benchmark.md, "A bound for work-conserving
 * schedulers"): per seed, the LP bound B (sim_bound_run), the bound W with
 * the proven forced pods held (sim_bound_run_wc), how many GPU pods are
 * forced and where the first one not proven forced arrives, and how far any
 * test of forced pods could raise W at all.
 *
 * That last number, W_ceil: true forcing (some node fits the pod whatever
 * subset of the earlier pods was placed, wherever) ends, within a class,
 * before the class's first pod that fails in a real run (that run's
 * placement is such a subset). The pods of each class before the earliest
 * failure of the class over seven policies' replays are placed in all
 * seven runs, so the LP holding them is feasible, and its bound is at least
 * what any sound forcing test could give; it is not a bound itself.
 *
 *   bench_bound_wc NODES.csv PODS.csv [SEEDS, e.g. 42-51]
 *
 * Prints one line per seed and the means; exits 2 on bad arguments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "sim/sim_bound.h"
#include "sim/sim_forced.h"
#include "sim/sim_run.h"
#include "sim/sim_trace.h"

static const char *const pols[] = {"random", "dotprod", "clustering", "packing",
                                   "bestfit", "fgd", "cpufrag"};
#define N_POLS (int)(sizeof pols / sizeof pols[0])

/* ceil[i] = 1 for the pods before the first failure of their class in any
 * of the replays (a class: sim_pod_same_shape). */
static int ceiling(const struct sim_config *cfg, uint64_t seed, const int *order, int len,
                   unsigned char *ceil_forced, struct gs_err *e)
{
    const struct sim_trace *t = cfg->trace;
    unsigned char *placed = malloc((size_t)len + 1);
    int *cls = malloc(((size_t)len + 1) * sizeof *cls), *rep = malloc(((size_t)len + 1) * sizeof *rep);
    int rc = 0, n_cls = 0;
    if (!placed || !cls || !rep) {
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < len; i++) {
        int k = 0;
        while (k < n_cls && !sim_pod_same_shape(&t->pods[rep[k]], &t->pods[order[i]]))
            k++;
        if (k == n_cls)
            rep[n_cls++] = order[i];
        cls[i] = k;
    }
    /* the first failure of each class over the replays */
    int *first_fail = malloc(((size_t)n_cls + 1) * sizeof *first_fail);
    if (!first_fail) {
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
        goto out;
    }
    for (int k = 0; k < n_cls; k++)
        first_fail[k] = len;
    for (int p = 0; p < N_POLS && rc == 0; p++) {
        if ((rc = sim_replay_placed(cfg, core_policy_find(pols[p]), seed, order, len, placed, e)) < 0)
            break;
        for (int i = 0; i < len; i++)
            if (!placed[i] && i < first_fail[cls[i]])
                first_fail[cls[i]] = i;
    }
    for (int i = 0; i < len; i++)
        ceil_forced[i] = t->pods[order[i]].num_gpu > 0 && i < first_fail[cls[i]];
    free(first_fail);
out:
    free(placed);
    free(cls);
    free(rep);
    return rc;
}

static int parse_seeds(const char *s, unsigned long *lo, unsigned long *hi)
{
    char *end;
    *lo = strtoul(s, &end, 10);
    int bad = end == s || s[0] < '0' || s[0] > '9';
    if (*end == '-') {
        const char *from = end + 1;
        *hi = strtoul(from, &end, 10);
        bad |= end == from || *from < '0' || *from > '9';
    } else {
        *hi = *lo;
    }
    return bad || *end || *hi < *lo || *hi - *lo > 1000 ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: bench_bound_wc NODES.csv PODS.csv [SEEDS]\n");
        return 2;
    }
    unsigned long lo = 42, hi = 51;
    if (argc > 3 && parse_seeds(argv[3], &lo, &hi) < 0) {
        fprintf(stderr, "bench_bound_wc: seeds: want N or N-M, got '%s'\n", argv[3]);
        return 2;
    }
    struct sim_trace t = {0};
    struct sim_config cfg;
    struct gs_err e = GS_ERR_INIT;
    if (sim_trace_load(&t, argv[1], argv[2], NULL, &e) < 0 || sim_config_init(&cfg, &t, 1.3, &e) < 0) {
        fprintf(stderr, "bench_bound_wc: %s\n", e.msg);
        sim_trace_clear(&t);
        return 1;
    }
    int status = 0, n = 0;
    double sum[7] = {0};
    printf("seed        B        W   W-B  forced%%  first-unforced%%   W_ceil  ceil-forced%%  forced_s\n");
    for (unsigned long s = lo; s <= hi && status == 0; s++) {
        double b, w, wc = NAN;
        struct sim_bound_stats ws, cs;
        int *order = NULL, len, first, last;
        unsigned char *cf = NULL;
        if (sim_bound_run(&cfg, s, &b, NULL, &e) < 0 || sim_bound_run_wc(&cfg, s, &w, &ws, &e) < 0 ||
            sim_order(&cfg, s, &order, &len, &e) < 0) {
            status = 1;
        } else {
            sim_bound_bin(&t, order, len, &first, &last);
            cf = malloc((size_t)len + 1);
            if (!cf || ceiling(&cfg, s, order, len, cf, &e) < 0 ||
                sim_bound_prefixes_wc(&t, order, first, last, cf, &wc, &cs, &e) < 0)
                status = 1;
        }
        if (status) {
            fprintf(stderr, "bench_bound_wc: seed %lu: %s\n", s, e.msg);
        } else {
            int nc = 0, ng = 0;
            for (int i = 0; i <= last; i++) {
                nc += cf[i];
                ng += t.pods[order[i]].num_gpu > 0;
            }
            double fp = 100.0 * ws.forced / ws.gpu_pods, cp = 100.0 * nc / ng;
            printf("%4lu  %7.4f  %7.4f  %4.2f  %7.1f  %15.1f  %7.4f  %12.1f  %8.2f\n", s, b, w,
                   w - b, fp, ws.first_unforced_pct, wc, cp, ws.forced_s);
            double v[7] = {b, w, w - b, fp, ws.first_unforced_pct, wc, cp};
            for (int k = 0; k < 7; k++)
                sum[k] += v[k];
            n++;
        }
        free(cf);
        free(order);
    }
    if (n)
        printf("mean  %7.4f  %7.4f  %4.2f  %7.1f  %15.1f  %7.4f  %12.1f\n", sum[0] / n, sum[1] / n,
               sum[2] / n, sum[3] / n, sum[4] / n, sum[5] / n, sum[6] / n);
    sim_config_clear(&cfg);
    sim_trace_clear(&t);
    return status;
}
