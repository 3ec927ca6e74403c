/* tests/unit/test_ext.c - the extender's modules without HTTP: protocol
 * parsing, node inventory, annotations round trip, the journal (torn and
 * damaged records), config rows, the scheduler's bind/release/restore
 * accounting, and a /filter that waits for the /bind of the pod before it. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cluster.h"
#include "ext/annot.h"
#include "ext/config.h"
#include "ext/journal.h"
#include "ext/nodes.h"
#include "ext/pdbs.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "test.h"

static void test_proto(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_args a;
    struct ext_bind b;
    struct ext_preempt p;
    const char *s;

    s = "{\"pod\":{\"metadata\":{\"name\":\"p\"}},\"NODENAMES\":[\"a\",\"b\"],\"Nodes\":null}";
    ASSERT_EQ(ext_args_parse(s, strlen(s), &a, &e), 0);
    ASSERT_EQ(a.n, 2);
    ASSERT_STREQ(a.names[1], "b");
    ASSERT_EQ(a.from_nodes, 0);
    ext_args_clear(&a);
    s = "{\"Pod\":{\"metadata\":{\"name\":\"p\"}},\"Nodes\":{\"items\":[{\"metadata\":"
        "{\"name\":\"n1\"}}]}}";
    ASSERT_EQ(ext_args_parse(s, strlen(s), &a, &e), 0);
    ASSERT_EQ(a.from_nodes, 1);
    ASSERT_STREQ(a.names[0], "n1");
    ext_args_clear(&a);
    s = "{\"Pod\":{\"metadata\":{\"name\":\"p\"}},\"Nodes\":{\"items\":[{}]}}";
    ASSERT_TRUE(ext_args_parse(s, strlen(s), &a, &e) < 0);
    ASSERT_CONTAINS(e.msg, "Nodes.items[0].metadata.name");
    s = "{\"Pod\":{\"metadata\":{\"name\":\"p\"}}}";
    ASSERT_TRUE(ext_args_parse(s, strlen(s), &a, &e) < 0);
    ASSERT_CONTAINS(e.msg, "NodeNames and Nodes");
    s = "{\"Pod\":{\"metadata\":{\"name\":\"p\"}},\"Pod\":1}";
    ASSERT_TRUE(ext_args_parse(s, strlen(s), &a, &e) < 0);

    s = "{\"PodName\":\"p\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"node\":\"n\"}";
    ASSERT_EQ(ext_bind_parse(s, strlen(s), &b, &e), 0);
    ASSERT_STREQ(b.node, "n");
    ext_bind_clear(&b);
    s = "{\"PodName\":\"p\",\"PodNamespace\":\"ns\",\"PodUID\":\"\",\"Node\":\"n\"}";
    ASSERT_TRUE(ext_bind_parse(s, strlen(s), &b, &e) < 0);
    ASSERT_CONTAINS(e.msg, "PodUID");

    s = "{\"Pod\":{\"metadata\":{\"name\":\"p\"}},\"NodeNameToMetaVictims\":{\"n1\":{\"Pods\":"
        "[{\"UID\":\"v1\"}],\"NumPDBViolations\":2}}}";
    ASSERT_EQ(ext_preempt_parse(s, strlen(s), &p, &e), 0);
    ASSERT_EQ(p.n, 1);
    ASSERT_STREQ(p.nodes[0].uids[0], "v1");
    ASSERT_EQ(p.nodes[0].pdb_violations, 2);
    ext_preempt_clear(&p);
    s = "{\"Pod\":{\"metadata\":{\"name\":\"p\"}},\"NodeNameToVictims\":{\"n1\":{\"Pods\":"
        "[{\"metadata\":{\"name\":\"x\"}}]}}}";
    ASSERT_TRUE(ext_preempt_parse(s, strlen(s), &p, &e) < 0);
    ASSERT_CONTAINS(e.msg, "metadata.uid");
}

static const char *INV =
    "{\"version\":1,\"updated_at\":\"2026-11-22T15:20:01Z\",\"gpus\":["
    "{\"index\":0,\"uuid\":\"GPU-0\",\"model\":\"H100\",\"memory_mib\":81559,\"numa_node\":0,"
    "\"links\":[{\"gpu\":1,\"type\":\"nvlink\"}]},"
    "{\"index\":1,\"uuid\":\"GPU-1\",\"model\":\"H100\",\"memory_mib\":81559,\"healthy\":false},"
    "{\"index\":2,\"uuid\":\"GPU-2\",\"model\":\"H100\",\"memory_mib\":81559,\"mig_enabled\":true,"
    "\"mig\":[{\"uuid\":\"MIG-a\",\"profile\":\"1g.10gb\",\"memory_mib\":9856},"
    "{\"uuid\":\"MIG-b\",\"profile\":\"1g.10gb\",\"memory_mib\":9856,\"healthy\":false,"
    "\"reason\":\"XID 94 (transient)\"}]}]}";

static json_t *node_json(const char *name, const char *inv)
{
    json_t *n = json_pack("{s:{s:s, s:{s:s}, s:{}}, s:{s:{s:s, s:s, s:s}}}", "metadata", "name",
                          name, "labels", "zone", "a", "annotations", "status", "allocatable",
                          "cpu", "8", "memory", "32Gi", "pods", "110");
    if (inv)
        json_object_set_new(json_object_get(json_object_get(n, "metadata"), "annotations"),
                            "gpusched.io/gpu-inventory", json_string(inv));
    return n;
}

static void test_nodes(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_node_spec spec;
    struct ext_node_buf buf;
    double t;
    json_t *n = node_json("n1", INV);

    ASSERT_EQ(ext_node_spec(n, core_names_default(), &spec, &buf, &t, &e), 0);
    ASSERT_EQ(spec.n_gpus, 3);
    ASSERT_EQ(spec.gpus[0].link[1], CORE_LINK_NVLINK);
    ASSERT_EQ(spec.gpus[1].healthy, 0);
    ASSERT_EQ(spec.gpus[2].healthy, 1);
    ASSERT_EQ(spec.gpus[2].n_mig, 2);
    ASSERT_EQ(spec.gpus[2].mig[0].unhealthy, 0);
    ASSERT_EQ(spec.gpus[2].mig[1].unhealthy, 1);
    ASSERT_EQ(spec.cpu_milli, 8000);
    ASSERT_EQ(spec.max_pods, 110);
    ASSERT_EQ(spec.n_labels, 1);
    ASSERT_NEAR(t, 1795360801.0, 0.5);
    ext_node_buf_clear(&buf);
    json_decref(n);

    /* fallback: capacity + labels */
    n = node_json("n2", NULL);
    json_object_set_new(json_object_get(json_object_get(n, "metadata"), "labels"),
                        "nvidia.com/gpu.product", json_string("Tesla-T4"));
    json_object_set_new(json_object_get(json_object_get(n, "metadata"), "labels"),
                        "nvidia.com/gpu.memory", json_string("15360"));
    json_object_set_new(json_object_get(n, "status"), "capacity",
                        json_pack("{s:s}", "nvidia.com/gpu", "2"));
    ASSERT_EQ(ext_node_spec(n, core_names_default(), &spec, &buf, &t, &e), 0);
    ASSERT_EQ(spec.n_gpus, 2);
    ASSERT_STREQ(spec.gpus[1].uuid, "n2/gpu1");
    ASSERT_EQ(spec.gpus[1].mem_mib, 15360);
    ASSERT_STREQ(spec.gpus[0].model, "Tesla-T4");
    ext_node_buf_clear(&buf);
    json_object_set_new(json_object_get(json_object_get(n, "metadata"), "labels"),
                        "nvidia.com/gpu.memory", json_string("lots"));
    ASSERT_TRUE(ext_node_spec(n, core_names_default(), &spec, &buf, &t, &e) < 0);
    ASSERT_CONTAINS(e.msg, "nvidia.com/gpu.memory");
    json_decref(n);

    static const struct {
        const char *inv, *needle;
    } bad[] = {
        {"{\"version\":2,\"gpus\":[]}", "version"},
        {"{\"version\":1}", "gpus"},
        {"{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"a\",\"model\":\"m\"},"
         "{\"index\":0,\"uuid\":\"b\",\"model\":\"m\"}]}", "appears twice"},
        {"{\"version\":1,\"gpus\":[{\"index\":99,\"uuid\":\"a\",\"model\":\"m\"}]}", "index"},
        {"{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"a\",\"model\":\"m\",\"links\":"
         "[{\"gpu\":1,\"type\":\"warp\"}]}]}", "links[0].type"},
        {"{\"version\":1,\"updated_at\":\"yesterday\",\"gpus\":[]}", "updated_at"},
        {"[", "not JSON"},
        {"{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"a\",\"model\":\"m\",\"mig\":"
         "[{\"uuid\":\"M\",\"profile\":\"1g.5gb\",\"memory_mib\":1,\"healthy\":\"no\"}]}]}",
         "gpus[0].mig[0].healthy: not a boolean"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = node_json("bad", bad[i].inv);
        ASSERT_TRUE(ext_node_spec(n, core_names_default(), &spec, &buf, &t, &e) < 0);
        ASSERT_CONTAINS(e.msg, bad[i].needle);
        ASSERT_CONTAINS(e.msg, "node bad");
        json_decref(n);
    }
}

