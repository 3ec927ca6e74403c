/*
 * tests/unit/test_core_batch.c - core_filter_nodes (the extender's batch
 * filter) must say exactly what core_filter says of every node, on a cluster
 * varied enough to reach every filter plugin and both ways of deciding (the
 * packed filter line and the full chain).
 */
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "test_core_helpers.h"

static uint64_t rnd_state = 12345;

static int rnd(int n)
{
    rnd_state = rnd_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((rnd_state >> 33) % (uint64_t)n);
}

static const char *const models[] = {"A100", "V100", "T4", "P100"};

/* One node of a varied shape: mixed models, unhealthy and MIG GPUs, taints,
 * labels, a pod limit, small CPU. */
static void add_node(struct core_cluster *c, int i)
{
    static const char *keys[] = {"zone"}, *vals_a[] = {"a"}, *vals_b[] = {"b"};
    static struct core_taint taint = {"gpu", "only", "NoSchedule"};
    struct core_node_spec s;
    char name[32];
    memset(&s, 0, sizeof s);
    snprintf(name, sizeof name, "n%03d", i);
    s.name = name;
    s.cpu_milli = 4000 + 4000 * rnd(4);
    s.mem_bytes = (int64_t)(8 + 8 * rnd(4)) << 30;
    s.max_pods = rnd(4) == 0 ? 2 : 0;
    s.n_labels = 1;
    s.label_keys = keys;
    s.label_values = rnd(2) ? vals_a : vals_b;
    if (rnd(6) == 0) {
        s.n_taints = 1;
        s.taints = &taint;
    }
    s.n_gpus = rnd(9);
    int mixed = rnd(5) == 0, model = rnd(4);
    for (int g = 0; g < s.n_gpus; g++) {
        struct core_gpu_spec *gp = &s.gpus[g];
        gp->index = g;
        snprintf(gp->uuid, sizeof gp->uuid, "GPU-%s-%d", name, g);
        snprintf(gp->model, sizeof gp->model, "%s", models[mixed ? rnd(4) : model]);
        gp->mem_mib = 16384 << rnd(2);
        gp->healthy = rnd(10) != 0;
        gp->numa = -1;
        if (rnd(8) == 0) {
            gp->mig_enabled = 1;
            gp->n_mig = 2;
            for (int m = 0; m < 2; m++) {
                snprintf(gp->mig[m].uuid, sizeof gp->mig[m].uuid, "MIG-%s-%d-%d", name, g, m);
                snprintf(gp->mig[m].profile, sizeof gp->mig[m].profile, "1g.5gb");
                gp->mig[m].mem_mib = 4864;
            }
        }
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &s, NULL), 0);
}

/* Compares the batch with core_filter node by node; returns how many fit. */
static int same_as_filter(struct core_cluster *c, const struct core_pod *p,
                          struct core_node *const *nodes, int n)
{
    unsigned char fit[128];
    struct gs_err e = GS_ERR_INIT;
    int k = core_filter_nodes(c, p, nodes, n, fit, &e), want = 0;
    for (int i = 0; i < n; i++) {
        int one = nodes[i] ? core_filter(c, nodes[i], p, NULL) : 0;
        want += one;
        if (fit[i] != one)
            fprintf(stderr, "pod %s, node %s: batch %d, core_filter %d\n", p->name,
                    nodes[i] ? nodes[i]->name : "(null)", fit[i], one);
        ASSERT_EQ(fit[i], one);
    }
    ASSERT_EQ(k, want);
    return k;
}

