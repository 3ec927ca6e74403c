/* Unit tests for the core's cluster model, filters, reserve/unreserve,
 * topology choice, preemption, registry and fragmentation. */
#include <stdlib.h>

#include "test.h"
#include "test_core_helpers.h"

/* Every GPU and node total must equal capacity minus what allocations hold. */
static void check_invariants(struct core_cluster *c)
{
    for (int i = 0; i < core_cluster_node_count(c); i++) {
        const struct core_node *n = core_cluster_node(c, i);
        int64_t cpu = 0, mem = 0, milli[CORE_MAX_GPUS] = {0}, gmem[CORE_MAX_GPUS] = {0};
        int pods = 0;
        for (int k = 0; k < core_cluster_alloc_count(c); k++) {
            const struct core_alloc *a = core_cluster_alloc(c, k);
            if (strcmp(a->node, n->name) != 0)
                continue;
            cpu += a->cpu_milli;
            mem += a->mem_bytes;
            pods++;
            for (int g = 0; g < a->n; g++) {
                milli[a->gpu[g]] += a->milli[g];
                gmem[a->gpu[g]] += a->mem_mib[g];
            }
        }
        /* the node's own list holds exactly its allocations */
        int listed = 0;
        for (const struct core_alloc *a = core_node_alloc_next(n, NULL); a;
             a = core_node_alloc_next(n, a)) {
            ASSERT_STREQ(a->node, n->name);
            ASSERT_TRUE(core_alloc_find(c, a->pod_uid) == a);
            listed++;
        }
        ASSERT_EQ(listed, pods);
        ASSERT_EQ(n->free_cpu_milli, n->cpu_milli - cpu - n->others_cpu_milli);
        ASSERT_EQ(n->free_mem_bytes, n->mem_bytes - mem - n->others_mem_bytes);
        ASSERT_EQ(n->n_pods, pods + n->others_pods);
        ASSERT_TRUE(n->free_cpu_milli + n->others_cpu_milli >= 0 &&
                    n->free_mem_bytes + n->others_mem_bytes >= 0);
        for (int g = 0; g < n->n_gpus; g++) {
            ASSERT_EQ(n->gpus[g].free_milli, 1000 - milli[g]);
            ASSERT_EQ(n->gpus[g].free_mem_mib, n->gpus[g].mem_mib - gmem[g]);
            ASSERT_TRUE(n->gpus[g].free_milli >= 0 && n->gpus[g].free_mem_mib >= 0);
        }
    }
}

static void test_model(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    ASSERT_EQ(tc_node(c, "a", 32000, 128, 8, "A100", 40960), 0);
    ASSERT_EQ(tc_node(c, "b", 16000, 64, 2, "T4", 15360), 0);
    ASSERT_EQ(core_cluster_node_count(c), 2);
    const struct core_node *a = core_cluster_find(c, "a");
    ASSERT_TRUE(a && a->n_gpus == 8 && a->gpus[3].free_milli == 1000);
    ASSERT_TRUE(core_cluster_find(c, "zzz") == NULL);
    ASSERT_EQ(core_cluster_model_count(c), 2);
    ASSERT_STREQ(core_cluster_model(c, a->gpus[0].model_id), "A100");
    ASSERT_EQ(core_node_gpu_by_uuid(a, "GPU-a-5", NULL), 5);

    /* update in place: the node keeps its name and becomes 4 GPUs */
    ASSERT_EQ(tc_node(c, "a", 32000, 128, 4, "A100", 40960), 0);
    ASSERT_EQ(core_cluster_node_count(c), 2);
    ASSERT_EQ(core_cluster_find(c, "a")->n_gpus, 4);

    /* many nodes: hash lookups survive growth and removals */
    char name[32];
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "n%03d", i);
        ASSERT_EQ(tc_node(c, name, 1000, 1, 1, "T4", 15360), 0);
    }
    for (int i = 0; i < 300; i += 3) {
        snprintf(name, sizeof name, "n%03d", i);
        ASSERT_EQ(core_cluster_remove_node(c, name, &e), 0);
    }
    ASSERT_EQ(core_cluster_node_count(c), 202);
    ASSERT_TRUE(core_cluster_find(c, "n001") && !core_cluster_find(c, "n003"));
    ASSERT_EQ(core_cluster_remove_node(c, "n003", &e), -GS_ENOENT);
    ASSERT_CONTAINS(e.msg, "n003");

    /* bad specs name the field */
    struct core_node_spec s;
    memset(&s, 0, sizeof s);
    s.name = "bad";
    s.n_gpus = 2;
    snprintf(s.gpus[0].model, sizeof s.gpus[0].model, "T4");
    snprintf(s.gpus[1].model, sizeof s.gpus[1].model, "T4");
    ASSERT_EQ(core_cluster_upsert_node(c, &s, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "gpus[1].index: 0 appears twice");
    s.gpus[1].index = 1;
    s.gpus[1].model[0] = '\0';
    ASSERT_EQ(core_cluster_upsert_node(c, &s, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "gpus[1].model: empty");
    s.n_gpus = 17;
    ASSERT_EQ(core_cluster_upsert_node(c, &s, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "at most 16");
    s.n_gpus = 0;
    s.cpu_milli = -1;
    ASSERT_EQ(core_cluster_upsert_node(c, &s, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "cpu_milli");
    core_cluster_free(c);
}

static void test_filter_reasons(void)
{
    struct core_cluster *c = core_cluster_new();
    struct core_status st;
    tc_node(c, "t4", 32000, 64, 8, "T4", 16384);
    const struct core_node *n = core_cluster_find(c, "t4");

    struct core_pod p = tc_pod("p1", CORE_REQ_WHOLE, 4, 0, 0, 1000);
    ASSERT_EQ(core_filter(c, n, &p, &st), 1);
    ASSERT_EQ(st.code, CORE_FIT);
    /* hold 6 of the 8 GPUs */
    struct core_pod h = tc_pod("h", CORE_REQ_WHOLE, 6, 0, 0, 1000);
    ASSERT_EQ(tc_place(c, "t4", &h, "binpack"), 0);
    ASSERT_EQ(core_filter(c, n, &p, &st), 0);
    ASSERT_EQ(st.code, CORE_UNSCHEDULABLE);
    ASSERT_STREQ(st.reason, "node has 2 free GPUs, pod needs 4");
    ASSERT_STREQ(st.plugin, "GPUFit");

    /* more GPUs than the node has: unresolvable */
    struct core_pod big = tc_pod("big", CORE_REQ_WHOLE, 9, 0, 0, 1000);
    ASSERT_EQ(core_filter(c, n, &big, &st), 0);
    ASSERT_EQ(st.code, CORE_UNRESOLVABLE);
    ASSERT_CONTAINS(st.reason, "node has 8 healthy GPUs, pod needs 9");

    /* wrong model */
    struct core_pod a100 = tc_pod("a", CORE_REQ_WHOLE, 1, 0, 0, 1000);
    a100.req.n_types = 1;
    snprintf(a100.req.types[0], CORE_MODEL_MAX, "A100");
    ASSERT_EQ(core_filter(c, n, &a100, &st), 0);
    ASSERT_EQ(st.code, CORE_UNRESOLVABLE);
    ASSERT_STREQ(st.reason, "no GPU of model A100 (node has T4)");
    a100.req.n_types = 0;
    a100.req.n_types_exclude = 1;
    snprintf(a100.req.types_exclude[0], CORE_MODEL_MAX, "t4");
    ASSERT_EQ(core_filter(c, n, &a100, &st), 0);
    ASSERT_CONTAINS(st.reason, "excluded");

    /* shared memory: the GPU with the most free memory is named */
    struct core_pod m1 = tc_pod("m1", CORE_REQ_SHARED, 1, 0, 14336, 100);
    ASSERT_EQ(tc_place(c, "t4", &m1, "binpack"), 0);
    struct core_pod m2 = tc_pod("m2", CORE_REQ_SHARED, 1, 0, 14336, 100);
    ASSERT_EQ(tc_place(c, "t4", &m2, "binpack"), 0);
    struct core_pod m3 = tc_pod("m3", CORE_REQ_SHARED, 1, 0, 8192, 100);
    ASSERT_EQ(core_filter(c, n, &m3, &st), 0);
    ASSERT_STREQ(st.reason, "GPU 6 has 2048 MiB free, pod needs 8192 MiB");
    struct core_pod huge = tc_pod("m4", CORE_REQ_SHARED, 1, 0, 20000, 100);
    ASSERT_EQ(core_filter(c, n, &huge, &st), 0);
    ASSERT_EQ(st.code, CORE_UNRESOLVABLE);
    ASSERT_CONTAINS(st.reason, "at most 16384 MiB");

    /* compute short */
    struct core_pod k1 = tc_pod("k1", CORE_REQ_SHARED, 1, 700, 0, 100);
    struct core_pod k2 = tc_pod("k2", CORE_REQ_SHARED, 1, 700, 0, 100);
    ASSERT_EQ(core_unreserve(c, "m1", NULL), 0);
    ASSERT_EQ(core_unreserve(c, "m2", NULL), 0);
    ASSERT_EQ(tc_place(c, "t4", &k1, "binpack"), 0);
    ASSERT_EQ(tc_place(c, "t4", &k2, "binpack"), 0);
    struct core_pod k3 = tc_pod("k3", CORE_REQ_SHARED, 1, 500, 0, 100);
    ASSERT_EQ(core_filter(c, n, &k3, &st), 0);
    ASSERT_CONTAINS(st.reason, "has 300 thousandths of compute free, pod needs 500");

    /* CPU and memory */
    struct core_pod cpu = tc_pod("cpu", CORE_REQ_NONE, 0, 0, 0, 64000);
    ASSERT_EQ(core_filter(c, n, &cpu, &st), 0);
    ASSERT_EQ(st.code, CORE_UNRESOLVABLE);
    ASSERT_CONTAINS(st.reason, "pod needs 64000m");
    cpu.req.cpu_milli = 31000;
    ASSERT_EQ(core_filter(c, n, &cpu, &st), 0);
    ASSERT_EQ(st.code, CORE_UNSCHEDULABLE);
    cpu.req.cpu_milli = 100;
    cpu.req.mem_bytes = (int64_t)65 << 30;
    ASSERT_EQ(core_filter(c, n, &cpu, &st), 0);
    ASSERT_CONTAINS(st.reason, "memory free");

    /* unavailable */
    cpu.req.mem_bytes = 0;
    ASSERT_EQ(core_filter(c, n, &cpu, &st), 1);
    ASSERT_EQ(core_cluster_set_available(c, "t4", 0, NULL), 0);
    ASSERT_EQ(core_filter(c, n, &cpu, &st), 0);
    ASSERT_CONTAINS(st.reason, "unavailable");
    core_cluster_free(c);
}

static void test_taints_labels(void)
{
    struct core_cluster *c = core_cluster_new();
    struct core_status st;
    struct core_node_spec s;
    const char *keys[] = {"zone", "nvidia.com/gpu.product"};
    const char *vals[] = {"a", "T4"};
    struct core_taint taint = {"gpu", "only", "NoSchedule"};
    memset(&s, 0, sizeof s);
    s.name = "n";
    s.cpu_milli = 8000;
    s.mem_bytes = (int64_t)16 << 30;
    s.n_labels = 2;
    s.label_keys = keys;
    s.label_values = vals;
    s.n_taints = 1;
    s.taints = &taint;
    ASSERT_EQ(core_cluster_upsert_node(c, &s, NULL), 0);
    const struct core_node *n = core_cluster_find(c, "n");

    struct core_pod p = tc_pod("p", CORE_REQ_NONE, 0, 0, 0, 100);
    ASSERT_EQ(core_filter(c, n, &p, &st), 0);
    ASSERT_EQ(st.code, CORE_UNRESOLVABLE);
    ASSERT_STREQ(st.plugin, "TaintToleration");
    ASSERT_CONTAINS(st.reason, "gpu=only:NoSchedule");
    char key[] = "gpu", val[] = "only";
    struct core_toleration tol = {key, val, 0, NULL};
    p.n_tolerations = 1;
    p.tolerations = &tol;
    ASSERT_EQ(core_filter(c, n, &p, &st), 1);

    /* nodeSelector */
    char sk[] = "zone", sv[] = "b";
    char *skeys[] = {sk}, *svals[] = {sv};
    p.n_selector = 1;
    p.selector_keys = skeys;
    p.selector_values = svals;
    ASSERT_EQ(core_filter(c, n, &p, &st), 0);
    ASSERT_STREQ(st.plugin, "NodeAffinity");
    ASSERT_CONTAINS(st.reason, "nodeSelector");
    svals[0][0] = 'a';
    ASSERT_EQ(core_filter(c, n, &p, &st), 1);
    /* the label copy is the node's own */
    ASSERT_STREQ(n->label_values[0], "a");
    core_cluster_free(c);
}

/* A node of 4 whole GPUs with one label and maybe a PreferNoSchedule taint. */
static void soft_node(struct core_cluster *c, const char *name, const char *zone, int spot)
{
    static const char *keys[] = {"zone"};
    const char *vals[] = {zone};
    struct core_taint taint = {"spot", "true", "PreferNoSchedule"};
    struct core_node_spec s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.cpu_milli = 16000;
    s.mem_bytes = (int64_t)64 << 30;
    s.n_labels = 1;
    s.label_keys = keys;
    s.label_values = vals;
    s.n_taints = spot;
    s.taints = &taint;
    s.n_gpus = 4;
    for (int i = 0; i < 4; i++) {
        s.gpus[i].index = i;
        snprintf(s.gpus[i].uuid, sizeof s.gpus[i].uuid, "GPU-%s-%d", name, i);
        snprintf(s.gpus[i].model, sizeof s.gpus[i].model, "A100");
        s.gpus[i].mem_mib = 40960;
        s.gpus[i].healthy = 1;
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &s, NULL), 0);
}

static const char *soft_choice(struct core_cluster *c, const char *policy,
                               const struct core_pod *p)
{
    struct core_decision d;
    struct gs_err e = GS_ERR_INIT;
    if (core_schedule_one(c, core_policy_find(policy), p, &d, &e) != 0)
        return "none";
    /* the extender's /prioritize choice agrees (core_choice_at) */
    int pos[3], sc[3];
    unsigned char fit[3] = {0};
    for (int i = 0; i < 3; i++)
        pos[i] = i;
    ASSERT_EQ(core_score_fit_at(c, core_policy_find(policy), p, pos, 3, fit, sc, &e), 0);
    int at = core_choice_at(c, p, pos, sc, fit, 3);
    ASSERT_TRUE(at >= 0 && pos[at] == core_node_pos(d.node));
    return d.node->name;
}

/* Preferred node affinity and PreferNoSchedule taints, as kube-scheduler's
 * NodeAffinity and TaintToleration score them, come before the policy:
 * with the extender's weight the policy's choice would outvote them. */
static void test_soft_preferences(void)
{
    struct core_cluster *c = core_cluster_new();
    soft_node(c, "a", "x", 0);
    soft_node(c, "b", "y", 0);
    soft_node(c, "c", "y", 1);
    int placed = 0;
#define PLACE(node)                                                                      \
    do {                                                                                 \
        char uid[16];                                                                    \
        snprintf(uid, sizeof uid, "w%d", placed++);                                      \
        struct core_pod w = tc_pod(uid, CORE_REQ_WHOLE, 1, 0, 0, 1000);                  \
        ASSERT_EQ(tc_place(c, node, &w, "binpack"), 0);                                  \
    } while (0)
    PLACE("a"); /* binpack now takes a ... */
    PLACE("c");
    PLACE("c"); /* ... or c, were it not tainted */
    struct core_pod p = tc_pod("p", CORE_REQ_WHOLE, 1, 0, 0, 1000);
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "a"); /* c's taint counts before binpack */
    char tk[] = "spot", tv[] = "true", te[] = "PreferNoSchedule";
    struct core_toleration tol = {tk, tv, 0, te};
    p.n_tolerations = 1;
    p.tolerations = &tol;
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "c"); /* tolerated: binpack's fullest */
    p.n_tolerations = 0;
    /* prefer zone y (weight 10): b and c match, c's taint leaves b */
    char key[] = "zone", y[] = "y", x[] = "x";
    char *vy[] = {y}, *vx[] = {x};
    struct core_requirement ry = {key, 0, CORE_OP_IN, 1, vy}, rx = {key, 0, CORE_OP_IN, 1, vx};
    struct core_term terms[2] = {{1, &ry}, {1, &rx}};
    int weights[2] = {10, 30};
    p.n_prefs = 1;
    p.prefs = terms;
    p.pref_weights = weights;
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "b");
    for (int i = 0; i < 20; i++) { /* random too: uniformly among the preferred */
        struct core_decision d;
        ASSERT_EQ(core_schedule_one(c, core_policy_find("random"), &p, &d, NULL), 0);
        ASSERT_STREQ(d.node->name, "b");
    }
    p.n_tolerations = 1; /* tolerated: b and c alike, binpack takes c */
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "c");
    /* zone x weighs 30 against y's 10: a (100 + 100) over b and c (33 + 100) */
    p.n_prefs = 2;
    ASSERT_STREQ(soft_choice(c, "spread", &p), "a");
    int ac, at_, taint;
    const struct core_node *na = core_cluster_find(c, "a");
    core_pod_soft_counts(&p, "a", na->n_labels, na->label_keys, na->label_values, na->n_taints,
                         na->taints, &ac, &taint);
    ASSERT_EQ(ac, 30);
    ASSERT_EQ(taint, 0);
    const struct core_node *nc = core_cluster_find(c, "c");
    p.n_tolerations = 0;
    core_pod_soft_counts(&p, "c", nc->n_labels, nc->label_keys, nc->label_values, nc->n_taints,
                         nc->taints, &at_, &taint);
    ASSERT_EQ(at_, 10);
    ASSERT_EQ(taint, 1);
    /* the preferred node full: the others by preference, then policy */
    for (int i = 0; i < 3; i++)
        PLACE("a");