static void test_annot(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_cluster *c = core_cluster_new();
    struct core_node_spec spec;
    struct ext_node_buf buf;
    struct core_alloc a, b;
    double t;
    const char *inv = "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G0\",\"model\":\"A\","
                      "\"memory_mib\":1000},{\"index\":1,\"uuid\":\"G1\",\"model\":\"B\","
                      "\"memory_mib\":1000}]}";
    json_t *n = node_json("n", inv);

    ASSERT_EQ(ext_node_spec(n, core_names_default(), &spec, &buf, &t, &e), 0);
    ASSERT_EQ(core_cluster_upsert_node(c, &spec, &e), 0);
    ext_node_buf_clear(&buf);
    json_decref(n);
    memset(&a, 0, sizeof a);
    snprintf(a.pod_uid, sizeof a.pod_uid, "u1");
    snprintf(a.pod_name, sizeof a.pod_name, "ns/p");
    snprintf(a.node, sizeof a.node, "n");
    a.kind = CORE_REQ_SHARED;
    a.n = 1;
    a.gpu[0] = 1;
    a.mig[0] = -1;
    a.mem_mib[0] = 300;
    a.milli[0] = 250;
    a.model_mask = 3; /* both models: any, so no gpu-models */
    json_t *ann = ext_annot_build(c, core_cluster_find(c, "n"), &a, "gpusched.io/", "T");
    ASSERT_TRUE(json_object_get(ann, "gpusched.io/gpu-models") == NULL);
    json_decref(ann);
    a.model_mask = 2; /* held to B */
    ann = ext_annot_build(c, core_cluster_find(c, "n"), &a, "gpusched.io/", "T");
    ASSERT_STREQ(json_string_value(json_object_get(ann, "gpusched.io/gpu-uuids")), "G1");
    ASSERT_STREQ(json_string_value(json_object_get(ann, "gpusched.io/gpu-milli")), "250");
    ASSERT_STREQ(json_string_value(json_object_get(ann, "gpusched.io/gpu-models")), "B");
    ASSERT_STREQ(ext_annot_node(ann, "gpusched.io/"), "n");
    memset(&b, 0, sizeof b);
    ASSERT_EQ(ext_annot_parse(c, ann, "gpusched.io/", &b, &e), 0);
    ASSERT_EQ(b.kind, CORE_REQ_SHARED);
    ASSERT_EQ(b.gpu[0], 1);
    ASSERT_EQ(b.mem_mib[0], 300);
    ASSERT_EQ(b.milli[0], 250);
    ASSERT_EQ(b.model_mask, 2ULL);
    /* it fits the request of the pod it is on only as a bind writes it */
    struct core_request r = {.kind = CORE_REQ_SHARED, .num_gpu = 1};
    ASSERT_EQ(ext_annot_fits(&r, &b, &e), 0);
    r.num_gpu = 2;
    ASSERT_EQ(ext_annot_fits(&r, &b, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "(shared, 1 GPUs) do not match its request (shared, 2)");
    r = (struct core_request){.kind = CORE_REQ_WHOLE, .num_gpu = 1};
    ASSERT_EQ(ext_annot_fits(&r, &b, &e), -GS_EINVAL);
    r = (struct core_request){.kind = CORE_REQ_NONE};
    ASSERT_EQ(ext_annot_fits(&r, &b, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "request (no GPU, 0)");
    /* names this cluster does not know are skipped; none known, or none
     * given, is any */
    static const struct {
        const char *models;
        uint64_t mask;
    } models[] = {{"Z|B", 2}, {"Z", ~0ULL}, {"A|B", ~0ULL}, {"", ~0ULL}, {NULL, ~0ULL}};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        if (models[i].models)
            json_object_set_new(ann, "gpusched.io/gpu-models", json_string(models[i].models));
        else
            json_object_del(ann, "gpusched.io/gpu-models");
        ASSERT_EQ(ext_annot_parse(c, ann, "gpusched.io/", &b, &e), 0);
        ASSERT_EQ(b.model_mask, models[i].mask);
    }
    json_object_set_new(ann, "gpusched.io/gpu-uuids", json_string("G1,nope"));
    ASSERT_TRUE(ext_annot_parse(c, ann, "gpusched.io/", &b, &e) < 0);
    ASSERT_CONTAINS(e.msg, "nope is not a GPU of node n");
    json_object_set_new(ann, "gpusched.io/gpu-uuids", json_string("G1"));
    json_object_set_new(ann, "gpusched.io/gpu-milli", json_string("2000"));
    ASSERT_TRUE(ext_annot_parse(c, ann, "gpusched.io/", &b, &e) < 0);
    ASSERT_CONTAINS(e.msg, "gpu-milli");
    json_object_set_new(ann, "gpusched.io/node", json_string("other"));
    ASSERT_EQ(ext_annot_parse(c, ann, "gpusched.io/", &b, &e), -GS_ENOENT);
    json_decref(ann);
    core_cluster_free(c);
}

static int count_rec(void *ud, const json_t *rec, struct gs_err *e)
{
    (void)e;
    (*(int *)ud) += (int)json_integer_value(json_object_get(rec, "n"));
    return 0;
}

static void test_journal(const char *dir)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_journal *j;
    char path[512];
    int sum = 0, torn = 0;

    ASSERT_EQ(ext_crc32("123456789", 9), 0xcbf43926u);
    ASSERT_EQ(ext_journal_open(dir, &j, &e), 0);
    for (int i = 1; i <= 3; i++) {
        json_t *r = json_pack("{s:i}", "n", i);
        ASSERT_EQ(ext_journal_append(j, r, &e), 0);
        json_decref(r);
    }
    ext_journal_close(j);
    snprintf(path, sizeof path, "%s/journal", dir);
    int fd = open(path, O_WRONLY | O_APPEND);
    ASSERT_TRUE(write(fd, "12345678 {\"n\":", 14) == 14);
    close(fd);
    struct stat before, after;
    ASSERT_EQ(stat(path, &before), 0);
    /* the read-only reader skips the torn record and leaves it in place */
    ASSERT_EQ(ext_journal_read(dir, count_rec, &sum, &torn, &e), 0);
    ASSERT_EQ(sum, 6);
    ASSERT_EQ(torn, 1);
    ASSERT_EQ(stat(path, &after), 0);
    ASSERT_EQ(after.st_size, before.st_size);
    sum = 0;
    ASSERT_EQ(ext_journal_open(dir, &j, &e), 0);
    ASSERT_EQ(ext_journal_replay(j, count_rec, &sum, &torn, &e), 0);
    ASSERT_EQ(sum, 6);
    ASSERT_EQ(torn, 1);
    ASSERT_EQ(stat(path, &after), 0);
    ASSERT_TRUE(after.st_size < before.st_size); /* replay cut it */
    json_t *r = json_pack("{s:i}", "n", 10);
    ASSERT_EQ(ext_journal_append(j, r, &e), 0); /* lands after the cut */
    json_decref(r);
    sum = 0;
    ASSERT_EQ(ext_journal_replay(j, count_rec, &sum, &torn, &e), 0);
    ASSERT_EQ(sum, 16);
    ASSERT_EQ(torn, 0);
    json_t *one = json_pack("{s:i}", "n", 5);
    ASSERT_EQ(ext_journal_rewrite(j, &one, 1, &e), 0);
    json_decref(one);
    sum = 0;
    ASSERT_EQ(ext_journal_replay(j, count_rec, &sum, &torn, &e), 0);
    ASSERT_EQ(sum, 5);
    ext_journal_close(j);
    /* damage before the end is an error naming the line */
    fd = open(path, O_WRONLY | O_TRUNC);
    ASSERT_TRUE(write(fd, "00000000 {}\n00000000 {}\n", 24) == 24);
    close(fd);
    ASSERT_EQ(ext_journal_open(dir, &j, &e), 0);
    ASSERT_TRUE(ext_journal_replay(j, count_rec, &sum, &torn, &e) < 0);
    ASSERT_CONTAINS(e.msg, "journal:1");
    ext_journal_close(j);
}

