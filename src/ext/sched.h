/*
 * ext/sched.h - the extender's scheduler: the core's cluster model on live
 * state, and the four extender verbs on top of it.
 *
 * One object owns the cluster (nodes, allocations), the pods the extender
 * has seen (so a standalone /bind, which carries only names and a UID, finds
 * the pod its /filter saw), and a lock: the core is not thread-safe, and
 * every verb and every watch event takes the lock for the short time it
 * touches the model. Scheduling logic is the core's (core_filter,
 * core_score, core_pick_gpus, core_reserve, core_preempt); this module
 * only maps the extender protocol onto it.
 *
 * A bind reserves the GPUs under the lock, then makes the decision durable
 * through the commit backend (the standalone journal: its record queued
 * under the lock, waited for without it; or pod annotations + Binding in a
 * cluster, without the lock); if that fails the reservation is
 * undone, so a GPU is never counted twice or lost. Two binds racing for the
 * last GPU: the second reservation fails and its bind gets an error.
 *
 * Replies are built here as jansson objects with the HTTP status to send:
 * 400 for requests that cannot be parsed (naming the field), 404 for a pod
 * or node that does not exist, 409 for a bind that lost a race, 503 when
 * this replica may not bind. Pod-level request errors (a GPU request that
 * cannot be right) are answered 200 with "Error", as kube-scheduler expects.
 *
 * Ownership: ext_sched_new() returns an object freed by ext_sched_free();
 * replies belong to the caller.
 */
#ifndef GPUSCHED_EXT_SCHED_H
#define GPUSCHED_EXT_SCHED_H

#include <jansson.h>
#include <stddef.h>

#include "core/cluster.h"
#include "core/request.h"
#include "util/err.h"
#include "util/metrics.h"

struct ext_sched;

/* Makes the scheduler's state changes durable. A backend that logs records
 * (standalone: the journal) gives log_bind/log_release: they are called with
 * the scheduler lock held, right after the change, so the log's order is the
 * order of the changes (a release can never be logged before the bind it
 * undoes), and hand back a ticket; durable() is then called without the
 * lock and returns once that record is on disk. bind is called without the
 * lock (cluster: annotations + Binding). Each returns 0 or a negative GS_E*
 * code; a failed bind's reservation is undone, unless the pod's state has
 * changed again since (released, or bound anew). Any hook may be NULL. */
/* What commit.bind returns, its error in e, when the Binding's outcome
 * cannot be learned (no answer, and the pod cannot be read): the GPUs stay
 * reserved, the pod orphaned (sched_pod_orphaned) until its watch event
 * shows it bound or its next /filter or /bind drops the reservation. Any
 * other failure is a negative GS_E* code, and the reservation is undone. */
#define EXT_COMMIT_UNKNOWN 1

/* A preemption decided by /filter (opts.filter_preemption): pod (UID uid)
 * takes node once the victims, lower-priority GPU pods there, are gone. */
#define EXT_MAX_VICTIMS 64
struct ext_preemption {
    char pod[2 * CORE_NAME_MAX]; /* "namespace/name" */
    char uid[64], node[CORE_NAME_MAX];
    int32_t priority;
    unsigned long gen; /* the record it carries out (one per decision) */
    int n;
    struct {
        char pod[2 * CORE_NAME_MAX], uid[64];
        int32_t priority;
        int failed; /* set by commit.preempt: its delete failed, it stays */
    } v[EXT_MAX_VICTIMS];
};

struct ext_commit {
    int (*bind)(void *ud, const char *ns, const char *name, const char *uid,
                const struct core_alloc *a, const json_t *annotations, struct gs_err *e);
    int (*log_bind)(void *ud, const char *ns, const char *name, const char *uid,
                    const struct core_alloc *a, const json_t *annotations, void **ticket,
                    struct gs_err *e);
    int (*log_release)(void *ud, const char *uid, void **ticket, struct gs_err *e);
    int (*durable)(void *ud, void *ticket, struct gs_err *e);
    /* May this replica bind now? (leader election); NULL = always. */
    int (*may_bind)(void *ud);
    /* Carries out a preemption (cluster: deletes the victims, each only
     * while it has its UID, and nominates the pod to the node), called
     * without the lock. An error: nothing was done. 0 with some victims'
     * `failed` set: the others are going. NULL: /filter never preempts. */
    int (*preempt)(void *ud, struct ext_preemption *pr, struct gs_err *e);
    /* Has ext_sched_carry_out(pr) run later on a thread of its own, and
     * takes pr; -1: it cannot (stopping), the preemption is forgotten. The
     * deletes wait on the API server, up to its timeout per victim, and an
     * HTTP worker serves its connections one request at a time: /bind,
     * /healthz and the next /filter on them would wait too (and a second
     * /filter of the pod would find the victims gone, its answer changed
     * by the wait). NULL: carried out before /filter answers. */
    int (*later)(void *ud, struct ext_preemption *pr);
    void *ud;
};

