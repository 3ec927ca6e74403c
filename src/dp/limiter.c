/* dp/limiter.c - see limiter.h. */
#include "dp/limiter.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <stdlib.h>

#include "limiter/lim_ledger.h"
#include "limiter/lim_util.h"

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

FILE *dp_limiter_fopen(const char *path)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    FILE *f = NULL;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        f = fdopen(fd, "r");
    if (!f && fd >= 0)
        close(fd);
    return f;
}

/* Writes a file through <path>.tmp and a rename. The ledger directory is
 * the container's to write: a <path>.tmp it left (a link to a file of the
 * host's) is removed, never followed, and one it makes meanwhile fails
 * the create (O_EXCL). */
static int put_file(const char *path, int src_fd, const char *text, mode_t mode, struct gs_err *e)
{
    char tmp[800];
    char buf[65536];
    int rc = 0;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return gs_errf(e, GS_EIO, "%s: %s", tmp, strerror(errno));
    if (text) {
        rc = write_all(fd, text, strlen(text));
    } else {
        ssize_t n;
        while (!rc && (n = read(src_fd, buf, sizeof buf)) != 0)
            rc = n < 0 ? (errno == EINTR ? 0 : -1) : write_all(fd, buf, (size_t)n);
    }
    if (fchmod(fd, mode) < 0 || close(fd) < 0)
        rc = -1;
    if (rc || rename(tmp, path) < 0) {
        int err = errno;
        unlink(tmp);
        return gs_errf(e, GS_EIO, "%s: %s", path, strerror(err));
    }
    return 0;
}

int dp_limiter_install(const char *dir, const char *lib_src, struct gs_err *e)
{
    char path[700];
    if (strlen(dir) > 400)
        return gs_errf(e, GS_EINVAL, "--limiter-dir: longer than 400 characters");
    int src = open(lib_src, O_RDONLY | O_CLOEXEC);
    if (src < 0)
        return gs_errf(e, GS_ENOENT, "limiter library %s: %s", lib_src, strerror(errno));
    snprintf(path, sizeof path, "%s/%s", dir, DP_LIM_LIB);
    int rc = put_file(path, src, NULL, 0755, e);
    close(src);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/ld.so.preload", dir);
    if ((rc = put_file(path, -1, DP_LIM_CTR_LIB "\n", 0644, e)))
        return rc;
    snprintf(path, sizeof path, "%s/containers", dir);
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return gs_errf(e, GS_EIO, "%s: %s", path, strerror(errno));
    return 0;
}

static int safe_name(const char *s)
{
    if (!*s || strlen(s) > 253 || s[0] == '.')
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '.' || *s == '_'))
            return 0;
    return 1;
}

