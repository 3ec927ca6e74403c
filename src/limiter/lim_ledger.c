/*
 * limiter/lim_ledger.c - the shared per-container memory ledger (see
 * lim_ledger.h).
 */
#include "limiter/lim_ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Record-lock bytes live past the data, so they never overlap it. */
#define LOCK_GLOBAL ((off_t)1 << 30)
#define LOCK_SLOT(i) (LOCK_GLOBAL + 1 + (off_t)(i))

static size_t file_size_for(uint32_t n_slots)
{
    return sizeof(struct lim_ledger_hdr) + (size_t)n_slots * sizeof(struct lim_slot);
}

static int rlock(int fd, short type, off_t at, int wait)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
    int rc;
    do
        rc = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
    while (rc < 0 && errno == EINTR);
    return rc;
}

/* 1 when some other process holds the slot's byte, 0 when nobody does. */
static int slot_alive(int fd, int i)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LOCK_SLOT(i),
                       .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
        return 1; /* cannot tell: keep it */
    return fl.l_type != F_UNLCK;
}

int lim_ledger_check(const struct lim_ledger_hdr *h, size_t file_size, char *err, size_t errlen)
{
    if (file_size < sizeof *h)
        return snprintf(err, errlen, "%zu bytes is too small for a ledger header", file_size), -1;
    if (memcmp(h->magic, LIM_LEDGER_MAGIC, 8) != 0)
        return snprintf(err, errlen, "magic: not a gpusched ledger"), -1;
    if (h->major != LIM_LEDGER_MAJOR)
        return snprintf(err, errlen, "major: version %u, this limiter reads %u", h->major,
                        LIM_LEDGER_MAJOR), -1;
    if (h->hdr_size != sizeof *h || h->slot_size != sizeof(struct lim_slot) ||
        h->n_dev != LIM_MAX_DEV)
        return snprintf(err, errlen, "hdr_size/slot_size/n_dev: %u/%u/%u, expected %zu/%zu/%d",
                        h->hdr_size, h->slot_size, h->n_dev, sizeof *h, sizeof(struct lim_slot),
                        LIM_MAX_DEV), -1;
    if (h->n_slots < 1 || h->n_slots > 4096)
        return snprintf(err, errlen, "n_slots: %u is not in 1..4096", h->n_slots), -1;
    if (file_size < file_size_for(h->n_slots))
        return snprintf(err, errlen, "n_slots: %u slots need %zu bytes, the file has %zu",
                        h->n_slots, file_size_for(h->n_slots), file_size), -1;
    return 0;
}

static void init_hdr(struct lim_ledger_hdr *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, LIM_LEDGER_MAGIC, 8);
    h->major = LIM_LEDGER_MAJOR;
    h->minor = LIM_LEDGER_MINOR;
    h->hdr_size = sizeof *h;
    h->slot_size = sizeof(struct lim_slot);
    h->n_slots = LIM_LEDGER_SLOTS;
    h->n_dev = LIM_MAX_DEV;
}

static void set_limits(struct lim_ledger *l, const uint64_t *limits)
{
    for (int i = 0; limits && i < LIM_MAX_DEV; i++)
        l->h->limit[i] = limits[i];
}

static void base_init(struct lim_ledger *l)
{
    memset(l, 0, sizeof *l);
    l->fd = -1;
    l->priv = 0;
    l->my = -1;
    pthread_mutex_init(&l->mu, NULL);
}

int lim_ledger_open_private(struct lim_ledger *l, const uint64_t *limits)
{
    base_init(l);
    l->size = file_size_for(1);
    l->h = calloc(1, l->size);
    if (!l->h)
        return -1;
    init_hdr(l->h);
    l->priv = 1;
    l->h->n_slots = 1;
    l->slots = (struct lim_slot *)(l->h + 1);
    l->writable = 1;
    set_limits(l, limits);
    return 0;
}

/* l->fd's size when it is a regular file of a ledger's size; -1 with a
 * message otherwise. */
