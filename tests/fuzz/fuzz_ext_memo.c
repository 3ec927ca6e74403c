/* tests/fuzz/fuzz_ext_memo.c - kept /filter and /prioritize answers
 * (ext/memo.h) under arbitrary sequences of changes. The input is a
 * program, two bytes an operation: ask (a pod shape from the byte: GPUs,
 * node selector, toleration, CPU, shared GPU memory) through a kept array
 * (all nodes, or part of them as /prioritize gets) and through a fresh one
 * (so kept /prioritize verdicts meet every change below), bind, release, a
 * node updated (healthy or not, labels, taint), removed or added, a quota set, a pod
 * without GPUs bound (its CPU taken) or ended, some with pod (anti-)affinity
 * terms that pick the pods asked by their labels (the symmetric half of
 * InterPodAffinity), a pending pod nominated to a node (its GPUs kept) or
 * no longer. Every change is made to a second
 * scheduler that keeps nothing (opts.no_keep) as well, and every answer
 * must be byte for byte its answer to the same request, and the answer
 * through the fresh array; abort() otherwise. An ask also sends
 * /prioritize the nodes its /filter passed, as kube-scheduler does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quota.h"
#include "ext/sched.h"
#include "util/log.h"

#define NODES 4

static void node(struct ext_sched *s, int i, int healthy, int zone, int tainted)
{
    struct gs_err e = GS_ERR_INIT;
    char name[8], inv[512];
    snprintf(name, sizeof name, "n%d", i);
    snprintf(inv, sizeof inv, "{\"version\":1,\"gpus\":["
             "{\"index\":0,\"uuid\":\"A%d\",\"model\":\"A\",\"memory_mib\":1000,\"healthy\":%s},"
             "{\"index\":1,\"uuid\":\"B%d\",\"model\":\"A\",\"memory_mib\":1000,\"healthy\":true}]}",
             i, healthy ? "true" : "false", i);
    json_t *n = json_pack("{s:{s:s, s:{s:s}, s:{s:s}}, s:{s:{s:s, s:s, s:s}}}", "metadata",
                          "name", name, "annotations", "gpusched.io/gpu-inventory", inv,
                          "labels", "zone", zone ? "b" : "a", "status", "allocatable", "cpu",
                          "4", "memory", "32Gi", "pods", "110");
    if (tainted)
        json_object_set_new(n, "spec", json_pack("{s:[{s:s, s:s, s:s}]}", "taints", "key", "gpu",
                                                 "value", "x", "effect", "NoSchedule"));
    ext_sched_upsert_node(s, n, &e);
    json_decref(n);
}

/* The pod of shape b (bits: GPUs 0-3, selector, toleration, CPU, GPU
 * memory shared), labelled app=x or app=y (what placed pods' terms pick
 * it by, not its shape). */
static void pod(char *buf, size_t cap, const char *name, unsigned b, int y)
{
    snprintf(buf, cap, "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"d\",\"uid\":\"%s\","
             "\"labels\":{\"app\":\"%s\"}},"
             "\"spec\":{%s%s\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{"
             "%s\"nvidia.com/gpu\":\"%u\",\"cpu\":\"%u\"}}}]}}", name, name,
             y ? "y" : "x",
             b & 4 ? "\"nodeSelector\":{\"zone\":\"a\"}," : "",
             b & 8 ? "\"tolerations\":[{\"key\":\"gpu\",\"operator\":\"Exists\"}]," : "",
             b & 64 ? "\"nvidia.com/gpu-memory\":\"600Mi\"," : "", b & 3, (b >> 4) & 3);
}

static struct ext_sched *twin; /* the scheduler that keeps nothing */

/* Binds "written to the API server" at once: cluster mode, where
 * nominations are kept (ext/sched_nominated.c). */
static int fake_bind(void *ud, const char *ns, const char *name, const char *uid,
                     const struct core_alloc *a, const json_t *annotations, struct gs_err *e)
{
    (void)ud, (void)ns, (void)name, (void)uid, (void)a, (void)annotations, (void)e;
    return 0;
}