int dp_limiter_container(const char *dir, const char *uid, const char *ns, const char *pod,
                         const char *container, int n_gpus, const char (*uuids)[DP_UUID_MAX],
                         const char *limits, struct dp_limiter_mount m[DP_LIM_MOUNTS],
                         struct gs_err *e)
{
    char cdir[700], owner[800];
    if (!safe_name(uid) || !safe_name(container) || strlen(uid) > 64)
        return gs_errf(e, GS_EINVAL, "pod %s/%s: uid '%.64s' or container '%.64s' cannot name "
                       "a ledger directory", ns, pod, uid, container);
    snprintf(cdir, sizeof cdir, "%s/containers/%s_%s", dir, uid, container);
    if (mkdir(cdir, 01777) < 0 && errno != EEXIST)
        return gs_errf(e, GS_EIO, "%s: %s", cdir, strerror(errno));
    /* any user the container runs as must create and lock its ledger */
    if (chmod(cdir, 01777) < 0)
        return gs_errf(e, GS_EIO, "%s: %s", cdir, strerror(errno));
    snprintf(owner, sizeof owner, "%s/owner", cdir);
    char who[800 + DP_MAX_GPUS * DP_UUID_MAX];
    int w = snprintf(who, sizeof who, "%s/%s/%s\n%d\n", ns, pod, container, n_gpus);
    for (int i = 0; uuids && i < n_gpus && i < DP_MAX_GPUS && w < (int)sizeof who; i++)
        w += snprintf(who + w, sizeof who - (size_t)w, "%s%s%s", i ? "," : "", uuids[i],
                      i == n_gpus - 1 || i == DP_MAX_GPUS - 1 ? "\n" : "");
    int rc = put_file(owner, -1, who, 0644, e);
    if (rc)
        return rc;
    if (limits) {
        snprintf(owner, sizeof owner, "%s/%s", cdir, LIM_LIMITS_FILE);
        if ((rc = put_file(owner, -1, limits, 0644, e)))
            return rc;
    }
    snprintf(m[0].host, sizeof m[0].host, "%s/%s", dir, DP_LIM_LIB);
    snprintf(m[0].container, sizeof m[0].container, "%s", DP_LIM_CTR_LIB);
    m[0].read_only = 1;
    snprintf(m[1].host, sizeof m[1].host, "%s/ld.so.preload", dir);
    snprintf(m[1].container, sizeof m[1].container, "/etc/ld.so.preload");
    m[1].read_only = 1;
    snprintf(m[2].host, sizeof m[2].host, "%s", cdir);
    snprintf(m[2].container, sizeof m[2].container, "%s", DP_LIM_CTR_LEDGER);
    m[2].read_only = 0;
    return 0;
}

int dp_limiter_scan(const char *dir, void (*fn)(void *ud, const struct dp_limiter_usage *u),
                    void *ud, int *bad)
{
    char path[1100], err[300];
    int n = 0;
    struct dirent *de;
    snprintf(path, sizeof path, "%s/containers", dir);
    DIR *d = opendir(path);
    if (bad)
        *bad = 0;
    if (!d)
        return 0;
    while ((de = readdir(d))) {
        struct lim_ledger l;
        struct dp_limiter_usage u;
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/containers/%.300s/ledger", dir, de->d_name);
        if (access(path, F_OK) != 0)
            continue; /* no CUDA process has run yet */
        if (lim_ledger_open_ro(&l, path, err, sizeof err) < 0) {
            if (bad)
                (*bad)++;
            continue;
        }
        n++;
        memset(&u, 0, sizeof u);
        snprintf(path, sizeof path, "%s/containers/%.300s/owner", dir, de->d_name);
        FILE *f = dp_limiter_fopen(path);
        char line[32];
        int devs = LIM_MAX_DEV;
        if (!f || !fgets(u.owner, sizeof u.owner, f))
            snprintf(u.owner, sizeof u.owner, "%.300s", de->d_name);
        else if (fgets(line, sizeof line, f) && (devs = atoi(line)) < 1)
            devs = LIM_MAX_DEV;
        if (f)
            fclose(f);
        u.owner[strcspn(u.owner, "\n")] = '\0';
        u.procs = lim_ledger_procs(&l);
        struct lim_util ut;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        snprintf(path, sizeof path, "%s/containers/%.300s", dir, de->d_name);
        int have_ut = lim_util_read(path, &ut) == 0;
        for (int i = 0; i < LIM_MAX_DEV; i++) {
            u.dev = i;
            u.limit = l.h->limit[i];
            u.used = lim_ledger_used(&l, i);
            u.util = have_ut && ut.dev[i].stamp_ns &&
                             (double)now.tv_sec + now.tv_nsec / 1e9 -
                                     (double)ut.dev[i].stamp_ns / 1e9 < DP_UTIL_FRESH_S
                         ? (int)(((ut.dev[i].avg_ppm > 1000000 ? 1000000 : ut.dev[i].avg_ppm) + 500) / 1000)
                         : -1;
            if (i < devs || u.used)
                fn(ud, &u);
        }
        lim_ledger_close(&l);
    }
    closedir(d);
    return n;
}

/* Removes what directory fd holds, and directories in it down to depth
 * levels (a container can nest them without end; deeper ones stay, and so
 * does everything above them). Links are removed, never followed. Takes
 * fd. */
