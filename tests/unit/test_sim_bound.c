/* Unit tests for the LP lower bound: exact (tight) on small hand-solved
 * instances, and never above what the core actually placed on synthetic
 * traces over several seeds and policies; the same for the bound of
 * work-conserving schedulers and its forcing test (a forced pod never
 * fails in a real run). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "sim/sim_bound.h"
#include "sim/sim_forced.h"
#include "sim/sim_gen.h"
#include "sim/sim_order.h"
#include "sim/sim_run.h"
#include "sim/sim_trace.h"
#include "test.h"

static double bound_of(const char *nodes, const char *pods, struct sim_bound_stats *st)
{
    struct sim_trace t = {0};
    struct gs_err e = GS_ERR_INIT;
    double milli = -1;
    if (sim_trace_parse_nodes(&t, nodes, strlen(nodes), "n.csv", &e) < 0 ||
        sim_trace_parse_pods(&t, pods, strlen(pods), "p.csv", &e) < 0) {
        fprintf(stderr, "bound_of: %s\n", e.msg);
        sim_trace_clear(&t);
        return -1;
    }
    int *idx = malloc((size_t)t.n_pods * sizeof *idx);
    for (int i = 0; i < t.n_pods; i++)
        idx[i] = i;
    if (sim_bound_milli(&t, idx, t.n_pods, &milli, st, &e) < 0)
        fprintf(stderr, "bound_of: %s\n", e.msg);
    free(idx);
    sim_trace_clear(&t);
    return milli;
}

#define HDR "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"

static void test_tight(void)
{
    struct sim_bound_stats st;
    const char *one = "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,1,T4\n";
    const char *two = "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,2,T4\n";
    /* two 600 shares cannot share one GPU: 600, not the 1000 of capacity */
    ASSERT_NEAR(bound_of(one, HDR "a,1000,1,1,600,\nb,1000,1,1,600,\n", &st), 600, 1e-6);
    ASSERT_EQ(st.configs, 1);
    /* 810 x3 and 190 on two GPUs: 810+190 and 810 = 1810 (capacity alone: 2000) */
    ASSERT_NEAR(bound_of(two, HDR "a,1000,1,1,810,\nb,1000,1,1,810,\nc,1000,1,1,810,\n"
                              "d,1000,1,1,190,\n", &st), 1810, 1e-6);
    ASSERT_EQ(st.sizes, 2);
    ASSERT_EQ(st.configs, 2); /* {810,190}, {190 x5} */
    /* plus a whole GPU: whole + 810 + 190 = 2000 beats two 810 GPUs */
    ASSERT_NEAR(bound_of(two, HDR "a,1000,1,1,810,\nb,1000,1,1,810,\nc,1000,1,1,810,\n"
                              "d,1000,1,1,190,\nw,1000,1,1,1000,\n", &st), 2000, 1e-6);
    /* CPU binds: 6000m each on 16000m holds two pods (whole + 810 = 1810);
     * the LP, a relaxation, takes 2/3 of the 190 pod as well */
    ASSERT_NEAR(bound_of(two, HDR "a,6000,1,1,810,\nb,6000,1,1,810,\nd,6000,1,1,190,\n"
                              "w,6000,1,1,1000,\n", &st), 1000 + 810 + 190.0 * 2 / 3, 1e-6);
    /* models: a V100-only pod has no node; the any-model one fits */
    const char *mixed = "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,1,T4\n"
                        "n2,16000,65536,2,V100\n";
    ASSERT_NEAR(bound_of(one, HDR "a,1000,1,1,1000,T4\nb,1000,1,1,1000,T4\n", &st), 1000, 1e-6);
    ASSERT_NEAR(bound_of(mixed, HDR "a,1000,1,2,1000,V100\nb,1000,1,2,1000,V100\n"
                                "c,1000,1,1,1000,T4\nd,1000,1,1,500,V100\n", &st), 3000, 1e-6);
    ASSERT_EQ(st.node_types, 2);
    /* CPU-only pods add nothing */
    ASSERT_NEAR(bound_of(one, HDR "a,1000,1,0,0,\n", &st), 0, 0);
}