static void test_config(const char *dir)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_config c;
    char path[512];
    FILE *f;

    snprintf(path, sizeof path, "%s/ext.yaml", dir);
    f = fopen(path, "w");
    fputs("listen: 0.0.0.0:9999\npolicy: spread\ntop_k: 3\ninventory_ttl: 30.5\n"
          "leader_elect: true\nresource_gpu: example.com/gpu\n", f);
    fclose(f);
    ext_config_defaults(&c);
    ASSERT_EQ(ext_config_load(&c, path, &e), 0);
    ASSERT_EQ(ext_config_finish(&c, &e), 0);
    ASSERT_STREQ(c.listen, "0.0.0.0:9999");
    ASSERT_EQ(c.top_k, 3);
    ASSERT_NEAR(c.inventory_ttl, 30.5, 1e-9);
    ASSERT_EQ(c.leader_elect, 1);
    ASSERT_STREQ(c.names.gpu, "example.com/gpu");
    ASSERT_STREQ(c.names.gpu_memory, "nvidia.com/gpu-memory");
    ext_config_clear(&c);

    struct ext_flags *fl;
    const struct opt *opts = ext_config_opts(&fl);
    char a0[] = "--top-k", a1[] = "7", a2[] = "--policy=binpack", a3[] = "--in-cluster";
    char *argv[] = {a0, a1, a2, a3, NULL};
    int npos = 0;
    ASSERT_EQ(opt_parse(4, argv, opts, &npos, &e), 0);
    ext_config_defaults(&c);
    ext_config_apply_flags(&c, fl);
    ASSERT_EQ(ext_config_finish(&c, &e), 0);
    ASSERT_EQ(c.top_k, 7);
    ASSERT_STREQ(c.policy, "binpack");
    ASSERT_EQ(c.in_cluster, 1);
    ASSERT_NEAR(c.inventory_ttl, 300, 0);
    ASSERT_EQ(c.nudge, 1); /* defaults on */
    ASSERT_EQ(c.events, 1);
    ext_config_clear(&c);
    ext_flags_free(fl);

    /* booleans that default on can be turned off by flag */
    opts = ext_config_opts(&fl);
    char b0[] = "--no-nudge", b1[] = "--events";
    char *bargv[] = {b0, b1, NULL};
    ASSERT_EQ(opt_parse(2, bargv, opts, &npos, &e), 0);
    ext_config_defaults(&c);
    ext_config_apply_flags(&c, fl);
    ASSERT_EQ(c.nudge, 0);
    ASSERT_EQ(c.events, 1);
    ext_config_clear(&c);
    ext_flags_free(fl);

    ext_config_defaults(&c);
    free(c.log_level);
    c.log_level = strdup("loud");
    ASSERT_TRUE(ext_config_finish(&c, &e) < 0);
    ASSERT_CONTAINS(e.msg, "log_level");
    ext_config_clear(&c);
}

static void test_sched(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    struct ext_reply reply;
    size_t rlen;
    int nodes, allocs;
    const char *inv = "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G0\",\"model\":\"A\","
                      "\"memory_mib\":1000}]}";

    ASSERT_TRUE(ext_sched_new(&(struct ext_sched_opts){.policy = "nope"}, &s, &e) < 0);
    ASSERT_CONTAINS(e.msg, "nope");
    ASSERT_TRUE(ext_sched_new(&(struct ext_sched_opts){.hard_pod_affinity_weight = 101}, &s,
                              &e) < 0);
    ASSERT_CONTAINS(e.msg, "hard_pod_affinity_weight: 101 is not 0..100");
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){0}, &s, &e), 0);
    json_t *n = node_json("n", inv);
    ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
    json_decref(n);
    const char *f = "{\"Pod\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"d\",\"uid\":\"u\"},"
                    "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
                    "{\"nvidia.com/gpu\":\"1\"}}}]}},\"NodeNames\":[\"n\"]}";
    ASSERT_EQ(ext_sched_filter(s, f, strlen(f), &reply), 200);
    char *txt = ext_reply_take(&reply, &rlen);
    json_t *fr = json_loads(txt, 0, NULL);
    ASSERT_EQ(json_array_size(json_object_get(fr, "NodeNames")), 1);
    ASSERT_EQ(rlen, strlen(txt));
    json_decref(fr);
    free(txt);
    const char *b = "{\"PodName\":\"p\",\"PodNamespace\":\"d\",\"PodUID\":\"u\",\"Node\":\"n\"}";
    ASSERT_EQ(ext_sched_bind(s, b, strlen(b), &reply), 200);
    free(ext_reply_take(&reply, &rlen));
    ext_sched_counts(s, &nodes, &allocs);
    ASSERT_EQ(allocs, 1);
    json_t *all = ext_sched_allocations(s);
    ASSERT_EQ(json_array_size(all), 1);
    ASSERT_EQ(ext_sched_release(s, "d/p", &e), 0);
    ASSERT_EQ(ext_sched_release(s, "d/p", &e), -GS_ENOENT);
    ASSERT_EQ(ext_sched_restore(s, json_array_get(all, 0), &e), 0);
    ASSERT_EQ(ext_sched_restore(s, json_array_get(all, 0), &e), -GS_ECONFLICT);
    json_decref(all);
    ASSERT_EQ(ext_sched_check_inventory(s, 1e12, 10), 0); /* no updated_at: never stale */
    ext_sched_free(s);
}

/* The node and GPUs of the one allocation held ("" when none or several). */
static void held(struct ext_sched *s, char *out, size_t cap)
{
    json_t *all = ext_sched_allocations(s);
    const json_t *ann = json_object_get(json_array_get(all, 0), "annotations");
    snprintf(out, cap, "%s:%s",
             json_array_size(all) == 1 ? json_string_value(json_object_get(ann, "gpusched.io/node"))
                                       : "",
             json_array_size(all) == 1
                 ? json_string_value(json_object_get(ann, "gpusched.io/gpu-uuids"))
                 : "");
    json_decref(all);
}

/* A watched pod whose assignment annotations change (a follower restored the
 * node an earlier bind wrote; the leader then bound the pod elsewhere): the
 * allocation follows them, not what was restored first. */
static void test_observe_moved_assignment(void)
{
    struct ext_sched *s;
    struct gs_err e = GS_ERR_INIT;
    char got[64];
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){0}, &s, &e), 0);
    for (int i = 0; i < 2; i++) {
        char name[8], inv[200];
        snprintf(name, sizeof name, "n%d", i);
        snprintf(inv, sizeof inv,
                 "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G%d-0\",\"model\":\"A\","
                 "\"memory_mib\":1000},{\"index\":1,\"uuid\":\"G%d-1\",\"model\":\"A\","
                 "\"memory_mib\":1000}]}",
                 i, i);
        json_t *n = node_json(name, inv);
        ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
        json_decref(n);
    }
    json_t *pod = json_pack(
        "{s:{s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s, s:s}}, s:{s:[{s:s, s:{s:{s:s}}}]},"
        " s:{s:s}}",
        "metadata", "name", "x", "namespace", "d", "uid", "u2", "annotations",
        "gpusched.io/node", "n0", "gpusched.io/request-kind", "whole", "gpusched.io/gpu-uuids",
        "G0-1", "gpusched.io/gpu-indices", "1", "gpusched.io/gpu-memory", "1000",
        "gpusched.io/gpu-milli", "1000", "spec", "containers", "name", "c", "resources", "limits",
        "nvidia.com/gpu", "1", "status", "phase", "Pending");
    json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");
    ext_sched_observe_pod(s, pod, 0);
    held(s, got, sizeof got);
    ASSERT_STREQ(got, "n0:G0-1");
    ext_sched_observe_pod(s, pod, 0); /* the same again: kept */
    held(s, got, sizeof got);
    ASSERT_STREQ(got, "n0:G0-1");
    json_object_set_new(ann, "gpusched.io/gpu-uuids", json_string("G0-0"));
    json_object_set_new(ann, "gpusched.io/gpu-indices", json_string("0"));
    ASSERT_EQ(ext_sched_observe_pod(s, pod, 0), 1); /* G0-1 freed */
    held(s, got, sizeof got);
    ASSERT_STREQ(got, "n0:G0-0");
    json_object_set_new(ann, "gpusched.io/node", json_string("n1"));
    json_object_set_new(ann, "gpusched.io/gpu-uuids", json_string("G1-1"));
    json_object_set_new(ann, "gpusched.io/gpu-indices", json_string("1"));
    ext_sched_observe_pod(s, pod, 0);
    held(s, got, sizeof got);
    ASSERT_STREQ(got, "n1:G1-1");
    json_decref(pod);
    ext_sched_free(s);
}

static json_t *assigned_pod(const char *name, const char *uid, const char *node_name,
                            const char *cpu, const char *start)
{
    json_t *pod = json_pack(
        "{s:{s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s}}, s:{s:[{s:s, s:{s:{s:s, s:s}}}]},"
        " s:{s:s}}",
        "metadata", "name", name, "namespace", "d", "uid", uid, "annotations", "gpusched.io/node",
        "n0", "gpusched.io/request-kind", "whole", "gpusched.io/gpu-uuids", "G0-0",
        "gpusched.io/gpu-indices", "0", "spec", "containers", "name", "c", "resources",
        "requests", "nvidia.com/gpu", "1", "cpu", cpu, "status", "phase",
        start ? "Running" : "Pending");
    if (node_name)
        json_object_set_new(json_object_get(pod, "spec"), "nodeName", json_string(node_name));
    if (start)
        json_object_set_new(json_object_get(pod, "status"), "startTime", json_string(start));
    return pod;
}

