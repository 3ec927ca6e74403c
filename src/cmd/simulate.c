/*
 * cmd/simulate.c - `gpusched simulate`: replay a cluster + workload trace
 * through the scheduling core for several policies and seeds, print the
 * table, write JSON / CSV / SVG.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "core/policy.h"
#include "sim/sim_bound.h"
#include "sim/sim_report.h"
#include "sim/sim_run.h"
#include "sim/sim_time.h"
#include "sim/sim_trace.h"
#include "sim/sim_treport.h"
#include "util/clock.h"
#include "util/opt.h"

#define DEFAULT_POLICIES "random,dotprod,clustering,packing,bestfit,fgd"
#define TIME_POLICIES "bestfit,fgd,cpufrag"
#define MAX_LOADS 16
#define MAX_SEEDS 1000
#define MAX_POLICIES 64

static const char usage[] =
    "gpusched simulate --nodes NODE_CSV --pods POD_CSV [--policy LIST] [--seeds 42-51]\n"
    "       [--tune 1.3] [--json FILE] [--csv FILE] [--plot FILE.svg] [--threads N] [--bound]\n"
    "       [--learned]\n"
    "       gpusched simulate --mode time --nodes NODE_CSV --pods POD_CSV [--load 1,1.5,2]\n"
    "       [--scale 1] [--policy LIST] [--seeds 42-51] [--json FILE] [--plot FILE.svg]\n"
    "       [--learned]\n"
    "       gpusched simulate --list-policies\n\n"
    "Replays an openb-schema trace (or gen-trace output) through the scheduling core:\n"
    "pods sorted by name, shuffled per seed, tuned to --tune x GPU capacity, placed\n"
    "one by one, dropped when nothing fits. Reports unallocated GPU % at 100 % and\n"
    "130 % arrived workload, fragmentation at 90 % and failed pods, over the seeds.\n"
    "--policy takes a comma-separated list, or `all`. --bound adds, per seed, a proven\n"
    "lower bound on unallocated GPU % at 100 % (an LP relaxation solved with GLPK),\n"
    "and bound-wc, the same for schedulers that place every pod that fits.\n\n"
    "--mode time replays the trace in time instead: pods arrive at creation_time\n"
    "(divided by each --load factor), run for their recorded duration, and wait in\n"
    "a kube-scheduler-ordered queue when nothing fits (docs/benchmark.md). Reports\n"
    "GPU allocation and waiting demand over time, queueing delay per request class,\n"
    "pods left waiting and GPU-hours; default policies " TIME_POLICIES ".\n\n"
    "The policies that price fragmentation (fgd, cpufrag) weigh it over the trace's\n"
    "pod classes; with --learned they learn the classes from the pods placed so far,\n"
    "as the extender does in a cluster (the fragmentation columns then use those).";

/* "1,1.5,2": each factor in [0.01, 1e6]. */
static int parse_loads(const char *s, double *out, int *n, struct gs_err *e)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno == ERANGE || (*end && *end != ',') || !(v >= 0.01 && v <= 1e6))
            return gs_errf(e, GS_EINVAL, "--load: '%s' is not a list of factors in [0.01, 1e6] "
                           "like 1,1.5,2", s);
        if (*n >= MAX_LOADS)
            return gs_errf(e, GS_EINVAL, "--load: more than %d factors", MAX_LOADS);
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0)
        return gs_errf(e, GS_EINVAL, "--load: empty");
    return 0;
}

/* "42-51", "42,45,50" or a mix; each seed 0..2^63. */
static int parse_seeds(const char *s, uint64_t *out, int *n, struct gs_err *e)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        if (*p < '0' || *p > '9')
            return gs_errf(e, GS_EINVAL, "--seeds: '%s' is not a seed list like 42-51", s);
        unsigned long long a = strtoull(p, &end, 10), b = a;
        if (*end == '-') {
            const char *q = end + 1;
            if (*q < '0' || *q > '9')
                return gs_errf(e, GS_EINVAL, "--seeds: '%s' is not a seed list like 42-51", s);
            b = strtoull(q, &end, 10);
        }
        if (errno == ERANGE || b < a || (*end && *end != ','))
            return gs_errf(e, GS_EINVAL, "--seeds: '%s' is not a seed list like 42-51", s);
        if (b > (1ULL << 63) - 1) /* the JSON's integers; and v <= b must end */
            return gs_errf(e, GS_EINVAL, "--seeds: %llu is past 2^63-1", b);
        if (b - a >= MAX_SEEDS || *n + (int)(b - a) + 1 > MAX_SEEDS)
            return gs_errf(e, GS_EINVAL, "--seeds: more than %d seeds", MAX_SEEDS);
        for (unsigned long long k = 0; k <= b - a; k++)
            out[(*n)++] = a + k;
        p = *end ? end + 1 : end;
    }
    if (*n == 0)
        return gs_errf(e, GS_EINVAL, "--seeds: empty");
    return 0;
}