static int parse(struct sim_trace *t, const char *nodes, const char *pods)
{
    struct gs_err e = GS_ERR_INIT;
    if (sim_trace_parse_nodes(t, nodes, strlen(nodes), "n.csv", &e) < 0 ||
        sim_trace_parse_pods(t, pods, strlen(pods), "p.csv", &e) < 0) {
        fprintf(stderr, "parse: %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* Each sample of the bin is bounded by its own prefix, not by the last. */
static void test_prefixes(void)
{
    struct sim_trace t = {0};
    struct gs_err e = GS_ERR_INIT;
    struct sim_bound_stats st;
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,1,T4\n",
                    HDR "a,1000,1,1,600,\nz,1000,1,0,0,\nb,1000,1,1,400,\nc,1000,1,1,1000,\n"),
              0);
    int idx[] = {0, 1, 2, 3};
    double pct;
    /* prefixes: {a} 600 -> 40 %, {a,z} 40 %, {a,z,b} 1000 -> 0, all 0 */
    ASSERT_EQ(sim_bound_prefixes(&t, idx, 0, 3, &pct, &st, &e), 0);
    ASSERT_NEAR(pct, 20.0, 1e-6);
    ASSERT_NEAR(st.last_pct, 0.0, 1e-6);
    ASSERT_EQ(st.samples, 4);
    ASSERT_EQ(st.solves, 3); /* the CPU-only pod needs no LP of its own */
    ASSERT_EQ(sim_bound_prefixes(&t, idx, 0, 1, &pct, &st, &e), 0);
    ASSERT_NEAR(pct, 40.0, 1e-6);
    ASSERT_EQ(sim_bound_prefixes(&t, idx, 2, 2, &pct, &st, &e), 0);
    ASSERT_NEAR(pct, 0.0, 1e-6);
    ASSERT_TRUE(sim_bound_prefixes(&t, idx, 2, 1, &pct, &st, &e) < 0);
    sim_trace_clear(&t);

    /* the warm re-solves give what a fresh LP of each prefix gives */
    ASSERT_EQ(sim_gen(&t, 12, 200, 7, &e), 0);
    int *all = malloc((size_t)t.n_pods * sizeof *all);
    for (int i = 0; i < t.n_pods; i++)
        all[i] = i;
    int first = t.n_pods / 3, last = first + 40 < t.n_pods ? first + 40 : t.n_pods - 1;
    ASSERT_EQ(sim_bound_prefixes(&t, all, first, last, &pct, &st, &e), 0);
    double sum = 0, cap = (double)t.total_gpus * 1000;
    for (int i = first; i <= last; i++) {
        double milli;
        struct sim_bound_stats one;
        ASSERT_EQ(sim_bound_milli(&t, all, i + 1, &milli, &one, &e), 0);
        ASSERT_TRUE(milli >= one.lp_obj - 1e-6 && milli <= one.lp_obj + 1e-6 * (1 + milli));
        double b = 100 - 100 * milli / cap;
        sum += b > 0 ? b : 0;
    }
    ASSERT_NEAR(pct, sum / (last - first + 1), 1e-6);
    ASSERT_TRUE(pct > st.last_pct + 1e-3); /* the prefixes differ here */
    free(all);
    sim_trace_clear(&t);
}

/* The offline placement: the LP's pods through the core. */
static void test_offline(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct sim_trace t = {0};
    struct sim_config cfg;
    struct sim_bound_offline o;
    /* 700, 700, 600 on two GPUs (exactly 100 % arrived): no two share a
     * GPU, so the LP keeps the 700s (1400 of 2000: 30 % unallocated) and
     * drops the 600; online, a 600 that comes second makes a 700 fail */
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,2,T4\n",
                    HDR "a,1000,1,1,700,\nb,1000,1,1,700,\nc,1000,1,1,600,\n"), 0);
    ASSERT_EQ(sim_config_init(&cfg, &t, 1.0, &e), 0);
    int worse = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        ASSERT_EQ(sim_bound_offline(&cfg, core_policy_find("bestfit"), seed, &o, &e), 0);
        ASSERT_NEAR(o.lp_pct, 30, 1e-6);
        ASSERT_NEAR(o.placed_pct, 30, 1e-6);
        ASSERT_NEAR(o.placed_bin_pct, 30, 1e-6); /* the bin is the last sample alone */
        ASSERT_EQ(o.checkpoints, 1);
        ASSERT_EQ(o.dropped, 1);
        ASSERT_EQ(o.failed, 0);
        double b;
        ASSERT_EQ(sim_bound_run(&cfg, seed, &b, NULL, &e), 0);
        ASSERT_NEAR(b, 30, 1e-6);
        struct sim_run_result *r = calloc(1, sizeof *r);
        ASSERT_EQ(sim_run(&cfg, core_policy_find("bestfit"), seed, r, &e), 0);
        ASSERT_TRUE(r->unalloc[100] >= 30 - 1e-9);
        worse += r->unalloc[100] > 30 + 1e-6; /* 35 %: the online run lost a 700 */
        free(r);
    }
    ASSERT_TRUE(worse > 0);
    sim_config_clear(&cfg);
    sim_trace_clear(&t);
    /* synthetic clusters: a real placement never beats the bound */
    for (uint64_t g = 1; g <= 3; g++) {
        ASSERT_EQ(sim_gen(&t, 30 + 10 * (int)g, 300, g, &e), 0);
        ASSERT_EQ(sim_config_init(&cfg, &t, 1.3, &e), 0);
        for (uint64_t seed = 42; seed < 44; seed++) {
            ASSERT_EQ(sim_bound_offline(&cfg, core_policy_find("cpufrag"), seed, &o, &e), 0);
            ASSERT_TRUE(o.lp_pct >= 0 && o.placed_pct >= o.lp_pct - 1e-9);
            ASSERT_TRUE(o.placed_pct < o.lp_pct + 20);
            double b;
            ASSERT_EQ(sim_bound_run(&cfg, seed, &b, NULL, &e), 0);
            ASSERT_TRUE(o.placed_bin_pct >= b - 1e-9);
            ASSERT_TRUE(o.placed_bin_pct >= o.placed_pct - 1e-9); /* earlier samples hold less */
        }
        sim_config_clear(&cfg);
        sim_trace_clear(&t);
    }
}

