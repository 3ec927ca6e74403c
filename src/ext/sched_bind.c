/*
 * ext/sched_bind.c - the extender's /bind verb (kube-scheduler's Bind
 * extension point): picks the pod's GPUs on the chosen node, reserves them
 * and logs the reservation (ext_commit.log_bind) under the lock, and waits
 * for it to be durable outside the lock; a failed commit gives the GPUs
 * back.
 */
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
#include "core/quota.h"
#include "ext/annot.h"
#include "ext/nodelock.h"
#include "util/log.h"

static int status_for(int rc)
{
    switch (-rc) {
    case GS_ENOENT: return 404;
    case GS_ECONFLICT:
    case GS_ENOFIT: return 409;
    case GS_EUNAVAIL: return 503;
    case GS_EINVAL: return 400;
    default: return 500;
    }
}

/* A pod that asks for no GPU (nvidia.com/gpu: "0" from a chart's template
 * still makes kube-scheduler send it here): bound as kube-scheduler would
 * bind it, nothing reserved. */
static int bind_plain(struct ext_sched *s, struct ext_bind *b, const char *ns, const char *name,
                      const char *uid, json_t **reply)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_alloc a;
    memset(&a, 0, sizeof a);
    snprintf(a.node, sizeof a.node, "%s", b->node);
    snprintf(a.pod_uid, sizeof a.pod_uid, "%s", uid);
    snprintf(a.pod_name, sizeof a.pod_name, "%s/%s", ns, name);
    json_t *none = json_object();
    int rc = !none            ? gs_errf(&e, GS_ENOMEM, "out of memory")
             : s->commit.bind ? s->commit.bind(s->commit.ud, ns, name, uid, &a, none, &e)
                              : 0;
    json_decref(none);
    if (rc == EXT_COMMIT_UNKNOWN)
        rc = -GS_EUNAVAIL;
    if (rc < 0) {
        *reply = ext_error("binding pod %s/%s to %s: %s", ns, name, b->node, e.msg);
        sched_decision(s, "bind", "commit_failed");
    } else {
        log_info("extender", "bound %s/%s to %s (no GPU)", ns, name, b->node);
        *reply = json_pack("{s:s}", "Error", "");
        sched_decision(s, "bind", "bound");
    }
    ext_bind_clear(b);
    return rc < 0 ? (status_for(rc) == 400 ? 500 : status_for(rc)) : 200;
}