static off_t file_checked(struct lim_ledger *l, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (lim_fstat(l->fd, &st) < 0)
        return snprintf(err, errlen, "%s: %s", path, strerror(errno)), -1;
    if (!S_ISREG(st.st_mode))
        return snprintf(err, errlen, "%s: not a regular file", path), -1;
    if (st.st_size < (off_t)sizeof(struct lim_ledger_hdr) || st.st_size > (off_t)(1 << 24))
        return snprintf(err, errlen, "%s: size %lld is not a ledger's", path,
                        (long long)st.st_size), -1;
    return st.st_size;
}

/* The header at l->h (l->size bytes) checked, and l->slots set. */
static int header_checked(struct lim_ledger *l, const char *path, char *err, size_t errlen)
{
    char why[256];
    if (lim_ledger_check(l->h, l->size, why, sizeof why) < 0)
        return snprintf(err, errlen, "%s: %s", path, why), -1;
    l->slots = (struct lim_slot *)((char *)l->h + l->h->hdr_size);
    return 0;
}

static int map_checked(struct lim_ledger *l, const char *path, int prot, char *err, size_t errlen)
{
    off_t size = file_checked(l, path, err, errlen);
    if (size < 0)
        return -1;
    void *m = mmap(NULL, (size_t)size, prot, MAP_SHARED, l->fd, 0);
    if (m == MAP_FAILED)
        return snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno)), -1;
    l->h = m;
    l->size = (size_t)size;
    if (header_checked(l, path, err, errlen) < 0) {
        munmap(m, l->size);
        l->h = NULL;
        return -1;
    }
    return 0;
}

/* Opens the container's ledger, making it if it is not there. An existing
 * one is opened without O_CREAT: in a sticky world-writable directory the
 * kernel refuses O_CREAT on a file another user made (fs.protected_regular,
 * systemd's default), and the process would fall back to a ledger of its
 * own with the whole limit. A new one is made 0666 at once (the umask took
 * bits off); a user that opens it in between is refused a moment. */
static int open_shared(const char *path)
{
    for (int tries = 0;; tries++) {
        int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 && errno == ENOENT) {
            fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
            if (fd >= 0)
                (void)fchmod(fd, 0666);
            else if (errno == EEXIST && tries < 100)
                continue; /* made by another meanwhile */
        }
        if (fd < 0 && errno == EACCES && tries < 100) {
            nanosleep(&(struct timespec){0, 2 * 1000000L}, NULL); /* before its fchmod */
            continue;
        }
        return fd;
    }
}

/* A ledger that cannot be used (cut short, another major version, written
 * over) is moved to ledger.bad, under its global lock, so that the
 * container's processes share a new one: each held to the whole limit on
 * its own, N processes could use N limits. Only while the name still is
 * the file fd holds (another process may have replaced it already). 1 when
 * moved. */
static int move_aside(int fd, const char *path)
{
    struct stat a, b;
    char bad[LIM_DIR_MAX + 32];
    snprintf(bad, sizeof bad, "%s.bad", path);
    return lim_fstat(fd, &a) == 0 && lim_lstat(path, &b) == 0 && a.st_ino == b.st_ino &&
           a.st_dev == b.st_dev && rename(path, bad) == 0;
}