int test_core_batch(void)
{
    struct core_cluster *c = core_cluster_new();
    struct core_node *nodes[128];
    const int nn = 100;
    for (int i = 0; i < nn; i++)
        add_node(c, i);
    core_cluster_set_available(c, "n007", 0, NULL);
    /* load the cluster: pods of every shape on random nodes */
    for (int i = 0; i < 300; i++) {
        char uid[32];
        snprintf(uid, sizeof uid, "load-%d", i);
        int kind = rnd(3);
        struct core_pod p =
            kind == 0 ? tc_pod(uid, CORE_REQ_WHOLE, 1 + rnd(2), 0, 0, 500)
            : kind == 1 ? tc_pod(uid, CORE_REQ_SHARED, 1, 100 * (1 + rnd(9)), 0, 250)
                        : tc_pod(uid, CORE_REQ_SHARED, 1, 0, 2048 * (1 + rnd(6)), 250);
        char node[32];
        snprintf(node, sizeof node, "n%03d", rnd(nn));
        tc_place(c, node, &p, "bestfit");
    }
    /* the list the extender passes: every node, in a shuffled order, with
     * unknown names (NULL) in between */
    int n = 0;
    for (int i = 0; i < nn; i++) {
        if (i % 17 == 3)
            nodes[n++] = NULL;
        nodes[n++] = core_cluster_node(c, i);
    }
    for (int i = n - 1; i > 0; i--) {
        int j = rnd(i + 1);
        struct core_node *t = nodes[i];
        nodes[i] = nodes[j];
        nodes[j] = t;
    }

    struct core_pod pods[] = {
        tc_pod("cpu-only", CORE_REQ_NONE, 0, 0, 0, 1000),
        tc_pod("whole-1", CORE_REQ_WHOLE, 1, 0, 0, 1000),
        tc_pod("whole-4", CORE_REQ_WHOLE, 4, 0, 0, 1000),
        tc_pod("whole-8", CORE_REQ_WHOLE, 8, 0, 0, 100),
        tc_pod("share-300", CORE_REQ_SHARED, 1, 300, 0, 100),
        tc_pod("share-900", CORE_REQ_SHARED, 1, 900, 0, 100),
        tc_pod("share-2x500", CORE_REQ_SHARED, 2, 500, 0, 100),
        tc_pod("mem-8g", CORE_REQ_SHARED, 1, 0, 8192, 100),
        tc_pod("mem-30g", CORE_REQ_SHARED, 1, 200, 30000, 100),
        tc_pod("big-cpu", CORE_REQ_WHOLE, 1, 0, 0, 14000),
        tc_pod("mig", CORE_REQ_MIG, 0, 0, 0, 100),
    };
    int npods = (int)(sizeof pods / sizeof pods[0]);
    pods[npods - 1].req.mig_count = 1;
    snprintf(pods[npods - 1].req.mig_profile, sizeof pods[npods - 1].req.mig_profile, "1g.5gb");
    pods[2].req.mem_bytes = (int64_t)20 << 30;

    int some_fit = 0, some_not = 0;
    for (int i = 0; i < npods; i++) {
        int k = same_as_filter(c, &pods[i], nodes, n);
        some_fit += k > 0;
        some_not += k < nn;
    }
    /* the chain's cases: models asked for or excluded, selectors, taints */
    struct core_pod t4 = tc_pod("t4", CORE_REQ_SHARED, 1, 500, 0, 100);
    t4.req.n_types = 1;
    snprintf(t4.req.types[0], sizeof t4.req.types[0], "T4");
    some_fit += same_as_filter(c, &t4, nodes, n) > 0;
    struct core_pod not_a100 = tc_pod("not-a100", CORE_REQ_WHOLE, 2, 0, 0, 100);
    not_a100.req.n_types_exclude = 1;
    snprintf(not_a100.req.types_exclude[0], sizeof not_a100.req.types_exclude[0], "A100");
    some_fit += same_as_filter(c, &not_a100, nodes, n) > 0;
    struct core_pod zone = tc_pod("zone-b", CORE_REQ_WHOLE, 1, 0, 0, 100);
    char sk[] = "zone", sv[] = "b";
    char *skeys[] = {sk}, *svals[] = {sv};
    zone.n_selector = 1;
    zone.selector_keys = skeys;
    zone.selector_values = svals;
    some_fit += same_as_filter(c, &zone, nodes, n) > 0;
    struct core_pod tol = tc_pod("tolerates", CORE_REQ_SHARED, 1, 100, 0, 100);
    char tk[] = "gpu", tv[] = "only";
    struct core_toleration tt = {tk, tv, 0, NULL};
    tol.n_tolerations = 1;
    tol.tolerations = &tt;
    some_fit += same_as_filter(c, &tol, nodes, n) > 0;
    /* the cluster is varied enough that both answers occur */
    ASSERT_TRUE(some_fit >= 10);
    ASSERT_TRUE(some_not >= 10);

    /* an invalid request: the error, and no node fits */
    struct core_pod bad = tc_pod("bad", CORE_REQ_WHOLE, 99, 0, 0, 0);
    unsigned char fit[128];
    struct gs_err e = GS_ERR_INIT;
    memset(fit, 1, sizeof fit);
    ASSERT_EQ(core_filter_nodes(c, &bad, nodes, n, fit, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "num_gpu");
    for (int i = 0; i < n; i++)
        ASSERT_EQ(fit[i], 0);
    core_cluster_free(c);
    return 0;
}
