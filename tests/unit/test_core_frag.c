/* Unit tests for the fragmentation arithmetic's fast paths: on random nodes
 * (one model or mixed, unhealthy GPUs, partly used GPUs), F_n(M) and its
 * per-class counts must equal the definition term by term, and pricing a
 * placement with core_frag_after must equal F_n(M) of the node after the
 * placement is reserved, to the last bit. */
#include <stdlib.h>

#include "core/internal.h"
#include "test.h"
#include "test_core_helpers.h"

#define NODES 40

static uint64_t rnd_state = 5;

static int rnd(int n) { return tc_rnd(&rnd_state, n); }

static void random_node(struct core_cluster *c, int i)
{
    static const char *const models[] = {"A", "B", "C"};
    static struct core_node_spec s;
    char name[32];
    snprintf(name, sizeof name, "f%02d", i);
    memset(&s, 0, sizeof s);
    s.name = name;
    s.cpu_milli = 4000 + 4000 * rnd(24);
    s.mem_bytes = (int64_t)256 << 30;
    s.n_gpus = rnd(9);
    int mixed = rnd(3) == 0, model = rnd(3);
    for (int g = 0; g < s.n_gpus; g++) {
        s.gpus[g].index = g;
        snprintf(s.gpus[g].model, sizeof s.gpus[g].model, "%s", models[mixed ? rnd(3) : model]);
        s.gpus[g].mem_mib = 16384;
        s.gpus[g].healthy = rnd(8) != 0;
        s.gpus[g].numa = -1;
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &s, NULL), 0);
}

/* F_n(M) by its definition, summed in M's order as the core sums it; also
 * checks the per-class counts the core keeps with it. */
static double reference_frag(struct core_cluster *c, const struct core_node *n)
{
    const struct core_node_priv *p = n->priv;
    int total = 0;
    for (int i = 0; i < n->n_gpus; i++)
        if (n->gpus[i].healthy)
            total += core_gpu_free_share(&n->gpus[i]);
    double f = 0;
    for (int m = 0; m < c->n_wclasses; m++) {
        const struct core_wclass *k = &c->wclasses[m];
        int cnt = 0, small = 0;
        for (int i = 0; i < n->n_gpus; i++) {
            const struct core_gpu *g = &n->gpus[i];
            if (!g->healthy)
                continue;
            int share = core_gpu_free_share(g);
            if (((k->model_mask >> g->model_id) & 1) && share >= k->milli)
                cnt++;
            else
                small += share;
        }
        ASSERT_EQ(p->fc_cnt[m], cnt);
        ASSERT_EQ(p->fc_small[m], small);
        int usable = k->num_gpu > 0 && n->free_cpu_milli >= k->cpu_milli && cnt >= k->num_gpu;
        f += k->p * (usable ? small : total);
    }
    return f;
}

static const struct core_class classes[] = {
    {4000, 0, 0, "", 10},     {6000, 1, 1000, "", 20}, {12000, 2, 1000, "", 5},
    {2000, 1, 500, "", 15},   {3000, 1, 250, "B", 10}, {8000, 1, 750, "A|C", 5},
    {1000, 1, 100, "", 5},    {16000, 4, 1000, "A", 3}, {5000, 1, 300, "", 8},
    {24000, 8, 1000, "", 2},  {500, 1, 50, "C", 4},
};
#define CLASSES ((int)(sizeof classes / sizeof classes[0]))

static struct core_pod class_pod(int m, long uid)
{
    const struct core_class *k = &classes[m];
    char id[32];
    snprintf(id, sizeof id, "f%ld", uid);
    return tc_pod(id, k->num_gpu == 0 ? CORE_REQ_NONE
                      : k->milli == 1000 ? CORE_REQ_WHOLE : CORE_REQ_SHARED,
                  k->num_gpu, k->milli, 0, k->cpu_milli);
}

