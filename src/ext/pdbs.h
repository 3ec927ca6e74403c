/*
 * ext/pdbs.h - the PodDisruptionBudgets that preemption respects.
 *
 * kube-scheduler's preemption evicts pods a budget protects only when it
 * must: per node it counts the victims whose eviction takes a budget below
 * zero (filterPodsWithPDBViolation), spares them first, and prefers the node
 * with the fewest. The extender's own victims (the GPU pods it adds to
 * /preempt's, and every victim of a preemption from /filter) follow the same
 * rule, from this set: one entry per PodDisruptionBudget object (policy/v1
 * or policy/v1beta1, the same fields), kept by the cluster watch.
 *
 * Not thread-safe: the scheduler holds it under its lock.
 */
#ifndef GPUSCHED_EXT_PDBS_H
#define GPUSCHED_EXT_PDBS_H

#include <jansson.h>

#include "util/err.h"

struct ext_pdbs;

struct ext_pdbs *ext_pdbs_new(void);
void ext_pdbs_free(struct ext_pdbs *b);

/* Adds or replaces the budget of a PodDisruptionBudget object. A broken one
 * (a field of the wrong type, a selector that does not parse) is removed,
 * as kube-scheduler lets it match no pod, and the error names the object
 * and the field. */
int ext_pdbs_upsert(struct ext_pdbs *b, const json_t *obj, struct gs_err *e);
void ext_pdbs_remove(struct ext_pdbs *b, const char *ns, const char *name);
/* Replaces the whole set with a list's items; returns how many were broken
 * (each logged as a warning). */
int ext_pdbs_replace(struct ext_pdbs *b, const json_t *items);
int ext_pdbs_count(const struct ext_pdbs *b);

/* kube-scheduler's filterPodsWithPDBViolation: pods[0..n) (Pod objects, the
 * most important first) take one disruption each from every budget of their
 * namespace whose selector (not empty) picks their labels, unless the
 * budget lists them as disrupted already; viol[i] is set for each pod that
 * takes some budget below zero. The pods gone[0..ngone) are evicted anyway:
 * they take theirs first. A NULL pod has no labels. */
void ext_pdbs_mark(struct ext_pdbs *b, const json_t *const *gone, int ngone,
                   const json_t *const *pods, int n, unsigned char *viol);

#endif