/* A pod kubelet runs keeps its GPUs when they are rebuilt from its
 * annotations even where they no longer fit: a stale assignment of a pod
 * that never ran took the GPU first, and the node's allocatable CPU is now
 * below the pod's request. It was left uncounted (its GPU offered again). */
static void test_restore_of_a_running_pod_that_no_longer_fits(void)
{
    struct ext_sched *s;
    struct gs_err e = GS_ERR_INIT;
    char got[64];
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){0}, &s, &e), 0);
    json_t *n = node_json("n0", "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G0-0\","
                                "\"model\":\"A\",\"memory_mib\":1000}]}");
    ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
    json_decref(n);
    json_t *stale = assigned_pod("stale", "u-stale", NULL, "1", NULL);
    json_t *run = assigned_pod("run", "u-run", "n0", "12", "2026-01-01T00:00:00Z");
    ext_sched_observe_pod(s, stale, 0);
    held(s, got, sizeof got);
    ASSERT_STREQ(got, "n0:G0-0");
    ext_sched_observe_pod(s, run, 0); /* 12 CPUs on a node of 8, on a GPU taken */
    ext_sched_observe_pod(s, stale, 1);
    held(s, got, sizeof got);
    ASSERT_STREQ(got, "n0:G0-0"); /* run's */
    json_t *all = ext_sched_allocations(s);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(all, 0), "uid")), "u-run");
    json_decref(all);
    /* a pod that never ran is still refused what does not fit */
    json_t *late = assigned_pod("late", "u-late", "n0", "1", NULL);
    ext_sched_observe_pod(s, late, 0);
    all = ext_sched_allocations(s);
    ASSERT_EQ(json_array_size(all), 1);
    json_decref(all);
    json_decref(late);
    json_decref(stale);
    json_decref(run);
    ext_sched_free(s);
}

static void upsert_gpus(struct ext_sched *s, const char *gpus)
{
    struct gs_err e = GS_ERR_INIT;
    char inv[400];
    snprintf(inv, sizeof inv, "{\"version\":1,\"gpus\":[%s]}", gpus);
    json_t *n = node_json("n0", inv);
    ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
    json_decref(n);
}

/* A GPU a pod holds leaves the node's inventory (off the bus) and comes
 * back: the update is taken (the node stays fresh), the pod's GPUs wait
 * for it and are held again when it is back; a GPU that shrinks under a
 * pod keeps it. */
static void test_node_loses_a_held_gpu(void)
{
    struct ext_sched *s;
    struct gs_err e = GS_ERR_INIT;
    char got[64];
    const char *g0 = "{\"index\":0,\"uuid\":\"G0-0\",\"model\":\"A\",\"memory_mib\":1000}";
    const char *g1 = "{\"index\":1,\"uuid\":\"G0-1\",\"model\":\"A\",\"memory_mib\":1000}";
    const char *g1s = "{\"index\":1,\"uuid\":\"G0-1\",\"model\":\"A\",\"memory_mib\":500}";
    char both[300], small[300];
    snprintf(both, sizeof both, "%s,%s", g0, g1);
    snprintf(small, sizeof small, "%s,%s", g0, g1s);
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){0}, &s, &e), 0);
    upsert_gpus(s, both);
    json_t *pod = json_pack(
        "{s:{s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s}}, s:{s:s, s:[{s:s, s:{s:{s:s}}}]},"
        " s:{s:s}}",
        "metadata", "name", "x", "namespace", "d", "uid", "u3", "annotations",
        "gpusched.io/node", "n0", "gpusched.io/request-kind", "whole", "gpusched.io/gpu-uuids",
        "G0-1", "gpusched.io/gpu-indices", "1", "spec", "nodeName", "n0", "containers", "name",
        "c", "resources", "limits", "nvidia.com/gpu", "1", "status", "phase", "Running");
    ext_sched_observe_pod(s, pod, 0);
    held(s, got, sizeof got);
    ASSERT_STREQ(got, "n0:G0-1");
    upsert_gpus(s, small); /* less memory than the pod holds: kept */
    held(s, got, sizeof got);
    ASSERT_STREQ(got, "n0:G0-1");
    upsert_gpus(s, g0);
    held(s, got, sizeof got);
    ASSERT_STREQ(got, ":");
    ASSERT_EQ(ext_sched_check_inventory(s, 1e12, 10), 0);
    upsert_gpus(s, both);
    held(s, got, sizeof got);
    ASSERT_STREQ(got, "n0:G0-1");
    json_decref(pod);
    ext_sched_free(s);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A /filter reply's NodeNames as "a,b" in out (the reply taken). */
static void reply_names(struct ext_reply *reply, char *out, size_t cap)
{
    size_t rlen, i;
    char *txt = ext_reply_take(reply, &rlen);
    json_t *fr = json_loads(txt, 0, NULL), *v;
    out[0] = '\0';
    json_array_foreach(json_object_get(fr, "NodeNames"), i, v)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "", json_string_value(v));
    json_decref(fr);
    free(txt);
}

/* ext_sched_filter_after_bind for GPU pod NAME (uid NAME too) asked about
 * nodes (a JSON array): its status, the NodeNames as "a,b" in out, and the
 * seconds it took in *took. */
static int filter_names(struct ext_sched *s, const char *name, const char *nodes, int may_wait,
                        char *out, size_t cap, double *took)
{
    char body[600];
    struct ext_reply reply;
    snprintf(body, sizeof body,
             "{\"Pod\":{\"metadata\":{\"name\":\"%s\",\"namespace\":\"d\",\"uid\":\"%s\"},"
             "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
             "{\"nvidia.com/gpu\":\"1\"}}}]}},\"NodeNames\":%s}", name, name, nodes);
    double t0 = mono_s();
    int status = ext_sched_filter_after_bind(s, body, strlen(body), may_wait, &reply);
    *took = mono_s() - t0;
    reply_names(&reply, out, cap);
    return status;
}

static void bind_to(struct ext_sched *s, const char *name, const char *node)
{
    char b[300];
    struct ext_reply reply;
    size_t rlen;
    snprintf(b, sizeof b, "{\"PodName\":\"%s\",\"PodNamespace\":\"d\",\"PodUID\":\"%s\","
             "\"Node\":\"%s\"}", name, name, node);
    ASSERT_EQ(ext_sched_bind(s, b, strlen(b), &reply), 200);
    free(ext_reply_take(&reply, &rlen));
}

static void *late_bind(void *ud)
{
    nanosleep(&(struct timespec){0, 80 * 1000000L}, NULL);
    bind_to(ud, "p", "n");
    return NULL;
}

/* kube-scheduler binds pod p beside the next pod's cycle: q's /filter can
 * come before p's /bind. It waits for that bind, so it does not offer the
 * GPU p takes; asked where it may not wait, it says so; a bind that never
 * comes holds the next /filter up filter_wait at most; and while no /bind
 * has come at all (a scheduler without bindVerb) nothing waits. */
static void test_filter_waits_for_bind(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    const char *inv = "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G%d\",\"model\":\"A\","
                      "\"memory_mib\":1000}]}";
    char buf[200], got[200];
    double took;
    pthread_t t;

    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){.filter_wait = 0.3}, &s, &e), 0);
    for (int i = 0; i < 3; i++) {
        snprintf(buf, sizeof buf, inv, i);
        json_t *n = node_json(i == 2 ? "n3" : i ? "n2" : "n", buf);
        ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
        json_decref(n);
    }
    /* no /bind seen yet: w's /filter is not waited for */
    ASSERT_EQ(filter_names(s, "w", "[\"n3\"]", 0, got, sizeof got, &took), 200);
    ASSERT_EQ(filter_names(s, "v", "[\"n3\"]", 0, got, sizeof got, &took), 200);
    ASSERT_STREQ(got, "n3");
    bind_to(s, "w", "n3"); /* binds come: now they are waited for */
    ASSERT_EQ(filter_names(s, "p", "[\"n\"]", 0, got, sizeof got, &took), 200);
    ASSERT_STREQ(got, "n");
    ASSERT_EQ(filter_names(s, "q", "[\"n\"]", 0, got, sizeof got, &took), EXT_FILTER_WAIT);
    ASSERT_EQ(pthread_create(&t, NULL, late_bind, s), 0);
    /* p's bind comes 80 ms later */
    ASSERT_EQ(filter_names(s, "q", "[\"n\"]", 1, got, sizeof got, &took), 200);
    pthread_join(t, NULL);
    ASSERT_STREQ(got, ""); /* n's one GPU is p's */
    ASSERT_TRUE(took >= 0.05);
    /* q's bind never comes: r waits filter_wait, then goes on */
    filter_names(s, "q", "[\"n\",\"n2\"]", 1, got, sizeof got, &took);
    ASSERT_STREQ(got, "n2");
    ASSERT_EQ(filter_names(s, "r", "[\"n\",\"n2\"]", 1, got, sizeof got, &took), 200);
    ASSERT_STREQ(got, "n2");
    ASSERT_TRUE(took >= 0.25);
    /* the same pod asked again does not wait for itself */
    ASSERT_EQ(filter_names(s, "r", "[\"n2\"]", 0, got, sizeof got, &took), 200);
    ASSERT_STREQ(got, "n2");
    ext_sched_free(s);
}