/* The extender's default placement policy: cpufrag leaves fewer GPUs
 * unallocated than FGD on every openb trace at the same cost per decision
 * (docs/benchmark.md, "cpufrag"). */
#define EXT_DEFAULT_POLICY "cpufrag"

struct ext_sched_opts {
    const struct core_names *names;
    const char *policy;   /* default policy; NULL = EXT_DEFAULT_POLICY */
    int top_k;            /* /filter returns only the best k feasible nodes; 0 = all */
    size_t max_pods;      /* pods remembered from /filter; 0 = 100000 */
    struct metrics *metrics; /* may be NULL */
    int no_keep;          /* keep no answer, verdict or node position between requests
                             (ext/memo.h): every request decided afresh; what the
                             kept-answer tests compare against */
    double filter_wait;   /* seconds ext_sched_filter_after_bind waits for the /bind of
                             the GPU pod the previous /filter found nodes for; 0 = never */
    int hard_pod_affinity_weight; /* kube-scheduler's InterPodAffinityArgs: what a placed
                             pod's required podAffinity term adds for the pods it picks,
                             1..100; 0 = its default (1); EXT_HARD_AFFINITY_NONE = 0 */
    int filter_preemption; /* a GPU pod that no node offered fits: preempt for it from
                             /filter (the leader, through commit.preempt) */
};
#define EXT_HARD_AFFINITY_NONE (-1)

int ext_sched_new(const struct ext_sched_opts *opts, struct ext_sched **out, struct gs_err *e);
void ext_sched_free(struct ext_sched *s);
void ext_sched_set_commit(struct ext_sched *s, const struct ext_commit *c);
/* Carries out a preemption a /filter chose (commit.preempt) and frees pr;
 * one that failed is forgotten (its node no longer kept for the pod). */
void ext_sched_carry_out(struct ext_sched *s, struct ext_preemption *pr);
/* Replaces the GPUQuotas in force (takes ownership of q; core/quota.h).
 * /filter and /bind then refuse a pod that would exceed its namespace's
 * quota, counted from the current allocations; /metrics shows usage per
 * namespace and model and each quota's limit and use. */
struct core_quotas;
void ext_sched_set_quotas(struct ext_sched *s, struct core_quotas *q);
/* Has a set of quotas been handed over since the start? A replica that
 * has not yet read the GPUQuotas would place pods past them. */
int ext_sched_quotas_known(struct ext_sched *s);
/* Cluster mode: bind a GPU pod to a node only while no GPU pod bound there
 * earlier waits for kubelet (ext/nodelock.h; borrowed, NULL = off). A bind
 * to a held node answers EXT_BIND_BUSY, which the server turns into a wait. */
struct ext_nodelock;
void ext_sched_set_nodelock(struct ext_sched *s, struct ext_nodelock *l);
#define EXT_BIND_BUSY 423

/* ---- nodes ---- */
/* Adds or updates a node from a Node object. *updated_at: inventory time. */
int ext_sched_upsert_node(struct ext_sched *s, const json_t *node, struct gs_err *e);
int ext_sched_remove_node(struct ext_sched *s, const char *name, struct gs_err *e);
/* Makes the node set exactly `items` (a relist); returns how many failed. */
int ext_sched_replace_nodes(struct ext_sched *s, const json_t *items);
/* Marks nodes whose inventory is older than ttl_s unavailable (and fresh
 * ones available again). Returns the number of stale nodes. */
int ext_sched_check_inventory(struct ext_sched *s, double now, double ttl_s);
/* Ends the preemptions /filter started whose victims all let go of their
 * GPUs more than EXT_PREEMPT_KEEP_S before now (wall clock), or that have
 * lasted the victims' longest grace period plus 2 * EXT_PREEMPT_KEEP_S: their pods
 * keep the node only through status.nominatedNodeName from then on.
 * Returns how many ended (the pods they kept off may fit now). */
#define EXT_PREEMPT_KEEP_S 30.0
int ext_sched_expire_preemptions(struct ext_sched *s, double now);

/* PodDisruptionBudgets (ext/pdbs.h): the victims the extender chooses
 * spare the pods they protect where it can, as kube-scheduler's do. Kept by
 * the cluster watch; errors name the field. */
