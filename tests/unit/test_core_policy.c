/* Unit tests for every policy's score and GPU choice on hand-made nodes,
 * with the numbers worked out by hand from docs/benchmark.md's formulas. */
#include "test.h"
#include "test_core_helpers.h"

static void scores(struct core_cluster *c, const char *policy, const struct core_pod *p,
                   const char *const *names, int n, int *out)
{
    struct core_node *nodes[8];
    struct gs_err e = GS_ERR_INIT;
    for (int i = 0; i < n; i++)
        nodes[i] = core_cluster_find(c, names[i]);
    ASSERT_EQ(core_score(c, core_policy_find(policy), p, nodes, n, out, &e), 0);
}

static void test_dotprod_bestfit(void)
{
    struct core_cluster *c = core_cluster_new();
    tc_node(c, "x", 64000, 256, 8, "G2", 0);
    tc_node(c, "y", 16000, 64, 2, "G2", 0);
    tc_node(c, "z", 32000, 128, 4, "G2", 0);
    tc_node(c, "tiny", 4000, 64, 2, "G2", 0); /* CPU too small: filtered */
    const char *names[] = {"x", "y", "z", "tiny"};
    struct core_pod p = tc_pod("p", CORE_REQ_WHOLE, 1, 0, 0, 8000);
    int s[4];
    scores(c, "dotprod", &p, names, 4, s);
    ASSERT_EQ(s[0], 92); /* 1 - .5(.5 x .0625 + 1 x .125) = .921875 */
    ASSERT_EQ(s[1], 98); /* 1 - .5(.125 x .0625 + .25 x .125) = .98046875 */
    ASSERT_EQ(s[3], 0);
    scores(c, "bestfit", &p, names, 4, s);
    /* raw 34, 90, 71 -> min-max over the feasible nodes */
    ASSERT_EQ(s[0], 0);
    ASSERT_EQ(s[1], 100);
    ASSERT_EQ(s[2], 66);
    ASSERT_EQ(s[3], 0);
    /* bestfit's GPU choice: the fitting GPU with the least free share */
    struct core_pod a = tc_pod("a", CORE_REQ_SHARED, 1, 300, 0, 100);
    struct core_pod b = tc_pod("b", CORE_REQ_SHARED, 1, 600, 0, 100);
    ASSERT_EQ(tc_place(c, "z", &a, "bestfit"), 0);
    ASSERT_EQ(tc_place(c, "z", &b, "bestfit"), 0);
    ASSERT_EQ(core_alloc_find(c, "a")->gpu[0], 0);
    ASSERT_EQ(core_alloc_find(c, "b")->gpu[0], 0); /* 700 left on GPU 0 fits 600 */
    struct core_pod b2 = tc_pod("b2", CORE_REQ_SHARED, 1, 500, 0, 100);
    ASSERT_EQ(tc_place(c, "z", &b2, "bestfit"), 0);
    ASSERT_EQ(core_alloc_find(c, "b2")->gpu[0], 1); /* GPU 0 has 100 left */
    core_cluster_free(c);
}

static void test_clustering(void)
{
    struct core_cluster *c = core_cluster_new();
    const char *names[] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++)
        tc_node(c, names[i], 64000, 256, 8, "G2", 0);
    struct core_pod s1 = tc_pod("s1", CORE_REQ_SHARED, 1, 500, 0, 100);
    struct core_pod w1 = tc_pod("w1", CORE_REQ_WHOLE, 1, 0, 0, 100);
    struct core_pod s2 = tc_pod("s2", CORE_REQ_SHARED, 1, 500, 0, 100);
    struct core_pod w2 = tc_pod("w2", CORE_REQ_WHOLE, 1, 0, 0, 100);
    ASSERT_EQ(tc_place(c, "A", &s1, "clustering"), 0);
    ASSERT_EQ(tc_place(c, "C", &w1, "clustering"), 0);
    ASSERT_EQ(tc_place(c, "D", &s2, "clustering"), 0);
    ASSERT_EQ(tc_place(c, "D", &w2, "clustering"), 0);
    struct core_pod p = tc_pod("p", CORE_REQ_SHARED, 1, 200, 0, 100);
    int s[4];
    scores(c, "clustering", &p, names, 4, s);
    ASSERT_EQ(s[0], 1 + 75); /* only my tag; base floor(25 x 500 / 8000) */
    ASSERT_EQ(s[1], 0 + 25); /* no GPU pods */
    ASSERT_EQ(s[2], 3);      /* only other tags */
    ASSERT_EQ(s[3], 4 + 50); /* mine among others */
    struct core_pod cpu = tc_pod("cpu", CORE_REQ_NONE, 0, 0, 0, 100);
    scores(c, "clustering", &cpu, names, 4, s);
    ASSERT_EQ(s[0] + s[1] + s[2] + s[3], 0);
    core_cluster_free(c);
}