static void sleep_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

/* The wait for p's /bind runs filter_wait from p's /prioritize, not from
 * its /filter: a slow /prioritize (forwarded by another replica, a busy
 * machine) used the whole wait up, and q's /filter offered the GPU p's
 * bind took (409 in tests/e2e/test_ha.py, one CI run). */
static void test_filter_wait_counts_from_prioritize(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    struct ext_reply reply;
    size_t rlen;
    char got[200];
    double took;
    pthread_t t;
    const char *inv = "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G%d\",\"model\":\"A\","
                      "\"memory_mib\":1000}]}";
    char buf[200];

    /* wide margins: ASan on a loaded machine stretches every sleep (0.2 s and
     * 100 ms steps failed once there) */
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){.filter_wait = 0.8}, &s, &e), 0);
    for (int i = 0; i < 2; i++) {
        snprintf(buf, sizeof buf, inv, i);
        json_t *n = node_json(i ? "n2" : "n", buf);
        ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
        json_decref(n);
    }
    ASSERT_EQ(filter_names(s, "w", "[\"n2\"]", 0, got, sizeof got, &took), 200);
    bind_to(s, "w", "n2"); /* binds come: they are waited for */
    ASSERT_EQ(filter_names(s, "p", "[\"n\"]", 0, got, sizeof got, &took), 200);
    ASSERT_STREQ(got, "n");
    sleep_ms(600);
    const char *prio = "{\"Pod\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"d\","
                       "\"uid\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"c\","
                       "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}},"
                       "\"NodeNames\":[\"n\"]}";
    ASSERT_EQ(ext_sched_prioritize(s, prio, strlen(prio), &reply), 200);
    free(ext_reply_take(&reply, &rlen));
    sleep_ms(300); /* 900 ms after p's /filter: past filter_wait from there */
    ASSERT_EQ(pthread_create(&t, NULL, late_bind, s), 0); /* p's bind, 80 ms on */
    ASSERT_EQ(filter_names(s, "q", "[\"n\"]", 1, got, sizeof got, &took), 200);
    pthread_join(t, NULL);
    ASSERT_STREQ(got, ""); /* it waited: n's one GPU is p's */
    ASSERT_TRUE(took >= 0.05);
    ext_sched_free(s);
}

static int stub_bind(void *ud, const char *ns, const char *name, const char *uid,
                     const struct core_alloc *a, const json_t *annotations, struct gs_err *e)
{
    (void)ud, (void)ns, (void)name, (void)uid, (void)a, (void)annotations, (void)e;
    return 0;
}

static int stub_fail_first; /* stub_preempt: the first victim's delete fails */

static int stub_preempt(void *ud, struct ext_preemption *pr, struct gs_err *e)
{
    struct ext_preemption *got = ud;
    (void)e;
    pr->v[0].failed = stub_fail_first;
    *got = *pr;
    return 0;
}

/* filter_labeled, the pod started at start (RFC 3339; NULL: not yet). */
static void filter_started(struct ext_sched *s, const char *name, int prio, const char *labels,
                           const char *start, const char *nodes, char *out, size_t cap)
{
    char body[900];
    struct ext_reply reply;
    snprintf(body, sizeof body,
             "{\"Pod\":{\"metadata\":{\"name\":\"%s\",\"namespace\":\"d\",\"uid\":\"%s\","
             "\"labels\":%s},"
             "\"spec\":{\"priority\":%d,\"containers\":[{\"name\":\"c\",\"resources\":"
             "{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]},\"status\":{%s%s%s}},"
             "\"NodeNames\":%s}", name, name, labels ? labels : "{}", prio,
             start ? "\"startTime\":\"" : "", start ? start : "", start ? "\"" : "",
             nodes ? nodes : "[\"n\"]");
    /* the watch has brought the pod (preemption is made only for such) */
    json_t *req = json_loads(body, 0, NULL);
    ASSERT_TRUE(req != NULL);
    ext_sched_observe_pod(s, json_object_get(req, "Pod"), 0);
    json_decref(req);
    ASSERT_EQ(ext_sched_filter(s, body, strlen(body), &reply), 200);
    reply_names(&reply, out, cap);
}

/* A /filter of a one-GPU pod with a priority and labels (a JSON object;
 * NULL: none) asked about nodes (a JSON array; NULL: ["n"]): its NodeNames
 * as "a,b". */
static void filter_labeled(struct ext_sched *s, const char *name, int prio, const char *labels,
                           const char *nodes, char *out, size_t cap)
{
    filter_started(s, name, prio, labels, NULL, nodes, out, cap);
}

static void filter_prio_on(struct ext_sched *s, const char *name, int prio, const char *nodes,
                           char *out, size_t cap)
{
    filter_labeled(s, name, prio, NULL, nodes, out, cap);
}

static void filter_prio(struct ext_sched *s, const char *name, int prio, char *out, size_t cap)
{
    filter_prio_on(s, name, prio, NULL, out, cap);
}

/* Where filter preemption takes a GPU for a pod of priority 1000, and how
 * many PodDisruptionBudget violations /preempt counts for node a (its
 * victim is the extender's): a (priority 100, labels app=db) holds the one
 * GPU of node a, b (priority 200) the one of node b; pdb, when not NULL, is
 * a PodDisruptionBudget in namespace d. */
/* A scheduler with filter_preemption whose preemptions land in *got, and
 * nodes a (gpus_a GPUs) and b (one). */
static struct ext_sched *preempting_sched(struct ext_preemption *got, int gpus_a)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){.filter_preemption = 1}, &s, &e), 0);
    ext_sched_set_commit(s, &(struct ext_commit){.bind = stub_bind, .preempt = stub_preempt,
                                                 .ud = got});
    for (int i = 0; i < 2; i++) {
        char inv[300];
        snprintf(inv, sizeof inv, "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G%d\","
                 "\"model\":\"A\",\"memory_mib\":1000}%s]}", i,
                 !i && gpus_a == 2 ? ",{\"index\":1,\"uuid\":\"GX\",\"model\":\"A\","
                                     "\"memory_mib\":1000}" : "");
        json_t *n = node_json(i ? "b" : "a", inv);
        ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
        json_decref(n);
    }
    return s;
}

/* kube-scheduler's /preempt for one-GPU pod `name` (priority 1000), node a
 * offered with no victims of its own: the reply (malloc'd). */
static char *preempt_on_a(struct ext_sched *s, const char *name)
{
    char pre[600];
    struct ext_reply reply;
    size_t rlen;
    snprintf(pre, sizeof pre,
             "{\"Pod\":{\"metadata\":{\"name\":\"%s\",\"namespace\":\"d\",\"uid\":\"%s\"},"
             "\"spec\":{\"priority\":1000,\"containers\":[{\"name\":\"c\",\"resources\":"
             "{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}},\"NodeNameToMetaVictims\":{\"a\":"
             "{\"Pods\":[],\"NumPDBViolations\":0}}}", name, name);
    ASSERT_EQ(ext_sched_preempt(s, pre, strlen(pre), &reply), 200);
    return ext_reply_take(&reply, &rlen);
}

static void pdb_case(const char *pdb, int pending, char *node, size_t cap, long *viol_a)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_preemption got = {0};
    struct ext_sched *s = preempting_sched(&got, 1);
    char names[64];
    filter_labeled(s, "a", 100, "{\"app\":\"db\"}", "[\"a\"]", names, sizeof names);
    bind_to(s, "a", "a");
    filter_labeled(s, "b", 200, "{\"app\":\"web\"}", "[\"b\"]", names, sizeof names);
    bind_to(s, "b", "b");
    if (pending) /* a watch will list them: no preemption from /filter until it has */
        ext_sched_pdbs_pending(s);
    if (pdb) {
        json_t *o = json_loads(pdb, 0, NULL);
        ASSERT_TRUE(o != NULL);
        ASSERT_EQ(ext_sched_upsert_pdb(s, o, &e), 0);
        json_decref(o);
    }
    if (pending) {
        filter_labeled(s, "high", 1000, NULL, "[\"a\",\"b\"]", names, sizeof names);
        ASSERT_EQ(got.n, 0);
        json_t *items = json_pack("[]");
        if (pdb)
            json_array_append_new(items, json_loads(pdb, 0, NULL));
        ASSERT_EQ(ext_sched_replace_pdbs(s, items), 0);
        json_decref(items);
    }
    char *txt = preempt_on_a(s, "p");
    json_t *r = json_loads(txt, 0, NULL);
    free(txt);
    *viol_a = (long)json_integer_value(json_object_get(
        json_object_get(json_object_get(r, "NodeNameToMetaVictims"), "a"), "NumPDBViolations"));
    json_decref(r);
    filter_labeled(s, "high", 1000, NULL, "[\"a\",\"b\"]", names, sizeof names);
    ASSERT_STREQ(names, "");
    ASSERT_EQ(got.n, 1);
    snprintf(node, cap, "%.*s", (int)(cap - 1), got.node);
    ASSERT_STREQ(got.v[0].pod, strcmp(got.node, "a") == 0 ? "d/a" : "d/b");
    ext_sched_free(s);
}

