/* Unit tests for the cpufrag policy (core/pol_cpufrag.c): it is listed, it
 * keeps CPU-only pods off nodes whose GPUs need the CPU, it descends
 * fragmentation on the GPU level, it fills GPUs with the popular sharing
 * sizes, it keeps scarce wanted models for the pods
 * restricted to them, its normalisation keeps the winner and
 * the order, and it places pods with no target workload at all. */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "test.h"

static void add_node(struct core_cluster *c, const char *name, int64_t cpu_milli, int gpus,
                     const char *model)
{
    struct core_node_spec s;
    struct gs_err e = GS_ERR_INIT;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.cpu_milli = cpu_milli;
    s.mem_bytes = 1LL << 40;
    s.n_gpus = gpus;
    for (int i = 0; i < gpus; i++) {
        s.gpus[i].index = i;
        snprintf(s.gpus[i].uuid, sizeof s.gpus[i].uuid, "GPU-%s-%d", name, i);
        snprintf(s.gpus[i].model, sizeof s.gpus[i].model, "%s", model);
        s.gpus[i].healthy = 1;
        s.gpus[i].numa = -1;
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &s, &e), 0);
}

static void make_pod(struct core_pod *p, const char *uid, int64_t cpu, int num_gpu, int milli)
{
    memset(p, 0, sizeof *p);
    snprintf(p->uid, sizeof p->uid, "%s", uid);
    snprintf(p->name, sizeof p->name, "%s", uid);
    p->req.cpu_milli = cpu;
    p->req.mem_bytes = 1 << 20;
    p->req.num_gpu = num_gpu;
    p->req.milli = milli;
    p->req.kind = num_gpu == 0       ? CORE_REQ_NONE
                  : milli >= CORE_MILLI ? CORE_REQ_WHOLE
                                        : CORE_REQ_SHARED;
}

/* Places the pod with the policy and commits it; returns the node name. */
static const char *place(struct core_cluster *c, const struct core_policy *pol,
                         const struct core_pod *p, struct core_decision *d)
{
    struct gs_err e = GS_ERR_INIT;
    if (core_schedule_one(c, pol, p, d, &e) < 0 || core_reserve(c, &d->alloc, &e) < 0) {
        fprintf(stderr, "place %s: %s\n", p->uid, e.msg);
        return "";
    }
    return d->alloc.node;
}

static void registry_tests(void)
{
    const struct core_policy *p = core_policy_find("cpufrag");
    ASSERT_TRUE(p != NULL);
    int listed = 0;
    for (int i = 0; i < core_policy_count(); i++)
        listed += strcmp(core_policy_at(i)->name, "cpufrag") == 0;
    ASSERT_EQ(listed, 1);
    ASSERT_TRUE(p && p->summary && p->summary[0]);
}

/* The motivating case: an 8-GPU node with 12 cores per GPU and a CPU-rich
 * 2-GPU node. A CPU-only pod on the 8-GPU node would leave too little CPU
 * for its GPUs; FGD cannot tell the two apart (one pod of each class still
 * fits on both), cpufrag must choose the CPU-rich node whatever the seed. */
static void cpu_only_pod_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_class m[2] = {
        {11000, 1, 1000, "", 80}, /* GPU pods: 11 cores per GPU */
        {12000, 0, 0, "", 20},    /* CPU-only pods */
    };
    for (uint64_t seed = 1; seed <= 8; seed++) {
        struct core_cluster *c = core_cluster_new();
        struct gs_err e = GS_ERR_INIT;
        struct core_pod p;
        struct core_decision d;
        add_node(c, "gpu-dense", 96000, 8, "G2");
        add_node(c, "cpu-rich", 104000, 2, "T4");
        ASSERT_EQ(core_cluster_set_workload(c, m, 2, 1.0, &e), 0);
        core_cluster_set_seed(c, seed);
        make_pod(&p, "cpu-only", 12000, 0, 0);
        ASSERT_STREQ(place(c, pol, &p, &d), "cpu-rich");
        /* and a GPU pod then still finds all 8 GPUs fed */
        make_pod(&p, "gpu-1", 11000, 1, CORE_MILLI);
        ASSERT_TRUE(pol != NULL && strlen(place(c, pol, &p, &d)) > 0);
        core_cluster_free(c);
    }
}

