/* Unit tests for dp/devices.c, dp/alloc.c, dp/inventory.c and dp/podres.c. */
#include <stdlib.h>

#include "deviceplugin.pb-c.h"
#include "dp/alloc.h"
#include "dp/devices.h"
#include "dp/inventory.h"
#include "dp/grpc.h"
#include "dp/podres.h"
#include "podresources.pb-c.h"
#include "test.h"

/* 4 GPUs: 0-1 and 2-3 NVLinked, 0-2 one PCIe switch, NUMA 0,0,1,1;
 * GPU 3 has MIG on with two 1g.10gb instances. */
static void make_inv(struct dp_inventory *inv, int mig)
{
    memset(inv, 0, sizeof *inv);
    inv->n = 4;
    for (int i = 0; i < 4; i++) {
        struct dp_gpu *g = &inv->gpu[i];
        g->index = i;
        g->minor = i;
        snprintf(g->uuid, sizeof g->uuid, "GPU-%d", i);
        snprintf(g->model, sizeof g->model, "NVIDIA H100 80GB HBM3");
        g->memory_mib = 81559;
        g->numa_node = i / 2;
        g->healthy = 1;
        for (int j = 0; j < 4; j++)
            if (j != i)
                g->link[j] = (i / 2 == j / 2) ? CORE_LINK_NVLINK : CORE_LINK_SYS;
    }
    inv->gpu[0].link[2] = inv->gpu[2].link[0] = CORE_LINK_PIX;
    inv->gpu[0].nvlinks[1] = inv->gpu[1].nvlinks[0] = 18;
    if (mig) {
        struct dp_gpu *g = &inv->gpu[3];
        g->mig_enabled = 1;
        g->n_mig = 2;
        for (int m = 0; m < 2; m++) {
            snprintf(g->mig[m].uuid, sizeof g->mig[m].uuid, "MIG-3-%d", m);
            snprintf(g->mig[m].profile, sizeof g->mig[m].profile, "1g.10gb");
            g->mig[m].memory_mib = 9856;
            g->mig[m].healthy = 1;
        }
    }
}

