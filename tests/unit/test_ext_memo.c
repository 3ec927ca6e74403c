/* tests/unit/test_ext_memo.c - kept /filter and /prioritize answers
 * (ext/memo.h): the pod key tells apart every pod the filters or scores
 * could tell apart, and after every kind of change (bind, release, node
 * added, removed, updated, gone stale, quota, a pod without GPUs bound
 * or ended) the answer from a kept entry
 * is byte for byte the answer to the same question asked afresh. */
#include <stdlib.h>
#include <time.h>

#include "core/core.h"
#include "core/quota.h"
#include "ext/memo.h"
#include "ext/sched.h"
#include "test.h"

#define CTR(limits) "\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{" limits "}}}]"
#define POD(name, spec) "{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"d\",\"uid\":\"" \
    name "\"},\"spec\":{" spec "}}"
#define GPU1 CTR("\"nvidia.com/gpu\":\"1\"")

static char *key_of(const char *pod_json, const char *policy)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_pod pod;
    char *key = NULL, *hex;
    size_t len = 0;
    json_t *j = json_loads(pod_json, 0, NULL);
    ASSERT_TRUE(j != NULL);
    if (core_pod_parse(j, core_names_default(), &pod, &e) < 0)
        TEST_FAIL_("%s: %s", pod_json, e.msg);
    ASSERT_EQ(ext_memo_key(&pod, policy, &key, &len), 0);
    hex = malloc(2 * len + 1);
    for (size_t i = 0; i < len; i++)
        sprintf(hex + 2 * i, "%02x", (unsigned char)key[i]);
    hex[2 * len] = '\0';
    free(key);
    core_pod_clear(&pod);
    json_decref(j);
    return hex;
}

static void test_key(void)
{
    /* what the filters and scores read: every one makes another key */
    const char *pods[] = {
        POD("a", GPU1),
        POD("a", CTR("\"nvidia.com/gpu\":\"2\"")),
        POD("a", CTR("\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"1000Mi\"")),
        POD("a", CTR("\"nvidia.com/gpu\":\"1\",\"cpu\":\"2\"")),
        POD("a", CTR("\"nvidia.com/gpu\":\"1\",\"memory\":\"1Gi\"")),
        POD("a", GPU1 ",\"nodeSelector\":{\"zone\":\"a\"}"),
        POD("a", GPU1 ",\"nodeSelector\":{\"zone\":\"b\"}"),
        POD("a", GPU1 ",\"nodeSelector\":{\"zo\":\"nea\"}"),
        POD("a", GPU1 ",\"tolerations\":[{\"key\":\"gpu\",\"operator\":\"Exists\"}]"),
        POD("a", GPU1 ",\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuring"
            "Execution\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"zone\","
            "\"operator\":\"In\",\"values\":[\"a\"]}]}]}}}"),
    };
    enum { N = sizeof pods / sizeof pods[0] };
    char *k[N];
    for (int i = 0; i < N; i++)
        k[i] = key_of(pods[i], NULL);
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++)
            if (strcmp(k[i], k[j]) == 0)
                TEST_FAIL_("pods %d and %d have the same key", i, j);
    /* what they do not read: name, UID, priority */
    char *same = key_of("{\"metadata\":{\"name\":\"z\",\"namespace\":\"d\",\"uid\":\"zz\"},"
                        "\"spec\":{\"priority\":7," GPU1 "}}", NULL);
    ASSERT_STREQ(same, k[0]);
    /* the policy is part of the question */
    char *pol = key_of(pods[0], "fgd");
    ASSERT_TRUE(strcmp(pol, k[0]) != 0);
    free(same);
    free(pol);
    for (int i = 0; i < N; i++)
        free(k[i]);
}

static void test_table(void)
{
    struct ext_memo *m = ext_memo_new(2);
    const char raw[] = "[\"a\",\"b\"]";
    struct ext_namelist *l = ext_namelist_new(raw, sizeof raw - 1, (const char *[]){"a", "b"}, 2);
    struct ext_memo_entry *f = ext_memo_get(m, l, EXT_MEMO_FILTER, strdup("k1"), 2);
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ(f->n, 2);
    ASSERT_EQ(f->version, 0);
    ASSERT_EQ(f->fit[1], EXT_FIT_UNSET);
    unsigned long epoch = f->epoch;
    /* the same question finds it; another verb or key does not */
    ASSERT_TRUE(ext_memo_get(m, l, EXT_MEMO_FILTER, strdup("k1"), 2) == f);
    struct ext_memo_entry *p = ext_memo_get(m, l, EXT_MEMO_PRIORITIZE, strdup("k1"), 2);
    ASSERT_TRUE(p != f && p->fit == NULL);
    p->version = 5;
    ext_memo_set_reply(p, ext_text_wrap(strdup("[]"), 2));
    struct ext_text *t = ext_text_ref(p->reply);
    /* a third question takes the least recently used slot (f): a new epoch */
    ASSERT_TRUE(ext_memo_get(m, l, EXT_MEMO_FILTER, strdup("k2"), 2) == f);
    ASSERT_TRUE(f->epoch != epoch);
    ASSERT_EQ(f->version, 0);
    /* ...and then p's: the reply we hold outlives it */
    ASSERT_TRUE(ext_memo_get(m, l, EXT_MEMO_FILTER, strdup("k3"), 2) == p);
    ASSERT_TRUE(p->reply == NULL);
    ASSERT_STREQ(t->buf, "[]");
    ext_text_put(t);
    ext_namelist_put(l); /* the memo holds its own references */
    ext_memo_free(m);
}

