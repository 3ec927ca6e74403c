/* tests/fuzz/fuzz_extender.c - the extender's request parsers (ExtenderArgs,
 * ExtenderBindingArgs, ExtenderPreemptionArgs), the node inventory
 * annotation, the watch event decoder and the saved learned workload (the
 * ConfigMap's and the journal's) and a PodDisruptionBudget on arbitrary
 * bytes. The first byte picks the parser. A saved workload that is taken must come back the same: saved
 * again (no pod is live) and read by a fresh replica, both show the same
 * /debug/workload. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ext/nodes.h"
#include "ext/pdbs.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "kube/watch.h"

/* A replica with one node of two GPU models, A and B. */
static struct ext_sched *replica(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    if (ext_sched_new(&(struct ext_sched_opts){.max_pods = 8}, &s, &e) < 0)
        abort();
    json_t *n = json_pack(
        "{s:{s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}}}", "metadata", "name", "n0", "annotations",
        "gpusched.io/gpu-inventory",
        "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G0\",\"model\":\"A\","
        "\"memory_mib\":1000,\"healthy\":true},{\"index\":1,\"uuid\":\"G1\",\"model\":\"B\","
        "\"memory_mib\":1000,\"healthy\":true}]}",
        "status", "allocatable", "cpu", "4", "memory", "32Gi", "pods", "110");
    if (ext_sched_upsert_node(s, n, &e) < 0)
        abort();
    json_decref(n);
    return s;
}

static int same_json(json_t *a, json_t *b)
{
    int eq = a && b && json_equal(a, b);
    json_decref(a);
    json_decref(b);
    return eq;
}

static void saved_workload(const char *body, size_t len)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    struct ext_sched *s = replica();
    if (doc && ext_sched_workload_seed(s, doc, &e) == 0) {
        json_t *saved = ext_sched_workload_ended(s, (size_t)1 << 30);
        struct ext_sched *next = replica();
        if (!saved || ext_sched_workload_seed(next, saved, &e) < 0 ||
            !same_json(ext_sched_workload(s), ext_sched_workload(next)) ||
            !same_json(ext_sched_workload(s), json_deep_copy(saved)))
            abort();
        json_decref(saved);
        ext_sched_free(next);
    } else if (doc && ext_sched_workload_seed(s, doc, &e) == 0) {
        abort(); /* refused once, taken the second time */
    }
    json_decref(doc);
    ext_sched_free(s);
}

/* A budget taken is there once, marks a pod of its namespace or none, and
 * goes with its key; one refused is not there. */
static void pdb(const char *body, size_t len)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    struct ext_pdbs *b = ext_pdbs_new();
    if (!b)
        abort();
    if (doc && ext_pdbs_upsert(b, doc, &e) == 0) {
        const json_t *md = json_object_get(doc, "metadata");
        json_t *pod = json_pack("{s:{s:O?, s:s, s:O?}}", "metadata", "namespace",
                                json_object_get(md, "namespace"), "name", "p", "labels",
                                json_object_get(json_object_get(json_object_get(doc, "spec"),
                                                                "selector"), "matchLabels"));
        unsigned char viol[2] = {0, 0};
        const json_t *pods[2] = {pod, pod};
        if (ext_pdbs_count(b) != 1 || !pod)
            abort();
        ext_pdbs_mark(b, NULL, 0, pods, 2, viol);
        if (viol[0] > 1 || viol[1] > 1 || viol[0] > viol[1])
            abort(); /* the first takes its budget before the second */
        ext_pdbs_remove(b, json_string_value(json_object_get(md, "namespace")),
                        json_string_value(json_object_get(md, "name")));
        if (ext_pdbs_count(b) != 0)
            abort();
        json_decref(pod);
    } else if (ext_pdbs_count(b) != 0) {
        abort();
    }
    json_decref(doc);
    ext_pdbs_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gs_err e = GS_ERR_INIT;
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] >= 250) {
        saved_workload(body, len);
        return 0;
    }
    if (data[0] >= 245) {
        pdb(body, len);
        return 0;
    }
    switch (data[0] % 5) {
    case 0: {
        struct ext_args a;
        if (ext_args_parse(body, len, &a, &e) == 0) {
            for (int i = 0; i < a.n; i++)
                if (!a.names[i] || !*a.names[i])
                    abort();
            ext_args_clear(&a);
        }
        break;
    }
    case 1: {
        struct ext_bind b;
        if (ext_bind_parse(body, len, &b, &e) == 0)
            ext_bind_clear(&b);
        break;
    }
    case 2: {
        struct ext_preempt p;
        if (ext_preempt_parse(body, len, &p, &e) == 0)
            ext_preempt_clear(&p);
        break;
    }
    case 3: {
        char *s = malloc(len + 1);
        struct core_node_spec spec;
        double t;
        if (!s)
            return 0;
        memcpy(s, body, len);
        s[len] = '\0';
        memset(&spec, 0, sizeof spec);
        if (ext_inventory_parse(s, &spec, &t, &e) == 0 && spec.n_gpus > CORE_MAX_GPUS)
            abort();
        free(s);
        break;
    }
    default: {
        enum kube_event_type t;
        json_t *obj;
        if (kube_watch_decode(body, len, &t, &obj, &e) == 0)
            json_decref(obj);
        break;
    }
    }
    return 0;
}
