/*
 * ext/sched_filter.c - the extender's /filter verb (kube-scheduler's Filter
 * extension point): which of the request's nodes fit the pod, and why the
 * others do not. A GPU pod asked about a NodeNames list is answered from a
 * kept entry (ext/memo.h) whose verdicts are brought up to date node by node.
 */
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "ext/memo.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "ext/sched_int.h"
#include "ext/namelist.h"
#include "util/buf.h"
#include "util/log.h"

/* Appends ,"node":"reason" to a FailedNodes map being built. */
static void add_reason(struct gs_buf *b, const char *node, const char *reason)
{
    gs_buf_put(b, ",\"", 2);
    gs_buf_str(b, node);
    gs_buf_put(b, "\":", 2);
    gs_buf_json_str(b, reason);
}

/* add_reason for the node of list index i and a reason already written as
 * a JSON string (a kept entry's). */
static void add_kept_reason(struct gs_buf *b, const struct ext_args *a, int i, const char *json)
{
    gs_buf_put(b, ",\"", 2);
    gs_buf_put(b, a->names[i], a->list ? a->list->len[i] : strlen(a->names[i]));
    gs_buf_put(b, "\":", 2);
    gs_buf_str(b, json);
}

struct scored {
    int idx, soft, score;
    uint64_t tie;
};

/* The policy's order: the pod's soft preferences first (core_soft_at),
 * then best score, ties to the smallest key (core_tie_keys_at), as
 * core_schedule_one decides. */
static int by_score(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    if (x->soft != y->soft)
        return y->soft - x->soft;
    if (x->score != y->score)
        return y->score - x->score;
    return (x->tie > y->tie) - (x->tie < y->tie);
}

/* The /filter reply: the fitting nodes (as full objects when the request
 * carried them), then the reasons gathered for the others. */
static void filter_reply(struct gs_buf *r, const struct ext_args *a, const unsigned char *fit,
                         const struct gs_buf *failed, const struct gs_buf *unres)
{
    if (a->from_nodes) {
        json_t *items = json_array();
        for (int i = 0; i < a->n; i++)
            if (fit[i])
                json_array_append(items, (json_t *)a->nodes[i]);
        json_t *list = json_pack("{s:s, s:s, s:o}", "apiVersion", "v1", "kind", "NodeList",
                                 "items", items);
        char *js = json_dumps(list, JSON_COMPACT | JSON_EMBED);
        json_decref(list);
        gs_buf_str(r, "{\"Nodes\":{");
        gs_buf_str(r, js ? js : "");
        gs_buf_str(r, "},\"NodeNames\":null");
        free(js);
    } else {
        /* runs of fitting nodes are copied from the list's own reply text */
        const char *q = a->list->quoted;
        const size_t *qo = a->list->qoff;
        gs_buf_reserve(r, failed->len + unres->len + qo[a->n] + 128); /* allocated once */
        gs_buf_str(r, "{\"Nodes\":null,\"NodeNames\":[");
        for (int i = 0, j, first = 1; i < a->n; i = j) {
            for (j = i; j < a->n && fit[j]; j++)
                ;
            if (j > i) {
                if (!first)
                    gs_buf_put(r, ",", 1);
                gs_buf_put(r, q + qo[i], qo[j] - qo[i] - 1);
                first = 0;
            } else {
                j++;
            }
        }
        gs_buf_put(r, "]", 1);
    }
    gs_buf_str(r, ",\"FailedNodes\":{");
    if (failed->buf)
        gs_buf_put(r, failed->buf + 1, failed->len - 1); /* drop the leading comma */
    gs_buf_str(r, "},\"FailedAndUnresolvableNodes\":{");
    if (unres->buf)
        gs_buf_put(r, unres->buf + 1, unres->len - 1);
    gs_buf_str(r, "},\"Error\":\"\"}");
    r->oom |= failed->oom | unres->oom;
}

static const char unknown_node[] = "node is unknown to gpusched (no Node object seen)";
/* unknown_node as a JSON string (it has nothing to escape) */
static const char unknown_json[] = "\"node is unknown to gpusched (no Node object seen)\"";

/* Appends n bytes; the buffer's room is mostly reserved beforehand. */
static inline void put(struct gs_buf *b, const char *p, size_t n)
{
    if (b->len + n < b->cap) {
        memcpy(b->buf + b->len, p, n);
        b->len += n;
    } else {
        gs_buf_put(b, p, n);
    }
}