/* ---- kept answers against fresh ones ---- */

static json_t *node(const char *name, int healthy, const char *zone, int tainted,
                    const char *updated)
{
    char inv[512];
    snprintf(inv, sizeof inv, "{\"version\":1,%s%s%s\"gpus\":["
             "{\"index\":0,\"uuid\":\"G0-%s\",\"model\":\"A\",\"memory_mib\":1000,\"healthy\":%s},"
             "{\"index\":1,\"uuid\":\"G1-%s\",\"model\":\"A\",\"memory_mib\":1000,\"healthy\":%s}]}",
             updated ? "\"updated_at\":\"" : "", updated ? updated : "", updated ? "\"," : "",
             name, healthy ? "true" : "false", name, healthy ? "true" : "false");
    json_t *n = json_pack("{s:{s:s, s:{s:s}, s:{s:s}}, s:{s:{s:s, s:s, s:s}}}", "metadata",
                          "name", name, "annotations", "gpusched.io/gpu-inventory", inv,
                          "labels", "zone", zone, "status", "allocatable", "cpu", "8",
                          "memory", "32Gi", "pods", "110");
    if (tainted)
        json_object_set_new(n, "spec", json_pack("{s:[{s:s, s:s, s:s}]}", "taints", "key", "gpu",
                                                 "value", "x", "effect", "NoSchedule"));
    return n;
}

static void put_node(struct ext_sched *s, const char *name, int healthy, const char *zone,
                     int tainted, const char *updated)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *n = node(name, healthy, zone, tainted, updated);
    ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
    json_decref(n);
}

/* The request for `pod` over n1..n4; pad spaces make the array's bytes new
 * (a list of its own, so an answer decided afresh). */
static char *body(const char *pod, int pad)
{
    char *b = malloc(strlen(pod) + (size_t)pad + 128);
    sprintf(b, "{\"Pod\":%s,\"NodeNames\":[%*s\"n1\",\"n2\",\"n3\",\"n4\"]}", pod, pad, "");
    return b;
}

static char *call(struct ext_sched *s, int verb, const char *b, int *shared)
{
    struct ext_reply r;
    size_t len;
    int st = verb == EXT_MEMO_FILTER ? ext_sched_filter(s, b, strlen(b), &r)
                                     : ext_sched_prioritize(s, b, strlen(b), &r);
    ASSERT_EQ(st, 200);
    if (shared)
        *shared = r.shared != NULL;
    return ext_reply_take(&r, &len);
}

static int pads = 1;

/* Asks the kept question twice (the second answer comes from the entry)
 * and once afresh: all three must be the same bytes. Returns the answer,
 * parsed. */
static json_t *ask(struct ext_sched *s, int verb, const char *pod, int expect_shared)
{
    char *kept = body(pod, 0), *fresh = body(pod, pads++);
    int shared = 0;
    char *r1 = call(s, verb, kept, NULL), *r2 = call(s, verb, kept, &shared);
    char *r3 = call(s, verb, fresh, NULL);
    ASSERT_STREQ(r1, r2);
    ASSERT_STREQ(r2, r3);
    ASSERT_EQ(shared, expect_shared);
    json_t *j = json_loads(r2, 0, NULL);
    ASSERT_TRUE(j != NULL);
    free(kept), free(fresh), free(r1), free(r2), free(r3);
    return j;
}

/* Where node stands in a /filter answer: "fit", or its reason prefixed
 * with "now: " (FailedNodes only) or "never: " (FailedAndUnresolvableNodes,
 * and the same reason in FailedNodes). */
static const char *where(const json_t *j, const char *node)
{
    static char buf[512];
    size_t i;
    const json_t *v;
    json_array_foreach(json_object_get(j, "NodeNames"), i, v)
        if (strcmp(json_string_value(v), node) == 0)
            return "fit";
    if ((v = json_object_get(json_object_get(j, "FailedAndUnresolvableNodes"), node))) {
        /* also in FailedNodes, with the same reason (kube-scheduler 1.20) */
        const json_t *f = json_object_get(json_object_get(j, "FailedNodes"), node);
        ASSERT_TRUE(f && json_equal(f, v));
        snprintf(buf, sizeof buf, "never: %s", json_string_value(v));
    } else if ((v = json_object_get(json_object_get(j, "FailedNodes"), node)))
        snprintf(buf, sizeof buf, "now: %s", json_string_value(v));
    else
        snprintf(buf, sizeof buf, "absent");
    return buf;
}

