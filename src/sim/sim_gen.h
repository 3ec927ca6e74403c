/*
 * sim/sim_gen.h - a synthetic cluster and workload shaped like the openb
 * trace (node shapes and GPU models, pod kinds, sharing fractions, CPU and
 * memory requests drawn from its observed frequencies), for `make demo` and
 * tests that must not depend on the real trace.
 *
 * Ownership: fills a caller-owned struct sim_trace (sim_trace_clear()).
 */
#ifndef GPUSCHED_SIM_GEN_H
#define GPUSCHED_SIM_GEN_H

#include <stdint.h>

#include "sim/sim_trace.h"

/* n_nodes >= 1 GPU nodes and n_pods >= 1 pods; the same seed gives the same
 * trace. The first node is always an 8-GPU node large enough for every pod
 * shape, so every generated pod fits some node. */
int sim_gen(struct sim_trace *t, int n_nodes, int n_pods, uint64_t seed, struct gs_err *e);

#endif
