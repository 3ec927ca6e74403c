/*
 * ext/proto.h - kube-scheduler's extender wire format (extender/v1), parsed
 * and built.
 *
 * kube-scheduler writes Go structs without json tags: PascalCase keys, nil
 * as null. Go reads keys case-insensitively, so this module does too
 * (ext_iget) and always answers in PascalCase. Parsers check every field
 * they use and name the one that is wrong ("NodeNames[3]: not a string").
 * The HTTP layer bounds the body size before these run.
 *
 * Ownership: parsed structs hold a reference to the decoded document (doc);
 * borrowed pointers into it (pod, node objects, strings) live until
 * ext_*_clear().
 */
#ifndef GPUSCHED_EXT_PROTO_H
#define GPUSCHED_EXT_PROTO_H

#include <jansson.h>
#include <stddef.h>

#include "ext/namelist.h"
#include "util/err.h"

/* Case-insensitive member lookup (exact match first). */
json_t *ext_iget(const json_t *obj, const char *key);

/* ExtenderArgs: the /filter and /prioritize request. With 5,000 node
 * names per request the generic JSON tree costs more than the decision, so
 * the top level and NodeNames are scanned directly (strict JSON, names
 * unescaped into one buffer); only Pod, and Nodes when present, become
 * jansson trees. Node names must be 1..253 characters of [A-Za-z0-9.-_],
 * so replies can echo them without escaping. */
struct ext_args {
    json_t *pod_doc, *nodes_doc;
    struct ext_namelist *list;  /* NodeNames as a cached list (names are its), or NULL */
    const json_t *pod;          /* the Pod object */
    int from_nodes;             /* 1: the request carried Nodes (full objects) */
    int n;                      /* candidate nodes */
    const char **names;         /* n names (in `arena`, or borrowed from nodes_doc) */
    const json_t **nodes;       /* n Node objects when from_nodes, else NULL */
    char *arena;
};
int ext_args_parse(const char *body, size_t len, struct ext_args *a, struct gs_err *e);
/* The same, taking NodeNames from `cache` when the request repeats an array
 * kept there, and keeping the array it scans otherwise (ext/namelist.h):
 * a->list is set whenever the request carried NodeNames. */
int ext_args_parse_cached(struct ext_namecache *cache, const char *body, size_t len,
                          struct ext_args *a, struct gs_err *e);
void ext_args_clear(struct ext_args *a);

/* ExtenderBindingArgs. */
struct ext_bind {
    json_t *doc;
    const char *pod_name, *pod_namespace, *pod_uid, *node;
};
int ext_bind_parse(const char *body, size_t len, struct ext_bind *b, struct gs_err *e);
void ext_bind_clear(struct ext_bind *b);

/* ExtenderPreemptionArgs: the pod and, per candidate node, the victims
 * kube-scheduler already chose (UIDs, from NodeNameToMetaVictims or from
 * the full pods of NodeNameToVictims). */
struct ext_victims {
    const char *node;
    int n;
    const char **uids;
    long pdb_violations;
};
struct ext_preempt {
    json_t *doc;
    const json_t *pod;
    int n;
    struct ext_victims *nodes;
};
int ext_preempt_parse(const char *body, size_t len, struct ext_preempt *p, struct gs_err *e);
void ext_preempt_clear(struct ext_preempt *p);

#endif