static void filter_bind(struct ext_sched *s, const char *name, const char *node_name)
{
    char pod[512], b[512];
    struct ext_reply r;
    size_t len;
    snprintf(pod, sizeof pod, POD("%s", GPU1), name, name);
    char *f = body(pod, 0);
    free(call(s, EXT_MEMO_FILTER, f, NULL));
    free(f);
    snprintf(b, sizeof b, "{\"PodName\":\"%s\",\"PodNamespace\":\"d\",\"PodUID\":\"%s\","
             "\"Node\":\"%s\"}", name, name, node_name);
    ASSERT_EQ(ext_sched_bind(s, b, strlen(b), &r), 200);
    free(ext_reply_take(&r, &len));
}

static void set_quota(struct ext_sched *s, int gpus)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_quotas *q = core_quotas_new();
    struct core_quota one;
    json_t *j = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:{s:i}}}", "apiVersion",
                          "gpusched.io/v1", "kind", "GPUQuota", "metadata", "name", "q",
                          "namespace", "d", "spec", "total", "gpus", gpus);
    ASSERT_EQ(core_quota_parse(j, &one, &e), 0);
    ASSERT_EQ(core_quotas_put(q, &one, &e), 0);
    json_decref(j);
    ext_sched_set_quotas(s, q);
}

