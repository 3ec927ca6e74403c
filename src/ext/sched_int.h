/*
 * ext/sched_int.h - private to the extender's scheduler (ext/sched.c and
 * ext/sched_*.c): the state every verb shares and the few helpers they call.
 * The public API is ext/sched.h; nothing else includes this header.
 *
 * Locking: every field of struct ext_sched below `mu` is guarded by it
 * (the metrics are thread-safe on their own); helpers marked "Lock held"
 * expect the caller to hold it.
 */
#ifndef GPUSCHED_EXT_SCHED_INT_H
#define GPUSCHED_EXT_SCHED_INT_H

#include <jansson.h>

/* Pod objects (pod.obj) and request documents are referenced from the HTTP
 * workers, the bind threads and the watch threads at once: jansson must
 * count references atomically (2.11 and later, with atomic builtins). */
#ifndef JANSSON_THREAD_SAFE_REFCOUNT
#error "gpusched needs a jansson whose reference counts are thread-safe (2.11 or later)"
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "core/policy.h"
#include "core/quota.h"
#include "ext/devices.h"
#include "ext/memo.h"
#include "ext/pdbs.h"
#include "ext/namelist.h"
#include "ext/nodelock.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/metrics.h"

/* ---- a small string-keyed hash map ---------------------------------------- */

struct entry {
    char *key;
    void *val;
    struct entry *next;
};

struct smap {
    struct entry **b;
    size_t nb, n;
};


/* What the extender keeps of a node beside the core's model. */
struct node_info {
    double updated_at;      /* inventory time (0: none) */
    struct ext_devcap cap;  /* kubelet's device counts (ext/devices.h) */
    int kubelet;            /* a kubelet registered it (status.nodeInfo.kubeletVersion) */
};

struct sched_preempting; /* ext/sched_preempt.c */

/* A pod the extender has seen. */
struct pod {
    char uid[64], ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
    json_t *obj;          /* the Pod object (for /bind and rebuilds) */
    int watched;          /* obj came from the watch (cluster mode): verbs' bodies no
                             longer replace it */
    int preempt_unseen;   /* a /filter could have preempted for it before the watch
                             brought it (sched_filter_preempt) */
    double start;         /* its status.startTime (wall clock; 0: not started), read
                             once per object: preemption orders victims by it */
    int unschedulable;    /* its last /filter found no node */
    double evented_at;    /* when an Event last said so (ext_sched_unschedulable_due) */
    int need_restore;     /* assignment annotations whose node is not known yet */
    int binding;          /* a /bind is committing its allocation right now */
    int bound;            /* this replica's /bind committed its allocation */
    unsigned long bind_gen; /* which /bind reserved its allocation (s->bind_gen) */
    int bind_busy;        /* its /bind was answered 503 for a held node (node lock) and
                             it has not bound since: kube-scheduler parked it */
    double busy_at;       /* when bind_busy was set (mono clock): its nudge waits a second,
                             as below */
    double retry_at;      /* a /bind of it was refused here (not for a held node): nudge
                             it from then on (mono clock; 0: none), once kube-scheduler
                             has given up its assumption of the pod */
    unsigned long nudge_round; /* the nudge round it was last nudged in (ext_sched_to_nudge) */
    unsigned long nudged_no;   /* and its place in the order of nudges: the least recent go first */
    unsigned long seq;    /* last touched */
    unsigned long bound_no; /* the s->n_binds of its bind (bound) */
    int unlisted;         /* a relist kept it (bound_no) without listing it, and it has
                             not been seen since (ext_sched_unlisted) */
    char nominated[CORE_NAME_MAX]; /* the node it is nominated to while it has none ("": none):
                                      its own preemption's (pre), else status.nominatedNodeName */
    struct sched_preempting *pre; /* the preemption /filter started for it, or NULL */
    struct pod *older, *newer; /* the eviction order (see evict) */
};

