/*
 * tests/unit/test_ext_order.c - the standalone journal keeps the
 * scheduler's order (ext/standalone.h, ext/journal.h): a release of a pod
 * whose bind is still committing lands after the bind's record, so a
 * restart finds the pod released; and when the bind's flush fails, the
 * release queued behind it fails with it, and the failed bind's undo leaves
 * alone the allocation of a bind of the same pod made after it.
 *
 * The scheduler's commit hooks are wrapped (sched_int.h) to start the
 * release at the moment the bind logs its record: were the record logged
 * after the scheduler's lock is dropped, the release would log first. The
 * disk is held through ext_journal_set_sync() so the release comes while
 * the bind's flush is under way.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ext/journal.h"
#include "ext/sched.h"
#include "ext/sched_int.h"
#include "ext/standalone.h"
#include "test.h"

static const char *const FILTER =
    "{\"Pod\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"d\",\"uid\":\"u\"},"
    "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
    "{\"nvidia.com/gpu\":\"1\"}}}]}},\"NodeNames\":[\"n\"]}";
static const char *const BIND = "{\"PodName\":\"p\",\"PodNamespace\":\"d\",\"PodUID\":\"u\","
                                "\"Node\":\"n\"}";

static void nap_ms(long ms) { nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL); }

/* One run: the scheduler, its standalone backend, and the test's hooks. */
struct run {
    struct ext_sched *s;
    struct ext_standalone *st;
    struct ext_journal *j;
    struct ext_commit orig;     /* the standalone's hooks, wrapped below */
    int race_release;           /* log_bind: start the release first */
    int rebind_on_fail;         /* durable: a failed bind binds the pod anew first */
    pthread_t binder;           /* the thread whose bind does that (not the release's) */
    pthread_t rel;
    int rel_started, rel_rc;
    struct gs_err rel_err;
    int syncs, queued_at_sync;  /* flushes, and records queued during the first */
    int fail_first;             /* the first flush fails (EIO) */
    int fail_at;                /* else: flush number fail_at fails, and no release is raced */
    int rebind_status;
};

static int queued(struct ext_journal *j)
{
    struct ext_journal_stats st;
    ext_journal_stats(j, &st);
    return st.queued;
}

static void *release_main(void *ud)
{
    struct run *r = ud;
    r->rel_rc = ext_sched_release(r->s, "u", &r->rel_err);
    return NULL;
}

static void start_release(struct run *r)
{
    if (pthread_create(&r->rel, NULL, release_main, r) == 0)
        r->rel_started = 1;
}

static void join_release(struct run *r)
{
    if (r->rel_started)
        pthread_join(r->rel, NULL);
    r->rel_started = 0;
}

/* The bind's flush: the release comes now (the bind is still committing);
 * the flush waits until its record is queued, then succeeds or fails. */
static int held_sync(void *ud, int fd, int undo)
{
    struct run *r = ud;
    if (undo)
        return fdatasync(fd);
    if (r->fail_at) {
        if (++r->syncs == r->fail_at) {
            errno = EIO;
            return -1;
        }
        return fdatasync(fd);
    }
    if (++r->syncs == 1) {
        if (!r->rel_started && !r->race_release)
            start_release(r);
        for (int i = 0; i < 30000 && queued(r->j) < 1; i++) /* up to 30 s on a loaded machine */
            nap_ms(1);
        r->queued_at_sync = queued(r->j);
        if (r->fail_first) {
            errno = EIO;
            return -1;
        }
    }
    return fdatasync(fd);
}

static int wrap_log_bind(void *ud, const char *ns, const char *name, const char *uid,
                         const struct core_alloc *a, const json_t *ann, void **ticket,
                         struct gs_err *e)
{
    struct run *r = ud;
    if (r->race_release) {
        r->race_release = 0;
        start_release(r); /* it waits for the scheduler's lock, which the bind holds */
        nap_ms(100);
    }
    return r->orig.log_bind(r->orig.ud, ns, name, uid, a, ann, ticket, e);
}

static int wrap_log_release(void *ud, const char *uid, void **ticket, struct gs_err *e)
{
    struct run *r = ud;
    return r->orig.log_release(r->orig.ud, uid, ticket, e);
}

static int wrap_durable(void *ud, void *ticket, struct gs_err *e)
{
    struct run *r = ud;
    int rc = r->orig.durable(r->orig.ud, ticket, e);
    /* the release fails with the bind and may return first: only the bind
     * rebinds, and only after the release is over */
    if (rc < 0 && pthread_equal(pthread_self(), r->binder) && r->rebind_on_fail) {
        /* between the failed flush and the bind's undo: the release has
         * failed with it; the pod is seen and bound again, and that bind
         * is kept */
        struct ext_reply reply;
        size_t len;
        r->rebind_on_fail = 0;
        join_release(r);
        if (ext_sched_filter(r->s, FILTER, strlen(FILTER), &reply) == 200) {
            free(ext_reply_take(&reply, &len));
            r->rebind_status = ext_sched_bind(r->s, BIND, strlen(BIND), &reply);
        }
        free(ext_reply_take(&reply, &len));
    }
    return rc;
}