static void test_sched(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    json_t *j;
    const char *p1 = POD("p1", GPU1), *p1b = POD("p1b", GPU1);
    const char *sel = POD("sel", GPU1 ",\"nodeSelector\":{\"zone\":\"a\"}");
    const char *tol = POD("tol", GPU1 ",\"tolerations\":[{\"key\":\"gpu\",\"operator\":\"Exists\"}]");
    const char *two = POD("two", CTR("\"nvidia.com/gpu\":\"2\""));

    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){0}, &s, &e), 0);
    put_node(s, "n1", 1, "a", 0, NULL);
    put_node(s, "n2", 1, "a", 0, NULL);
    put_node(s, "n3", 1, "b", 0, NULL);
    put_node(s, "n4", 1, "a", 1, NULL);

    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_STREQ(where(j, "n3"), "fit");
    ASSERT_CONTAINS(where(j, "n4"), "never: node has taint gpu=x:NoSchedule");
    json_decref(j);
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, p1, 1));
    /* another pod of the same shape is answered from the same entry at once */
    char *b1 = body(p1b, 0);
    int shared = 0;
    free(call(s, EXT_MEMO_FILTER, b1, &shared));
    ASSERT_EQ(shared, 1);
    free(b1);
    /* a node selector after a pod without one, the same GPU request */
    j = ask(s, EXT_MEMO_FILTER, sel, 1);
    ASSERT_STREQ(where(j, "n1"), "fit");
    ASSERT_CONTAINS(where(j, "n3"), "never: node labels do not match the pod's nodeSelector");
    json_decref(j);
    /* a toleration */
    j = ask(s, EXT_MEMO_FILTER, tol, 1);
    ASSERT_STREQ(where(j, "n4"), "fit");
    json_decref(j);

    /* two binds take both GPUs of n1: the same question now rejects it */
    filter_bind(s, "b1", "n1");
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_STREQ(where(j, "n1"), "fit");
    json_decref(j);
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, p1, 1));
    filter_bind(s, "b2", "n1");
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_STREQ(where(j, "n1"), "now: node has 0 free GPUs, pod needs 1");
    ASSERT_STREQ(where(j, "n2"), "fit");
    json_decref(j);
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, p1, 1));
    json_decref(ask(s, EXT_MEMO_FILTER, sel, 1));
    /* a release gives one back */
    ASSERT_EQ(ext_sched_release(s, "d/b2", &e), 0);
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_STREQ(where(j, "n1"), "fit");
    json_decref(j);
    j = ask(s, EXT_MEMO_FILTER, two, 1);
    ASSERT_STREQ(where(j, "n1"), "now: node has 1 free GPUs, pod needs 2");
    json_decref(j);
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, two, 1));

    /* an inventory update turns n2's GPUs unhealthy, then healthy again */
    put_node(s, "n2", 0, "a", 0, NULL);
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_STREQ(where(j, "n2"), "never: node's GPUs (A) are all of excluded models");
    json_decref(j);
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, p1, 1));
    put_node(s, "n2", 1, "a", 0, NULL);
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_STREQ(where(j, "n2"), "fit");
    json_decref(j);

    /* a node goes and comes back; a label change moves it for the selector */
    ASSERT_EQ(ext_sched_remove_node(s, "n3", &e), 0);
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_CONTAINS(where(j, "n3"), "now: node is unknown to gpusched");
    json_decref(j);
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, p1, 1));
    put_node(s, "n3", 1, "a", 0, NULL);
    j = ask(s, EXT_MEMO_FILTER, sel, 1);
    ASSERT_STREQ(where(j, "n3"), "fit");
    json_decref(j);
    /* a node without GPUs going changes no GPU count, and still counts */
    json_t *cpu = json_pack("{s:{s:s}, s:{s:{s:s, s:s, s:s}}}", "metadata", "name", "n3",
                            "status", "allocatable", "cpu", "8", "memory", "32Gi", "pods", "110");
    ASSERT_EQ(ext_sched_upsert_node(s, cpu, &e), 0);
    json_decref(cpu);
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_STREQ(where(j, "n3"), "never: node has no GPUs");
    json_decref(j);
    ASSERT_EQ(ext_sched_remove_node(s, "n3", &e), 0);
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_CONTAINS(where(j, "n3"), "now: node is unknown to gpusched");
    json_decref(j);
    put_node(s, "n3", 1, "a", 0, NULL);

    /* an inventory gone stale marks the node unavailable */
    put_node(s, "n2", 1, "a", 0, "2000-01-01T00:00:00Z");
    ASSERT_EQ(ext_sched_check_inventory(s, (double)time(NULL), 60), 1);
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_CONTAINS(where(j, "n2"), "now: node is marked unavailable");
    json_decref(j);
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, p1, 1));
    put_node(s, "n2", 1, "a", 0, NULL);
    ASSERT_EQ(ext_sched_check_inventory(s, (double)time(NULL), 60), 0);
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_STREQ(where(j, "n2"), "fit");
    json_decref(j);

    /* a quota: checked per request, never kept (so never shared) */
    set_quota(s, 1);
    j = ask(s, EXT_MEMO_FILTER, p1, 0);
    ASSERT_CONTAINS(where(j, "n2"), "now: ");
    ASSERT_CONTAINS(where(j, "n2"), "GPUQuota d/q: whole GPUs");
    json_decref(j);
    set_quota(s, 8);
    j = ask(s, EXT_MEMO_FILTER, p1, 1);
    ASSERT_STREQ(where(j, "n2"), "fit");
    json_decref(j);

    /* a pod without GPUs bound to n2 takes its CPU (ext/sched_usage.c), and
     * gives it back when it ends */
    const char *cpu4 = POD("c4", CTR("\"nvidia.com/gpu\":\"1\",\"cpu\":\"4\""));
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, cpu4, 1));
    json_t *web = json_loads(POD("web", "\"nodeName\":\"n2\"," CTR("\"cpu\":\"6\"")), 0, NULL);
    ext_sched_observe_pod(s, web, 0);
    j = ask(s, EXT_MEMO_FILTER, cpu4, 1);
    ASSERT_STREQ(where(j, "n2"), "now: node has 2000m CPU free of 8000m, pod needs 4000m");
    ASSERT_STREQ(where(j, "n1"), "fit");
    json_decref(j);
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, cpu4, 1));
    json_object_set_new(web, "status", json_pack("{s:s}", "phase", "Succeeded"));
    ext_sched_observe_pod(s, web, 0);
    j = ask(s, EXT_MEMO_FILTER, cpu4, 1);
    ASSERT_STREQ(where(j, "n2"), "fit");
    json_decref(j);
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, cpu4, 1));
    json_decref(web);
    ext_sched_free(s);

    /* top-k is per request as well */
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){.top_k = 1}, &s, &e), 0);
    put_node(s, "n1", 1, "a", 0, NULL);
    put_node(s, "n2", 1, "a", 0, NULL);
    put_node(s, "n3", 1, "a", 0, NULL);
    filter_bind(s, "t1", "n2");
    j = ask(s, EXT_MEMO_FILTER, p1, 0);
    ASSERT_EQ(json_array_size(json_object_get(j, "NodeNames")), 1);
    ASSERT_EQ(json_object_size(json_object_get(j, "FailedNodes")), 3); /* n4 is unknown here */
    ASSERT_CONTAINS(where(j, "n2"), "ranks it below its best 1 nodes");
    json_decref(j);
    ext_sched_free(s);
}

/* kubelet's device count (ext/devices.h) is part of every kept verdict:
 * binds and releases on the node and updates of its allocatable move it. */
static void put_devnode(struct ext_sched *s, const char *name, const char *devices)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *n = node(name, 1, "a", 0, NULL);
    json_object_set_new(json_object_get(json_object_get(n, "status"), "allocatable"),
                        "nvidia.com/gpu", json_string(devices));
    ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
    json_decref(n);
}

