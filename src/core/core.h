/*
 * core/core.h - the scheduling decision: filter, score, choose node, choose
 * GPUs, preempt. The one API the extender, the simulator and the device
 * plugin call, so that a policy measured in the simulator is, byte for byte,
 * the policy that runs in the cluster.
 *
 * Shaped like the kube-scheduler framework: a table of filter plugins (each
 * says why a node does not fit), one score policy per decision (scores 0..100
 * after normalisation), a node-level choice (highest score, ties to the
 * smallest seeded node rank, see core_cluster_set_seed) and a GPU-level
 * choice. Policies are looked up by name in a registry (core/policy.h).
 *
 * SHARED requests (memory MiB + optional compute thousandths per GPU) fit a
 * GPU when both its free memory and its free compute suffice. Policies that
 * reason in compute shares see a GPU's free share as
 *   min(free_milli, floor(1000 * free_mem_mib / mem_mib))
 * and a pod's share on that GPU as
 *   max(milli, ceil(1000 * mem_mib / gpu mem_mib)),
 * so memory-only requests pack and fragment like compute requests. The
 * trace simulator's pods have mem_mib = 0, where both reduce to milli.
 *
 * Not thread-safe; no I/O. Errors are returned (struct gs_err), never printed.
 */
#ifndef GPUSCHED_CORE_CORE_H
#define GPUSCHED_CORE_CORE_H

#include <stdint.h>

#include "core/cluster.h"
#include "core/request.h"
#include "util/err.h"

#define CORE_MAX_SCORE 100

/* Filter outcomes (k8s framework codes), one X-macro so names never drift. */
#define CORE_CODE_MAP(XX)                                                      \
    XX(FIT, "fits")                                                            \
    XX(UNSCHEDULABLE, "does not fit now")                                      \
    XX(UNRESOLVABLE, "cannot fit even on the empty node")

enum core_code {
#define XX(name, desc) CORE_##name,
    CORE_CODE_MAP(XX)
#undef XX
};
const char *core_code_name(enum core_code c);

/* Why a node does or does not fit. `reason` is for a person and names the
 * resource and the numbers, e.g. "GPU 3 has 2048 MiB free, pod needs 8192
 * MiB", "no GPU of model A100", "node has 2 free GPUs, pod needs 4". */
struct core_status {
    enum core_code code;
    const char *plugin;        /* filter plugin that rejected, NULL when FIT */
    char reason[256];
};

struct core_policy;

/* core_filter over many nodes for one pod, for callers that filter a list
 * (the extender's /filter): the request is checked once and each node is
 * decided from its packed filter line, the full plugin chain running only
 * where that line cannot decide. fit[i] gets exactly what core_filter
 * returns for nodes[i] (0 for a NULL entry). Returns how many fit, or a
 * negative GS_E* code for an invalid request (then every fit[i] is 0).
 * Writes no reasons: call core_filter on a rejected node for its reason. */
int core_filter_nodes(struct core_cluster *c, const struct core_pod *pod,
                      struct core_node *const *nodes, int n, unsigned char *fit,
                      struct gs_err *e);

/* Does the pod fit on the node now? Runs every filter plugin in order; the
 * first rejection decides. Returns 1 if it fits, 0 if not; *st (optional)
 * gets the code and reason. UNRESOLVABLE means the pod would not fit even if
 * every pod on the node left (wrong model, too few GPUs, taint, labels). */
int core_filter(struct core_cluster *c, const struct core_node *n, const struct core_pod *pod,
                struct core_status *st);

/* Scores the given nodes for the pod with a policy: scores[i] in 0..100 for
 * nodes[i], after the policy's normalisation over the nodes that fit; nodes
 * that do not fit score 0. Returns 0 or a negative GS_E* code. */
int core_score(struct core_cluster *c, const struct core_policy *pol, const struct core_pod *pod,
               struct core_node *const *nodes, int n, int *scores, struct gs_err *e);

/* core_score with the filters' verdicts carried over from an earlier call
 * for the same pod: on entry fit[i] is CORE_FIT_YES or CORE_FIT_NO where
 * the caller knows the verdict (nothing the filters read of nodes[i] or the
 * pod has changed since), 0 where the filters must decide; on return every
 * fit[i] is YES or NO. Given true verdicts, the scores are core_score's. */
