/* Unit tests for wh/: AdmissionReview envelopes, validation and mutation
 * decisions, cluster limits from a NodeList, certificates, base64. */
#include <gnutls/x509.h>
#include <stdlib.h>

#include "test.h"
#include "wh/wh_admit.h"
#include "wh/wh_certs.h"
#include "wh/wh_review.h"

static void base64_tests(void)
{
    static const struct { const char *in, *out; } v[] = {
        {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="},
        {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char *s = wh_base64(v[i].in, strlen(v[i].in));
        ASSERT_STREQ(s, v[i].out);
        free(s);
    }
}

static void review_tests(void)
{
    struct wh_review r;
    struct gs_err e = GS_ERR_INIT;
    const char *ok = "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
                     "\"request\":{\"uid\":\"abc\",\"kind\":{\"group\":\"\",\"version\":\"v1\","
                     "\"kind\":\"Pod\"},\"operation\":\"CREATE\",\"namespace\":\"ml\","
                     "\"object\":{\"metadata\":{\"generateName\":\"job-\"}}}}";

    ASSERT_EQ(wh_review_parse(ok, strlen(ok), &r, &e), 0);
    ASSERT_STREQ(r.uid, "abc");
    ASSERT_STREQ(r.kind, "Pod");
    ASSERT_STREQ(r.group, "");
    ASSERT_STREQ(r.operation, "CREATE");
    ASSERT_STREQ(r.ns, "ml");
    ASSERT_STREQ(r.name, "job-");
    ASSERT_TRUE(r.object != NULL);

    json_t *patch = json_pack("[{s:s, s:s, s:s}]", "op", "add", "path", "/a", "value", "b");
    json_t *resp = wh_review_response(&r, 1, 200, NULL, patch, "w1");
    json_t *in = json_object_get(resp, "response");
    ASSERT_STREQ(json_string_value(json_object_get(resp, "apiVersion")), "admission.k8s.io/v1");
    ASSERT_STREQ(json_string_value(json_object_get(in, "uid")), "abc");
    ASSERT_TRUE(json_is_true(json_object_get(in, "allowed")));
    ASSERT_STREQ(json_string_value(json_object_get(in, "patchType")), "JSONPatch");
    ASSERT_STREQ(json_string_value(json_object_get(in, "patch")),
                 "W3sib3AiOiJhZGQiLCJwYXRoIjoiL2EiLCJ2YWx1ZSI6ImIifV0=");
    ASSERT_STREQ(json_string_value(json_array_get(json_object_get(in, "warnings"), 0)), "w1");
    json_decref(resp);
    json_decref(patch);
    resp = wh_review_response(&r, 0, 403, "over quota", NULL, NULL);
    in = json_object_get(resp, "response");
    ASSERT_TRUE(json_is_false(json_object_get(in, "allowed")));
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(in, "status"), "code")), 403);
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(in, "status"), "message")),
                 "over quota");
    ASSERT_TRUE(json_object_get(in, "patch") == NULL);
    ASSERT_TRUE(json_object_get(in, "warnings") == NULL);
    json_decref(resp);
    wh_review_clear(&r);

    static const struct { const char *body, *want; } bad[] = {
        {"", "empty body"},
        {"{", "not JSON"},
        {"{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1beta1\"}",
         "is not supported"},
        {"{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\",\"request\":"
         "{\"uid\":\"u\",\"kind\":{\"kind\":\"Pod\"},\"operation\":\"PATCH\"}}",
         "request.operation: 'PATCH'"},
        {"{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\",\"request\":"
         "{\"uid\":\"u\",\"kind\":{},\"operation\":\"CREATE\"}}",
         "request.kind.kind: missing"},
        {"{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\",\"request\":"
         "{\"uid\":\"u\",\"kind\":{\"kind\":\"Pod\"},\"operation\":\"UPDATE\",\"object\":3}}",
         "request.object: missing for UPDATE"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_EQ(wh_review_parse(bad[i].body, strlen(bad[i].body), &r, &e), -GS_EINVAL);
        ASSERT_CONTAINS(e.msg, bad[i].want);
        ASSERT_TRUE(r.root == NULL);
    }
}

static json_t *pod_json(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    if (!j)
        fprintf(stderr, "bad test JSON: %s\n", text);
    return j;
}