/* The bound never exceeds what a policy placed: unallocated % at 100 % of
 * every run is at least the seed's bound. */
static void test_valid(void)
{
    struct gs_err e = GS_ERR_INIT;
    const char *pols[] = {"bestfit", "fgd", "cpufrag", "packing", "random"};
    int positive = 0, tighter = 0;
    for (uint64_t g = 1; g <= 3; g++) {
        struct sim_trace t = {0};
        ASSERT_EQ(sim_gen(&t, 30 + 10 * (int)g, 300, g, &e), 0);
        struct sim_config cfg;
        ASSERT_EQ(sim_config_init(&cfg, &t, 1.3, &e), 0);
        struct sim_run_result *r = calloc(1, sizeof *r);
        for (uint64_t seed = 42; seed < 46; seed++) {
            double b;
            struct sim_bound_stats st;
            ASSERT_EQ(sim_bound_run(&cfg, seed, &b, &st, &e), 0);
            ASSERT_TRUE(b >= 0 && b < 100);
            ASSERT_TRUE(st.configs > 0);
            positive += b > 0.01;
            /* the per-sample bound is never looser than the last sample's */
            ASSERT_TRUE(b >= st.last_pct - 1e-9);
            tighter += b > st.last_pct + 1e-6;
            /* the certified optimum is GLPK's, up to its tolerance */
            ASSERT_TRUE(st.lp_milli >= st.lp_obj - 1e-6);
            ASSERT_TRUE(st.lp_milli <= st.lp_obj * (1 + 1e-9) + 1e-3);
            for (int p = 0; p < 5; p++) {
                ASSERT_EQ(sim_run(&cfg, core_policy_find(pols[p]), seed, r, &e), 0);
                ASSERT_TRUE(!isnan(r->unalloc[100]));
                if (!(r->unalloc[100] >= b - 1e-9))
                    fprintf(stderr, "trace %d seed %d %s: %.4f < bound %.4f\n", (int)g,
                            (int)seed, pols[p], r->unalloc[100], b);
                ASSERT_TRUE(r->unalloc[100] >= b - 1e-9);
            }
        }
        free(r);
        sim_config_clear(&cfg);
        sim_trace_clear(&t);
    }
    ASSERT_TRUE(positive > 0); /* the check above is not vacuous */
    ASSERT_TRUE(tighter > 0);
}

