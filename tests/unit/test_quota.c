/* Unit tests for core/quota: parsing GPUQuota objects and files, charging
 * usage, the reasons a pod is refused, admission of a request alone. */
#include <stdlib.h>

#include "core/cluster.h"
#include "core/quota.h"
#include "kube/yaml.h"
#include "test.h"

static int parse_text(const char *text, struct core_quota *q, struct gs_err *e)
{
    json_t *j = json_loads(text, 0, NULL);
    int rc = core_quota_parse(j, q, e);
    json_decref(j);
    return rc;
}

#define QHEAD "{\"apiVersion\":\"gpusched.io/v1\",\"kind\":\"GPUQuota\",\"metadata\":" \
              "{\"name\":\"team\",\"namespace\":\"ml\"},\"spec\":"

static void parse_tests(void)
{
    struct core_quota q;
    struct gs_err e = GS_ERR_INIT;

    ASSERT_EQ(parse_text(QHEAD "{\"total\":{\"gpus\":8,\"memory\":\"320Gi\",\"compute\":\"6.5\"},"
                               "\"models\":[{\"model\":\"H100\",\"gpus\":\"4\"},"
                               "{\"model\":\"T4\",\"memory\":\"64Gi\"}]}}",
                         &q, &e),
              0);
    ASSERT_STREQ(q.ns, "ml");
    ASSERT_STREQ(q.name, "team");
    ASSERT_EQ(q.total.gpus, 8);
    ASSERT_EQ(q.total.mem_mib, 320 * 1024);
    ASSERT_EQ(q.total.milli, 6500);
    ASSERT_EQ(q.n_models, 2);
    ASSERT_STREQ(q.models[0].model, "H100");
    ASSERT_EQ(q.models[0].lim.gpus, 4);
    ASSERT_EQ(q.models[0].lim.mem_mib, CORE_QUOTA_NONE);
    ASSERT_EQ(q.models[1].lim.mem_mib, 64 * 1024);

    /* zero is a real limit, not "unset" */
    ASSERT_EQ(parse_text(QHEAD "{\"total\":{\"gpus\":0}}}", &q, &e), 0);
    ASSERT_EQ(q.total.gpus, 0);

    static const struct { const char *json, *want; } bad[] = {
        {QHEAD "{\"total\":{\"gpu\":4}}}", "GPUQuota ml/team: spec.total.gpu: unknown field"},
        {QHEAD "{\"total\":{\"gpus\":-1}}}", "spec.total.gpus: '-1' is negative"},
        {QHEAD "{\"total\":{\"gpus\":\"1.5\"}}}", "not a whole number of GPUs"},
        {QHEAD "{\"total\":{\"memory\":\"lots\"}}}", "spec.total.memory: 'lots' is not a quantity"},
        {QHEAD "{\"total\":{\"memory\":true}}}", "spec.total.memory: must be a quantity"},
        {QHEAD "{\"total\":{}}}", "spec: sets no limit"},
        {QHEAD "{\"models\":[{\"gpus\":1}]}}", "spec.models[0].model: missing"},
        {QHEAD "{\"models\":[{\"model\":\"T4\"}]}}", "spec.models[0]: sets no limit"},
        {QHEAD "{\"models\":[{\"model\":\"T4\",\"gpus\":1},{\"model\":\"t4\",\"gpus\":2}]}}",
         "spec.models[1].model: 't4' is listed twice"},
        {QHEAD "{\"models\":{}}}", "spec.models: must be a list"},
        {QHEAD "{\"limits\":{}}}", "spec.limits: unknown field"},
        {QHEAD "7}", "spec: missing"},
        {"{\"apiVersion\":\"v1\",\"kind\":\"GPUQuota\"}", "apiVersion: 'v1' is not in group"},
        {"{\"apiVersion\":\"gpusched.io/v1\",\"kind\":\"Pod\"}", "kind: 'Pod' is not GPUQuota"},
        {"{\"apiVersion\":\"gpusched.io/v1\",\"kind\":\"GPUQuota\",\"metadata\":{\"name\":\"x\"}}",
         "metadata.namespace: missing"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_EQ(parse_text(bad[i].json, &q, &e), -GS_EINVAL);
        ASSERT_CONTAINS(e.msg, bad[i].want);
    }
}

struct bad_log {
    int n;
    char last[600];
};

static void on_bad(void *ud, int index, const struct gs_err *e)
{
    struct bad_log *b = ud;
    b->n++;
    snprintf(b->last, sizeof b->last, "%d: %s", index, e->msg);
}

static int parse_doc_text(const char *text, struct core_quota **qs, int *n, struct bad_log *b,
                          struct gs_err *e)
{
    json_t *doc;
    if (kube_yaml_parse(text, strlen(text), &doc, e) < 0)
        return -GS_EINVAL;
    int rc = core_quota_parse_doc(doc, qs, n, b ? on_bad : NULL, b, e);
    json_decref(doc);
    return rc;
}

static void file_tests(void)
{
    struct core_quota *qs;
    int n;
    struct gs_err e = GS_ERR_INIT;
    struct bad_log b = {0, ""};
    const char *yaml =
        "# two quotas and a broken one\n"
        "- apiVersion: gpusched.io/v1\n"
        "  kind: GPUQuota\n"
        "  metadata: {name: a, namespace: ml}\n"
        "  spec:\n"
        "    total: {gpus: 4, memory: 64Gi}\n"
        "- apiVersion: gpusched.io/v1\n"
        "  kind: GPUQuota\n"
        "  metadata: {name: broken, namespace: ml}\n"
        "  spec: {total: {gpus: many}}\n"
        "- apiVersion: gpusched.io/v1\n"
        "  kind: GPUQuota\n"
        "  metadata: {name: b, namespace: cv}\n"
        "  spec:\n"
        "    models:\n"
        "    - {model: T4, compute: 1.5}\n";

    ASSERT_EQ(parse_doc_text(yaml, &qs, &n, &b, &e), 0);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(b.n, 1);
    ASSERT_CONTAINS(b.last, "1: GPUQuota ml/broken: spec.total.gpus: 'many' is not a quantity");
    ASSERT_STREQ(qs[0].name, "a");
    ASSERT_EQ(qs[0].total.mem_mib, 65536);
    ASSERT_STREQ(qs[1].ns, "cv");
    ASSERT_EQ(qs[1].models[0].lim.milli, 1500); /* a YAML real */
    free(qs);

    /* a List (kubectl get -o json) and a single object */
    const char *list = "{\"kind\":\"List\",\"items\":[" QHEAD "{\"total\":{\"gpus\":3}}}]}";
    ASSERT_EQ(parse_doc_text(list, &qs, &n, NULL, &e), 0);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(qs[0].total.gpus, 3);
    free(qs);
    const char *one = QHEAD "{\"total\":{\"gpus\":2}}}";
    ASSERT_EQ(parse_doc_text(one, &qs, &n, NULL, &e), 0);
    ASSERT_EQ(n, 1);
    free(qs);

    /* not a list */
    ASSERT_EQ(parse_doc_text("just text\n", &qs, &n, NULL, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "expected a list of GPUQuota objects");
    ASSERT_EQ(parse_doc_text("{\"items\": 3}", &qs, &n, NULL, &e), -GS_EINVAL);
}

struct rows {
    int n;
    int64_t h100_used;
};

static void row_fn(void *ud, const struct core_quota_row *row)
{
    struct rows *r = ud;
    r->n++;
    if (strcmp(row->model, "h100") == 0)
        r->h100_used = row->used.gpus;
}

static void use_fn(void *ud, const char *ns, const char *model, const struct core_quota_limits *u)
{
    (void)ns, (void)model, (void)u;
    (*(int *)ud)++;
}

static void sum_fn(void *ud, const char *ns, const char *model, const struct core_quota_limits *u)
{
    (void)ns, (void)model;
    *(int64_t *)ud += u->mem_mib;
}

static void accounting_tests(void)
{
    struct core_quotas *s = core_quotas_new();
    struct core_quota q;
    struct gs_err e = GS_ERR_INIT;
    struct core_quota_use h100 = {"NVIDIA-H100-80GB-HBM3", 2, 2 * 81920, 2000};
    struct core_quota_use t4 = {"Tesla-T4", 0, 8192, 500};

    ASSERT_EQ(parse_text(QHEAD "{\"total\":{\"compute\":\"4.8\"},\"models\":[{\"model\":\"h100\","
                               "\"gpus\":4},{\"model\":\"T4\",\"memory\":\"16Gi\"}]}}",
                         &q, &e),
              0);
    ASSERT_EQ(core_quotas_put(s, &q, &e), 0);
    ASSERT_EQ(core_quotas_count(s), 1);

    /* 2 H100 fit, then 2 more fit exactly, then one more does not */
    ASSERT_EQ(core_quotas_check(s, "ml", &h100, 1, &e), 0);
    ASSERT_EQ(core_quotas_charge(s, "ml", &h100, 1, 1, &e), 0);
    ASSERT_EQ(core_quotas_check(s, "ml", &h100, 1, &e), 0);
    ASSERT_EQ(core_quotas_charge(s, "ml", &h100, 1, 1, &e), 0);
    struct core_quota_use one = {"NVIDIA-H100-80GB-HBM3", 1, 81920, 1000};
    ASSERT_EQ(core_quotas_check(s, "ml", &one, 1, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "GPUQuota ml/team: GPU compute (GPUs): the pod asks for 1, 4 already "
                           "in use, limit 4.8");
    struct core_quota_use gpu_only = {"NVIDIA-H100-80GB-HBM3", 1, 0, 0};
    ASSERT_EQ(core_quotas_check(s, "ml", &gpu_only, 1, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "GPUQuota ml/team: whole GPUs on h100: the pod asks for 1, 4 already "
                           "in use, limit 4");
    /* other namespaces are not limited by ml's quota */
    ASSERT_EQ(core_quotas_check(s, "other", &one, 1, &e), 0);

    /* T4 memory: 8Gi + 8Gi fit, another 512Mi does not; the total compute
     * (4.8 GPUs) stops first when 4 H100 are held */
    ASSERT_EQ(core_quotas_check(s, "ml", &t4, 1, &e), 0);
    ASSERT_EQ(core_quotas_charge(s, "ml", &t4, 1, 1, &e), 0);
    ASSERT_EQ(core_quotas_check(s, "ml", &t4, 1, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "GPU compute (GPUs): the pod asks for 0.5, 4.5 already in use, limit 4.8");

    /* releasing frees the room again */
    ASSERT_EQ(core_quotas_charge(s, "ml", &h100, 1, -1, &e), 0);
    ASSERT_EQ(core_quotas_check(s, "ml", &t4, 1, &e), 0);
    ASSERT_EQ(core_quotas_charge(s, "ml", &t4, 1, 1, &e), 0);
    struct core_quota_use t4b = {"Tesla-T4", 0, 512, 0};
    ASSERT_EQ(core_quotas_check(s, "ml", &t4b, 1, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "GPU memory on T4: the pod asks for 512Mi, 16Gi already in use, "
                           "limit 16Gi");

    /* rows for status and metrics */
    struct rows r = {0, 0};
    core_quotas_foreach(s, row_fn, &r);
    ASSERT_EQ(r.n, 3);
    ASSERT_EQ(r.h100_used, 2);

    /* replacing a quota keeps usage; removing it lifts the limit */
    q.models[1].lim.mem_mib = 32 * 1024;
    ASSERT_EQ(core_quotas_put(s, &q, &e), 0);
    ASSERT_EQ(core_quotas_count(s), 1);
    ASSERT_EQ(core_quotas_check(s, "ml", &t4b, 1, &e), 0);
    ASSERT_EQ(core_quotas_remove(s, "ml", "team"), 0);
    ASSERT_EQ(core_quotas_remove(s, "ml", "team"), -GS_ENOENT);
    ASSERT_EQ(core_quotas_check(s, "ml", &h100, 1, &e), 0);

    core_quotas_reset_usage(s);
    int nuse = 0;
    core_quotas_foreach_usage(s, use_fn, &nuse);
    ASSERT_EQ(nuse, 0);
    core_quotas_free(s);
}

static void admit_tests(void)
{
    struct core_quotas *s = core_quotas_new();
    struct core_quota q;
    struct gs_err e = GS_ERR_INIT;
    struct core_request whole = {.kind = CORE_REQ_WHOLE, .num_gpu = 3, .milli = 1000};
    struct core_request shared = {.kind = CORE_REQ_SHARED, .num_gpu = 1, .mem_mib = 40960,
                                  .milli = 200};

    ASSERT_EQ(parse_text(QHEAD "{\"total\":{\"gpus\":4,\"memory\":\"32Gi\"},\"models\":"
                               "[{\"model\":\"H100\",\"gpus\":2}]}}",
                         &q, &e),
              0);
    ASSERT_EQ(core_quotas_put(s, &q, &e), 0);
    ASSERT_EQ(core_quotas_admit(s, "ml", &whole, 0, &e), 0);
    whole.num_gpu = 5;
    ASSERT_EQ(core_quotas_admit(s, "ml", &whole, 0, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "whole GPUs: the pod asks for 5, 0 already in use, limit 4");
    ASSERT_EQ(core_quotas_admit(s, "ml", &shared, 0, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "GPU memory: the pod asks for 40Gi");
    /* only H100 accepted, and 3 > 2 H100: refused; H100 or A100: may run on A100 */
    whole.num_gpu = 3;
    strcpy(whole.types[0], "H100");
    whole.n_types = 1;
    ASSERT_EQ(core_quotas_admit(s, "ml", &whole, 0, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "whole GPUs on H100: the pod asks for 3");
    strcpy(whole.types[1], "A100");
    whole.n_types = 2;
    ASSERT_EQ(core_quotas_admit(s, "ml", &whole, 0, &e), 0);
    ASSERT_EQ(core_quotas_admit(s, "other", &shared, 0, &e), 0);
    /* whole GPUs count the memory of the least GPU they may get: 3 x 10Gi fits
     * 32Gi, 3 x 16Gi does not */
    ASSERT_EQ(core_quotas_admit(s, "ml", &whole, 10240, &e), 0);
    ASSERT_EQ(core_quotas_admit(s, "ml", &whole, 16384, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "GPU memory: the pod asks for 48Gi, 0Mi already in use, limit 32Gi");
    core_quotas_free(s);

    struct core_quota_use u;
    struct core_request w2 = {.kind = CORE_REQ_WHOLE, .num_gpu = 2, .milli = 1000};
    core_quota_use_of(&w2, "T4", 15360, &u);
    ASSERT_EQ(u.gpus, 2);
    ASSERT_EQ(u.mem_mib, 30720);
    ASSERT_EQ(u.milli, 2000);
    ASSERT_STREQ(u.model, "T4");
    core_quota_use_of(&shared, "A100", 40960, &u);
    ASSERT_EQ(u.gpus, 0);
    ASSERT_EQ(u.mem_mib, 40960);
    ASSERT_EQ(u.milli, 200);

    char buf[32];
    core_quota_fmt_milli(250, buf, sizeof buf);
    ASSERT_STREQ(buf, "0.25");
    core_quota_fmt_milli(3000, buf, sizeof buf);
    ASSERT_STREQ(buf, "3");
    core_quota_fmt_mib(1536, buf, sizeof buf);
    ASSERT_STREQ(buf, "1536Mi");
}

static void alloc_tests(void)
{
    struct core_cluster *c = core_cluster_new();
    struct core_node_spec spec;
    struct gs_err e = GS_ERR_INIT;
    struct core_quota_use u[CORE_MAX_GPUS];

    memset(&spec, 0, sizeof spec);
    spec.name = "n1";
    spec.cpu_milli = 64000;
    spec.mem_bytes = 1LL << 40;
    spec.n_gpus = 2;
    for (int i = 0; i < 2; i++) {
        spec.gpus[i].index = i;
        snprintf(spec.gpus[i].uuid, sizeof spec.gpus[i].uuid, "GPU-%d", i);
        snprintf(spec.gpus[i].model, sizeof spec.gpus[i].model, "%s", i ? "Tesla-T4" : "H100");
        spec.gpus[i].mem_mib = i ? 15360 : 81920;
        spec.gpus[i].healthy = 1;
        spec.gpus[i].numa = 0;
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &spec, &e), 0);

    struct core_alloc whole = {.kind = CORE_REQ_WHOLE, .n = 1, .gpu = {0}, .mem_mib = {81920},
                               .milli = {1000}, .mig = {-1}};
    snprintf(whole.pod_uid, sizeof whole.pod_uid, "u1");
    snprintf(whole.node, sizeof whole.node, "n1");
    ASSERT_EQ(core_reserve(c, &whole, &e), 0);
    struct core_alloc shared = {.kind = CORE_REQ_SHARED, .n = 1, .gpu = {1}, .mem_mib = {4096},
                                .milli = {250}, .mig = {-1}};
    snprintf(shared.pod_uid, sizeof shared.pod_uid, "u2");
    snprintf(shared.node, sizeof shared.node, "n1");
    ASSERT_EQ(core_reserve(c, &shared, &e), 0);

    ASSERT_EQ(core_quota_use_of_alloc(c, core_alloc_find(c, "u1"), u), 1);
    ASSERT_STREQ(u[0].model, "H100");
    ASSERT_EQ(u[0].gpus, 1);
    ASSERT_EQ(u[0].mem_mib, 81920);
    ASSERT_EQ(u[0].milli, 1000);
    ASSERT_EQ(core_quota_use_of_alloc(c, core_alloc_find(c, "u2"), u), 1);
    ASSERT_STREQ(u[0].model, "Tesla-T4");
    ASSERT_EQ(u[0].gpus, 0);
    ASSERT_EQ(u[0].mem_mib, 4096);
    ASSERT_EQ(u[0].milli, 250);
    /* recount from the allocations: u1 and u2 have no namespace in their
     * pod_name, so name them */
    snprintf(((struct core_alloc *)core_alloc_find(c, "u1"))->pod_name, CORE_NAME_MAX, "ml/a");
    snprintf(((struct core_alloc *)core_alloc_find(c, "u2"))->pod_name, CORE_NAME_MAX, "ml/b");
    struct core_quotas *qs = core_quotas_new();
    struct core_quota q;
    ASSERT_EQ(parse_text(QHEAD "{\"models\":[{\"model\":\"T4\",\"memory\":\"6Gi\"}]}}", &q,
                         &e),
              0);
    ASSERT_EQ(core_quotas_put(qs, &q, &e), 0);
    ASSERT_TRUE(core_quotas_has(qs, "ml"));
    ASSERT_TRUE(!core_quotas_has(qs, "cv"));
    ASSERT_EQ(core_quotas_recount(qs, c, "cv", &e), 0); /* another namespace: nothing */
    struct core_quota_use big = {"Tesla-T4", 0, 6144, 0};
    ASSERT_EQ(core_quotas_check(qs, "ml", &big, 1, &e), 0);
    ASSERT_EQ(core_quotas_recount(qs, c, NULL, &e), 0);
    ASSERT_EQ(core_quotas_recount(qs, c, "ml", &e), 0); /* idempotent */
    struct core_request sh = {.kind = CORE_REQ_SHARED, .num_gpu = 1, .mem_mib = 4096,
                              .milli = 100};
    strcpy(sh.types[0], "T4");
    sh.n_types = 1;
    struct core_quota_use on;
    core_quota_use_on_node(&sh, core_cluster_find(c, "n1"), &on);
    ASSERT_STREQ(on.model, "Tesla-T4");
    ASSERT_EQ(on.mem_mib, 4096);
    ASSERT_EQ(core_quotas_check(qs, "ml", &on, 1, &e), -GS_ENOFIT); /* 4Gi held + 4Gi > 6Gi */
    ASSERT_CONTAINS(e.msg, "GPU memory on T4: the pod asks for 4Gi, 4Gi already in use, limit 6Gi");
    struct core_request wh = {.kind = CORE_REQ_WHOLE, .num_gpu = 1, .milli = 1000};
    core_quota_use_on_node(&wh, core_cluster_find(c, "n1"), &on);
    ASSERT_STREQ(on.model, "H100");
    ASSERT_EQ(on.mem_mib, 81920);
    ASSERT_EQ(core_quotas_check(qs, "ml", &on, 1, &e), 0);
    /* MIG layouts differ from GPU to GPU: the memory of an instance is the
     * GPU's that has the profile (the first MIG GPU has only 3g.40gb) */
    struct core_node_spec ms;
    memset(&ms, 0, sizeof ms);
    ms.name = "migs";
    ms.cpu_milli = 8000;
    ms.mem_bytes = (int64_t)8 << 30;
    ms.n_gpus = 2;
    for (int g = 0; g < 2; g++) {
        ms.gpus[g].index = g;
        snprintf(ms.gpus[g].model, CORE_MODEL_MAX, "A100");
        ms.gpus[g].mem_mib = 81920;
        ms.gpus[g].healthy = 1;
        ms.gpus[g].mig_enabled = 1;
        ms.gpus[g].n_mig = 1;
        snprintf(ms.gpus[g].mig[0].uuid, CORE_UUID_MAX, "MIG-q%d", g);
        snprintf(ms.gpus[g].mig[0].profile, CORE_MIG_PROFILE_MAX, g ? "1g.10gb" : "3g.40gb");
        ms.gpus[g].mig[0].mem_mib = g ? 9856 : 40192;
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &ms, &e), 0);
    struct core_request mr = {.kind = CORE_REQ_MIG, .mig_count = 1};
    snprintf(mr.mig_profile, sizeof mr.mig_profile, "1g.10gb");
    core_quota_use_on_node(&mr, core_cluster_find(c, "migs"), &on);
    ASSERT_EQ(on.mem_mib, 9856);
    core_quotas_free(qs);
    struct core_alloc ghost = whole;
    snprintf(ghost.node, sizeof ghost.node, "gone");
    ASSERT_EQ(core_quota_use_of_alloc(c, &ghost, u), -GS_ENOENT);
    core_cluster_free(c);
}

/* Many namespaces and models: usage stays per (namespace, model). */
static void many_tests(void)
{
    struct core_quotas *s = core_quotas_new();
    struct gs_err e = GS_ERR_INIT;
    char ns[32];
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 500; i++) {
            struct core_quota_use u = {"", 1, i, 2};
            snprintf(u.model, sizeof u.model, "M%d", i % 3);
            snprintf(ns, sizeof ns, "ns%d", i);
            ASSERT_EQ(core_quotas_charge(s, ns, &u, 1, 1, &e), 0);
        }
    int64_t sum = 0;
    int n = 0;
    core_quotas_foreach_usage(s, sum_fn, &sum);
    core_quotas_foreach_usage(s, use_fn, &n);
    ASSERT_EQ(n, 500);
    ASSERT_EQ(sum, 2 * (499 * 500 / 2));
    core_quotas_reset_usage(s);
    n = 0;
    core_quotas_foreach_usage(s, use_fn, &n);
    ASSERT_EQ(n, 0);
    struct core_quota_use u = {"M1", 1, 7, 0};
    ASSERT_EQ(core_quotas_charge(s, "ns4", &u, 1, 1, &e), 0);
    core_quotas_foreach_usage(s, sum_fn, &sum);
    core_quotas_free(s);
}

int test_quota(void)
{
    many_tests();
    alloc_tests();
    parse_tests();
    file_tests();
    accounting_tests();
    admit_tests();
    return 0;
}