/* The victims spare the pods a PodDisruptionBudget protects where they can,
 * as kube-scheduler's: the node with fewer violations first. */
static void test_preemption_pdbs(void)
{
    char node[CORE_NAME_MAX];
    long viol = -1;
    /* no budget: a, of the lowest priority */
    pdb_case(NULL, 0, node, sizeof node, &viol);
    ASSERT_STREQ(node, "a");
    ASSERT_EQ(viol, 0);
    /* a budget that allows no disruption of a: b goes instead */
    const char *pdb0 = "{\"metadata\":{\"namespace\":\"d\",\"name\":\"db\"},"
                       "\"spec\":{\"selector\":{\"matchLabels\":{\"app\":\"db\"}}},"
                       "\"status\":{\"disruptionsAllowed\":0}}";
    pdb_case(pdb0, 0, node, sizeof node, &viol);
    ASSERT_STREQ(node, "b");
    ASSERT_EQ(viol, 1);
    /* the same, the budgets listed by a watch: nothing preempted before */
    pdb_case(pdb0, 1, node, sizeof node, &viol);
    ASSERT_STREQ(node, "b");
    pdb_case(NULL, 1, node, sizeof node, &viol);
    ASSERT_STREQ(node, "a");
    /* so does one with no status yet (the controller has not counted) */
    pdb_case("{\"metadata\":{\"namespace\":\"d\",\"name\":\"db\"},\"spec\":{\"selector\":"
             "{\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"In\",\"values\":"
             "[\"db\",\"x\"]}]}}}", 0, node, sizeof node, &viol);
    ASSERT_STREQ(node, "b");
    /* one disruption allowed: a again */
    pdb_case("{\"metadata\":{\"namespace\":\"d\",\"name\":\"db\"},"
             "\"spec\":{\"selector\":{\"matchLabels\":{\"app\":\"db\"}}},"
             "\"status\":{\"disruptionsAllowed\":1}}", 0, node, sizeof node, &viol);
    ASSERT_STREQ(node, "a");
    ASSERT_EQ(viol, 0);
    /* a already counted as disrupted by the budget: not again */
    pdb_case("{\"metadata\":{\"namespace\":\"d\",\"name\":\"db\"},"
             "\"spec\":{\"selector\":{\"matchLabels\":{\"app\":\"db\"}}},"
             "\"status\":{\"disruptionsAllowed\":0,\"disruptedPods\":{\"a\":"
             "\"2026-11-29T00:00:00Z\"}}}", 0, node, sizeof node, &viol);
    ASSERT_STREQ(node, "a");
    /* another namespace, an empty selector, a selector that picks no label
     * of a's: no protection */
    const char *none[] = {
        "{\"metadata\":{\"namespace\":\"other\",\"name\":\"db\"},\"spec\":{\"selector\":"
        "{\"matchLabels\":{\"app\":\"db\"}}}}",
        "{\"metadata\":{\"namespace\":\"d\",\"name\":\"all\"},\"spec\":{\"selector\":{}}}",
        "{\"metadata\":{\"namespace\":\"d\",\"name\":\"x\"},\"spec\":{\"selector\":"
        "{\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"NotIn\",\"values\":"
        "[\"db\"]}]}}}"};
    for (size_t i = 0; i < sizeof none / sizeof *none; i++) {
        pdb_case(none[i], 0, node, sizeof node, &viol);
        ASSERT_STREQ(node, "a");
    }
    /* broken ones are refused, naming the field, and protect nothing */
    struct ext_pdbs *b = ext_pdbs_new();
    struct gs_err e = GS_ERR_INIT;
    json_t *o = json_loads(pdb0, 0, NULL);
    ASSERT_EQ(ext_pdbs_upsert(b, o, &e), 0);
    ASSERT_EQ(ext_pdbs_count(b), 1);
    json_object_set_new(json_object_get(o, "status"), "disruptionsAllowed", json_integer(-1));
    ASSERT_EQ(ext_pdbs_upsert(b, o, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "poddisruptionbudget d/db: status.disruptionsAllowed");
    ASSERT_EQ(ext_pdbs_count(b), 0);
    json_decref(o);
    const struct { const char *obj, *msg; } bad[] = {
        {"{\"metadata\":{\"name\":\"x\"}}", "metadata.namespace"},
        {"{\"metadata\":{\"namespace\":\"d\",\"name\":\"x\"},\"spec\":{\"selector\":"
         "{\"matchExpressions\":[{\"key\":\"a\",\"operator\":\"Gt\",\"values\":[\"1\"]}]}}}",
         "d/x: spec.selector.matchExpressions[0].operator"},
        {"{\"metadata\":{\"namespace\":\"d\",\"name\":\"x\"},\"spec\":{\"selector\":"
         "{\"matchLabels\":{\"a\":1}}}}", "spec.selector.matchLabels.a: must be a string"},
        {"{\"metadata\":{\"namespace\":\"d\",\"name\":\"x\"},\"spec\":[]}", "d/x: spec:"},
        {"{\"metadata\":{\"namespace\":\"d\",\"name\":\"x\"},\"status\":"
         "{\"disruptedPods\":[]}}", "status.disruptedPods"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        o = json_loads(bad[i].obj, 0, NULL);
        ASSERT_TRUE(o != NULL);
        e = (struct gs_err)GS_ERR_INIT;
        ASSERT_EQ(ext_pdbs_upsert(b, o, &e), -GS_EINVAL);
        ASSERT_CONTAINS(e.msg, bad[i].msg);
        json_decref(o);
    }
    ASSERT_EQ(ext_pdbs_count(b), 0);
    /* a relist replaces the set; a delete removes one */
    json_t *items = json_pack("[o, o]", json_loads(pdb0, 0, NULL),
                              json_loads(bad[0].obj, 0, NULL));
    ASSERT_EQ(ext_pdbs_replace(b, items), 1);
    ASSERT_EQ(ext_pdbs_count(b), 1);
    ext_pdbs_remove(b, "d", "nope");
    ASSERT_EQ(ext_pdbs_count(b), 1);
    ext_pdbs_remove(b, "d", "db");
    ASSERT_EQ(ext_pdbs_count(b), 0);
    json_decref(items);
    ext_pdbs_free(b);
}

/* Start times, as kube-scheduler reads them (status.startTime): between
 * nodes alike in every other way, the one whose victim started last; and a
 * budget that allows one disruption goes to the earlier started of two
 * pods of one priority, so the other is the protected one. */
static void test_preemption_start_times(void)
{
    const char *early = "2026-01-01T00:00:00Z", *late = "2026-06-01T00:00:00.5+02:00";
    for (int round = 0; round < 3; round++) {
        struct gs_err e = GS_ERR_INIT;
        struct ext_preemption got = {0};
        struct ext_sched *s = preempting_sched(&got, round == 2 ? 2 : 1);
        char names[64];
        if (round < 2) {
            /* round 0: b's victim started last; round 1: a's */
            filter_started(s, "pa", 100, NULL, round ? late : early, "[\"a\"]", names,
                           sizeof names);
            bind_to(s, "pa", "a");
            filter_started(s, "pb", 100, NULL, round ? NULL : late, "[\"b\"]", names,
                           sizeof names);
            bind_to(s, "pb", "b");
            if (round == 1) { /* pb not started yet counts as now: the latest */
                filter_started(s, "high", 1000, NULL, NULL, "[\"a\",\"b\"]", names,
                               sizeof names);
                ASSERT_STREQ(got.node, "b");
                ext_sched_free(s);
                continue;
            }
            filter_started(s, "high", 1000, NULL, NULL, "[\"a\",\"b\"]", names, sizeof names);
            ASSERT_EQ(got.n, 1);
            ASSERT_STREQ(got.node, "b");
            ASSERT_STREQ(got.v[0].pod, "d/pb");
        } else {
            /* p1 started first, p2 last (the core's own order puts p2 first
             * as the more important: uid order); a budget allowing one */
            filter_started(s, "p1", 100, "{\"app\":\"db\"}", early, "[\"a\"]", names,
                           sizeof names);
            bind_to(s, "p1", "a");
            filter_started(s, "p2", 100, "{\"app\":\"db\"}", late, "[\"a\"]", names,
                           sizeof names);
            bind_to(s, "p2", "a");
            json_t *o = json_loads("{\"metadata\":{\"namespace\":\"d\",\"name\":\"db\"},"
                                   "\"spec\":{\"selector\":{\"matchLabels\":{\"app\":"
                                   "\"db\"}}},\"status\":{\"disruptionsAllowed\":1}}", 0, NULL);
            ASSERT_EQ(ext_sched_upsert_pdb(s, o, &e), 0);
            json_decref(o);
            filter_started(s, "high", 1000, NULL, NULL, "[\"a\"]", names, sizeof names);
            ASSERT_EQ(got.n, 1);
            ASSERT_STREQ(got.v[0].pod, "d/p1"); /* p2 is the one the budget protects */
        }
        ext_sched_free(s);
    }
}

static struct ext_preemption *stub_queued; /* stub_later: what /filter handed over */

static int stub_later(void *ud, struct ext_preemption *pr)
{
    (void)ud;
    stub_queued = pr;
    return 0;
}

/* A preemption handed to a thread of its own (commit.later) is carried out
 * only if it is still the pod's when its turn comes: one that ended before
 * (its deadline passed, the pod bound or deleted) deletes nothing. */
static void test_queued_preemption_over_before_its_turn(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    struct ext_preemption got = {0};
    char names[64];
    const char *inv = "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G0\",\"model\":\"A\","
                      "\"memory_mib\":1000}]}";
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){.filter_preemption = 1}, &s, &e), 0);
    ext_sched_set_commit(s, &(struct ext_commit){.bind = stub_bind, .preempt = stub_preempt,
                                                 .later = stub_later, .ud = &got});
    json_t *n = node_json("n", inv);
    ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
    json_decref(n);
    filter_prio(s, "low", 100, names, sizeof names);
    bind_to(s, "low", "n");
    stub_queued = NULL;
    filter_prio(s, "high", 1000, names, sizeof names);
    ASSERT_STREQ(names, "");
    ASSERT_TRUE(stub_queued != NULL);
    ASSERT_EQ(got.n, 0); /* handed over, not carried out */
    struct ext_preemption *stale = stub_queued;
    ASSERT_EQ(ext_sched_expire_preemptions(s, 1e12), 1); /* over before its turn */
    stub_queued = NULL;
    filter_prio(s, "high", 1000, names, sizeof names); /* decided again */
    ASSERT_TRUE(stub_queued != NULL && stub_queued != stale);
    ext_sched_carry_out(s, stale);
    ASSERT_EQ(got.n, 0); /* the first: nothing deleted, the second kept */
    filter_prio(s, "mid", 500, names, sizeof names);
    ASSERT_STREQ(names, ""); /* n still kept for high */
    ext_sched_carry_out(s, stub_queued);
    ASSERT_EQ(got.n, 1);
    ASSERT_STREQ(got.v[0].pod, "d/low");
    stub_queued = NULL;
    ext_sched_free(s);
}

