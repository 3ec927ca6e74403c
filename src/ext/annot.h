/*
 * ext/annot.h - an allocation written as pod annotations, and read back.
 *
 * The assignment annotations (docs/annotations.md: node, request-kind,
 * gpu-uuids, gpu-indices, gpu-memory, gpu-milli, mig-profile, gpu-models,
 * assigned-at)
 * are the only record of an allocation in cluster mode, and the standalone
 * journal stores the same map, so both modes rebuild state with one
 * function. GPUs are named by UUID (positions can change when a node's
 * inventory is reordered); reading checks every value against the node.
 *
 * Ownership: ext_annot_build returns a new json object for the caller.
 */
#ifndef GPUSCHED_EXT_ANNOT_H
#define GPUSCHED_EXT_ANNOT_H

#include <jansson.h>

#include "core/cluster.h"
#include "core/request.h"
#include "util/err.h"

/* The annotation map for an allocation on node n of cluster c (prefix
 * "gpusched.io/"). assigned_at: the time string to record (NULL = now). */
json_t *ext_annot_build(const struct core_cluster *c, const struct core_node *n,
                        const struct core_alloc *a, const char *prefix, const char *assigned_at);

/* Is this annotation key (with its prefix) one of the assignment's, which
 * only a bind may write? */
int ext_annot_is_assignment(const char *key, const char *prefix);

/* Does this annotation map (a pod's metadata.annotations) carry an
 * assignment? Returns the node name or NULL. */
const char *ext_annot_node(const json_t *annotations, const char *prefix);

/* Rebuilds an allocation from the annotation map. The caller has filled
 * a's pod identity (pod_uid, pod_name, priority, cpu_milli, mem_bytes);
 * this fills node, kind, GPUs and the allowed models (any without
 * gpu-models; names this cluster does not know are skipped). -GS_ENOENT if the node is unknown,
 * -GS_EINVAL (field named) for anything that does not match the node. */
int ext_annot_parse(const struct core_cluster *c, const json_t *annotations, const char *prefix,
                    struct core_alloc *a, struct gs_err *e);

/* Does an allocation rebuilt from a pod's annotations fit the request of
 * that pod (kind, and number of GPUs or MIG instances)? One a bind wrote
 * does; another was written by hand and must not be reserved (it would
 * take GPUs the pod's containers never ask for). 0, or -GS_EINVAL saying
 * what differs. */
int ext_annot_fits(const struct core_request *r, const struct core_alloc *a, struct gs_err *e);

#endif