#undef PLACE
    p.n_tolerations = 1;
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "c");
    core_cluster_free(c);
}

/* The counts a caller gives (the extender's, from its pods): per node
 * (a, b, c) and term; and what placed pods' terms that pick the pod add
 * per node (pa_sym). */
static long long pa_cnt[3][2], pa_sym[3];
static long long pa_count(void *ud, const struct core_pod *pod, const struct core_node *n,
                          long long *counts)
{
    (void)ud;
    for (int t = 0; t < pod->n_pod_terms; t++)
        counts[t] = pa_cnt[n->name[0] - 'a'][t];
    return pa_sym[n->name[0] - 'a'];
}

static int pa_picked(void *ud, const struct core_pod *pod)
{
    (void)ud;
    (void)pod;
    return pa_sym[0] || pa_sym[1] || pa_sym[2];
}

/* Nodes a and c in zone x, b in y; a 1-GPU pod on a (binpack's choice next). */
static struct core_cluster *pa_cluster(void)
{
    struct core_cluster *c = core_cluster_new();
    soft_node(c, "a", "x", 0);
    soft_node(c, "b", "y", 0);
    soft_node(c, "c", "x", 0);
    struct core_pod w = tc_pod("w", CORE_REQ_WHOLE, 1, 0, 0, 1000);
    ASSERT_EQ(tc_place(c, "a", &w, "binpack"), 0);
    return c;
}

#define PA_SET(a0, b0, c0) (pa_cnt[0][0] = (a0), pa_cnt[1][0] = (b0), pa_cnt[2][0] = (c0))

/* Preferred pod (anti-)affinity and soft topology spread come before the
 * policy, scored as kube-scheduler's InterPodAffinity (weight x count,
 * normalised from min(0, lowest) to max(0, highest)) and PodTopologySpread
 * (fewest in the domain best, x2), and only where a caller counts them. */
static void test_pod_terms_first(void)
{
    struct core_cluster *c = pa_cluster();
    struct core_pod p = tc_pod("p", CORE_REQ_WHOLE, 1, 0, 0, 1000);
    char zone[] = "zone";
    struct core_pod_term terms[2] = {{.weight = -10}, {.max_skew = 1, .topology_key = zone}};
    p.n_pod_terms = 1;
    p.pod_terms = terms;
    PA_SET(1, 0, 0);
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "a"); /* no caller counts: ignored */
    p.pod_terms_count = pa_count;
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "b"); /* b and c alike: the seeded rank */
    PA_SET(10, 5, 2);
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "c");
    terms[0].weight = 5;
    PA_SET(1, 8, 8);
    ASSERT_STREQ(soft_choice(c, "spread", &p), "b");
    PA_SET(0, 0, 0); /* nothing picked: the policy alone */
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "a");
    /* spread over zones: x holds 2 of the app's pods, y none: b, the policy's
     * last choice; with 1 in x and 1 in y, the policy decides again */
    p.n_pod_terms = 2;
    pa_cnt[0][1] = pa_cnt[2][1] = 2, pa_cnt[1][1] = 0;
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "b");
    pa_cnt[0][1] = pa_cnt[1][1] = pa_cnt[2][1] = 1;
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "a");
    /* a node without the key scores 0 for the spread: others first */
    terms[1].topology_key = (char *)"rack";
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "a"); /* no node has it: all alike */
    core_cluster_free(c);
}