/* filter_preemption: a pod that no node fits has its victims chosen and
 * carried out (commit.preempt) once; the node is kept for it while they
 * hold their GPUs and EXT_PREEMPT_KEEP_S after they let go, then no more. */
/* A pod that holds its GPUs already (bound; kube-scheduler 1.20 retries
 * such a pod after a bind it saw fail though the Binding was made) finds no
 * node free beside itself: neither /filter nor /preempt preempts for it. */
static void test_no_preemption_for_a_placed_pod(void)
{
    struct ext_preemption got = {0};
    struct ext_sched *s = preempting_sched(&got, 2);
    char names[64];
    filter_labeled(s, "low", 100, NULL, "[\"a\"]", names, sizeof names);
    bind_to(s, "low", "a");
    filter_labeled(s, "mid", 500, NULL, "[\"b\"]", names, sizeof names);
    bind_to(s, "mid", "b");
    filter_labeled(s, "big", 1000, NULL, "[\"a\"]", names, sizeof names);
    ASSERT_STREQ(names, "a");
    bind_to(s, "big", "a");
    char *txt = preempt_on_a(s, "big");
    ASSERT_CONTAINS(txt, "\"NodeNameToMetaVictims\":{}");
    free(txt);
    filter_labeled(s, "big", 1000, NULL, "[\"a\",\"b\"]", names, sizeof names);
    ASSERT_EQ(got.n, 0);
    /* a pod that holds nothing does preempt there */
    filter_labeled(s, "new", 1000, NULL, "[\"a\",\"b\"]", names, sizeof names);
    ASSERT_EQ(got.n, 1);
    ext_sched_free(s);
}

/* Unschedulable pods get an Event once a minute each, however many there
 * are: the time goes with the pod (a table of 1,024 names kept the gone
 * ones, and once full two new pods took turns in its first slot and got
 * an Event every second). */
static void test_unschedulable_events_once_a_minute(void)
{
    struct ext_preemption got = {0};
    struct ext_sched *s = preempting_sched(&got, 1);
    char names[64], *out[8];
    filter_labeled(s, "full", 100, NULL, "[\"a\"]", names, sizeof names);
    bind_to(s, "full", "a");
    filter_labeled(s, "x", 100, NULL, "[\"a\"]", names, sizeof names);
    filter_labeled(s, "y", 100, NULL, "[\"a\"]", names, sizeof names);
    ASSERT_EQ(ext_sched_unschedulable_due(s, out, 8, 1000, 60), 2);
    free(out[0]);
    free(out[1]);
    ASSERT_EQ(ext_sched_unschedulable_due(s, out, 8, 1001, 60), 0);
    ASSERT_EQ(ext_sched_unschedulable_due(s, out, 8, 1059, 60), 0);
    int more;
    ext_sched_nudge_round(s);
    ASSERT_EQ(ext_sched_to_nudge(s, out, 8, 0, &more), 2); /* nudges are not limited */
    free(out[0]);
    free(out[1]);
    ASSERT_EQ(ext_sched_unschedulable_due(s, out, 1, 1060, 60), 1); /* one at most */
    free(out[0]);
    ASSERT_EQ(ext_sched_unschedulable_due(s, out, 8, 1061, 60), 1); /* the other */
    free(out[0]);
    ext_sched_free(s);
}

/* Frees the nudge list out[0..n). */
static void free_list(char **out, int n)
{
    for (int i = 0; i < n; i++)
        free(out[i]);
}

/* Nudges: each round (GPUs freed) reaches every pod refused by /filter
 * once, the least recently nudged first, however few a list may hold (64
 * in the same order each time kept the others waiting for kube-scheduler's
 * flush); a pod whose bind was refused is nudged a second later (parked in
 * kube-scheduler's unschedulable queue with nothing else to free it); a
 * failed nudge is tried again; a pod refused after a round began is not
 * nudged by that round (its /filter saw what the round's free freed). */
static void test_nudges_reach_every_waiting_pod(void)
{
    struct ext_preemption got = {0};
    struct ext_sched *s = preempting_sched(&got, 1);
    char names[64], *out[8];
    int more, n;
    filter_labeled(s, "full", 100, NULL, "[\"a\"]", names, sizeof names);
    bind_to(s, "full", "a");
    static const char *const waiting[] = {"w1", "w2", "w3", "w4", "w5"};
    for (int i = 0; i < 5; i++)
        filter_labeled(s, waiting[i], 100, NULL, "[\"a\"]", names, sizeof names);
    ASSERT_EQ(ext_sched_to_nudge(s, out, 2, 0, &more), 0); /* no round yet */
    ASSERT_EQ(more, 0);
    ext_sched_nudge_round(s);
    char seen[5] = {0}, first[2][16];
    int total = 0;
    for (int k = 0; k < 3; k++) { /* 2 + 2 + 1 */
        n = ext_sched_to_nudge(s, out, 2, 0, &more);
        ASSERT_EQ(n, k < 2 ? 2 : 1);
        ASSERT_EQ(more, k < 2);
        for (int i = 0; i < n; i++) {
            ASSERT_EQ(strncmp(out[i], "d/w", 3), 0);
            int w = out[i][3] - '1';
            ASSERT_TRUE(w >= 0 && w < 5 && !seen[w]);
            seen[w] = 1;
            if (total < 2)
                snprintf(first[total], sizeof first[total], "%s", out[i]);
            total++;
        }
        free_list(out, n);
    }
    ASSERT_EQ(ext_sched_to_nudge(s, out, 2, 0, &more), 0); /* the round is done */
    ASSERT_EQ(more, 0);
    /* each round starts with the least recently nudged: the first two ... */
    ext_sched_nudge_round(s);
    ASSERT_EQ(n = ext_sched_to_nudge(s, out, 2, 0, &more), 2);
    for (int i = 0; i < n; i++)
        ASSERT_TRUE(strcmp(out[i], first[0]) == 0 || strcmp(out[i], first[1]) == 0);
    free_list(out, n);
    /* ... and a round that begins before that one ended starts with the
     * three it had not reached, not with the same two again */
    ext_sched_nudge_round(s);
    ASSERT_EQ(n = ext_sched_to_nudge(s, out, 3, 0, &more), 3);
    for (int i = 0; i < n; i++)
        ASSERT_TRUE(strcmp(out[i], first[0]) != 0 && strcmp(out[i], first[1]) != 0);
    free_list(out, n);
    ASSERT_EQ(n = ext_sched_to_nudge(s, out, 8, 0, &more), 2);
    free_list(out, n);
    /* a failed nudge is due again, in the same round */
    ext_sched_nudge_failed(s, "d/w2");
    ASSERT_EQ(n = ext_sched_to_nudge(s, out, 8, 0, &more), 1);
    ASSERT_STREQ(out[0], "d/w2");
    free_list(out, n);
    /* a refused bind: nudged a second later, once */
    filter_labeled(s, "r", 100, NULL, "[\"b\"]", names, sizeof names);
    ASSERT_STREQ(names, "b");
    ext_sched_bind_refused(s, "r");
    double now = mono_s();
    ASSERT_EQ(ext_sched_to_nudge(s, out, 8, now, &more), 0);
    ASSERT_EQ(more, 1); /* call again */
    ASSERT_EQ(n = ext_sched_to_nudge(s, out, 8, now + 1.1, &more), 1);
    ASSERT_STREQ(out[0], "d/r");
    free_list(out, n);
    ASSERT_EQ(ext_sched_to_nudge(s, out, 8, now + 2.2, &more), 0);
    ASSERT_EQ(more, 0);
    /* refused after the round began: due at the next round only */
    filter_labeled(s, "late", 100, NULL, "[\"a\"]", names, sizeof names);
    ASSERT_EQ(ext_sched_to_nudge(s, out, 8, now + 2.2, &more), 0);
    ext_sched_nudge_round(s);
    ASSERT_EQ(n = ext_sched_to_nudge(s, out, 8, now + 2.2, &more), 6);
    free_list(out, n);
    ext_sched_free(s);
}

