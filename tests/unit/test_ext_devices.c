/* tests/unit/test_ext_devices.c - kubelet's device counts as the extender
 * reads them from a Node (ext/devices.h): allocatable GPU and MIG devices,
 * the devices pods hold, and the verdict with its reason. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
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

/* A cluster of one node "n" with n_gpus healthy GPUs "G0".. of mem_mib each. */
static struct core_cluster *cluster_of_one(int n_gpus, int64_t mem_mib)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_cluster *c = core_cluster_new();
    struct core_node_spec spec = {.name = "n", .cpu_milli = 64000, .mem_bytes = 1LL << 36,
                                  .n_gpus = n_gpus};
    for (int i = 0; i < n_gpus; i++) {
        spec.gpus[i].index = i;
        snprintf(spec.gpus[i].uuid, sizeof spec.gpus[i].uuid, "G%d", i);
        snprintf(spec.gpus[i].model, sizeof spec.gpus[i].model, "A");
        spec.gpus[i].mem_mib = mem_mib;
        spec.gpus[i].healthy = 1;
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &spec, &e), 0);
    return c;
}

static void test_fits(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_cluster *c = cluster_of_one(2, 1000);
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

/* ---- multi-container pods: the count kubelet keeps --------------------- */

/* kubelet's device manager (pkg/kubelet/cm/devicemanager, Allocate and
 * devicesToAllocate, 1.20 and later), replayed on counts: containers are
 * allocated in order, init containers first; a container takes devices from
 * the pod's reuse set before new ones; a regular init container's devices
 * join the reuse set (it has ended before the next starts), a restartable
 * one's (a sidecar, 1.28+) and an app container's leave it. The pod holds
 * every device it was given until it ends. An independent statement of the
 * rule ext_dev_need/ext_dev_used must agree with. */
struct ctr {
    int n, sidecar;
};
static int kubelet_devices(const struct ctr *init, int n_init, const struct ctr *app, int n_app)
{
    int held = 0, reuse = 0;
    for (int i = 0; i < n_init + n_app; i++) {
        const struct ctr *c = i < n_init ? &init[i] : &app[i - n_init];
        int from_reuse = c->n < reuse ? c->n : reuse, fresh = c->n - from_reuse;
        held += fresh;
        if (i < n_init && !c->sidecar)
            reuse += fresh;        /* the reuse set becomes reuse + its new devices */
        else
            reuse -= from_reuse;   /* still running: its reused devices are taken */
    }
    return held;
}

static void ctr_json(char *buf, size_t cap, const char *name, const struct ctr *c, int shared)
{
    char lim[160];
    if (shared)
        snprintf(lim, sizeof lim, "\"nvidia.com/gpu\":\"%d\",\"nvidia.com/gpu-memory\":\"100Mi\"",
                 c->n);
    else
        snprintf(lim, sizeof lim, "\"nvidia.com/gpu\":\"%d\"", c->n);
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s{\"name\":\"%s\",%s\"resources\":"
             "{\"limits\":{%s}}}", buf[strlen(buf) - 1] == '[' ? "" : ",", name,
             c->sidecar ? "\"restartPolicy\":\"Always\"," : "", c->n ? lim : "\"cpu\":\"1\"");
}

/* Places the pod on an empty 8-GPU node whose kubelet has `devices` GPU
 * devices and checks, against kubelet_devices(): what the extender says the
 * pod needs, what it counts as held once the pod is placed, and its verdict
 * for a second copy when exactly that many devices are left, and one fewer. */
static void check_pod(const struct ctr *init, int n_init, const struct ctr *app, int n_app,
                      int shared)
{
    char buf[4096] = "{\"metadata\":{\"name\":\"p\",\"uid\":\"p\"},\"spec\":{\"initContainers\":[";
    char name[16];
    for (int i = 0; i < n_init; i++) {
        snprintf(name, sizeof name, "i%d", i);
        ctr_json(buf, sizeof buf, name, &init[i], shared);
    }
    strcat(buf, "],\"containers\":[");
    for (int i = 0; i < n_app; i++) {
        snprintf(name, sizeof name, "a%d", i);
        ctr_json(buf, sizeof buf, name, &app[i], shared);
    }
    strcat(buf, "]}}");
    int want = kubelet_devices(init, n_init, app, n_app);

    struct gs_err e = GS_ERR_INIT;
    json_t *pj = json_loads(buf, 0, NULL);
    ASSERT_TRUE(pj != NULL);
    struct core_pod pod;
    const char *profile;
    ASSERT_EQ(core_pod_parse(pj, core_names_default(), &pod, &e), 0);
    int need = ext_dev_need(&pod, &profile);
    if (need != want)
        fprintf(stderr, "  pod %s: extender needs %d devices, kubelet takes %d\n", buf, need, want);
    ASSERT_EQ(need, want);

    struct core_cluster *c = cluster_of_one(8, 40000);
    struct core_decision d;
    ASSERT_EQ(core_schedule_one(c, core_policy_find("binpack"), &pod, &d, &e), 0);
    ASSERT_EQ(core_reserve(c, &d.alloc, &e), 0);
    struct core_node *n = core_cluster_find(c, "n");
    int64_t used = ext_dev_used(n, NULL);
    if (used != want)
        fprintf(stderr, "  pod %s: extender counts %lld devices held, kubelet %d\n", buf,
                (long long)used, want);
    ASSERT_EQ(used, want);

    /* the same pod again: fits with exactly `want` devices left, not with one fewer */
    struct ext_devcap cap = {.known = 1, .gpu = 2 * want};
    struct core_status st;
    ASSERT_EQ(ext_devcap_fits(&cap, n, &pod, core_names_default(), &st), 1);
    cap.gpu--;
    ASSERT_EQ(ext_devcap_fits(&cap, n, &pod, core_names_default(), &st), 0);
    ASSERT_STREQ(st.plugin, "DeviceCount");
    core_cluster_free(c);
    core_pod_clear(&pod);
    json_decref(pj);
}

static void test_multi_container(void)
{
    /* two app containers: each its own devices */
    const struct ctr two[] = {{1, 0}, {1, 0}}, three[] = {{2, 0}, {1, 0}, {1, 0}};
    check_pod(NULL, 0, two, 2, 0);
    check_pod(NULL, 0, two, 2, 1);
    check_pod(NULL, 0, three, 3, 0);
    check_pod(NULL, 0, three, 3, 1);
    /* init containers: their devices are reused by what starts after them */
    const struct ctr init2[] = {{2, 0}}, one[] = {{1, 0}}, init11[] = {{1, 0}, {1, 0}};
    const struct ctr init13[] = {{1, 0}, {3, 0}}, none_and_one[] = {{0, 0}, {1, 0}};
    check_pod(init2, 1, one, 1, 0);       /* max(init 2, apps 1) = 2 */
    check_pod(init2, 1, one, 1, 1);
    check_pod(one, 1, two, 2, 0);         /* max(init 1, apps 2) = 2 */
    check_pod(one, 1, two, 2, 1);
    check_pod(init11, 2, one, 1, 0);      /* the second init reuses the first's device */
    check_pod(init13, 2, three, 3, 0);    /* max(3, 4) = 4 */
    check_pod(init2, 1, none_and_one, 2, 0);
    /* sidecars (restartable init containers) keep their devices */
    const struct ctr side_init[] = {{1, 1}, {1, 0}}, init_side[] = {{2, 0}, {1, 1}};
    const struct ctr i_s_i[] = {{2, 0}, {1, 1}, {2, 0}};
    check_pod(side_init, 2, one, 1, 0);   /* sidecar 1 + (init 1 | app 1) = 2 */
    check_pod(init_side, 2, two, 2, 0);   /* init 2, then sidecar 1 + apps 2 = 3 */
    check_pod(i_s_i, 3, one, 1, 0);       /* sidecar 1 + init 2 = 3 */
    check_pod(i_s_i, 3, one, 1, 1);
}

int test_ext_devices(void)
{
    test_parse();
    test_fits();
    test_multi_container();
    return test_failures;
}