static int parse_policies(const char *s, const struct core_policy **out, int *n,
                          struct gs_err *e)
{
    *n = 0;
    if (strcmp(s, "all") == 0) {
        for (int i = 0; i < core_policy_count() && i < MAX_POLICIES; i++)
            out[(*n)++] = core_policy_at(i);
        return 0;
    }
    const char *p = s;
    while (*p) {
        size_t len = strcspn(p, ",");
        char name[64];
        if (len == 0 || len >= sizeof name)
            return gs_errf(e, GS_EINVAL, "--policy: bad list '%s'", s);
        memcpy(name, p, len);
        name[len] = '\0';
        const struct core_policy *pol = core_policy_find(name);
        if (!pol) {
            char known[512];
            size_t used = 0;
            known[0] = '\0';
            for (int i = 0; i < core_policy_count() && used + 1 < sizeof known; i++)
                used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                                         core_policy_at(i)->name);
            return gs_errf(e, GS_EINVAL, "--policy: unknown policy '%s' (known: %s)", name, known);
        }
        for (int i = 0; i < *n; i++)
            if (out[i] == pol)
                return gs_errf(e, GS_EINVAL, "--policy: '%s' listed twice", name);
        if (*n >= MAX_POLICIES)
            return gs_errf(e, GS_EINVAL, "--policy: more than %d policies", MAX_POLICIES);
        out[(*n)++] = pol;
        p += len;
        if (*p)
            p++;
    }
    if (*n == 0)
        return gs_errf(e, GS_EINVAL, "--policy: empty");
    return 0;
}

/* Opens an output file, or says why not (NULL). */
static FILE *open_out(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "gpusched simulate: %s: %s\n", path, strerror(errno));
    return f;
}

/* Closes what open_out opened; rc is the writer's result. */
static int close_out(FILE *f, const char *path, int rc)
{
    if (fclose(f) != 0 || rc < 0) {
        fprintf(stderr, "gpusched simulate: %s: write failed\n", path);
        return -1;
    }
    return 0;
}

static int write_out(const char *path, int (*fn)(FILE *, const struct sim_report *),
                     const struct sim_report *r)
{
    FILE *f = open_out(path);
    return f ? close_out(f, path, fn(f, r)) : -1;
}

static const char *svg_title;
static int write_tsvg(FILE *f, const struct sim_time_report *r)
{
    return sim_time_write_svg(f, r, svg_title);
}

static int write_tout(const char *path, int (*fn)(FILE *, const struct sim_time_report *),
                      const struct sim_time_report *r)
{
    FILE *f = open_out(path);
    return f ? close_out(f, path, fn(f, r)) : -1;
}

/* --mode time: every load x policy x seed, then the tables and files. */
static int run_time(const struct sim_config *cfg, const struct sim_trace *trace,
                    const double *loads, int n_loads, double scale,
                    const struct core_policy *const *pols, int n_pols, const uint64_t *seeds,
                    int n_seeds, int threads,
                    const char *json, const char *plot, double t0)
{
    struct gs_err e = GS_ERR_INIT;
    size_t n_runs = (size_t)n_loads * n_pols * n_seeds;
    struct sim_time_result *runs = calloc(n_runs, sizeof *runs);
    struct sim_time_summary *sum = calloc((size_t)n_loads * n_pols, sizeof *sum);
    int status = 0;
    if (!runs || !sum) {
        fprintf(stderr, "gpusched simulate: out of memory\n");
        status = 1;
        goto out;
    }
    if (sim_time_grid(cfg, loads, n_loads, scale, pols, n_pols, seeds, n_seeds, threads, runs,
                      &e) < 0) {
        fprintf(stderr, "gpusched simulate: %s\n", e.msg);
        status = e.code == GS_EINVAL ? 2 : 1;
        goto out;
    }
    for (int i = 0; i < n_loads * n_pols; i++)
        sim_time_summarize(runs + (size_t)i * n_seeds, n_seeds, &sum[i]);
    double elapsed = gs_mono_s() - t0;
    struct sim_time_report rep = {trace->n_nodes, trace->total_gpus, trace->n_pods, sum,
                                  n_loads * n_pols, elapsed};
    sim_time_print(stdout, &rep);
    if ((json && write_tout(json, sim_time_write_json, &rep) < 0) ||
        (plot && write_tout(plot, write_tsvg, &rep) < 0))
        status = 1;
out:
    free(runs);
    free(sum);
    return status;
}
static int write_svg(FILE *f, const struct sim_report *r)
{
    return sim_write_svg(f, r, svg_title);
}