/* GPU level: with 500-milli pods typical, a 100-milli pod goes on the free
 * GPU (which still fits a 500 afterwards) and not, as best fit would put it,
 * on the 550 GPU (which would not). */
static void gpu_choice_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    struct core_class m[1] = {{1000, 1, 500, "", 1}};
    struct core_pod p;
    struct core_decision d;
    add_node(c, "n", 64000, 2, "V100");
    ASSERT_EQ(core_cluster_set_workload(c, m, 1, 1.0, &e), 0);
    make_pod(&p, "a", 1000, 1, 450);
    ASSERT_STREQ(place(c, pol, &p, &d), "n");
    ASSERT_EQ(d.alloc.n, 1);
    int used = d.alloc.gpu[0];
    make_pod(&p, "b", 1000, 1, 100);
    ASSERT_STREQ(place(c, pol, &p, &d), "n");
    ASSERT_EQ(d.alloc.n, 1);
    ASSERT_EQ(d.alloc.gpu[0], 1 - used);
    ASSERT_EQ(d.alloc.milli[0], 100);
    /* a 500 then goes on the GPU with 550 left, the best remaining fit */
    make_pod(&p, "c", 1000, 1, 500);
    ASSERT_STREQ(place(c, pol, &p, &d), "n");
    ASSERT_EQ(d.alloc.gpu[0], used);
    core_cluster_free(c);
}

/* Fill: with 600- and 400-milli pods typical, a second 300 goes on the GPU
 * the first 300 left at 700 (a 400 then fills it exactly), not on the free
 * GPU, which FGD's fragmentation alone prefers (400 left fits no 600, while
 * 700 fits both classes, and so does 1000). */
static void fill_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_class m[2] = {{1000, 1, 600, "", 1}, {1000, 1, 400, "", 1}};
    for (uint64_t seed = 1; seed <= 4; seed++) {
        struct core_cluster *c = core_cluster_new();
        struct gs_err e = GS_ERR_INIT;
        struct core_pod p;
        struct core_decision d;
        add_node(c, "n", 64000, 2, "V100");
        ASSERT_EQ(core_cluster_set_workload(c, m, 2, 1.0, &e), 0);
        core_cluster_set_seed(c, seed);
        make_pod(&p, "a", 1000, 1, 300);
        ASSERT_STREQ(place(c, pol, &p, &d), "n");
        int first = d.alloc.gpu[0];
        make_pod(&p, "b", 1000, 1, 300);
        ASSERT_STREQ(place(c, pol, &p, &d), "n");
        ASSERT_EQ(d.alloc.gpu[0], first);
        make_pod(&p, "c", 1000, 1, 400);
        ASSERT_STREQ(place(c, pol, &p, &d), "n");
        ASSERT_EQ(d.alloc.gpu[0], first);
        core_cluster_free(c);
    }
}

/* Fill with the top class's hole fillers set aside: 800 is the most common
 * size and leaves 200, so the rare 150s are all taken by 800 GPUs and no
 * other GPU can count on them. A 650 on the GPU a 150 left at 850 would
 * leave 200, which only a 150 fills, and take the one place an 800 still
 * fits besides a free GPU; on the free GPU it leaves 350, which a 300
 * fills. Counting the 150 as a filler (the rule before) put the 650 next
 * to the 150. */
static void fill_absorbed_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_class m[3] = {{1000, 1, 800, "", 10}, {1000, 1, 300, "", 4}, {1000, 1, 150, "", 1}};
    for (uint64_t seed = 1; seed <= 4; seed++) {
        struct core_cluster *c = core_cluster_new();
        struct gs_err e = GS_ERR_INIT;
        struct core_pod p;
        struct core_decision d;
        add_node(c, "n", 64000, 2, "V100");
        ASSERT_EQ(core_cluster_set_workload(c, m, 3, 1.0, &e), 0);
        core_cluster_set_seed(c, seed);
        make_pod(&p, "a", 1000, 1, 150);
        ASSERT_STREQ(place(c, pol, &p, &d), "n");
        int first = d.alloc.gpu[0];
        make_pod(&p, "b", 1000, 1, 650);
        ASSERT_STREQ(place(c, pol, &p, &d), "n");
        ASSERT_EQ(d.alloc.gpu[0], 1 - first);
        core_cluster_free(c);
    }
}

