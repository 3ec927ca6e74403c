/*
 * ext/sched_verb.c - what the extender verbs share, so that each verb's own
 * file holds only its decision: error replies and reply text, the pod and
 * policy of a request, the start of /filter and /prioritize (ExtenderArgs,
 * pod, whether the answer may be kept), and a request's node list resolved
 * against the cluster.
 */
#include <stdarg.h>
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
#include "kube/client.h"
#include "util/buf.h"

json_t *ext_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return json_pack("{s:s, s:s}", "error", msg, "Error", msg);
}

/* ---- replies ----------------------------------------------------------------- */

/* Takes the text of a string builder as the reply (or a tree on OOM). */
void sched_reply_text(struct ext_reply *r, struct gs_buf *b)
{
    if (b->oom) {
        free(b->buf);
        r->json = ext_error("out of memory");
        return;
    }
    r->text = b->buf;
    r->len = b->len;
}

char *ext_reply_take(struct ext_reply *r, size_t *len)
{
    char *out = r->text;
    if (r->shared) {
        out = malloc(r->shared->len + 1);
        if (out)
            memcpy(out, r->shared->buf, r->shared->len + 1);
        *len = out ? r->shared->len : 0;
        ext_text_put(r->shared);
    } else if (out) {
        *len = r->len;
    } else {
        out = r->json ? json_dumps(r->json, JSON_COMPACT) : NULL;
        if (!out)
            out = strdup("{}");
        *len = out ? strlen(out) : 0;
    }
    json_decref(r->json);
    memset(r, 0, sizeof *r);
    return out;
}

/* ---- the verbs ------------------------------------------------------------- */

/* Parses the Pod of a request and picks its policy. Returns 0, or fills
 * *reply with a 200 "Error" answer and returns -1. */
int sched_pod_and_policy(struct ext_sched *s, const json_t *obj, struct core_pod *pod,
                         const struct core_policy **pol, json_t **reply)
{
    struct gs_err e = GS_ERR_INIT;
    if (core_pod_parse(obj, s->opts.names, pod, &e) < 0) {
        *reply = ext_error("pod %s: %s", kube_meta_str(obj, "name"), e.msg);
        return -1;
    }
    sched_podaff_attach(s, pod, obj);
    *pol = s->policy;
    if (pod->policy[0] && !(*pol = core_policy_find(pod->policy))) {
        *reply = ext_error("pod %s/%s: annotation %spolicy: '%s' is not a known policy", pod->ns,
                           pod->name, s->opts.names->annot_prefix, pod->policy);
        core_pod_clear(pod);
        return -1;
    }
    return 0;
}

/* A NodeNames list's positions in the core's node array (-1: unknown),
 * found again only when nodes came or went since: by walking the longest
 * list resolved since then when l is a part of it (/prioritize's array is
 * /filter's answer), else by a lookup per name. Lock held. */
const int *sched_list_positions(struct ext_sched *s, struct ext_namelist *l)
{
    if (l->gen != s->node_gen || s->opts.no_keep) {
        struct ext_namelist *b = s->base;
        int walked = b && b != l && b->gen == s->node_gen && !s->opts.no_keep &&
                     ext_namelist_walk(l, b) >= 0;
        for (int i = 0; i < l->n; i++)
            if (!walked || l->pos[i] == -2) {
                const struct core_node *n = core_cluster_find(s->c, l->names[i]);
                l->pos[i] = n ? core_node_pos(n) : -1;
            }
        l->gen = s->node_gen;
        if (!b || b->gen != s->node_gen || b->n < l->n) {
            ext_namelist_put(b);
            s->base = ext_namelist_ref(l);
        }
    }
    return l->pos;
}

/* The request's nodes (NULL: not in the cluster): a NodeNames list by its
 * positions, full Nodes by name. Lock held. */
void sched_resolve(struct ext_sched *s, const struct ext_args *a, struct core_node **nodes)
{
    if (!a->list) {
        for (int i = 0; i < a->n; i++)
            nodes[i] = core_cluster_find(s->c, a->names[i]);
        return;
    }
    const int *pos = sched_list_positions(s, a->list);
    for (int i = 0; i < a->n; i++)
        nodes[i] = pos[i] < 0 ? NULL : core_cluster_node(s->c, pos[i]);
}

/* The start of /filter and /prioritize: the ExtenderArgs, the pod and its
 * policy, and whether the answer may be kept (ext/memo.h): for a GPU pod
 * asked about a NodeNames list, with the pod key in v->key (the policy in
 * it for /prioritize: verdicts do not depend on it, scores do; a policy
 * that draws at random is never kept). Returns 0, or the HTTP status of
 * the error reply it wrote (nothing left to clear then). */
int sched_verb_start(struct ext_sched *s, const char *verb, const char *body, size_t len,
                     int scores, struct sched_verb *v, struct ext_reply *out)
{
    struct gs_err e = GS_ERR_INIT;
    memset(out, 0, sizeof *out);
    v->key = NULL;
    v->klen = 0;
    v->memo = 0;
    if (ext_args_parse_cached(s->lists, body, len, &v->a, &e) < 0) {
        out->json = ext_error("%s", e.msg);
        sched_decision(s, verb, "bad_request");
        return 400;
    }
    if (sched_pod_and_policy(s, v->a.pod, &v->pod, &v->pol, &out->json) < 0) {
        ext_args_clear(&v->a);
        sched_decision(s, verb, "error");
        /* a /filter error fails kube-scheduler's attempt; /prioritize errors
         * it ignores anyway */
        return scores ? 400 : 200;
    }
    v->memo = !s->opts.no_keep && v->pod.req.kind != CORE_REQ_NONE && v->a.list &&
              ext_namelist_keepable(v->a.list) && v->a.n <= EXT_MEMO_NODES_MAX &&
              !(scores && (v->pol->flags & CORE_POLICY_RANDOM_NODE)) &&
              ext_memo_key(&v->pod, scores ? v->pol->name : NULL, &v->key, &v->klen) == 0;
    return 0;
}

struct ext_memo_entry *sched_verb_memo(struct ext_sched *s, struct sched_verb *v, int verb)
{
    char *key = v->key;
    v->key = NULL; /* ext_memo_get takes it */
    return ext_memo_get(s->memo, v->a.list, verb, key, v->klen);
}

void sched_verb_end(struct sched_verb *v)
{
    free(v->key);
    v->key = NULL;
    core_pod_clear(&v->pod);
    ext_args_clear(&v->a);
}
