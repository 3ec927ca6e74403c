/* Unit tests for dp/fake.c (the fake-GPU file), dp/health.c and dp/none.c. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dp/gpu.h"
#include "dp/health.h"
#include "test.h"

static const char good[] =
    "{\"driver\": \"580.1\", \"gpus\": ["
    "{\"uuid\": \"GPU-a\", \"name\": \"NVIDIA H100 80GB HBM3\", \"memory_mib\": 81559,"
    " \"numa_node\": 0, \"links\": [{\"gpu\": 1, \"type\": \"nvlink\", \"nvlinks\": 18}],"
    " \"xids\": [13, 48]},"
    "{\"uuid\": \"GPU-b\", \"name\": \"NVIDIA H100 80GB HBM3\", \"memory_mib\": 81559,"
    " \"numa_node\": 0, \"index\": 5, \"minor\": 9, \"pci_bus_id\": \"00000000:3B:00.0\","
    " \"procs\": [{\"pid\": 42, \"sm\": 37}, {\"pid\": 7}]},"
    "{\"uuid\": \"GPU-c\", \"name\": \"NVIDIA A100\", \"memory_mib\": 40960, \"numa_node\": 1,"
    " \"lost\": true,"
    " \"mig\": [{\"uuid\": \"MIG-x\", \"profile\": \"1g.5gb\", \"memory_mib\": 4864}]}]}";

static void test_parse(void)
{
    struct dp_fake_state *st = malloc(sizeof *st);
    struct gs_err e = GS_ERR_INIT;

    ASSERT_EQ(dp_fake_parse(good, sizeof good - 1, st, &e), 0);
    ASSERT_EQ(st->inv.n, 3);
    ASSERT_STREQ(st->inv.driver, "580.1");
    const struct dp_gpu *a = &st->inv.gpu[0], *b = &st->inv.gpu[1], *c = &st->inv.gpu[2];
    ASSERT_STREQ(a->model, "NVIDIA H100 80GB HBM3");
    ASSERT_EQ(a->memory_mib, 81559);
    ASSERT_EQ(a->index, 0);
    ASSERT_EQ(a->minor, 0);
    ASSERT_EQ(a->link[1], CORE_LINK_NVLINK);
    ASSERT_EQ(b->link[0], CORE_LINK_NVLINK); /* links are symmetric */
    ASSERT_EQ(a->nvlinks[1], 18);
    ASSERT_EQ(a->link[2], CORE_LINK_SYS);    /* unlisted pairs: by NUMA node */
    ASSERT_EQ(b->index, 5);
    ASSERT_EQ(b->minor, 9);
    ASSERT_STREQ(b->pci_bus_id, "00000000:3B:00.0");
    ASSERT_EQ(c->mig_enabled, 1);
    ASSERT_EQ(c->n_mig, 1);
    ASSERT_STREQ(c->mig[0].profile, "1g.5gb");
    ASSERT_EQ(c->mig[0].gi, 1);
    ASSERT_EQ(c->numa_node, 1);
    ASSERT_EQ(st->nxid[0], 2);
    ASSERT_EQ(st->xids[0][1], 48);
    ASSERT_EQ(st->lost[2], 1);
    ASSERT_EQ(st->nproc[0], 0);
    ASSERT_EQ(st->nproc[1], 2);
    ASSERT_EQ(st->procs[1][0].pid, 42);
    ASSERT_EQ(st->procs[1][0].sm, 37);
    ASSERT_EQ(st->procs[1][1].pid, 7);
    ASSERT_EQ(st->procs[1][1].sm, 0);
    ASSERT_TRUE(dp_inventory_find(&st->inv, "MIG-x") == c);
    ASSERT_TRUE(dp_inventory_find(&st->inv, "GPU-z") == NULL);

    static const struct {
        const char *doc, *msg;
    } bad[] = {
        {"[]", "top level: must be an object"},
        {"{\"gpus\": [{\"name\": \"X\", \"memory_mib\": 1}]}", "gpus[0].uuid: missing"},
        {"{\"gpus\": [{\"uuid\": \"\", \"name\": \"X\", \"memory_mib\": 1}]}",
         "gpus[0].uuid: must be 1..95 characters"},
        {"{\"gpus\": [{\"uuid\": \"a,b\", \"name\": \"X\", \"memory_mib\": 1}]}",
         "gpus[0].uuid: control character or ','"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1.5}]}",
         "gpus[0].memory_mib: must be an integer"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1, \"numa_node\": -2}]}",
         "gpus[0].numa_node: -2 is out of range -1..1023"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1, \"lost\": 1}]}",
         "gpus[0].lost: must be true or false"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1, \"xids\": [-1]}]}",
         "gpus[0].xids[0]: must be an integer"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1, \"procs\": {}}]}",
         "gpus[0].procs: must be an array of at most 16 objects"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1, \"procs\": [3]}]}",
         "gpus[0].procs[0]: must be an object"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1,"
         " \"procs\": [{\"pid\": 1}, {\"sm\": 5}]}]}",
         "gpus[0].procs[1].pid: missing"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1,"
         " \"procs\": [{\"pid\": 1, \"sm\": 101}]}]}",
         "gpus[0].procs[0].sm: 101 is out of range 0..100"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1,"
         " \"links\": [{\"gpu\": 0, \"type\": \"nvlink\"}]}]}",
         "gpus[0].links[0].gpu: a GPU has no link to itself"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1},"
         " {\"uuid\": \"H\", \"name\": \"X\", \"memory_mib\": 1,"
         " \"links\": [{\"gpu\": 0, \"type\": \"warp\"}]}]}",
         "gpus[1].links[0].type: 'warp' is not one of"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1,"
         " \"mig\": [{\"uuid\": \"M\", \"profile\": \"1g.5gb\"}]}]}",
         "gpus[0].mig[0].memory_mib: missing"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1,"
         " \"mig\": [{\"uuid\": \"M\", \"profile\": \"1g.5gb\", \"memory_mib\": 1,"
         " \"xids\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}]}]}",
         "gpus[0].mig[0].xids: must be an array of at most 8 integers"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1,"
         " \"mig\": [{\"uuid\": \"M\", \"profile\": \"1g.5gb\", \"memory_mib\": 1,"
         " \"xids\": [-1]}]}]}",
         "gpus[0].mig[0].xids[0]: must be an integer 0..100000"},
        {"{\"gpus\": [{\"uuid\": \"G\", \"name\": \"X\", \"memory_mib\": 1, \"index\": 1},"
         " {\"uuid\": \"H\", \"name\": \"X\", \"memory_mib\": 1}]}",
         "gpus[1].index: 1 appears twice"},
        {"{\"gpus\": [], \"gpus\": []}", "line 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct gs_err e2 = GS_ERR_INIT;
        ASSERT_EQ(dp_fake_parse(bad[i].doc, strlen(bad[i].doc), st, &e2), -GS_EINVAL);
        ASSERT_CONTAINS(e2.msg, bad[i].msg);
        ASSERT_EQ(st->inv.n, 0); /* nothing half-parsed is left */
    }
    char big[40];
    snprintf(big, sizeof big, "{\"gpus\": []}");
    ASSERT_EQ(dp_fake_parse(big, (1 << 20) + 1, st, &e), -GS_ETOOBIG);
    free(st);
}