/* The two nodes of the model pressure tests, a P100 node (2 GPUs) and a G2
 * node (8), with workload m and the seed. */
static struct core_cluster *p100_g2_cluster(const struct core_class *m, int n, double coverage,
                                            uint64_t seed)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    add_node(c, "p100", 64000, 2, "P100");
    add_node(c, "g2", 96000, 8, "G2");
    ASSERT_EQ(core_cluster_set_workload(c, m, n, coverage, &e), 0);
    core_cluster_set_seed(c, seed);
    return c;
}

/* Model pressure: a quarter of the pods need P100 (2 of the cluster's 10
 * GPUs), a quarter need G2 (8 GPUs). FGD's fragmentation is the same on
 * both nodes for a pod free to use either; cpufrag leaves it off the scarce
 * P100s whatever the seed, and a P100 pod still gets one. */
static void model_pressure_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_class m[3] = {
        {4000, 1, 1000, "P100", 25}, {4000, 1, 1000, "G2", 25}, {4000, 1, 1000, "", 50}};
    for (uint64_t seed = 1; seed <= 8; seed++) {
        struct core_cluster *c = p100_g2_cluster(m, 3, 1.0, seed);
        struct core_pod p;
        struct core_decision d;
        make_pod(&p, "any", 4000, 1, CORE_MILLI);
        ASSERT_STREQ(place(c, pol, &p, &d), "g2");
        make_pod(&p, "shared", 4000, 1, 500);
        ASSERT_STREQ(place(c, pol, &p, &d), "g2");
        make_pod(&p, "needs-p100", 4000, 1, CORE_MILLI);
        snprintf(p.req.types[0], sizeof p.req.types[0], "P100");
        p.req.n_types = 1;
        ASSERT_STREQ(place(c, pol, &p, &d), "p100");
        core_cluster_free(c);
    }
}

/* The pressure counts every class of the workload, not only the typical
 * ones M keeps: with 97 % of the pods free to go anywhere, M (coverage
 * 0.95) keeps that class alone, and the 3 % held to P100 still keep the
 * free pods off the P100s whatever the seed. */
static void model_pressure_rare_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_class m[2] = {{4000, 1, 1000, "", 97}, {4000, 1, 1000, "P100", 3}};
    int p100 = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        struct core_cluster *c = p100_g2_cluster(m, 2, 0.95, seed);
        struct core_pod p;
        struct core_decision d;
        make_pod(&p, "any", 4000, 1, CORE_MILLI);
        p100 += strcmp(place(c, pol, &p, &d), "p100") == 0;
        ASSERT_EQ(core_cluster_workload_size(c), 1); /* M, once prepared */
        core_cluster_free(c);
    }
    ASSERT_EQ(p100, 0);
}

/* The extender's learned M counts each pod with the models it was allowed:
 * after 3 pods held to P100 and 10 free to go anywhere (placed and gone),
 * the next free pod stays off the P100s whatever the seed. */
static void model_pressure_learned_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    int p100 = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        struct core_cluster *c = core_cluster_new();
        struct gs_err e = GS_ERR_INIT;
        struct core_pod p;
        struct core_decision d;
        char uid[16];
        add_node(c, "p100", 64000, 2, "P100");
        add_node(c, "g2", 96000, 8, "G2");
        core_cluster_set_seed(c, seed);
        for (int i = 0; i < 13; i++) {
            snprintf(uid, sizeof uid, "old%d", i);
            make_pod(&p, uid, 4000, 1, CORE_MILLI);
            p.req.n_types = i < 3;
            snprintf(p.req.types[0], sizeof p.req.types[0], "P100");
            ASSERT_TRUE(strlen(place(c, pol, &p, &d)) > 0);
            ASSERT_EQ(core_unreserve(c, uid, &e), 0);
        }
        int n;
        const struct core_learned *l = core_cluster_learned(c, &n);
        ASSERT_EQ(n, 2);
        for (int k = 0; k < n; k++) /* P100 is model 0 */
            ASSERT_EQ(l[k].model_mask, l[k].count == 3 ? 1ULL : ~0ULL);
        make_pod(&p, "any", 4000, 1, CORE_MILLI);
        p100 += strcmp(place(c, pol, &p, &d), "p100") == 0;
        core_cluster_free(c);
    }
    ASSERT_EQ(p100, 0);
}