int ext_sched_upsert_pdb(struct ext_sched *s, const json_t *obj, struct gs_err *e);
void ext_sched_remove_pdb(struct ext_sched *s, const char *ns, const char *name);
/* Makes the set exactly `items` (a relist); returns how many were broken.
 * The first one ends ext_sched_pdbs_pending(). */
int ext_sched_replace_pdbs(struct ext_sched *s, const json_t *items);
/* The budgets are not known yet (a watch will list them): until they are,
 * no preemption from /filter is made, so none evicts a pod one protects. */
void ext_sched_pdbs_pending(struct ext_sched *s);

/* ---- pods and allocations ---- */
/* Records an allocation from a record as ext_sched_allocations() writes
 * it (journal replay). Errors name the field. */
int ext_sched_restore(struct ext_sched *s, const json_t *rec, struct gs_err *e);
/* Frees a pod's GPUs: by UID, or by "NS/NAME". -GS_ENOENT if it holds none. */
int ext_sched_release(struct ext_sched *s, const char *who, struct gs_err *e);
/* The same for "ns/name" alone, or, with uid, the pod of that name and uid
 * (two pods of one name may hold GPUs: then the name alone is refused,
 * -GS_ECONFLICT). */
int ext_sched_release_one(struct ext_sched *s, const char *who, const char *uid,
                          struct gs_err *e);
/* Cluster mode: a pod seen by the watch (deleted = 1 for DELETED). Finished
 * and deleted pods free their GPUs; pods with assignment annotations hold
 * them; pending GPU pods are remembered for /bind. Returns 1 when GPUs were
 * freed, or a node was released while a pod whose bind found it held waits
 * for a retry (ext_sched_to_nudge). */
int ext_sched_observe_pod(struct ext_sched *s, const json_t *pod, int deleted);
/* Cluster mode: a full pod list; every allocation is rebuilt from it. */
void ext_sched_replace_pods(struct ext_sched *s, const json_t *items);
/* The pods' list starts (kube_watch_ops.list_begin): a pod this replica
 * binds from now on and the list lacks was made after its snapshot, and
 * keeps its GPUs through ext_sched_replace_pods. */
void ext_sched_list_begin(struct ext_sched *s);
/* Pods such a list lacked, not seen since: made after its snapshot (the
 * watch brings them), or deleted before it (nothing ever will). Fills up
 * to max "NS/NAME/UID" strings (malloc'd) for the caller to look up, and
 * returns the count. */
int ext_sched_unlisted(struct ext_sched *s, char **out, int max);
/* Pod uid, one of those, is not on the API server: its GPUs are freed
 * (returns 1) unless it has been seen since. */
int ext_sched_unlisted_gone(struct ext_sched *s, const char *uid);
/* Pending GPU pods that found no node at their last /filter, not listed
 * in the last `every` seconds (now, on the caller's clock), for an Event
 * each: the time goes with the pod. Fills up to max "NS/NAME" strings
 * (malloc'd) and returns the count. */
int ext_sched_unschedulable_due(struct ext_sched *s, char **out, int max, double now,
                                double every);
/* A /bind for pod uid was answered 503: its node stayed held (ext/nodelock.h). */
void ext_sched_bind_gave_up(struct ext_sched *s, const char *uid);
/* A /bind for pod uid was refused for another reason (its commit failed,
 * the leader did not answer a forwarded one, ...): kube-scheduler parks the
 * pod in its unschedulable queue, and nothing else may come to free it. */
void ext_sched_bind_refused(struct ext_sched *s, const char *uid);
/* GPUs or a node were freed: every pending pod whose last /filter found no
 * node is due one nudge more (ext_sched_to_nudge). */
void ext_sched_nudge_round(struct ext_sched *s);
/* The pending GPU pods to nudge now, in the same form, at most max:
 * those whose /bind was refused, a second after (not for a held node),
 * then those that this round has not nudged yet and whose /bind found its
 * node held (a round begins when a node is released too, which
 * ext_sched_observe_pod reports by returning 1) or whose last /filter
 * found no node, the least recently nudged first. *more says that others
 * wait: this round's, or refused binds not due yet; call again (a second
 * later) for them. Each pod is listed once per call. */