int cmd_simulate(int argc, char **argv)
{
    const char *nodes = NULL, *pods = NULL, *policy = NULL, *seeds_s = "42-51";
    const char *json = NULL, *csv = NULL, *plot = NULL, *title = NULL;
    const char *mode = "arrival", *load_s = NULL; /* NULL: 1 */
    double tune = 1.3, scale = 1;
    long threads = 0;
    int list = 0, npos = 0, bound = 0, learned = 0;
    struct gs_err e = GS_ERR_INIT;
    const struct opt opts[] = {
        OPT_STR("nodes", &nodes, "NODE_CSV", "node list (openb schema: sn,cpu_milli,memory_mib,gpu,model)"),
        OPT_STR("pods", &pods, "POD_CSV", "pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec])"),
        OPT_STR("policy", &policy, "LIST", "policies, comma-separated, or all (default " DEFAULT_POLICIES ")"),
        OPT_STR("seeds", &seeds_s, "SEEDS", "seeds: 42-51 or 42,43 (default 42-51)"),
        OPT_DBL("tune", &tune, "X", "tune the workload to X times the GPU capacity (default 1.3)"),
        OPT_STR("json", &json, "FILE", "write the results as JSON"),
        OPT_STR("csv", &csv, "FILE", "write the median curves (and 25-75 % band) as CSV"),
        OPT_STR("plot", &plot, "FILE.svg", "write the unallocated-vs-arrived plot as SVG"),
        OPT_STR("title", &title, "TEXT", "plot title (default: the pod file's name)"),
        OPT_INT("threads", &threads, "N", "worker threads (default: one per CPU)", 0, 256),
        OPT_STR("mode", &mode, "MODE", "arrival (the benchmark, default) or time (replay in time)"),
        OPT_STR("load", &load_s, "LIST", "time mode: arrival compression factors, e.g. 1,1.5,2 (default 1)"),
        OPT_DBL("scale", &scale, "X", "time mode: X times the trace's GPU request, by seeded clones (default 1)"),
        OPT_BOOL("bound", &bound, "arrival mode: also the LP lower bound on unallocated % at 100 % per seed"),
        OPT_BOOL("learned", &learned, "fgd and cpufrag learn the workload from the pods placed, as the extender does"),
        OPT_BOOL("list-policies", &list, "print every policy name, one per line, and exit"),
        OPT_END(),
    };

    int rc = cmd_flags("simulate", argc, argv, opts, usage, 1, &npos);
    if (rc >= 0)
        return rc;
    if (list) {
        for (int i = 0; i < core_policy_count(); i++)
            printf("%s\n", core_policy_at(i)->name);
        return 0;
    }
    if (!nodes || !pods) {
        fprintf(stderr, "gpusched simulate: --nodes and --pods are required (see --help)\n");
        return 2;
    }
    int time_mode = strcmp(mode, "time") == 0;
    if (!time_mode && strcmp(mode, "arrival") != 0) {
        fprintf(stderr, "gpusched simulate: --mode: '%s' is neither arrival nor time\n", mode);
        return 2;
    }
    if (!policy)
        policy = time_mode ? TIME_POLICIES : DEFAULT_POLICIES;
    if (!time_mode && scale != 1) {
        fprintf(stderr, "gpusched simulate: --scale is for --mode time (the arrival mode has "
                "--tune)\n");
        return 2;
    }
    if (!time_mode && load_s) {
        fprintf(stderr, "gpusched simulate: --load is for --mode time (arrivals compressed "
                "in time)\n");
        return 2;
    }
    if (time_mode && tune != 1.3) {
        fprintf(stderr, "gpusched simulate: --tune is for the arrival mode (--mode time has "
                "--scale)\n");
        return 2;
    }
    if (time_mode && bound) {
        fprintf(stderr, "gpusched simulate: --bound is for the arrival mode\n");
        return 2;
    }
    if (time_mode && csv) {
        fprintf(stderr, "gpusched simulate: --csv is for the arrival mode; --mode time writes "
                "--json and --plot\n");
        return 2;
    }
    uint64_t seeds[MAX_SEEDS];
    const struct core_policy *pols[MAX_POLICIES];
    double loads[MAX_LOADS];
    int n_seeds, n_pols, n_loads = 0;
    if (parse_seeds(seeds_s, seeds, &n_seeds, &e) < 0 ||
        parse_policies(policy, pols, &n_pols, &e) < 0 ||
        (time_mode && parse_loads(load_s ? load_s : "1", loads, &n_loads, &e) < 0)) {
        fprintf(stderr, "gpusched simulate: %s\n", e.msg);
        return 2;
    }

    double t0 = gs_mono_s();
    struct sim_trace trace = {0};
    struct sim_config cfg;
    int n_unfit = 0;
    if (sim_trace_load(&trace, nodes, pods, &n_unfit, &e) < 0 ||
        sim_config_init(&cfg, &trace, tune, &e) < 0) {
        fprintf(stderr, "gpusched simulate: %s\n", e.msg);
        sim_trace_clear(&trace);
        return 2;
    }
    cfg.learned = learned;
    if (n_unfit)
        fprintf(stderr, "gpusched simulate: note: %d pods fit no node of their gpu_spec models; "
                "they fail in every run\n", n_unfit);
    if (time_mode) {
        if (!trace.has_times) {
            fprintf(stderr, "gpusched simulate: --mode time: %s has no creation_time column "
                    "(the multigpu lists have no timestamps)\n", pods);
            sim_config_clear(&cfg);
            sim_trace_clear(&trace);
            return 2;
        }
        svg_title = title ? title : pods;
        int st = run_time(&cfg, &trace, loads, n_loads, scale, pols, n_pols, seeds, n_seeds,
                          (int)threads, json, plot, t0);
        sim_config_clear(&cfg);
        sim_trace_clear(&trace);
        return st;
    }
    struct sim_run_result *runs = calloc((size_t)n_pols * n_seeds, sizeof *runs);
    struct sim_summary *sum = calloc((size_t)n_pols, sizeof *sum);
    int status = 0;
    if (!runs || !sum) {
        fprintf(stderr, "gpusched simulate: out of memory\n");
        status = 1;
        goto out;
    }
    if (sim_run_grid(&cfg, pols, n_pols, seeds, n_seeds, (int)threads, runs, &e) < 0) {
        fprintf(stderr, "gpusched simulate: %s\n", e.msg);
        status = e.code == GS_EINVAL ? 2 : 1;
        goto out;
    }
    for (int p = 0; p < n_pols; p++)
        sim_summarize(runs + (size_t)p * n_seeds, n_seeds, &sum[p]);
    double bounds[MAX_SEEDS], bound_s = 0;
    double wc[MAX_SEEDS], wc_forced[MAX_SEEDS], wc_first[MAX_SEEDS];
    if (bound) {
        for (int i = 0; i < n_seeds; i++) {
            struct sim_bound_stats bs, ws;
            if (sim_bound_run(&cfg, seeds[i], &bounds[i], &bs, &e) < 0 ||
                sim_bound_run_wc(&cfg, seeds[i], &wc[i], &ws, &e) < 0) {
                fprintf(stderr, "gpusched simulate: %s\n", e.msg);
                status = 1;
                goto out;
            }
            bound_s += bs.elapsed_s + ws.elapsed_s;
            /* both bound every work-conserving run; where the forced pods change
             * nothing the two LPs are equal and only solver rounding (1e-6
             * points) could put W below B */
            if (wc[i] < bounds[i])
                wc[i] = bounds[i];
            wc_forced[i] = ws.gpu_pods ? 100.0 * ws.forced / ws.gpu_pods : NAN;
            wc_first[i] = ws.first_unforced_pct;
        }
    }
    struct sim_report rep = {trace.n_nodes, trace.total_gpus, trace.n_pods, sum, n_pols,
                             gs_mono_s() - t0,
                             bound ? bounds : NULL, seeds, n_seeds, bound_s,
                             wc, wc_forced, wc_first};
    sim_print_table(stdout, &rep);
    svg_title = title ? title : pods;
    if ((json && write_out(json, sim_write_json, &rep) < 0) ||
        (csv && write_out(csv, sim_write_csv, &rep) < 0) ||
        (plot && write_out(plot, write_svg, &rep) < 0))
        status = 1;
out:
    free(runs);
    free(sum);
    sim_config_clear(&cfg);
    sim_trace_clear(&trace);
    return status;
}