/* The terms of placed pods that pick a pod (kube-scheduler's symmetric
 * half of InterPodAffinity) rank nodes for a pod without terms of its own,
 * and add to its own terms' sums before they are normalised. */
static void test_placed_pods_terms_first(void)
{
    struct core_cluster *c = pa_cluster();
    struct core_pod p = tc_pod("p", CORE_REQ_WHOLE, 1, 0, 0, 1000);
    memset(pa_cnt, 0, sizeof pa_cnt);
    pa_sym[0] = pa_sym[2] = -10, pa_sym[1] = 0; /* a pod in zone x avoids p */
    p.pod_terms_count = pa_count;
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "a"); /* no picked callback: not asked */
    p.pod_terms_picked = pa_picked;
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "b");
    pa_sym[1] = -20; /* y avoids it more */
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "a");
    pa_sym[0] = pa_sym[1] = pa_sym[2] = 0; /* none picks it: the policy alone */
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "a");
    /* its own term prefers a (3 x 5); a placed pod's anti-affinity on a and
     * c (-20) outweighs it: b */
    char zone[] = "zone";
    struct core_pod_term term = {.weight = 5, .topology_key = zone};
    p.n_pod_terms = 1;
    p.pod_terms = &term;
    PA_SET(3, 0, 0);
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "a");
    pa_sym[0] = pa_sym[2] = -20;
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "b");
    pa_sym[0] = pa_sym[2] = -10; /* 15 - 10 on a, -10 on c: a */
    ASSERT_STREQ(soft_choice(c, "binpack", &p), "a");
    memset(pa_sym, 0, sizeof pa_sym);
    core_cluster_free(c);
}

static void test_reserve(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    tc_node(c, "n", 16000, 64, 4, "A100", 40960);
    struct core_node *n = core_cluster_find(c, "n");

    struct core_pod w = tc_pod("w", CORE_REQ_WHOLE, 2, 0, 0, 4000);
    w.req.mem_bytes = (int64_t)8 << 30;
    struct core_alloc a;
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("binpack"), n, &w, &a, &e), 0);
    ASSERT_EQ(a.n, 2);
    ASSERT_EQ(a.gpu[0], 0);
    ASSERT_EQ(a.gpu[1], 1);
    ASSERT_EQ(a.mem_mib[0], 40960);
    ASSERT_EQ(a.milli[1], 1000);
    ASSERT_STREQ(a.pod_name, "default/w");
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    ASSERT_EQ(n->free_cpu_milli, 12000);
    ASSERT_EQ(n->free_mem_bytes, (int64_t)56 << 30);
    ASSERT_EQ(n->gpus[0].free_milli, 0);
    ASSERT_EQ(n->gpus[1].free_mem_mib, 0);
    ASSERT_EQ(n->n_pods, 1);
    ASSERT_TRUE(core_alloc_find(c, "w") != NULL);
    ASSERT_EQ(core_alloc_find(c, "w")->gpu[1], 1);

    /* the same UID twice */
    ASSERT_EQ(core_reserve(c, &a, &e), -GS_ECONFLICT);
    /* a whole GPU that is taken: refused, nothing changes */
    uint64_t gen = n->generation;
    struct core_alloc b = a;
    snprintf(b.pod_uid, sizeof b.pod_uid, "x");
    ASSERT_EQ(core_reserve(c, &b, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "GPU 0 is in use");
    ASSERT_EQ(n->generation, gen);
    ASSERT_EQ(n->free_cpu_milli, 12000);
    /* sharing beyond compute: refused */
    struct core_alloc s1;
    struct core_pod sp = tc_pod("s1", CORE_REQ_SHARED, 1, 600, 10000, 1000);
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("binpack"), n, &sp, &s1, &e), 0);
    ASSERT_EQ(s1.gpu[0], 2);
    ASSERT_EQ(core_reserve(c, &s1, &e), 0);
    struct core_alloc s2 = s1;
    snprintf(s2.pod_uid, sizeof s2.pod_uid, "s2");
    ASSERT_EQ(core_reserve(c, &s2, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "GPU 2 has 400 thousandths of compute free");
    s2.milli[0] = 400;
    s2.mem_mib[0] = 30961; /* 1 MiB too many */
    ASSERT_EQ(core_reserve(c, &s2, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "30960 MiB free");
    s2.mem_mib[0] = 30960;
    ASSERT_EQ(core_reserve(c, &s2, &e), 0);
    ASSERT_EQ(n->gpus[2].free_milli, 0);
    ASSERT_EQ(n->gpus[2].free_mem_mib, 0);
    /* CPU beyond the node: refused */
    struct core_alloc s3 = s1;
    snprintf(s3.pod_uid, sizeof s3.pod_uid, "s3");
    s3.gpu[0] = 3;
    s3.cpu_milli = 20000;
    ASSERT_EQ(core_reserve(c, &s3, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "CPU free");
    /* malformed */
    s3.cpu_milli = 0;
    s3.gpu[0] = 9;
    ASSERT_EQ(core_reserve(c, &s3, &e), -GS_EINVAL);
    snprintf(s3.node, sizeof s3.node, "nowhere");
    ASSERT_EQ(core_reserve(c, &s3, &e), -GS_ENOENT);
    check_invariants(c);

    /* unreserve gives everything back */
    ASSERT_EQ(core_unreserve(c, "w", &e), 0);
    ASSERT_EQ(core_unreserve(c, "w", &e), -GS_ENOENT);
    ASSERT_EQ(core_unreserve(c, "s1", &e), 0);
    ASSERT_EQ(core_unreserve(c, "s2", &e), 0);
    ASSERT_EQ(n->free_cpu_milli, 16000);
    ASSERT_EQ(n->free_mem_bytes, (int64_t)64 << 30);
    for (int g = 0; g < 4; g++) {
        ASSERT_EQ(n->gpus[g].free_milli, 1000);
        ASSERT_EQ(n->gpus[g].free_mem_mib, 40960);
        ASSERT_EQ(n->gpus[g].n_pods, 0);
    }
    ASSERT_EQ(core_cluster_alloc_count(c), 0);

    /* node update keeps allocations; one whose GPU is gone leaves */
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    ASSERT_EQ(tc_node(c, "n", 16000, 64, 4, "A100", 40960), 0);
    n = core_cluster_find(c, "n");
    ASSERT_EQ(n->gpus[1].free_milli, 0);
    ASSERT_EQ(tc_node(c, "n", 16000, 64, 1, "A100", 40960), 0);
    n = core_cluster_find(c, "n");
    ASSERT_EQ(n->n_gpus, 1);
    ASSERT_TRUE(core_alloc_find(c, "w") == NULL);
    ASSERT_EQ(n->free_cpu_milli, 16000);
    ASSERT_EQ(n->gpus[0].free_milli, 1000);
    check_invariants(c);
    ASSERT_EQ(tc_node(c, "n", 16000, 64, 4, "A100", 40960), 0);
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    /* less than its pods hold (smaller GPUs, CPU taken for the system):
     * they stay, the node is overcommitted, and nothing more fits */
    ASSERT_EQ(tc_node(c, "n", 1000, 64, 4, "A100", 20480), 0);
    n = core_cluster_find(c, "n");
    ASSERT_EQ(core_alloc_find(c, "w")->mem_mib[1], 20480); /* still the whole GPU */
    ASSERT_EQ(n->gpus[1].free_mem_mib, 0);
    ASSERT_EQ(n->free_cpu_milli, 1000 - 4000);
    struct core_pod tiny = tc_pod("tiny", CORE_REQ_WHOLE, 1, 0, 0, 100);
    ASSERT_EQ(tc_place(c, "n", &tiny, "binpack"), -GS_ENOFIT);
    ASSERT_EQ(core_unreserve(c, "w", &e), 0);
    ASSERT_EQ(n->free_cpu_milli, 1000);
    ASSERT_EQ(n->gpus[1].free_mem_mib, 20480);
    ASSERT_EQ(tc_node(c, "n", 16000, 64, 4, "A100", 40960), 0);
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    n = core_cluster_find(c, "n");
    /* the updated node lists what the old one held; a node of its own
     * keeps its own list through the removal of another */
    ASSERT_EQ(core_reserve(c, &s1, &e), 0);
    ASSERT_EQ(tc_node(c, "n", 16000, 64, 4, "A100", 40960), 0);
    ASSERT_EQ(tc_node(c, "m", 16000, 64, 4, "A100", 40960), 0);
    struct core_alloc m1 = s1;
    snprintf(m1.pod_uid, sizeof m1.pod_uid, "m1");
    snprintf(m1.node, sizeof m1.node, "m");
    ASSERT_EQ(core_reserve(c, &m1, &e), 0);
    check_invariants(c);
    ASSERT_EQ(core_unreserve(c, "s1", &e), 0);
    check_invariants(c);
    /* taken off the middle, the head, the last: the links hold */
    struct core_alloc m2 = m1, m3 = m1;
    snprintf(m2.pod_uid, sizeof m2.pod_uid, "m2");
    snprintf(m3.pod_uid, sizeof m3.pod_uid, "m3");
    m2.gpu[0] = 1;
    m3.gpu[0] = 3;
    ASSERT_EQ(core_reserve(c, &m2, &e), 0);
    ASSERT_EQ(core_reserve(c, &m3, &e), 0);
    check_invariants(c);
    const char *order[] = {"m2", "m3", "m1"};
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(core_unreserve(c, order[i], &e), 0);
        check_invariants(c);
    }
    ASSERT_TRUE(core_node_alloc_next(core_cluster_find(c, "m"), NULL) == NULL);
    ASSERT_EQ(core_reserve(c, &m1, &e), 0);
    ASSERT_EQ(core_reserve(c, &s1, &e), 0);
    /* removing the node drops its allocations */
    ASSERT_EQ(core_cluster_remove_node(c, "n", &e), 0);
    ASSERT_TRUE(core_alloc_find(c, "w") == NULL);
    ASSERT_TRUE(core_alloc_find(c, "s1") == NULL);
    ASSERT_EQ(core_cluster_alloc_count(c), 1);
    check_invariants(c);
    core_cluster_free(c);
}

/* Pods the core holds no allocation for (the extender's CPU-only and
 * foreign pods) take CPU, memory and pod slots that the filters and the
 * scores see, and never make a placement already made fail. */
static void test_others(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    struct core_status st;
    tc_node(c, "n", 16000, 64, 4, "A100", 40960);
    struct core_node *n = core_cluster_find(c, "n");
    struct core_pod big = tc_pod("big", CORE_REQ_WHOLE, 1, 0, 0, 6000);
    struct core_pod small = tc_pod("small", CORE_REQ_WHOLE, 1, 0, 0, 3000);
    big.req.mem_bytes = (int64_t)20 << 30;
    struct core_alloc a; /* chosen before the others came */
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("binpack"), n, &big, &a, &e), 0);
    uint64_t gen = n->generation;
    ASSERT_EQ(core_cluster_set_others(c, "n", 12000, (int64_t)48 << 30, 3, &e), 0);
    ASSERT_TRUE(n->generation != gen);
    ASSERT_EQ(n->free_cpu_milli, 4000);
    ASSERT_EQ(n->free_mem_bytes, (int64_t)16 << 30);
    ASSERT_EQ(n->n_pods, 3);
    gen = n->generation; /* the same again changes nothing */
    ASSERT_EQ(core_cluster_set_others(c, "n", 12000, (int64_t)48 << 30, 3, &e), 0);
    ASSERT_EQ(n->generation, gen);

    ASSERT_TRUE(!core_filter(c, n, &big, &st));
    ASSERT_CONTAINS(st.reason, "node has 4000m CPU free of 16000m, pod needs 6000m");
    ASSERT_EQ(st.code, CORE_UNSCHEDULABLE);
    ASSERT_TRUE(core_filter(c, n, &small, NULL));
    big.req.cpu_milli = 1000;
    ASSERT_TRUE(!core_filter(c, n, &big, &st));
    ASSERT_CONTAINS(st.reason, "16384 MiB memory free of 65536 MiB");
    big.req.cpu_milli = 6000;

    /* an assignment made already (a restore, a bind kube-scheduler chose)
     * is taken even where the others leave too little */
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    ASSERT_EQ(n->free_cpu_milli, -2000);
    ASSERT_EQ(n->n_pods, 4);
    check_invariants(c);
    ASSERT_TRUE(!core_filter(c, n, &small, &st));
    /* a node update keeps both */
    ASSERT_EQ(tc_node(c, "n", 16000, 64, 4, "A100", 40960), 0);
    n = core_cluster_find(c, "n");
    ASSERT_EQ(n->others_cpu_milli, 12000);
    ASSERT_EQ(n->free_cpu_milli, -2000);
    check_invariants(c);
    ASSERT_EQ(core_cluster_set_others(c, "n", 0, 0, 0, &e), 0);
    ASSERT_EQ(n->free_cpu_milli, 10000);
    ASSERT_EQ(n->free_mem_bytes, (int64_t)44 << 30);
    ASSERT_EQ(n->n_pods, 1);
    check_invariants(c);
    ASSERT_EQ(core_cluster_set_others(c, "nowhere", 1, 1, 1, &e), -GS_ENOENT);
    ASSERT_EQ(core_cluster_set_others(c, "n", -1, 0, 0, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "node n");
    ASSERT_EQ(core_cluster_set_others(c, "n", 0, CORE_OTHERS_MAX + 1, 0, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "outside 0..");
    ASSERT_EQ(n->free_cpu_milli, 10000);

    /* pod slots: kubelet's max pods counts every pod */
    struct core_node_spec *s = tc_spec("slots", 64000, 64, 1, "A100", 40960);
    s->max_pods = 2;
    ASSERT_EQ(core_cluster_upsert_node(c, s, &e), 0);
    struct core_node *sl = core_cluster_find(c, "slots");
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("binpack"), sl, &small, &a, &e), 0);
    ASSERT_EQ(core_cluster_set_others(c, "slots", 0, 0, 2, &e), 0);
    ASSERT_TRUE(!core_filter(c, sl, &small, &st));
    ASSERT_CONTAINS(st.reason, "already runs 2 of 2 pods");
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    check_invariants(c);
    core_cluster_free(c);

    /* the policies see them: two empty 8-GPU nodes, one whose CPU other
     * pods have taken; with a workload of 8-core GPU pods, cpufrag and fgd
     * put a 1-core GPU pod on the GPUs that node's CPU can no longer feed,
     * both ways round (alike, the seeded rank would pick one node twice) */
    for (int round = 0; round < 2; round++)
        for (int pol = 0; pol < 2; pol++) {
            const char *name = pol ? "fgd" : "cpufrag";
            c = core_cluster_new();
            tc_node(c, "x", 64000, 256, 8, "A100", 40960);
            tc_node(c, "y", 64000, 256, 8, "A100", 40960);
            struct core_class k = {8000, 1, 1000, "", 1};
            ASSERT_EQ(core_cluster_set_workload(c, &k, 1, 1.0, &e), 0);
            const char *busy = round ? "y" : "x";
            ASSERT_EQ(core_cluster_set_others(c, busy, 60000, (int64_t)16 << 30, 12, &e), 0);
            struct core_pod p = tc_pod("p", CORE_REQ_WHOLE, 1, 0, 0, 1000);
            struct core_decision d;
            ASSERT_EQ(core_schedule_one(c, core_policy_find(name), &p, &d, &e), 0);
            ASSERT_STREQ(d.node->name, busy);
            core_cluster_free(c);
        }
}