static void test_devices(void)
{
    struct dp_inventory inv;
    struct dp_resource *res = calloc(DP_MAX_RESOURCES, sizeof *res);
    struct dp_devices_cfg cfg = {"nvidia.com/", 1};
    struct gs_err e = GS_ERR_INIT;
    char sock[96];

    make_inv(&inv, 1);
    ASSERT_EQ(dp_devices_build(&inv, &cfg, res, DP_MAX_RESOURCES), 2);
    ASSERT_STREQ(res[0].name, "nvidia.com/gpu");
    ASSERT_EQ(res[0].n, 3);
    ASSERT_STREQ(res[0].dev[2].id, "GPU-2");
    ASSERT_STREQ(res[1].name, "nvidia.com/mig-1g.10gb");
    ASSERT_EQ(res[1].n, 2);
    ASSERT_STREQ(res[1].dev[1].id, "MIG-3-1");
    ASSERT_EQ(res[1].dev[1].gpu, 3);
    ASSERT_EQ(res[1].dev[1].mig, 1);
    dp_devices_socket_name(res[1].name, sock, sizeof sock);
    ASSERT_STREQ(sock, "gpusched-mig-1g.10gb.sock");

    /* ListAndWatch: health and NUMA as kubelet reads them. */
    inv.gpu[1].healthy = 0;
    uint8_t *buf;
    size_t len;
    ASSERT_EQ(dp_devices_pack_list(&res[0], &inv, &buf, &len, &e), 0);
    V1beta1__ListAndWatchResponse *lw = v1beta1__list_and_watch_response__unpack(NULL, len, buf);
    ASSERT_TRUE(lw != NULL);
    if (lw) {
        ASSERT_EQ(lw->n_devices, 3);
        ASSERT_STREQ(lw->devices[0]->health, "Healthy");
        ASSERT_STREQ(lw->devices[1]->health, "Unhealthy");
        ASSERT_EQ(lw->devices[2]->topology->n_nodes, 1);
        ASSERT_EQ(lw->devices[2]->topology->nodes[0]->id, 1);
        v1beta1__list_and_watch_response__free_unpacked(lw, NULL);
    }
    free(buf);
    inv.gpu[1].healthy = 1;

    /* No GPU, no resource. */
    struct dp_inventory empty;
    memset(&empty, 0, sizeof empty);
    ASSERT_EQ(dp_devices_build(&empty, &cfg, res, DP_MAX_RESOURCES), 0);

    /* Preferred allocation: the core's topology choice. */
    make_inv(&inv, 0);
    dp_devices_build(&inv, &cfg, res, DP_MAX_RESOURCES);
    char *all[] = {"GPU-0", "GPU-1", "GPU-2", "GPU-3"};
    const char *out[DP_MAX_DEVICES];
    ASSERT_EQ(dp_devices_prefer(&res[0], &inv, all, 4, NULL, 0, 2, out, &e), 0);
    ASSERT_STREQ(out[0], "GPU-0");
    ASSERT_STREQ(out[1], "GPU-1");
    char *must3[] = {"GPU-3"};
    ASSERT_EQ(dp_devices_prefer(&res[0], &inv, all, 4, must3, 1, 2, out, &e), 0);
    ASSERT_STREQ(out[0], "GPU-3");
    ASSERT_STREQ(out[1], "GPU-2");
    char *some[] = {"GPU-0", "GPU-2", "GPU-3"};
    char *must0[] = {"GPU-0"};
    ASSERT_EQ(dp_devices_prefer(&res[0], &inv, some, 3, must0, 1, 2, out, &e), 0);
    ASSERT_STREQ(out[1], "GPU-2");
    char *bad[] = {"GPU-9"};
    ASSERT_EQ(dp_devices_prefer(&res[0], &inv, bad, 1, NULL, 0, 1, out, &e), -GS_ENOENT);
    ASSERT_CONTAINS(e.msg, "available_deviceIDs[0]: unknown device 'GPU-9'");
    ASSERT_EQ(dp_devices_prefer(&res[0], &inv, all, 4, NULL, 0, 5, out, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "allocation_size: 5");
    ASSERT_EQ(dp_devices_prefer(&res[0], &inv, all, 4, all, 4, 2, out, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "must_include_deviceIDs: 4 IDs");

    /* Replicas: distinct GPUs first, then replicas of the same GPU. */
    cfg.replicas = 2;
    dp_devices_build(&inv, &cfg, res, DP_MAX_RESOURCES);
    ASSERT_EQ(res[0].n, 8);
    ASSERT_STREQ(res[0].dev[1].id, "GPU-0::1");
    char *reps[] = {"GPU-2::0", "GPU-2::1", "GPU-3::0", "GPU-3::1"};
    ASSERT_EQ(dp_devices_prefer(&res[0], &inv, reps, 4, NULL, 0, 2, out, &e), 0);
    ASSERT_STREQ(out[0], "GPU-2::0");
    ASSERT_STREQ(out[1], "GPU-3::0");
    ASSERT_EQ(dp_devices_prefer(&res[0], &inv, reps, 4, NULL, 0, 3, out, &e), 0);
    ASSERT_STREQ(out[2], "GPU-2::1");
    free(res);
}

static json_t *pod(const char *name, const char *uid, const char *at, const char *uuids,
                   const char *phase, const char *kind, int n0, int n1)
{
    json_t *p = json_pack(
        "{s:{s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s, s:s}}, s:{s:s, s:[{s:s, s:{s:{s:i}}},"
        " {s:s, s:{s:{s:s}}}, {s:s}]}, s:{s:s}}",
        "metadata", "namespace", "ns", "name", name, "uid", uid, "annotations",
        "gpusched.io/node", "node-a", "gpusched.io/gpu-uuids", uuids, "gpusched.io/assigned-at",
        at, "gpusched.io/request-kind", kind, "gpusched.io/gpu-memory", "8192",
        "gpusched.io/gpu-milli", "300", "spec", "nodeName", "node-a", "containers", "name", "a",
        "resources", "limits", "nvidia.com/gpu", n0, "name", "b", "resources", "limits",
        "nvidia.com/gpu", n1 ? "1" : "0", "name", "no-gpu", "status", "phase", phase);
    return p;
}

static void test_match(void)
{
    struct dp_assign a;
    struct gs_err e = GS_ERR_INIT;
    json_t *pods = json_pack("{s:[]}", "items");
    json_t *items = json_object_get(pods, "items");

    /* p1 is older than p2; p3 is running; p4 is on another node. */
    json_array_append_new(items, pod("p2", "u2", "2026-11-22T15:20:02.000000000Z",
                                     "GPU-1,GPU-2", "Pending", "whole", 1, 1));
    json_array_append_new(items, pod("p1", "u1", "2026-11-22T15:20:01.000000000Z",
                                     "GPU-0,GPU-3", "Pending", "shared", 1, 1));
    json_array_append_new(items, pod("p3", "u3", "2026-11-22T15:20:00.000000000Z", "GPU-0",
                                     "Running", "whole", 1, 0));
    json_t *p4 = pod("p4", "u4", "2026-11-22T15:19:00.000000000Z", "GPU-0", "Pending", "whole",
                     1, 0);
    json_object_set_new(json_object_get(json_object_get(p4, "metadata"), "annotations"),
                        "gpusched.io/node", json_string("node-b"));
    json_array_append_new(items, p4);

    /* p1 and p2 both wait for kubelet, neither started: an Allocate could
     * be for either, so no guess (issue 12, problem 4) */
    ASSERT_EQ(dp_alloc_match(pods, "node-a", "nvidia.com/gpu", "gpusched.io/", 1, NULL, 0, &a,
                             &e), -GS_ECONFLICT);
    ASSERT_CONTAINS(e.msg, "2 pods on node node-a wait for 1 nvidia.com/gpu (ns/p2, ns/p1)");

    /* p1's first container holds devices: p1 is being admitted, and its
     * next container gets the next GPU; it is the pod's last */
    char *claimed[] = {"ns/p1/a", "uid:u1/b"};
    ASSERT_EQ(dp_alloc_match(pods, "node-a", "nvidia.com/gpu", "gpusched.io/", 1, claimed, 1, &a,
                             &e), 0);
    ASSERT_STREQ(a.pod, "p1");
    ASSERT_STREQ(a.container, "b");
    ASSERT_STREQ(a.kind, "shared");
    ASSERT_EQ(a.n, 1);
    ASSERT_STREQ(a.uuids[0], "GPU-3");
    ASSERT_EQ(a.mem_mib, 8192);
    ASSERT_EQ(a.milli, 300);
    ASSERT_EQ(a.started, 1);
    ASSERT_EQ(a.last, 1);
    ASSERT_EQ(a.n_ctrs, 2);
    char key[DP_KEY_MAX];
    dp_assign_key(&a, key, sizeof key);
    ASSERT_STREQ(key, "ns/p1/b");
    /* Both of p1's claimed (one by uid): p2 is the only one left; its
     * first container is not its last */
    ASSERT_EQ(dp_alloc_match(pods, "node-a", "nvidia.com/gpu", "gpusched.io/", 1, claimed, 2, &a,
                             &e), 0);
    ASSERT_STREQ(a.pod, "p2");
    ASSERT_STREQ(a.container, "a");
    ASSERT_STREQ(a.uuids[0], "GPU-1");
    ASSERT_EQ(a.started, 0);
    ASSERT_EQ(a.last, 0);
    /* a pod marked allocated-at is done: p2 is the only candidate */
    json_object_set_new(json_object_get(json_object_get(json_array_get(items, 1), "metadata"),
                                        "annotations"),
                        "gpusched.io/allocated-at", json_string("2026-11-22T15:20:03Z"));
    ASSERT_EQ(dp_alloc_match(pods, "node-a", "nvidia.com/gpu", "gpusched.io/", 1, NULL, 0, &a,
                             &e), 0);
    ASSERT_STREQ(a.pod, "p2");
    ASSERT_STREQ(a.uuids[0], "GPU-1");
    /* so is an admitted pod (startTime) whose mark failed, still Pending in
     * an image pull, even with a container not claimed any more (the plugin
     * restarted): the extender has bound the next pod, p2 */
    json_t *p1 = json_array_get(items, 1);
    json_object_del(json_object_get(json_object_get(p1, "metadata"), "annotations"),
                    "gpusched.io/allocated-at");
    json_object_set_new(json_object_get(p1, "status"), "startTime",
                        json_string("2026-11-22T15:20:03Z"));
    ASSERT_EQ(dp_alloc_match(pods, "node-a", "nvidia.com/gpu", "gpusched.io/", 1, claimed, 1, &a,
                             &e), 0);
    ASSERT_STREQ(a.pod, "p2");

    /* Nobody asks for 2 devices in one container: refuse, do not guess. */
    ASSERT_EQ(dp_alloc_match(pods, "node-a", "nvidia.com/gpu", "gpusched.io/", 2, NULL, 0, &a,
                             &e), -GS_ENOENT);
    ASSERT_CONTAINS(e.msg, "no pending pod on node node-a");
    /* MIG resources only match MIG assignments. */
    ASSERT_EQ(dp_alloc_match(pods, "node-a", "nvidia.com/mig-1g.10gb", "gpusched.io/", 1, NULL, 0,
                             &a, &e), -GS_ENOENT);

    /* Broken annotations on the matching pod are named. */
    json_t *p5 = pod("p5", "u5", "2026-11-22T15:00:00.000000000Z", "GPU-0,", "Pending", "whole",
                     1, 0);
    json_array_append_new(items, p5);
    ASSERT_EQ(dp_alloc_match(pods, "node-a", "nvidia.com/gpu", "gpusched.io/", 1, NULL, 0, &a,
                             &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "pod ns/p5: gpu-uuids: trailing ','");
    json_object_set_new(json_object_get(json_object_get(p5, "metadata"), "annotations"),
                        "gpusched.io/gpu-uuids", json_string("GPU-0"));
    json_object_set_new(json_object_get(json_object_get(p5, "metadata"), "annotations"),
                        "gpusched.io/gpu-memory", json_string("lots"));
    ASSERT_EQ(dp_alloc_match(pods, "node-a", "nvidia.com/gpu", "gpusched.io/", 1, NULL, 0, &a,
                             &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "gpusched.io/gpu-memory: 'lots' is not an integer");
    json_decref(pods);

    json_t *notalist = json_object();
    ASSERT_EQ(dp_alloc_match(notalist, "n", "nvidia.com/gpu", "gpusched.io/", 1, NULL, 0, &a, &e),
              -GS_EPROTO);
    json_decref(notalist);
}

/* Init containers and sidecars: each container's place in gpu-uuids is the
 * one the extender sized the list for (core/request.c), so containers that
 * run at the same time never share a GPU. */
static const char *match_one(json_t *pods, int n, char **claimed, int n_claimed, int k,
                             struct dp_assign *a)
{
    static struct gs_err e;
    e = (struct gs_err)GS_ERR_INIT;
    if (dp_alloc_match(pods, "node-a", "nvidia.com/gpu", "gpusched.io/", n, claimed, n_claimed,
                       a, &e) != 0)
        return e.msg;
    return a->uuids[k];
}

static void test_init_containers(void)
{
    struct dp_assign a;
    /* an init container of 2 GPUs, then two app containers of 1: the list is
     * max(2, 1 + 1) = 2 long; the app containers take one each */
    json_t *pods = json_pack(
        "{s:[{s:{s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s}}, s:{s:s, s:[{s:s, s:{s:{s:s}}}],"
        " s:[{s:s, s:{s:{s:s}}}, {s:s, s:{s:{s:s}}}]}, s:{s:s}}]}",
        "items", "metadata", "namespace", "ns", "name", "p", "uid", "u", "annotations",
        "gpusched.io/node", "node-a", "gpusched.io/gpu-uuids", "GPU-A,GPU-B",
        "gpusched.io/assigned-at", "2026-11-22T15:20:00Z", "gpusched.io/request-kind", "whole",
        "spec", "nodeName", "node-a", "initContainers", "name", "i", "resources", "limits",
        "nvidia.com/gpu", "2", "containers", "name", "a", "resources", "limits",
        "nvidia.com/gpu", "1", "name", "b", "resources", "limits", "nvidia.com/gpu", "1",
        "status", "phase", "Pending");
    ASSERT_STREQ(match_one(pods, 2, NULL, 0, 1, &a), "GPU-B");
    ASSERT_STREQ(a.container, "i");
    char *c1[] = {"ns/p/i", "ns/p/a"};
    ASSERT_STREQ(match_one(pods, 1, c1, 1, 0, &a), "GPU-A");
    ASSERT_STREQ(a.container, "a");
    ASSERT_STREQ(match_one(pods, 1, c1, 2, 0, &a), "GPU-B"); /* was GPU-A, a's */
    ASSERT_STREQ(a.container, "b");
    json_decref(pods);

    /* a sidecar of 1, an init container of 1, an app container of 1: the
     * list is max(1 + 1, 1 + 1) = 2; the init container runs beside the
     * sidecar, and so does the app container */
    pods = json_pack(
        "{s:[{s:{s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s}}, s:{s:s, s:[{s:s, s:s, s:{s:{s:s}}},"
        " {s:s, s:{s:{s:s}}}], s:[{s:s, s:{s:{s:s}}}]}, s:{s:s}}]}",
        "items", "metadata", "namespace", "ns", "name", "p", "uid", "u", "annotations",
        "gpusched.io/node", "node-a", "gpusched.io/gpu-uuids", "GPU-A,GPU-B",
        "gpusched.io/assigned-at", "2026-11-22T15:20:00Z", "gpusched.io/request-kind", "whole",
        "spec", "nodeName", "node-a", "initContainers", "name", "s", "restartPolicy", "Always",
        "resources", "limits", "nvidia.com/gpu", "1", "name", "i", "resources", "limits",
        "nvidia.com/gpu", "1", "containers", "name", "a", "resources", "limits",
        "nvidia.com/gpu", "1", "status", "phase", "Pending");
    char *c2[] = {"ns/p/s", "ns/p/i"};
    ASSERT_STREQ(match_one(pods, 1, NULL, 0, 0, &a), "GPU-A");
    ASSERT_STREQ(a.container, "s");
    ASSERT_STREQ(match_one(pods, 1, c2, 1, 0, &a), "GPU-B");
    ASSERT_STREQ(a.container, "i");
    ASSERT_STREQ(match_one(pods, 1, c2, 2, 0, &a), "GPU-B"); /* was GPU-A, the sidecar's */
    ASSERT_STREQ(a.container, "a");
    json_decref(pods);
}

static void test_pack(void)
{
    struct dp_inventory inv;
    struct dp_assign a;
    struct dp_alloc_opts o = {.annot_prefix = "gpusched.io/"};
    struct gs_err e = GS_ERR_INIT;
    uint8_t *buf;
    size_t len;

    make_inv(&inv, 1);
    memset(&a, 0, sizeof a);
    snprintf(a.ns, sizeof a.ns, "ns");
    snprintf(a.pod, sizeof a.pod, "p1");
    snprintf(a.kind, sizeof a.kind, "shared");
    a.n = 2;
    snprintf(a.uuids[0], sizeof a.uuids[0], "GPU-2");
    snprintf(a.uuids[1], sizeof a.uuids[1], "MIG-3-1");
    a.mem_mib = 8192;
    a.milli = 305;
    ASSERT_EQ(dp_alloc_pack(&inv, &a, 1, &o, &buf, &len, &e), 0);
    V1beta1__AllocateResponse *r = v1beta1__allocate_response__unpack(NULL, len, buf);
    ASSERT_TRUE(r != NULL && r->n_container_responses == 1);
    if (r && r->n_container_responses == 1) {
        V1beta1__ContainerAllocateResponse *c = r->container_responses[0];
        const char *want[][2] = {{"NVIDIA_VISIBLE_DEVICES", "GPU-2,MIG-3-1"},
                                 {"CUDA_VISIBLE_DEVICES", "GPU-2,MIG-3-1"},
                                 {"GPUSCHED_GPU_MEMORY_MIB", "8192"},
                                 {"CUDA_DEVICE_MEMORY_LIMIT", "8192m"},
                                 {"GPUSCHED_GPU_MILLI", "305"},
                                 {"CUDA_DEVICE_SM_LIMIT", "31"},
                                 {"GPUSCHED_POD", "ns/p1"}};
        ASSERT_EQ(c->n_envs, 7);
        for (size_t i = 0; i < c->n_envs && i < 7; i++) {
            ASSERT_STREQ(c->envs[i]->key, want[i][0]);
            ASSERT_STREQ(c->envs[i]->value, want[i][1]);
        }
        ASSERT_EQ(c->n_annotations, 2);
        ASSERT_STREQ(c->annotations[0]->key, "gpusched.io/pod");
        ASSERT_STREQ(c->annotations[1]->value, "GPU-2,MIG-3-1");
        ASSERT_EQ(c->n_devices, 0); /* no dev_dir */
    }
    v1beta1__allocate_response__free_unpacked(r, NULL);
    free(buf);

    snprintf(a.uuids[1], sizeof a.uuids[1], "GPU-77");
    ASSERT_EQ(dp_alloc_pack(&inv, &a, 1, &o, &buf, &len, &e), -GS_ENOENT);
    ASSERT_CONTAINS(e.msg, "GPU GPU-77 (assigned to ns/p1) is not on this node");
}

/* The env value of key in c, NULL when absent. */
static const char *env_of(const V1beta1__ContainerAllocateResponse *c, const char *key)
{
    for (size_t i = 0; i < c->n_envs; i++)
        if (strcmp(c->envs[i]->key, key) == 0)
            return c->envs[i]->value;
    return NULL;
}

static V1beta1__AllocateResponse *pack_lists(const struct dp_inventory *inv,
                                             const struct dp_assign *a, const char *lists,
                                             const char *kind)
{
    struct dp_alloc_opts o = {.annot_prefix = "gpusched.io/", .cdi_kind = kind};
    struct gs_err e = GS_ERR_INIT;
    uint8_t *buf = NULL;
    size_t len = 0;
    ASSERT_EQ(dp_alloc_parse_lists(lists, &o.lists, &e), 0);
    ASSERT_EQ(dp_alloc_pack(inv, a, 1, &o, &buf, &len, &e), 0);
    V1beta1__AllocateResponse *r = v1beta1__allocate_response__unpack(NULL, len, buf);
    free(buf);
    ASSERT_TRUE(r && r->n_container_responses == 1);
    return r;
}

static void test_device_lists(void)
{
    struct dp_inventory inv;
    struct dp_assign a;
    struct gs_err e = GS_ERR_INIT;
    unsigned bits = 0;

    ASSERT_EQ(dp_alloc_parse_lists("cdi-cri,envvar,volume-mounts,cdi-annotations", &bits, &e), 0);
    ASSERT_EQ(bits, DP_LIST_ENVVAR | DP_LIST_MOUNTS | DP_LIST_CDI_ANNOTATIONS | DP_LIST_CDI_CRI);
    ASSERT_EQ(dp_alloc_parse_lists("envvar,volume", &bits, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "\"volume\": not a device list strategy");
    ASSERT_EQ(dp_alloc_parse_lists("", &bits, &e), -GS_EINVAL);
    ASSERT_EQ(dp_alloc_parse_lists("envvar,", &bits, &e), -GS_EINVAL);
    ASSERT_EQ(dp_alloc_parse_lists("envvarx", &bits, &e), -GS_EINVAL);
    ASSERT_EQ(dp_alloc_check_cdi_kind("nvidia.com/gpu", &e), 0);
    ASSERT_EQ(dp_alloc_check_cdi_kind("k8s.device-plugin.nvidia.com/gpu", &e), 0);
    const char *bad[] = {"nvidia.com", "/gpu", "nvidia.com/", "nvidia.com/g.pu", "-a/b",
                         "a/b-", "a/b/c", "a b/c"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ASSERT_EQ(dp_alloc_check_cdi_kind(bad[i], &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "\"a b/c\": not a CDI kind");

    make_inv(&inv, 1);
    memset(&a, 0, sizeof a);
    snprintf(a.kind, sizeof a.kind, "whole");
    a.n = 2;
    snprintf(a.uuids[0], sizeof a.uuids[0], "GPU-2");
    snprintf(a.uuids[1], sizeof a.uuids[1], "MIG-3-1");

    /* envvar alone: the UUIDs, nothing else */
    V1beta1__AllocateResponse *r = pack_lists(&inv, &a, "envvar", NULL);
    V1beta1__ContainerAllocateResponse *c = r->container_responses[0];
    ASSERT_STREQ(env_of(c, "NVIDIA_VISIBLE_DEVICES"), "GPU-2,MIG-3-1");
    ASSERT_EQ(c->n_mounts, 0);
    ASSERT_EQ(c->n_cdi_devices, 0);
    ASSERT_EQ(c->n_annotations, 1); /* gpu-uuids */
    v1beta1__allocate_response__free_unpacked(r, NULL);

    /* volume-mounts wins the variable over envvar: the directory, one
     * /dev/null per UUID in it */
    r = pack_lists(&inv, &a, "envvar,volume-mounts", NULL);
    c = r->container_responses[0];
    ASSERT_STREQ(env_of(c, "NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
    ASSERT_STREQ(env_of(c, "CUDA_VISIBLE_DEVICES"), "GPU-2,MIG-3-1");
    ASSERT_EQ(c->n_mounts, 2);
    if (c->n_mounts == 2) {
        ASSERT_STREQ(c->mounts[0]->host_path, "/dev/null");
        ASSERT_STREQ(c->mounts[0]->container_path, "/var/run/nvidia-container-devices/GPU-2");
        ASSERT_STREQ(c->mounts[1]->container_path, "/var/run/nvidia-container-devices/MIG-3-1");
        ASSERT_TRUE(c->mounts[1]->read_only);
    }
    v1beta1__allocate_response__free_unpacked(r, NULL);

    /* CDI only: "void" keeps a CUDA image's NVIDIA_VISIBLE_DEVICES=all from
     * reaching a legacy runtime; the names in both places */
    r = pack_lists(&inv, &a, "cdi-cri,cdi-annotations", NULL);
    c = r->container_responses[0];
    ASSERT_STREQ(env_of(c, "NVIDIA_VISIBLE_DEVICES"), "void");
    ASSERT_EQ(c->n_mounts, 0);
    ASSERT_EQ(c->n_cdi_devices, 2);
    if (c->n_cdi_devices == 2) {
        ASSERT_STREQ(c->cdi_devices[0]->name, "nvidia.com/gpu=GPU-2");
        ASSERT_STREQ(c->cdi_devices[1]->name, "nvidia.com/gpu=MIG-3-1");
    }
    ASSERT_EQ(c->n_annotations, 2);
    if (c->n_annotations == 2) {
        ASSERT_STREQ(c->annotations[0]->key, "cdi.k8s.io/gpusched_GPU-2");
        ASSERT_STREQ(c->annotations[0]->value, "nvidia.com/gpu=GPU-2,nvidia.com/gpu=MIG-3-1");
    }
    v1beta1__allocate_response__free_unpacked(r, NULL);

    /* annotations alone, another kind; a key made only of the UUID's
     * name-safe characters, at most 63 of them after "cdi.k8s.io/", ending
     * with a letter or digit */
    char uuid[80], want[80];
    snprintf(uuid, sizeof uuid, "MIG-GPU-%045d-7/1/0", 0); /* 45 zeros, then '-' at the cut */
    snprintf(want, sizeof want, "cdi.k8s.io/gpusched_MIG-GPU-%045d", 0);
    snprintf(a.uuids[0], sizeof a.uuids[0], "%s", uuid);
    snprintf(inv.gpu[3].mig[0].uuid, sizeof inv.gpu[3].mig[0].uuid, "%s", uuid);
    a.n = 1;
    r = pack_lists(&inv, &a, "cdi-annotations", "k8s.device-plugin.nvidia.com/gpu");
    c = r->container_responses[0];
    ASSERT_EQ(c->n_cdi_devices, 0);
    ASSERT_EQ(c->n_annotations, 2);
    if (c->n_annotations == 2) {
        ASSERT_STREQ(c->annotations[0]->key, want);
        ASSERT_EQ(strlen(want), 11 + 62);
        ASSERT_CONTAINS(c->annotations[0]->value, "k8s.device-plugin.nvidia.com/gpu=MIG-GPU-");
        ASSERT_CONTAINS(c->annotations[0]->value, "-7/1/0");
    }
    v1beta1__allocate_response__free_unpacked(r, NULL);
}

static void test_inventory(void)
{
    struct dp_inventory inv;

    make_inv(&inv, 1);
    inv.gpu[2].healthy = 0;
    snprintf(inv.gpu[2].reason, sizeof inv.gpu[2].reason, "XID 79 (fatal)");
    json_t *j = dp_inventory_json(&inv, "2026-11-22T15:20:01Z");
    ASSERT_EQ(json_integer_value(json_object_get(j, "version")), 1);
    ASSERT_STREQ(json_string_value(json_object_get(j, "updated_at")), "2026-11-22T15:20:01Z");
    json_t *g0 = json_array_get(json_object_get(j, "gpus"), 0);
    ASSERT_STREQ(json_string_value(json_object_get(g0, "uuid")), "GPU-0");
    json_t *l = json_array_get(json_object_get(g0, "links"), 0);
    ASSERT_STREQ(json_string_value(json_object_get(l, "type")), "nvlink");
    ASSERT_EQ(json_integer_value(json_object_get(l, "nvlinks")), 18);
    ASSERT_STREQ(json_string_value(json_object_get(
                     json_array_get(json_object_get(g0, "links"), 1), "type")), "pix");
    json_t *g2 = json_array_get(json_object_get(j, "gpus"), 2);
    ASSERT_TRUE(json_is_false(json_object_get(g2, "healthy")));
    ASSERT_STREQ(json_string_value(json_object_get(g2, "reason")), "XID 79 (fatal)");
    json_t *g3 = json_array_get(json_object_get(j, "gpus"), 3);
    ASSERT_STREQ(json_string_value(json_object_get(
                     json_array_get(json_object_get(g3, "mig"), 1), "profile")), "1g.10gb");
    /* a healthy instance reads as before; a faulted one says so, whatever its
     * reason's bytes (a message cut inside a UTF-8 character included) */
    ASSERT_TRUE(json_object_get(json_array_get(json_object_get(g3, "mig"), 0), "healthy") ==
                NULL);
    json_decref(j);
    inv.gpu[3].mig[1].healthy = 0;
    snprintf(inv.gpu[3].mig[1].reason, sizeof inv.gpu[3].mig[1].reason, "XID 94: \xc3");
    snprintf(inv.gpu[2].reason, sizeof inv.gpu[2].reason, "probe: caf\xc3");
    j = dp_inventory_json(&inv, "2026-11-22T15:20:01Z");
    g3 = json_array_get(json_object_get(j, "gpus"), 3);
    json_t *m1 = json_array_get(json_object_get(g3, "mig"), 1);
    ASSERT_TRUE(json_is_false(json_object_get(m1, "healthy")));
    ASSERT_STREQ(json_string_value(json_object_get(m1, "reason")), "XID 94: ?");
    ASSERT_EQ(json_array_size(json_object_get(j, "gpus")), 4);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(json_object_get(j, "gpus"), 2),
                                                   "reason")), "probe: caf?");
    json_decref(j);
    inv.gpu[3].mig[1].healthy = 1;

    json_t *have = json_pack("{s:s}", "nvidia.com/gpu.product", "custom");
    json_t *patch = dp_inventory_node_patch(&inv, "gpusched.io/gpu-inventory", have,
                                            "2026-11-22T15:20:01Z");
    json_t *meta = json_object_get(patch, "metadata");
    json_t *labels = json_object_get(meta, "labels");
    ASSERT_TRUE(json_object_get(labels, "nvidia.com/gpu.product") == NULL); /* kept theirs */
    ASSERT_STREQ(json_string_value(json_object_get(labels, "nvidia.com/gpu.memory")), "81559");
    ASSERT_STREQ(json_string_value(json_object_get(labels, "nvidia.com/gpu.count")), "4");
    const char *ann = json_string_value(
        json_object_get(json_object_get(meta, "annotations"), "gpusched.io/gpu-inventory"));
    ASSERT_CONTAINS(ann, "\"uuid\":\"GPU-3\"");
    json_decref(patch);
    json_decref(have);
    json_t *lab = dp_inventory_labels(&inv);
    ASSERT_STREQ(json_string_value(json_object_get(lab, "nvidia.com/gpu.product")),
                 "NVIDIA-H100-80GB-HBM3");
    json_decref(lab);
}

static void test_podres(void)
{
    V1__ListPodResourcesResponse r = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
    V1__PodResources pr = V1__POD_RESOURCES__INIT, *prp = &pr;
    V1__ContainerResources c = V1__CONTAINER_RESOURCES__INIT, *cp = &c;
    V1__ContainerDevices d1 = V1__CONTAINER_DEVICES__INIT, d2 = V1__CONTAINER_DEVICES__INIT;
    V1__ContainerDevices *dp[] = {&d1, &d2};
    char *ids1[] = {"GPU-1::0", "GPU-2::1"}, *ids2[] = {"x"};
    struct dp_podres out;
    struct gs_err e = GS_ERR_INIT;

    pr.namespace_ = "ns";
    pr.name = "p";
    pr.n_containers = 1;
    pr.containers = &cp;
    c.name = "c";
    c.n_devices = 2;
    c.devices = dp;
    d1.resource_name = "nvidia.com/gpu";
    d1.n_device_ids = 2;
    d1.device_ids = ids1;
    d2.resource_name = "example.com/other";
    d2.n_device_ids = 1;
    d2.device_ids = ids2;
    r.n_pod_resources = 1;
    r.pod_resources = &prp;
    uint8_t buf[512];
    size_t len = v1__list_pod_resources_response__pack(&r, buf);
    ASSERT_EQ(dp_podres_parse(buf, len, "nvidia.com/gpu", &out, &e), 0);
    ASSERT_EQ(out.n, 1);
    ASSERT_STREQ(out.e[0].key, "ns/p/c");
    char *q[] = {"GPU-2::1", "GPU-1::0"};
    ASSERT_TRUE(dp_podres_find_ids(&out, q, 2) == &out.e[0]);
    ASSERT_TRUE(dp_podres_find_ids(&out, q, 1) == NULL);
    dp_podres_clear(&out);
    /* kubelet 1.21+: one entry per device (and per NUMA node of it, so an ID
     * may come twice); 1.20: one per NUMA node. One set of IDs either way. */
    V1__ContainerDevices s1 = V1__CONTAINER_DEVICES__INIT, s2 = V1__CONTAINER_DEVICES__INIT;
    V1__ContainerDevices s3 = V1__CONTAINER_DEVICES__INIT;
    V1__ContainerDevices *sp[] = {&s1, &d2, &s2, &s3};
    char *i1[] = {"GPU-1::0"}, *i2[] = {"GPU-2::1"};
    s1.resource_name = s2.resource_name = s3.resource_name = "nvidia.com/gpu";
    s1.n_device_ids = s2.n_device_ids = s3.n_device_ids = 1;
    s1.device_ids = i1;
    s2.device_ids = i2;
    s3.device_ids = i1;
    c.n_devices = 4;
    c.devices = sp;
    len = v1__list_pod_resources_response__pack(&r, buf);
    ASSERT_EQ(dp_podres_parse(buf, len, "nvidia.com/gpu", &out, &e), 0);
    ASSERT_EQ(out.n, 1);
    ASSERT_EQ(out.e[0].n_ids, 2);
    ASSERT_TRUE(dp_podres_find_ids(&out, q, 2) == &out.e[0]);
    dp_podres_clear(&out);
    uint8_t junk[] = {0x0a, 0x7f, 0x01};
    ASSERT_EQ(dp_podres_parse(junk, sizeof junk, "nvidia.com/gpu", &out, &e), -GS_EPROTO);
    ASSERT_EQ(dp_podres_list("/nonexistent/kubelet.sock", "nvidia.com/gpu", 100, &out, &e),
              -GS_EUNAVAIL);
    /* a socket that cannot be made says why when its directory does */
    static const struct dp_grpc_method none[] = {{NULL, NULL, NULL}};
    struct dp_grpc_server *srv = NULL;
    dp_grpc_init();
    ASSERT_EQ(dp_grpc_server_start("/nonexistent/gpusched-gpu.sock", none, NULL, &srv, &e),
              -GS_EIO);
    ASSERT_CONTAINS(e.msg, "directory '/nonexistent': No such file or directory");
    dp_grpc_shutdown();
}

int test_dp_alloc(void)
{
    test_devices();
    test_match();
    test_init_containers();
    test_pack();
    test_device_lists();
    test_inventory();
    test_podres();
    return 0;
}