static void test_devices(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    json_t *j;
    const char *sh = POD("sh", CTR("\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"100Mi\""));
    const char *two = POD("two", CTR("\"nvidia.com/gpu\":\"2\""));
    char pod[512], b[512];
    struct ext_reply r;
    size_t len;

    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){0}, &s, &e), 0);
    put_devnode(s, "n1", "3"); /* 2 GPUs, 3 devices */
    put_devnode(s, "n2", "1");
    put_node(s, "n3", 1, "a", 0, NULL); /* no device count: not limited */
    j = ask(s, EXT_MEMO_FILTER, sh, 1);
    ASSERT_STREQ(where(j, "n1"), "fit");
    ASSERT_STREQ(where(j, "n2"), "fit");
    json_decref(j);
    j = ask(s, EXT_MEMO_FILTER, two, 1);
    ASSERT_STREQ(where(j, "n1"), "fit");
    ASSERT_STREQ(where(j, "n2"), "never: kubelet has 1 nvidia.com/gpu devices on the node in all, "
                                 "pod needs 2");
    ASSERT_STREQ(where(j, "n3"), "fit");
    json_decref(j);
    /* three shared pods take n1's three devices (its GPUs have room left) */
    for (int i = 0; i < 3; i++) {
        snprintf(pod, sizeof pod,
                 POD("d%d", CTR("\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"100Mi\"")),
                 i, i);
        char *f = body(pod, 0);
        free(call(s, EXT_MEMO_FILTER, f, NULL));
        free(f);
        snprintf(b, sizeof b, "{\"PodName\":\"d%d\",\"PodNamespace\":\"d\",\"PodUID\":\"d%d\","
                 "\"Node\":\"n1\"}", i, i);
        ASSERT_EQ(ext_sched_bind(s, b, strlen(b), &r), 200);
        free(ext_reply_take(&r, &len));
        j = ask(s, EXT_MEMO_FILTER, sh, 1);
        ASSERT_STREQ(where(j, "n1"), i < 2 ? "fit" : "now: kubelet has 0 of 3 nvidia.com/gpu "
                     "devices left on the node (the rest held by pods bound there), pod needs 1");
        json_decref(j);
    }
    json_decref(ask(s, EXT_MEMO_PRIORITIZE, sh, 1));
    /* a fourth bind is refused */
    snprintf(b, sizeof b, "{\"PodName\":\"sh\",\"PodNamespace\":\"d\",\"PodUID\":\"sh\","
             "\"Node\":\"n1\"}");
    ASSERT_EQ(ext_sched_bind(s, b, strlen(b), &r), 409);
    free(ext_reply_take(&r, &len));
    /* kubelet advertises more (replicas raised): the node's verdict follows */
    put_devnode(s, "n1", "20");
    j = ask(s, EXT_MEMO_FILTER, sh, 1);
    ASSERT_STREQ(where(j, "n1"), "fit");
    json_decref(j);
    put_devnode(s, "n1", "3");
    j = ask(s, EXT_MEMO_FILTER, sh, 1);
    ASSERT_CONTAINS(where(j, "n1"), "now: kubelet has 0 of 3");
    json_decref(j);
    /* a release gives one back */
    ASSERT_EQ(ext_sched_release(s, "d/d1", &e), 0);
    j = ask(s, EXT_MEMO_FILTER, sh, 1);
    ASSERT_STREQ(where(j, "n1"), "fit");
    json_decref(j);
    /* the count is gone from the node: no limit */
    put_node(s, "n2", 1, "a", 0, NULL);
    j = ask(s, EXT_MEMO_FILTER, two, 1);
    ASSERT_STREQ(where(j, "n2"), "fit");
    json_decref(j);
    ext_sched_free(s);
}

/* The core's side: the version moves with every change, stamps per node. */
static void test_version(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_cluster *c = core_cluster_new();
    struct core_node_spec spec = {.name = "x", .cpu_milli = 1000, .mem_bytes = 1 << 30, .n_gpus = 1};
    snprintf(spec.gpus[0].model, sizeof spec.gpus[0].model, "A");
    spec.gpus[0].mem_mib = 1000;
    spec.gpus[0].healthy = 1;
    uint64_t v0 = core_cluster_version(c);
    ASSERT_EQ(core_cluster_upsert_node(c, &spec, &e), 0);
    uint64_t v1 = core_cluster_version(c), st = core_cluster_stamps(c)[core_node_pos(core_cluster_find(c, "x"))];
    ASSERT_TRUE(v1 != v0 && st != 0);
    ASSERT_EQ(core_cluster_set_available(c, "x", 0, &e), 0);
    ASSERT_TRUE(core_cluster_version(c) != v1);
    ASSERT_TRUE(core_cluster_stamps(c)[core_node_pos(core_cluster_find(c, "x"))] != st);
    v1 = core_cluster_version(c);
    spec.name = "y";
    ASSERT_EQ(core_cluster_upsert_node(c, &spec, &e), 0);
    uint64_t v2 = core_cluster_version(c);
    ASSERT_EQ(core_cluster_remove_node(c, "y", &e), 0);
    ASSERT_TRUE(core_cluster_version(c) != v2 && v2 != v1);
    core_cluster_free(c);
}