static void admit_tests(void)
{
    struct wh_config c;
    struct gs_err e = GS_ERR_INIT;
    json_t *p, *patch;
    char warn[512];

    memset(&c, 0, sizeof c);
    c.names = *core_names_default();
    c.scheduler_name = "gpu-scheduler";
    c.cluster.max_gpu_mem_mib = 16384;
    c.cluster.max_gpus_per_node = 4;
    ASSERT_EQ(wh_parse_defaults("ml=fgd,cv=spread", &c, &e), 0);
    ASSERT_EQ(c.n_defaults, 2);
    ASSERT_STREQ(c.defaults[1].ns, "cv");
    ASSERT_STREQ(c.defaults[1].policy, "spread");
    ASSERT_EQ(wh_parse_defaults("ml", &c, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "'ml' is not NAMESPACE=POLICY");
    ASSERT_EQ(wh_parse_defaults("ml=Bad Name", &c, &e), -GS_EINVAL);
    ASSERT_EQ(wh_parse_defaults("ml=fgd", &c, &e), 0);

    /* shared memory over the largest GPU, named by container and resource */
    p = pod_json("{\"spec\":{\"containers\":[{\"name\":\"a\"},{\"name\":\"b\",\"resources\":"
                 "{\"limits\":{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"20Gi\"}}}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "containers[1].limits[nvidia.com/gpu-memory]: asks for 20Gi per GPU, "
                           "but the largest GPU in the cluster (unnamed) has 16Gi (container 'b')");
    json_decref(p);
    /* a pod that asks for no GPU is not refused, whatever the GPU parser
     * would say of it (a restartPolicy on an app container, which newer
     * Kubernetes allows); the same pod asking for a GPU is */
    p = pod_json("{\"spec\":{\"containers\":[{\"name\":\"a\",\"restartPolicy\":\"Always\","
                 "\"resources\":{\"limits\":{\"cpu\":\"1\"}}}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), 0);
    json_decref(p);
    p = pod_json("{\"spec\":{\"containers\":[{\"name\":\"a\",\"restartPolicy\":\"Always\","
                 "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "restartPolicy");
    json_decref(p);
    /* the same memory over two GPUs fits */
    p = pod_json("{\"spec\":{\"containers\":[{\"name\":\"b\",\"resources\":{\"limits\":"
                 "{\"nvidia.com/gpu\":\"2\",\"nvidia.com/gpu-memory\":\"20Gi\"}}}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), 0);
    json_decref(p);
    /* more GPUs than a node has, counted over containers */
    p = pod_json("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                 "{\"nvidia.com/gpu\":\"3\"}}},{\"name\":\"b\",\"resources\":{\"limits\":"
                 "{\"nvidia.com/gpu\":\"2\"}}}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "asks for 5 GPUs on one node, but the largest node has 4");
    json_decref(p);
    /* requests without limits, in an init container */
    p = pod_json("{\"spec\":{\"initContainers\":[{\"name\":\"i\",\"resources\":{\"requests\":"
                 "{\"nvidia.com/mig-1g.10gb\":\"1\"}}}],\"containers\":[{\"name\":\"a\"}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "initContainers[0].requests[nvidia.com/mig-1g.10gb]: set without limits");
    json_decref(p);
    /* a GPU share in an init container: refused unless every kubelet is 1.31
     * or newer; whole GPUs there, and shares in app containers, pass */
    static const char *const init_share =
        "{\"spec\":{\"initContainers\":[{\"name\":\"warm\",\"resources\":{\"limits\":"
        "{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-cores\":\"20\"}}}],"
        "\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
        "{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpu-memory\":\"1Gi\"}}}]}}";
    p = pod_json(init_share);
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "initContainers[0].limits[nvidia.com/gpu-cores]: a GPU share in an "
                           "init container fails on kubelets before 1.31");
    ASSERT_CONTAINS(e.msg, "no GPU node's kubelet version is known");
    ASSERT_CONTAINS(e.msg, "(container 'warm')");
    c.cluster.kubelet_minor = 30;
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "the oldest GPU node runs kubelet 1.30");
    c.cluster.kubelet_minor = 31;
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), 0);
    c.cluster.kubelet_minor = 0;
    json_decref(p);
    p = pod_json("{\"spec\":{\"initContainers\":[{\"name\":\"i\",\"resources\":{\"limits\":"
                 "{\"nvidia.com/vcuda-memory\":\"4\",\"nvidia.com/vcuda-core\":\"20\"}}}],"
                 "\"containers\":[{\"name\":\"a\"}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "initContainers[0].limits[nvidia.com/vcuda-memory]");
    ASSERT_EQ(wh_mutate_pod(&c, p, "ml", "alice", &patch, warn, sizeof warn, &e), 0);
    char *ptext = json_dumps(patch, 0); /* left in the form the user wrote, for the message */
    ASSERT_TRUE(ptext && !strstr(ptext, "/spec/initContainers/0/resources"));
    free(ptext);
    json_decref(patch);
    json_decref(p);
    p = pod_json("{\"spec\":{\"initContainers\":[{\"name\":\"i\",\"resources\":{\"limits\":"
                 "{\"nvidia.com/gpu\":\"2\"}}}],\"containers\":[{\"name\":\"a\",\"resources\":"
                 "{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), 0);
    json_decref(p);

    /* quota: a request alone over the namespace's total */
    struct core_quotas *qs = core_quotas_new();
    struct core_quota q;
    json_t *qj = pod_json("{\"apiVersion\":\"gpusched.io/v1\",\"kind\":\"GPUQuota\",\"metadata\":"
                          "{\"name\":\"q\",\"namespace\":\"ml\"},\"spec\":{\"total\":"
                          "{\"compute\":\"500m\"}}}");
    ASSERT_EQ(core_quota_parse(qj, &q, &e), 0);
    ASSERT_EQ(core_quotas_put(qs, &q, &e), 0);
    json_decref(qj);
    p = pod_json("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                 "{\"nvidia.com/gpu\":\"1\"}}}]}}");
    ASSERT_EQ(wh_validate_pod(&c, qs, p, "ml", &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "GPUQuota ml/q: GPU compute (GPUs): the pod asks for 1");
    ASSERT_EQ(wh_validate_pod(&c, qs, p, "dev", &e), 0);
    json_decref(p);
    core_quotas_free(qs);

    /* whole GPUs against a memory quota: the least memory of a GPU the pod
     * accepts, from the cluster's models */
    qs = core_quotas_new();
    qj = pod_json("{\"apiVersion\":\"gpusched.io/v1\",\"kind\":\"GPUQuota\",\"metadata\":"
                  "{\"name\":\"mem\",\"namespace\":\"ml\"},\"spec\":{\"total\":"
                  "{\"memory\":\"40Gi\"}}}");
    ASSERT_EQ(core_quota_parse(qj, &q, &e), 0);
    ASSERT_EQ(core_quotas_put(qs, &q, &e), 0);
    json_decref(qj);
    static const char *const whole3 =
        "{\"metadata\":{\"annotations\":{%s}},\"spec\":{\"containers\":[{\"name\":\"a\","
        "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"3\"}}}]}}";
    char wdoc[512];
    snprintf(wdoc, sizeof wdoc, whole3, "");
    p = pod_json(wdoc);
    ASSERT_EQ(wh_validate_pod(&c, qs, p, "ml", &e), 0); /* no model known: not counted */
    struct wh_cluster one = {0};
    struct wh_cluster saved = c.cluster;
    json_t *nl = pod_json(
        "{\"items\":[{\"metadata\":{\"name\":\"t\",\"labels\":{\"nvidia.com/gpu.product\":"
        "\"Tesla-T4\",\"nvidia.com/gpu.memory\":\"15360\"}},\"status\":{\"capacity\":"
        "{\"nvidia.com/gpu\":\"4\"}}},{\"metadata\":{\"name\":\"a\",\"labels\":"
        "{\"nvidia.com/gpu.product\":\"A100-SXM4-80GB\",\"nvidia.com/gpu.memory\":\"81920\"}},"
        "\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"8\"}}}]}");
    ASSERT_EQ(wh_cluster_from_nodes(nl, core_names_default(), &one, &e), 0);
    json_decref(nl);
    ASSERT_EQ(one.n_models, 2);
    c.cluster = one;
    ASSERT_EQ(wh_validate_pod(&c, qs, p, "ml", &e), -GS_ENOFIT); /* 3 x 15Gi > 40Gi */
    ASSERT_CONTAINS(e.msg, "GPUQuota ml/mem: GPU memory: the pod asks for 45Gi, 0Mi already "
                           "in use, limit 40Gi (whole GPUs count all their memory, and the smallest "
                           "GPU the pod accepts has 15Gi)");
    ASSERT_EQ(wh_validate_pod(&c, qs, p, "dev", &e), 0);
    json_decref(p);
    snprintf(wdoc, sizeof wdoc, whole3, "\"gpusched.io/gpu-type\":\"A100\"");
    p = pod_json(wdoc); /* held to A100: 3 x 80Gi */
    ASSERT_EQ(wh_validate_pod(&c, qs, p, "ml", &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "asks for 240Gi");
    json_decref(p);
    snprintf(wdoc, sizeof wdoc, whole3, "\"gpusched.io/gpu-type\":\"V100\"");
    p = pod_json(wdoc); /* a model the cluster lacks: nothing known to count */
    ASSERT_EQ(wh_validate_pod(&c, qs, p, "ml", &e), 0);
    json_decref(p);
    /* a model of unknown memory (the extender counts it 0) between the two:
     * nothing to count */
    c.cluster.models[2] = c.cluster.models[1];
    c.cluster.models[1] = (struct wh_model){"Unlabelled", 0};
    c.cluster.n_models = 3;
    snprintf(wdoc, sizeof wdoc, whole3, "");
    p = pod_json(wdoc);
    ASSERT_EQ(wh_validate_pod(&c, qs, p, "ml", &e), 0);
    json_decref(p);
    c.cluster = one;
    c.cluster.models_overflow = 1; /* more models than kept: none counted */
    snprintf(wdoc, sizeof wdoc, whole3, "");
    p = pod_json(wdoc);
    ASSERT_EQ(wh_validate_pod(&c, qs, p, "ml", &e), 0);
    json_decref(p);
    /* merging keeps each model once, with its smallest memory */
    struct wh_cluster m = one;
    one.models[0].mem_mib = 15000;
    wh_cluster_merge(&m, &one);
    ASSERT_EQ(m.n_models, 2);
    ASSERT_EQ(m.models[0].mem_mib, 15000);
    ASSERT_TRUE(wh_cluster_same(&m, &one));
    one.models[1].mem_mib = 1;
    ASSERT_TRUE(!wh_cluster_same(&m, &one));
    c.cluster = saved;
    core_quotas_free(qs);

    /* mutation: scheduler, canonical request, default policy; existing
     * annotations get one op per key with '/' escaped */
    p = pod_json("{\"metadata\":{\"annotations\":{\"x\":\"y\"}},\"spec\":{\"schedulerName\":"
                 "\"default-scheduler\",\"containers\":[{\"name\":\"a\",\"resources\":"
                 "{\"limits\":{\"nvidia.com/mig-1g.10gb\":\"2\"}}}]}}");
    ASSERT_EQ(wh_mutate_pod(&c, p, "ml", "alice", &patch, warn, sizeof warn, &e), 0);
    char *s = json_dumps(patch, JSON_COMPACT | JSON_SORT_KEYS);
    ASSERT_STREQ(s, "[{\"op\":\"add\",\"path\":\"/spec/schedulerName\",\"value\":\"gpu-scheduler\"},"
                    "{\"op\":\"add\",\"path\":\"/metadata/annotations/gpusched.io~1request\","
                    "\"value\":\"kind=mig,profile=1g.10gb,count=2\"},"
                    "{\"op\":\"add\",\"path\":\"/metadata/annotations/gpusched.io~1policy\","
                    "\"value\":\"fgd\"},"
                    "{\"op\":\"add\",\"path\":\"/metadata/labels\",\"value\":"
                    "{\"gpusched.io/gpu-pod\":\"true\"}}]");
    free(s);
    json_decref(patch);
    json_decref(p);
    /* no metadata at all: the patch creates it */
    p = pod_json("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                 "{\"nvidia.com/gpu\":\"1\"}}}]}}");
    c.scheduler_name = "";
    ASSERT_EQ(wh_mutate_pod(&c, p, "dev", "alice", &patch, warn, sizeof warn, &e), 0);
    s = json_dumps(patch, JSON_COMPACT | JSON_SORT_KEYS);
    ASSERT_STREQ(s, "[{\"op\":\"add\",\"path\":\"/metadata\",\"value\":{}},"
                    "{\"op\":\"add\",\"path\":\"/metadata/annotations\",\"value\":"
                    "{\"gpusched.io/request\":\"kind=whole,gpus=1\"}},"
                    "{\"op\":\"add\",\"path\":\"/metadata/labels\",\"value\":"
                    "{\"gpusched.io/gpu-pod\":\"true\"}}]");
    free(s);
    json_decref(patch);
    json_decref(p);
    /* assignment annotations on a pod created without a node by a user who may
     * not write them: removed, with a warning; kept with a node, for an
     * assigner, and without --assigners */
    static const char copied[] =
        "{\"metadata\":{\"annotations\":{\"gpusched.io/node\":\"a\",\"gpusched.io/gpu-uuids\":"
        "\"GPU-0\",\"keep\":\"me\"}},\"spec\":{%s\"containers\":[{\"name\":\"a\","
        "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}";
    char doc[512];
    snprintf(doc, sizeof doc, copied, "");
    p = pod_json(doc);
    c.assigners = "extender,admin";
    ASSERT_EQ(wh_mutate_pod(&c, p, "dev", "alice", &patch, warn, sizeof warn, &e), 0);
    s = json_dumps(patch, JSON_COMPACT | JSON_SORT_KEYS);
    ASSERT_STREQ(s, "[{\"op\":\"remove\",\"path\":\"/metadata/annotations/gpusched.io~1node\"},"
                    "{\"op\":\"remove\",\"path\":\"/metadata/annotations/gpusched.io~1gpu-uuids\"},"
                    "{\"op\":\"add\",\"path\":\"/metadata/annotations/gpusched.io~1request\","
                    "\"value\":\"kind=whole,gpus=1\"},"
                    "{\"op\":\"add\",\"path\":\"/metadata/labels\",\"value\":"
                    "{\"gpusched.io/gpu-pod\":\"true\"}}]");
    free(s);
    json_decref(patch);
    ASSERT_STREQ(warn, "GPU assignment removed (gpusched.io/node and 1 more): the extender "
                       "writes it at bind; copied from another pod?");
    ASSERT_EQ(wh_mutate_pod(&c, p, "dev", "admin", &patch, warn, sizeof warn, &e), 0);
    ASSERT_EQ(json_array_size(patch), 2);
    ASSERT_STREQ(warn, "");
    json_decref(patch);
    /* a warning buffer too small is cut, not overrun */
    ASSERT_EQ(wh_mutate_pod(&c, p, "dev", "alice", &patch, warn, 10, &e), 0);
    ASSERT_EQ(json_array_size(patch), 4);
    ASSERT_EQ(strlen(warn), 9);
    json_decref(patch);
    c.assigners = NULL;
    ASSERT_EQ(wh_mutate_pod(&c, p, "dev", "alice", &patch, NULL, 0, &e), 0);
    ASSERT_EQ(json_array_size(patch), 2);
    json_decref(patch);
    json_decref(p);
    c.assigners = "extender,admin";
    snprintf(doc, sizeof doc, copied, "\"nodeName\":\"a\",");
    p = pod_json(doc);
    ASSERT_EQ(wh_mutate_pod(&c, p, "dev", "alice", &patch, warn, sizeof warn, &e), 0);
    ASSERT_EQ(json_array_size(patch), 2);
    ASSERT_STREQ(warn, "");
    json_decref(patch);
    json_decref(p);
    c.assigners = NULL;
    /* a broken pod gets no patch and an error */
    p = pod_json("{\"spec\":{\"containers\":[]}}");
    ASSERT_EQ(wh_mutate_pod(&c, p, "dev", "alice", &patch, warn, sizeof warn, &e), -GS_EINVAL);
    ASSERT_TRUE(patch == NULL);
    json_decref(p);
}

/* A pod of these limits asks for no GPU: created without the GPU pod label
 * it passes and gets none, and a user may remove the label from it. */
static void no_gpu_label_checks(const struct wh_config *c, const char *limits)
{
    struct gs_err e = GS_ERR_INIT;
    char doc[512], warn[512];
    json_t *patch;
    snprintf(doc, sizeof doc, "{\"metadata\":{\"labels\":{\"gpusched.io/gpu-pod\":\"true\"}},"
             "\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":%s}}]}}",
             limits);
    json_t *p = pod_json(doc), *old = json_deep_copy(p);
    json_object_clear(json_object_get(json_object_get(p, "metadata"), "labels"));
    ASSERT_EQ(wh_validate_pod(c, NULL, p, "ml", &e), 0);
    ASSERT_EQ(wh_check_assignment(c, old, p, "alice", &e), 0);
    ASSERT_EQ(wh_mutate_pod(c, p, "ml", "alice", &patch, warn, sizeof warn, &e), 0);
    ASSERT_EQ(json_array_size(patch), 0);
    json_decref(patch);
    json_decref(old);
    json_decref(p);
}

/* What /mutate leaves on a GPU pod, which validation requires: a tkestack
 * container rewritten, and with --assigners the GPU pod label; the label
 * cannot be removed by a user who may not write assignments. */
static void mutated_tests(void)
{
    struct wh_config c;
    struct gs_err e = GS_ERR_INIT;
    json_t *p, *patch, *old;
    char warn[512];

    memset(&c, 0, sizeof c);
    c.names = *core_names_default();
    p = pod_json("{\"spec\":{\"containers\":[{\"name\":\"cuda\",\"resources\":{\"limits\":"
                 "{\"nvidia.com/vcuda-core\":\"50\",\"nvidia.com/vcuda-memory\":\"8\"}}}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "containers[0].limits[nvidia.com/vcuda-core]: not rewritten as "
                           "nvidia.com/gpu, so kubelet would start the container without a GPU: "
                           "the mutating webhook (/mutate) did not run on this pod");
    ASSERT_CONTAINS(e.msg, "create the pod again (container 'cuda')");
    /* once /mutate's patch is applied, the same pod passes */
    ASSERT_EQ(wh_mutate_pod(&c, p, "ml", "alice", &patch, warn, sizeof warn, &e), 0);
    json_t *lim = json_object_get(json_object_get(json_array_get(json_object_get(
        json_object_get(p, "spec"), "containers"), 0), "resources"), "limits");
    json_object_clear(lim);
    json_object_set_new(lim, "nvidia.com/gpu", json_string("1"));
    json_object_set_new(lim, "nvidia.com/gpu-memory", json_string("2048Mi"));
    json_object_set_new(lim, "nvidia.com/gpu-cores", json_string("50"));
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), 0);
    json_decref(patch);
    /* with --assigners, a GPU pod needs the label /mutate sets */
    c.assigners = "extender";
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "metadata.labels[gpusched.io/gpu-pod]: missing, so no update of "
                           "this GPU pod would be checked (webhook --assigners)");
    ASSERT_EQ(wh_mutate_pod(&c, p, "ml", "alice", &patch, warn, sizeof warn, &e), 0);
    char *text = json_dumps(patch, JSON_COMPACT);
    ASSERT_CONTAINS(text, "{\"op\":\"add\",\"path\":\"/metadata/labels\",\"value\":"
                          "{\"gpusched.io/gpu-pod\":\"true\"}}");
    free(text);
    json_decref(patch);
    json_t *meta = json_object();
    json_object_set_new(p, "metadata", meta);
    json_object_set_new(meta, "labels", json_pack("{s:s}", "app", "x"));
    ASSERT_EQ(wh_mutate_pod(&c, p, "ml", "alice", &patch, warn, sizeof warn, &e), 0);
    text = json_dumps(patch, JSON_COMPACT); /* one op per key with labels present */
    ASSERT_CONTAINS(text, "{\"op\":\"add\",\"path\":\"/metadata/labels/gpusched.io~1gpu-pod\","
                          "\"value\":\"true\"}");
    free(text);
    json_decref(patch);
    json_object_set_new(json_object_get(meta, "labels"), "gpusched.io/gpu-pod",
                        json_string("true"));
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), 0);
    ASSERT_EQ(wh_mutate_pod(&c, p, "ml", "alice", &patch, warn, sizeof warn, &e), 0);
    text = json_dumps(patch, JSON_COMPACT); /* already there: left alone */
    ASSERT_TRUE(text && !strstr(text, "labels"));
    free(text);
    json_decref(patch);
    /* an update that removes it: refused for alice, allowed for the extender */
    old = json_deep_copy(p);
    json_object_del(json_object_get(meta, "labels"), "gpusched.io/gpu-pod");
    ASSERT_EQ(wh_check_assignment(&c, old, p, "alice", &e), -GS_EPERM);
    ASSERT_CONTAINS(e.msg, "metadata.labels[gpusched.io/gpu-pod]: marks a GPU pod, whose "
                           "updates this webhook checks; user 'alice' may not remove it");
    ASSERT_EQ(wh_check_assignment(&c, old, p, "extender", &e), 0);
    ASSERT_EQ(wh_check_assignment(&c, p, old, "alice", &e), 0); /* added back */
    ASSERT_EQ(wh_check_assignment(&c, old, old, "alice", &e), 0);
    json_decref(old);
    json_decref(p);
    /* a CPU-only pod: no label asked, none set, and its label is the user's */
    no_gpu_label_checks(&c, "{\"cpu\":\"1\"}");
    /* the request annotation says /mutate ran (any version of it): a pod with
     * it passes with a tkestack container (replicas that differ on the
     * kubelets), but not without the label, since its author may have written
     * the annotation to look mutated (a replica of a version before the label
     * gets the pod refused, "create the pod again", while it is upgraded) */
    p = pod_json("{\"metadata\":{\"annotations\":{\"gpusched.io/request\":"
                 "\"kind=shared,gpus=1,memory-mib=8192,milli=500\"}},\"spec\":{\"containers\":"
                 "[{\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/vcuda-core\":\"50\","
                 "\"nvidia.com/vcuda-memory\":\"32\"}}}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "metadata.labels[gpusched.io/gpu-pod]: missing");
    json_object_set_new(json_object_get(p, "metadata"), "labels",
                        json_pack("{s:s}", "gpusched.io/gpu-pod", "true"));
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), 0);
    json_decref(p);
    /* gpu: 0 asks for no GPU: no label asked or set, and removing one is free */
    no_gpu_label_checks(&c, "{\"nvidia.com/gpu\":\"0\"}");
    /* renamed: the label follows --annotation-prefix */
    c.names.annot_prefix = "sched.example.com/";
    p = pod_json("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
                 "{\"nvidia.com/gpu\":\"1\"}}}]}}");
    ASSERT_EQ(wh_validate_pod(&c, NULL, p, "ml", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "metadata.labels[sched.example.com/gpu-pod]: missing");
    json_decref(p);
}

