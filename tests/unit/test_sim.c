/* Unit tests for the simulator: trace parsing and its errors, the
 * generator, statistics, and replays on small and real traces. */
#include <math.h>
#include <stdlib.h>

#include "core/cluster.h"
#include "core/policy.h"
#include "sim/sim_gen.h"
#include "sim/sim_report.h"
#include "sim/sim_run.h"
#include "sim/sim_trace.h"
#include "test.h"

static int parse_nodes(const char *text, struct gs_err *e)
{
    struct sim_trace t = {0};
    int rc = sim_trace_parse_nodes(&t, text, strlen(text), "nodes.csv", e);
    sim_trace_clear(&t);
    return rc;
}

static int parse_pods(const char *text, struct gs_err *e)
{
    struct sim_trace t = {0};
    int rc = sim_trace_parse_pods(&t, text, strlen(text), "pods.csv", e);
    sim_trace_clear(&t);
    return rc;
}

static void test_parse(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct sim_trace t = {0};
    const char *nodes = "sn,cpu_milli,memory_mib,gpu,model\r\n"
                        "n1,64000,262144,2,P100\r\n\r\n"
                        "n2,96000,393216,8,G2\n"
                        "cpu,32000,131072,0,\n";
    ASSERT_EQ(sim_trace_parse_nodes(&t, nodes, strlen(nodes), "nodes.csv", &e), 0);
    ASSERT_EQ(t.n_nodes, 3);
    ASSERT_EQ(t.total_gpus, 10);
    ASSERT_STREQ(t.nodes[1].model, "G2");
    ASSERT_EQ(t.nodes[2].line, 5);
    /* columns in any order, extra columns ignored, no gpu_spec column */
    const char *pods = "gpu_milli,name,qos,num_gpu,memory_mib,cpu_milli\n"
                       "460,p1,LS,1,12288,6000\n"
                       "1000,p2,BE,8,100,88000\n"
                       "0,p3,LS,0,1024,1000\n";
    ASSERT_EQ(sim_trace_parse_pods(&t, pods, strlen(pods), "pods.csv", &e), 0);
    ASSERT_EQ(t.n_pods, 3);
    ASSERT_EQ(t.pods[0].gpu_milli, 460);
    ASSERT_EQ(t.pods[1].num_gpu, 8);
    ASSERT_STREQ(t.pods[0].gpu_spec, "");
    ASSERT_EQ(sim_trace_check(&t, "pods.csv", NULL, &e), 0);
    /* 8 GPUs of P100: only the G2 node is big enough, so it fails by model */
    int unfit = 0;
    snprintf(t.pods[1].gpu_spec, sizeof t.pods[1].gpu_spec, "P100");
    ASSERT_EQ(sim_trace_check(&t, "pods.csv", &unfit, &e), 0);
    ASSERT_EQ(unfit, 1);
    sim_trace_clear(&t);

    /* every error names file, line, column and field */
    ASSERT_EQ(parse_nodes("", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "nodes.csv: empty file");
    ASSERT_EQ(parse_nodes("sn,cpu_milli,memory_mib,gpu\nn,1,1,1\n", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "nodes.csv:1: missing column 'model'");
    ASSERT_EQ(parse_nodes("sn,cpu_milli,memory_mib,gpu,model\n", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "no nodes");
    ASSERT_EQ(parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nn,12x,1,1,T4\n", &e), -GS_EINVAL);
    ASSERT_STREQ(e.msg, "nodes.csv:2: column 2 (cpu_milli): '12x' is not an integer");
    ASSERT_EQ(parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,17,T4\n", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "column 4 (gpu): '17' is out of range 0..16");
    ASSERT_EQ(parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,-5,1,T4\n", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "column 3 (memory_mib)");
    ASSERT_EQ(parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,\n", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "column 5 (model): '' is empty, but the node has GPUs");
    ASSERT_EQ(parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,1\n", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "nodes.csv:2: 3 fields");
    ASSERT_EQ(parse_nodes("sn,cpu_milli,memory_mib,gpu,model\na,1,1,1,T4\nb,1,1,1,T4\na,2,2,1,T4\n",
                          &e), -GS_EINVAL);
    ASSERT_STREQ(e.msg, "nodes.csv:4: column 1 (sn): node 'a' already defined on line 2");
    ASSERT_EQ(parse_nodes("sn,cpu_milli,memory_mib,gpu,model\n\"n\",1,1,1,T4\n", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "quotes");
    ASSERT_EQ(parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nn,99999999999999999999,1,1,T4\n", &e),
              -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "cpu_milli");

    const char *hdr = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
    char buf[512];
    snprintf(buf, sizeof buf, "%sp,1,1,1,1001,\n", hdr);
    ASSERT_EQ(parse_pods(buf, &e), -GS_EINVAL);
    ASSERT_STREQ(e.msg, "pods.csv:2: column 5 (gpu_milli): '1001' is out of range 0..1000");
    snprintf(buf, sizeof buf, "%sp,1,1,2,500,\n", hdr);
    ASSERT_EQ(parse_pods(buf, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "multi-GPU");
    snprintf(buf, sizeof buf, "%sp,1,1,1,0,\n", hdr);
    ASSERT_EQ(parse_pods(buf, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "is 0 but num_gpu is not");
    snprintf(buf, sizeof buf, "%sp,1,1,1,500,A||B\n", hdr);
    ASSERT_EQ(parse_pods(buf, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "column 6 (gpu_spec)");
    snprintf(buf, sizeof buf, "%s,1,1,1,500,\n", hdr);
    ASSERT_EQ(parse_pods(buf, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "column 1 (name)");

    /* cross checks: unknown model, pod bigger than every node */
    struct sim_trace u = {0};
    const char *n2 = "sn,cpu_milli,memory_mib,gpu,model\nn1,8000,32768,2,T4\n";
    const char *p2 = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                     "ok,1000,1024,1,500,T4\nbad,1000,1024,1,500,A100|T4\n";
    ASSERT_EQ(sim_trace_parse_nodes(&u, n2, strlen(n2), "n.csv", &e), 0);
    ASSERT_EQ(sim_trace_parse_pods(&u, p2, strlen(p2), "p.csv", &e), 0);
    ASSERT_EQ(sim_trace_check(&u, "p.csv", NULL, &e), -GS_EINVAL);
    ASSERT_STREQ(e.msg, "p.csv:3: column gpu_spec: unknown GPU model 'A100' (no node has it)");
    sim_trace_clear(&u);
    const char *p3 = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                     "ok,1000,1024,2,1000\nhuge,1000,1024,4,1000\n";
    ASSERT_EQ(sim_trace_parse_nodes(&u, n2, strlen(n2), "n.csv", &e), 0);
    ASSERT_EQ(sim_trace_parse_pods(&u, p3, strlen(p3), "p.csv", &e), 0);
    ASSERT_EQ(sim_trace_check(&u, "p.csv", NULL, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "p.csv:3: column num_gpu: pod huge");
    ASSERT_CONTAINS(e.msg, "bigger than every node");
    unfit = -1;
    u.pods[1].num_gpu = 2;
    snprintf(u.pods[1].gpu_spec, sizeof u.pods[1].gpu_spec, "V100");
    snprintf(u.nodes[0].model, sizeof u.nodes[0].model, "V100");
    snprintf(u.pods[0].gpu_spec, sizeof u.pods[0].gpu_spec, "T4");
    ASSERT_EQ(sim_trace_check(&u, "p.csv", &unfit, &e), -GS_EINVAL); /* no T4 left */
    snprintf(u.pods[0].gpu_spec, sizeof u.pods[0].gpu_spec, "V100");
    ASSERT_EQ(sim_trace_check(&u, "p.csv", &unfit, &e), 0);
    ASSERT_EQ(unfit, 0);
    u.pods[1].num_gpu = 1;
    u.pods[1].cpu_milli = 9000;
    ASSERT_EQ(sim_trace_check(&u, "p.csv", NULL, &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "column cpu_milli: pod huge needs 9000m CPU, the largest node has 8000m");
    sim_trace_clear(&u);
}

static void test_stats(void)
{
    double v[] = {3, 1, NAN, 2, 4};
    struct sim_stat s = sim_stat_of(v, 5);
    ASSERT_EQ(s.n, 4);
    ASSERT_NEAR(s.mean, 2.5, 1e-12);
    ASSERT_NEAR(s.median, 2.5, 1e-12);
    ASSERT_NEAR(s.sd, sqrt(5.0 / 3), 1e-12);
    double one = 7;
    s = sim_stat_of(&one, 1);
    ASSERT_NEAR(s.sd, 0, 0);
    ASSERT_NEAR(s.median, 7, 0);
}

static void test_gen_and_run(void)
{
    struct sim_trace t;
    struct gs_err e = GS_ERR_INIT;
    ASSERT_EQ(sim_gen(&t, 60, 500, 3, &e), 0);
    ASSERT_EQ(t.n_nodes, 60);
    ASSERT_EQ(t.n_pods, 500);
    ASSERT_EQ(sim_trace_check(&t, "gen", NULL, &e), 0);
    int kinds[3] = {0};
    for (int i = 0; i < t.n_pods; i++)
        kinds[t.pods[i].num_gpu == 0 ? 0 : t.pods[i].gpu_milli < 1000 ? 1 : 2]++;
    ASSERT_TRUE(kinds[0] > 30 && kinds[1] > 120 && kinds[2] > 160);
    struct sim_trace t2;
    ASSERT_EQ(sim_gen(&t2, 60, 500, 3, &e), 0);
    ASSERT_EQ(memcmp(t.pods, t2.pods, sizeof *t.pods * 500), 0);
    sim_trace_clear(&t2);
    ASSERT_EQ(sim_gen(&t2, 0, 5, 1, &e), -GS_EINVAL);

    /* a round trip through the writers */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ASSERT_EQ(sim_trace_write_pods(&t, f), 0);
    fclose(f);
    struct sim_trace back = {0};
    ASSERT_EQ(sim_trace_parse_pods(&back, buf, len, "mem", &e), 0);
    ASSERT_EQ(back.n_pods, 500);
    ASSERT_EQ(back.pods[77].cpu_milli, t.pods[77].cpu_milli);
    free(buf);
    sim_trace_clear(&back);

    struct sim_config cfg;
    ASSERT_EQ(sim_config_init(&cfg, &t, 1.3, &e), 0);
    ASSERT_TRUE(cfg.n_classes > 5 && cfg.n_classes < 200);
    const struct core_policy *pols[] = {core_policy_find("bestfit"), core_policy_find("fgd")};
    uint64_t seeds[] = {1, 2};
    struct sim_run_result r[4];
    ASSERT_EQ(sim_run_grid(&cfg, pols, 2, seeds, 2, 2, r, &e), 0);
    double total = t.total_gpus * 1000.0, req = 0;
    for (int i = 0; i < t.n_pods; i++)
        req += (double)t.pods[i].num_gpu * t.pods[i].gpu_milli;
    for (int i = 0; i < 4; i++) {
        ASSERT_TRUE(r[i].pods > 500); /* tuned up to 130 % */
        ASSERT_TRUE(r[i].failed > 0 && r[i].failed < r[i].pods);
        ASSERT_TRUE(!isnan(r[i].unalloc[100]) && !isnan(r[i].unalloc[130]));
        ASSERT_TRUE(r[i].unalloc[50] >= 49); /* never better than ideal (bin +-1) */
        ASSERT_TRUE(r[i].unalloc[100] >= 0 && r[i].unalloc[100] < 40);
        ASSERT_TRUE(r[i].frag[90] >= 0);
    }
    ASSERT_TRUE(req < 1.3 * total);
    /* same policy and seed -> same result */
    struct sim_run_result again;
    ASSERT_EQ(sim_run(&cfg, pols[1], 2, &again, &e), 0);
    ASSERT_NEAR(again.unalloc[100], r[3].unalloc[100], 0);
    ASSERT_EQ(again.failed, r[3].failed);
    /* --learned: no target workload is set, so the core learns its classes
     * from the pods placed, every one of them counted */
    for (int learned = 0; learned <= 1; learned++) {
        int *order, len, n;
        struct core_cluster *st;
        cfg.learned = learned;
        ASSERT_EQ(sim_order(&cfg, 1, &order, &len, &e), 0);
        unsigned char *placed = calloc((size_t)len, 1);
        ASSERT_EQ(sim_replay_state(&cfg, pols[1], 1, order, len, placed, &st, &e), 0);
        const struct core_learned *l = core_cluster_learned(st, &n);
        long counted = 0, n_placed = 0;
        for (int k = 0; k < n; k++)
            counted += l[k].count;
        for (int i = 0; i < len; i++)
            n_placed += placed[i];
        ASSERT_EQ(n > 0, learned);
        ASSERT_EQ(counted, learned ? n_placed : 0);
        ASSERT_EQ(core_cluster_alloc_count(st), n_placed);
        core_cluster_free(st);
        free(placed);
        free(order);
    }
    cfg.learned = 0;
    /* tuning down: a tune below the request removes pods */
    struct sim_config low;
    ASSERT_EQ(sim_config_init(&low, &t, 0.3, &e), 0);
    ASSERT_EQ(sim_run(&low, pols[0], 1, &again, &e), 0);
    ASSERT_TRUE(again.pods < 500);
    ASSERT_TRUE(isnan(again.unalloc[100]));
    sim_config_clear(&low);

    struct sim_summary sum;
    sim_summarize(r + 2, 2, &sum);
    ASSERT_STREQ(sum.policy->name, "fgd");
    ASSERT_NEAR(sum.unalloc100.mean, (r[2].unalloc[100] + r[3].unalloc[100]) / 2, 1e-9);
    sim_config_clear(&cfg);
    sim_trace_clear(&t);
}

/* The published default-trace numbers, FGD and BestFit on three seeds: a
 * quick guard in the unit suite (the black-box test runs all six x 10). */
static void test_openb_default(void)
{
    const char *dir = test_openb_dir();
    if (!dir)
        return;
    char nodes[4200], pods[4200];
    snprintf(nodes, sizeof nodes, "%s/openb_node_list_gpu_node.csv", dir);
    snprintf(pods, sizeof pods, "%s/openb_pod_list_default.csv", dir);
    struct sim_trace t = {0};
    struct gs_err e = GS_ERR_INIT;
    ASSERT_EQ(sim_trace_load(&t, nodes, pods, NULL, &e), 0);
    ASSERT_EQ(t.n_nodes, 1213);
    ASSERT_EQ(t.total_gpus, 6212);
    ASSERT_EQ(t.n_pods, 8152);
    struct sim_config cfg;
    ASSERT_EQ(sim_config_init(&cfg, &t, 1.3, &e), 0);
    ASSERT_EQ(cfg.n_classes, 91);
    /* the 95 % cut keeps 35 classes, as the paper says */
    struct core_cluster *c = core_cluster_new();
    ASSERT_EQ(core_cluster_set_workload(c, cfg.classes, cfg.n_classes, 0.95, &e), 0);
    core_cluster_frag(c);
    ASSERT_EQ(core_cluster_workload_size(c), 35);
    core_cluster_free(c);
    const struct core_policy *pols[] = {core_policy_find("bestfit"), core_policy_find("fgd")};
    uint64_t seeds[] = {42, 43, 44};
    struct sim_run_result r[6];
    ASSERT_EQ(sim_run_grid(&cfg, pols, 2, seeds, 3, 0, r, &e), 0);
    struct sim_summary bf, fgd;
    sim_summarize(r, 3, &bf);
    sim_summarize(r + 3, 3, &fgd);
    ASSERT_NEAR(bf.unalloc100.mean, 7.14, 1.0);
    ASSERT_NEAR(fgd.unalloc100.mean, 4.77, 0.7);
    ASSERT_TRUE(r[0].pods > 10500 && r[0].pods < 11200); /* "about 10.8k pods" */
    sim_config_clear(&cfg);
    sim_trace_clear(&t);
}

int test_sim(void)
{
    test_parse();
    test_stats();
    test_gen_and_run();
    test_openb_default();
    return 0;
}