/* Forcing on hand-made lists: which pods must be forced, which must not,
 * and the exact bound for work-conserving schedulers. */
static void test_forced(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct sim_forced_stats fs;
    struct sim_bound_stats st;
    unsigned char f[8];
    int idx[] = {0, 1, 2, 3, 4};
    double b, w;
    struct sim_trace t = {0};
    /* two GPUs; 810, 810, then a whole GPU. The first 810 has no history;
     * before the second, one pod holds at most one GPU: forced. Before the
     * whole pod, the two 810s can hold both GPUs (a placement every
     * work-conserving policy makes): not forced. Offline, an 810 is left
     * out for the whole pod (1810 milli, 9.5 %); a work-conserving policy
     * places both 810s and the whole pod fails (1620 milli, 19 %). */
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,2,T4\n",
                    HDR "a,1000,1,1,810,\nb,1000,1,1,810,\nc,1000,1,1,1000,\n"), 0);
    ASSERT_EQ(sim_forced_mark(&t, idx, 3, f, &fs, &e), 0);
    ASSERT_TRUE(f[0] && f[1] && !f[2]);
    ASSERT_EQ(fs.forced, 2);
    ASSERT_EQ(fs.gpu_pods, 3);
    ASSERT_EQ(fs.first_unforced, 2);
    ASSERT_EQ(sim_bound_prefixes(&t, idx, 2, 2, &b, &st, &e), 0);
    ASSERT_NEAR(b, 9.5, 1e-6);
    ASSERT_EQ(sim_bound_prefixes_wc(&t, idx, 2, 2, f, &w, &st, &e), 0);
    ASSERT_NEAR(w, 19.0, 1e-6);
    ASSERT_TRUE(st.lp_milli >= st.lp_obj - 1e-6 && st.lp_milli <= st.lp_obj + 1e-3);
    /* with the 810s' lower bounds, each earlier sample is exact too: after
     * b, both 810s (1620, 19 %); the mean over samples 1..2 is 19 % */
    ASSERT_EQ(sim_bound_prefixes_wc(&t, idx, 1, 2, f, &w, &st, &e), 0);
    ASSERT_NEAR(w, 19.0, 1e-6);
    ASSERT_TRUE(st.solves >= 2);
    /* a forcing claim no placement can meet is an error, never a bound */
    unsigned char wrong[] = {1, 1, 1};
    ASSERT_TRUE(sim_bound_prefixes_wc(&t, idx, 2, 2, wrong, &w, &st, &e) < 0);
    ASSERT_CONTAINS(e.msg, "infeasible");
    sim_trace_clear(&t);

    /* CPU kills: a CPU-only pod of 3500m leaves 500m of the node's 4000m,
     * so the 1000m GPU pod after it is not forced (it fails there) */
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,4000,65536,1,T4\n",
                    HDR "x,3500,1,0,0,\ny,1000,1,1,500,\n"), 0);
    ASSERT_EQ(sim_forced_mark(&t, idx, 2, f, &fs, &e), 0);
    ASSERT_TRUE(!f[0] && !f[1]); /* CPU-only pods are never marked */
    ASSERT_EQ(fs.gpu_pods, 1);
    ASSERT_EQ(fs.first_unforced, 1);
    sim_trace_clear(&t);

    /* three one-GPU nodes of 16000m: a 100-milli pod can take one GPU, a
     * 15500m CPU-only pod the CPU of one node (15001m is enough against a
     * 1000m pod); two nodes are killed at most, so the whole pod is forced,
     * which needs a lambda that weighs GPU and CPU together. On two nodes
     * it is not forced (each pod can kill one). */
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,1,T4\n"
                        "n2,16000,65536,1,T4\nn3,16000,65536,1,T4\n",
                    HDR "q,1000,1,1,100,\nz,15500,1,0,0,\np,1000,1,1,1000,\n"), 0);
    ASSERT_EQ(sim_forced_mark(&t, idx, 3, f, &fs, &e), 0);
    ASSERT_TRUE(f[0] && !f[1] && f[2]);
    ASSERT_EQ(fs.first_unforced, -1);
    sim_trace_clear(&t);
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,1,T4\n"
                        "n2,16000,65536,1,T4\n",
                    HDR "q,1000,1,1,100,\nz,15500,1,0,0,\np,1000,1,1,1000,\n"), 0);
    ASSERT_EQ(sim_forced_mark(&t, idx, 3, f, &fs, &e), 0);
    ASSERT_TRUE(f[0] && !f[2]);
    sim_trace_clear(&t);

    /* a sharing pod: a GPU stops fitting a 600 only once 401 milli are on
     * it; 300 + 300 can do that to one GPU of two, not to both, so the 600
     * after them is forced; with that 600 on the other GPU they can, so a
     * second 600 is not; a pod that fits no node (V100) is never forced */
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,2,T4\n",
                    HDR "a,1000,1,1,300,\nb,1000,1,1,300,\nc,1000,1,1,600,\n"), 0);
    int idx2[] = {0, 1, 2, 2};
    ASSERT_EQ(sim_forced_mark(&t, idx2, 4, f, &fs, &e), 0);
    ASSERT_TRUE(f[0] && f[1] && f[2] && !f[3]);
    ASSERT_EQ(fs.first_unforced, 3);
    sim_trace_clear(&t);
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,2,T4\n"
                        "n2,16000,65536,1,V100\n",
                    HDR "a,1000,1,2,1000,V100\n"), 0);
    ASSERT_EQ(sim_forced_mark(&t, idx, 1, f, &fs, &e), 0);
    ASSERT_TRUE(!f[0]);
    ASSERT_EQ(fs.never_fit, 1);
    ASSERT_EQ(fs.first_unforced, -1);
    sim_trace_clear(&t);
}