static void test_mig(void)
{
    struct core_cluster *c = core_cluster_new();
    struct core_node_spec s;
    struct core_status st;
    struct gs_err e = GS_ERR_INIT;
    memset(&s, 0, sizeof s);
    s.name = "mig";
    s.cpu_milli = 8000;
    s.mem_bytes = (int64_t)8 << 30;
    s.n_gpus = 2;
    for (int g = 0; g < 2; g++) {
        s.gpus[g].index = g;
        snprintf(s.gpus[g].model, CORE_MODEL_MAX, "A100");
        s.gpus[g].mem_mib = 40960;
        s.gpus[g].healthy = 1;
        s.gpus[g].mig_enabled = g == 0;
    }
    s.gpus[0].n_mig = 3;
    for (int m = 0; m < 3; m++) {
        snprintf(s.gpus[0].mig[m].uuid, CORE_UUID_MAX, "MIG-%d", m);
        snprintf(s.gpus[0].mig[m].profile, CORE_MIG_PROFILE_MAX, m < 2 ? "1g.5gb" : "2g.10gb");
        s.gpus[0].mig[m].mem_mib = m < 2 ? 4864 : 9728;
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &s, &e), 0);
    const struct core_node *n = core_cluster_find(c, "mig");
    int mig;
    ASSERT_EQ(core_node_gpu_by_uuid(n, "MIG-2", &mig), 0);
    ASSERT_EQ(mig, 2);

    struct core_pod p = tc_pod("m", CORE_REQ_MIG, 0, 0, 0, 100);
    snprintf(p.req.mig_profile, sizeof p.req.mig_profile, "1g.5gb");
    p.req.mig_count = 2;
    ASSERT_EQ(tc_place(c, "mig", &p, "binpack"), 0);
    const struct core_alloc *a = core_alloc_find(c, "m");
    ASSERT_EQ(a->n, 2);
    ASSERT_EQ(a->mig[0], 0);
    ASSERT_EQ(a->mig[1], 1);
    ASSERT_TRUE(n->gpus[0].mig[1].used);
    struct core_pod q = p;
    snprintf(q.uid, sizeof q.uid, "q");
    q.req.mig_count = 1;
    ASSERT_EQ(core_filter(c, n, &q, &st), 0);
    ASSERT_STREQ(st.reason, "node has 0 free MIG instances of 1g.5gb, pod needs 1");
    q.req.mig_count = 3;
    ASSERT_EQ(core_filter(c, n, &q, &st), 0);
    ASSERT_EQ(st.code, CORE_UNRESOLVABLE);
    ASSERT_STREQ(st.reason, "node has 2 healthy MIG instances of 1g.5gb (of 2), pod needs 3");
    snprintf(q.req.mig_profile, sizeof q.req.mig_profile, "3g.20gb");
    q.req.mig_count = 1;
    ASSERT_EQ(core_filter(c, n, &q, &st), 0);
    ASSERT_EQ(st.code, CORE_UNRESOLVABLE);
    ASSERT_STREQ(st.reason, "node has no MIG instance of 3g.20gb");
    /* a whole GPU never lands on the MIG GPU */
    struct core_pod w = tc_pod("w", CORE_REQ_WHOLE, 1, 0, 0, 100);
    ASSERT_EQ(tc_place(c, "mig", &w, "binpack"), 0);
    ASSERT_EQ(core_alloc_find(c, "w")->gpu[0], 1);
    ASSERT_EQ(core_unreserve(c, "m", &e), 0);
    ASSERT_TRUE(!n->gpus[0].mig[0].used && !n->gpus[0].mig[1].used);

    /* a faulted instance (its GPU healthy) takes no pod; the other does */
    s.gpus[0].mig[0].unhealthy = 1;
    ASSERT_EQ(core_cluster_upsert_node(c, &s, &e), 0);
    n = core_cluster_find(c, "mig");
    snprintf(q.req.mig_profile, sizeof q.req.mig_profile, "1g.5gb");
    q.req.mig_count = 2;
    ASSERT_EQ(core_filter(c, n, &q, &st), 0);
    ASSERT_EQ(st.code, CORE_UNRESOLVABLE);
    ASSERT_STREQ(st.reason, "node has 1 healthy MIG instances of 1g.5gb (of 2), pod needs 2");
    q.req.mig_count = 1;
    ASSERT_EQ(tc_place(c, "mig", &q, "binpack"), 0);
    ASSERT_EQ(core_alloc_find(c, "q")->mig[0], 1);
    struct core_pod r = q;
    snprintf(r.uid, sizeof r.uid, "r");
    ASSERT_EQ(core_filter(c, n, &r, &st), 0);
    ASSERT_STREQ(st.reason, "node has 0 free MIG instances of 1g.5gb, pod needs 1");
    /* an instance made before the others: q keeps MIG-1, now at place 2, and
     * w its GPU (no UUID: by its NVML index) */
    memmove(&s.gpus[0].mig[1], &s.gpus[0].mig[0], 3 * sizeof s.gpus[0].mig[0]);
    snprintf(s.gpus[0].mig[0].uuid, CORE_UUID_MAX, "MIG-9");
    s.gpus[0].mig[0].unhealthy = 0;
    s.gpus[0].n_mig = 4;
    ASSERT_EQ(core_cluster_upsert_node(c, &s, &e), 0);
    n = core_cluster_find(c, "mig");
    ASSERT_EQ(core_alloc_find(c, "q")->mig[0], 2);
    ASSERT_TRUE(n->gpus[0].mig[2].used && !n->gpus[0].mig[0].used && !n->gpus[0].mig[1].used);
    ASSERT_EQ(core_alloc_find(c, "w")->gpu[0], 1);
    ASSERT_TRUE(tc_place(c, "mig", &r, "binpack") == 0);
    ASSERT_EQ(core_alloc_find(c, "r")->mig[0], 0);
    core_cluster_free(c);
}