struct ext_sched {
    pthread_mutex_t mu;
    struct core_cluster *c;
    const struct core_policy *policy;
    struct ext_sched_opts opts;
    struct ext_commit commit;
    unsigned long bind_gen; /* /binds that reserved GPUs so far */
    struct smap pods;     /* uid -> struct pod */
    struct pod *oldest, *newest; /* the pods, least recently remembered first */
    struct smap inv;      /* node name -> struct node_info */
    struct smap usage_pods, usage_nodes; /* pods without GPUs of ours (sched_usage.c) */
    struct smap unkept;   /* "ns/name" -> uid (malloc'd) of a release whose journal record
                             was not kept: free here, held on disk until released again */
    struct ext_nodelock *lock; /* one pending GPU pod per node (cluster mode), or NULL */
    int n_devcap;         /* nodes whose allocatable device counts are known */
    /* NodeNames arrays seen lately (ext/namelist.h); their node positions
     * are valid while node_gen, bumped whenever a node comes or goes, is
     * what they were resolved at */
    struct ext_namecache *lists;
    unsigned long node_gen;
    struct ext_namelist *base; /* the longest list resolved at node_gen (a reference):
                                  later lists take their positions from it */
    int n_bind_busy;      /* pods with bind_busy set */
    unsigned long nudge_round, n_nudged; /* rounds begun (ext_sched_nudge_round), nudges listed */
    int released;         /* a node lock was released since the last check */
    struct ext_memo *memo;
    unsigned long seq;
    unsigned long n_preempts; /* preemptions decided (ext_preemption.gen) */
    unsigned long n_binds, list_from; /* binds committed; and by the start of the pods'
                                         last list (ext_sched_list_begin) */
    int n_need_restore;
    struct metric *m_kept, *m_redecided; /* kept answers (ext/memo.h) */
    struct metric *m_decisions, *m_gpus, *m_gpus_alloc, *m_gpus_free, *m_mem_alloc,
        *m_milli_alloc, *m_frag, *m_allocs, *m_stale, *m_others, *m_nominated,
        *m_owners;
    struct core_quotas *quotas; /* GPUQuotas; usage is recounted from c when read */
    atomic_int quotas_known;    /* ext_sched_set_quotas has been called (read unlocked:
                                 * commit.may_bind asks under mu) */
    struct ext_pdbs *pdbs;      /* PodDisruptionBudgets that preemption respects */
    int pdbs_pending;           /* they are not listed yet (ext_sched_pdbs_pending) */
    struct metric *m_ns_usage, *m_quota_limit, *m_quota_used;
    /* the GPU pod /filter last found nodes for, whose /bind is still to come
     * until expect_until (CLOCK_MONOTONIC; 0 = none), and the /binds'
     * signal to the /filters waiting for it (ext_sched_filter_after_bind) */
    char expect_uid[64];
    double expect_until;
    double last_bind;     /* when a /bind last arrived (CLOCK_MONOTONIC): a scheduler
                             configured without bindVerb sends none, and then no
                             /filter waits for one */
    pthread_cond_t bind_came;
    struct metric *m_filter_waits;
    struct sched_podaff *podaff; /* pod term counts of the last pod asked (sched_podaff.c) */
    struct smap owners;   /* uid -> struct sched_owner: the pods remembered or counted
                             whose pod affinity terms may pick others (sched_podaff.c) */
    struct smap owner_groups; /* namespace ("*": any) -> the owners whose terms pick
                                 pods there (sched_podaff.c) */
    atomic_int n_owners;  /* owners.n, for sched_podaff_attach outside the lock */
    unsigned long labels_gen; /* bumped when a counted pod's labels change (they are
                                 not in core_cluster_version, which podaff is kept at) */
    struct smap nominated; /* uid -> struct pod, of the remembered pods with a nomination
                              (struct pod.nominated) */
    int nomination_gone;  /* one was withdrawn or moved since the last check */
    struct smap preempting; /* uid -> struct pod, of the pods with a preemption (pod.pre) */
    struct sched_held *held; /* nominated pods gathered for the pod asked (sched_nominated.c) */
};

/* ---- preferred pod affinity (ext/sched_podaff.c) ----------------------------- */

struct sched_podaff;
/* Has the core score pod (parsed from obj, which must outlive it) by its
 * preferred pod (anti-)affinity terms and soft topology spread constraints
 * over the pods s counts, and by the terms of placed pods that pick it
 * (nothing when neither exists). Lock not needed. */
