/* Unit tests for the framework's score columns and score cache: under
 * churn (reserve, unreserve, node updates, removals, workload and capacity
 * changes), every score the framework hands out must equal the policy's
 * own score of the node as it is now. */
#include <stdlib.h>

#include "core/internal.h"
#include "test.h"
#include "test_core_helpers.h"

#define NODES 48
#define CLASSES 9

static uint64_t rnd_state = 7;

static int rnd(int n) { return tc_rnd(&rnd_state, n); }

/* A node of 1..8 GPUs; one in four mixes models A and B (the score cache
 * skips those, the columns do not). */
static int random_node(struct core_cluster *c, int i)
{
    static struct core_node_spec s;
    char name[32];
    snprintf(name, sizeof name, "n%02d", i);
    memset(&s, 0, sizeof s);
    s.name = name;
    s.cpu_milli = 8000 + 8000 * rnd(12);
    s.mem_bytes = (int64_t)256 << 30;
    s.n_gpus = 1 + rnd(8);
    int mixed = rnd(4) == 0, model = rnd(2);
    for (int g = 0; g < s.n_gpus; g++) {
        s.gpus[g].index = g;
        snprintf(s.gpus[g].model, sizeof s.gpus[g].model, "%s",
                 (mixed ? g & 1 : model) ? "B" : "A");
        s.gpus[g].mem_mib = 16384;
        s.gpus[g].healthy = rnd(10) != 0;
        s.gpus[g].numa = -1;
    }
    return core_cluster_upsert_node(c, &s, NULL);
}

static const struct core_class classes[CLASSES] = {
    {4000, 0, 0, "", 10},    {6000, 1, 1000, "", 20}, {12000, 2, 1000, "", 5},
    {2000, 1, 500, "", 15},  {3000, 1, 250, "", 10},  {8000, 1, 750, "B", 5},
    {1000, 1, 100, "", 5},   {16000, 4, 1000, "A", 3}, {5000, 1, 300, "", 8},
};

static struct core_pod class_pod(int m, long uid)
{
    const struct core_class *k = &classes[m];
    char id[32];
    snprintf(id, sizeof id, "p%ld", uid);
    struct core_pod p = tc_pod(id, k->num_gpu == 0 ? CORE_REQ_NONE
                                   : k->milli == 1000 ? CORE_REQ_WHOLE : CORE_REQ_SHARED,
                               k->num_gpu, k->milli, 0, k->cpu_milli);
    if (k->gpu_spec[0]) {
        p.req.n_types = 1;
        snprintf(p.req.types[0], sizeof p.req.types[0], "%s", k->gpu_spec);
    }
    /* some sharing pods ask memory too, or memory alone: a GPU's free
     * memory and compute then part, which the share alone does not say */
    if (p.req.kind == CORE_REQ_SHARED && uid % 3) {
        p.req.mem_mib = (int64_t)16384 * k->milli / 1000 + (uid % 3 == 1 ? 2048 : 0);
        if (uid % 3 == 2)
            p.req.milli = 0;
    }
    return p;
}

/* What core_score must return: the policy's raw score of every node that
 * passes the filters, normalised and clamped, 0 for the others. */
static void fresh_scores(struct core_cluster *c, const struct core_policy *pol,
                         const struct core_pod *p, struct core_node **nodes, int n, int *out)
{
    struct core_cycle cy;
    int raw[NODES], at[NODES], k = 0;
    ASSERT_EQ(core_cycle_init(&cy, c, pol, p, NULL), 0);
    for (int i = 0; i < n; i++) {
        out[i] = 0;
        if (core_filter_cycle(&cy, nodes[i], NULL)) {
            at[k] = i;
            raw[k++] = pol->score(&cy, nodes[i]);
        }
    }
    if (pol->normalize && k > 0)
        pol->normalize(&cy, raw, k);
    for (int j = 0; j < k; j++)
        out[at[j]] = raw[j] < 0 ? 0 : raw[j] > CORE_MAX_SCORE ? CORE_MAX_SCORE : raw[j];
}