/* A node's GPU list changes under its allocations (a GPU gone from the bus,
 * NVML's indices renumbered): each keeps its GPUs, found by UUID, not its
 * positions, which now name other GPUs. */
/* A GPU a whole pod holds goes into MIG mode (the update came before the
 * pod's end): the pod keeps it, and its instances are not handed out until
 * the pod leaves. */
static void test_mig_mode_under_a_whole_pod(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    ASSERT_EQ(tc_node(c, "x", 64000, 64, 1, "A100", 40960), 0);
    struct core_pod whole = tc_pod("whole", CORE_REQ_WHOLE, 1, 0, 0, 1000);
    ASSERT_EQ(tc_place(c, "x", &whole, "binpack"), 0);
    struct core_node_spec *s = tc_spec("x", 64000, 64, 1, "A100", 40960);
    s->gpus[0].mig_enabled = 1;
    s->gpus[0].n_mig = 2;
    for (int m = 0; m < 2; m++) {
        snprintf(s->gpus[0].mig[m].uuid, CORE_UUID_MAX, "MIG-x-%d", m);
        snprintf(s->gpus[0].mig[m].profile, CORE_MIG_PROFILE_MAX, "3g.20gb");
        s->gpus[0].mig[m].mem_mib = 19968;
    }
    ASSERT_EQ(core_cluster_upsert_node(c, s, &e), 0);
    ASSERT_TRUE(core_alloc_find(c, "whole") != NULL);
    struct core_pod mig = tc_pod("mig", CORE_REQ_MIG, 0, 0, 0, 100);
    snprintf(mig.req.mig_profile, sizeof mig.req.mig_profile, "3g.20gb");
    mig.req.mig_count = 1;
    ASSERT_EQ(tc_place(c, "x", &mig, "binpack"), -GS_ENOFIT);
    struct core_alloc a;
    memset(&a, 0, sizeof a);
    snprintf(a.pod_uid, sizeof a.pod_uid, "mig");
    snprintf(a.pod_name, sizeof a.pod_name, "default/mig");
    snprintf(a.node, sizeof a.node, "x");
    a.kind = CORE_REQ_MIG;
    a.n = 1;
    a.gpu[0] = 0;
    a.mig[0] = 1;
    a.mem_mib[0] = 19968;
    ASSERT_EQ(core_reserve(c, &a, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "still held by a pod that took it before");
    ASSERT_EQ(core_unreserve(c, "whole", &e), 0);
    ASSERT_EQ(tc_place(c, "x", &mig, "binpack"), 0);
    core_cluster_free(c);
}

static void test_node_gpus_change(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    ASSERT_EQ(tc_node(c, "r", 64000, 64, 4, "A100", 40960), 0);
    struct core_node *n = core_cluster_find(c, "r");
    struct core_pod held = tc_pod("held", CORE_REQ_WHOLE, 1, 0, 0, 1000);
    struct core_pod shr = tc_pod("shr", CORE_REQ_SHARED, 1, 300, 8192, 1000);
    struct core_alloc a;
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("binpack"), n, &held, &a, &e), 0);
    a.gpu[0] = 2;
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("binpack"), n, &shr, &a, &e), 0);
    a.gpu[0] = 3;
    ASSERT_EQ(core_reserve(c, &a, &e), 0);

    /* GPU 1 leaves: NVML numbers GPU-r-2 and GPU-r-3 as 1 and 2 */
    struct core_node_spec *s = tc_spec("r", 64000, 64, 4, "A100", 40960);
    for (int i = 1; i < 3; i++) {
        s->gpus[i] = s->gpus[i + 1];
        s->gpus[i].index = i;
    }
    s->n_gpus = 3;
    ASSERT_EQ(core_cluster_upsert_node(c, s, &e), 0);
    n = core_cluster_find(c, "r");
    ASSERT_EQ(core_alloc_find(c, "held")->gpu[0], 1);
    ASSERT_STREQ(n->gpus[1].uuid, "GPU-r-2");
    ASSERT_EQ(n->gpus[1].free_milli, 0);
    ASSERT_EQ(core_alloc_find(c, "shr")->gpu[0], 2);
    ASSERT_EQ(n->gpus[2].free_milli, 700);
    ASSERT_EQ(n->gpus[0].free_milli, 1000);
    check_invariants(c);
    /* so the next whole pod gets the one free GPU, not GPU-r-2 again */
    struct core_pod next = tc_pod("next", CORE_REQ_WHOLE, 1, 0, 0, 1000);
    ASSERT_EQ(tc_place(c, "r", &next, "binpack"), 0);
    ASSERT_STREQ(n->gpus[core_alloc_find(c, "next")->gpu[0]].uuid, "GPU-r-0");
    ASSERT_EQ(core_unreserve(c, "next", &e), 0);

    /* a GPU a pod holds gone: that pod's allocation leaves, the rest stay */
    s = tc_spec("r", 64000, 64, 2, "A100", 40960);
    snprintf(s->gpus[1].uuid, sizeof s->gpus[1].uuid, "GPU-r-3");
    ASSERT_EQ(core_cluster_upsert_node(c, s, &e), 0);
    n = core_cluster_find(c, "r");
    ASSERT_EQ(n->n_gpus, 2);
    ASSERT_TRUE(core_alloc_find(c, "held") == NULL);
    ASSERT_EQ(core_alloc_find(c, "shr")->gpu[0], 1);
    ASSERT_EQ(n->gpus[1].free_milli, 700);
    ASSERT_EQ(n->gpus[0].free_milli, 1000);
    check_invariants(c);
    core_cluster_free(c);
}

/* Random schedule / unreserve churn with every policy: never oversubscribed,
 * the books always balance. */
static void test_churn(void)
{
    for (int pi = 0; pi < core_policy_count(); pi++) {
        const struct core_policy *pol = core_policy_at(pi);
        struct core_cluster *c = core_cluster_new();
        char name[32];
        for (int i = 0; i < 12; i++) {
            snprintf(name, sizeof name, "n%02d", i);
            tc_node(c, name, 32000, 128, i % 3 == 0 ? 8 : i % 3 == 1 ? 4 : 2,
                    i % 2 ? "T4" : "V100", i % 2 ? 16384 : 32768);
        }
        core_cluster_set_seed(c, 7 + (uint64_t)pi);
        uint64_t r = 12345;
        int placed = 0;
        for (int step = 0; step < 600; step++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            int kind = (int)(r >> 33) % 5;
            char uid[16];
            snprintf(uid, sizeof uid, "u%d", step);
            struct core_pod p =
                kind == 0 ? tc_pod(uid, CORE_REQ_NONE, 0, 0, 0, 2000)
                : kind == 1 ? tc_pod(uid, CORE_REQ_WHOLE, 1 << ((r >> 40) % 3), 0, 0, 4000)
                : kind == 2 ? tc_pod(uid, CORE_REQ_SHARED, 1, 0, 1024 * (1 + (int)((r >> 45) % 12)), 1000)
                            : tc_pod(uid, CORE_REQ_SHARED, 1, 100 * (1 + (int)((r >> 41) % 9)), 0, 1000);
            struct core_decision d;
            if (core_schedule_one(c, pol, &p, &d, NULL) == 0) {
                ASSERT_EQ(core_reserve(c, &d.alloc, NULL), 0);
                placed++;
            }
            if (step % 3 == 2 && core_cluster_alloc_count(c) > 0) {
                const struct core_alloc *a = core_cluster_alloc(c, (int)((r >> 20) % (uint64_t)core_cluster_alloc_count(c)));
                char victim[64];
                snprintf(victim, sizeof victim, "%s", a->pod_uid);
                ASSERT_EQ(core_unreserve(c, victim, NULL), 0);
            }
        }
        ASSERT_TRUE(placed > 100);
        check_invariants(c);
        core_cluster_free(c);
    }
}