/* A backend whose probe result the test sets. */
static int probe_result;
static int test_probe(struct dp_backend *b, const char *uuid, struct gs_err *e)
{
    (void)b;
    return probe_result ? gs_errf(e, GS_EIO, "%s: still broken", uuid) : 0;
}

static void test_health(void)
{
    struct dp_health_cfg c;
    struct dp_health_state hs;
    struct dp_inventory inv;
    struct dp_backend b = {.name = "t", .probe = test_probe};
    struct gs_err e = GS_ERR_INIT;

    dp_health_cfg_default(&c);
    ASSERT_EQ(dp_health_classify(&c, 13), DP_XID_IGNORED);
    ASSERT_EQ(dp_health_classify(&c, 109), DP_XID_IGNORED);
    ASSERT_EQ(dp_health_classify(&c, 79), DP_XID_FATAL);
    ASSERT_EQ(dp_health_classify(&c, 48), DP_XID_FATAL);
    ASSERT_EQ(dp_health_classify(&c, 94), DP_XID_TRANSIENT);
    ASSERT_EQ(dp_health_parse_ignored(&c, "94,31", &e), 0);
    ASSERT_EQ(dp_health_classify(&c, 94), DP_XID_IGNORED);
    ASSERT_EQ(dp_health_parse_ignored(&c, "7,,x", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "'x' is not an XID number");
    ASSERT_EQ(dp_health_parse_ignored(&c, "-3", &e), -GS_EINVAL);
    /* forced on: counted although ignored by default or by --ignore-xids */
    ASSERT_EQ(dp_health_parse_forced(&c, "43,31,48", &e), 0);
    ASSERT_EQ(dp_health_classify(&c, 43), DP_XID_TRANSIENT);
    ASSERT_EQ(dp_health_classify(&c, 31), DP_XID_TRANSIENT);
    ASSERT_EQ(dp_health_classify(&c, 48), DP_XID_FATAL);
    ASSERT_EQ(dp_health_classify(&c, 13), DP_XID_IGNORED);
    ASSERT_EQ(dp_health_parse_forced(&c, "1,x", &e), -GS_EINVAL);
    ASSERT_CONTAINS(e.msg, "--health-xids: 'x' is not an XID number");
    c.n_forced = 0;

    memset(&inv, 0, sizeof inv);
    memset(&hs, 0, sizeof hs);
    inv.n = 2;
    snprintf(inv.gpu[0].uuid, sizeof inv.gpu[0].uuid, "GPU-a");
    snprintf(inv.gpu[1].uuid, sizeof inv.gpu[1].uuid, "GPU-b");
    snprintf(inv.gpu[1].mig[0].uuid, sizeof inv.gpu[1].mig[0].uuid, "MIG-b0");
    snprintf(inv.gpu[1].mig[1].uuid, sizeof inv.gpu[1].mig[1].uuid, "MIG-b1");
    inv.gpu[1].mig[0].gi = 3;
    inv.gpu[1].mig[1].gi = 5;
    inv.gpu[1].n_mig = 2;
    inv.gpu[0].healthy = inv.gpu[1].healthy = 1;
    inv.gpu[1].mig[0].healthy = inv.gpu[1].mig[1].healthy = 1;
    c.transient_ms = 1000;
    c.fatal_ms = 60000;

    struct dp_event ev = {.uuid = "GPU-a", .xid = 13};
    ASSERT_EQ(dp_health_event(&c, &inv, &hs, &ev, NULL, 0, 0), 0); /* application error */
    ASSERT_EQ(inv.gpu[0].healthy, 1);
    ev.xid = 63;
    ASSERT_EQ(dp_health_event(&c, &inv, &hs, &ev, NULL, 0, 0), 1);
    ASSERT_EQ(inv.gpu[0].healthy, 0);
    ASSERT_STREQ(inv.gpu[0].reason, "XID 63 (transient)");
    ASSERT_EQ(hs.recheck_at[0], 1000);
    ASSERT_EQ(dp_health_event(&c, &inv, &hs, &ev, NULL, 0, 10), 0); /* already unhealthy */
    ASSERT_EQ(hs.xids[0], 2);

    /* Not due yet, then due and passing. */
    probe_result = 0;
    ASSERT_EQ(dp_health_reprobe(&c, &inv, &hs, &b, 999), 0);
    ASSERT_EQ(inv.gpu[0].healthy, 0);
    ASSERT_EQ(dp_health_reprobe(&c, &inv, &hs, &b, 1010), 1);
    ASSERT_EQ(inv.gpu[0].healthy, 1);
    ASSERT_STREQ(inv.gpu[0].reason, "");

    /* Probed without the lock: the results go to the GPUs by UUID, and only
     * to units still due (an inventory rebuilt meanwhile, a new XID). */
    {
        char due[DP_MAX_GPUS][DP_UUID_MAX];
        struct gs_err res[DP_MAX_GPUS] = {GS_ERR_INIT};
        ASSERT_EQ(dp_health_event(&c, &inv, &hs, &ev, NULL, 0, 2000), 1);
        ASSERT_EQ(dp_health_due(&inv, &hs, 2999, due), 0);
        ASSERT_EQ(dp_health_due(&inv, &hs, 3000, due), 1);
        ASSERT_STREQ(due[0], "GPU-a");
        struct dp_inventory moved = inv;  /* GPU-a now second */
        struct dp_health_state hm = hs;
        moved.gpu[0] = inv.gpu[1];
        moved.gpu[1] = inv.gpu[0];
        hm.recheck_at[0] = hs.recheck_at[1];
        hm.recheck_at[1] = hs.recheck_at[0];
        hm.last_xid[1] = hs.last_xid[0];
        res[0].code = GS_EIO;
        snprintf(res[0].msg, sizeof res[0].msg, "hung up");
        /* probes that hung 2.5 s: due again a period after they ended */
        ASSERT_EQ(dp_health_reprobed(&c, &moved, &hm, due, res, 1, 3000, 5500), 0);
        ASSERT_STREQ(moved.gpu[1].reason, "re-probe failed after XID 63: hung up");
        ASSERT_EQ(hm.recheck_at[1], 6500);
        ASSERT_EQ(dp_health_due(&moved, &hm, 5500, due), 0);
        ASSERT_EQ(dp_health_due(&moved, &hm, 6500, due), 1);
        ASSERT_EQ(moved.gpu[0].healthy, 1);
        res[0] = (struct gs_err)GS_ERR_INIT;
        ASSERT_EQ(dp_health_reprobed(&c, &moved, &hm, due, res, 1, 3500, 3500), 0); /* not due */
        ASSERT_EQ(dp_health_reprobed(&c, &inv, &hs, due, res, 1, 3000, 3000), 1);
        ASSERT_EQ(inv.gpu[0].healthy, 1);
    }

    /* A fatal XID on a MIG instance takes that instance only; a failing
     * probe (of its GPU) keeps it unhealthy and reschedules. */
    struct dp_event ev2 = {.uuid = "MIG-b0", .xid = 79};
    ASSERT_EQ(dp_health_event(&c, &inv, &hs, &ev2, NULL, 0, 0), 1);
    ASSERT_EQ(inv.gpu[1].healthy, 1);
    ASSERT_EQ(inv.gpu[1].mig[0].healthy, 0);
    ASSERT_EQ(inv.gpu[1].mig[1].healthy, 1);
    ASSERT_STREQ(inv.gpu[1].mig[0].reason, "XID 79 (fatal)");
    ASSERT_EQ(hs.mig_recheck_at[1][0], 60000);
    ASSERT_EQ(hs.recheck_at[1], 0);
    ASSERT_EQ(hs.xids[1], 1);
    probe_result = 1;
    ASSERT_EQ(dp_health_reprobe(&c, &inv, &hs, &b, 60000), 0);
    ASSERT_CONTAINS(inv.gpu[1].mig[0].reason,
                    "re-probe failed after XID 79: GPU-b: still broken");
    ASSERT_EQ(hs.mig_recheck_at[1][0], 120000);
    /* NVML's form: the GPU's UUID and the instance's ids */
    struct dp_event byid = {.uuid = "GPU-b", .xid = 63, .instance = 1, .gi = 5,
                            .ci = DP_NO_INSTANCE};
    ASSERT_EQ(dp_health_event(&c, &inv, &hs, &byid, NULL, 0, 0), 1);
    ASSERT_EQ(inv.gpu[1].mig[1].healthy, 0);
    ASSERT_EQ(inv.gpu[1].healthy, 1);
    const char *why;
    ASSERT_EQ(dp_inventory_healthy(&inv, "MIG-b1", &why), 0);
    ASSERT_STREQ(why, "XID 63 (transient)");
    ASSERT_EQ(dp_inventory_healthy(&inv, "GPU-b", &why), 1);
    ASSERT_EQ(dp_inventory_healthy(&inv, "GPU-x", &why), 0);
    probe_result = 0;
    ASSERT_EQ(dp_health_reprobe(&c, &inv, &hs, &b, 1000), 1); /* transient: back */
    ASSERT_EQ(inv.gpu[1].mig[1].healthy, 1);
    ASSERT_EQ(inv.gpu[1].mig[0].healthy, 0);                   /* not due */
    /* ids no instance has (nor an unknown id): the whole GPU */
    byid.gi = 9;
    inv.gpu[1].mig[1].gi = DP_NO_INSTANCE;
    byid.xid = 79;
    ASSERT_EQ(dp_health_event(&c, &inv, &hs, &byid, NULL, 0, 0), 1);
    ASSERT_EQ(inv.gpu[1].healthy, 0);
    ASSERT_EQ(inv.gpu[1].mig[1].healthy, 1);
    ASSERT_EQ(dp_inventory_healthy(&inv, "MIG-b1", &why), 0); /* its GPU is not */
    ASSERT_STREQ(why, "XID 79 (fatal)");
    ASSERT_EQ(hs.recheck_at[1], 60000);
    probe_result = 1;
    ASSERT_EQ(dp_health_reprobe(&c, &inv, &hs, &b, 60000), 0);
    ASSERT_EQ(hs.recheck_at[1], 120000);

    /* By default a fatal XID is never re-probed: a GPU that needs a reset
     * still answers the probe. */
    struct dp_health_cfg d;
    struct dp_health_state hd;
    struct dp_event evb = {.uuid = "GPU-b", .xid = 79};
    dp_health_cfg_default(&d);
    memset(&hd, 0, sizeof hd);
    ASSERT_EQ(d.fatal_ms, 0);
    ASSERT_EQ(dp_health_event(&d, &inv, &hd, &evb, NULL, 0, 0), 0); /* GPU-b already unhealthy */
    inv.gpu[1].healthy = 1;
    ASSERT_EQ(dp_health_event(&d, &inv, &hd, &evb, NULL, 0, 0), 1);
    probe_result = 0;
    ASSERT_EQ(dp_health_reprobe(&d, &inv, &hd, &b, (int64_t)3e12), 0); /* a century later */
    ASSERT_EQ(inv.gpu[1].healthy, 0);
    ASSERT_STREQ(inv.gpu[1].reason, "XID 79 (fatal)");
    ev.xid = 63; /* a transient one still is, after 10 s */
    inv.gpu[0].healthy = 1;
    ASSERT_EQ(dp_health_event(&d, &inv, &hd, &ev, NULL, 0, 0), 1);
    ASSERT_EQ(dp_health_reprobe(&d, &inv, &hd, &b, 10000), 1);
    ASSERT_EQ(inv.gpu[0].healthy, 1);
    inv.gpu[1].healthy = 0;
    probe_result = 1;

    /* The event source failed (as on every wait once a GPU is lost): only
     * the GPUs that failed a probe; without probe results, every GPU. */
    struct dp_event all = {.all = 1, .xid = 999};
    static const char none[1][DP_UUID_MAX] = {""}, gpu_a[1][DP_UUID_MAX] = {"GPU-a"};
    ASSERT_EQ(dp_health_event(&c, &inv, &hs, &all, none, 0, 0), 0);
    ASSERT_EQ(inv.gpu[0].healthy, 1);
    ASSERT_EQ(dp_health_event(&c, &inv, &hs, &all, gpu_a, 1, 0), 1);
    ASSERT_EQ(inv.gpu[0].healthy, 0);
    inv.gpu[0].healthy = 1;
    ASSERT_EQ(dp_health_event(&c, &inv, &hs, &all, NULL, 0, 0), 1);
    ASSERT_EQ(inv.gpu[0].healthy, 0);

    /* Health survives a re-discovery, by UUID, whatever the order; a MIG
     * instance's too. */
    struct dp_inventory next;
    struct dp_health_state hn;
    memset(&next, 0, sizeof next);
    next.n = 2;
    snprintf(next.gpu[0].uuid, sizeof next.gpu[0].uuid, "GPU-b");
    snprintf(next.gpu[1].uuid, sizeof next.gpu[1].uuid, "GPU-new");
    snprintf(next.gpu[0].mig[0].uuid, sizeof next.gpu[0].mig[0].uuid, "MIG-b1");
    snprintf(next.gpu[0].mig[1].uuid, sizeof next.gpu[0].mig[1].uuid, "MIG-b0");
    next.gpu[0].n_mig = 2;
    next.gpu[0].healthy = next.gpu[1].healthy = 1;
    next.gpu[0].mig[0].healthy = next.gpu[0].mig[1].healthy = 1;
    dp_health_carry(&inv, &hs, &next, &hn);
    ASSERT_EQ(next.gpu[0].healthy, 0);
    ASSERT_EQ(hn.recheck_at[0], 120000);
    ASSERT_EQ(next.gpu[1].healthy, 1);
    ASSERT_EQ(next.gpu[0].mig[0].healthy, 1);
    ASSERT_EQ(next.gpu[0].mig[1].healthy, 0);
    ASSERT_CONTAINS(next.gpu[0].mig[1].reason, "re-probe failed after XID 79");
    ASSERT_EQ(hn.mig_recheck_at[0][1], 120000);
    ASSERT_EQ(hn.mig_last_xid[0][1], 79);

    /* "all" switches health checks off. */
    ASSERT_EQ(dp_health_parse_ignored(&c, "all", &e), 0);
    ev.xid = 79;
    inv.gpu[0].healthy = 1;
    ASSERT_EQ(dp_health_event(&c, &inv, &hs, &ev, NULL, 0, 0), 0);
    ASSERT_EQ(inv.gpu[0].healthy, 1);
}

static void test_none_backend(void)
{
    struct dp_backend *b;
    struct dp_inventory inv;
    struct dp_event ev;
    struct gs_err e = GS_ERR_INIT;

    ASSERT_EQ(dp_backend_open_none(&b, &e), 0);
    ASSERT_EQ(b->discover(b, &inv, &e), 0);
    ASSERT_EQ(inv.n, 0);
    ASSERT_EQ(b->wait_event(b, 1, &ev, &e), 0);
    ASSERT_EQ(b->probe(b, "GPU-a", &e), -GS_ENOENT);
    b->close(b);
    /* NVML that is not there: a clear error, not a crash. */
    ASSERT_EQ(dp_backend_open_nvml("/nonexistent/libnvidia-ml.so.1", &b, &e), -GS_EUNAVAIL);
    ASSERT_CONTAINS(e.msg, "cannot load /nonexistent/libnvidia-ml.so.1");
    ASSERT_TRUE(b == NULL);
}

/* The fake backend's per-process samples: the file's "procs", new on every
 * call (stamped now), none for a GPU that lists none, an error for a GPU
 * that is not there; an edit of the file is seen once the health loop
 * re-reads it. */
static void test_fake_proc_util(void)
{
    char path[] = "/tmp/gs-fake-procs-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    ASSERT_EQ(write(fd, good, sizeof good - 1), (ssize_t)(sizeof good - 1));
    close(fd);
    struct dp_backend *b;
    struct dp_proc_sample s[4];
    struct dp_event ev;
    struct gs_err e = GS_ERR_INIT;
    uint64_t last = 0, first;
    ASSERT_EQ(dp_backend_open_fake(path, &b, &e), 0);
    ASSERT_TRUE(b->proc_util != NULL);
    ASSERT_EQ(b->proc_util(b, "GPU-b", &last, s, 4, &e), 2);
    ASSERT_EQ(s[0].pid, 42);
    ASSERT_EQ(s[0].sm, 37);
    ASSERT_EQ(s[1].pid, 7);
    ASSERT_TRUE(last > 0);
    first = last;
    usleep(1000); /* a new sample: the clock has moved on */
    ASSERT_EQ(b->proc_util(b, "GPU-b", &last, s, 1, &e), 1); /* at most max */
    ASSERT_TRUE(last > first);
    uint64_t ahead = last + 60000000; /* a minute ahead: nothing newer */
    ASSERT_EQ(b->proc_util(b, "GPU-b", &ahead, s, 4, &e), 0);
    ASSERT_EQ(b->proc_util(b, "GPU-a", &last, s, 4, &e), 0);
    ASSERT_EQ(b->proc_util(b, "GPU-z", &last, s, 4, &e), -GS_ENOENT);
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs("{\"gpus\": [{\"uuid\": \"GPU-b\", \"name\": \"X\", \"memory_mib\": 1,"
          " \"procs\": [{\"pid\": 9, \"sm\": 100}]}]}", f);
    fclose(f);
    while (b->wait_event(b, 0, &ev, &e) == 1) /* the health loop's re-read */
        ;
    usleep(1000);
    ASSERT_EQ(b->proc_util(b, "GPU-b", &last, s, 4, &e), 1);
    ASSERT_EQ(s[0].pid, 9);
    ASSERT_EQ(s[0].sm, 100);
    b->close(b);
    unlink(path);
}

/* MIG profile names as NVIDIA's device plugin gives them, from the memory
 * NVML reports (A100 40GB and 80GB, H100 80GB, H200 141GB). */
static void test_mig_names(void)
{
    static const struct {
        unsigned slices;
        uint64_t mem;
        int64_t gpu;
        const char *want;
    } t[] = {
        {1, 4864, 40960, "1g.5gb"},     {2, 9856, 40960, "2g.10gb"},
        {3, 19968, 40960, "3g.20gb"},   {7, 40192, 40960, "7g.40gb"},
        {1, 9728, 81920, "1g.10gb"},    {1, 19968, 81920, "1g.20gb"},
        {3, 40192, 81920, "3g.40gb"},   {1, 9856, 81559, "1g.10gb"},
        {4, 40192, 81559, "4g.40gb"},   {7, 80384, 81559, "7g.80gb"},
        {1, 16384, 143771, "1g.18gb"},  {1, 32768, 143771, "1g.35gb"},
        {3, 69888, 143771, "3g.71gb"},  {7, 139520, 143771, "7g.141gb"},
        {1, 16384, 0, "1g.16gb"}, /* no GPU total: the instance's own GB */
    };
    char name[32];
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        dp_mig_name(t[i].slices, t[i].mem, t[i].gpu, name, sizeof name);
        ASSERT_STREQ(name, t[i].want);
    }
}

int test_dp_gpus(void)
{
    test_mig_names();
    test_parse();
    test_health();
    test_none_backend();
    test_fake_proc_util();
    return 0;
}
