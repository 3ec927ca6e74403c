/* tests/unit/test_ext_devices.c - kubelet's device counts as the extender
 * reads them from a Node (ext/devices.h): allocatable GPU and MIG devices,
 * the devices pods hold, and the verdict with its reason. */
#include <stdlib.h>

#include "core/core.h"
#include "ext/devices.h"
#include "test.h"

static int parse(const char *alloc_json, struct ext_devcap *cap, struct gs_err *e)
{
    char buf[2048];
    snprintf(buf, sizeof buf, "{\"metadata\":{\"name\":\"n\"},\"status\":{\"allocatable\":%s}}",
             alloc_json);
    json_t *j = json_loads(buf, 0, NULL);
    ASSERT_TRUE(j != NULL);
    int rc = ext_devcap_parse(j, core_names_default(), cap, e);
    json_decref(j);
    return rc;
}

static void test_parse(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_devcap c;
    ASSERT_EQ(parse("{\"cpu\":\"8\",\"nvidia.com/gpu\":\"40\",\"nvidia.com/mig-1g.10gb\":\"7\","
                    "\"nvidia.com/gpu-memory\":\"1\"}", &c, &e), 0);
    ASSERT_EQ(c.known, 1);
    ASSERT_EQ(c.gpu, 40);
    ASSERT_EQ(c.n_mig, 1);
    ASSERT_STREQ(c.mig[0].profile, "1g.10gb");
    ASSERT_EQ(c.mig[0].count, 7);
    /* no device resource: unknown, not zero */
    ASSERT_EQ(parse("{\"cpu\":\"8\"}", &c, &e), 0);
    ASSERT_EQ(c.known, 0);
    ASSERT_EQ(parse("{\"nvidia.com/gpu\":\"0\"}", &c, &e), 0);
    ASSERT_EQ(c.known, 1);
    ASSERT_EQ(c.gpu, 0);
    /* bad values name the node and the field */
    ASSERT_EQ(parse("{\"nvidia.com/gpu\":\"lots\"}", &c, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "node n: status.allocatable[nvidia.com/gpu]");
    ASSERT_EQ(parse("{\"nvidia.com/gpu\":true}", &c, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "not a quantity");
    ASSERT_EQ(parse("{\"nvidia.com/mig-\":\"1\"}", &c, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "status.allocatable[nvidia.com/mig-]");
    char many[2048] = "{";
    for (int i = 0; i <= EXT_DEV_MIG_MAX; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"nvidia.com/mig-%dg.1gb\":\"1\"",
                 i ? "," : "", i);
    strcat(many, "}");
    ASSERT_EQ(parse(many, &c, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "more than 16 MIG resources");
}

static void test_fits(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_cluster *c = core_cluster_new();
    struct core_node_spec spec = {.name = "n", .cpu_milli = 8000, .mem_bytes = 1LL << 34, .n_gpus = 2};
    for (int i = 0; i < 2; i++) {
        spec.gpus[i].index = i;
        snprintf(spec.gpus[i].uuid, sizeof spec.gpus[i].uuid, "G%d", i);
        snprintf(spec.gpus[i].model, sizeof spec.gpus[i].model, "A");
        spec.gpus[i].mem_mib = 1000;
        spec.gpus[i].healthy = 1;
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &spec, &e), 0);
    struct core_node *n = core_cluster_find(c, "n");
    struct ext_devcap cap;
    ASSERT_EQ(parse("{\"nvidia.com/gpu\":\"3\"}", &cap, &e), 0);
    json_t *pj = json_loads("{\"metadata\":{\"name\":\"p\",\"uid\":\"p\"},\"spec\":{\"containers\":["
                            "{\"name\":\"a\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
                            "\"nvidia.com/gpu-memory\":\"100Mi\"}}},"
                            "{\"name\":\"b\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
                            "\"nvidia.com/gpu-memory\":\"100Mi\"}}}]}}", 0, NULL);
    struct core_pod pod;
    const char *profile;
    ASSERT_EQ(core_pod_parse(pj, core_names_default(), &pod, &e), 0);
    ASSERT_EQ(ext_dev_need(&pod, &profile), 2); /* one device per container */
    ASSERT_TRUE(profile == NULL);
    struct core_status st;
    ASSERT_EQ(ext_devcap_fits(&cap, n, &pod, core_names_default(), &st), 1);
    /* a shared pod on each GPU: 2 devices held, 1 left */
    struct core_alloc a = {.pod_uid = "x", .pod_name = "d/x", .node = "n", .kind = CORE_REQ_SHARED,
                           .n = 2, .gpu = {0, 1}, .mem_mib = {100, 100}, .mig = {-1, -1}};
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    n = core_cluster_find(c, "n");
    ASSERT_EQ(ext_dev_used(n, NULL), 2);
    ASSERT_EQ(ext_devcap_fits(&cap, n, &pod, core_names_default(), &st), 0);
    ASSERT_EQ(st.code, CORE_UNSCHEDULABLE);
    ASSERT_STREQ(st.plugin, "DeviceCount");
    ASSERT_CONTAINS(st.reason, "kubelet has 1 of 3 nvidia.com/gpu devices left");
    /* no count known: always fits */
    ASSERT_EQ(ext_devcap_fits(NULL, n, &pod, core_names_default(), &st), 1);
    core_pod_clear(&pod);
    json_decref(pj);
    core_cluster_free(c);
}

int test_ext_devices(void)
{
    test_parse();
    test_fits();
    return test_failures;
}