static void test_topology(void)
{
    struct core_cluster *c = core_cluster_new();
    struct core_node_spec s;
    memset(&s, 0, sizeof s);
    s.name = "dgx";
    s.cpu_milli = 64000;
    s.mem_bytes = (int64_t)256 << 30;
    s.n_gpus = 8;
    for (int i = 0; i < 8; i++) {
        struct core_gpu_spec *g = &s.gpus[7 - i]; /* given out of order */
        g->index = i;
        snprintf(g->model, CORE_MODEL_MAX, "H100");
        g->mem_mib = 81920;
        g->healthy = 1;
        g->numa = i / 4;
        for (int j = 0; j < 8; j++)
            g->link[j] = i / 4 == j / 4 ? (i / 2 == j / 2 ? CORE_LINK_NVLINK : CORE_LINK_PIX)
                                        : CORE_LINK_UNKNOWN;
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &s, NULL), 0);
    const struct core_node *n = core_cluster_find(c, "dgx");
    ASSERT_EQ(n->gpus[0].index, 0);
    ASSERT_EQ(n->gpus[0].link[1], CORE_LINK_NVLINK);
    ASSERT_EQ(n->gpus[0].link[2], CORE_LINK_PIX);
    ASSERT_EQ(n->gpus[0].link[5], CORE_LINK_SYS); /* derived from NUMA */

    uint32_t set;
    ASSERT_EQ(core_topology_pick(n, 0xfe, 0, 2, &set), 0);
    ASSERT_EQ(set, 0x0c); /* {2,3}: NVLink, lowest such pair without 0 */
    ASSERT_EQ(core_topology_pick(n, 0xfe, 0, 4, &set), 0);
    ASSERT_EQ(set, 0xf0); /* one NUMA node, two NVLink pairs */
    ASSERT_EQ(core_topology_pick(n, 0xff, 0x01, 2, &set), 0);
    ASSERT_EQ(set, 0x03);
    ASSERT_EQ(core_topology_pick(n, 0x15, 0, 2, &set), 0);
    ASSERT_EQ(set, 0x05); /* {0,2}: PIX beats {0,4}/{2,4} across NUMA */
    /* GPU 3 busy: one GPU is 2, cut off from its NVLink partner, not 0,
     * which would break the 0-1 pair (then the lowest positions) */
    ASSERT_EQ(core_topology_pick(n, 0xf7, 0, 1, &set), 0);
    ASSERT_EQ(set, 0x04);
    ASSERT_EQ(core_topology_pick(n, 0xf7, 0, 3, &set), 0);
    ASSERT_EQ(set, 0x07); /* {0,1,2}: one NUMA node, leaves the 4-7 quad whole */
    ASSERT_EQ(core_topology_pick(n, 0xff, 0, 1, &set), 0);
    ASSERT_EQ(set, 0x01);
    ASSERT_EQ(core_topology_pick(n, 0x03, 0, 3, &set), -GS_ENOFIT);
    ASSERT_EQ(core_topology_pick(n, 0x03, 0x04, 1, &set), -GS_ENOFIT);
    ASSERT_EQ(core_link_parse("NVLink"), CORE_LINK_NVLINK);
    ASSERT_EQ(core_link_parse("pix"), CORE_LINK_PIX);
    ASSERT_EQ(core_link_parse("bogus"), -1);
    ASSERT_STREQ(core_link_name(CORE_LINK_SYS), "sys");

    /* links all alike (an NVSwitch box): the lowest positions, with must */
    struct core_node_spec sw = s;
    sw.name = "nvswitch";
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            sw.gpus[i].link[j] = CORE_LINK_NVLINK;
    ASSERT_EQ(core_cluster_upsert_node(c, &sw, NULL), 0);
    const struct core_node *nv = core_cluster_find(c, "nvswitch");
    ASSERT_EQ(core_topology_pick(nv, 0xf6, 0x40, 3, &set), 0);
    ASSERT_EQ(set, 0x46); /* {1,2,6} */
    ASSERT_EQ(core_topology_pick(nv, 0xf6, 0x40, 6, &set), 0);
    ASSERT_EQ(set, 0xf6);
    ASSERT_EQ(core_topology_pick(nv, 0xf6, 0x01, 2, &set), -GS_ENOFIT);

    /* the topology policy uses it: GPU 0 busy, a 2-GPU pod gets {2,3} */
    struct core_pod one = tc_pod("one", CORE_REQ_WHOLE, 1, 0, 0, 100);
    ASSERT_EQ(tc_place(c, "dgx", &one, "topology"), 0);
    ASSERT_EQ(core_alloc_find(c, "one")->gpu[0], 0);
    struct core_pod two = tc_pod("two", CORE_REQ_WHOLE, 2, 0, 0, 100);
    ASSERT_EQ(tc_place(c, "dgx", &two, "topology"), 0);
    ASSERT_EQ(core_alloc_find(c, "two")->gpu[0], 2);
    ASSERT_EQ(core_alloc_find(c, "two")->gpu[1], 3);
    /* and so does every policy for whole GPUs: any free set leaves the same
     * free shares. GPUs 0, 2, 3 busy: four GPUs go to {4..7}, one NUMA node
     * of two NVLink pairs, not to {1,4,5,6} (lowest index) */
    const char *pols[] = {"cpufrag", "fgd", "bestfit", "binpack", "spread", "random", "packing"};
    for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++) {
        struct gs_err e = GS_ERR_INIT;
        struct core_pod four = tc_pod("four", CORE_REQ_WHOLE, 4, 0, 0, 100);
        ASSERT_EQ(tc_place(c, "dgx", &four, pols[i]), 0);
        const struct core_alloc *a = core_alloc_find(c, "four");
        ASSERT_EQ(a->n, 4);
        for (int k = 0; k < 4; k++)
            ASSERT_EQ(a->gpu[k], 4 + k);
        ASSERT_EQ(core_unreserve(c, "four", &e), 0);
    }
    core_cluster_free(c);
}

/* An H100 node of n GPUs, GPU i on NUMA node i / per_numa, with the links
 * link(i, j) gives (CORE_LINK_UNKNOWN: derived from NUMA). */
static void linked_node(struct core_cluster *c, const char *name, int n, int per_numa,
                        enum core_link (*link)(int i, int j))
{
    struct core_node_spec s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.cpu_milli = 64000;
    s.mem_bytes = (int64_t)256 << 30;
    s.n_gpus = n;
    for (int i = 0; i < n; i++) {
        struct core_gpu_spec *g = &s.gpus[i];
        g->index = i;
        snprintf(g->model, CORE_MODEL_MAX, "H100");
        g->mem_mib = 81920;
        g->healthy = 1;
        g->numa = i / per_numa;
        for (int j = 0; j < n; j++)
            g->link[j] = i == j ? CORE_LINK_UNKNOWN : link(i, j);
    }
    ASSERT_EQ(core_cluster_upsert_node(c, &s, NULL), 0);
}

static enum core_link pairs_across_numa(int i, int j) /* 0-2, 1-3 */
{
    return (i + 2) % 4 == j ? CORE_LINK_NVLINK : CORE_LINK_UNKNOWN;
}

static enum core_link quads_of_pairs(int i, int j) /* NVLink pairs, PIX within a quad */
{
    return i / 2 == j / 2 ? CORE_LINK_NVLINK : i / 4 == j / 4 ? CORE_LINK_PIX : CORE_LINK_UNKNOWN;
}

static enum core_link nvswitch(int i, int j)
{
    (void)i;
    (void)j;
    return CORE_LINK_NVLINK;
}

/* Two 4-GPU nodes with NVLinks 0-2 and 1-3 (NUMA 0: GPUs 0-1, NUMA 1: 2-3);
 * on `linked` GPUs 1 and 3 are busy (free: the 0-2 NVLink pair), on the
 * other 1 and 2 (free: 0 and 3, across NUMA nodes). */
static struct core_cluster *two_linked_nodes(const char *linked)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    const char *names[] = {"x", "y"};
    for (int k = 0; k < 2; k++) {
        linked_node(c, names[k], 4, 2, pairs_across_numa);
        const struct core_node *n = core_cluster_find(c, names[k]);
        int busy[2] = {1, strcmp(names[k], linked) == 0 ? 3 : 2};
        for (int b = 0; b < 2; b++) {
            char uid[16];
            snprintf(uid, sizeof uid, "%s-busy%d", names[k], busy[b]);
            struct core_pod p = tc_pod(uid, CORE_REQ_WHOLE, 1, 0, 0, 1000);
            struct core_alloc a;
            ASSERT_EQ(core_pick_gpus(c, core_policy_find("bestfit"), n, &p, &a, &e), 0);
            a.gpu[0] = busy[b];
            ASSERT_EQ(core_reserve(c, &a, &e), 0);
        }
    }
    return c;
}

/* Nodes the policy scores equal: a pod of 2+ whole GPUs goes where its GPUs
 * are best linked, whichever node the seeded rank puts first; the extender's
 * choice (core_choice_at) and top-k order (core_tie_keys_at) agree; other
 * pods keep the rank alone. */
static void test_link_tiebreak(void)
{
    const char *pols[] = {"cpufrag", "fgd", "bestfit", "binpack", "spread", "packing", "topology"};
    for (int side = 0; side < 2; side++) {
        const char *linked = side ? "y" : "x";
        struct core_cluster *c = two_linked_nodes(linked);
        struct gs_err e = GS_ERR_INIT;
        struct core_node *nodes[2] = {core_cluster_find(c, "x"), core_cluster_find(c, "y")};
        int pos[2] = {core_node_pos(nodes[0]), core_node_pos(nodes[1])};
        struct core_pod two = tc_pod("two", CORE_REQ_WHOLE, 2, 0, 0, 1000);
        struct core_pod one = tc_pod("one", CORE_REQ_WHOLE, 1, 0, 0, 1000);
        /* and a pod of two shared GPUs: the same two fit on each node */
        struct core_pod twos = tc_pod("twos", CORE_REQ_SHARED, 2, 500, 0, 1000);
        for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++) {
            const struct core_policy *pol = core_policy_find(pols[i]);
            struct core_decision d;
            int sc[2];
            ASSERT_EQ(core_schedule_one(c, pol, &twos, &d, &e), 0);
            ASSERT_STREQ(d.node->name, linked);
            ASSERT_EQ((1u << d.alloc.gpu[0]) | (1u << d.alloc.gpu[1]), 0x5u);
            ASSERT_EQ(core_schedule_one(c, pol, &two, &d, &e), 0);
            ASSERT_STREQ(d.node->name, linked);
            ASSERT_EQ(d.alloc.gpu[0], 0);
            ASSERT_EQ(d.alloc.gpu[1], 2);
            ASSERT_EQ(core_score(c, pol, &two, nodes, 2, sc, &e), 0);
            if (strcmp(pols[i], "topology") != 0) /* which scores the links */
                ASSERT_EQ(sc[0], sc[1]);          /* a tie the links break */
            ASSERT_EQ(core_choice_at(c, &two, pos, sc, NULL, 2), side);
        }
        uint64_t keys[2];
        ASSERT_EQ(core_tie_keys_at(c, &two, pos, 2, keys, &e), 0);
        ASSERT_TRUE(keys[side] < keys[!side]);
        ASSERT_TRUE(keys[!side] >> 32 > keys[side] >> 32);
        int sc[2];
        ASSERT_EQ(core_score(c, core_policy_find("cpufrag"), &twos, nodes, 2, sc, &e), 0);
        ASSERT_EQ(sc[0], sc[1]);
        ASSERT_EQ(core_choice_at(c, &twos, pos, sc, NULL, 2), side);
        ASSERT_EQ(core_tie_keys_at(c, &twos, pos, 2, keys, &e), 0);
        ASSERT_TRUE(keys[!side] >> 32 > keys[side] >> 32);
        ASSERT_EQ(core_tie_keys_at(c, &one, pos, 2, keys, &e), 0);
        ASSERT_EQ(keys[0] >> 32, 0); /* the rank alone */
        ASSERT_EQ(keys[1] >> 32, 0);
        struct core_decision d;
        ASSERT_EQ(core_schedule_one(c, core_policy_find("cpufrag"), &one, &d, &e), 0);
        ASSERT_STREQ(d.node->name, keys[0] < keys[1] ? "x" : "y");
        core_cluster_free(c);
    }

    /* four GPUs: an NVSwitch node (every pair NVLink) before a quad of two
     * NVLink pairs joined by PIX, whatever the seeded ranks say */
    int dgx_first = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        struct core_cluster *c = core_cluster_new();
        struct gs_err e = GS_ERR_INIT;
        core_cluster_set_seed(c, seed);
        const char *names[] = {"dgx", "sw"};
        for (int k = 0; k < 2; k++) {
            linked_node(c, names[k], 8, 4, k ? nvswitch : quads_of_pairs);
            struct core_pod busy = tc_pod(names[k], CORE_REQ_WHOLE, 4, 0, 0, 1000);
            ASSERT_EQ(tc_place(c, names[k], &busy, "bestfit"), 0); /* GPUs 0-3 on both */
        }
        struct core_node *nodes[2] = {core_cluster_find(c, "dgx"), core_cluster_find(c, "sw")};
        int pos[2] = {core_node_pos(nodes[0]), core_node_pos(nodes[1])};
        uint64_t keys[2];
        struct core_pod one = tc_pod("one", CORE_REQ_WHOLE, 1, 0, 0, 1000);
        ASSERT_EQ(core_tie_keys_at(c, &one, pos, 2, keys, &e), 0);
        dgx_first += keys[0] < keys[1];
        struct core_pod four = tc_pod("four", CORE_REQ_WHOLE, 4, 0, 0, 1000);
        struct core_decision d;
        ASSERT_EQ(core_schedule_one(c, core_policy_find("cpufrag"), &four, &d, &e), 0);
        ASSERT_STREQ(d.node->name, "sw");
        ASSERT_EQ(core_tie_keys_at(c, &four, pos, 2, keys, &e), 0);
        ASSERT_TRUE(keys[1] < keys[0]);
        core_cluster_free(c);
    }
    ASSERT_TRUE(dgx_first > 0 && dgx_first < 8); /* the ranks alone would not do */
}