/* What the learned M counts: a reservation put back after a what-if
 * (core_reserve_back) is not counted again, and one undone because its bind
 * failed (core_unreserve_undo) is forgotten, its class with it. */
static void learned_count_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    struct core_pod p;
    struct core_decision d;
    int n;
    add_node(c, "p100", 64000, 2, "P100");
    add_node(c, "g2", 96000, 8, "G2");
    make_pod(&p, "a", 4000, 1, CORE_MILLI);
    p.req.n_types = 1;
    snprintf(p.req.types[0], sizeof p.req.types[0], "P100");
    ASSERT_STREQ(place(c, pol, &p, &d), "p100");
    make_pod(&p, "b", 4000, 1, CORE_MILLI);
    ASSERT_TRUE(strlen(place(c, pol, &p, &d)) > 0);
    struct core_alloc b = *core_alloc_find(c, "b");
    ASSERT_EQ(core_unreserve(c, "b", &e), 0);
    ASSERT_EQ(core_reserve_back(c, &b, &e), 0);
    const struct core_learned *l = core_cluster_learned(c, &n);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(l[0].count + l[1].count, 2);
    ASSERT_EQ(core_unreserve_undo(c, "a", &e), 0);
    l = core_cluster_learned(c, &n);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(l[0].model_mask, ~0ULL);
    ASSERT_EQ(l[0].count, 1);
    ASSERT_EQ(core_unreserve_undo(c, "a", &e), -GS_ENOENT);
    core_cluster_free(c);
}

/* What a replica saves for the next one: the learned classes less the live
 * pods (core_workload_ended); seeding a fresh replica with it, then
 * restoring the live pods, gives the same counts, and a bad class adds
 * nothing. */
static void learned_ended_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_cluster *c = core_cluster_new(), *c2 = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    struct core_pod p;
    struct core_decision d;
    struct core_learned *ended;
    char uid[16];
    int n;
    add_node(c, "p100", 64000, 2, "P100");
    add_node(c, "g2", 96000, 8, "G2");
    for (int i = 0; i < 5; i++) { /* 2 held to P100, 3 free; old0..old2 end */
        snprintf(uid, sizeof uid, "old%d", i);
        make_pod(&p, uid, 4000, 1, CORE_MILLI);
        p.req.n_types = i < 2;
        snprintf(p.req.types[0], sizeof p.req.types[0], "P100");
        ASSERT_TRUE(strlen(place(c, pol, &p, &d)) > 0);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(uid, sizeof uid, "old%d", i);
        ASSERT_EQ(core_unreserve(c, uid, &e), 0);
    }
    n = core_workload_ended(c, &ended);
    ASSERT_EQ(n, 2); /* old0, old1 (P100) and old2 (any) ended */
    for (int k = 0; k < n; k++)
        ASSERT_EQ(ended[k].count, ended[k].model_mask == 1ULL ? 2 : 1);
    /* the next replica: nodes, the saved classes, then the live pods */
    add_node(c2, "g2", 96000, 8, "G2"); /* another model order: P100 is model 1 */
    add_node(c2, "p100", 64000, 2, "P100");
    for (int k = 0; k < n; k++)
        if (ended[k].model_mask == 1ULL)
            ended[k].model_mask = 2ULL;
    ASSERT_EQ(core_workload_seed(c2, ended, n, &e), 0);
    for (int i = 3; i < 5; i++) {
        snprintf(uid, sizeof uid, "old%d", i);
        ASSERT_EQ(core_reserve(c2, core_alloc_find(c, uid), &e), 0);
    }
    int n1, n2;
    const struct core_learned *l1 = core_cluster_learned(c, &n1), *l2 = core_cluster_learned(c2, &n2);
    ASSERT_EQ(n1, 2);
    ASSERT_EQ(n2, 2);
    for (int k = 0; k < 2; k++) { /* the same classes, P100 by its own number */
        int j = (l1[k].model_mask == ~0ULL) == (l2[0].model_mask == ~0ULL) ? 0 : 1;
        ASSERT_EQ(l1[k].count, l2[j].count);
        ASSERT_EQ(l2[j].model_mask, l1[k].model_mask == ~0ULL ? ~0ULL : 2ULL);
    }
    /* nothing ended there yet beyond the seed */
    free(ended);
    ASSERT_EQ(core_workload_ended(c2, &ended), 2);
    free(ended);
    /* a bad class: nothing is added */
    struct core_learned bad[2] = {{1000, 1, 500, ~0ULL, 4}, {1000, 1, 0, ~0ULL, 1}};
    ASSERT_EQ(core_workload_seed(c2, bad, 2, &e), -GS_EINVAL);
    ASSERT_TRUE(strstr(e.msg, "class 1") != NULL);
    core_cluster_learned(c2, &n2);
    ASSERT_EQ(n2, 2);
    core_cluster_free(c);
    core_cluster_free(c2);
}