static void check_all(struct core_cluster *c, int *bad)
{
    for (int i = 0; i < core_cluster_node_count(c); i++) {
        const struct core_node *n = core_cluster_node(c, i);
        double f = core_node_frag(c, n);
        *bad += f != reference_frag(c, n);
    }
}

static void run(int explicit_workload)
{
    struct core_cluster *c = core_cluster_new();
    const struct core_policy *pol = core_policy_find("fgd");
    int bad = 0, priced = 0;
    rnd_state = 5;
    for (int i = 0; i < NODES; i++)
        random_node(c, i);
    if (explicit_workload)
        ASSERT_EQ(core_cluster_set_workload(c, classes, CLASSES, 0.95, NULL), 0);
    for (long step = 0; step < 600; step++) {
        struct core_pod pod = class_pod(rnd(CLASSES), step);
        struct core_decision d;
        if (core_schedule_one(c, pol, &pod, &d, NULL) == 0) {
            /* the price of the placement, then the node after it */
            struct core_node *n = core_cluster_find(c, d.alloc.node);
            int pos[CORE_MAX_GPUS], take[CORE_MAX_GPUS];
            for (int j = 0; j < d.alloc.n; j++) {
                pos[j] = d.alloc.gpu[j];
                take[j] = d.alloc.milli[j];
            }
            core_node_frag(c, n);
            double price = core_frag_after(c, n, n->free_cpu_milli - pod.req.cpu_milli, pos,
                                           take, d.alloc.n);
            uint64_t wver = c->wver;
            ASSERT_EQ(core_reserve(c, &d.alloc, NULL), 0);
            if (c->wver == wver && !c->wdirty) { /* a learned M may change on reserve */
                bad += price != core_node_frag(c, n);
                priced++;
            }
        }
        if (step % 3 == 0 && core_cluster_alloc_count(c) > 0) {
            const struct core_alloc *a = core_cluster_alloc(c, rnd(core_cluster_alloc_count(c)));
            char uid[64];
            snprintf(uid, sizeof uid, "%s", a->pod_uid);
            ASSERT_EQ(core_unreserve(c, uid, NULL), 0);
        }
        if (step % 50 == 0)
            check_all(c, &bad);
    }
    check_all(c, &bad);
    ASSERT_EQ(bad, 0);
    ASSERT_TRUE(!explicit_workload || priced > 300);
    core_cluster_free(c);
}

/* A learned M is rebuilt for every pod while few are counted, then once
 * the count has grown by 1/32, and at once for a new class. */
static void learned_refresh(void)
{
    struct core_cluster *c = core_cluster_new();
    ASSERT_EQ(tc_node(c, "m", 1000000, 512, 8, "T4", 16384), 0);
    int rebuilds = 0, late = 0;
    for (int i = 0; i < 70; i++) { /* 7 of the 8 GPUs */
        char uid[32];
        snprintf(uid, sizeof uid, "a%d", i);
        struct core_pod p = tc_pod(uid, CORE_REQ_SHARED, 1, 100, 0, 10);
        uint64_t wver = c->wver;
        ASSERT_EQ(tc_place(c, "m", &p, "fgd"), 0);
        core_cluster_frag(c); /* rebuilds M when it is due */
        rebuilds += c->wver != wver;
        late += i >= 40 && c->wver != wver;
    }
    ASSERT_TRUE(rebuilds >= 33 && rebuilds < 70);
    ASSERT_TRUE(late > 0 && late <= 20);
    ASSERT_EQ(core_cluster_workload_size(c), 1);
    struct core_pod b = tc_pod("b", CORE_REQ_SHARED, 1, 300, 0, 10);
    uint64_t wver = c->wver;
    ASSERT_EQ(tc_place(c, "m", &b, "fgd"), 0);
    core_cluster_frag(c);
    ASSERT_TRUE(c->wver != wver); /* a new class: at once */
    core_cluster_free(c);
}

int test_core_frag(void)
{
    run(1);
    run(0);
    learned_refresh();
    return 0;
}
