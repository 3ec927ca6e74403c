/*
 * ext/sched_preempt.c - the extender's /preempt verb (kube-scheduler's
 * PostFilter preemption): per node offered, kube-scheduler's victims plus the
 * GPU pods that must also go for the pod to fit beside the pods nominated
 * there that it must leave room for, or the node dropped.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "ext/memo.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "ext/sched_int.h"
#include "util/log.h"

int ext_sched_preempt(struct ext_sched *s, const char *body, size_t len, struct ext_reply *rep)
{
    json_t **reply = &rep->json;
    memset(rep, 0, sizeof *rep);
    struct gs_err e = GS_ERR_INIT;
    struct ext_preempt pa;
    struct core_pod pod;
    const struct core_policy *pol;

    if (ext_preempt_parse(body, len, &pa, &e) < 0) {
        *reply = ext_error("%s", e.msg);
        sched_decision(s, "preempt", "bad_request");
        return 400;
    }
    if (sched_pod_and_policy(s, pa.pod, &pod, &pol, reply) < 0) {
        /* ExtenderPreemptionResult has no Error: a 200 would read as "no
         * candidate" in silence, a 500 fails the preemption with a log line */
        const char *why = json_string_value(json_object_get(*reply, "error"));
        log_warn("extender", "preempt refused: %s", why ? why : "bad pod");
        ext_preempt_clear(&pa);
        sched_decision(s, "preempt", "error");
        return 500;
    }
    json_t *out = json_object();
    pthread_mutex_lock(&s->mu);
    int held = sched_nominated_prepare(s, &pod);
    for (int i = 0; i < pa.n; i++) {
        struct ext_victims *v = &pa.nodes[i];
        struct core_node *n = core_cluster_find(s->c, v->node);
        struct core_alloc *saved = calloc((size_t)v->n + 1, sizeof *saved);
        int nsaved = 0, ok = 1;
        json_t *pods = json_array();
        if (!n || !saved) {
            free(saved);
            json_decref(pods);
            continue;
        }
        /* take kube-scheduler's victims off first, as it will */
        for (int k = 0; k < v->n; k++) {
            const struct core_alloc *al = core_alloc_find(s->c, v->uids[k]);
            if (al && strcmp(al->node, v->node) == 0) {
                saved[nsaved++] = *al;
                core_unreserve(s->c, v->uids[k], NULL);
            }
            json_array_append_new(pods, json_pack("{s:s}", "UID", v->uids[k]));
        }
        /* and its victims without GPUs (ext/sched_usage.c) */
        sched_usage_without(s, v->node, v->uids, v->n);
        /* the pods nominated there that it must leave room for hold their
         * GPUs (sched_nominated.c): a node one of them does not fit yet is
         * theirs, and dropped */
        if (held && sched_nominated_hold(s, n, NULL) < 0)
            ok = 0;
        struct core_alloc *more = NULL;
        int nmore = 0;
        if (ok && pod.req.kind != CORE_REQ_NONE && !core_filter(s->c, n, &pod, NULL)) {
            const char *victims[64];
            int nv = 0;
            if (core_preempt(s->c, n, &pod, victims, 64, &nv, &e) == 0 &&
                (more = calloc((size_t)nv + 1, sizeof *more))) {
                for (int k = 0; k < nv; k++) {
                    json_array_append_new(pods, json_pack("{s:s}", "UID", victims[k]));
                    more[nmore++] = *core_alloc_find(s->c, victims[k]);
                }
            } else {
                ok = 0;
            }
        }
        /* kubelet's device count with every victim gone: the core's victims
         * free GPU capacity, which is not always a device (victims are not
         * chosen for devices; such a node is dropped) */
        for (int k = 0; k < nmore; k++)
            core_unreserve(s->c, more[k].pod_uid, NULL);
        if (ok && !sched_devices_fit(s, n, &pod, NULL))
            ok = 0;
        sched_nominated_undo(s);
        for (int k = 0; k < nmore; k++)
            core_reserve_back(s->c, &more[k], NULL);
        free(more);
        for (int k = 0; k < nsaved; k++)
            core_reserve_back(s->c, &saved[k], NULL);
        free(saved);
        sched_usage_push(s, v->node);
        if (ok && json_array_size(pods) > 0)
            json_object_set_new(out, v->node, json_pack("{s:o, s:I}", "Pods", pods,
                                                        "NumPDBViolations",
                                                        (json_int_t)v->pdb_violations));
        else
            json_decref(pods);
    }
    pthread_mutex_unlock(&s->mu);
    sched_decision(s, "preempt", json_object_size(out) ? "victims" : "none");
    core_pod_clear(&pod);
    ext_preempt_clear(&pa);
    *reply = json_pack("{s:o}", "NodeNameToMetaVictims", out);
    return 200;
}