/* Scores a random subset of the nodes, in random order, both ways. */
static int check_scores(struct core_cluster *c, const struct core_policy *pol,
                        const struct core_pod *p)
{
    struct core_node *nodes[NODES];
    int n = 0, got[NODES], want[NODES], bad = 0;
    for (int i = 0; i < core_cluster_node_count(c); i++)
        if (rnd(3) != 0) {
            int j = rnd(n + 1);
            nodes[n] = nodes[j];
            nodes[j] = core_cluster_node(c, i);
            n++;
        }
    ASSERT_EQ(core_score(c, pol, p, nodes, n, got, NULL), 0);
    fresh_scores(c, pol, p, nodes, n, want);
    for (int i = 0; i < n; i++)
        bad += got[i] != want[i];
    /* core_score_fit: the verdicts it decides are the filters', and given
     * back they give the same scores without the filters */
    unsigned char fit[NODES] = {0};
    ASSERT_EQ(core_score_fit(c, pol, p, nodes, n, fit, got, NULL), 0);
    for (int i = 0; i < n; i++) {
        bad += got[i] != want[i];
        bad += fit[i] != (core_filter(c, nodes[i], p, NULL) ? CORE_FIT_YES : CORE_FIT_NO);
    }
    ASSERT_EQ(core_score_fit(c, pol, p, nodes, n, fit, got, NULL), 0);
    for (int i = 0; i < n; i++)
        bad += got[i] != want[i] || !fit[i];
    /* core_score_fit_at: the same by position, with the verdicts and
     * without them */
    int at[NODES];
    for (int i = 0; i < n; i++)
        at[i] = core_node_pos(nodes[i]);
    ASSERT_EQ(core_score_fit_at(c, pol, p, at, n, fit, got, NULL), 0);
    for (int i = 0; i < n; i++)
        bad += got[i] != want[i];
    memset(fit, 0, sizeof fit);
    ASSERT_EQ(core_score_fit_at(c, pol, p, at, n, fit, got, NULL), 0);
    for (int i = 0; i < n; i++) {
        bad += got[i] != want[i];
        bad += fit[i] != (core_filter(c, nodes[i], p, NULL) ? CORE_FIT_YES : CORE_FIT_NO);
    }
    int outside[2] = {-1, core_cluster_node_count(c)};
    ASSERT_TRUE(core_score_fit_at(c, pol, p, outside, 1, NULL, got, NULL) < 0);
    ASSERT_TRUE(core_score_fit_at(c, pol, p, outside + 1, 1, NULL, got, NULL) < 0);
    return bad;
}

static void churn(const char *policy, int explicit_workload)
{
    const struct core_policy *pol = core_policy_find(policy);
    struct core_cluster *c = core_cluster_new();
    long uid = 0, head = 0;
    static char held[4096][64];
    int bad = 0, placed = 0;
    rnd_state = 7;
    core_cluster_set_seed(c, 3);
    for (int i = 0; i < NODES; i++)
        ASSERT_EQ(random_node(c, i), 0);
    if (explicit_workload)
        ASSERT_EQ(core_cluster_set_workload(c, classes, CLASSES, 0.95, NULL), 0);
    for (int step = 0; step < 1500; step++) {
        struct core_pod p = class_pod(rnd(CLASSES), uid++);
        bad += check_scores(c, pol, &p);
        struct core_decision d;
        if (core_schedule_one(c, pol, &p, &d, NULL) == 0 &&
            core_reserve(c, &d.alloc, NULL) == 0) {
            snprintf(held[placed++ % 4096], sizeof held[0], "%s", p.uid);
            bad += check_scores(c, pol, &p); /* the same question right after */
        }
        if (placed - head > 120 || (placed > head && rnd(3) == 0)) {
            /* gone already when its node left */
            int rc = core_unreserve(c, held[head++ % 4096], NULL);
            ASSERT_TRUE(rc == 0 || rc == -GS_ENOENT);
        }
        switch (rnd(60)) {
        case 0: { /* a node's spec changes in place (its pods stay, overcommitted) */
            int rc = random_node(c, rnd(NODES));
            ASSERT_EQ(rc, 0);
            break;
        }
        case 1: { /* a node leaves with its pods (the last node takes its position) */
            char name[32];
            int i = rnd(NODES);
            snprintf(name, sizeof name, "n%02d", i);
            ASSERT_EQ(core_cluster_remove_node(c, name, NULL), 0);
            for (int m = 0; m < CLASSES; m++) {
                struct core_pod q = class_pod(m, uid++);
                bad += check_scores(c, pol, &q);
            }
            ASSERT_EQ(random_node(c, i), 0); /* and comes back, empty, at the end */
            break;
        }
        case 2: /* the workload's popularity changes */
            if (explicit_workload) {
                struct core_class k2[CLASSES];
                memcpy(k2, classes, sizeof k2);
                k2[rnd(CLASSES)].weight = 1 + rnd(30);
                ASSERT_EQ(core_cluster_set_workload(c, k2, CLASSES, 0.95, NULL), 0);
            }
            break;
        case 3:
            core_cluster_set_available(c, core_cluster_node(c, rnd(NODES))->name, rnd(2), NULL);
            break;
        default:
            break;
        }
    }
    ASSERT_EQ(bad, 0);
    ASSERT_TRUE(placed > 500);
    core_cluster_free(c);
}

/* More pod shapes than columns: the least recently used column is
 * re-keyed, and a re-keyed column never serves the old shape's scores. */
