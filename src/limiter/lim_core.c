/*
 * limiter/lim_core.c - the limiter's state: configuration read once, the
 * shared ledger opened on first use, the table of live allocations, and the
 * one-time warnings (see lim.h).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "limiter/lim.h"
#include "limiter/lim_ledger.h"

static struct lim_state g_state;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static pthread_once_t g_ledger_once = PTHREAD_ONCE_INIT;
static struct lim_ledger g_ledger;
static int g_ledger_ok;
static int g_warned[LIM_W_MAX];

void lim_warn_once(int key, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    if (key < 0 || key >= LIM_W_MAX || __atomic_exchange_n(&g_warned[key], 1, __ATOMIC_ACQ_REL))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one write, so lines of several processes do not interleave */
    char line[440];
    int n = snprintf(line, sizeof line, "gpusched-limiter: %s\n", msg);
    if (n > 0)
        (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* The limits file Allocate writes in the container's ledger directory
 * (LIM_LIMITS_FILE: the same KEY=VALUE the environment gets): a process
 * started with an environment of its own (sshd's for an MPI worker, sudo,
 * env -i) finds its limits there. An environment that sets any limit, or
 * the GPUs, is used alone. */
static char g_file[4096];
static const char *g_file_kv[16][2];
static int g_file_n;

extern char **environ;

/* Whether the environment sets a limit or the GPUs: then it says all, and
 * the file is not read (a mix of the two could say what neither does). */
static int env_has_limits(void)
{
    static const char *const keys[] = {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT=",
                                       "GPUSCHED_GPU_MILLI=", "GPUSCHED_GPU_UUIDS="};
    for (char **e = environ; e && *e; e++)
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            if (strncmp(*e, keys[i], strlen(keys[i])) == 0)
                return 1;
    return 0;
}

static void limits_file_read(void)
{
    char path[LIM_DIR_MAX + 32];
    const char *dir = getenv("GPUSCHED_LIMITER_DIR");
    if (env_has_limits())
        return;
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : LIM_MOUNT_DIR, LIM_LIMITS_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (fd < 0)
        return;
    ssize_t n = lim_fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
                    ? read(fd, g_file, sizeof g_file - 1)
                    : -1;
    close(fd);
    if (n <= 0 || (size_t)n == sizeof g_file - 1) /* unreadable, or too long to be ours */
        return;
    g_file[n] = '\0';
    for (char *line = g_file, *next; line && g_file_n < 16; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *eq = strchr(line, '=');
        if (!eq || eq == line)
            continue;
        *eq = '\0';
        g_file_kv[g_file_n][0] = line;
        g_file_kv[g_file_n++][1] = eq + 1;
    }
    /* found at the mount point: that is the ledger's directory too */
    if (!(dir && *dir) && g_file_n < 16) {
        g_file_kv[g_file_n][0] = "GPUSCHED_LIMITER_DIR";
        g_file_kv[g_file_n++][1] = LIM_MOUNT_DIR;
    }
}

static const char *get_env(const char *name, void *arg)
{
    (void)arg;
    const char *v = getenv(name);
    for (int i = 0; !v && i < g_file_n; i++)
        if (strcmp(g_file_kv[i][0], name) == 0)
            v = g_file_kv[i][1];
    return v;
}

static void env_init(void)
{
    char err[200];
    limits_file_read();
    if (lim_env_parse(&g_state.cfg, get_env, NULL, err, sizeof err) < 0) {
        lim_warn_once(LIM_W_ENV, "%s; limits are off in this process", err);
        return;
    }
    g_state.active = g_state.cfg.mem_on || g_state.cfg.milli > 0;
}

const struct lim_state *lim_state(void)
{
    pthread_once(&g_env_once, env_init);
    return &g_state;
}

/* fork while another thread holds the ledger's mutex must not leave the
 * child with a mutex nobody will release */
static pthread_mutex_t g_track_mu = PTHREAD_MUTEX_INITIALIZER;
/* Bytes of this process the ledger could not record (no free slot: more
 * than LIM_LEDGER_SLOTS processes; a forked child that could not open it
 * again): counted here, so the process is still held to the limit, with
 * what the ledger shows of the others. */
static uint64_t g_own[LIM_MAX_DEV];
static pthread_mutex_t g_own_mu = PTHREAD_MUTEX_INITIALIZER;
static void fork_prepare(void)
{
    pthread_mutex_lock(&g_ledger.mu);
    pthread_mutex_lock(&g_track_mu);
    pthread_mutex_lock(&g_own_mu);
}
static void fork_parent(void)
{
    pthread_mutex_unlock(&g_own_mu);
    pthread_mutex_unlock(&g_track_mu);
    pthread_mutex_unlock(&g_ledger.mu);
}
static void fork_child(void)
{
    lim_ledger_forked(&g_ledger);
    memset(g_own, 0, sizeof g_own); /* the parent's, not the child's */
    fork_parent();
}

static void ledger_init(void)
{
    char err[300];
    const struct lim_state *s = lim_state();
    int rc = lim_ledger_open(&g_ledger, s->cfg.dir, s->cfg.mem_limit, err, sizeof err);
    if (rc == 1)
        lim_warn_once(LIM_W_LEDGER, "shared ledger unusable (%s); moved to ledger.bad, a new "
                      "one made", err);
    if (rc < 0) {
        lim_warn_once(LIM_W_LEDGER, "shared ledger unusable (%s); this process is held to the "
                      "limit on its own", err);
        if (lim_ledger_open_private(&g_ledger, s->cfg.mem_limit) < 0)
            return;
    }
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    g_ledger_ok = 1;
}

static struct lim_ledger *ledger(void)
{
    pthread_once(&g_ledger_once, ledger_init);
    return g_ledger_ok ? &g_ledger : NULL;
}

uint64_t lim_mem_limit(int dev)
{
    const struct lim_state *s = lim_state();
    if (!s->active || dev < 0 || dev >= LIM_MAX_DEV)
        return 0;
    return s->cfg.mem_limit[dev];
}

int lim_mem_reserve(int dev, uint64_t bytes)
{
    uint64_t lim = lim_mem_limit(dev);
    struct lim_ledger *l;
    if (!lim || !(l = ledger()))
        return -1;
    int rc = lim_ledger_reserve(l, dev, bytes, lim);
    if (rc >= 0)
        return rc;
    lim_warn_once(LIM_W_SLOTS, "the shared ledger cannot record this process (no free slot "
                  "of %d, or it could not be opened again after fork); this process counts "
                  "its own allocations beside what the ledger shows", LIM_LEDGER_SLOTS);
    uint64_t others = lim_ledger_used(l, dev);
    pthread_mutex_lock(&g_own_mu);
    uint64_t used = others + g_own[dev];
    rc = bytes > lim || used > lim - bytes || used < others;
    if (!rc)
        g_own[dev] += bytes;
    pthread_mutex_unlock(&g_own_mu);
    return rc;
}

void lim_mem_undo(int dev, uint64_t bytes)
{
    struct lim_ledger *l;
    if (!lim_mem_limit(dev) || !(l = ledger()))
        return;
    pthread_mutex_lock(&g_own_mu);
    uint64_t own = g_own[dev] < bytes ? g_own[dev] : bytes;
    g_own[dev] -= own;
    pthread_mutex_unlock(&g_own_mu);
    if (bytes > own)
        lim_ledger_release(l, dev, bytes - own);
}

void lim_proc_register(void)
{
    struct lim_ledger *l = ledger();
    if (l && !l->priv)
        lim_ledger_claim(l);
}

uint64_t lim_mem_used(int dev)
{
    struct lim_ledger *l;
    if (!lim_mem_limit(dev) || !(l = ledger()))
        return 0;
    pthread_mutex_lock(&g_own_mu);
    uint64_t own = g_own[dev];
    pthread_mutex_unlock(&g_own_mu);
    return lim_ledger_used(l, dev) + own;
}

/* ---- devices: the container's numbering ------------------------------- */

/* The UUID CUDA gives device ord, as NVML and Allocate write it
 * ("GPU-8-4-4-4-12" in lowercase hex), or "". */
static void cuda_uuid(CUdevice ord, char *out, size_t cap)
{
    typedef CUresult (*uuid_fn)(unsigned char *, CUdevice);
    uuid_fn f = (uuid_fn)lim_sym("cuDeviceGetUuid_v2", 0);
    unsigned char u[16];
    out[0] = '\0';
    if (!f)
        f = (uuid_fn)lim_sym("cuDeviceGetUuid", 0);
    if (!f || f(u, ord) != CUDA_SUCCESS)
        return;
    snprintf(out, cap,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

int lim_uuid_index(const char *uuid)
{
    const struct lim_state *s = lim_state();
    for (int i = 0; uuid && *uuid && i < s->cfg.n_uuids; i++)
        if (strcasecmp(uuid, s->cfg.uuids[i]) == 0)
            return i;
    return -1;
}

/* Per CUDA ordinal of this process, its device index + 1 (0: not known
 * yet): a process's ordinals are fixed once CUDA has started. */
static int g_index[LIM_MAX_DEV];

int lim_dev_index(CUdevice ord)
{
    if (ord < 0 || ord >= LIM_MAX_DEV)
        return -1;
    int i = __atomic_load_n(&g_index[ord], __ATOMIC_ACQUIRE);
    if (i)
        return i - 1;
    if (!lim_state()->cfg.n_uuids) {
        i = ord; /* no list (an older plugin): CUDA's numbering */
    } else {
        char u[80];
        cuda_uuid(ord, u, sizeof u);
        i = lim_uuid_index(u);
        if (i < 0) {
            lim_warn_once(LIM_W_UUID, "CUDA device %d (%s) is not one of the container's GPUs "
                          "(GPUSCHED_GPU_UUIDS); counted as device %d", ord,
                          u[0] ? u : "no UUID", ord);
            i = ord;
        }
    }
    __atomic_store_n(&g_index[ord], i + 1, __ATOMIC_RELEASE);
    return i;
}

int lim_cur_dev(CUdevice *dev)
{
    CUresult (*get)(CUdevice *) = (CUresult(*)(CUdevice *))lim_helper(LIM_H_cuCtxGetDevice);
    CUdevice ord = -1;
    *dev = -1;
    if (!get || get(&ord) != CUDA_SUCCESS || (*dev = lim_dev_index(ord)) < 0)
        return -1;
    return 0;
}

/* ---- live allocations: open addressing on (kind, key) ------------------ */

struct track_ent {
    uint64_t key;
    uint64_t bytes;
    uint64_t aux;
    int kind; /* 0 = empty, -1 = deleted */
    int dev;
    int refs;
};

static struct track_ent *g_tab;
static size_t g_cap, g_len, g_tomb;

static size_t slot_of(int kind, uint64_t key, size_t cap)
{
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 20) & (cap - 1);
}

static int grow(void)
{
    size_t ncap = g_cap ? g_cap * 2 : 1024;
    if (g_len * 2 < g_cap)
        ncap = g_cap; /* mostly tombstones: rehash in place size */
    struct track_ent *n = calloc(ncap, sizeof *n);
    if (!n)
        return -1;
    for (size_t i = 0; i < g_cap; i++) {
        if (g_tab[i].kind <= 0)
            continue;
        size_t j = slot_of(g_tab[i].kind, g_tab[i].key, ncap);
        while (n[j].kind)
            j = (j + 1) & (ncap - 1);
        n[j] = g_tab[i];
    }
    free(g_tab);
    g_tab = n;
    g_cap = ncap;
    g_tomb = 0;
    return 0;
}

/* The slot of (kind, key), or -1; under g_track_mu. */
static long find_locked(int kind, uint64_t key)
{
    if (!g_cap)
        return -1;
    size_t j = slot_of(kind, key, g_cap);
    while (g_tab[j].kind) {
        if (g_tab[j].kind == kind && g_tab[j].key == key)
            return (long)j;
        j = (j + 1) & (g_cap - 1);
    }
    return -1;
}

static void drop_locked(size_t j)
{
    g_tab[j].kind = -1;
    g_len--;
    g_tomb++;
}

void lim_track_put(int kind, uint64_t key, int dev, uint64_t bytes, uint64_t aux)
{
    pthread_mutex_lock(&g_track_mu);
    if ((g_len + g_tomb + 1) * 4 >= g_cap * 3 && grow() < 0) {
        pthread_mutex_unlock(&g_track_mu);
        lim_warn_once(LIM_W_TRACK, "out of memory tracking allocations; some frees will not "
                      "be credited");
        return;
    }
    size_t j = slot_of(kind, key, g_cap);
    while (g_tab[j].kind > 0 && !(g_tab[j].kind == kind && g_tab[j].key == key))
        j = (j + 1) & (g_cap - 1);
    if (g_tab[j].kind <= 0) {
        if (g_tab[j].kind < 0)
            g_tomb--;
        g_len++;
    }
    g_tab[j] = (struct track_ent){key, bytes, aux, kind, dev, 1};
    pthread_mutex_unlock(&g_track_mu);
}

int lim_track_take(int kind, uint64_t key, int *dev, uint64_t *bytes, uint64_t *aux)
{
    pthread_mutex_lock(&g_track_mu);
    long j = find_locked(kind, key);
    if (j >= 0) {
        *dev = g_tab[j].dev;
        *bytes = g_tab[j].bytes;
        if (aux)
            *aux = g_tab[j].aux;
        drop_locked((size_t)j);
    }
    pthread_mutex_unlock(&g_track_mu);
    return j >= 0;
}

int lim_track_ref(int kind, uint64_t key, int delta, int *dev, uint64_t *bytes)
{
    int r = -1;
    pthread_mutex_lock(&g_track_mu);
    long j = find_locked(kind, key);
    if (j >= 0) {
        g_tab[j].refs += delta;
        r = g_tab[j].refs > 0 ? 0 : 1;
        if (r == 1) {
            if (dev)
                *dev = g_tab[j].dev;
            if (bytes)
                *bytes = g_tab[j].bytes;
            drop_locked((size_t)j);
        }
    }
    pthread_mutex_unlock(&g_track_mu);
    return r;
}