/* Replays pods[0..n) of t in list order with pol: placed[i]. */
static void replay(const struct sim_trace *t, const char *pol, const int *idx, int n,
                   unsigned char *placed)
{
    struct gs_err e = GS_ERR_INIT;
    struct sim_config cfg;
    ASSERT_EQ(sim_config_init(&cfg, t, 1.3, &e), 0);
    ASSERT_EQ(sim_replay_placed(&cfg, core_policy_find(pol), 42, idx, n, placed, &e), 0);
    sim_config_clear(&cfg);
}

/* The order of arrival without the forcing test: exact where the answer
 * is known, and it respects CPU and GPU models (a pod that a failed
 * trigger does not shut out is no target). */
static void test_order(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct sim_bound_stats st;
    struct sim_trace t = {0};
    int idx[] = {0, 1, 2, 3, 4, 5};
    unsigned char placed[8];
    double b, w;
    int sets;
    /* two GPUs; 810, 810, then a whole GPU: the 810s are triggers and the
     * whole pod a target. Either both 810s were placed (no room for the
     * whole pod: 19 %), or the first failure of an 810 shut the whole pod
     * out; the LP's 9.5 % (an 810 left out for the whole pod) is no run */
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,2,T4\n",
                    HDR "a,1000,1,1,810,\nb,1000,1,1,810,\nc,1000,1,1,1000,\n"), 0);
    ASSERT_EQ(sim_bound_prefixes(&t, idx, 2, 2, &b, &st, &e), 0);
    ASSERT_NEAR(b, 9.5, 1e-6);
    ASSERT_EQ(sim_order_bound(&t, idx, 2, 2, NULL, &w, &st, &e), 0);
    ASSERT_NEAR(w, 19.0, 1e-6);
    replay(&t, "bestfit", idx, 3, placed);
    ASSERT_TRUE(placed[0] && placed[1] && !placed[2]);
    ASSERT_EQ(sim_order_check(&t, idx, 3, placed, &sets, &e), 0);
    ASSERT_EQ(sets, 0); /* no trigger failed before a target */
    sim_trace_clear(&t);

    /* CPU: a CPU-only pod leaves 400m of 4000m, so the second 810 (500m)
     * fails; the whole pod after it asks 300m and still fits. It is no
     * target of the 810's set (less CPU), so the bound stays at the real
     * run's 9.5 % (810 + whole); were CPU ignored it would claim 19 % */
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,4000,65536,2,T4\n",
                    HDR "a,100,1,1,810,\nz,3500,1,0,0,\nc,500,1,1,810,\nd,300,1,1,1000,\n"), 0);
    replay(&t, "bestfit", idx, 4, placed);
    ASSERT_TRUE(placed[0] && placed[1] && !placed[2] && placed[3]);
    ASSERT_EQ(sim_order_check(&t, idx, 4, placed, &sets, &e), 0);
    ASSERT_EQ(sim_order_bound(&t, idx, 3, 3, NULL, &w, &st, &e), 0);
    ASSERT_NEAR(w, 9.5, 1e-6);
    /* a run that breaks the lemma is reported, naming both pods: a (the
     * 810 of 100m) fails, and c, an 810 of more CPU, is placed after it */
    unsigned char bad[] = {0, 1, 1, 1};
    ASSERT_TRUE(sim_order_check(&t, idx, 4, bad, &sets, &e) < 0);
    ASSERT_CONTAINS(e.msg, "placed after the trigger");
    ASSERT_CONTAINS(e.msg, "(c)");
    sim_trace_clear(&t);

    /* models: the 810 may use T4 only; once it fails, a V100 whole pod
     * still fits the V100 node, so it is no target */
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,1,T4\n"
                        "n2,16000,65536,1,V100\n",
                    HDR "a,1000,1,1,810,T4\nb,1000,1,1,810,T4\nc,1000,1,1,1000,V100\n"), 0);
    replay(&t, "bestfit", idx, 3, placed);
    ASSERT_TRUE(placed[0] && !placed[1] && placed[2]);
    ASSERT_EQ(sim_order_bound(&t, idx, 2, 2, NULL, &w, &st, &e), 0);
    ASSERT_NEAR(w, 9.5, 1e-6);
    sim_trace_clear(&t);

    /* the sets: 8 classes of three 50-milli pods (held to V100, placed in
     * any run) outnumber the T4 810s, so sets of the commonest classes
     * alone would miss the 810s; the LP leaves an 810 out, which puts its
     * class among the sets: every run leaves 800 + 2 x 190 of 4,000 */
    char pods[2048] = HDR;
    int all[27];
    for (int k = 0; k < 8; k++)
        for (int j = 0; j < 3; j++)
            snprintf(pods + strlen(pods), sizeof pods - strlen(pods),
                     "d%d%d,%d,1,1,50,V100\n", k, j, 1000 + k);
    strcat(pods, "a,1000,1,1,810,T4\nb,1000,1,1,810,T4\nc,1000,1,1,1000,T4\n");
    ASSERT_EQ(parse(&t, "sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,2,T4\n"
                        "n2,64000,65536,2,V100\n", pods), 0);
    for (int i = 0; i < 27; i++)
        all[i] = i;
    ASSERT_EQ(sim_bound_prefixes(&t, all, 26, 26, &b, &st, &e), 0);
    ASSERT_NEAR(b, 24.75, 1e-6);
    ASSERT_EQ(sim_order_bound(&t, all, 26, 26, NULL, &w, &st, &e), 0);
    ASSERT_NEAR(w, 29.5, 1e-6);
    ASSERT_EQ(st.order_sets, 8);
    sim_trace_clear(&t);
}