static void test_columns_evict(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_cluster *c = core_cluster_new();
    rnd_state = 11;
    for (int i = 0; i < NODES; i++)
        ASSERT_EQ(random_node(c, i), 0);
    ASSERT_EQ(core_cluster_set_workload(c, classes, CLASSES, 0.95, NULL), 0);
    int bad = 0;
    for (int round = 0; round < 3; round++)
        for (int s = 0; s < CORE_COLS + 8; s++) {
            struct core_pod p =
                tc_pod("q", CORE_REQ_SHARED, 1, 100 + 100 * (s % 9), 0, 1000 + 100 * s);
            bad += check_scores(c, pol, &p);
        }
    ASSERT_EQ(bad, 0);
    core_cluster_free(c);
}

static int free_cpu_score(const struct core_cycle *cy, const struct core_node *n)
{
    (void)cy;
    return (int)(n->free_cpu_milli / 1000);
}

/* A removal moves the last node into the hole: the moved node must not be
 * served the removed node's scores kept at that position. (Removing a node
 * with GPUs changes the capacity version, which drops every column; a
 * CPU-only node does not.) */
static void test_columns_move(void)
{
    static const struct core_policy cpu = {"free-cpu-test", "test", CORE_POLICY_NODE_STATE,
                                           free_cpu_score, NULL, NULL};
    struct core_cluster *c = core_cluster_new();
    tc_node(c, "a", 10000, 16, 0, "", 0);
    tc_node(c, "b", 20000, 16, 0, "", 0);
    tc_node(c, "c", 30000, 16, 0, "", 0);
    struct core_pod p = tc_pod("p", CORE_REQ_NONE, 0, 0, 0, 1000);
    struct core_node *nodes[3] = {core_cluster_find(c, "a"), core_cluster_find(c, "b"),
                                  core_cluster_find(c, "c")};
    int got[3];
    ASSERT_EQ(core_score(c, &cpu, &p, nodes, 3, got, NULL), 0);
    ASSERT_EQ(got[0], 10);
    ASSERT_EQ(got[2], 30);
    ASSERT_EQ(core_cluster_remove_node(c, "a", NULL), 0);
    nodes[0] = core_cluster_find(c, "c"); /* now at a's position */
    nodes[1] = core_cluster_find(c, "b");
    ASSERT_EQ(core_score(c, &cpu, &p, nodes, 2, got, NULL), 0);
    ASSERT_EQ(got[0], 30);
    ASSERT_EQ(got[1], 20);
    /* and a node that changes is scored again */
    struct core_pod q = tc_pod("q", CORE_REQ_NONE, 0, 0, 0, 5000);
    struct core_decision d;
    ASSERT_EQ(core_schedule_one(c, &cpu, &q, &d, NULL), 0);
    ASSERT_STREQ(d.node->name, "c");
    ASSERT_EQ(core_reserve(c, &d.alloc, NULL), 0);
    ASSERT_EQ(core_score(c, &cpu, &p, nodes, 2, got, NULL), 0);
    ASSERT_EQ(got[0], 25);
    core_cluster_free(c);
}

/* A verdict given to core_score_fit is taken as it is: a node said not to
 * fit is not scored (what lets a caller skip the filters for nodes whose
 * state has not moved). */
static void test_score_fit_trusted(void)
{
    const struct core_policy *pol = core_policy_find("cpufrag");
    struct core_cluster *c = core_cluster_new();
    struct core_node *nodes[2];
    int got[2];
    rnd_state = 11;
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(random_node(c, i), 0);
        nodes[i] = core_cluster_node(c, i);
    }
    struct core_pod p = class_pod(0, 1);
    unsigned char fit[2] = {0, 0};
    ASSERT_EQ(core_score_fit(c, pol, &p, nodes, 2, fit, got, NULL), 0);
    if (fit[0] == CORE_FIT_YES && got[0] > 0) {
        fit[0] = CORE_FIT_NO;
        ASSERT_EQ(core_score_fit(c, pol, &p, nodes, 2, fit, got, NULL), 0);
        ASSERT_EQ(got[0], 0);
        ASSERT_EQ(fit[0], CORE_FIT_NO);
    } else {
        TEST_FAIL_("node 0 should fit class 0 with a positive score (fit %d, score %d)", fit[0],
                   got[0]);
    }
    core_cluster_free(c);
}

int test_core_cache(void)
{
    static const char *const policies[] = {"cpufrag", "fgd", "packing"};
    for (int i = 0; i < 3; i++) {
        churn(policies[i], 1);
        churn(policies[i], 0);
    }
    test_columns_evict();
    test_columns_move();
    test_score_fit_trusted();
    return 0;
}
