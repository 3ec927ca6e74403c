/*
 * tests/unit/test_ext_journal.c - the journal's group commit (ext/journal.h):
 * concurrent appends share flushes, each returns only once a flush covered
 * its record, and the file keeps every thread's order; a failed flush fails
 * every append of its batch and leaves none of its records in the file; a
 * failed cut makes the journal refuse writes; a crash in the middle of a
 * batch loses no record whose append had returned; records keep the order
 * they were queued in (ext_journal_queue), and a failed batch fails the
 * records queued behind it.
 *
 * The disk is wrapped through ext_journal_set_sync(): the hook sees the file
 * at each flush, so "on disk" here means "in the file when a flush that
 * covered it succeeded".
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ext/journal.h"
#include "test.h"

enum { THREADS = 8, PER_THREAD = 40 };

static void nap(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* The wrapped disk: what the flushes saw, and what the test wants them to do. */
struct disk {
    pthread_mutex_t mu;
    struct ext_journal *j;
    char path[512];         /* the journal file */
    off_t durable;          /* its size at the last good flush */
    int calls, undo_calls;  /* flushes, and cuts after a failed one */
    long delay_us;          /* every flush takes this long */
    int fail_call;          /* this flush (1-based) fails with EIO; 0 = none */
    int fail_undo;          /* the cut after a failed flush fails too */
    int gate_call;          /* this flush waits until gate_queued records are queued */
    int gate_queued;
    const char *crash_path; /* at fail_call: the file as a crash would leave it */
    int crashed;
};

static int queued(struct ext_journal *j)
{
    struct ext_journal_stats st;
    ext_journal_stats(j, &st);
    return st.queued;
}

/* Copies the first keep bytes of from to to: 0, or -1. */
static int copy_cut(const char *from, const char *to, off_t keep)
{
    char buf[1 << 16];
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    off_t left = keep;
    ssize_t n = 0;
    while (in >= 0 && out >= 0 && left > 0 &&
           (n = read(in, buf, (size_t)(left < (off_t)sizeof buf ? left : (off_t)sizeof buf))) > 0 &&
           write(out, buf, (size_t)n) == n)
        left -= n;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return left == 0 ? 0 : -1;
}

static int wrapped_sync(void *ud, int fd, int undo)
{
    struct disk *d = ud;
    struct stat sb;
    int call;

    pthread_mutex_lock(&d->mu);
    if (undo) {
        d->undo_calls++;
        int fail = d->fail_undo;
        pthread_mutex_unlock(&d->mu);
        if (fail) {
            errno = EIO;
            return -1;
        }
        return fdatasync(fd);
    }
    call = ++d->calls;
    pthread_mutex_unlock(&d->mu);
    if (call == d->gate_call) /* hold this batch until the next one has gathered */
        for (int i = 0; i < 20000 && queued(d->j) < d->gate_queued; i++)
            nap(500);
    if (d->delay_us)
        nap(d->delay_us);
    if (fstat(fd, &sb) < 0)
        return -1;
    if (call == d->fail_call) {
        if (d->crash_path) { /* the machine dies now, half of the batch written */
            pthread_mutex_lock(&d->mu);
            if (copy_cut(d->path, d->crash_path, d->durable + (sb.st_size - d->durable) / 2) < 0)
                d->crashed = -1;
            else
                d->crashed = 1;
            pthread_mutex_unlock(&d->mu);
        }
        errno = EIO;
        return -1;
    }
    if (fdatasync(fd) < 0)
        return -1;
    pthread_mutex_lock(&d->mu);
    if (sb.st_size > d->durable)
        d->durable = sb.st_size;
    pthread_mutex_unlock(&d->mu);
    return 0;
}

static int disk_open(struct disk *d, const char *dir, struct gs_err *e)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    snprintf(d->path, sizeof d->path, "%s/journal", dir);
    int rc = ext_journal_open(dir, &d->j, e);
    if (rc == 0)
        ext_journal_set_sync(d->j, wrapped_sync, d);
    return rc;
}

static void disk_close(struct disk *d)
{
    ext_journal_close(d->j);
    pthread_mutex_destroy(&d->mu);
}

