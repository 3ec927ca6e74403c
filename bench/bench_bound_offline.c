/*
 * bench/bench_bound_offline.c - how tight the LP bound is (docs/benchmark.md,
 * "How tight the bound is"): per seed, the LP bound of the 100 % bin's last
 * sample and the unallocated % of a real offline placement of the same pods
 * (sim_bound_offline: the pods the LP places, submitted through the core).
 * The best offline placement lies between the two, so no valid bound on
 * the offline problem can rise above the second. The same for the mean over
 * the samples of the 100 % bin, which the benchmark reports: the bound
 * (sim_bound_run) and what the placement holds of each sample's pods.
 *
 *   bench_bound_offline NODES.csv PODS.csv [SEEDS, e.g. 42-51] [POLICY]
 *
 * Prints one line per seed and the means; exits 2 on bad arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/policy.h"
#include "sim/sim_bound.h"
#include "sim/sim_run.h"
#include "sim/sim_trace.h"

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: bench_bound_offline NODES.csv PODS.csv [SEEDS] [POLICY]\n");
        return 2;
    }
    unsigned long lo = 42, hi = 51;
    if (argc > 3) {
        char *end;
        lo = strtoul(argv[3], &end, 10);
        int bad = end == argv[3] || argv[3][0] < '0' || argv[3][0] > '9';
        if (*end == '-') {
            char *from = end + 1;
            hi = strtoul(from, &end, 10);
            bad |= end == from || *from < '0' || *from > '9';
        } else {
            hi = lo;
        }
        if (bad || *end || hi < lo || hi - lo > 1000) {
            fprintf(stderr, "bench_bound_offline: seeds: want N or N-M, got '%s'\n", argv[3]);
            return 2;
        }
    }
    const struct core_policy *pol = core_policy_find(argc > 4 ? argv[4] : "cpufrag");
    if (!pol) {
        fprintf(stderr, "bench_bound_offline: no policy '%s'\n", argv[4]);
        return 2;
    }
    struct sim_trace t = {0};
    struct sim_config cfg;
    struct gs_err e = GS_ERR_INIT;
    int status = 0;
    if (sim_trace_load(&t, argv[1], argv[2], NULL, &e) < 0 || sim_config_init(&cfg, &t, 1.3, &e) < 0) {
        fprintf(stderr, "bench_bound_offline: %s\n", e.msg);
        sim_trace_clear(&t);
        return 1;
    }
    double sum_lp = 0, sum_pl = 0, sum_b = 0, sum_pb = 0;
    int n = 0;
    printf("seed   bin: LP bound  placement  gap   last sample: LP bound  placement  gap  dropped  failed  order\n");
    for (unsigned long s = lo; s <= hi; s++) {
        struct sim_bound_offline o;
        if (sim_bound_offline(&cfg, pol, s, &o, &e) < 0) {
            fprintf(stderr, "bench_bound_offline: seed %lu: %s\n", s, e.msg);
            status = 1;
            break;
        }
        double b;
        if (sim_bound_run(&cfg, s, &b, NULL, &e) < 0) {
            fprintf(stderr, "bench_bound_offline: seed %lu: %s\n", s, e.msg);
            status = 1;
            break;
        }
        printf("%4lu  %13.4f  %9.4f  %4.2f  %22.4f  %9.4f  %4.2f  %7d  %6d  %5d\n", s, b,
               o.placed_bin_pct, o.placed_bin_pct - b, o.lp_pct, o.placed_pct,
               o.placed_pct - o.lp_pct, o.dropped, o.failed, o.order);
        sum_lp += o.lp_pct;
        sum_pl += o.placed_pct;
        sum_b += b;
        sum_pb += o.placed_bin_pct;
        n++;
    }
    if (n)
        printf("mean  %13.4f  %9.4f  %4.2f  %22.4f  %9.4f  %4.2f\n", sum_b / n, sum_pb / n,
               (sum_pb - sum_b) / n, sum_lp / n, sum_pl / n, (sum_pl - sum_lp) / n);
    sim_config_clear(&cfg);
    sim_trace_clear(&t);
    return status;
}