/* ,"node":REASON (REASON a JSON string), without the comma for the first. */
static inline void put_reason(struct gs_buf *b, const struct ext_namelist *l, int i,
                              const char *json, int *first)
{
    if (!*first)
        put(b, ",", 1);
    *first = 0;
    put(b, "\"", 1);
    put(b, l->names[i], l->len[i]);
    put(b, "\":", 2);
    put(b, json, strlen(json));
}

/* The reply of a kept entry when no per-request check applies (no quota,
 * no top-k): the bytes filter_reply writes from the same verdicts, in one
 * pass into one buffer sized from the entry's last reply (a 0.5 MB reply
 * when most nodes are rejected, rebuilt whenever a bind changes a verdict
 * or a reason). Lock held. */
static void kept_reply(struct gs_buf *r, const struct ext_args *a, struct ext_memo_entry *en)
{
    const struct ext_namelist *l = a->list;
    const char *q = l->quoted;
    const size_t *qo = l->qoff;
    const unsigned char *fit = en->fit;
    int first = 1;
    gs_buf_reserve(r, (en->last_len > qo[a->n] ? en->last_len : qo[a->n]) + 4096);
    put(r, "{\"Nodes\":null,\"NodeNames\":[", sizeof "{\"Nodes\":null,\"NodeNames\":[" - 1);
    for (int i = 0, j; i < a->n; i = j) {
        for (j = i; j < a->n && fit[j] == EXT_FIT_YES; j++)
            ;
        if (j > i) {
            if (!first)
                put(r, ",", 1);
            put(r, q + qo[i], qo[j] - qo[i] - 1);
            first = 0;
        } else {
            j++;
        }
    }
    put(r, "],\"FailedNodes\":{", sizeof "],\"FailedNodes\":{" - 1);
    first = 1;
    for (int i = 0; i < a->n; i++)
        if (fit[i] != EXT_FIT_YES)
            put_reason(r, l, i, fit[i] == EXT_FIT_UNKNOWN ? unknown_json : en->reason[i], &first);
    put(r, "},\"FailedAndUnresolvableNodes\":{", sizeof "},\"FailedAndUnresolvableNodes\":{" - 1);
    first = 1;
    for (int i = 0; i < a->n; i++)
        if (fit[i] == EXT_FIT_NEVER)
            put_reason(r, l, i, en->reason[i], &first);
    gs_buf_put(r, "},\"Error\":\"\"}", sizeof "},\"Error\":\"\"}" - 1); /* and the NUL */
    en->last_len = r->len;
}

/* Brings an entry's verdicts up to the cluster's state: only the nodes
 * whose state stamp moved since the entry saw them (every node of a new
 * entry) are decided again. pos: the nodes' positions (-1: unknown).
 * Returns 1 when a verdict or a reason changed (the kept reply is
 * dropped), 0 when none did, -1 when out of memory. Lock held. */
static int memo_decide(struct ext_sched *s, struct ext_memo_entry *en, const struct core_pod *pod,
                       const int *pos)
{
    uint64_t ver = core_cluster_version(s->c);
    const uint64_t *stamps = core_cluster_stamps(s->c);
    int k = 0, changed = 0, oom = 0;
    if (en->version == ver)
        return 0;
    int *idx = malloc(((size_t)en->n + 1) * sizeof *idx);
    struct core_node **sub = malloc(((size_t)en->n + 1) * sizeof *sub);
    unsigned char *subfit = malloc((size_t)en->n + 1);
    if (!idx || !sub || !subfit) {
        free(idx);
        free(sub);
        free(subfit);
        return -1;
    }
    for (int i = 0; i < en->n; i++) {
        uint64_t st = pos[i] < 0 ? 0 : stamps[pos[i]];
        if (en->fit[i] != EXT_FIT_UNSET && st == en->stamp[i])
            continue;
        en->stamp[i] = st;
        idx[k] = i;
        sub[k++] = pos[i] < 0 ? NULL : core_cluster_node(s->c, pos[i]);
    }
    core_filter_nodes(s->c, pod, sub, k, subfit, NULL);
    struct gs_buf js = {0}; /* one buffer for every reason written as JSON */
    for (int j = 0; j < k; j++) {
        int i = idx[j], v = EXT_FIT_YES;
        struct core_status st;
        const char *why = NULL;
        if (!sub[j]) {
            v = EXT_FIT_UNKNOWN;
        } else if (!subfit[j] || !sched_devices_fit(s, sub[j], pod, &st)) {
            if (!subfit[j])
                core_filter(s->c, sub[j], pod, &st);
            v = st.code == CORE_UNRESOLVABLE ? EXT_FIT_NEVER : EXT_FIT_NOW;
            why = st.reason;
        }
        js.len = 0; /* the reason as the reply writes it */
        if (why)
            gs_buf_json_str(&js, why);
        if (v == en->fit[i] && (!why || (!js.oom && js.buf && strcmp(js.buf, en->reason[i]) == 0)))
            continue;
        changed = 1;
        en->nfit += (v == EXT_FIT_YES) - (en->fit[i] == EXT_FIT_YES);
        free(en->reason[i]);
        en->reason[i] = NULL;
        en->fit[i] = (unsigned char)v;
        if (why && !js.oom && js.buf)
            en->reason[i] = strdup(js.buf); /* its own size: thousands are kept */
        if (why && !en->reason[i]) {
            en->nfit -= en->fit[i] == EXT_FIT_YES;
            en->fit[i] = EXT_FIT_UNSET; /* decided again next time */
            oom = 1;
        }
    }
    gs_buf_free(&js);
    free(idx);
    free(sub);
    free(subfit);
    metric_add(s->m_redecided, NULL, k);
    if (changed || oom)
        ext_memo_set_reply(en, NULL);
    en->version = oom ? 0 : ver;
    return oom ? -1 : changed;
}