void sched_podaff_attach(struct ext_sched *s, struct core_pod *pod, const json_t *obj);
/* Pod uid (obj) is remembered or counted: its pod affinity terms, if it has
 * any, pick the pods to come while it is placed. Lock held. */
void sched_podaff_owner_put(struct ext_sched *s, const char *uid, const json_t *obj);
/* Pod uid was forgotten or no longer counts: its terms go once neither
 * holds it. Lock held. */
void sched_podaff_owner_drop(struct ext_sched *s, const char *uid);
/* Frees s->podaff and the owners. */
void sched_podaff_free(struct ext_sched *s);

/* ---- pods nominated to a node by a preemption (ext/sched_nominated.c) -------
 * Lock held for all of them. */

struct sched_held;
void sched_held_free(struct sched_held *h);
/* Gathers the pods nominated to a node that pod must leave room for: GPU
 * pods other than itself, with no allocation yet and a priority at least
 * its own (as kube-scheduler's filters add nominated pods). Returns how
 * many; 0 (the common case) costs nothing. Valid until the lock is let go. */
int sched_nominated_prepare(struct ext_sched *s, const struct core_pod *pod);
/* Does pod fit on n with the GPUs of the gathered pods nominated to n
 * reserved first? 1 yes (or none is nominated to n), 0 no with *st filled
 * (plugin "NominatedPods"; also when one of them does not fit there yet).
 * The cluster is left as it was. */
int sched_nominated_fit(struct ext_sched *s, const struct core_pod *pod, const struct core_node *n,
                        struct core_status *st);
/* Reserves, what-if, the GPUs of the gathered pods nominated to n: 0, or
 * -GS_ENOFIT when one does not fit there yet (why in *e). Either way
 * sched_nominated_undo takes back what it reserved. */
int sched_nominated_hold(struct ext_sched *s, const struct core_node *n, struct gs_err *e);
void sched_nominated_undo(struct ext_sched *s);

/* ---- preemption (ext/sched_preempt.c) ----------------------------------------
 * Lock held for all of them. */

/* GPU pod `pod` (remembered as p; obj its Pod) fits none of the n nodes a
 * /filter asked about (pos: their positions, -1 unknown; fit: their
 * verdicts, enum ext_memo_fit). When opts.filter_preemption is on, this
 * replica may bind, the pod may preempt and some node has lower-priority
 * GPU pods whose removal lets it fit, chooses that node and those victims
 * as kube-scheduler's preemption would, records them on p (nominated to
 * the node from now on) and returns 1 with *pr filled: the caller carries
 * it out through commit.preempt once the lock is released. Else 0. */
int sched_filter_preempt(struct ext_sched *s, struct pod *p, const struct core_pod *pod,
                         const json_t *obj, const int *pos, const unsigned char *fit, int n,
                         struct ext_preemption *pr);
/* The node of the preemption /filter started for p, while it is under
 * way; NULL when none is. */
const char *sched_preempting(const struct pod *p);
/* Is p's preemption under way the one of that decision (ext_preemption.gen)? */
int sched_preempting_is(const struct pod *p, unsigned long gen);
/* Waits no more for the victims of p's preemption whose delete failed
 * (pr: what commit.preempt carried out). */
void sched_preempt_unwait(struct pod *p, const struct ext_preemption *pr);
/* Drops p's preemption record (p is forgotten, bound, or it expired). */
void sched_preempt_drop(struct ext_sched *s, struct pod *p);
/* Takes p's record off it (a relist forgets the pods), or NULL; and gives
 * one to p (the same pod listed again; NULL p: it is freed). */
struct sched_preempting *sched_preempt_take(struct ext_sched *s, struct pod *p);
void sched_preempt_give(struct ext_sched *s, struct pod *p, struct sched_preempting *rec);
/* Sets p's nomination from its preemption record or its watched object. */
void sched_track_nomination(struct ext_sched *s, struct pod *p);

/* ---- what pods without GPUs of ours take (ext/sched_usage.c) ----------------
 * Lock held for all of them. */

/* Pod uid, which holds no allocation, is bound to node and asks cpu and
 * mem: counted there (moved, if it was counted elsewhere). */