/* kube-scheduler with mixed workloads: pods of seven shapes in turn, each
 * shape's /prioritize on an array of its own (what /filter passed for it).
 * None of the 14 answers or 8 arrays may push another out: the second round
 * is answered from kept entries, byte for byte the first. */
/* The kept-answer counter of verb in m's text. */
static double kept(struct metrics *m, const char *verb)
{
    size_t len;
    char *t = metrics_render(m, &len), pat[128];
    ASSERT_TRUE(t != NULL);
    snprintf(pat, sizeof pat, "gpusched_extender_kept_answers_total{verb=\"%s\"} ", verb);
    const char *at = strstr(t, pat);
    double v = at ? strtod(at + strlen(pat), NULL) : 0;
    free(t);
    return v;
}

static void test_shapes(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    static const char *const pods[] = {
        POD("s1", GPU1),
        POD("s2", CTR("\"nvidia.com/gpu\":\"2\"")),
        POD("s3", CTR("\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"100Mi\"")),
        POD("s4", CTR("\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"200Mi\"")),
        POD("s5", CTR("\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"100Mi\","
                      "\"nvidia.com/gpu-cores\":\"50\"")),
        POD("s6", GPU1 ",\"nodeSelector\":{\"zone\":\"a\"}"),
        POD("s7", GPU1 ",\"tolerations\":[{\"key\":\"gpu\",\"operator\":\"Exists\"}]"),
    };
    enum { N = sizeof pods / sizeof pods[0] };
    char *first[N][2] = {{0}};
    struct metrics *m = metrics_new();

    ASSERT_TRUE(m != NULL);
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){.metrics = m}, &s, &e), 0);
    put_node(s, "n1", 1, "a", 0, NULL);
    put_node(s, "n2", 1, "a", 0, NULL);
    put_node(s, "n3", 1, "b", 0, NULL);
    put_node(s, "n4", 1, "a", 1, NULL);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < N; i++) {
            char *f = body(pods[i], 0), *p = body(pods[i], 1000 + i);
            double kf = kept(m, "filter"), kp = kept(m, "prioritize");
            char *rf = call(s, EXT_MEMO_FILTER, f, NULL);
            char *rp = call(s, EXT_MEMO_PRIORITIZE, p, NULL);
            /* the first round decides; the second answers from kept entries */
            ASSERT_EQ(kept(m, "filter") - kf, round);
            ASSERT_EQ(kept(m, "prioritize") - kp, round);
            if (round == 0) {
                first[i][0] = rf;
                first[i][1] = rp;
            } else {
                ASSERT_STREQ(rf, first[i][0]);
                ASSERT_STREQ(rp, first[i][1]);
                free(rf), free(rp);
            }
            free(f), free(p);
        }
    for (int i = 0; i < N; i++)
        free(first[i][0]), free(first[i][1]);
    ext_sched_free(s);
    metrics_free(m);
}

/* ---- pod after pod, as kube-scheduler asks ---- */

/* A node of `gpus` GPUs of `model` in zone a or b, tainted or not; the
 * upsert's result (it refuses fewer GPUs than pods bound there hold). */
static int put_gpu_node(struct ext_sched *s, const char *name, const char *model, int gpus,
                        int zone_b, int tainted)
{
    struct gs_err e = GS_ERR_INIT;
    char inv[2048];
    int at = snprintf(inv, sizeof inv, "{\"version\":1,\"gpus\":[");
    for (int g = 0; g < gpus; g++)
        at += snprintf(inv + at, sizeof inv - (size_t)at, "%s{\"index\":%d,\"uuid\":\"%s-%d\","
                       "\"model\":\"%s\",\"memory_mib\":1000,\"healthy\":true}", g ? "," : "", g,
                       name, g, model);
    snprintf(inv + at, sizeof inv - (size_t)at, "]}");
    json_t *n = json_pack("{s:{s:s, s:{s:s}, s:{s:s}}, s:{s:{s:s, s:s, s:s}}}", "metadata",
                          "name", name, "annotations", "gpusched.io/gpu-inventory", inv,
                          "labels", "zone", zone_b ? "b" : "a", "status", "allocatable", "cpu",
                          "64", "memory", "256Gi", "pods", "110");
    if (tainted)
        json_object_set_new(n, "spec", json_pack("{s:[{s:s, s:s, s:s}]}", "taints", "key", "gpu",
                                                 "value", "x", "effect", "NoSchedule"));
    int rc = ext_sched_upsert_node(s, n, &e);
    json_decref(n);
    return rc;
}