/* One that failed is forgotten: its victims keep their GPUs, and the node
 * must not stay kept for the pod. */
static void preempt_ended(struct ext_sched *s, struct ext_preemption *pr, int rc)
{
    pthread_mutex_lock(&s->mu);
    struct pod *p = sched_smap_get(&s->pods, pr->uid);
    if (sched_preempting_is(p, pr->gen)) { /* not one decided since */
        if (rc < 0) {
            sched_preempt_drop(s, p);
            sched_track_nomination(s, p);
        } else {
            sched_preempt_unwait(p, pr); /* the victims it could not delete */
        }
    }
    pthread_mutex_unlock(&s->mu);
    sched_decision(s, "preempt", rc < 0 ? "from_filter_error" : "from_filter");
    free(pr);
}

void ext_sched_carry_out(struct ext_sched *s, struct ext_preemption *pr)
{
    struct gs_err e = GS_ERR_INIT;
    /* still wanted, its turn come (commit.later): the pod not bound,
     * deleted or given up meanwhile, and this replica still leading */
    pthread_mutex_lock(&s->mu);
    int wanted = sched_preempting_is(sched_smap_get(&s->pods, pr->uid), pr->gen) &&
                 (!s->commit.may_bind || s->commit.may_bind(s->commit.ud));
    pthread_mutex_unlock(&s->mu);
    if (!wanted) {
        log_info("extender", "preempting for %s on %s: over before its turn, nothing deleted",
                 pr->pod, pr->node);
        preempt_ended(s, pr, -1);
        return;
    }
    int rc = s->commit.preempt(s->commit.ud, pr, &e) != 0 ? -1 : 0;
    if (rc < 0)
        log_warn("extender", "preempting for %s on %s: %s", pr->pod, pr->node, e.msg);
    preempt_ended(s, pr, rc);
}

/* wait: -1 never waits; 0 answers EXT_FILTER_WAIT when it would; 1 waits
 * (ext_sched_filter_after_bind). */
static int filter_run(struct ext_sched *s, const char *body, size_t len, int wait,
                      struct ext_reply *out)
{
    json_t **reply = &out->json;
    struct gs_err e = GS_ERR_INIT;
    struct sched_verb v;
    int rc = sched_verb_start(s, "filter", body, len, 0, &v, out);
    if (rc)
        return rc;
    struct ext_args *a = &v.a;
    struct core_pod *pod = &v.pod;
    const int memo = v.memo;
    int gpu = pod->req.kind != CORE_REQ_NONE;
    /* a GPU pod asked about a NodeNames list is answered from a kept entry,
     * any other from an entry of its own */
    struct gs_buf failed = {0}, unres = {0};
    /* per node: fits, and the node; a kept reply needs neither */
    unsigned char *fit = NULL;
    struct core_node **nodes = NULL;
    struct ext_memo_entry own = {0}, *en = NULL;
    int *own_pos = NULL;
    struct ext_text *kept = NULL;
    struct gs_buf whole = {0}; /* the reply, when written under the lock (kept_reply) */
    int nfit = 0, modified = 0, ok = 1, written = 0;
    unsigned long epoch = 0;
    uint64_t ver = 0;
    const int *pos = NULL; /* the nodes' positions (-1: unknown) */
    struct ext_preemption *pr = NULL;