/* The safety net: every policy of the simulator is work-conserving, so no
 * forced pod ever fails in a real run, and no run leaves fewer GPUs
 * unallocated than the bound for work-conserving schedulers; that bound is
 * never below the offline one and above it somewhere. */
static void test_wc_valid(void)
{
    struct gs_err e = GS_ERR_INIT;
    const char *pols[] = {"bestfit", "fgd", "cpufrag", "packing", "random"};
    /* generated clusters (nodes, generator seed) where the forced pods
     * raise the bound on some seeds */
    const int gens[][2] = {{30, 1}, {40, 1}, {30, 3}};
    int tighter = 0, forced_some = 0, failed_some = 0, order_tighter = 0, order_checked = 0;
    for (int g = 0; g < 3; g++) {
        struct sim_trace t = {0};
        ASSERT_EQ(sim_gen(&t, gens[g][0], 10 * gens[g][0], (uint64_t)gens[g][1], &e), 0);
        struct sim_config cfg;
        ASSERT_EQ(sim_config_init(&cfg, &t, 1.3, &e), 0);
        struct sim_run_result *r = calloc(1, sizeof *r);
        for (uint64_t seed = 42; seed < 46; seed++) {
            double b, w;
            struct sim_bound_stats st;
            ASSERT_EQ(sim_bound_run(&cfg, seed, &b, NULL, &e), 0);
            ASSERT_EQ(sim_bound_run_wc(&cfg, seed, &w, &st, &e), 0);
            ASSERT_TRUE(w >= b - 1e-9);
            tighter += w > b + 1e-6;
            /* the order alone, without the forcing test */
            double o;
            int *ord, olen, of, ol;
            ASSERT_EQ(sim_order(&cfg, seed, &ord, &olen, &e), 0);
            sim_bound_bin(&t, ord, olen, &of, &ol);
            ASSERT_EQ(sim_order_bound(&t, ord, of, ol, NULL, &o, NULL, &e), 0);
            ASSERT_TRUE(o >= b - 1e-9); /* not always <= w: each explores its own cases */
            order_tighter += o > b + 1e-6;
            free(ord);
            double w2;
            ASSERT_EQ(sim_bound_run_wc(&cfg, seed, &w2, NULL, &e), 0); /* stats optional */
            ASSERT_NEAR(w2, w, 1e-9);
            ASSERT_TRUE(st.forced > 0 && st.forced <= st.gpu_pods);
            int *order, len;
            ASSERT_EQ(sim_order(&cfg, seed, &order, &len, &e), 0);
            unsigned char *forced = malloc((size_t)len), *placed = malloc((size_t)len);
            struct sim_forced_stats fs;
            ASSERT_EQ(sim_forced_mark(&t, order, len, forced, &fs, &e), 0);
            forced_some += fs.forced;
            for (int p = 0; p < 5; p++) {
                const struct core_policy *pol = core_policy_find(pols[p]);
                ASSERT_EQ(sim_run(&cfg, pol, seed, r, &e), 0);
                if (!(r->unalloc[100] >= w - 1e-9))
                    fprintf(stderr, "trace %d seed %d %s: %.4f < wc bound %.4f\n", g,
                            (int)seed, pols[p], r->unalloc[100], w);
                ASSERT_TRUE(r->unalloc[100] >= w - 1e-9);
                ASSERT_EQ(sim_replay_placed(&cfg, pol, seed, order, len, placed, &e), 0);
                int sets;
                if (sim_order_check(&t, order, len, placed, &sets, &e) < 0)
                    fprintf(stderr, "trace %d seed %d %s: %s\n", g, (int)seed, pols[p], e.msg);
                ASSERT_EQ(sim_order_check(&t, order, len, placed, &sets, &e), 0);
                order_checked += sets;
                for (int i = 0; i < len; i++) {
                    if (!placed[i] && forced[i])
                        fprintf(stderr, "trace %d seed %d %s: forced pod %d failed\n", g,
                                (int)seed, pols[p], i);
                    ASSERT_TRUE(placed[i] || !forced[i]);
                    failed_some += !placed[i];
                }
            }
            free(forced);
            free(placed);
            free(order);
        }
        free(r);
        sim_config_clear(&cfg);
        sim_trace_clear(&t);
    }
    ASSERT_TRUE(tighter > 0);     /* the lower bounds change the LP somewhere */
    ASSERT_TRUE(forced_some > 0); /* and the pod-level check is not vacuous */
    ASSERT_TRUE(failed_some > 0);
    ASSERT_TRUE(order_tighter > 0); /* the order raises the bound on its own */
    ASSERT_TRUE(order_checked > 0); /* and the lemma was tested on real failures */
}

int test_sim_bound(void)
{
    test_forced();
    test_order();
    test_wc_valid();
    test_tight();
    test_prefixes();
    test_offline();
    test_valid();
    return 0;
}