static void cluster_tests(void)
{
    struct wh_cluster cl;
    struct gs_err e = GS_ERR_INIT;
    json_t *nl = pod_json(
        "{\"items\":[{\"metadata\":{\"name\":\"n1\",\"annotations\":{\"gpusched.io/gpu-inventory\":"
        "\"{\\\"version\\\":1,\\\"gpus\\\":[{\\\"index\\\":0,\\\"uuid\\\":\\\"GPU-a\\\","
        "\\\"model\\\":\\\"H100\\\",\\\"memory_mib\\\":81559,\\\"healthy\\\":true},"
        "{\\\"index\\\":1,\\\"uuid\\\":\\\"GPU-b\\\",\\\"model\\\":\\\"H100\\\","
        "\\\"memory_mib\\\":81559,\\\"healthy\\\":true}]}\"}}},"
        "{\"metadata\":{\"name\":\"n2\",\"labels\":{\"nvidia.com/gpu.product\":\"Tesla-T4\","
        "\"nvidia.com/gpu.memory\":\"15360\"}},\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"4\"}}},"
        "{\"metadata\":{\"name\":\"cpu-only\"}}]}");
    ASSERT_EQ(wh_cluster_from_nodes(nl, core_names_default(), &cl, &e), 0);
    ASSERT_EQ(cl.max_gpu_mem_mib, 81559);
    ASSERT_STREQ(cl.max_gpu_model, "H100");
    ASSERT_EQ(cl.max_gpus_per_node, 4);
    ASSERT_EQ(cl.kubelet_minor, 0);
    json_decref(nl);
    /* the oldest GPU node's kubelet counts; a version that is not 1.x is not
     * known; a node without GPUs (a Windows or a virtual kubelet's) runs no
     * GPU pod, whatever its kubelet */
#define GPUS "\"capacity\":{\"nvidia.com/gpu\":\"1\"},"
    nl = pod_json("{\"items\":[{\"metadata\":{\"name\":\"a\"},\"status\":{" GPUS "\"nodeInfo\":"
                  "{\"kubeletVersion\":\"v1.31.2\"}}},{\"metadata\":{\"name\":\"b\"},"
                  "\"status\":{" GPUS "\"nodeInfo\":{\"kubeletVersion\":\"v1.27.3-eks-a5565ad\"}}},"
                  "{\"metadata\":{\"name\":\"c\"},\"status\":{" GPUS "\"nodeInfo\":"
                  "{\"kubeletVersion\":\"v2.0\"}}},{\"metadata\":{\"name\":\"win\"},"
                  "\"status\":{\"nodeInfo\":{\"kubeletVersion\":\"v1.19.10-vk-1\"}}}]}");
#undef GPUS
    ASSERT_EQ(wh_cluster_from_nodes(nl, core_names_default(), &cl, &e), 0);
    ASSERT_EQ(cl.kubelet_minor, 27);
    json_decref(nl);
    /* a node whose GPUs cannot be read still tells its kubelet */
    nl = pod_json("{\"metadata\":{\"name\":\"bad\",\"labels\":{\"nvidia.com/gpu.memory\":"
                  "\"lots\"}},\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"1\"},"
                  "\"nodeInfo\":{\"kubeletVersion\":\"v1.20.2\"}}}");
    ASSERT_EQ(wh_node_gpus(nl, core_names_default(), &cl, &e), -GS_EINVAL);
    ASSERT_EQ(cl.kubelet_minor, 20);
    ASSERT_EQ(cl.max_gpus_per_node, 0);
    json_decref(nl);
    nl = pod_json("{\"items\":[{\"metadata\":{\"name\":\"bad\",\"labels\":{\"nvidia.com/gpu.memory\":"
                  "\"lots\"}},\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"1\"}}}]}");
    ASSERT_EQ(wh_cluster_from_nodes(nl, core_names_default(), &cl, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "items[0]");
    ASSERT_CONTAINS(e.msg, "nvidia.com/gpu.memory");
    json_decref(nl);
    nl = pod_json("{\"kind\":\"Node\"}");
    ASSERT_EQ(wh_cluster_from_nodes(nl, core_names_default(), &cl, &e), -GS_EINVAL);
    json_decref(nl);
}

/* Imports the PEM CA and certificate into *ca and *crt (to deinit) and
 * checks that the CA signed the certificate. */
static void import_verified(const char *ca_pem, const char *crt_pem, gnutls_x509_crt_t *ca,
                            gnutls_x509_crt_t *crt)
{
    gnutls_datum_t d = {(unsigned char *)ca_pem, (unsigned)strlen(ca_pem)};
    unsigned status = 1;
    ASSERT_EQ(gnutls_x509_crt_init(ca), 0);
    ASSERT_EQ(gnutls_x509_crt_init(crt), 0);
    ASSERT_EQ(gnutls_x509_crt_import(*ca, &d, GNUTLS_X509_FMT_PEM), 0);
    d = (gnutls_datum_t){(unsigned char *)crt_pem, (unsigned)strlen(crt_pem)};
    ASSERT_EQ(gnutls_x509_crt_import(*crt, &d, GNUTLS_X509_FMT_PEM), 0);
    ASSERT_EQ(gnutls_x509_crt_verify(*crt, ca, 1, 0, &status), 0);
    ASSERT_EQ(status, 0);
}

static void certs_tests(void)
{
    struct wh_certs c;
    struct gs_err e = GS_ERR_INIT;
    struct wh_certs_opts o = {.service = "wh", .ns = "sys", .days = 2, .n_ips = 1,
                              .ips = {"::1"}};
    gnutls_x509_crt_t ca, crt;

    ASSERT_EQ(wh_certs_generate(&o, &c, &e), 0);
    import_verified(c.ca_crt, c.tls_crt, &ca, &crt);
    ASSERT_TRUE(gnutls_x509_crt_check_hostname(crt, "wh.sys.svc"));
    ASSERT_TRUE(gnutls_x509_crt_check_hostname(crt, "wh.sys.svc.cluster.local"));
    ASSERT_TRUE(!gnutls_x509_crt_check_hostname(crt, "other.sys.svc"));
    ASSERT_TRUE(gnutls_x509_crt_get_expiration_time(crt) - time(NULL) <= 2 * 86400);
    gnutls_x509_crt_deinit(ca);
    gnutls_x509_crt_deinit(crt);
    ASSERT_TRUE(strncmp(c.tls_key, "-----BEGIN", 10) == 0);
    char *b = wh_base64(c.ca_crt, strlen(c.ca_crt));
    ASSERT_STREQ(c.ca_bundle, b);
    free(b);

    /* a renewal signed by the same CA: the same CA out, a new key, verified
     * by the first CA; only a certificate or only a key is refused */
    struct wh_certs r;
    struct wh_certs_opts ro = o;
    ro.ca_crt = c.ca_crt;
    ro.ca_key = c.ca_key;
    ASSERT_EQ(wh_certs_generate(&ro, &r, &e), 0);
    ASSERT_STREQ(r.ca_crt, c.ca_crt);
    ASSERT_STREQ(r.ca_bundle, c.ca_bundle);
    ASSERT_TRUE(strcmp(r.tls_key, c.tls_key) != 0);
    import_verified(c.ca_crt, r.tls_crt, &ca, &crt);
    gnutls_x509_crt_deinit(ca);
    gnutls_x509_crt_deinit(crt);
    wh_certs_free(&r);
    ro.ca_key = NULL;
    ASSERT_EQ(wh_certs_generate(&ro, &r, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "both its certificate and its key");
    ro.ca_key = c.tls_key; /* the serving pair is no CA */
    ro.ca_crt = c.tls_crt;
    ASSERT_EQ(wh_certs_generate(&ro, &r, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "not a CA certificate");
    wh_certs_free(&c);

    o.days = 0;
    ASSERT_EQ(wh_certs_generate(&o, &c, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "--days");
    o.days = 1;
    o.ips[0] = "300.1.1.1";
    ASSERT_EQ(wh_certs_generate(&o, &c, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "'300.1.1.1' is not an IP address");
    ASSERT_TRUE(c.tls_crt == NULL);
}

int test_wh(void)
{
    base64_tests();
    review_tests();
    admit_tests();
    mutated_tests();
    cluster_tests();
    certs_tests();
    return 0;
}