    pthread_mutex_lock(&s->mu);
    if (gpu && wait >= 0 && sched_await_bind(s, pod->uid, wait)) {
        pthread_mutex_unlock(&s->mu); /* asked again where it may wait */
        sched_verb_end(&v);
        return EXT_FILTER_WAIT;
    }
    if (!memo && (!(fit = calloc((size_t)a->n + 1, 1)) ||
                  !(nodes = calloc((size_t)a->n + 1, sizeof *nodes)) ||
                  (gpu && (!(own_pos = malloc(((size_t)a->n + 1) * sizeof *own_pos)) ||
                           ext_memo_entry_init(&own, a->n) < 0)))) {
        pthread_mutex_unlock(&s->mu);
        ok = 0;
        goto done;
    }
    struct pod *p = gpu ? sched_remember(s, a->pod, 0) : NULL;
    if (!gpu) /* no GPU asked (nvidia.com/gpu: "0"): its /bind comes here too */
        sched_remember(s, a->pod, 0);
    sched_drop_orphan(s, p, "filter"); /* its GPUs are the pod's to take again */
    /* per-request checks, never kept: quotas and the GPUs of pods nominated
     * to a node by a preemption (sched_nominated.c) */
    int quota = sched_quota_prepare(s, pod);
    int held = gpu ? sched_nominated_prepare(s, pod) : 0;
    if (!gpu) {
        memset(fit, 1, (size_t)a->n);
    } else if (!(en = memo ? sched_verb_memo(s, &v, EXT_MEMO_FILTER) : &own)) {
        ok = 0;
    } else {
        if (!memo) {
            sched_resolve(s, a, nodes);
            /* learnt first, found after: a name listed twice is learnt
             * twice, and the second node replaces (frees) the first */
            for (int i = 0; i < a->n && a->from_nodes; i++)
                if (!nodes[i])
                    sched_upsert_locked(s, a->nodes[i], &e);
            for (int i = 0; i < a->n && a->from_nodes; i++)
                if (!nodes[i])
                    nodes[i] = core_cluster_find(s->c, a->names[i]);
            for (int i = 0; i < a->n; i++)
                own_pos[i] = nodes[i] ? core_node_pos(nodes[i]) : -1;
            pos = own_pos;
        } else {
            pos = sched_list_positions(s, a->list);
        }
        ok = memo_decide(s, en, pod, pos) >= 0;
        epoch = en->epoch;
        ver = en->version;
    }
    if (ok && en && memo && en->reply && !quota && !held && s->opts.top_k <= 0) {
        kept = ext_text_ref(en->reply); /* nothing changed what it says */
        nfit = en->nfit;
    } else if (ok && en && memo && !quota && !held && s->opts.top_k <= 0) {
        kept_reply(&whole, a, en); /* from the verdicts alone */
        nfit = en->nfit;
        written = 1;
    } else if (ok && en && memo && (!(fit = calloc((size_t)a->n + 1, 1)) ||
                                    !(nodes = calloc((size_t)a->n + 1, sizeof *nodes)))) {
        ok = 0;
    } else if (ok && en) {
        if (memo && (quota || s->opts.top_k > 0))
            sched_resolve(s, a, nodes);
        /* the verdicts, and the checks that are per request */
        struct core_status st;
        for (int i = 0; i < a->n; i++) {
            switch (en->fit[i]) {
            case EXT_FIT_YES:
                fit[i] = 1;
                if (quota && sched_quota_blocks(s, pod, nodes[i], &e)) {
                    fit[i] = 0;
                    modified = 1;
                    add_reason(&failed, a->names[i], e.msg);
                } else if (held && pos[i] >= 0 &&
                           !sched_nominated_fit(s, pod, core_cluster_node(s->c, pos[i]), &st)) {
                    fit[i] = 0;
                    modified = 1;
                    add_reason(&failed, a->names[i], st.reason);
                }
                break;
            case EXT_FIT_UNKNOWN: add_reason(&failed, a->names[i], unknown_node); break;
            case EXT_FIT_NEVER:
                /* in both maps: kube-scheduler < 1.21 reads only
                 * FailedNodes; newer ones let the unresolvable entry win */
                add_kept_reason(&unres, a, i, en->reason[i]);
                add_kept_reason(&failed, a, i, en->reason[i]);
                break;
            default: add_kept_reason(&failed, a, i, en->reason[i]); break;
            }
        }
    }
    for (int i = 0; ok && !kept && !written && i < a->n; i++)
        nfit += fit[i];
    /* top-k: keep the policy's best k feasible nodes */
    if (ok && !kept && !written && s->opts.top_k > 0 && nfit > s->opts.top_k && gpu) {
        struct core_node **fn = calloc((size_t)nfit, sizeof *fn);
        int *sc = calloc((size_t)nfit, sizeof *sc), *at = calloc((size_t)nfit, sizeof *at);
        uint64_t *tie = calloc((size_t)nfit, sizeof *tie);
        struct scored *order = calloc((size_t)nfit, sizeof *order);
        int *soft = calloc((size_t)nfit, sizeof *soft), has_soft = 0;
        int k = 0;
        for (int i = 0; fn && at && order && i < a->n; i++)
            if (fit[i]) {
                order[k].idx = i;
                at[k] = core_node_pos(nodes[i]);
                fn[k++] = nodes[i];
            }
        if (fn && sc && at && tie && order && soft &&
            core_score(s->c, v.pol, pod, fn, nfit, sc, &e) == 0 &&
            core_tie_keys_at(s->c, pod, at, nfit, tie, &e) == 0 &&
            (has_soft = core_soft_at(s->c, pod, at, nfit, soft, &e)) >= 0) {
            for (k = 0; k < nfit; k++) {
                order[k].soft = has_soft ? soft[k] : 0;
                order[k].score = sc[k];
                order[k].tie = tie[k];
            }
            qsort(order, (size_t)nfit, sizeof *order, by_score);
            for (k = s->opts.top_k; k < nfit; k++) {
                char why[160];
                snprintf(why, sizeof why, "fits, but policy %s ranks it below its best %d nodes "
                         "(score %d)", v.pol->name, s->opts.top_k, order[k].score);
                fit[order[k].idx] = 0;
                add_reason(&failed, a->names[order[k].idx], why);
            }
            nfit = s->opts.top_k;
            modified = 1;
        }
        free(fn);
        free(sc);
        free(at);
        free(tie);
        free(order);
        free(soft);
    }
    if (ok && !kept && !modified && memo && en->reply)
        kept = ext_text_ref(en->reply); /* per-request checks changed nothing */
    if (p && ok) {
        /* refused now: nudged by the next free, not by one it has seen */
        if (!p->unschedulable && nfit == 0)
            p->nudge_round = s->nudge_round;
        p->unschedulable = nfit == 0;
    }
    if (gpu && ok && nfit > 0)
        sched_expect_bind(s, pod->uid);
    /* no node fits: preempt for it (sched_preempt.c), the API calls made
     * once the lock is let go, on the cluster's thread (commit.later) */
    if (p && ok && en && pos && nfit == 0 && s->opts.filter_preemption &&
        (pr = malloc(sizeof *pr)) &&
        !sched_filter_preempt(s, p, pod, a->pod, pos, en->fit, a->n, pr)) {
        free(pr);
        pr = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (pr && !s->commit.later) {
        ext_sched_carry_out(s, pr);
    } else if (pr && s->commit.later(s->commit.ud, pr) != 0) {
        log_warn("extender", "preempting for %s on %s: not carried out (stopping, or out of "
                 "memory)", pr->pod, pr->node);
        preempt_ended(s, pr, -1); /* forgotten: not on this worker (commit.later) */
    }
done:
    ext_memo_entry_clear(&own);
    free(own_pos);
    if (!ok) {
        *reply = ext_error("out of memory");
        sched_decision(s, "filter", "error");
        free(whole.buf);
        free(failed.buf);
        free(unres.buf);
        free(fit);
        free(nodes);
        sched_verb_end(&v);
        return 500;
    }
    if (kept) {
        metric_inc(s->m_kept, (const char *[]){"filter"});
        out->shared = kept;
    } else {
        struct gs_buf r = whole;
        if (!written)
            filter_reply(&r, a, fit, &failed, &unres);
        if (memo && !modified && !r.oom) {
            /* kept for the next request that asks the same */
            if ((out->shared = ext_text_wrap(r.buf, r.len))) {
                pthread_mutex_lock(&s->mu);
                if (en->epoch == epoch && en->version == ver && !en->reply)
                    ext_memo_set_reply(en, ext_text_ref(out->shared));
                pthread_mutex_unlock(&s->mu);
            } else {
                *reply = ext_error("out of memory");
            }
        } else {
            sched_reply_text(out, &r);
        }
    }
    free(failed.buf);
    free(unres.buf);
    sched_decision(s, "filter", !gpu ? "no_gpu" : nfit ? "fit" : "no_fit");
    free(fit);
    free(nodes);
    sched_verb_end(&v);
    return 200;
}

int ext_sched_filter(struct ext_sched *s, const char *body, size_t len, struct ext_reply *out)
{
    return filter_run(s, body, len, -1, out);
}

int ext_sched_filter_after_bind(struct ext_sched *s, const char *body, size_t len, int may_wait,
                                struct ext_reply *out)
{
    return filter_run(s, body, len, may_wait ? 1 : 0, out);
}