static int open_run(struct run *r, const char *nodes, const char *state, int wrap,
                    struct gs_err *e)
{
    memset(r, 0, sizeof *r);
    int rc = ext_sched_new(&(struct ext_sched_opts){0}, &r->s, e);
    if (rc == 0 && (rc = ext_standalone_open(r->s, nodes, state, &r->st, e)) < 0) {
        ext_sched_free(r->s);
        r->s = NULL;
    }
    if (rc == 0 && wrap) {
        r->j = ext_standalone_journal(r->st);
        ext_journal_set_sync(r->j, held_sync, r);
        r->orig = r->s->commit;
        ext_sched_set_commit(r->s, &(struct ext_commit){.log_bind = wrap_log_bind,
                                                        .log_release = wrap_log_release,
                                                        .durable = wrap_durable, .ud = r});
    }
    return rc;
}

static void close_run(struct run *r)
{
    join_release(r);
    ext_standalone_close(r->st);
    ext_sched_free(r->s);
}

static int allocs_after_restart(const char *nodes, const char *state)
{
    struct gs_err e = GS_ERR_INIT;
    struct run r;
    int n = -1, a = -1;
    if (open_run(&r, nodes, state, 0, &e) < 0) {
        fprintf(stderr, "restart: %s\n", e.msg);
        return -1;
    }
    ext_sched_counts(r.s, &n, &a);
    close_run(&r);
    return a;
}

/* The journal's records as "op:uid op:uid ..." ("workload" alone: the
 * compaction's record of the pods that have ended). */
static int add_op(void *ud, const json_t *rec, struct gs_err *e)
{
    char *ops = ud;
    size_t n = strlen(ops);
    const char *uid = json_string_value(json_object_get(rec, "uid"));
    (void)e;
    snprintf(ops + n, 256 - n, "%s%s%s%s", n ? " " : "",
             json_string_value(json_object_get(rec, "op")), uid ? ":" : "", uid ? uid : "");
    return 0;
}

static void read_ops(const char *state, char ops[256])
{
    struct gs_err e = GS_ERR_INIT;
    int torn = 0;
    ops[0] = '\0';
    if (ext_journal_read(state, add_op, ops, &torn, &e) < 0)
        snprintf(ops, 256, "error: %.200s", e.msg);
}

static int do_bind(struct ext_sched *s)
{
    struct ext_reply reply;
    size_t len;
    if (ext_sched_filter(s, FILTER, strlen(FILTER), &reply) != 200)
        return -1;
    free(ext_reply_take(&reply, &len));
    int status = ext_sched_bind(s, BIND, strlen(BIND), &reply);
    free(ext_reply_take(&reply, &len));
    return status;
}

/* A release that races the bind's logging and comes during its flush. */
static void test_release_during_bind(const char *nodes, const char *state)
{
    struct gs_err e = GS_ERR_INIT;
    struct run r;
    char ops[256];
    int n, a;

    ASSERT_EQ(open_run(&r, nodes, state, 1, &e), 0);
    r.race_release = 1;
    ASSERT_EQ(do_bind(r.s), 200);
    join_release(&r);
    ASSERT_EQ(r.rel_rc, 0); /* the bind had reserved: the release found the pod */
    ext_sched_counts(r.s, &n, &a);
    ASSERT_EQ(a, 0);
    close_run(&r);
    read_ops(state, ops);
    ASSERT_STREQ(ops, "bind:u release:u");
    ASSERT_EQ(allocs_after_restart(nodes, state), 0);

    /* the release comes while the bind's record is being flushed */
    ASSERT_EQ(open_run(&r, nodes, state, 1, &e), 0);
    ASSERT_EQ(do_bind(r.s), 200);
    join_release(&r);
    ASSERT_EQ(r.rel_rc, 0);
    ASSERT_EQ(r.queued_at_sync, 1); /* it was queued behind the bind's batch */
    close_run(&r);
    read_ops(state, ops);
    /* the journal was compacted at the restart: the pod that ended is learned */
    ASSERT_STREQ(ops, "workload bind:u release:u");
    ASSERT_EQ(allocs_after_restart(nodes, state), 0);
}

/* The bind's flush fails: the release queued behind it fails with it, and
 * the bind's undo leaves alone the pod's next bind, made before the undo. */
