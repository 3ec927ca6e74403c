/*
 * ext/memo.h - answers to repeated /filter and /prioritize questions.
 *
 * kube-scheduler asks the same question pod after pod: the same NodeNames
 * list (ext/namelist.h) and, for the pods of one workload, the same
 * request. Between two such pods at most the node the last one was bound
 * to has changed. An entry keeps, for one (list, verb, pod key), what the
 * scheduler answered: for /filter each node's verdict, reason and state
 * stamp (core_node_stamp), for both verbs the reply text, and the cluster
 * version (core_cluster_version) the answer is valid at. The scheduler
 * answers from an entry whose version is current, and for /filter decides
 * again only the nodes whose stamp moved. Per-request checks (quotas,
 * top-k) are never kept.
 *
 * The pod key (ext_memo_key) holds everything the core's filters and
 * scores read from a pod: the whole GPU request, CPU and memory, node
 * selector, required and preferred affinity, tolerations, pod (anti-)
 * affinity and spread terms and the policy. Name, UID and priority are not
 * in it: they change no verdict and no score; the namespace only for a pod
 * with pod terms (they pick pods of its own namespace). The other pods
 * those terms pick change with the cluster version.
 *
 * Ownership: the memo owns its entries; an entry holds a reference to its
 * list and to its reply text. Entries are not locked here: the scheduler
 * reads and writes them under its own lock. Reply texts are immutable and
 * reference-counted, so a reply can be copied out after the lock is let go.
 */
#ifndef GPUSCHED_EXT_MEMO_H
#define GPUSCHED_EXT_MEMO_H

#include <stddef.h>
#include <stdint.h>

#include "core/request.h"
#include "ext/namelist.h"

/* An immutable reply text shared by reference. */
struct ext_text {
    int refs;
    size_t len;
    char *buf; /* len bytes and a NUL, malloc'd */
};
/* Wraps a malloc'd NUL-terminated text of len bytes (taken over: freed
 * here when out of memory, and NULL returned). */
struct ext_text *ext_text_wrap(char *buf, size_t len);
struct ext_text *ext_text_ref(struct ext_text *t);
void ext_text_put(struct ext_text *t);

enum ext_memo_verb { EXT_MEMO_FILTER, EXT_MEMO_PRIORITIZE };

/* A /filter verdict per node of the list. */
enum ext_memo_fit { EXT_FIT_UNSET, EXT_FIT_YES, EXT_FIT_NOW, EXT_FIT_NEVER, EXT_FIT_UNKNOWN };

struct ext_memo_entry {
    struct ext_namelist *list;    /* the question's node names (a reference) */
    int verb, n;
    uint64_t version;             /* core_cluster_version of the answer; 0: none */
    unsigned long epoch;          /* renewed when the entry is reused for another question */
    /* /filter, per list index: YES, NOW (rejected now: FailedNodes), NEVER
     * (FailedAndUnresolvableNodes), UNKNOWN (not in the cluster) or UNSET
     * (not decided yet); the stamp it was decided at (0: unknown node);
     * the reason for NOW and NEVER as a JSON string, quoted and escaped, so
     * that a reply is rebuilt by copying (malloc'd) */
    unsigned char *fit;
    uint64_t *stamp;
    char **reason;
    int nfit;                     /* verdicts YES */
    size_t last_len;              /* length of the last reply written for it (a size hint) */
    struct ext_text *reply;       /* the whole reply at `version`, or NULL */
    /* private */
    char *key;
    size_t key_len;
    uint64_t key_hash, used;
};

/* Pod keys longer than this, lists of more nodes and lists the NodeNames
 * cache does not keep (ext_namelist_keepable) are not kept: such requests
 * are answered afresh every time. This bounds an entry's memory to ~0.3 MB
 * plus reasons and reply. */
#define EXT_MEMO_KEY_MAX 16384
#define EXT_MEMO_NODES_MAX 16384

struct ext_memo;
struct ext_memo *ext_memo_new(int slots);
void ext_memo_free(struct ext_memo *m);

/* Writes the pod key of `pod` asked with policy `policy` into a malloc'd
 * buffer (*key, *len). -1 when out of memory or longer than
 * EXT_MEMO_KEY_MAX (nothing to free then). */
int ext_memo_key(const struct core_pod *pod, const char *policy, char **key, size_t *len);

/* The entry for (list, verb, key): the one kept, or the least recently used
 * one emptied (version 0, a new epoch) and keyed to this question, with
 * its per-node arrays for /filter. Takes ownership of key in both cases.
 * NULL when out of memory. */
struct ext_memo_entry *ext_memo_get(struct ext_memo *m, struct ext_namelist *list, int verb,
                                    char *key, size_t key_len);

/* An entry of one's own, kept nowhere (for a /filter that is not
 * memoised): per-node arrays for n nodes, version 0. -1 out of memory.
 * Released by ext_memo_entry_clear(). */
int ext_memo_entry_init(struct ext_memo_entry *en, int n);
void ext_memo_entry_clear(struct ext_memo_entry *en);

/* Replaces an entry's reply text (takes the caller's reference). */
void ext_memo_set_reply(struct ext_memo_entry *en, struct ext_text *t);

/* ---- verdict columns ----
 * /prioritize's NodeNames array is /filter's answer, so it changes each
 * time a bind fills a node for that pod shape, and an entry kept per array
 * starts with nothing. A column keeps the core filters' verdicts of one
 * pod key (core_score_fit's CORE_FIT_YES / CORE_FIT_NO) by node position
 * (core_node_pos), each with the node's state stamp when it was decided:
 * stamps are never given twice, so an equal stamp means the same node in
 * the same state, whichever array asks and wherever the node sits in it.
 * The memo keeps EXT_MEMO_COLS columns, the least recently used re-keyed. */
#define EXT_MEMO_COLS 16

struct ext_memo_col {
    int cap;                 /* positions in fit and stamp */
    unsigned char *fit;      /* 0: not decided */
    uint64_t *stamp;
    unsigned long epoch;     /* renewed when the column is re-keyed or emptied */
    /* private */
    char *key;
    size_t key_len;
    uint64_t key_hash, used;
};

/* The column of the pod key key[0..key_len) (copied when a column is
 * re-keyed), with room for `nodes` positions (grown positions undecided).
 * NULL when out of memory. */
struct ext_memo_col *ext_memo_col_get(struct ext_memo *m, const char *key, size_t key_len,
                                      int nodes);

#endif