int ext_sched_bind(struct ext_sched *s, const char *body, size_t len, struct ext_reply *out)
{
    json_t **reply = &out->json;
    memset(out, 0, sizeof *out);
    struct gs_err e = GS_ERR_INIT;
    struct ext_bind b;
    struct core_pod pod;
    const struct core_policy *pol;
    struct core_alloc alloc;
    struct pod *p;
    json_t *ann = NULL, *err = NULL;
    void *ticket = NULL;
    unsigned long gen = 0;
    int rc, unlogged = 0;

    if (ext_bind_parse(body, len, &b, &e) < 0) {
        *reply = ext_error("%s", e.msg);
        sched_decision(s, "bind", "bad_request");
        return 400;
    }
    if (s->commit.may_bind && !s->commit.may_bind(s->commit.ud)) {
        pthread_mutex_lock(&s->mu);
        sched_bind_arrived(s, b.pod_uid);
        pthread_mutex_unlock(&s->mu);
        *reply = ext_error("this replica is not the leader, or has not listed the cluster's "
                           "nodes and pods yet; retry");
        ext_bind_clear(&b);
        sched_decision(s, "bind", "not_leader");
        return 503;
    }
    pthread_mutex_lock(&s->mu);
    /* a /filter waiting for this bind goes on once the lock is released:
     * after the reservation below */
    sched_bind_arrived(s, b.pod_uid);
    /* by UID; a pod /filter saw without one is kept as NS/NAME. Never
     * another pod of the name: a StatefulSet's pod made again under it is a
     * new pod, which /filter has not seen here (an older one of the name
     * that holds GPUs on the node answered "bound" with no Binding made) */
    char key[2 * CORE_NAME_MAX + 2];
    snprintf(key, sizeof key, "%s/%s", b.pod_namespace, b.pod_name);
    if (!(p = sched_smap_get(&s->pods, b.pod_uid)) && !(p = sched_smap_get(&s->pods, key))) {
        pthread_mutex_unlock(&s->mu);
        *reply = ext_error("pod %s/%s (uid %s) is unknown: the extender has not seen it in "
                           "/filter or /prioritize", b.pod_namespace, b.pod_name, b.pod_uid);
        ext_bind_clear(&b);
        sched_decision(s, "bind", "unknown_pod");
        return 404;
    }
    const struct core_node *node = core_cluster_find(s->c, b.node);
    if (node) /* kube-scheduler asks again: this bind replaces it */
        sched_drop_orphan(s, p, "bind");
    const struct core_alloc *held = core_alloc_find(s->c, p->uid);
    if (!node) {
        pthread_mutex_unlock(&s->mu);
        *reply = ext_error("node %s is unknown to the extender", b.node);
        ext_bind_clear(&b);
        sched_decision(s, "bind", "unknown_node");
        return 404;
    }
    if (held) {
        /* the same bind again (kube-scheduler timed out and retried) is
         * answered once the first one's Binding exists, not before: it may
         * still fail */
        int same = strcmp(held->node, b.node) == 0 && !p->binding;
        if (!same)
            *reply = p->binding && strcmp(held->node, b.node) == 0
                         ? ext_error("pod %s/%s: an earlier bind to %s is still being "
                                     "committed; retry", p->ns, p->name, held->node)
                         : ext_error("pod %s/%s already holds GPUs on node %s", p->ns, p->name,
                                     held->node);
        else
            *reply = json_pack("{s:s}", "Error", "");
        pthread_mutex_unlock(&s->mu);
        ext_bind_clear(&b);
        sched_decision(s, "bind", same ? "bound" : "conflict");
        return same ? 200 : 409;
    }
    json_t *obj = json_incref(p->obj);
    char uid[64], ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
    snprintf(uid, sizeof uid, "%s", p->uid);
    snprintf(ns, sizeof ns, "%s", p->ns);
    snprintf(name, sizeof name, "%s", p->name);
    struct core_pod asked;
    if (core_pod_parse(obj, s->opts.names, &asked, NULL) == 0) {
        int plain = asked.req.kind == CORE_REQ_NONE;
        core_pod_clear(&asked);
        if (plain) {
            pthread_mutex_unlock(&s->mu);
            json_decref(obj);
            return bind_plain(s, &b, ns, name, uid, reply);
        }
    }
    /* the lock is for kubelet's Allocate: a Node no kubelet registered (one
     * written through the API alone) never calls it */
    const struct node_info *ni = s->lock ? sched_smap_get(&s->inv, b.node) : NULL;
    if (ni && ni->kubelet) {
        char why[600], who[2 * CORE_NAME_MAX];
        snprintf(who, sizeof who, "%s/%s", ns, name);
        if (ext_nodelock_take(s->lock, b.node, uid, who, sched_wall_now(), why, sizeof why)) {
            pthread_mutex_unlock(&s->mu);
            json_decref(obj);
            *reply = ext_error("%s", why);
            ext_bind_clear(&b);
            sched_decision(s, "bind", "node_busy");
            return EXT_BIND_BUSY;
        }
    }
    if (sched_pod_and_policy(s, obj, &pod, &pol, &err) < 0) {
        if (s->lock)
            ext_nodelock_clear(s->lock, uid);
        pthread_mutex_unlock(&s->mu);
        json_decref(obj);
        *reply = err;
        ext_bind_clear(&b);
        sched_decision(s, "bind", "error");
        return 422; /* the pod, not the request: refused (server.c) with the reason */
    }
    json_decref(obj);
    /* the pod's identity in the allocation is the one /bind names */
    snprintf(pod.uid, sizeof pod.uid, "%s", uid);
    /* around the GPUs of the pods nominated there that it must leave room
     * for, as its /filter found it (sched_nominated.c) */
    rc = sched_nominated_prepare(s, &pod) ? sched_nominated_hold(s, node, &e) : 0;
    if (rc == 0)
        rc = core_pick_gpus(s->c, pol, node, &pod, &alloc, &e);
    sched_nominated_undo(s);
    struct core_status dst;
    if (rc == 0 && !sched_devices_fit(s, node, &pod, &dst))
        rc = gs_errf(&e, GS_ENOFIT, "%s", dst.reason);
    if (rc == 0 && sched_quota_prepare(s, &pod)) {
        struct core_quota_use u[CORE_MAX_GPUS];
        int k = core_quota_use_of_alloc(s->c, &alloc, u);
        if (k > 0 && core_quotas_check(s->quotas, pod.ns, u, k, &e) < 0)
            rc = -GS_ENOFIT;
    }
    if (rc == 0)
        rc = core_reserve(s->c, &alloc, &e);
    if (rc == 0) {
        ann = ext_annot_build(s->c, node, &alloc, s->opts.names->annot_prefix, NULL);
        /* the record's place in the log is fixed with the change itself: a
         * release of this pod can only be logged after it */
        if (s->commit.log_bind &&
            (rc = s->commit.log_bind(s->commit.ud, ns, name, uid, &alloc, ann, &ticket, &e)) < 0) {
            core_unreserve_undo(s->c, uid, NULL);
            unlogged = 1;
        }
    }
    if (rc == 0) {
        p->unschedulable = 0;
        p->binding = 1;
        p->bind_gen = gen = ++s->bind_gen;
        sched_set_bind_busy(s, p, 0);
    } else if (s->lock) {
        ext_nodelock_clear(s->lock, uid);
    }
    pthread_mutex_unlock(&s->mu);
    core_pod_clear(&pod);
    if (unlogged) { /* reserved, but its record could not be queued */
        *reply = ext_error("binding pod %s/%s to %s: %s", ns, name, b.node, e.msg);
        json_decref(ann);
        ext_bind_clear(&b);
        sched_decision(s, "bind", "commit_failed");
        return status_for(rc) == 400 ? 500 : status_for(rc);
    }
    if (rc < 0) {
        log_info("extender", "bind %s/%s to %s refused: %s", ns, name, b.node, e.msg);
        *reply = ext_error("pod %s/%s does not fit on node %s now: %s", ns, name, b.node, e.msg);
        ext_bind_clear(&b);
        sched_decision(s, "bind", "no_fit");
        return status_for(rc) == 404 ? 404 : 409;
    }
    if (ticket)
        rc = s->commit.durable(s->commit.ud, ticket, &e);
    int unknown = 0;
    if (rc == 0 && s->commit.bind &&
        (rc = s->commit.bind(s->commit.ud, ns, name, uid, &alloc, ann, &e)) == EXT_COMMIT_UNKNOWN) {
        unknown = 1; /* the pod may be bound: its GPUs are not handed out */
        rc = -GS_EUNAVAIL;
    }
    pthread_mutex_lock(&s->mu);
    /* a pod released while its bind committed is forgotten (a later bind
     * of it is a new pod with a new generation): only the allocation this
     * bind made is undone, never one that came after it */
    p = sched_smap_get(&s->pods, uid);
    int ours = p && p->bind_gen == gen;
    if (ours) {
        p->binding = 0;
        p->bound = rc == 0;
        if (p->bound)
            p->bound_no = ++s->n_binds;
    }
    if (rc < 0 && ours && !unknown) {
        core_unreserve_undo(s->c, uid, NULL);
        if (s->lock)
            ext_nodelock_clear(s->lock, uid);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc < 0) {
        *reply = ext_error("binding pod %s/%s to %s: %s", ns, name, b.node, e.msg);
        json_decref(ann);
        ext_bind_clear(&b);
        sched_decision(s, "bind", "commit_failed");
        return status_for(rc) == 400 ? 500 : status_for(rc);
    }
    json_decref(ann);
    log_info("extender", "bound %s/%s to %s (%d GPU%s)", ns, name, b.node, alloc.n,
             alloc.n == 1 ? "" : "s");
    ext_bind_clear(&b);
    sched_decision(s, "bind", "bound");
    *reply = json_pack("{s:s}", "Error", "");
    return 200;
}