int ext_sched_to_nudge(struct ext_sched *s, char **out, int max, double now, int *more);
/* The nudge of pod "NS/NAME" failed: it is due again. */
void ext_sched_nudge_failed(struct ext_sched *s, const char *ns_name);
/* Every pending GPU pod this replica knows (no node, no bind under way, no
 * GPUs but those of an assignment whose Binding never came), the same way: a
 * new leader nudges them, since binds refused or cut off during a failover
 * leave pods in kube-scheduler's unschedulable queue. */
int ext_sched_waiting(struct ext_sched *s, char **out, int max);

/* ---- the verbs: body in, (status, reply) out ---- */
/* A reply is either a JSON tree or, on the hot paths (/filter and
 * /prioritize with NodeNames), text written directly: encoding 5,000
 * names through a tree costs more than deciding. */
struct ext_text;
struct ext_reply {
    json_t *json;  /* owned, or NULL */
    char *text;    /* malloc'd JSON text, or NULL */
    size_t len;
    struct ext_text *shared; /* or a reference to a kept reply text (ext/memo.h) */
};
/* Moves the reply into a malloc'd JSON string (*len set); frees the rest. */
char *ext_reply_take(struct ext_reply *r, size_t *len);

int ext_sched_filter(struct ext_sched *s, const char *body, size_t len, struct ext_reply *r);
/* /filter as kube-scheduler calls it: kube-scheduler binds a pod in a
 * goroutine beside the next pod's scheduling cycle, so a GPU pod's /filter
 * can come before the /bind of the GPU pod filtered before it, and would
 * offer the GPUs that bind is about to take (when both want a node's last
 * one, the second bind is refused 409). This /filter first waits for that
 * /bind to arrive and reserve its GPUs, at most filter_wait after the
 * previous /filter and never longer than filter_wait in all. may_wait 0:
 * answers EXT_FILTER_WAIT (and nothing else) when it would have to wait, so
 * an HTTP worker can hand it to a thread that may block (may_wait 1). */
#define EXT_FILTER_WAIT 424
int ext_sched_filter_after_bind(struct ext_sched *s, const char *body, size_t len, int may_wait,
                                struct ext_reply *r);
int ext_sched_prioritize(struct ext_sched *s, const char *body, size_t len, struct ext_reply *r);
int ext_sched_bind(struct ext_sched *s, const char *body, size_t len, struct ext_reply *r);
int ext_sched_preempt(struct ext_sched *s, const char *body, size_t len, struct ext_reply *r);
/* GET /debug/pods/NS/NAME: per node, why it was rejected or how it scores
 * now, and the pod's allocation. 404 for a pod the extender never saw. */
int ext_sched_explain(struct ext_sched *s, const char *ns, const char *name, json_t **reply);
/* GET /debug/workload: the target workload cpufrag and fgd learn from the
 * pods reserved so far, {"pods", "classes": [{"cpu_milli",
 * "num_gpu", "milli", "models" ([] = any), "pods"}]}, commonest first. */
json_t *ext_sched_workload(struct ext_sched *s);
/* The same for the pods that have ended only (core_workload_ended): what a
 * replica saves for replicas started later. Its rarest classes are left out
 * until it dumps (JSON_COMPACT) to at most max_bytes. NULL when out of memory. */
json_t *ext_sched_workload_ended(struct ext_sched *s, size_t max_bytes);
/* Adds a saved ext_sched_workload_ended document to the learned workload.
 * Call once the nodes are known (models are saved by name; names this
 * replica does not know are skipped). Every field is checked before anything
 * is added; -GS_EINVAL names the first bad one ("classes[3].milli: ..."). */
int ext_sched_workload_seed(struct ext_sched *s, const json_t *saved, struct gs_err *e);
/* One-line summary of why the remembered pod NS/NAME fits nowhere ("0/8
 * nodes fit the GPU request; 5 rejected by gpu-fit (e.g. ...)"), for
 * Events; uid gets its UID. -GS_ENOENT for a pod never seen. */
int ext_sched_summary(struct ext_sched *s, const char *ns, const char *name, char *uid,
                      size_t uidcap, char *buf, size_t cap);

/* {"error": msg, "Error": msg} */
json_t *ext_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Fills the per-node/per-model gauges (called from the metrics collect). */
void ext_sched_collect(struct ext_sched *s, struct metrics *m);
/* Every allocation as a journal-style record {"uid", "ns", "name",
 * "priority", "cpu_milli", "mem_bytes", "annotations"} (assigned-at is
 * now): what `gpusched status`-like tools and ext_sched_restore() read. */
json_t *ext_sched_allocations(struct ext_sched *s);

/* Counts, for /readyz and tests. */
void ext_sched_counts(struct ext_sched *s, int *nodes, int *allocs);

#endif
