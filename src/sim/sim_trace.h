/*
 * sim/sim_trace.h - cluster and workload traces in the openb CSV schema.
 *
 * Node lists: sn,cpu_milli,memory_mib,gpu,model. Pod lists:
 * name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]; the optional
 * timestamps creation_time, deletion_time, scheduled_time (seconds, empty =
 * absent) feed the time-driven replay (sim_time.h); other extra columns (qos,
 * phase) are accepted and ignored, columns may come in any order. `gpusched gen-trace` writes the same schema. Every field is checked
 * and every error names file, line, column and field:
 *   "pods.csv:12: column 5 (gpu_milli): 'abc' is not an integer"
 *
 * Ownership: sim_trace_load*() fill a caller-owned struct sim_trace released
 * by sim_trace_clear(); parse functions work on a memory buffer (bounded by
 * its length) so that they can be fuzzed.
 */
#ifndef GPUSCHED_SIM_TRACE_H
#define GPUSCHED_SIM_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#define SIM_NAME_MAX 128
#define SIM_MODEL_MAX 64
#define SIM_SPEC_MAX 256
#define SIM_MAX_FILE (256u << 20)  /* refuse inputs larger than this */
#define SIM_MAX_GPUS 16
#define SIM_MAX_TIME (INT64_C(1) << 40) /* seconds; timestamps beyond are refused */

struct sim_node {
    char name[SIM_NAME_MAX];
    int64_t cpu_milli, mem_mib;
    int gpus;
    char model[SIM_MODEL_MAX];
    int line;
};

struct sim_pod {
    char name[SIM_NAME_MAX];
    int64_t cpu_milli, mem_mib;
    int num_gpu, gpu_milli;
    char gpu_spec[SIM_SPEC_MAX]; /* "A|B", "" = any model */
    int64_t t_create, t_delete, t_sched; /* seconds from trace start, -1 = absent */
    int line;
};

struct sim_trace {
    struct sim_node *nodes;
    int n_nodes;
    struct sim_pod *pods;
    int n_pods;
    int total_gpus;
    int has_times;             /* the pod list has a creation_time column */
};

/* Parse a node list / pod list from buf[0..len) (need not be terminated);
 * `file` names the input in errors. Appends to *t. */
int sim_trace_parse_nodes(struct sim_trace *t, const char *buf, size_t len, const char *file,
                          struct gs_err *e);
int sim_trace_parse_pods(struct sim_trace *t, const char *buf, size_t len, const char *file,
                         struct gs_err *e);

/* Reads both files, parses them and runs sim_trace_check(). */
int sim_trace_load(struct sim_trace *t, const char *nodes_file, const char *pods_file,
                   int *n_unfit, struct gs_err *e);

/* Cross-checks pods against nodes: every gpu_spec model exists among the
 * nodes, and every pod fits at least one empty node by CPU, memory and GPU
 * count (errors name the pod file, line and column). Pods that only their
 * gpu_spec keeps off every node big enough are valid workload (the openb
 * gpuspec traces have some; they fail in the replay) and are counted in
 * *n_unfit (optional). */
int sim_trace_check(const struct sim_trace *t, const char *pods_file, int *n_unfit,
                    struct gs_err *e);

/* Writes the trace in the openb schema. */
int sim_trace_write_nodes(const struct sim_trace *t, FILE *f);
int sim_trace_write_pods(const struct sim_trace *t, FILE *f);

void sim_trace_clear(struct sim_trace *t);

/* Same request (GPU count, share, CPU, memory, gpu_spec) / same node shape
 * (GPU count, CPU, memory, model): the pod classes and node types of the
 * lower bound (sim_bound.h, sim_forced.h). */
int sim_pod_same_shape(const struct sim_pod *a, const struct sim_pod *b);
int sim_node_same_shape(const struct sim_node *a, const struct sim_node *b);

#endif