static void empty_dir(int fd, int depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (unlinkat(fd, de->d_name, 0) == 0 || errno != EISDIR || depth <= 0)
            continue;
        int sub = openat(fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) {
            empty_dir(sub, depth - 1);
            unlinkat(fd, de->d_name, AT_REMOVEDIR);
        }
    }
    closedir(d);
}

/* How deep remove_ctr_dir goes into directories a container made. */
#define CTR_DIR_DEPTH 8

/* Removes a container's directory and what is in it: the ledger and owner,
 * the util file the busy thread writes (and its temporary), whatever the
 * container left there, directories too (CTR_DIR_DEPTH deep). 0 when it
 * is gone. */
static int remove_ctr_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    empty_dir(fd, CTR_DIR_DEPTH);
    return rmdir(path);
}

int dp_limiter_prune(const char *dir, char *const *uids, int n, int min_age_s)
{
    char path[1100], err[300];
    int removed = 0;
    struct dirent *de;
    snprintf(path, sizeof path, "%s/containers", dir);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    while ((de = readdir(d))) {
        const char *us = strchr(de->d_name, '_');
        struct stat st;
        int keep = de->d_name[0] == '.' || !us;
        for (int i = 0; i < n && !keep; i++)
            keep = strlen(uids[i]) == (size_t)(us - de->d_name) &&
                   strncmp(uids[i], de->d_name, (size_t)(us - de->d_name)) == 0;
        snprintf(path, sizeof path, "%s/containers/%.300s", dir, de->d_name);
        /* min_age_s 0 takes even a directory made this instant: a file's
         * fine-grained mtime can be a second ahead of time(NULL) */
        if (keep || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) ||
            (min_age_s > 0 && time(NULL) - st.st_mtime < min_age_s))
            continue;
        struct lim_ledger l;
        snprintf(path, sizeof path, "%s/containers/%.300s/ledger", dir, de->d_name);
        if (lim_ledger_open_ro(&l, path, err, sizeof err) == 0) {
            int live = lim_ledger_procs(&l);
            lim_ledger_close(&l);
            if (live)
                continue; /* a process outlived its pod's listing: later */
        }
        snprintf(path, sizeof path, "%s/containers/%.300s", dir, de->d_name);
        removed += remove_ctr_dir(path) == 0;
    }
    closedir(d);
    return removed;
}

struct usage_rows {
    struct dp_limiter_usage *r;
    int n;
};

static void add_row(void *ud, const struct dp_limiter_usage *u)
{
    struct usage_rows *ur = ud;
    if (ur->n < DP_LIM_USAGE_MAX && dp_limiter_has_memory(u))
        ur->r[ur->n++] = *u;
}

static int cmp_row(const void *a, const void *b)
{
    const struct dp_limiter_usage *x = a, *y = b;
    int c = strcmp(x->owner, y->owner);
    return c ? c : x->dev - y->dev;
}

char *dp_limiter_usage_json(const char *dir, const char *now)
{
    struct usage_rows ur = {calloc(DP_LIM_USAGE_MAX, sizeof *ur.r), 0};
    if (!ur.r)
        return NULL;
    dp_limiter_scan(dir, add_row, &ur, NULL);
    qsort(ur.r, (size_t)ur.n, sizeof *ur.r, cmp_row);
    json_t *rows = json_array();
    for (int i = 0; rows && i < ur.n; i++)
        json_array_append_new(rows, json_pack("{s:s, s:i, s:I, s:I, s:i}", "container",
                                              ur.r[i].owner, "device", ur.r[i].dev, "used_mib",
                                              (json_int_t)((ur.r[i].used + (1 << 20) - 1) >> 20),
                                              "limit_mib", (json_int_t)(ur.r[i].limit >> 20),
                                              "procs", ur.r[i].procs));
    free(ur.r);
    json_t *doc = rows ? json_pack("{s:s, s:o}", "updated_at", now, "containers", rows) : NULL;
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    return s;
}