static void test_packing(void)
{
    struct core_cluster *c = core_cluster_new();
    tc_node(c, "P8", 64000, 256, 8, "G2", 0);
    tc_node(c, "P2", 64000, 256, 2, "G2", 0);
    tc_node(c, "Q", 64000, 256, 4, "G2", 0);
    struct core_pod u = tc_pod("u", CORE_REQ_SHARED, 1, 700, 0, 100);
    ASSERT_EQ(tc_place(c, "Q", &u, "packing"), 0);
    const char *names[] = {"P8", "P2", "Q"};
    int s[3];
    struct core_pod share = tc_pod("p", CORE_REQ_SHARED, 1, 200, 0, 100);
    scores(c, "packing", &share, names, 3, s);
    ASSERT_EQ(s[0], 25);  /* all free: max(33 - 8, 8) */
    ASSERT_EQ(s[1], 31);  /* max(33 - 2, 2) */
    ASSERT_EQ(s[2], 97);  /* on the 300-free GPU: 100 - floor(30 / 10) */
    struct core_pod whole = tc_pod("w", CORE_REQ_WHOLE, 1, 0, 0, 100);
    scores(c, "packing", &whole, names, 3, s);
    ASSERT_EQ(s[2], 49);  /* needs one fully free GPU: max(50 - 1, 33) */
    struct core_pod three = tc_pod("w3", CORE_REQ_WHOLE, 3, 0, 0, 100);
    scores(c, "packing", &three, names, 3, s);
    ASSERT_EQ(s[2], 47);
    ASSERT_EQ(s[1], 0);   /* does not fit */
    core_cluster_free(c);
}

static void test_fgd(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    tc_node(c, "F1", 100000, 256, 1, "G2", 0);
    tc_node(c, "F3", 100000, 256, 2, "G2", 0);
    struct core_class k = {1000, 1, 500, "", 1};
    ASSERT_EQ(core_cluster_set_workload(c, &k, 1, 0.95, &e), 0);
    struct core_pod used = tc_pod("used", CORE_REQ_SHARED, 1, 600, 0, 100);
    struct core_alloc a;
    /* put 600 on F3's GPU 0 by hand: reserve what we choose */
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("binpack"), core_cluster_find(c, "F3"), &used,
                             &a, &e), 0);
    ASSERT_EQ(a.gpu[0], 0);
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    ASSERT_NEAR(core_node_frag(c, core_cluster_find(c, "F3")), 400, 1e-9);

    const char *names[] = {"F1", "F3"};
    int s[2];
    struct core_pod small = tc_pod("s", CORE_REQ_SHARED, 1, 300, 0, 100);
    scores(c, "fgd", &small, names, 2, s);
    ASSERT_EQ(s[0], 50); /* 700 left still fits the class: delta 0 */
    ASSERT_EQ(s[1], 57); /* GPU 0: 400 -> 100 of fragment, delta -300 */
    struct core_decision d;
    ASSERT_EQ(core_schedule_one(c, core_policy_find("fgd"), &small, &d, &e), 0);
    ASSERT_STREQ(d.node->name, "F3");
    ASSERT_EQ(d.alloc.gpu[0], 0);
    struct core_pod big = tc_pod("b", CORE_REQ_SHARED, 1, 600, 0, 100);
    scores(c, "fgd", &big, names, 2, s);
    ASSERT_EQ(s[0], 40); /* 400 left < 500: delta +400, 100 sigma(-0.4) */
    ASSERT_EQ(s[1], 40); /* only GPU 1 fits: no GPU keeps 500, F 400 -> 800 */
    core_cluster_free(c);
}

/* A pod's share of a GPU is never more than the GPU has free: a pod asking
 * for compute alone fits a GPU whose memory is mostly taken (cpufrag read
 * waste[share - one], before its table, there). */
static void test_pod_share_at_most_free(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    struct core_alloc a;
    struct core_decision d;
    tc_node(c, "M", 64000, 256, 1, "H", 81920);
    struct core_pod mem = tc_pod("mem", CORE_REQ_SHARED, 1, 0, 61440, 100);
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("binpack"), core_cluster_find(c, "M"), &mem,
                             &a, &e), 0);
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    const struct core_gpu *g = &core_cluster_find(c, "M")->gpus[0];
    ASSERT_EQ(core_gpu_free_share(g), 250);
    struct core_pod compute = tc_pod("cmp", CORE_REQ_SHARED, 1, 500, 0, 100);
    struct core_cycle cy = {.cluster = c, .req = &compute.req, .model_mask = ~0ULL};
    ASSERT_TRUE(core_gpu_fits(&cy, g));
    ASSERT_EQ(core_pod_share(&cy, g), 250);
    for (int i = 0; i < core_policy_count(); i++) {
        ASSERT_EQ(core_schedule_one(c, core_policy_at(i), &compute, &d, &e), 0);
        ASSERT_STREQ(d.node->name, "M");
    }
    core_cluster_free(c);
}