/* A node of two NVLink pairs (0-1, 2-3, PIX between) or an NVSwitch node,
 * GPUs 0 and 2 holding 600 milli each. */
static struct core_cluster *shared_pairs(enum core_link (*link)(int i, int j))
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    linked_node(c, "q", 4, 4, link);
    for (int g = 0; g < 4; g += 2) {
        char uid[16];
        snprintf(uid, sizeof uid, "held%d", g);
        struct core_pod p = tc_pod(uid, CORE_REQ_SHARED, 1, 600, 0, 100);
        struct core_alloc a;
        ASSERT_EQ(core_pick_gpus(c, core_policy_find("bestfit"), core_cluster_find(c, "q"), &p,
                                 &a, &e), 0);
        a.gpu[0] = g;
        ASSERT_EQ(core_reserve(c, &a, &e), 0);
    }
    return c;
}

/* A pod of several shared GPUs gets the best-linked ones that fit, then its
 * policy's order: 0 and 1 (NVLink), not the best-fitting 0 and 2 (PIX),
 * under every policy but `random` (the benchmark's baseline: a random
 * subset); one shared GPU and a node linked alike keep best fit. */
static void test_shared_links(void)
{
    const char *pols[] = {"cpufrag", "fgd", "bestfit", "binpack", "spread", "packing", "topology"};
    struct gs_err e = GS_ERR_INIT;
    struct core_cluster *c = shared_pairs(quads_of_pairs);
    const struct core_node *q = core_cluster_find(c, "q");
    struct core_pod tp = tc_pod("tp", CORE_REQ_SHARED, 2, 300, 0, 100);
    for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++) {
        struct core_decision d;
        ASSERT_EQ(core_schedule_one(c, core_policy_find(pols[i]), &tp, &d, &e), 0);
        ASSERT_EQ(d.alloc.n, 2);
        ASSERT_EQ((1u << d.alloc.gpu[0]) | (1u << d.alloc.gpu[1]), 0x3u);
    }
    /* best fit among the NVLinked: 0 (400 free) before 1 */
    struct core_alloc a;
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("bestfit"), q, &tp, &a, &e), 0);
    ASSERT_EQ(a.gpu[0], 0);
    ASSERT_EQ(a.gpu[1], 1);
    struct core_pod one = tc_pod("one", CORE_REQ_SHARED, 1, 300, 0, 100);
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("bestfit"), q, &one, &a, &e), 0);
    ASSERT_EQ(a.gpu[0], 0);
    /* 0 and 1 taken: the other pair, though 1 is partly used now */
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("bestfit"), q, &tp, &a, &e), 0);
    ASSERT_EQ(core_reserve(c, &a, &e), 0);
    struct core_pod tp2 = tc_pod("tp2", CORE_REQ_SHARED, 2, 300, 0, 100);
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("bestfit"), q, &tp2, &a, &e), 0);
    ASSERT_EQ((1u << a.gpu[0]) | (1u << a.gpu[1]), 0xcu);
    /* three: no set is all NVLink; the best-fitting three, all PIX */
    struct core_pod three = tc_pod("three", CORE_REQ_SHARED, 3, 300, 0, 100);
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("bestfit"), q, &three, &a, &e), 0);
    ASSERT_EQ(a.n, 3);
    core_cluster_free(c);

    /* linked alike: the shares alone, 0 and 2 */
    c = shared_pairs(nvswitch);
    ASSERT_EQ(core_pick_gpus(c, core_policy_find("bestfit"), core_cluster_find(c, "q"), &tp, &a,
                             &e), 0);
    ASSERT_EQ(a.gpu[0], 0);
    ASSERT_EQ(a.gpu[1], 2);
    core_cluster_free(c);
}

/* core_topology_pick_ranked against every set: on random link matrices of
 * 8 and 12 GPUs and random orders, it takes the set of the best weakest
 * link that comes first rank by rank. */
static enum core_link g_links[CORE_MAX_GPUS][CORE_MAX_GPUS];

static enum core_link table_link(int i, int j) { return g_links[i][j]; }

static void test_ranked_pick_is_exhaustive(void)
{
    uint64_t x = 88172645463325252ULL;
    static const enum core_link kinds[] = {CORE_LINK_SYS, CORE_LINK_NODE, CORE_LINK_PIX,
                                          CORE_LINK_NVLINK};
    for (int round = 0; round < 300; round++) {
        int ng = round % 2 ? 12 : 8;
        struct core_cluster *c = core_cluster_new();
        for (int i = 0; i < ng; i++)
            for (int j = i + 1; j < ng; j++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                g_links[i][j] = g_links[j][i] = kinds[x % 4];
            }
        linked_node(c, "r", ng, ng, table_link);
        const struct core_node *n = core_cluster_find(c, "r");
        int pos[CORE_MAX_GPUS], k = 0;
        for (int i = 0; i < ng; i++) { /* a random subset, in a random order */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (x % 4)
                pos[k++] = i;
        }
        for (int i = k - 1; i > 0; i--) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int j = (int)(x % (uint64_t)(i + 1)), t = pos[i];
            pos[i] = pos[j], pos[j] = t;
        }
        int count = k < 2 ? k : 2 + (int)(x % (uint64_t)(k - 1));
        /* brute force: sets over ranks, the best weakest link, then rank by rank */
        uint32_t best = 0;
        int best_w = -1;
        for (uint32_t comb = 0; comb < (1u << k); comb++) {
            if (__builtin_popcount(comb) != count)
                continue;
            int w = CORE_LINK_NVLINK;
            for (int a = 0; a < k; a++)
                for (int b = a + 1; b < k; b++)
                    if ((comb >> a & 1) && (comb >> b & 1) &&
                        n->gpus[pos[a]].link[pos[b]] < w)
                        w = n->gpus[pos[a]].link[pos[b]];
            uint32_t d = comb ^ best;
            if (w > best_w || (w == best_w && (d & comb & -d))) {
                best = comb;
                best_w = w;
            }
        }
        int want[CORE_MAX_GPUS], m = 0;
        for (int i = 0; i < k; i++)
            if (best >> i & 1)
                want[m++] = pos[i];
        ASSERT_EQ(core_topology_pick_ranked(n, pos, k, count), 0);
        for (int i = 0; i < count; i++)
            ASSERT_EQ(pos[i], want[i]);
        core_cluster_free(c);
    }
}

static void test_preempt(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    tc_node(c, "n", 16000, 64, 4, "A100", 40960);
    const struct core_node *n = core_cluster_find(c, "n");
    const char *uids[] = {"low1", "low2", "high"};
    const int prio[] = {1, 2, 100};
    for (int i = 0; i < 3; i++) {
        struct core_pod p = tc_pod(uids[i], CORE_REQ_WHOLE, 1, 0, 0, 1000);
        p.priority = prio[i];
        ASSERT_EQ(tc_place(c, "n", &p, "binpack"), 0);
    }
    const char *victims[4];
    int nv = -1;
    struct core_pod p = tc_pod("new", CORE_REQ_WHOLE, 2, 0, 0, 1000);
    p.priority = 50;
    ASSERT_EQ(core_preempt(c, n, &p, NULL, victims, 4, &nv, NULL, &e), 0);
    ASSERT_EQ(nv, 1);
    ASSERT_STREQ(victims[0], "low1");
    /* unchanged */
    ASSERT_EQ(n->gpus[0].free_milli, 0);
    ASSERT_EQ(n->gpus[3].free_milli, 1000);
    ASSERT_EQ(core_cluster_alloc_count(c), 3);
    check_invariants(c);
    /* needs 4: both low pods are not enough, high is untouchable */
    p.req.num_gpu = 4;
    ASSERT_EQ(core_preempt(c, n, &p, NULL, victims, 4, &nv, NULL, &e), -GS_ENOFIT);
    ASSERT_CONTAINS(e.msg, "evicting all 2 lower-priority pods");
    p.priority = 1000;
    ASSERT_EQ(core_preempt(c, n, &p, NULL, victims, 4, &nv, NULL, &e), 0);
    ASSERT_EQ(nv, 3);
    ASSERT_EQ(core_preempt(c, n, &p, NULL, victims, 2, &nv, NULL, &e), -GS_ENOFIT);
    /* fits already: no victims */
    p.req.num_gpu = 1;
    ASSERT_EQ(core_preempt(c, n, &p, NULL, victims, 4, &nv, NULL, &e), 0);
    ASSERT_EQ(nv, 0);
    core_cluster_free(c);
}

/* The guard's marks: the UIDs it protects; what it was shown, in order. */
struct guard_seen {
    const char *protect[4];
    const char *order[8];
    int n;
};

static void guard_mark(void *ud, const struct core_alloc *const *cand, int n, unsigned char *viol)
{
    struct guard_seen *g = ud;
    g->n = n;
    for (int i = 0; i < n; i++) {
        g->order[i] = cand[i]->pod_uid;
        for (int k = 0; k < 4 && g->protect[k]; k++)
            if (strcmp(cand[i]->pod_uid, g->protect[k]) == 0)
                viol[i] = 1;
    }
}

