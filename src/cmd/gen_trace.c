/*
 * cmd/gen_trace.c - `gpusched gen-trace`: write a synthetic cluster and
 * workload (DIR/nodes.csv, DIR/pods.csv) in the openb schema.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/cmd.h"
#include "sim/sim_gen.h"
#include "util/opt.h"

static const char usage[] =
    "gpusched gen-trace --out DIR [--seed N] [--nodes N] [--pods N]\n\n"
    "Writes DIR/nodes.csv and DIR/pods.csv: a synthetic GPU cluster and workload\n"
    "shaped like the Alibaba openb trace (node shapes and GPU models, CPU-only /\n"
    "sharing / whole / multi-GPU pods, sharing fractions, CPU and memory requests).\n"
    "Feed them to `gpusched simulate --nodes DIR/nodes.csv --pods DIR/pods.csv`";

static int write_file(const char *dir, const char *name, const struct sim_trace *t,
                      int (*fn)(const struct sim_trace *, FILE *))
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        fprintf(stderr, "gpusched gen-trace: --out: path too long\n");
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gpusched gen-trace: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = fn(t, f);
    if (fclose(f) != 0 || rc < 0) {
        fprintf(stderr, "gpusched gen-trace: %s: write failed\n", path);
        return -1;
    }
    printf("wrote %s\n", path);
    return 0;
}

int cmd_gen_trace(int argc, char **argv)
{
    const char *out = NULL;
    long seed = 1, nodes = 1213, pods = 8152;
    int npos = 0;
    struct gs_err e = GS_ERR_INIT;
    const struct opt opts[] = {
        OPT_STR("out", &out, "DIR", "output directory (created if missing)"),
        OPT_INT("seed", &seed, "N", "random seed (default 1)", 0, 2147483647),
        OPT_INT("nodes", &nodes, "N", "GPU nodes (default 1213, as openb)", 1, 1000000),
        OPT_INT("pods", &pods, "N", "pods (default 8152, as openb)", 1, 10000000),
        OPT_END(),
    };
    int rc = cmd_flags("gen-trace", argc, argv, opts, usage, 1, &npos);
    if (rc >= 0)
        return rc;
    if (!out) {
        fprintf(stderr, "gpusched gen-trace: --out is required\n");
        return 2;
    }
    if (mkdir(out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "gpusched gen-trace: %s: %s\n", out, strerror(errno));
        return 1;
    }
    struct sim_trace t;
    if (sim_gen(&t, (int)nodes, (int)pods, (uint64_t)seed, &e) < 0) {
        fprintf(stderr, "gpusched gen-trace: %s\n", e.msg);
        return 2;
    }
    int status = 0;
    if (write_file(out, "nodes.csv", &t, sim_trace_write_nodes) < 0 ||
        write_file(out, "pods.csv", &t, sim_trace_write_pods) < 0)
        status = 1;
    else
        printf("%d nodes with %d GPUs, %d pods (seed %ld)\n", t.n_nodes, t.total_gpus, t.n_pods,
               seed);
    sim_trace_clear(&t);
    return status;
}