static void test_filter_preemption(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    struct ext_preemption got = {0};
    char names[64];
    const char *inv = "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G0\",\"model\":\"A\","
                      "\"memory_mib\":1000}]}";
    ASSERT_EQ(ext_sched_new(&(struct ext_sched_opts){.filter_preemption = 1}, &s, &e), 0);
    ext_sched_set_commit(s, &(struct ext_commit){.bind = stub_bind, .preempt = stub_preempt,
                                                 .ud = &got});
    json_t *n = node_json("n", inv);
    ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
    json_decref(n);
    filter_prio(s, "low", 100, names, sizeof names);
    ASSERT_STREQ(names, "n");
    bind_to(s, "low", "n");
    /* an equal priority preempts nothing */
    filter_prio(s, "peer", 100, names, sizeof names);
    ASSERT_STREQ(names, "");
    ASSERT_EQ(got.n, 0);
    /* /filter's body is whatever its caller sent: no preemption for a pod
     * the watch has not brought, nor at a priority its object does not have */
    {
        struct ext_reply reply;
        size_t rlen;
        const char *ghost = "{\"Pod\":{\"metadata\":{\"name\":\"ghost\",\"namespace\":"
                            "\"d\",\"uid\":\"ghost\"},\"spec\":{\"priority\":1000,"
                            "\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
                            "{\"nvidia.com/gpu\":\"1\"}}}]}},\"NodeNames\":[\"n\"]}";
        ASSERT_EQ(ext_sched_filter(s, ghost, strlen(ghost), &reply), 200);
        free(ext_reply_take(&reply, &rlen));
        ASSERT_EQ(got.n, 0);
        json_t *obj = json_loads(ghost, 0, NULL);
        json_t *pod = json_object_get(obj, "Pod");
        json_object_set_new(json_object_get(pod, "spec"), "priority", json_integer(0));
        /* its real priority: 0; the watch brings it after that /filter,
         * which could have preempted for it: nudged (1) */
        ASSERT_EQ(ext_sched_observe_pod(s, pod, 0), 1);
        ASSERT_EQ(ext_sched_observe_pod(s, pod, 0), 0);
        json_decref(obj);
        ASSERT_EQ(ext_sched_filter(s, ghost, strlen(ghost), &reply), 200);
        free(ext_reply_take(&reply, &rlen));
        ASSERT_EQ(got.n, 0);
    }
    filter_prio(s, "high", 1000, names, sizeof names);
    ASSERT_STREQ(names, "");
    ASSERT_EQ(got.n, 1);
    ASSERT_STREQ(got.pod, "d/high");
    ASSERT_STREQ(got.node, "n");
    ASSERT_STREQ(got.v[0].pod, "d/low");
    ASSERT_STREQ(got.v[0].uid, "low");
    ASSERT_EQ(got.v[0].priority, 100);
    ASSERT_EQ(got.priority, 1000);
    /* asked again while the victim holds its GPU: nothing more */
    memset(&got, 0, sizeof got);
    filter_prio(s, "high", 1000, names, sizeof names);
    ASSERT_EQ(got.n, 0);
    /* the victim lets go at t: the node is high's, kept from mid */
    ASSERT_EQ(ext_sched_release(s, "d/low", &e), 0);
    double t = 1e9;
    ext_sched_expire_preemptions(s, t);
    ext_sched_expire_preemptions(s, t + EXT_PREEMPT_KEEP_S - 1);
    filter_prio(s, "mid", 500, names, sizeof names);
    ASSERT_STREQ(names, "");
    filter_prio(s, "high", 1000, names, sizeof names);
    ASSERT_STREQ(names, "n");
    /* until EXT_PREEMPT_KEEP_S after it let go */
    ASSERT_EQ(ext_sched_expire_preemptions(s, t + EXT_PREEMPT_KEEP_S + 1), 1);
    filter_prio(s, "mid", 500, names, sizeof names);
    ASSERT_STREQ(names, "n");
    /* a victim that never lets go: top's preemption of mid ends at its
     * deadline (mid's grace, 30 s unset, plus 60 s), and others are kept
     * off meanwhile (peer2 would evict mid too, but the node is top's) */
    bind_to(s, "mid", "n");
    memset(&got, 0, sizeof got);
    filter_prio(s, "top", 2000, names, sizeof names);
    ASSERT_STREQ(got.v[0].pod, "d/mid");
    memset(&got, 0, sizeof got);
    filter_prio(s, "peer2", 1500, names, sizeof names);
    ASSERT_EQ(got.n, 0);
    double now = (double)time(NULL);
    ASSERT_EQ(ext_sched_expire_preemptions(s, now + 80), 0);
    filter_prio(s, "top", 2000, names, sizeof names);
    ASSERT_EQ(got.n, 0);
    ASSERT_EQ(ext_sched_expire_preemptions(s, now + 100), 1);
    /* a victim whose delete failed is not waited for: the preemption ends
     * EXT_PREEMPT_KEEP_S later though it still holds its GPU */
    stub_fail_first = 1;
    filter_prio(s, "top", 2000, names, sizeof names);
    ASSERT_STREQ(got.v[0].pod, "d/mid");
    ASSERT_EQ(ext_sched_expire_preemptions(s, t), 0);
    ASSERT_EQ(ext_sched_expire_preemptions(s, t + EXT_PREEMPT_KEEP_S + 1), 1);
    stub_fail_first = 0;
    /* a preemption whose node is gone is over: the pod preempts elsewhere */
    filter_prio(s, "top", 2000, names, sizeof names);
    ASSERT_STREQ(got.node, "n");
    n = node_json("n2", "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G9\","
                        "\"model\":\"A\",\"memory_mib\":1000}]}");
    ASSERT_EQ(ext_sched_upsert_node(s, n, &e), 0);
    json_decref(n);
    filter_prio_on(s, "low2", 100, "[\"n2\"]", names, sizeof names);
    ASSERT_STREQ(names, "n2");
    bind_to(s, "low2", "n2");
    memset(&got, 0, sizeof got);
    filter_prio_on(s, "top", 2000, "[\"n2\"]", names, sizeof names);
    ASSERT_EQ(got.n, 0);
    ASSERT_EQ(ext_sched_remove_node(s, "n", &e), 0);
    filter_prio_on(s, "top", 2000, "[\"n2\"]", names, sizeof names);
    ASSERT_STREQ(got.node, "n2");
    ASSERT_STREQ(got.v[0].pod, "d/low2");
    ext_sched_free(s);
}

int test_ext(void)
{
    char dir[] = "/tmp/gs_ext_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_proto();
    test_nodes();
    test_annot();
    test_journal(dir);
    test_config(dir);
    test_sched();
    test_observe_moved_assignment();
    test_node_loses_a_held_gpu();
    test_restore_of_a_running_pod_that_no_longer_fits();
    test_filter_waits_for_bind();
    test_filter_wait_counts_from_prioritize();
    test_filter_preemption();
    test_no_preemption_for_a_placed_pod();
    test_unschedulable_events_once_a_minute();
    test_nudges_reach_every_waiting_pod();
    test_queued_preemption_over_before_its_turn();
    test_preemption_pdbs();
    test_preemption_start_times();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        test_failures++;
    return test_failures;
}