void sched_usage_put(struct ext_sched *s, const json_t *pod, const char *uid, const char *node,
                     int64_t cpu, int64_t mem);
/* Pod uid no longer counts (done, deleted, or it holds an allocation). */
void sched_usage_drop(struct ext_sched *s, const char *uid);
/* Do the Pod objects (or meta_of's {"metadata"} parts) a and b carry the
 * same labels? */
int sched_labels_same(const json_t *a, const json_t *b);
/* Forgets every pod (a relist counts them again). */
void sched_usage_clear(struct ext_sched *s);
/* The node pod uid counts on, or NULL. */
const char *sched_usage_node(const struct ext_sched *s, const char *uid);
/* Gives the core node's sums (after the node joined the core). */
void sched_usage_push(struct ext_sched *s, const char *node);
/* Calls fn for every pod counted, with a Pod object that holds its
 * namespace and labels; stops at the first non-zero fn returns, and
 * returns it. */
int sched_usage_each(struct ext_sched *s,
                     int (*fn)(void *ud, const char *uid, const char *node, const json_t *pod),
                     void *ud);
/* Has the core count node's others less the pods uids[0..n) (a preemption's
 * victims); sched_usage_push puts them back. */
void sched_usage_without(struct ext_sched *s, const char *node, const char *const *uids, int n);

/* ---- state (ext/sched.c) --------------------------------------------------- */