enum { CORE_FIT_YES = 1, CORE_FIT_NO = 2 };
int core_score_fit(struct core_cluster *c, const struct core_policy *pol,
                   const struct core_pod *pod, struct core_node *const *nodes, int n,
                   unsigned char *fit, int *scores, struct gs_err *e);
/* core_score_fit for the nodes at positions pos[0..n) (core_node_pos):
 * the same answers, but a node whose verdict is given and whose score is
 * kept from an earlier decision (its state stamp unchanged) costs only
 * reads of dense per-position arrays, not of the node. -GS_EINVAL for a
 * position outside the cluster. */
int core_score_fit_at(struct core_cluster *c, const struct core_policy *pol,
                      const struct core_pod *pod, const int *pos, int n, unsigned char *fit,
                      int *scores, struct gs_err *e);

/* The policy's GPU-level choice on one node: fills *out (pod identity, node,
 * kind, GPUs, per-GPU memory and compute, MIG instances) without reserving.
 * WHOLE: the best-linked free set (core_topology_pick), whatever the
 * policy (the lowest-index GPUs on a node without links). SHARED: the
 * policy's GPU selector (bestfit: least free share that fits). MIG: free
 * instances of the profile, fewest GPUs first. -GS_ENOFIT (reason in *e) if
 * the pod does not fit. */
int core_pick_gpus(struct core_cluster *c, const struct core_policy *pol,
                   const struct core_node *n, const struct core_pod *pod, struct core_alloc *out,
                   struct gs_err *e);

/* Topology choice shared with the device plugin's GetPreferredAllocation:
 * among `candidates` (bitmask of positions in n->gpus), choose `count` GPUs
 * that include `must`, maximising first the weakest link inside the set
 * (NVLink > one PCIe switch > several switches > host bridge > same NUMA >
 * across NUMA), then the sum of links, then the sum of links left among the
 * candidates not chosen, then the lowest positions. Returns 0 with *chosen
 * set, or -GS_ENOFIT if candidates hold fewer than count GPUs or do not
 * contain must. */
int core_topology_pick(const struct core_node *n, uint32_t candidates, uint32_t must, int count,
                       uint32_t *chosen);
/* The GPUs of a pod of `count` shared GPUs: pos[0..k) are the fitting GPU
 * positions in the policy's order of preference (best fit first, ...);
 * reorders them so that the chosen `count` come first, still in that order:
 * the set whose weakest internal link is best, then the one earliest in the
 * order (compared rank by rank). On a node whose candidates are all linked
 * alike (no topology, NVSwitch), the first `count`, untouched. 0, or
 * -GS_ENOFIT when k < count. */
int core_topology_pick_ranked(const struct core_node *n, int *pos, int k, int count);
/* A set's links as core_topology_pick ranks them, higher better: its
 * weakest link times CORE_LINK_SUM_MAX plus the sum of its links (a sum
 * over at most C(CORE_MAX_GPUS, 2) pairs stays below CORE_LINK_SUM_MAX). */
#define CORE_LINK_SUM_MAX 1024
int core_topology_quality(const struct core_node *n, uint32_t set);

/* One full decision: filter every node, score the feasible ones, choose the
 * node (highest score; ties to the best-linked GPUs for a pod of 2+ whole
 * or shared GPUs, then the seeded rank; `random` picks uniformly), choose the GPUs.
 * Does not reserve: call core_reserve(c, &d->alloc, e) to commit. Returns
 * 0, or -GS_ENOFIT when no node fits (d->n_feasible = 0). */
struct core_decision {
    struct core_node *node;    /* borrowed */
    int score;
    int n_feasible;            /* nodes that passed the filters */
    struct core_alloc alloc;
};
int core_schedule_one(struct core_cluster *c, const struct core_policy *pol,
                      const struct core_pod *pod, struct core_decision *d, struct gs_err *e);

/* Which of a node's candidate victims a disruption budget protects
 * (kube-scheduler's filterPodsWithPDBViolation): mark() gets the pods of
 * lower priority, highest priority first (within one, the core has no start
 * times: smaller GPU holders first, then by UID; a caller that knows more
 * ranks them its own way), and sets viol[i] for each whose eviction would
 * take some PodDisruptionBudget below zero. */
