/* ext/journal.c - see journal.h. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ext/journal.h"
#include "util/buf.h"

/* One queued record's outcome, owned by the journal until its batch is
 * done and then by the caller, who frees it in ext_journal_wait(). */
struct ext_journal_ticket {
    struct ext_journal_ticket *next;
    int done, rc;
    struct gs_err err;
};

struct ext_journal {
    char *dir, *path;
    int fd;
    pthread_mutex_t mu;       /* everything below */
    pthread_cond_t cv;        /* a batch finished */
    struct gs_buf queued;     /* encoded records waiting for the next batch */
    struct ext_journal_ticket *head, **tail; /* their callers, in the same order */
    int nqueued;
    int flushing;             /* a flusher is writing a batch (without mu) */
    int unusable;             /* a failed batch could not be cut back */
    char why[sizeof(struct gs_err){0}.msg]; /* ... and why */
    struct ext_journal_stats stats;
    ext_journal_sync_fn sync;
    void *sync_ud;
};

uint32_t ext_crc32(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint32_t crc = 0xffffffffu;
    while (len--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int ext_journal_open(const char *dir, struct ext_journal **out, struct gs_err *e)
{
    struct ext_journal *j = calloc(1, sizeof *j);
    if (!j)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->tail = &j->head;
    j->fd = -1;
    if (mkdir(dir, 0750) < 0 && errno != EEXIST) {
        int rc = gs_errf(e, GS_EIO, "state dir %s: %s", dir, strerror(errno));
        ext_journal_close(j);
        return rc;
    }
    j->dir = strdup(dir);
    if (asprintf(&j->path, "%s/journal", dir) < 0)
        j->path = NULL;
    if (!j->dir || !j->path) {
        ext_journal_close(j);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    if ((j->fd = open(j->path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0640)) < 0) {
        int rc = gs_errf(e, GS_EIO, "%s: %s", j->path, strerror(errno));
        j->fd = -1;
        ext_journal_close(j);
        return rc;
    }
    *out = j;
    return 0;
}

void ext_journal_close(struct ext_journal *j)
{
    if (!j)
        return;
    if (j->fd >= 0)
        close(j->fd);
    gs_buf_free(&j->queued);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j->dir);
    free(j->path);
    free(j);
}

/* Checks one line (without '\n'): returns the parsed record or NULL. */
static json_t *decode(const char *line, size_t len)
{
    char hex[9];
    char *end;
    if (len < 10 || line[8] != ' ')
        return NULL;
    memcpy(hex, line, 8);
    hex[8] = '\0';
    unsigned long crc = strtoul(hex, &end, 16);
    if (*end || crc != ext_crc32(line + 9, len - 9))
        return NULL;
    return json_loadb(line + 9, len - 9, JSON_ALLOW_NUL, NULL);
}

/* Hands every good record of `path` to fn in order; *good: the offset
 * after the last one. */
static int read_records(const char *path, ext_journal_fn fn, void *ud, int *torn, long *good,
                        struct gs_err *e)
{
    FILE *f = fopen(path, "rb");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int rc = 0;

    *torn = 0;
    *good = 0;
    if (!f)
        return gs_errf(e, GS_EIO, "%s: %s", path, strerror(errno));
    while ((n = getline(&line, &cap, f)) > 0) {
        int complete = line[n - 1] == '\n';
        json_t *rec;
        lineno++;
        if ((size_t)n > EXT_JOURNAL_MAX_RECORD + 10) {
            rc = gs_errf(e, GS_EINVAL, "%s:%ld: record longer than %u bytes", path, lineno,
                         EXT_JOURNAL_MAX_RECORD);
            break;
        }
        rec = complete ? decode(line, (size_t)n - 1) : NULL;
        if (!rec) {
            int c = fgetc(f);
            if (c != EOF) {
                rc = gs_errf(e, GS_EINVAL, "%s:%ld: damaged record (bad checksum or JSON) "
                                           "before the end of the journal", path, lineno);
                break;
            }
            *torn = 1; /* the last record was cut short: drop it */
            break;
        }
        rc = fn(ud, rec, e);
        json_decref(rec);
        if (rc < 0) {
            gs_err_prefix(e, "%s:%ld", path, lineno);
            break;
        }
        *good = ftell(f);
    }
    free(line);
    fclose(f);
    return rc;
}

int ext_journal_replay(struct ext_journal *j, ext_journal_fn fn, void *ud, int *torn,
                       struct gs_err *e)
{
    long good;
    int rc = read_records(j->path, fn, ud, torn, &good, e);
    if (rc == 0 && *torn && ftruncate(j->fd, good) < 0)
        return gs_errf(e, GS_EIO, "%s: cannot cut the torn record: %s", j->path, strerror(errno));
    return rc;
}

int ext_journal_read(const char *dir, ext_journal_fn fn, void *ud, int *torn, struct gs_err *e)
{
    char path[4096];
    long good;
    if ((size_t)snprintf(path, sizeof path, "%s/journal", dir) >= sizeof path)
        return gs_errf(e, GS_EINVAL, "state dir path is too long");
    return read_records(path, fn, ud, torn, &good, e);
}

static char *encode(const json_t *rec, size_t *len, struct gs_err *e)
{
    char *js = json_dumps(rec, JSON_COMPACT), *out = NULL;
    if (!js) {
        gs_errf(e, GS_ENOMEM, "cannot encode a journal record");
        return NULL;
    }
    if (strlen(js) > EXT_JOURNAL_MAX_RECORD) {
        free(js);
        gs_errf(e, GS_ETOOBIG, "journal record larger than %u bytes", EXT_JOURNAL_MAX_RECORD);
        return NULL;
    }
    int n = asprintf(&out, "%08x %s\n", ext_crc32(js, strlen(js)), js);
    free(js);
    if (n < 0) {
        gs_errf(e, GS_ENOMEM, "out of memory");
        return NULL;
    }
    *len = (size_t)n;
    return out;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The flush in force (a test's, or fdatasync), copied under mu. */
struct syncer {
    ext_journal_sync_fn fn;
    void *ud;
};

static int sync_fd(const struct syncer *s, int fd, int undo)
{
    return s->fn ? s->fn(s->ud, fd, undo) : fdatasync(fd);
}

/* Writes and flushes one batch (called without mu, by the one flusher).
 * On failure cuts the file back to where the batch began; sets *unusable
 * when that fails too. */
static int flush_batch(struct ext_journal *j, const struct syncer *sy, const char *buf,
                       size_t len, int n, int *unusable, struct gs_err *e)
{
    off_t start = lseek(j->fd, 0, SEEK_END);
    const char *what = "write";
    if (start < 0)
        return gs_errf(e, GS_EIO, "%s: %s", j->path, strerror(errno));
    if (write_all(j->fd, buf, len) == 0) {
        what = "fdatasync";
        if (sync_fd(sy, j->fd, 0) == 0)
            return 0;
    }
    int err = errno;
    if (ftruncate(j->fd, start) < 0 || sync_fd(sy, j->fd, 1) < 0) {
        *unusable = 1;
        return gs_errf(e, GS_EIO, "%s: %s of %d record%s failed (%s), and cutting them back "
                       "failed too (%s): the journal refuses writes until a restart",
                       j->path, what, n, n == 1 ? "" : "s", strerror(err), strerror(errno));
    }
    return gs_errf(e, GS_EIO, "%s: %s of %d record%s failed (%s); none of them was kept",
                   j->path, what, n, n == 1 ? "" : "s", strerror(err));
}

/* Marks a list of waiters done with rc (and err when it failed). */
static void finish(struct ext_journal_ticket *w, int rc, const struct gs_err *err)
{
    for (; w; w = w->next) {
        w->rc = rc;
        if (rc < 0)
            w->err = *err;
        w->done = 1;
    }
}

/* Called with mu held and no flush under way: flushes everything queued
 * (dropping mu meanwhile) and finishes its waiters. */
static void flush_queued(struct ext_journal *j)
{
    struct gs_buf batch = j->queued;
    struct ext_journal_ticket *w = j->head;
    struct gs_err err = GS_ERR_INIT;
    struct syncer sy = {j->sync, j->sync_ud};
    int n = 0, unusable = 0, dead = j->unusable;

    memset(&j->queued, 0, sizeof j->queued);
    j->nqueued = 0;
    j->head = NULL;
    j->tail = &j->head;
    for (struct ext_journal_ticket *x = w; x; x = x->next)
        n++;
    j->flushing = 1;
    pthread_mutex_unlock(&j->mu);
    int rc;
    if (dead) /* queued while the batch before failed for good */
        rc = gs_errf(&err, GS_EIO, "journal unusable since an earlier failure: %s", j->why);
    else if (batch.oom)
        rc = gs_errf(&err, GS_ENOMEM, "out of memory queueing journal records");
    else
        rc = flush_batch(j, &sy, batch.buf, batch.len, n, &unusable, &err);
    gs_buf_free(&batch);
    pthread_mutex_lock(&j->mu);
    j->flushing = 0;
    if (rc == 0) {
        j->stats.flushes++;
        j->stats.records += (unsigned long long)n;
    } else {
        j->stats.failed++;
    }
    if (unusable && !j->unusable) {
        j->unusable = j->stats.unusable = 1;
        snprintf(j->why, sizeof j->why, "%s", err.msg);
    }
    finish(w, rc, &err);
    if (rc < 0 && j->head) {
        /* records queued while this batch was being written were placed
         * after it: the scheduler changed its state on top of the failed
         * records, so they fail with them (and are never written) */
        struct gs_err later = GS_ERR_INIT;
        gs_errf(&later, GS_EIO, "an earlier journal record failed: %s", err.msg);
        finish(j->head, rc, &later);
        gs_buf_free(&j->queued);
        memset(&j->queued, 0, sizeof j->queued);
        j->nqueued = 0;
        j->head = NULL;
        j->tail = &j->head;
    }
    pthread_cond_broadcast(&j->cv);
}

int ext_journal_queue(struct ext_journal *j, const json_t *rec, struct ext_journal_ticket **out,
                      struct gs_err *e)
{
    size_t len;
    char *buf = encode(rec, &len, e);
    struct ext_journal_ticket *me;
    *out = NULL;
    if (!buf)
        return e && e->code ? -e->code : -GS_ENOMEM;
    if (!(me = calloc(1, sizeof *me))) {
        free(buf);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&j->mu);
    if (j->unusable) {
        pthread_mutex_unlock(&j->mu);
        free(buf);
        free(me);
        return gs_errf(e, GS_EIO, "journal unusable since an earlier failure: %s", j->why);
    }
    gs_buf_put(&j->queued, buf, len); /* its place in the file, fixed now */
    free(buf);
    *j->tail = me;
    j->tail = &me->next;
    j->nqueued++;
    pthread_mutex_unlock(&j->mu);
    *out = me;
    return 0;
}

int ext_journal_wait(struct ext_journal *j, struct ext_journal_ticket *t, struct gs_err *e)
{
    int rc;
    pthread_mutex_lock(&j->mu);
    while (!t->done) {
        if (!j->flushing)
            flush_queued(j); /* ours is in it: the first waiter flushes for all */
        else
            pthread_cond_wait(&j->cv, &j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    rc = t->rc;
    if (rc < 0 && e)
        *e = t->err;
    free(t);
    return rc;
}

int ext_journal_append(struct ext_journal *j, const json_t *rec, struct gs_err *e)
{
    struct ext_journal_ticket *t;
    int rc = ext_journal_queue(j, rec, &t, e);
    return rc < 0 ? rc : ext_journal_wait(j, t, e);
}

void ext_journal_stats(struct ext_journal *j, struct ext_journal_stats *out)
{
    pthread_mutex_lock(&j->mu);
    *out = j->stats;
    out->queued = j->nqueued;
    pthread_mutex_unlock(&j->mu);
}

void ext_journal_set_sync(struct ext_journal *j, ext_journal_sync_fn fn, void *ud)
{
    pthread_mutex_lock(&j->mu);
    j->sync = fn;
    j->sync_ud = ud;
    pthread_mutex_unlock(&j->mu);
}

int ext_journal_rewrite(struct ext_journal *j, json_t *const *recs, int n, struct gs_err *e)
{
    char *tmp = NULL;
    int fd, rc = 0;

    if (asprintf(&tmp, "%s.tmp", j->path) < 0)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640)) < 0) {
        rc = gs_errf(e, GS_EIO, "%s: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        size_t len;
        char *buf = encode(recs[i], &len, e);
        if (!buf)
            rc = -GS_ENOMEM;
        else if (write_all(fd, buf, len) < 0)
            rc = gs_errf(e, GS_EIO, "%s: %s", tmp, strerror(errno));
        free(buf);
    }
    if (rc == 0 && fsync(fd) < 0)
        rc = gs_errf(e, GS_EIO, "%s: %s", tmp, strerror(errno));
    close(fd);
    if (rc == 0 && rename(tmp, j->path) < 0)
        rc = gs_errf(e, GS_EIO, "%s: %s", j->path, strerror(errno));
    if (rc < 0) {
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    fsync_dir(j->dir);
    close(j->fd);
    if ((j->fd = open(j->path, O_RDWR | O_APPEND | O_CLOEXEC)) < 0)
        return gs_errf(e, GS_EIO, "%s: %s", j->path, strerror(errno));
    return 0;
}