static void test_failed_bind_then_release(const char *nodes, const char *state)
{
    struct gs_err e = GS_ERR_INIT;
    struct run r;
    char ops[256];
    int n, a;

    ASSERT_EQ(open_run(&r, nodes, state, 1, &e), 0);
    r.fail_first = 1;
    r.rebind_on_fail = 1;
    r.binder = pthread_self();
    ASSERT_EQ(do_bind(r.s), 500);
    ASSERT_EQ(r.queued_at_sync, 1);
    ASSERT_EQ(r.rel_rc, -GS_EIO);
    ASSERT_CONTAINS(r.rel_err.msg, "an earlier journal record failed");
    ASSERT_EQ(r.rebind_status, 200);
    ext_sched_counts(r.s, &n, &a);
    ASSERT_EQ(a, 1); /* the second bind's allocation: memory and journal agree */
    close_run(&r);
    read_ops(state, ops);
    ASSERT_STREQ(ops, "bind:u");
    ASSERT_EQ(allocs_after_restart(nodes, state), 1);
}

/* A release whose flush fails leaves the bind's record alone in the
 * journal; the pod bound anew adds a second bind record of the same uid.
 * A restart keeps the later bind (it used to refuse the journal: "already
 * holds an allocation"). */
static void test_lost_release_then_rebind(const char *nodes, const char *state)
{
    struct gs_err e = GS_ERR_INIT;
    struct run r;
    char ops[256];

    ASSERT_EQ(open_run(&r, nodes, state, 1, &e), 0);
    r.fail_at = 2;
    ASSERT_EQ(do_bind(r.s), 200);
    ASSERT_EQ(ext_sched_release(r.s, "u", &e), -GS_EIO);
    ASSERT_EQ(do_bind(r.s), 200);
    close_run(&r);
    read_ops(state, ops);
    ASSERT_STREQ(ops, "bind:u bind:u");
    ASSERT_EQ(allocs_after_restart(nodes, state), 1);
    read_ops(state, ops);
    /* compacted at the restart: the first placement of u ended */
    ASSERT_STREQ(ops, "workload bind:u");
}

/* A release whose flush fails is answered with the error and its GPUs are
 * free in memory; asked again, it writes its record then (it used to answer
 * "holds no GPUs" and the pod came back held after a restart). */
static void test_release_asked_again(const char *nodes, const char *state)
{
    struct gs_err e = GS_ERR_INIT;
    struct run r;
    char ops[256];
    int n, a;

    ASSERT_EQ(open_run(&r, nodes, state, 1, &e), 0);
    r.fail_at = 2;
    ASSERT_EQ(do_bind(r.s), 200);
    ASSERT_EQ(ext_sched_release(r.s, "d/p", &e), -GS_EIO);
    ext_sched_counts(r.s, &n, &a);
    ASSERT_EQ(a, 0);
    ASSERT_EQ(ext_sched_release(r.s, "d/p", &e), 0);
    ASSERT_EQ(ext_sched_release(r.s, "d/p", &e), -GS_ENOENT); /* once written, gone */
    close_run(&r);
    read_ops(state, ops);
    ASSERT_STREQ(ops, "bind:u release:u");
    ASSERT_EQ(allocs_after_restart(nodes, state), 0);
}

int test_ext_order(void)
{
    char dir[] = "/tmp/gs_order_XXXXXX", nodes[64], st1[64], st2[64], st3[64], st4[64];
    char cmd[128];
    if (!mkdtemp(dir))
        return 1;
    snprintf(nodes, sizeof nodes, "%s/nodes.json", dir);
    snprintf(st1, sizeof st1, "%s/s1", dir);
    snprintf(st2, sizeof st2, "%s/s2", dir);
    snprintf(st3, sizeof st3, "%s/s3", dir);
    snprintf(st4, sizeof st4, "%s/s4", dir);
    json_t *list = json_pack(
        "{s:[{s:{s:s, s:{s:s}}, s:{s:{s:s, s:s, s:s}}}]}", "items", "metadata", "name", "n",
        "annotations", "gpusched.io/gpu-inventory",
        "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"G0\",\"model\":\"A\","
        "\"memory_mib\":1000}]}",
        "status", "allocatable", "cpu", "8", "memory", "32Gi", "pods", "110");
    ASSERT_TRUE(list && json_dump_file(list, nodes, 0) == 0);
    json_decref(list);
    test_release_during_bind(nodes, st1);
    test_failed_bind_then_release(nodes, st2);
    test_lost_release_then_rebind(nodes, st3);
    test_release_asked_again(nodes, st4);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        test_failures++;
    return test_failures;
}