int lim_ledger_open(struct lim_ledger *l, const char *dir, const uint64_t *limits, char *err,
                    size_t errlen)
{
    char path[LIM_DIR_MAX + 16];
    struct stat st;
    int moved = 0;

again:
    base_init(l);
    snprintf(path, sizeof path, "%s/%s", dir, LIM_LEDGER_FILE);
    if (mkdir(dir, 01777) == 0)
        (void)chmod(dir, 01777); /* any user of the container may share it */
    snprintf(l->path, sizeof l->path, "%s", path);
    l->opened_by = getpid();
    l->fd = open_shared(path);
    if (l->fd < 0)
        return snprintf(err, errlen, "%s: %s", path, strerror(errno)), -1;
    l->writable = 1;
    if (rlock(l->fd, F_WRLCK, LOCK_GLOBAL, 1) < 0) {
        snprintf(err, errlen, "%s: lock: %s", path, strerror(errno));
        goto fail;
    }
    /* new, or left blank by a process that died between its ftruncate and
     * its header (else every later process would fall back to a ledger of
     * its own, each with the whole limit) */
    char magic[8] = {0};
    if (lim_fstat(l->fd, &st) == 0 &&
        (st.st_size == 0 || (pread(l->fd, magic, sizeof magic, 0) == (ssize_t)sizeof magic &&
                             !memcmp(magic, (char[8]){0}, sizeof magic)))) {
        struct lim_ledger_hdr h;
        init_hdr(&h);
        (void)fchmod(l->fd, 0666);
        if (ftruncate(l->fd, (off_t)file_size_for(h.n_slots)) < 0 ||
            pwrite(l->fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
            snprintf(err, errlen, "%s: cannot write the header: %s", path, strerror(errno));
            goto fail_unlock;
        }
    }
    if (map_checked(l, path, PROT_READ | PROT_WRITE, err, errlen) < 0) {
        if (!moved && move_aside(l->fd, path)) {
            rlock(l->fd, F_UNLCK, LOCK_GLOBAL, 0);
            close(l->fd);
            moved = 1;
            goto again; /* a new one, shared by every process from now on */
        }
        goto fail_unlock;
    }
    set_limits(l, limits);
    rlock(l->fd, F_UNLCK, LOCK_GLOBAL, 0);
    return moved; /* 1: err says why the old one was moved */
fail_unlock:
    rlock(l->fd, F_UNLCK, LOCK_GLOBAL, 0);
fail:
    close(l->fd);
    l->fd = -1;
    return -1;
}

int lim_ledger_open_ro(struct lim_ledger *l, const char *path, char *err, size_t errlen)
{
    base_init(l);
    snprintf(l->path, sizeof l->path, "%s", path);
    l->opened_by = getpid();
    /* the file is the container's to change: a FIFO must not block this
     * open, and what is read is a copy, checked once (a mapping would see
     * the header change under the reader, and a truncated file raise
     * SIGBUS); fd stays open for the slots' locks */
    l->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (l->fd < 0)
        return snprintf(err, errlen, "%s: %s", path, strerror(errno)), -1;
    l->copy = 1;
    off_t size = file_checked(l, path, err, errlen);
    if (size >= 0) {
        l->size = (size_t)size;
        if (!(l->h = malloc(l->size)))
            snprintf(err, errlen, "%s: out of memory", path);
        else if (pread(l->fd, l->h, l->size, 0) != (ssize_t)size)
            snprintf(err, errlen, "%s: short read", path);
        else if (header_checked(l, path, err, errlen) == 0)
            return 0;
    }
    lim_ledger_close(l);
    return -1;
}

void lim_ledger_close(struct lim_ledger *l)
{
    if (l->priv || l->copy)
        free(l->h);
    else if (l->h)
        munmap(l->h, l->size);
    if (!l->priv && l->fd >= 0)
        close(l->fd);
    pthread_mutex_destroy(&l->mu);
    l->h = NULL;
    l->slots = NULL;
    l->fd = -1;
}

void lim_ledger_forked(struct lim_ledger *l)
{
    if (!l->priv && l->fd >= 0 && l->opened_by != getpid()) {
        close(l->fd);
        l->fd = -1; /* reopened on next use */
    }
}

/* A forked child shares its parent's open file description, and with it
 * the parent's locks: it must see the file through a description of its
 * own before it looks at who is alive. */
static void own_description(struct lim_ledger *l)
{
    pid_t pid = getpid();
    if (l->priv || l->opened_by == pid)
        return;
    if (l->fd >= 0)
        close(l->fd);
    l->fd = open(l->path, (l->writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);
    l->opened_by = pid;
    if (l->fd < 0)
        l->writable = 0; /* the mapping still reads; nothing is written */
}

static void lock(struct lim_ledger *l)
{
    pthread_mutex_lock(&l->mu);
    own_description(l);
    if (!l->priv && l->fd >= 0 && l->writable)
        rlock(l->fd, F_WRLCK, LOCK_GLOBAL, 1);
}

static void unlock(struct lim_ledger *l)
{
    if (!l->priv && l->fd >= 0 && l->writable)
        rlock(l->fd, F_UNLCK, LOCK_GLOBAL, 0);
    pthread_mutex_unlock(&l->mu);
}

/* Under lock: zero the slots of processes that died (or of this process's
 * image before an exec, whose lock went with its descriptor). */
static void reclaim(struct lim_ledger *l)
{
    if (l->priv || l->fd < 0 || !l->writable)
        return;
    for (uint32_t i = 0; i < l->h->n_slots; i++) {
        struct lim_slot *s = &l->slots[i];
        if (!s->in_use || (int)i == l->my)
            continue;
        if (!slot_alive(l->fd, (int)i))
            memset(s, 0, sizeof *s);
    }
}

/* Under lock: this process's slot, claiming one when it has none (or when
 * it is a forked child still pointing at its parent's). */
static struct lim_slot *mine(struct lim_ledger *l)
{
    pid_t pid = getpid();
    if (l->my >= 0 && l->my_pid == pid)
        return &l->slots[l->my];
    l->my = -1;
    if (l->priv) {
        l->my = 0;
    } else if (l->fd < 0) {
        return NULL;
    } else {
        for (uint32_t i = 0; i < l->h->n_slots && l->my < 0; i++)
            if (!l->slots[i].in_use && rlock(l->fd, F_WRLCK, LOCK_SLOT(i), 0) == 0)
                l->my = (int)i;
        if (l->my < 0)
            return NULL;
    }
    struct lim_slot *s = &l->slots[l->my];
    memset(s, 0, sizeof *s);
    s->pid = (int32_t)pid;
    s->pidns = lim_pidns_self();
    s->in_use = 1;
    l->my_pid = pid;
    return s;
}

static uint64_t sum(const struct lim_ledger *l, int dev)
{
    uint64_t t = 0;
    for (uint32_t i = 0; i < l->h->n_slots; i++)
        if (l->slots[i].in_use && (l->writable || slot_alive(l->fd, (int)i)))
            t += l->slots[i].used[dev];
    return t;
}

int lim_ledger_reserve(struct lim_ledger *l, int dev, uint64_t bytes, uint64_t limit)
{
    int rc;
    if (dev < 0 || dev >= LIM_MAX_DEV || !l->writable)
        return -1;
    lock(l);
    reclaim(l);
    struct lim_slot *s = mine(l);
    uint64_t used = sum(l, dev);
    if (!s)
        rc = -1;
    else if (bytes > limit || used > limit - bytes)
        rc = 1;
    else {
        s->used[dev] += bytes;
        rc = 0;
    }
    unlock(l);
    return rc;
}

void lim_ledger_release(struct lim_ledger *l, int dev, uint64_t bytes)
{
    if (dev < 0 || dev >= LIM_MAX_DEV || !l->writable)
        return;
    lock(l);
    struct lim_slot *s = mine(l);
    if (s)
        s->used[dev] -= bytes < s->used[dev] ? bytes : s->used[dev];
    unlock(l);
}

uint64_t lim_ledger_used(struct lim_ledger *l, int dev)
{
    uint64_t t;
    if (dev < 0 || dev >= LIM_MAX_DEV)
        return 0;
    lock(l);
    reclaim(l);
    t = sum(l, dev);
    unlock(l);
    return t;
}

int lim_ledger_procs(struct lim_ledger *l)
{
    int n = 0;
    lock(l);
    reclaim(l);
    for (uint32_t i = 0; i < l->h->n_slots; i++)
        n += l->slots[i].in_use && ((int)i == l->my || slot_alive(l->fd, (int)i));
    unlock(l);
    return n;
}

int lim_ledger_claim(struct lim_ledger *l)
{
    if (!l->writable)
        return -1;
    lock(l);
    reclaim(l);
    int rc = mine(l) ? 0 : -1;
    unlock(l);
    return rc;
}

void lim_ledger_foreach_proc(struct lim_ledger *l, void (*fn)(void *ud, uint64_t pidns, int pid),
                             void *ud)
{
    lock(l);
    for (uint32_t i = 0; i < l->h->n_slots; i++) {
        const struct lim_slot *s = &l->slots[i];
        if (s->in_use && s->pidns && ((int)i == l->my || slot_alive(l->fd, (int)i)))
            fn(ud, s->pidns, s->pid);
    }
    unlock(l);
}

uint64_t lim_pidns_self(void) { return lim_pidns("/proc/self/ns/pid"); }

uint64_t lim_pidns(const char *path)
{
    char buf[64];
    ssize_t n = readlink(path, buf, sizeof buf - 1);
    if (n <= 0)
        return 0;
    buf[n] = '\0'; /* "pid:[4026531836]" */
    const char *p = strchr(buf, '[');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}
