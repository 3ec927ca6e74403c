/* Unit tests for the time-driven replay: exact KPIs on hand-computed
 * traces, the duration rule, backoff, the load factor, the replay's own
 * checks against a broken clock, a lost departure, a pod placed twice and a
 * queue that never retries, and the skip of hopeless pods against trying
 * every pod. */
#include <math.h>
#include <stdlib.h>

#include "core/policy.h"
#include "sim/sim_gen.h"
#include "sim/sim_run.h"
#include "sim/sim_time.h"
#include "sim/sim_trace.h"
#include "test.h"

static const char one_gpu[] = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,131072,1,T4\n";

/* A: whole GPU 0..10; B: whole, arrives 2, runs 5 s; C: half a GPU, arrives
 * 4, runs 4 s; D: CPU only at 20. B waits for A (placed at 10), C waits for
 * B (at 10 B goes first by its older queue timestamp; C fits at 15). */
static const char hand_pods[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time,"
    "scheduled_time\n"
    "a,1000,1024,1,1000,,0,10,0\n"
    "b,1000,1024,1,1000,,2,7,2\n"
    "c,1000,1024,1,500,,4,8,4\n"
    "d,1000,1024,0,0,,20,21,\n";

static int load_trace(struct sim_trace *t, const char *nodes, const char *pods)
{
    struct gs_err e = GS_ERR_INIT;
    memset(t, 0, sizeof *t);
    if (sim_trace_parse_nodes(t, nodes, strlen(nodes), "nodes.csv", &e) < 0 ||
        sim_trace_parse_pods(t, pods, strlen(pods), "pods.csv", &e) < 0 ||
        sim_trace_check(t, "pods.csv", NULL, &e) < 0) {
        fprintf(stderr, "load_trace: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static int run1(const struct sim_trace *t, const char *policy, double load, enum sim_fault fault,
                struct sim_time_result *r, struct gs_err *e)
{
    struct sim_config cfg;
    if (sim_config_init(&cfg, t, 1.3, e) < 0)
        return -1;
    struct sim_time_opts o = {load, 1, fault, 0};
    int rc = sim_time_run(&cfg, &o, core_policy_find(policy), 42, r, e);
    sim_config_clear(&cfg);
    return rc;
}

static void test_hand(void)
{
    struct sim_trace t;
    struct gs_err e = GS_ERR_INIT;
    struct sim_time_result *r = calloc(1, sizeof *r);
    ASSERT_EQ(load_trace(&t, one_gpu, hand_pods), 0);
    ASSERT_TRUE(t.has_times);
    ASSERT_EQ(t.pods[3].t_sched, -1);
    const char *pols[] = {"bestfit", "fgd", "cpufrag"};
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(run1(&t, pols[i], 1, SIM_FAULT_NONE, r, &e), 0);
        ASSERT_NEAR(r->t0, 0, 0);
        ASSERT_NEAR(r->t1, 20, 0);
        /* allocated: 1000 over [0,15), 500 over [15,19), 0 over [19,20] */
        ASSERT_NEAR(r->alloc_pct, 100.0 * 17000 / (1000 * 20), 1e-9);
        /* waiting: 1000 over [2,4), 1500 over [4,10), 500 over [10,15) */
        ASSERT_NEAR(r->pending_pct, 100.0 * 13500 / (1000 * 20), 1e-9);
        ASSERT_NEAR(r->gpu_hours, 17.0 / 3600, 1e-12);
        ASSERT_EQ(r->n_delay[SIM_CLS_ALL], 3);
        ASSERT_NEAR(r->delay[SIM_CLS_ALL][0], 8, 1e-9);     /* delays 0, 8, 11 */
        ASSERT_NEAR(r->delay[SIM_CLS_ALL][1], 10.4, 1e-9);
        ASSERT_NEAR(r->delay[SIM_CLS_ALL][2], 10.94, 1e-9);
        ASSERT_NEAR(r->delay_mean[SIM_CLS_ALL], 19.0 / 3, 1e-9);
        ASSERT_NEAR(r->delay[SIM_CLS_WHOLE][0], 4, 1e-9);   /* 0, 8 */
        ASSERT_NEAR(r->delay[SIM_CLS_SHARE][2], 11, 1e-9);
        ASSERT_EQ(r->n_delay[SIM_CLS_MULTI], 0);
        ASSERT_TRUE(isnan(r->delay[SIM_CLS_MULTI][0]));
        ASSERT_EQ(r->waiting_at_end, 0);
        ASSERT_EQ(r->never_placed, 0);
        ASSERT_EQ(r->placements, 4);
        ASSERT_EQ(r->departures, 4);
        /* a@0, b@2, c@4, b@10, c@10 (after b took the GPU), c@15, d@20 */
        ASSERT_EQ(r->attempts, 7);
        ASSERT_NEAR(r->cdf[0], 0, 0);
        ASSERT_NEAR(r->cdf[100], 11, 1e-9);
        /* time series: at 5 s (sample 60 of 241 over 0..20) one GPU busy,
         * 1.5 GPU waiting; at 17 s half a GPU busy, none waiting */
        ASSERT_NEAR(r->alloc_ts[(int)(5.0 / 20 * (SIM_TIME_POINTS - 1))], 100, 1e-9);
        ASSERT_NEAR(r->pending_ts[(int)(5.0 / 20 * (SIM_TIME_POINTS - 1))], 150, 1e-9);
        ASSERT_NEAR(r->alloc_ts[(int)(17.0 / 20 * (SIM_TIME_POINTS - 1))], 50, 1e-9);
        ASSERT_NEAR(r->pending_ts[(int)(17.0 / 20 * (SIM_TIME_POINTS - 1))], 0, 1e-9);
    }

    /* load 2: arrivals at 0, 1, 2, 10; B placed at 10 (delay 9). C fails at
     * 2, 10 (backoff 2 s) and, moved by D's departure at 11, at 12 (backoff
     * 4 s): B leaves at 15 but C is backing off until 16 (delay 14) */
    ASSERT_EQ(run1(&t, "fgd", 2, SIM_FAULT_NONE, r, &e), 0);
    ASSERT_NEAR(r->t1, 10, 0);
    ASSERT_NEAR(r->delay[SIM_CLS_WHOLE][2], 9 * 0.99, 1e-9);
    ASSERT_NEAR(r->delay[SIM_CLS_SHARE][0], 14, 1e-9);
    ASSERT_EQ(r->waiting_at_end, 1); /* C still waits when D arrives at 10 */

    /* backoff: B runs 1 s (10..11); C failed at 10 for the 2nd time, so it
     * backs off 2 s and is placed at 12, not at 11 */
    t.pods[1].t_delete = 3;
    ASSERT_EQ(run1(&t, "bestfit", 1, SIM_FAULT_NONE, r, &e), 0);
    ASSERT_NEAR(r->delay[SIM_CLS_SHARE][0], 8, 1e-9);
    ASSERT_EQ(r->attempts, 7);

    /* the duration rule: no scheduled_time -> from creation_time; zero or
     * negative -> 1 s; no deletion_time -> to the trace's last timestamp */
    t.pods[1].t_delete = 7;
    t.pods[0].t_sched = -1;
    t.pods[0].t_delete = 0;  /* A runs 0..1 */
    ASSERT_EQ(run1(&t, "bestfit", 1, SIM_FAULT_NONE, r, &e), 0);
    /* A 0..1, B 2..7 holds the whole GPU, so C waits 4..7 */
    ASSERT_NEAR(r->delay_mean[SIM_CLS_ALL], 1, 1e-9);
    ASSERT_NEAR(r->delay[SIM_CLS_SHARE][0], 3, 1e-9);
    t.pods[0].t_delete = -1; /* A runs 0..21, the last timestamp (D's deletion) */
    ASSERT_EQ(run1(&t, "bestfit", 1, SIM_FAULT_NONE, r, &e), 0);
    ASSERT_NEAR(r->delay[SIM_CLS_WHOLE][1], 0.9 * 19, 1e-9); /* B waits 2..21 */
    ASSERT_NEAR(r->alloc_pct, 100, 1e-9);

    /* --scale 2: clones of random pods until twice the GPU request (2500
     * milli -> 5000); every check of the run still holds */
    struct sim_config cfg;
    ASSERT_EQ(sim_config_init(&cfg, &t, 1.3, &e), 0);
    struct sim_time_opts o2 = {1, 2, SIM_FAULT_NONE, 0};
    ASSERT_EQ(sim_time_run(&cfg, &o2, core_policy_find("fgd"), 42, r, &e), 0);
    ASSERT_TRUE(r->pods >= 6 && r->pods <= 4 + 5 * 2);
    ASSERT_EQ(r->placements, r->pods);
    o2.scale = 0.5;
    ASSERT_EQ(sim_time_run(&cfg, &o2, core_policy_find("fgd"), 42, r, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "--scale");
    sim_config_clear(&cfg);

    sim_trace_clear(&t);

    /* a trace without timestamps is refused with the reason */
    const char *no_times = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n";
    ASSERT_EQ(load_trace(&t, one_gpu, no_times), 0);
    ASSERT_EQ(run1(&t, "fgd", 1, SIM_FAULT_NONE, r, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "creation_time");
    sim_trace_clear(&t);
    const char *bad_time = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\n"
                           "p,1,1,1,1000,-3\n";
    ASSERT_EQ(sim_trace_parse_pods(&t, bad_time, strlen(bad_time), "pods.csv", &e), -GS_EINVAL);
    ASSERT_STREQ(e.msg,
                 "pods.csv:2: column 6 (creation_time): '-3' is out of range 0..1099511627776");
    sim_trace_clear(&t);
    free(r);
}

/* Each way of breaking the replay is caught by its checks. */
static void test_faults(void)
{
    struct sim_trace t;
    struct gs_err e = GS_ERR_INIT;
    struct sim_time_result *r = calloc(1, sizeof *r);
    ASSERT_EQ(load_trace(&t, one_gpu, hand_pods), 0);
    ASSERT_EQ(run1(&t, "fgd", 1, SIM_FAULT_CLOCK, r, &e), -GS_ECONFLICT);
    ASSERT_CONTAINS(e.msg, "clock went backwards");
    ASSERT_EQ(run1(&t, "fgd", 1, SIM_FAULT_LOSE_DEP, r, &e), -GS_ECONFLICT);
    ASSERT_CONTAINS(e.msg, "lost departure");
    ASSERT_EQ(run1(&t, "fgd", 1, SIM_FAULT_PLACE_TWICE, r, &e), -GS_ECONFLICT);
    ASSERT_CONTAINS(e.msg, "placed twice");
    ASSERT_EQ(run1(&t, "fgd", 1, SIM_FAULT_NO_RETRY, r, &e), -GS_ECONFLICT);
    ASSERT_CONTAINS(e.msg, "never retried");
    ASSERT_EQ(run1(&t, "fgd", 1, SIM_FAULT_NONE, r, &e), 0);
    sim_trace_clear(&t);
    free(r);
}

/* A synthetic trace with random times under heavy load: the replay's skip
 * of pods whose request already failed gives exactly what trying every
 * waiting pod gives. */
static void test_skip_is_exact(void)
{
    struct sim_trace t = {0};
    struct gs_err e = GS_ERR_INIT;
    ASSERT_EQ(sim_gen(&t, 24, 600, 7, &e), 0);
    uint64_t x = 12345;
    for (int i = 0; i < t.n_pods; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        t.pods[i].t_create = (int64_t)(x >> 40) % 5000;
        t.pods[i].t_sched = t.pods[i].t_create;
        t.pods[i].t_delete = t.pods[i].t_create + 1 + (int64_t)(x >> 20) % 3000;
    }
    t.has_times = 1;
    struct sim_config cfg;
    ASSERT_EQ(sim_config_init(&cfg, &t, 1.3, &e), 0);
    struct sim_time_result *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    const char *pols[] = {"bestfit", "fgd", "cpufrag"};
    for (int p = 0; p < 3; p++) {
        double scale = p == 2 ? 1.5 : 1; /* clones too */
        struct sim_time_opts fast = {1, scale, SIM_FAULT_NONE, 0};
        struct sim_time_opts slow = {1, scale, SIM_FAULT_NONE, 1};
        ASSERT_EQ(sim_time_run(&cfg, &fast, core_policy_find(pols[p]), 43, a, &e), 0);
        ASSERT_EQ(sim_time_run(&cfg, &slow, core_policy_find(pols[p]), 43, b, &e), 0);
        ASSERT_TRUE(a->pending_pct > 1);   /* the queue is busy */
        ASSERT_TRUE(a->attempts < b->attempts);
        ASSERT_NEAR(a->alloc_pct, b->alloc_pct, 1e-9);
        ASSERT_NEAR(a->pending_pct, b->pending_pct, 1e-9);
        ASSERT_EQ(a->placements, b->placements);
        ASSERT_EQ(a->pods, p == 2 ? b->pods : t.n_pods);
        if (p == 2)
            ASSERT_TRUE(a->pods > t.n_pods * 5 / 4 && a->pods < t.n_pods * 7 / 4);
        ASSERT_EQ(a->never_placed, b->never_placed);
        for (int c = 0; c < SIM_N_CLS; c++)
            for (int q = 0; q < 3; q++)
                if (!isnan(b->delay[c][q]))
                    ASSERT_NEAR(a->delay[c][q], b->delay[c][q], 1e-9);
    }
    free(a);
    free(b);
    sim_config_clear(&cfg);
    sim_trace_clear(&t);
}

int test_sim_time(void)
{
    test_hand();
    test_faults();
    test_skip_is_exact();
    return 0;
}