/* Both schedulers' answers to one request: the same bytes, or a failure
 * naming where they part. Returns the kept scheduler's answer. */
static char *both(struct ext_sched *kept, struct ext_sched *fresh, int verb, const char *b,
                  int pod)
{
    char *r1 = call(kept, verb, b, NULL), *r2 = call(fresh, verb, b, NULL);
    test_checks++;
    if (strcmp(r1, r2) != 0) {
        size_t i = 0;
        while (r1[i] == r2[i])
            i++;
        TEST_FAIL_("pod %d, %s: kept and fresh answers part at byte %zu: kept ...%.80s, "
                   "fresh ...%.80s", pod, verb == EXT_MEMO_FILTER ? "filter" : "prioritize", i,
                   r1 + (i > 20 ? i - 20 : 0), r2 + (i > 20 ? i - 20 : 0));
    }
    free(r2);
    return r1;
}

static void bind_both(struct ext_sched *kept, struct ext_sched *fresh, const char *pod,
                      const char *node_name)
{
    char b[512];
    struct ext_reply r;
    size_t len;
    snprintf(b, sizeof b, "{\"PodName\":\"%s\",\"PodNamespace\":\"d\",\"PodUID\":\"%s\","
             "\"Node\":\"%s\"}", pod, pod, node_name);
    int st1 = ext_sched_bind(kept, b, strlen(b), &r);
    char *r1 = ext_reply_take(&r, &len);
    int st2 = ext_sched_bind(fresh, b, strlen(b), &r);
    char *r2 = ext_reply_take(&r, &len);
    ASSERT_EQ(st1, st2);
    ASSERT_STREQ(r1, r2);
    free(r1), free(r2);
}

/* kube-scheduler's own pattern: every pod new, of seven shapes in turn,
 * /filter with all nodes, /prioritize with the nodes /filter passed (an
 * array that changes whenever a bind fills a node for that shape), /bind to
 * the best, and now and then a release or a node update. Every answer of
 * the scheduler that keeps answers, verdicts and node positions must be
 * byte for byte the answer of one that keeps nothing (opts.no_keep). */