/* The value stored under k, or NULL. */
void *sched_smap_get(const struct smap *m, const char *k);
/* Stores v under k (a copy of k; k must not be there yet). -1 out of memory. */
int sched_smap_put(struct smap *m, const char *k, void *v);
/* Removes k and returns its value, or NULL. */
void *sched_smap_del(struct smap *m, const char *k);
/* Every entry; the loop may delete the entry it is at. */
#define SMAP_FOREACH(m, it)                                                    \
    for (size_t i_##it = 0; i_##it < (m)->nb; i_##it++)                        \
        for (struct entry *it = (m)->b[i_##it], *nx_##it; it && ((nx_##it = it->next), 1); \
             it = nx_##it)
/* Counts one decision of a verb in gpusched_extender_decisions_total. */
void sched_decision(struct ext_sched *s, const char *verb, const char *result);
/* The wall clock, in seconds. */
double sched_wall_now(void);
/* A /bind of uid arrived: a /filter waiting for it goes on once the lock is
 * released. Lock held. */
void sched_bind_arrived(struct ext_sched *s, const char *uid);
/* Would the /filter of GPU pod uid have to wait for the /bind of the pod
 * the previous /filter found nodes for? 1 yes (wait 0); with wait 1 it
 * waits (the lock released meanwhile) until that bind arrived, at most
 * filter_wait, and returns 0. Lock held. */
int sched_await_bind(struct ext_sched *s, const char *uid, int wait);
/* /filter of GPU pod uid found nodes: its /bind is expected next. Lock held. */
void sched_expect_bind(struct ext_sched *s, const char *uid);
/* /prioritize of GPU pod uid: when its /bind is the one expected, the wait
 * for it runs filter_wait from now (the bind comes after the scores, and a
 * slow /prioritize, forwarded by another replica or on a busy machine, must
 * not use up the wait). Lock held. */
void sched_expect_bind_again(struct ext_sched *s, const char *uid);
/* Does p hold an allocation read from assignment annotations whose Binding
 * never came (no node name, no bind of this replica committing or committed
 * it)? In cluster mode only. Lock held. */
int sched_pod_orphaned(const struct ext_sched *s, const struct pod *p);
/* Drops p's orphaned assignment (sched_pod_orphaned): kube-scheduler places
 * the pod afresh (verb: "filter" or "bind"), so its GPUs are free again, for
 * it as for any other pod. 1 when it held one. Lock held. */
int sched_drop_orphan(struct ext_sched *s, struct pod *p, const char *verb);
/* The remembered pod ns/name, or NULL. Lock held. */
struct pod *sched_find_by_name(struct ext_sched *s, const char *ns, const char *name);
/* Remembers (or refreshes) a pod; NULL when it cannot. Lock held. Only a
 * watched object (watched != 0) sets or withdraws its nomination: the copy
 * kube-scheduler sends with a verb may lag the watch, and would set again a
 * nomination the watch withdrew. */
struct pod *sched_remember(struct ext_sched *s, const json_t *obj, int watched);
/* Sets p's bind_busy, keeping the count of such pods. Lock held. */
void sched_set_bind_busy(struct ext_sched *s, struct pod *p, int v);
/* Brings quota usage up to date for the pod's namespace; 1 when it has a
 * quota. Lock held. */
int sched_quota_prepare(struct ext_sched *s, const struct core_pod *pod);
/* Would the pod on n exceed its namespace's quota (reason in *e)? Lock held. */
int sched_quota_blocks(struct ext_sched *s, const struct core_pod *pod, const struct core_node *n,
                       struct gs_err *e);
/* Adds or updates a Node object in the model. Lock held. */
int sched_upsert_locked(struct ext_sched *s, const json_t *node, struct gs_err *e);
/* Has kubelet the devices the pod needs on n? 1 yes; 0 no, with *st
 * (optional) filled as a filter rejection. Lock held. */
int sched_devices_fit(struct ext_sched *s, const struct core_node *n, const struct core_pod *pod,
                      struct core_status *st);
/* The whole verdict on one node: the core's filters, then kubelet's device
 * count. Lock held. */
int sched_node_fits(struct ext_sched *s, const struct core_node *n, const struct core_pod *pod,
                    struct core_status *st);

/* What a kept /prioritize reply is valid at: the cluster's version plus
 * the labels generation, which pod terms read (both only grow, so an equal
 * sum means neither moved). Lock held. */
static inline uint64_t sched_score_version(const struct ext_sched *s)
{
    return core_cluster_version(s->c) + s->labels_gen;
}

/* A policy score (0..100) on kube-scheduler's 0..10 scale, rounded, except
 * that only the node the policy would choose (`chosen`: core_choice_at, as
 * core_schedule_one decides) gets the top one: kube-scheduler adds its
 * in-tree scores, which favour emptier nodes, and rounding must not turn
 * the policy's choice into a tie that they settle. best: the chosen node's
 * score. */
static inline int sched_extender_score(int score, int best, int chosen)
{
    int v = (score * 10 + 50) / 100, top = (best * 10 + 50) / 100;
    return !chosen && v >= top ? (top > 0 ? top - 1 : 0) : v;
}

/* ---- what the verbs share (ext/sched_verb.c) ------------------------------ */

/* Takes the text of a string builder as the reply (or an error tree on OOM). */
void sched_reply_text(struct ext_reply *r, struct gs_buf *b);
/* Parses the Pod of a request and picks its policy. Returns 0, or fills
 * *reply with a 200 "Error" answer and returns -1. */
int sched_pod_and_policy(struct ext_sched *s, const json_t *obj, struct core_pod *pod,
                         const struct core_policy **pol, json_t **reply);
/* A NodeNames list's positions in the core's node array (-1: unknown),
 * found again only when nodes came or went (or always, with no_keep).
 * Lock held. */
const int *sched_list_positions(struct ext_sched *s, struct ext_namelist *l);
/* The request's nodes (NULL: not in the cluster). Lock held. */
void sched_resolve(struct ext_sched *s, const struct ext_args *a, struct core_node **nodes);
/* What /filter and /prioritize start from: the ExtenderArgs, the pod, its
 * policy, and whether the answer may be kept (memo, with its key). */
struct sched_verb {
    struct ext_args a;
    struct core_pod pod;
    const struct core_policy *pol;
    char *key;
    size_t klen;
    int memo;
};
/* The start of /filter (scores 0) and /prioritize (scores 1). Returns 0,
 * or the HTTP status of the error reply it wrote in *out (nothing left to
 * clear then). */
int sched_verb_start(struct ext_sched *s, const char *verb, const char *body, size_t len,
                     int scores, struct sched_verb *v, struct ext_reply *out);
/* The kept entry for v's list, verb and key (ext_memo_get, which takes
 * the key). Lock held. */
struct ext_memo_entry *sched_verb_memo(struct ext_sched *s, struct sched_verb *v, int verb);
/* Frees what sched_verb_start filled. */
void sched_verb_end(struct sched_verb *v);

#endif