/* Is the line "<crc> {"k":"KEY"}\n" within the first `upto` bytes of path? */
static int in_file(const char *path, const char *key, off_t upto)
{
    char needle[96];
    int fd = open(path, O_RDONLY), found = 0;
    char *buf = upto > 0 ? malloc((size_t)upto + 1) : NULL;
    ssize_t n = buf && fd >= 0 ? pread(fd, buf, (size_t)upto, 0) : -1;
    if (n >= 0) {
        buf[n] = '\0';
        snprintf(needle, sizeof needle, " {\"k\":\"%s\"}\n", key);
        found = strstr(buf, needle) != NULL;
    }
    free(buf);
    if (fd >= 0)
        close(fd);
    return found;
}

struct worker {
    struct disk *d;
    int t, n;
    int ok, failed, not_flushed; /* appends that returned 0 / failed / 0 but not in a flush */
    int answered[PER_THREAD];    /* returned 0 before the crash */
    struct gs_err last;
};

static void *append_loop(void *ud)
{
    struct worker *w = ud;
    for (int i = 0; i < w->n; i++) {
        char key[32];
        struct gs_err e = GS_ERR_INIT;
        snprintf(key, sizeof key, "t%d-i%d", w->t, i);
        json_t *rec = json_pack("{s:s}", "k", key);
        int rc = ext_journal_append(w->d->j, rec, &e);
        json_decref(rec);
        if (rc < 0) {
            w->failed++;
            w->last = e;
            continue;
        }
        w->ok++;
        pthread_mutex_lock(&w->d->mu);
        off_t durable = w->d->durable;
        if (!w->d->crashed)
            w->answered[i] = 1;
        pthread_mutex_unlock(&w->d->mu);
        if (!in_file(w->d->path, key, durable))
            w->not_flushed++;
    }
    return NULL;
}

/* Replay: seen[t][i] per key, and each thread's keys in increasing order. */
struct seen {
    int n, out_of_order, bad;
    int last[THREADS];
    char got[THREADS][PER_THREAD];
};

static int see(void *ud, const json_t *rec, struct gs_err *e)
{
    struct seen *s = ud;
    int t, i;
    (void)e;
    const char *k = json_string_value(json_object_get(rec, "k"));
    if (!k || sscanf(k, "t%d-i%d", &t, &i) != 2 || t < 0 || t >= THREADS || i < 0 ||
        i >= PER_THREAD) {
        s->bad++;
        return 0;
    }
    s->n++;
    if (s->got[t][i] || i < s->last[t])
        s->out_of_order++;
    s->got[t][i] = 1;
    s->last[t] = i;
    return 0;
}

static int replay_dir(const char *dir, struct seen *s, int *torn)
{
    struct ext_journal *j;
    struct gs_err e = GS_ERR_INIT;
    memset(s, 0, sizeof *s);
    int rc = ext_journal_open(dir, &j, &e);
    if (rc == 0)
        rc = ext_journal_replay(j, see, s, torn, &e);
    if (rc < 0)
        fprintf(stderr, "replay %s: %s\n", dir, e.msg);
    ext_journal_close(j);
    return rc;
}

/* N threads append at once: every append returns after a flush that covered
 * its record, the flushes are shared, and replay gives every record once,
 * each thread's in its order. */