static void test_pod_after_pod(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s, *t;
    static const char *const models[] = {"A100", "H100", "T4"};
    /* the container's limits and the pod's extras, per shape */
    static const char *const shapes[][2] = {
        {"\"nvidia.com/gpu\":\"1\"", ""},
        {"\"nvidia.com/gpu\":\"2\"", ""},
        {"\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"300Mi\"", ""},
        {"\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"200Mi\","
         "\"nvidia.com/gpu-cores\":\"50\",\"cpu\":\"2\"", ""},
        {"\"nvidia.com/gpu\":\"1\"", "A100"},
        {"\"nvidia.com/gpu\":\"2\",\"nvidia.com/gpu-memory\":\"400Mi\"", "H100"},
        {"\"nvidia.com/gpu\":\"1\"", "sel"},
    };
    enum { NODES = 40, PODS = 260, SHAPES = sizeof shapes / sizeof shapes[0] };
    char names[NODES * 16] = "[", pod[1024], b[NODES * 16 + 1200], nn[16];
    int placed = 0;

    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){0}, &s, &e), 0);
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){.no_keep = 1}, &t, &e), 0);
    for (int i = 0; i < NODES; i++) {
        snprintf(nn, sizeof nn, "node-%02d", i);
        ASSERT_EQ(put_gpu_node(s, nn, models[i % 3], 2 + 2 * (i % 3), i % 5 == 0, i % 13 == 12),
                  0);
        ASSERT_EQ(put_gpu_node(t, nn, models[i % 3], 2 + 2 * (i % 3), i % 5 == 0, i % 13 == 12),
                  0);
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s\"%s\"", i ? "," : "",
                 nn);
    }
    strcat(names, "]");
    for (int i = 0; i < PODS && !test_failures; i++) {
        const char *const *sh = shapes[i % SHAPES];
        char name[32];
        snprintf(name, sizeof name, "pap-%d", i);
        snprintf(pod, sizeof pod, "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"d\",\"uid\":"
                 "\"%s\"%s%s%s},\"spec\":{%s\"containers\":[{\"name\":\"c\",\"resources\":"
                 "{\"limits\":{%s}}}]}}", name, name,
                 sh[1][0] && strcmp(sh[1], "sel") ? ",\"annotations\":{\"gpusched.io/gpu-type\":\""
                                                  : "",
                 sh[1][0] && strcmp(sh[1], "sel") ? sh[1] : "",
                 sh[1][0] && strcmp(sh[1], "sel") ? "\"}" : "",
                 strcmp(sh[1], "sel") ? "" : "\"nodeSelector\":{\"zone\":\"a\"},", sh[0]);
        snprintf(b, sizeof b, "{\"Pod\":%s,\"NodeNames\":%s,\"Nodes\":null}", pod, names);
        char *f = both(s, t, EXT_MEMO_FILTER, b, i);
        json_t *fj = json_loads(f, 0, NULL);
        const json_t *pass = json_object_get(fj, "NodeNames");
        ASSERT_TRUE(json_is_array(pass));
        if (json_array_size(pass) > 0) {
            char *arr = json_dumps(pass, JSON_COMPACT);
            snprintf(b, sizeof b, "{\"Pod\":%s,\"NodeNames\":%s,\"Nodes\":null}", pod, arr);
            free(arr);
            char *p = both(s, t, EXT_MEMO_PRIORITIZE, b, i);
            json_t *pj = json_loads(p, 0, NULL);
            const char *best = NULL;
            json_int_t top = -1;
            size_t k;
            const json_t *h;
            json_array_foreach(pj, k, h) {
                json_int_t v = json_integer_value(json_object_get(h, "Score"));
                if (v > top)
                    top = v, best = json_string_value(json_object_get(h, "Host"));
            }
            ASSERT_TRUE(best != NULL);
            if (best) {
                bind_both(s, t, name, best);
                placed++;
            }
            json_decref(pj);
            free(p);
        }
        json_decref(fj);
        free(f);
        if (i % 3 == 0) {
            /* /prioritize over every node (an extender asked without its
             * /filter, or after another filter passed them all): nodes that
             * no longer fit must score 0 */
            snprintf(b, sizeof b, "{\"Pod\":%s,\"NodeNames\":%s,\"Nodes\":null}", pod, names);
            free(both(s, t, EXT_MEMO_PRIORITIZE, b, i));
            /* a name the cluster does not know, where the last request had
             * a scored node, and a pod without GPUs: both score 0 (the
             * arrays /prioritize keeps from the last request start empty;
             * both schedulers would share a stale score, so it is checked
             * here, not against the twin) */
            snprintf(b, sizeof b, "{\"Pod\":%s,\"NodeNames\":[\"node-gone\",%s,\"Nodes\":null}",
                     pod, names + 1);
            char *g = both(s, t, EXT_MEMO_PRIORITIZE, b, i);
            static const char gone[] = "[{\"Host\":\"node-gone\",\"Score\":0},";
            ASSERT_TRUE(strncmp(g, gone, sizeof gone - 1) == 0);
            free(g);
            snprintf(b, sizeof b, "{\"Pod\":{\"metadata\":{\"name\":\"cpu-%d\",\"namespace\":\"d\","
                     "\"uid\":\"cpu-%d\"},\"spec\":{\"containers\":[{\"name\":\"c\"}]}},"
                     "\"NodeNames\":%s,\"Nodes\":null}", i, i, names);
            g = both(s, t, EXT_MEMO_PRIORITIZE, b, i);
            ASSERT_TRUE(strstr(g, "\"Score\":0}") != NULL);
            for (const char *q = g; (q = strstr(q, "\"Score\":")) != NULL; q += 8)
                ASSERT_TRUE(q[8] == '0' && q[9] == '}');
            free(g);
        }
        if (i % 11 == 10) { /* a pod ends */
            char who[40];
            snprintf(who, sizeof who, "d/pap-%d", i - 7);
            int r1 = ext_sched_release(s, who, &e), r2 = ext_sched_release(t, who, &e);
            ASSERT_EQ(r1, r2);
        }
        if (i % 29 == 28) { /* a node changes: taint, zone, GPU count */
            int n = i % NODES;
            snprintf(nn, sizeof nn, "node-%02d", n);
            ASSERT_EQ(put_gpu_node(s, nn, models[n % 3], 2 + 2 * ((n + i) % 3), i % 2, i % 3 == 0),
                      put_gpu_node(t, nn, models[n % 3], 2 + 2 * ((n + i) % 3), i % 2, i % 3 == 0));
        }
        if (i % 97 == 96) { /* a node goes and comes back: positions move */
            snprintf(nn, sizeof nn, "node-%02d", (i / 97) % NODES);
            ASSERT_EQ(ext_sched_remove_node(s, nn, &e), 0);
            ASSERT_EQ(ext_sched_remove_node(t, nn, &e), 0);
            int n = (i / 97) % NODES;
            ASSERT_EQ(put_gpu_node(s, nn, models[n % 3], 8, 0, 0), 0);
            ASSERT_EQ(put_gpu_node(t, nn, models[n % 3], 8, 0, 0), 0);
        }
    }
    /* the pattern placed most pods (it is not all "fits nowhere") */
    ASSERT_TRUE(placed > PODS / 2);
    ext_sched_free(s);
    ext_sched_free(t);
}

int test_ext_memo(void)
{
    test_key();
    test_table();
    test_sched();
    test_devices();
    test_shapes();
    test_pod_after_pod();
    test_version();
    return test_failures;
}