/* The per-model GPU counts the pressure is computed from follow node
 * additions, replacements and removals. */
static void model_count_tests(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    add_node(c, "a", 64000, 2, "P100");
    add_node(c, "b", 96000, 8, "G2");
    add_node(c, "c", 96000, 4, "G2");
    ASSERT_EQ(core_cluster_model_count(c), 2);
    ASSERT_EQ(core_cluster_model_gpus(c, 0), 2);
    ASSERT_EQ(core_cluster_model_gpus(c, 1), 12);
    add_node(c, "a", 64000, 1, "P100"); /* replace: 2 GPUs -> 1 */
    ASSERT_EQ(core_cluster_model_gpus(c, 0), 1);
    ASSERT_EQ(core_cluster_remove_node(c, "b", &e), 0);
    ASSERT_EQ(core_cluster_model_gpus(c, 1), 4);
    ASSERT_EQ(core_cluster_model_gpus(c, 7), 0);
    ASSERT_EQ(core_cluster_model_gpus(c, -1), 0);
    core_cluster_free(c);
}

/* Scores: the winner gets 100, others stay below in the same order, and
 * nodes the pod does not fit get 0. */
static void score_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    struct core_class m[2] = {{11000, 1, 1000, "", 80}, {12000, 0, 0, "", 20}};
    struct core_pod p;
    add_node(c, "gpu-dense", 96000, 8, "G2");
    add_node(c, "cpu-rich", 104000, 2, "T4");
    add_node(c, "tiny", 4000, 1, "T4");
    ASSERT_EQ(core_cluster_set_workload(c, m, 2, 1.0, &e), 0);
    struct core_node *nodes[3] = {core_cluster_find(c, "gpu-dense"),
                                  core_cluster_find(c, "cpu-rich"), core_cluster_find(c, "tiny")};
    int scores[3] = {-1, -1, -1};
    make_pod(&p, "cpu-only", 12000, 0, 0);
    ASSERT_EQ(core_score(c, pol, &p, nodes, 3, scores, &e), 0);
    ASSERT_EQ(scores[1], 100);
    ASSERT_TRUE(scores[0] >= 0 && scores[0] < 100);
    ASSERT_EQ(scores[2], 0); /* 4 cores: does not fit */
    core_cluster_free(c);
}

/* Without a target workload (an extender that has seen no pod yet) nothing
 * is fragmented or stranded: every node ties and the pod is still placed. */
static void no_workload_tests(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_cluster *c = core_cluster_new();
    struct core_pod p;
    struct core_decision d;
    add_node(c, "a", 32000, 4, "T4");
    add_node(c, "b", 32000, 4, "T4");
    make_pod(&p, "x", 2000, 2, CORE_MILLI);
    ASSERT_TRUE(strlen(place(c, pol, &p, &d)) > 0);
    ASSERT_EQ(d.alloc.n, 2);
    make_pod(&p, "y", 2000, 1, 300);
    ASSERT_TRUE(strlen(place(c, pol, &p, &d)) > 0);
    ASSERT_EQ(d.alloc.milli[0], 300);
    core_cluster_free(c);
}

int test_pol_cpufrag(void)
{
    registry_tests();
    cpu_only_pod_tests();
    gpu_choice_tests();
    fill_tests();
    fill_absorbed_tests();
    model_pressure_tests();
    model_pressure_rare_tests();
    model_pressure_learned_tests();
    learned_count_tests();
    learned_ended_tests();
    model_count_tests();
    score_tests();
    no_workload_tests();
    return test_failures;
}