static void test_group(const char *dir)
{
    struct gs_err e = GS_ERR_INIT;
    struct disk d;
    struct worker w[THREADS];
    pthread_t th[THREADS];
    struct ext_journal_stats st;
    struct seen s;
    int torn = 0;

    ASSERT_EQ(disk_open(&d, dir, &e), 0);
    d.delay_us = 2000;
    for (int t = 0; t < THREADS; t++) {
        w[t] = (struct worker){.d = &d, .t = t, .n = PER_THREAD};
        ASSERT_EQ(pthread_create(&th[t], NULL, append_loop, &w[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        ASSERT_EQ(w[t].ok, PER_THREAD);
        ASSERT_EQ(w[t].not_flushed, 0);
    }
    ext_journal_stats(d.j, &st);
    ASSERT_EQ(st.records, THREADS * PER_THREAD);
    ASSERT_EQ(st.flushes, d.calls);
    ASSERT_EQ(st.failed, 0);
    ASSERT_EQ(st.queued, 0);
    /* 8 writers and a 2 ms disk: batches of several records */
    ASSERT_TRUE(st.flushes <= THREADS * PER_THREAD / 2);
    disk_close(&d);
    ASSERT_EQ(replay_dir(dir, &s, &torn), 0);
    ASSERT_EQ(s.n, THREADS * PER_THREAD);
    ASSERT_EQ(s.out_of_order, 0);
    ASSERT_EQ(s.bad, 0);
    ASSERT_EQ(torn, 0);
}

static void *one_append(void *ud)
{
    struct worker *w = ud;
    w->n = 1;
    return append_loop(w);
}

/* A failed flush fails every append of its batch, none of its records stays
 * in the file, and the journal goes on; a failed cut stops it for good. */
static void test_failed_batch(const char *dir)
{
    struct gs_err e = GS_ERR_INIT;
    struct disk d;
    struct worker w[6];
    pthread_t th[6];
    struct ext_journal_stats st;
    struct seen s;
    int torn = 0;

    ASSERT_EQ(disk_open(&d, dir, &e), 0);
    d.gate_call = 1; /* batch 1 (one record) waits until batch 2 holds 5 */
    d.gate_queued = 5;
    d.fail_call = 2;
    for (int t = 0; t < 6; t++) {
        w[t] = (struct worker){.d = &d, .t = t};
        ASSERT_EQ(pthread_create(&th[t], NULL, one_append, &w[t]), 0);
        for (int i = 0; t == 0 && i < 20000; i++) { /* thread 0 flushes alone first */
            pthread_mutex_lock(&d.mu);
            int started = d.calls;
            pthread_mutex_unlock(&d.mu);
            if (started)
                break;
            nap(500);
        }
    }
    for (int t = 0; t < 6; t++)
        pthread_join(th[t], NULL);
    ASSERT_EQ(w[0].ok, 1);
    for (int t = 1; t < 6; t++) {
        ASSERT_EQ(w[t].failed, 1);
        ASSERT_EQ(w[t].last.code, GS_EIO);
        ASSERT_CONTAINS(w[t].last.msg, "fdatasync of 5 records failed");
        ASSERT_CONTAINS(w[t].last.msg, "none of them was kept");
    }
    struct stat sb;
    ASSERT_EQ(stat(d.path, &sb), 0);
    ASSERT_EQ(sb.st_size, d.durable); /* the failed batch was cut off */
    ASSERT_EQ(d.undo_calls, 1);
    ext_journal_stats(d.j, &st);
    ASSERT_EQ(st.records, 1);
    ASSERT_EQ(st.failed, 1);
    ASSERT_EQ(st.unusable, 0);
    /* the journal goes on after a failure it could undo */
    w[0] = (struct worker){.d = &d, .t = 0, .n = 2};
    append_loop(&w[0]);
    ASSERT_EQ(w[0].ok, 2);
    /* a failed flush whose cut fails too: every later append is refused */
    d.fail_call = d.calls + 1;
    d.fail_undo = 1;
    w[1] = (struct worker){.d = &d, .t = 1, .n = 2};
    append_loop(&w[1]);
    ASSERT_EQ(w[1].failed, 2);
    ASSERT_CONTAINS(w[1].last.msg, "unusable");
    ASSERT_EQ(d.calls, d.fail_call); /* the second was refused without writing */
    ext_journal_stats(d.j, &st);
    ASSERT_EQ(st.unusable, 1);
    ASSERT_EQ(st.failed, 2); /* the refused one never reached a batch */
    disk_close(&d);
    ASSERT_EQ(replay_dir(dir, &s, &torn), 0);
    ASSERT_EQ(s.n, 3); /* the first record, then the two after the undone batch */
    ASSERT_TRUE(s.got[0][0] && s.got[0][1] && !s.got[1][0]);
}

/* The file as a crash in the middle of a batch leaves it (half of the batch
 * written, the last record torn): replay has every record whose append had
 * returned before the crash. */
static void test_crash_mid_batch(const char *dir, const char *crash_dir)
{
    struct gs_err e = GS_ERR_INIT;
    struct disk d;
    struct worker w[THREADS];
    pthread_t th[THREADS];
    struct seen s;
    char crash_path[600];
    int torn = 0, answered = 0, lost = 0;

    ASSERT_EQ(disk_open(&d, dir, &e), 0);
    ASSERT_EQ(mkdir(crash_dir, 0750), 0);
    snprintf(crash_path, sizeof crash_path, "%s/journal", crash_dir);
    d.delay_us = 1000;
    d.fail_call = 12;
    d.crash_path = crash_path;
    for (int t = 0; t < THREADS; t++) {
        w[t] = (struct worker){.d = &d, .t = t, .n = PER_THREAD};
        ASSERT_EQ(pthread_create(&th[t], NULL, append_loop, &w[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    ASSERT_EQ(d.crashed, 1);
    disk_close(&d);
    ASSERT_EQ(replay_dir(crash_dir, &s, &torn), 0);
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < PER_THREAD; i++) {
            answered += w[t].answered[i];
            lost += w[t].answered[i] && !s.got[t][i];
        }
    ASSERT_TRUE(answered > 0);
    ASSERT_EQ(lost, 0);
    ASSERT_EQ(s.out_of_order, 0);
    ASSERT_TRUE(s.n >= answered);
}

/* Records keep the order they were queued in, whatever order their callers
 * wait in; a failed batch fails the records queued behind it while it was
 * written, and none of them reaches the file. */
static void test_queue_order(const char *dir)
{
    struct gs_err e = GS_ERR_INIT;
    struct disk d;
    struct ext_journal_ticket *t[3];
    struct seen s;
    int torn = 0;
    const char *keys[3] = {"t0-i0", "t0-i1", "t0-i2"};

    ASSERT_EQ(disk_open(&d, dir, &e), 0);
    for (int i = 0; i < 3; i++) {
        json_t *rec = json_pack("{s:s}", "k", keys[i]);
        ASSERT_EQ(ext_journal_queue(d.j, rec, &t[i], &e), 0);
        json_decref(rec);
    }
    ASSERT_EQ(queued(d.j), 3);
    for (int i = 2; i >= 0; i--) /* the last waits first: it flushes all three, in order */
        ASSERT_EQ(ext_journal_wait(d.j, t[i], &e), 0);
    ASSERT_EQ(d.calls, 1);
    /* batch 2 (one record) fails while record 3 queues behind it */
    d.fail_call = 2;
    d.gate_call = 2;
    d.gate_queued = 1;
    struct worker w = {.d = &d, .t = 1};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, one_append, &w), 0);
    for (int i = 0; i < 20000; i++) { /* until thread 1's flush (batch 2) has started */
        pthread_mutex_lock(&d.mu);
        int started = d.calls >= 2;
        pthread_mutex_unlock(&d.mu);
        if (started)
            break;
        nap(500);
    }
    json_t *rec = json_pack("{s:s}", "k", "t2-i0");
    ASSERT_EQ(ext_journal_queue(d.j, rec, &t[0], &e), 0);
    json_decref(rec);
    ASSERT_EQ(ext_journal_wait(d.j, t[0], &e), -GS_EIO);
    ASSERT_CONTAINS(e.msg, "an earlier journal record failed");
    pthread_join(th, NULL);
    ASSERT_EQ(w.failed, 1);
    ASSERT_EQ(d.calls, 2); /* the record behind it was never written */
    disk_close(&d);
    ASSERT_EQ(replay_dir(dir, &s, &torn), 0);
    ASSERT_EQ(s.n, 3);
    ASSERT_EQ(s.out_of_order, 0);
    ASSERT_TRUE(!s.got[1][0] && !s.got[2][0]);
}

int test_ext_journal(void)
{
    char dir[] = "/tmp/gs_journal_XXXXXX", sub[5][64], cmd[128];
    if (!mkdtemp(dir))
        return 1;
    for (int i = 0; i < 5; i++)
        snprintf(sub[i], sizeof sub[i], "%s/%d", dir, i);
    test_group(sub[0]);
    test_failed_batch(sub[1]);
    test_crash_mid_batch(sub[2], sub[3]);
    test_queue_order(sub[4]);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        test_failures++;
    return test_failures;
}