static char *call(struct ext_sched *s, int prioritize, const char *b)
{
    struct ext_reply r;
    size_t len;
    int st = prioritize ? ext_sched_prioritize(s, b, strlen(b), &r)
                        : ext_sched_filter(s, b, strlen(b), &r);
    char *txt = ext_reply_take(&r, &len);
    char *out = malloc(len + 16);
    snprintf(out, len + 16, "%d %s", st, txt ? txt : "");
    free(txt);
    return out;
}

/* the kept arrays: all nodes (and one unknown), and a part of them, as
 * /prioritize gets what /filter passed */
static const char names[] = "[\"n0\",\"n1\",\"n2\",\"n3\",\"n4\"]";
static const char part[] = "[\"n1\",\"n2\",\"n3\"]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    char p[1024], kept[1200], fresh[1600], name[16];
    static int quiet;
    if (!quiet++)
        log_set_level(LOG_ERROR);
    if (size > 512 || ext_sched_new(&(struct ext_sched_opts){.max_pods = 8}, &s, &e) < 0)
        return 0;
    if (ext_sched_new(&(struct ext_sched_opts){.max_pods = 8, .no_keep = 1}, &twin, &e) < 0) {
        ext_sched_free(s);
        return 0;
    }
    ext_sched_set_commit(s, &(struct ext_commit){.bind = fake_bind});
    ext_sched_set_commit(twin, &(struct ext_commit){.bind = fake_bind});
    for (int i = 0; i < NODES; i++) {
        node(s, i, 1, i & 1, i == 3);
        node(twin, i, 1, i & 1, i == 3);
    }
    for (size_t k = 0; k + 1 < size; k += 2) {
        unsigned op = data[k] % 8, b = data[k + 1];
        snprintf(name, sizeof name, "p%u", b % 6);
        if (op <= 1) { /* ask, /filter or /prioritize */
            /* the pod asked: its name (and labels) by its place too, so
             * that pods of one shape differ in them */
            unsigned who = (b + (unsigned)(k >> 1)) % 6;
            snprintf(name, sizeof name, "p%u", who);
            pod(p, sizeof p, name, b, who & 1);
            const char *arr = b & 128 ? part : names;
            snprintf(kept, sizeof kept, "{\"Pod\":%s,\"NodeNames\":%s}", p, arr);
            /* an array of its own in every ask: decided afresh, never kept */
            snprintf(fresh, sizeof fresh, "{\"Pod\":%s,\"NodeNames\":[%*s%s}", p,
                     (int)(k / 2) + 1, "", arr + 1);
            char *r1 = call(s, op, kept), *r2 = call(s, op, fresh), *r3 = call(twin, op, kept);
            if (strcmp(r1, r2) != 0 || strcmp(r1, r3) != 0) {
                fprintf(stderr, "kept:  %s\nfresh: %s\ntwin:  %s\n", r1, r2, r3);
                abort();
            }
            /* /prioritize with what /filter passed */
            json_t *fj = op == 0 ? json_loads(strchr(r1, ' ') + 1, 0, NULL) : NULL;
            char *pass = fj ? json_dumps(json_object_get(fj, "NodeNames"), JSON_COMPACT) : NULL;
            if (pass && strcmp(pass, "[]") != 0 && strlen(pass) < sizeof names + 8) {
                snprintf(kept, sizeof kept, "{\"Pod\":%s,\"NodeNames\":%s}", p, pass);
                char *q1 = call(s, 1, kept), *q2 = call(twin, 1, kept);
                if (strcmp(q1, q2) != 0) {
                    fprintf(stderr, "prioritize %s\nkept: %s\ntwin: %s\n", pass, q1, q2);
                    abort();
                }
                free(q1);
                free(q2);
            }
            free(pass);
            json_decref(fj);
            free(r1);
            free(r2);
            free(r3);
            continue;
        }
        for (int w = 0; w < 2; w++) { /* a change: to both schedulers */
            struct ext_sched *x = w ? twin : s;
            switch (op) {
            case 2: { /* bind the pod named by b to node b/6 */
                struct ext_reply r;
                size_t len;
                char bind[256];
                snprintf(bind, sizeof bind, "{\"PodName\":\"%s\",\"PodNamespace\":\"d\","
                         "\"PodUID\":\"%s\",\"Node\":\"n%u\"}", name, name, (b / 6) % NODES);
                ext_sched_bind(x, bind, strlen(bind), &r);
                free(ext_reply_take(&r, &len));
                break;
            }
            case 3: {
                char who[32];
                snprintf(who, sizeof who, "d/%s", name);
                ext_sched_release(x, who, &e);
                break;
            }
            case 4:
                node(x, b % NODES, b & 4, b & 8, b & 16);
                break;
            case 5: {
                char nn[8];
                snprintf(nn, sizeof nn, "n%u", b % NODES);
                ext_sched_remove_node(x, nn, &e);
                break;
            }
            case 6: {
                struct core_quotas *q = core_quotas_new();
                struct core_quota one;
                json_t *j = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:{s:i}}}", "apiVersion",
                                      "gpusched.io/v1", "kind", "GPUQuota", "metadata", "name",
                                      "q", "namespace", "d", "spec", "total", "gpus", (int)(b % 8));
                if (b & 8 && core_quota_parse(j, &one, &e) == 0)
                    core_quotas_put(q, &one, &e);
                json_decref(j);
                ext_sched_set_quotas(x, q);
                break;
            }
            default:
                if (b & 128) { /* a pod without GPUs bound to a node, or ended;
                                  w0 avoids app=x in its zone, w1 must be
                                  with app=y (terms that pick the pods asked),
                                  w2, of namespace e, avoids app=x of d */
                    static const char *const aff[] = {
                        "\"affinity\":{\"podAntiAffinity\":{\"preferredDuringScheduling"
                        "IgnoredDuringExecution\":[{\"weight\":100,\"podAffinityTerm\":{"
                        "\"topologyKey\":\"zone\",\"labelSelector\":{\"matchLabels\":"
                        "{\"app\":\"x\"}}}}]}},",
                        "\"affinity\":{\"podAffinity\":{\"requiredDuringScheduling"
                        "IgnoredDuringExecution\":[{\"topologyKey\":\"zone\",\"labelSelector\":"
                        "{\"matchLabels\":{\"app\":\"y\"}}}]}},",
                        "\"affinity\":{\"podAntiAffinity\":{\"preferredDuringScheduling"
                        "IgnoredDuringExecution\":[{\"weight\":30,\"podAffinityTerm\":{"
                        "\"topologyKey\":\"zone\",\"namespaces\":[\"d\"],\"labelSelector\":"
                        "{\"matchLabels\":{\"app\":\"x\"}}}}]}},"};
                    char w[800];
                    snprintf(w, sizeof w, "{\"metadata\":{\"name\":\"w%u\",\"namespace\":"
                             "\"%s\",\"uid\":\"w%u\"},\"spec\":{%s\"nodeName\":\"n%u\","
                             "\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":"
                             "{\"cpu\":\"%u\"}}}]},\"status\":{\"phase\":\"%s\"}}", b % 3,
                             b % 3 == 2 ? "e" : "d", b % 3, aff[b % 3], (b >> 2) % NODES, (b >> 4) & 3,
                             b & 1 ? "Succeeded" : "Running");
                    json_t *j = json_loads(w, 0, NULL);
                    ext_sched_observe_pod(x, j, 0);
                    json_decref(j);
                    break;
                }
                if (b & 64) { /* a pending GPU pod nominated to a node (or no longer) */
                    char q[1024], qn[8];
                    snprintf(qn, sizeof qn, "q%u", b & 1);
                    pod(q, sizeof q, qn, (b >> 1) & 3, 0);
                    json_t *j = json_loads(q, 0, NULL);
                    if (j && !(b & 32))
                        json_object_set_new(j, "status", json_pack("{s:s}", "nominatedNodeName",
                                                                   (b >> 3) & 1 ? "n1" : "n2"));
                    if (j) /* priority -1: held for nobody asked (they have 0) */
                        json_object_set_new(json_object_get(j, "spec"), "priority",
                                            json_integer((b >> 4) & 1 ? -1 : 0));
                    ext_sched_observe_pod(x, j, 0);
                    json_decref(j);
                    break;
                }
                ext_sched_check_inventory(x, 1e12, b); /* no updated_at: never stale */
                break;
            }
        }
    }
    ext_sched_free(s);
    ext_sched_free(twin);
    return 0;
}