static void test_preempt_guard(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    tc_node(c, "n", 16000, 64, 4, "A100", 40960);
    const struct core_node *n = core_cluster_find(c, "n");
    const char *uids[] = {"a", "b", "c", "d"};
    const int prio[] = {1, 2, 3, 4};
    for (int i = 0; i < 4; i++) {
        struct core_pod p = tc_pod(uids[i], CORE_REQ_WHOLE, 1, 0, 0, 1000);
        p.priority = prio[i];
        ASSERT_EQ(tc_place(c, "n", &p, "binpack"), 0);
    }
    const char *victims[4];
    int nv = -1, nviol = -1;
    struct core_pod p = tc_pod("new", CORE_REQ_WHOLE, 2, 0, 0, 1000);
    p.priority = 50;
    /* the guard sees the candidates most important first */
    struct guard_seen g = {{"a", NULL}, {NULL}, 0};
    struct core_preempt_guard guard = {guard_mark, &g};
    ASSERT_EQ(core_preempt(c, n, &p, &guard, victims, 4, &nv, &nviol, &e), 0);
    ASSERT_EQ(g.n, 4);
    ASSERT_STREQ(g.order[0], "d");
    ASSERT_STREQ(g.order[3], "a");
    /* a is protected: b and c go, though a has the lowest priority */
    ASSERT_EQ(nv, 2);
    ASSERT_EQ(nviol, 0);
    ASSERT_STREQ(victims[0], "b");
    ASSERT_STREQ(victims[1], "c");
    /* all but d protected: d and the least important protected one, a */
    g = (struct guard_seen){{"a", "b", "c", NULL}, {NULL}, 0};
    ASSERT_EQ(core_preempt(c, n, &p, &guard, victims, 4, &nv, &nviol, &e), 0);
    ASSERT_EQ(nv, 2);
    ASSERT_EQ(nviol, 1);
    ASSERT_STREQ(victims[0], "d");
    ASSERT_STREQ(victims[1], "a");
    /* every pod protected: the two of lowest priority, both counted */
    g = (struct guard_seen){{"a", "b", "c", "d"}, {NULL}, 0};
    ASSERT_EQ(core_preempt(c, n, &p, &guard, victims, 4, &nv, &nviol, &e), 0);
    ASSERT_EQ(nv, 2);
    ASSERT_EQ(nviol, 2);
    ASSERT_STREQ(victims[0], "a");
    ASSERT_STREQ(victims[1], "b");
    ASSERT_EQ(n->gpus[0].free_milli + n->gpus[1].free_milli + n->gpus[2].free_milli +
                  n->gpus[3].free_milli, 0);
    check_invariants(c);
    core_cluster_free(c);
}

static int dummy_score(const struct core_cycle *cy, const struct core_node *n)
{
    (void)cy;
    return n->n_gpus;
}

static int capacity_score(const struct core_cycle *cy, const struct core_node *n)
{
    (void)n;
    int g = core_cluster_model_gpus(cy->cluster, 0);
    return g > 100 ? 100 : g;
}

/* The NODE_STATE score cache must not serve a score computed before the
 * cluster's capacity changed. */
static void test_score_cache(void)
{
    static const struct core_policy cap = {"capacity-test", "test", CORE_POLICY_NODE_STATE,
                                           capacity_score, NULL, NULL};
    struct core_cluster *c = core_cluster_new();
    tc_node(c, "a", 8000, 16, 2, "T4", 16384);
    struct core_node *nodes[1] = {core_cluster_find(c, "a")};
    struct core_pod p = tc_pod("p", CORE_REQ_WHOLE, 1, 0, 0, 100);
    int s = -1;
    ASSERT_EQ(core_score(c, &cap, &p, nodes, 1, &s, NULL), 0);
    ASSERT_EQ(s, 2);
    tc_node(c, "b", 8000, 16, 4, "T4", 16384);
    nodes[0] = core_cluster_find(c, "a");
    ASSERT_EQ(core_score(c, &cap, &p, nodes, 1, &s, NULL), 0);
    ASSERT_EQ(s, 6);
    ASSERT_EQ(core_cluster_remove_node(c, "b", NULL), 0);
    nodes[0] = core_cluster_find(c, "a");
    ASSERT_EQ(core_score(c, &cap, &p, nodes, 1, &s, NULL), 0);
    ASSERT_EQ(s, 2);
    core_cluster_free(c);
}

static void test_registry(void)
{
    const char *names[] = {"random", "dotprod", "clustering", "packing", "bestfit",
                           "fgd", "binpack", "spread", "topology"};
    struct gs_err e = GS_ERR_INIT;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ASSERT_TRUE(core_policy_find(names[i]) != NULL);
        ASSERT_STREQ(core_policy_at((int)i)->name, names[i]);
    }
    ASSERT_TRUE(core_policy_find("nope") == NULL);
    int n = core_policy_count();
    static const struct core_policy mine = {"most-gpus", "test", 0, dummy_score, NULL, NULL};
    ASSERT_EQ(core_policy_register(&mine, &e), 0);
    ASSERT_EQ(core_policy_count(), n + 1);
    ASSERT_TRUE(core_policy_find("most-gpus") == &mine);
    ASSERT_EQ(core_policy_register(&mine, &e), -GS_ECONFLICT);
    static const struct core_policy noscore = {"x", "test", 0, NULL, NULL, NULL};
    ASSERT_EQ(core_policy_register(&noscore, &e), -GS_EINVAL);

    /* a registered policy schedules like a built-in one */
    struct core_cluster *c = core_cluster_new();
    tc_node(c, "small", 8000, 16, 2, "T4", 16384);
    tc_node(c, "large", 8000, 16, 8, "T4", 16384);
    struct core_pod p = tc_pod("p", CORE_REQ_WHOLE, 1, 0, 0, 100);
    struct core_decision d;
    ASSERT_EQ(core_schedule_one(c, &mine, &p, &d, &e), 0);
    ASSERT_STREQ(d.node->name, "large");
    core_cluster_free(c);
}

static void test_tiebreak(void)
{
    /* identical nodes: the seeded order decides, and each seed is stable */
    int seen_a = 0, seen_b = 0;
    for (uint64_t seed = 0; seed < 32; seed++) {
        struct core_cluster *c = core_cluster_new();
        tc_node(c, "a", 8000, 16, 2, "T4", 16384);
        tc_node(c, "b", 8000, 16, 2, "T4", 16384);
        core_cluster_set_seed(c, seed);
        struct core_pod p = tc_pod("p", CORE_REQ_WHOLE, 1, 0, 0, 100);
        struct core_decision d1, d2;
        ASSERT_EQ(core_schedule_one(c, core_policy_find("bestfit"), &p, &d1, NULL), 0);
        ASSERT_EQ(core_schedule_one(c, core_policy_find("bestfit"), &p, &d2, NULL), 0);
        ASSERT_TRUE(d1.node == d2.node);
        ASSERT_EQ(d1.n_feasible, 2);
        seen_a += strcmp(d1.node->name, "a") == 0;
        seen_b += strcmp(d1.node->name, "b") == 0;
        core_cluster_free(c);
    }
    ASSERT_TRUE(seen_a > 4 && seen_b > 4);
}

static void test_frag(void)
{
    struct core_cluster *c = core_cluster_new();
    struct gs_err e = GS_ERR_INIT;
    tc_node(c, "n", 8000, 16, 2, "T4", 0);
    struct core_pod p = tc_pod("p", CORE_REQ_SHARED, 1, 500, 0, 100);
    ASSERT_EQ(tc_place(c, "n", &p, "bestfit"), 0); /* GPU 0: 500 free, GPU 1: 1000 */
    const struct core_node *n = core_cluster_find(c, "n");
    struct core_class k[3];
    memset(k, 0, sizeof k);
    k[0].num_gpu = 1;
    k[0].milli = 600;
    k[0].weight = 1;
    ASSERT_EQ(core_cluster_set_workload(c, k, 1, 0.95, &e), 0);
    ASSERT_NEAR(core_node_frag(c, n), 500, 1e-9); /* GPU 0 too small for 600 */
    k[0].milli = 400;
    ASSERT_EQ(core_cluster_set_workload(c, k, 1, 0.95, &e), 0);
    ASSERT_NEAR(core_node_frag(c, n), 0, 1e-9);
    /* CPU-only: every free share is fragment; 2 GPUs needing 1000: GPU 0 is */
    k[0].num_gpu = 0;
    k[0].milli = 0;
    k[0].weight = 3;
    k[1].num_gpu = 1;
    k[1].milli = 1000;
    k[1].weight = 1;
    ASSERT_EQ(core_cluster_set_workload(c, k, 2, 1.0, &e), 0);
    ASSERT_NEAR(core_node_frag(c, n), 0.75 * 1500 + 0.25 * 500, 1e-9);
    /* wrong model: all of it */
    k[1].weight = 3;
    k[0].weight = 0;
    snprintf(k[1].gpu_spec, sizeof k[1].gpu_spec, "A100|V100");
    ASSERT_EQ(core_cluster_set_workload(c, k, 2, 1.0, &e), 0);
    ASSERT_NEAR(core_node_frag(c, n), 1500, 1e-9);
    /* the coverage cut keeps the top classes only */
    k[0] = (struct core_class){0, 1, 100, "", 90};
    k[1] = (struct core_class){0, 1, 600, "", 9};
    k[2] = (struct core_class){0, 0, 0, "", 1};
    ASSERT_EQ(core_cluster_set_workload(c, k, 3, 0.95, &e), 0);
    ASSERT_NEAR(core_node_frag(c, n), 9.0 / 99 * 500, 1e-9);
    ASSERT_EQ(core_cluster_workload_size(c), 2);
    struct core_stats st;
    core_cluster_stats(c, &st);
    ASSERT_EQ(st.gpus, 2);
    ASSERT_EQ(st.milli_total, 2000);
    ASSERT_EQ(st.milli_alloc, 500);
    ASSERT_NEAR(st.frag_milli, 9.0 / 99 * 500, 1e-9);
    /* the running sum follows reserve / unreserve */
    ASSERT_EQ(core_unreserve(c, "p", &e), 0);
    ASSERT_NEAR(core_cluster_frag(c), 0, 1e-9);
    ASSERT_EQ(core_cluster_set_workload(c, k, 3, 1.5, &e), -GS_EINVAL);
    core_cluster_free(c);

    /* without a workload, the core learns it from reserved pods */
    c = core_cluster_new();
    tc_node(c, "m", 8000, 16, 1, "T4", 0);
    struct core_pod q = tc_pod("q", CORE_REQ_SHARED, 1, 700, 0, 100);
    ASSERT_EQ(tc_place(c, "m", &q, "fgd"), 0); /* 300 free < 700: all fragment */
    ASSERT_NEAR(core_cluster_frag(c), 300, 1e-9);
    core_cluster_free(c);
}

int test_core(void)
{
    test_model();
    test_filter_reasons();
    test_taints_labels();
    test_soft_preferences();
    test_pod_terms_first();
    test_placed_pods_terms_first();
    test_reserve();
    test_others();
    test_mig();
    test_node_gpus_change();
    test_mig_mode_under_a_whole_pod();
    test_churn();
    test_topology();
    test_link_tiebreak();
    test_shared_links();
    test_ranked_pick_is_exhaustive();
    test_preempt();
    test_preempt_guard();
    test_registry();
    test_score_cache();
    test_tiebreak();
    test_frag();
    return 0;
}