struct core_preempt_guard {
    void (*mark)(void *ud, const struct core_alloc *const *cand, int n, unsigned char *viol);
    void *ud;
};

/* The node's allocations, one after the other (in no set order): a NULL
 * `after` gives the first; NULL when there are no more. Valid until the
 * cluster changes. */
const struct core_alloc *core_node_alloc_next(const struct core_node *n,
                                              const struct core_alloc *after);

/* Preemption on one node: a minimal set of pods with priority lower than
 * the pod's whose eviction lets it fit (pods no budget protects first, then
 * the protected ones; within each, lowest priorities first; then every
 * victim whose return still leaves room is spared, protected ones first).
 * guard may be NULL (no budgets). Fills victims[0..*n_victims-1] with
 * borrowed pod UIDs (valid until the cluster changes) and *n_violating (may
 * be NULL) with how many of them a budget protects; the cluster is left
 * unchanged. 0 victims if the pod fits now. Returns 0, or -GS_ENOFIT if
 * even evicting every lower-priority pod would not do (or more than max
 * victims are needed). */
int core_preempt(struct core_cluster *c, const struct core_node *n, const struct core_pod *pod,
                 const struct core_preempt_guard *guard, const char **victims, int max,
                 int *n_victims, int *n_violating, struct gs_err *e);

/* The node's position in the cluster: core_cluster_node(c, pos) is n. A
 * position stays while the node is updated in place and changes only when
 * nodes are removed, so callers that remember nodes by name (the
 * extender's NodeNames cache) keep positions, not pointers, which an update
 * replaces. */
int core_node_pos(const struct core_node *n);

/* The order core_schedule_one gives nodes it scores equal for pod, lower
 * first, for the nodes at positions pos[] (core_node_pos) into keys[]: for
 * a pod of 2+ whole or shared GPUs, how well linked the GPUs it would get
 * there are (weakest link, then their sum, as core_topology_pick judges a
 * set), then
 * the node's seeded rank (core_cluster_set_seed). 0, or -GS_EINVAL for a
 * request core_schedule_one would refuse. */
int core_tie_keys_at(struct core_cluster *c, const struct core_pod *pod, const int *pos, int n,
                     uint64_t *keys, struct gs_err *e);
/* The pod's soft preferences for the nodes at positions pos[], which
 * core_schedule_one puts before the policy's score: kube-scheduler's
 * NodeAffinity (preferred node affinity terms) plus TaintToleration
 * (PreferNoSchedule taints the pod does not tolerate) scores, each 0..100
 * normalised over the n nodes as kube-scheduler normalises them. 1 with
 * soft[] filled, 0 when neither applies to any of them (soft[] untouched),
 * or -GS_EINVAL for a request core_schedule_one would refuse. */
int core_soft_at(struct core_cluster *c, const struct core_pod *pod, const int *pos, int n,
                 int *soft, struct gs_err *e);
/* Of n scored nodes at positions pos[] (scores[]; fit[] as
 * core_score_fit_at leaves it, NULL when all fit), the index
 * core_schedule_one would take for pod: among those that fit and that the
 * pod's soft preferences rank best (core_soft_at), the highest score,
 * ties to the smallest core_tie_keys_at key. -1 when none fits (or
 * the request is one core_schedule_one refuses). Reads the keys of the
 * tied nodes only. */
int core_choice_at(struct core_cluster *c, const struct core_pod *pod, const int *pos,
                   const int *scores, const unsigned char *fit, int n);

/* Every node's state stamp, by position (core_node_pos): renewed on every
 * change of the node (its allocations, inventory, availability, labels,
 * taints) and never given twice over the cluster's life, so an equal stamp
 * means the same node in the same state, and core_filter answers it the
 * same way. Never 0. Valid until a node is added or removed. */
const uint64_t *core_cluster_stamps(const struct core_cluster *c);

/* Moves whenever anything core_filter or core_score reads changes: a node
 * added, updated, removed or marked (un)available, an allocation reserved
 * or released, the target workload (explicit or learned) or the per-model
 * GPU counts. Equal versions give equal answers to the same question (the
 * random policy and the tie-break seed aside), which lets the extender keep
 * answers to repeated requests. */
uint64_t core_cluster_version(const struct core_cluster *c);

#endif