static void test_k8s_policies(void)
{
    struct core_cluster *c = core_cluster_new();
    tc_node(c, "b4", 10000, 64, 4, "T4", 16384);
    tc_node(c, "e4", 10000, 64, 4, "T4", 16384);
    struct core_pod h = tc_pod("h", CORE_REQ_WHOLE, 2, 0, 0, 2000);
    ASSERT_EQ(tc_place(c, "b4", &h, "binpack"), 0);
    const char *names[] = {"b4", "e4"};
    int s[2];
    struct core_pod w = tc_pod("w", CORE_REQ_WHOLE, 1, 0, 0, 100);
    scores(c, "binpack", &w, names, 2, s);
    ASSERT_EQ(s[0], 75);
    ASSERT_EQ(s[1], 25);
    scores(c, "spread", &w, names, 2, s);
    ASSERT_EQ(s[0], 25);
    ASSERT_EQ(s[1], 75);
    struct core_pod cpu = tc_pod("c", CORE_REQ_NONE, 0, 0, 0, 3000);
    scores(c, "binpack", &cpu, names, 2, s);
    ASSERT_EQ(s[0], 50);
    ASSERT_EQ(s[1], 30);
    /* memory-only shares: 4096 of 16384 MiB counts as 250 thousandths */
    struct core_pod m = tc_pod("m", CORE_REQ_SHARED, 1, 0, 4096, 100);
    scores(c, "binpack", &m, names, 2, s);
    ASSERT_EQ(s[1], 6); /* 250 / 4000 */
    /* spread puts a share on the emptiest GPU, binpack on the fullest */
    struct core_pod s1 = tc_pod("s1", CORE_REQ_SHARED, 1, 500, 0, 100);
    struct core_pod s2 = tc_pod("s2", CORE_REQ_SHARED, 1, 200, 0, 100);
    struct core_pod s3 = tc_pod("s3", CORE_REQ_SHARED, 1, 200, 0, 100);
    ASSERT_EQ(tc_place(c, "e4", &s1, "binpack"), 0);
    ASSERT_EQ(tc_place(c, "e4", &s2, "binpack"), 0);
    ASSERT_EQ(tc_place(c, "e4", &s3, "spread"), 0);
    ASSERT_EQ(core_alloc_find(c, "s1")->gpu[0], 0);
    ASSERT_EQ(core_alloc_find(c, "s2")->gpu[0], 0);
    ASSERT_EQ(core_alloc_find(c, "s3")->gpu[0], 1);
    core_cluster_free(c);

    /* topology: NVLink pair beats PCIe-only node for a 2-GPU pod */
    c = core_cluster_new();
    struct core_node_spec sp;
    for (int v = 0; v < 2; v++) {
        memset(&sp, 0, sizeof sp);
        sp.name = v ? "sys" : "nv";
        sp.cpu_milli = 8000;
        sp.mem_bytes = (int64_t)8 << 30;
        sp.n_gpus = 2;
        for (int i = 0; i < 2; i++) {
            sp.gpus[i].index = i;
            snprintf(sp.gpus[i].model, CORE_MODEL_MAX, "H100");
            sp.gpus[i].healthy = 1;
            sp.gpus[i].numa = v ? i : 0;
            sp.gpus[i].link[1 - i] = v ? CORE_LINK_UNKNOWN : CORE_LINK_NVLINK;
        }
        ASSERT_EQ(core_cluster_upsert_node(c, &sp, NULL), 0);
    }
    const char *tn[] = {"nv", "sys"};
    struct core_pod two = tc_pod("two", CORE_REQ_WHOLE, 2, 0, 0, 100);
    scores(c, "topology", &two, tn, 2, s);
    ASSERT_EQ(s[0], 100);
    ASSERT_EQ(s[1], 16);
    core_cluster_free(c);
}

static void test_random(void)
{
    struct core_cluster *c = core_cluster_new();
    tc_node(c, "r1", 8000, 16, 4, "T4", 0);
    tc_node(c, "r2", 8000, 16, 4, "T4", 0);
    int hits[2] = {0}, gpu_hits[4] = {0};
    for (int i = 0; i < 200; i++) {
        char uid[16];
        snprintf(uid, sizeof uid, "r%d", i);
        struct core_pod p = tc_pod(uid, CORE_REQ_SHARED, 1, 10, 0, 10);
        struct core_decision d;
        ASSERT_EQ(core_schedule_one(c, core_policy_find("random"), &p, &d, NULL), 0);
        hits[strcmp(d.node->name, "r1") != 0]++;
        gpu_hits[d.alloc.gpu[0]]++;
    }
    ASSERT_TRUE(hits[0] > 60 && hits[1] > 60);
    for (int g = 0; g < 4; g++)
        ASSERT_TRUE(gpu_hits[g] > 20);
    const char *names[] = {"r1", "r2"};
    int s[2];
    struct core_pod p = tc_pod("x", CORE_REQ_WHOLE, 1, 0, 0, 10);
    scores(c, "random", &p, names, 2, s);
    ASSERT_TRUE(s[0] >= 0 && s[0] <= 100 && s[1] >= 0 && s[1] <= 100);
    core_cluster_free(c);
}

int test_core_policy(void)
{
    test_dotprod_bestfit();
    test_clustering();
    test_packing();
    test_fgd();
    test_pod_share_at_most_free();
    test_k8s_policies();
    test_random();
    return 0;
}
