/*
 * bench/bench_bound_drops.c - what policies turn away against what the LP
 * bound leaves out, at the bin's last sample of one seed: the diagnostic
 * behind docs/benchmark.md's "Where cpufrag's distance to the bound comes
 * from" and the reading of the bound-wc table.
 *
 *   bench_bound_drops NODES.csv PODS.csv SEED [POLICY,...]   (fgd,cpufrag)
 *
 * Prints the root LP's unallocated % (the offline bound's LP at the bin's
 * last sample: no forced pods, no order cases); then, per GPU pod class
 * that anyone leaves out, its pods, how many the LP leaves out and how many
 * each policy's replay failed, and the GPUs of demand left out in all;
 * then, per policy, the free share its replay leaves, by hole size (sizes
 * holding half a GPU or more). Exits 2 on bad arguments, 1 on an error.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "sim/sim_bound.h"
#include "sim/sim_lp.h"
#include "sim/sim_run.h"
#include "sim/sim_trace.h"

#define MAX_POLS 8

struct run {
    const struct core_policy *pol;
    unsigned char *placed;
    struct core_cluster *state;
};

static void print_holes(const struct run *r)
{
    static double count[CORE_MILLI + 1];
    double free_milli = 0;
    memset(count, 0, sizeof count);
    for (int k = 0; k < core_cluster_node_count(r->state); k++) {
        const struct core_node *n = core_cluster_node(r->state, k);
        for (int g = 0; g < n->n_gpus; g++) {
            count[n->gpus[g].free_milli]++;
            free_milli += n->gpus[g].free_milli;
        }
    }
    printf("\n%s leaves %.1f GPUs free; holes of 500 milli-GPU or more in all:\n",
           r->pol->name, free_milli / CORE_MILLI);
    printf("  hole  GPUs  free GPUs\n");
    for (int h = 1; h <= CORE_MILLI; h++)
        if (count[h] * h >= CORE_MILLI / 2)
            printf("  %4d  %4.0f  %9.1f\n", h, count[h], count[h] * h / CORE_MILLI);
}

static int report(const struct sim_trace *t, const int *order, int n, struct run *runs,
                  int n_runs, struct gs_err *e)
{
    struct sim_lp m = {0};
    struct sim_lp_last at = {0};
    int solves = 0, rc, *failed = NULL;
    double cap = (double)t->total_gpus * CORE_MILLI;
    if ((rc = sim_lp_classes(&m, t, order, n, e)) < 0 || (rc = sim_lp_build(&m, e)) < 0)
        goto out;
    at.placed = calloc((size_t)m.n_pc + 1, sizeof *at.placed);
    failed = calloc((size_t)m.n_pc * MAX_POLS + 1, sizeof *failed); /* [k * MAX_POLS + r] */
    if (!at.placed || !failed) {
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        for (int r = 0; m.cls[i] >= 0 && r < n_runs; r++)
            failed[m.cls[i] * MAX_POLS + r] += !runs[r].placed[i];
    if ((rc = sim_lp_walk(&m, n - 1, n - 1, cap, NULL, &at, &solves, e)) != 0)
        goto out;
    printf("pods %d (the bin's last sample); root LP leaves %.3f %% unallocated\n\n", n,
           sim_lp_pct(at.milli, cap));
    printf("%-44s %6s %8s", "class gpus/milli/cpu/mem/models", "pods", "LP-left");
    for (int r = 0; r < n_runs; r++)
        printf(" %8s", runs[r].pol->name);
    printf("\n");
    double lp_gpus = 0, pol_gpus[MAX_POLS] = {0};
    for (int k = 0; k < m.n_pc; k++) {
        const struct sim_pod *p = m.pc[k].p;
        double gpus = (double)p->num_gpu * p->gpu_milli / CORE_MILLI;
        double left = m.pc[k].count - at.placed[k];
        const int *f = failed + (size_t)k * MAX_POLS;
        int any = left > 0.05;
        for (int r = 0; r < n_runs; r++) {
            pol_gpus[r] += f[r] * gpus;
            any |= f[r] > 0;
        }
        lp_gpus += left * gpus;
        if (!any)
            continue;
        char name[64 + SIM_SPEC_MAX];
        snprintf(name, sizeof name, "%d/%d/%lld/%lld/%s", p->num_gpu, p->gpu_milli,
                 (long long)p->cpu_milli, (long long)p->mem_mib, p->gpu_spec[0] ? p->gpu_spec : "any");
        printf("%-44s %6d %8.1f", name, m.pc[k].count, left);
        for (int r = 0; r < n_runs; r++)
            printf(" %8d", f[r]);
        printf("\n");
    }
    printf("%-44s %6s %8.1f", "GPUs of demand left out", "", lp_gpus);
    for (int r = 0; r < n_runs; r++)
        printf(" %8.1f", pol_gpus[r]);
    printf("\n");
    for (int r = 0; r < n_runs; r++)
        print_holes(&runs[r]);
out:
    free(at.placed);
    free(failed);
    sim_lp_free(&m);
    return rc < 0 ? rc : rc ? gs_errf(e, GS_EINVAL, "the root LP is infeasible") : 0;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: bench_bound_drops NODES.csv PODS.csv SEED [POLICY,...]\n");
        return 2;
    }
    char *end;
    unsigned long seed = strtoul(argv[3], &end, 10);
    if (end == argv[3] || *end || argv[3][0] < '0' || argv[3][0] > '9') {
        fprintf(stderr, "bench_bound_drops: seed: want a number, got '%s'\n", argv[3]);
        return 2;
    }
    struct run runs[MAX_POLS] = {{0}};
    int n_runs = 0;
    char pols[256];
    snprintf(pols, sizeof pols, "%s", argc > 4 ? argv[4] : "fgd,cpufrag");
    for (char *save = NULL, *s = strtok_r(pols, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        if (n_runs == MAX_POLS || !(runs[n_runs].pol = core_policy_find(s))) {
            fprintf(stderr, "bench_bound_drops: policies: '%s' is %s\n", s,
                    n_runs == MAX_POLS ? "one too many (at most 8)" : "not a policy");
            return 2;
        }
        n_runs++;
    }
    struct sim_trace t = {0};
    struct sim_config cfg = {0};
    struct gs_err e = GS_ERR_INIT;
    int *order = NULL, len, first, last, status = 1;
    if (sim_trace_load(&t, argv[1], argv[2], NULL, &e) < 0 ||
        sim_config_init(&cfg, &t, 1.3, &e) < 0 || sim_order(&cfg, seed, &order, &len, &e) < 0)
        goto out;
    sim_bound_bin(&t, order, len, &first, &last);
    for (int r = 0; r < n_runs; r++)
        if (!(runs[r].placed = malloc((size_t)last + 1))) {
            gs_errf(&e, GS_ENOMEM, "out of memory");
            goto out;
        } else if (sim_replay_state(&cfg, runs[r].pol, seed, order, last + 1, runs[r].placed,
                                    &runs[r].state, &e) < 0) {
            goto out;
        }
    status = report(&t, order, last + 1, runs, n_runs, &e) < 0;
out:
    if (status)
        fprintf(stderr, "bench_bound_drops: %s\n", e.msg);
    for (int r = 0; r < n_runs; r++) {
        free(runs[r].placed);
        core_cluster_free(runs[r].state);
    }
    free(order);
    sim_config_clear(&cfg);
    sim_trace_clear(&t);
    return status;
}
