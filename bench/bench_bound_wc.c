/*
 * bench/bench_bound_wc.c - the bound for work-conserving schedulers against
 * the offline bound (docs/benchmark.md, "A bound for work-conserving
 * schedulers"): per seed, the LP bound B (sim_bound_run), the bound W
 * (sim_bound_run_wc: the forced pods and the order of arrival), the order
 * alone (sim_order_bound without the forcing test), how many GPU pods are
 * forced and where the first one not proven forced arrives, and the
 * seconds W took. It also replays seven policies through the core and
 * checks the lemma behind the order on each run (sim_order_check), and
 * counts the trigger sets where it was put to the test (a trigger failed
 * and a target came after it).
 *
 *   bench_bound_wc NODES.csv PODS.csv [SEEDS, e.g. 42-51]
 *
 * Prints one line per seed and the means; exits 2 on bad arguments, 1 when
 * a run breaks the lemma.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "sim/sim_bound.h"
#include "sim/sim_order.h"
#include "sim/sim_run.h"
#include "sim/sim_trace.h"

static const char *const pols[] = {"random", "dotprod", "clustering", "packing",
                                   "bestfit", "fgd", "cpufrag"};
#define N_POLS (int)(sizeof pols / sizeof pols[0])

/* The lemma on every policy's replay of order[0..len); *checked: the trigger
 * sets put to the test, summed over the runs. */
static int check_runs(const struct sim_config *cfg, uint64_t seed, const int *order, int len,
                      int *checked, struct gs_err *e)
{
    unsigned char *placed = malloc((size_t)len + 1);
    int rc = placed ? 0 : gs_errf(e, GS_ENOMEM, "out of memory");
    *checked = 0;
    for (int p = 0; p < N_POLS && rc == 0; p++) {
        int sets;
        if ((rc = sim_replay_placed(cfg, core_policy_find(pols[p]), seed, order, len, placed, e)) == 0 &&
            (rc = sim_order_check(cfg->trace, order, len, placed, &sets, e)) < 0)
            gs_errf(e, e->code, "%s: %s", pols[p], e->msg);
        if (rc == 0)
            *checked += sets;
    }
    free(placed);
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
    double sum[8] = {0};
    printf("seed        B        W   W-B  order-only  forced%%  first-unforced%%  lemma-sets  W_s\n");
    for (unsigned long s = lo; s <= hi && status == 0; s++) {
        double b, w, o = NAN;
        struct sim_bound_stats ws;
        int *order = NULL, len, first, last, checked = 0;
        if (sim_bound_run(&cfg, s, &b, NULL, &e) < 0 || sim_bound_run_wc(&cfg, s, &w, &ws, &e) < 0 ||
            sim_order(&cfg, s, &order, &len, &e) < 0) {
            status = 1;
        } else {
            sim_bound_bin(&t, order, len, &first, &last);
            if (sim_order_bound(&t, order, first, last, NULL, &o, NULL, &e) < 0 ||
                check_runs(&cfg, s, order, len, &checked, &e) < 0)
                status = 1;
        }
        if (status) {
            fprintf(stderr, "bench_bound_wc: seed %lu: %s\n", s, e.msg);
        } else {
            double fp = 100.0 * ws.forced / ws.gpu_pods;
            printf("%4lu  %7.4f  %7.4f  %4.2f  %10.4f  %7.1f  %15.1f  %10d  %5.2f\n", s, b, w,
                   w - b, o, fp, ws.first_unforced_pct, checked, ws.elapsed_s);
            double v[7] = {b, w, w - b, o, fp, ws.first_unforced_pct, ws.elapsed_s};
            for (int k = 0; k < 7; k++)
                sum[k] += v[k];
            sum[7] += checked;
            n++;
        }
        free(order);
    }
    if (n)
        printf("mean  %7.4f  %7.4f  %4.2f  %10.4f  %7.1f  %15.1f  %10.1f  %5.2f\n", sum[0] / n,
               sum[1] / n, sum[2] / n, sum[3] / n, sum[4] / n, sum[5] / n, sum[7] / n, sum[6] / n);
    sim_config_clear(&cfg);
    sim_trace_clear(&t);
    return status;
}
