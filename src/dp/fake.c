/*
 * dp/fake.c - the fake GPU backend: GPUs described in a JSON file.
 *
 * For tests and for trying the plugin where there is no GPU. The file is
 * re-read whenever its size or mtime changes, so a test (or a person) can
 * append an XID to a GPU's "xids", mark it "lost" (XID 79, probes fail),
 * make its re-probes fail, or add and remove GPUs while the plugin runs.
 * A file that turns unreadable or invalid while running is ignored (the last
 * good state stays) and reported once per change. Format: see
 * docs/device-plugin.md and dp_fake_parse() below.
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "dp/gpu.h"
#include "util/buf.h"
#include "util/log.h"

#define FAKE_MAX_FILE (1 << 20)
#define FAKE_MAX_PENDING 64

struct fake {
    struct dp_backend b;
    char *path;
    struct stat last;           /* size + mtime of the last read */
    pthread_mutex_t mu;         /* st: proc_util runs on another thread */
    struct dp_fake_state st;    /* last good parse */
    struct dp_event pending[FAKE_MAX_PENDING];
    int n_pending;
};

/* ---- parsing -------------------------------------------------------------- */

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long def,
                   long long *out, const char *where, struct gs_err *e)
{
    json_t *v = json_object_get(o, key);

    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v))
        return gs_errf(e, GS_EINVAL, "%s.%s: must be an integer", where, key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return gs_errf(e, GS_EINVAL, "%s.%s: %lld is out of range %lld..%lld", where, key, x, lo,
                       hi);
    *out = x;
    return 0;
}

static int get_str(json_t *o, const char *key, int required, char *dst, size_t cap,
                   const char *where, struct gs_err *e)
{
    json_t *v = json_object_get(o, key);

    if (!v) {
        if (required)
            return gs_errf(e, GS_EINVAL, "%s.%s: missing", where, key);
        return 0;
    }
    if (!json_is_string(v))
        return gs_errf(e, GS_EINVAL, "%s.%s: must be a string", where, key);
    const char *s = json_string_value(v);
    if (!*s || strlen(s) >= cap)
        return gs_errf(e, GS_EINVAL, "%s.%s: must be 1..%zu characters", where, key, cap - 1);
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == ',')
            return gs_errf(e, GS_EINVAL, "%s.%s: control character or ',' in '%s'", where, key,
                           s);
    snprintf(dst, cap, "%s", s);
    return 0;
}

static int get_bool(json_t *o, const char *key, int *out, const char *where, struct gs_err *e)
{
    json_t *v = json_object_get(o, key);

    *out = 0;
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return gs_errf(e, GS_EINVAL, "%s.%s: must be true or false", where, key);
    *out = json_is_true(v);
    return 0;
}

/* An "xids" array of at most max XIDs into out[], *n. */
static int parse_xids(const json_t *v, uint64_t *out, int max, int *n, const char *w,
                      struct gs_err *e)
{
    size_t k;
    json_t *xv;
    if (!json_is_array(v) || json_array_size(v) > (size_t)max)
        return gs_errf(e, GS_EINVAL, "%s.xids: must be an array of at most %d integers", w, max);
    json_array_foreach(v, k, xv) {
        if (!json_is_integer(xv) || json_integer_value(xv) < 0 ||
            json_integer_value(xv) > 100000)
            return gs_errf(e, GS_EINVAL, "%s.xids[%zu]: must be an integer 0..100000", w, k);
        out[k] = (uint64_t)json_integer_value(xv);
    }
    *n = (int)json_array_size(v);
    return 0;
}

static int parse_mig(json_t *arr, struct dp_fake_state *st, int gpu, const char *where,
                     struct gs_err *e)
{
    struct dp_gpu *g = &st->inv.gpu[gpu];
    const json_t *xs;
    char w[96];
    size_t i;
    json_t *m;

    if (!json_is_array(arr))
        return gs_errf(e, GS_EINVAL, "%s.mig: must be an array", where);
    if (json_array_size(arr) > DP_MAX_MIG)
        return gs_errf(e, GS_EINVAL, "%s.mig: more than %d instances", where, DP_MAX_MIG);
    json_array_foreach(arr, i, m) {
        struct dp_mig *mi = &g->mig[i];
        long long x = 0;
        snprintf(w, sizeof w, "%s.mig[%zu]", where, i);
        if (!json_is_object(m))
            return gs_errf(e, GS_EINVAL, "%s: must be an object", w);
        if (get_str(m, "uuid", 1, mi->uuid, sizeof mi->uuid, w, e) ||
            get_str(m, "profile", 1, mi->profile, sizeof mi->profile, w, e) ||
            get_int(m, "memory_mib", 1, 10000000, 0, &x, w, e))
            return -GS_EINVAL;
        if (!json_object_get(m, "memory_mib"))
            return gs_errf(e, GS_EINVAL, "%s.memory_mib: missing", w);
        mi->memory_mib = x;
        if (get_int(m, "gi", 0, 1000, (long long)i + 1, &x, w, e))
            return -GS_EINVAL;
        mi->gi = (unsigned)x;
        if (get_int(m, "ci", 0, 1000, 0, &x, w, e))
            return -GS_EINVAL;
        mi->ci = (unsigned)x;
        mi->healthy = 1;
        if ((xs = json_object_get(m, "xids")) &&
            parse_xids(xs, st->mig_xids[gpu][i], 8, &st->mig_nxid[gpu][i], w, e))
            return -GS_EINVAL;
        for (size_t j = 0; j < i; j++)
            if (strcmp(g->mig[j].uuid, mi->uuid) == 0)
                return gs_errf(e, GS_EINVAL, "%s.uuid: '%s' appears twice", w, mi->uuid);
        g->n_mig++;
    }
    return 0;
}

static int parse_links(json_t *arr, struct dp_fake_state *st, int gi, int n, const char *where,
                       struct gs_err *e)
{
    char w[96];
    size_t i;
    json_t *l;
    struct dp_gpu *g = &st->inv.gpu[gi];

    if (!json_is_array(arr))
        return gs_errf(e, GS_EINVAL, "%s.links: must be an array", where);
    json_array_foreach(arr, i, l) {
        long long peer = 0, nv = 0;
        char type[16];
        snprintf(w, sizeof w, "%s.links[%zu]", where, i);
        if (!json_is_object(l))
            return gs_errf(e, GS_EINVAL, "%s: must be an object", w);
        if (!json_object_get(l, "gpu"))
            return gs_errf(e, GS_EINVAL, "%s.gpu: missing", w);
        if (get_int(l, "gpu", 0, n - 1, 0, &peer, w, e) ||
            get_str(l, "type", 1, type, sizeof type, w, e) ||
            get_int(l, "nvlinks", 0, 64, 0, &nv, w, e))
            return -GS_EINVAL;
        if (peer == gi)
            return gs_errf(e, GS_EINVAL, "%s.gpu: a GPU has no link to itself", w);
        int t = core_link_parse(type);
        if (t < 0)
            return gs_errf(e, GS_EINVAL,
                           "%s.type: '%s' is not one of nvlink, pix, pxb, phb, node, sys", w, type);
        if (t == CORE_LINK_NVLINK && nv == 0)
            nv = 1;
        /* Links are symmetric: either side may describe one. */
        g->link[peer] = (uint8_t)t;
        g->nvlinks[peer] = (int)nv;
        st->inv.gpu[peer].link[gi] = (uint8_t)t;
        st->inv.gpu[peer].nvlinks[gi] = (int)nv;
    }
    return 0;
}

static int parse_gpu(json_t *o, struct dp_fake_state *st, int i, int n, struct gs_err *e)
{
    char w[32];
    long long x = 0;
    struct dp_gpu *g = &st->inv.gpu[i];
    json_t *v;

    snprintf(w, sizeof w, "gpus[%d]", i);
    if (!json_is_object(o))
        return gs_errf(e, GS_EINVAL, "%s: must be an object", w);
    if (get_str(o, "uuid", 1, g->uuid, sizeof g->uuid, w, e) ||
        get_str(o, "name", 1, g->model, sizeof g->model, w, e))
        return -GS_EINVAL;
    if (!json_object_get(o, "memory_mib"))
        return gs_errf(e, GS_EINVAL, "%s.memory_mib: missing", w);
    if (get_int(o, "memory_mib", 1, 10000000, 0, &x, w, e))
        return -GS_EINVAL;
    g->memory_mib = x;
    if (get_int(o, "numa_node", -1, 1023, -1, &x, w, e))
        return -GS_EINVAL;
    g->numa_node = (int)x;
    if (get_int(o, "index", 0, DP_MAX_GPUS - 1, i, &x, w, e))
        return -GS_EINVAL;
    g->index = (int)x;
    if (get_int(o, "minor", 0, 255, g->index, &x, w, e))
        return -GS_EINVAL;
    g->minor = (int)x;
    snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "00000000:%02X:00.0", 0x10 + i);
    if (get_str(o, "pci_bus_id", 0, g->pci_bus_id, sizeof g->pci_bus_id, w, e))
        return -GS_EINVAL;
    if ((v = json_object_get(o, "mig")) && parse_mig(v, st, i, w, e))
        return -GS_EINVAL;
    if (get_bool(o, "mig_enabled", &g->mig_enabled, w, e))
        return -GS_EINVAL;
    if (g->n_mig)
        g->mig_enabled = 1;
    if ((v = json_object_get(o, "links")) && parse_links(v, st, i, n, w, e))
        return -GS_EINVAL;
    if ((v = json_object_get(o, "xids")) && parse_xids(v, st->xids[i], 16, &st->nxid[i], w, e))
        return -GS_EINVAL;
    if ((v = json_object_get(o, "procs"))) {
        size_t k;
        json_t *pv;
        long long pid = 0, sm = 0;
        char pw[48];
        if (!json_is_array(v) || json_array_size(v) > 16)
            return gs_errf(e, GS_EINVAL, "%s.procs: must be an array of at most 16 objects", w);
        json_array_foreach(v, k, pv) {
            snprintf(pw, sizeof pw, "%s.procs[%zu]", w, k);
            if (!json_is_object(pv))
                return gs_errf(e, GS_EINVAL, "%s: must be an object", pw);
            if (!json_object_get(pv, "pid"))
                return gs_errf(e, GS_EINVAL, "%s.pid: missing", pw);
            if (get_int(pv, "pid", 1, 4194304, 0, &pid, pw, e) ||
                get_int(pv, "sm", 0, 100, 0, &sm, pw, e))
                return -GS_EINVAL;
            st->procs[i][k].pid = (int)pid;
            st->procs[i][k].sm = (int)sm;
        }
        st->nproc[i] = (int)json_array_size(v);
    }
    if (get_bool(o, "lost", &st->lost[i], w, e) ||
        get_bool(o, "probe_fails", &st->probe_fails[i], w, e))
        return -GS_EINVAL;
    g->healthy = 1;
    return 0;
}

int dp_fake_parse(const char *text, size_t len, struct dp_fake_state *out, struct gs_err *e)
{
    json_error_t je;
    json_t *root, *gpus, *v;
    int rc = 0;

    memset(out, 0, sizeof *out);
    if (len > FAKE_MAX_FILE)
        return gs_errf(e, GS_ETOOBIG, "fake GPU file is over %d bytes", FAKE_MAX_FILE);
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return gs_errf(e, GS_EINVAL, "line %d: %s", je.line, je.text);
    if (!json_is_object(root)) {
        rc = gs_errf(e, GS_EINVAL, "top level: must be an object with \"gpus\"");
        goto out;
    }
    gpus = json_object_get(root, "gpus");
    if (!gpus || !json_is_array(gpus)) {
        rc = gs_errf(e, GS_EINVAL, "gpus: missing or not an array");
        goto out;
    }
    if (json_array_size(gpus) > DP_MAX_GPUS) {
        rc = gs_errf(e, GS_EINVAL, "gpus: %zu GPUs, at most %d", json_array_size(gpus),
                     DP_MAX_GPUS);
        goto out;
    }
    if ((v = json_object_get(root, "driver")) &&
        (rc = get_str(root, "driver", 0, out->inv.driver, sizeof out->inv.driver, "top", e)))
        goto out;
    int n = (int)json_array_size(gpus);
    out->inv.n = n;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            out->inv.gpu[i].link[j] = CORE_LINK_UNKNOWN;
    }
    for (int i = 0; i < n && !rc; i++)
        rc = parse_gpu(json_array_get(gpus, (size_t)i), out, i, n, e);
    for (int i = 0; i < n && !rc; i++) {
        struct dp_gpu *g = &out->inv.gpu[i];
        for (int j = 0; j < i; j++) {
            if (strcmp(out->inv.gpu[j].uuid, g->uuid) == 0)
                rc = gs_errf(e, GS_EINVAL, "gpus[%d].uuid: '%s' appears twice", i, g->uuid);
            else if (out->inv.gpu[j].index == g->index)
                rc = gs_errf(e, GS_EINVAL, "gpus[%d].index: %d appears twice", i, g->index);
        }
        /* Pairs the file leaves out are linked by NUMA distance. */
        for (int j = 0; j < n; j++)
            if (j != i && g->link[j] == CORE_LINK_UNKNOWN)
                g->link[j] = (g->numa_node == out->inv.gpu[j].numa_node) ? CORE_LINK_NODE
                                                                         : CORE_LINK_SYS;
    }
out:
    json_decref(root);
    if (rc)
        memset(out, 0, sizeof *out);
    return rc;
}

/* ---- the backend ---------------------------------------------------------- */

static int read_file(const char *path, struct dp_fake_state *st, struct stat *sb, struct gs_err *e)
{
    struct gs_buf b = {0};
    int rc;

    if (stat(path, sb) != 0)
        return gs_errf(e, GS_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb->st_mode))
        return gs_errf(e, GS_EINVAL, "%s: not a regular file", path);
    if ((rc = gs_buf_read_file(&b, path, FAKE_MAX_FILE, e)) < 0)
        return rc;
    rc = dp_fake_parse(b.buf ? b.buf : "", b.len, st, e);
    gs_buf_free(&b);
    if (rc)
        gs_err_prefix(e, "%s", path);
    return rc;
}

static int fake_discover(struct dp_backend *b, struct dp_inventory *inv, struct gs_err *e)
{
    struct fake *f = (struct fake *)b;

    (void)e;
    *inv = f->st.inv;
    return 0;
}

static void push(struct fake *f, const char *uuid, uint64_t xid)
{
    if (f->n_pending == FAKE_MAX_PENDING)
        return;
    struct dp_event *ev = &f->pending[f->n_pending++];
    memset(ev, 0, sizeof *ev);
    snprintf(ev->uuid, sizeof ev->uuid, "%s", uuid);
    ev->xid = xid;
}

static int find_uuid(const struct dp_fake_state *st, const char *uuid)
{
    for (int i = 0; i < st->inv.n; i++)
        if (strcmp(st->inv.gpu[i].uuid, uuid) == 0)
            return i;
    return -1;
}

/* Re-reads the file if it changed; queues events; returns 1 when the set
 * of GPUs changed. */
static int refresh(struct fake *f)
{
    struct stat sb;
    struct gs_err e = GS_ERR_INIT;
    struct dp_fake_state *nst;
    int changed = 0;

    if (stat(f->path, &sb) != 0 ||
        (sb.st_size == f->last.st_size && sb.st_mtim.tv_sec == f->last.st_mtim.tv_sec &&
         sb.st_mtim.tv_nsec == f->last.st_mtim.tv_nsec))
        return 0;
    nst = malloc(sizeof *nst);
    if (!nst)
        return 0;
    if (read_file(f->path, nst, &sb, &e) != 0) {
        log_warn("dp", "fake GPU file changed but is not usable, keeping the last good one: %s",
                 e.msg);
        f->last = sb;
        free(nst);
        return 0;
    }
    f->last = sb;
    if (nst->inv.n != f->st.inv.n)
        changed = 1;
    for (int i = 0; i < nst->inv.n; i++) {
        int old = find_uuid(&f->st, nst->inv.gpu[i].uuid);
        if (old < 0) {
            changed = 1;
            continue;
        }
        for (int k = f->st.nxid[old]; k < nst->nxid[i]; k++)
            push(f, nst->inv.gpu[i].uuid, nst->xids[i][k]);
        const struct dp_gpu *ng = &nst->inv.gpu[i], *og = &f->st.inv.gpu[old];
        for (int m = 0; m < ng->n_mig; m++)
            for (int n = 0; n < og->n_mig; n++)
                if (strcmp(ng->mig[m].uuid, og->mig[n].uuid) == 0)
                    for (int k = f->st.mig_nxid[old][n]; k < nst->mig_nxid[i][m]; k++)
                        push(f, ng->mig[m].uuid, nst->mig_xids[i][m][k]);
        if (nst->lost[i] && !f->st.lost[old])
            push(f, nst->inv.gpu[i].uuid, 79); /* GPU has fallen off the bus */
        if (memcmp(&nst->inv.gpu[i], &f->st.inv.gpu[old], sizeof nst->inv.gpu[i]) != 0)
            changed = 1;
    }
    pthread_mutex_lock(&f->mu);
    f->st = *nst;
    pthread_mutex_unlock(&f->mu);
    free(nst);
    return changed;
}

static int fake_wait(struct dp_backend *b, int timeout_ms, struct dp_event *ev, struct gs_err *e)
{
    struct fake *f = (struct fake *)b;
    struct timespec step = {0, 50 * 1000000L};

    (void)e;
    for (int waited = 0;; waited += 50) {
        int changed = refresh(f);
        if (f->n_pending) {
            *ev = f->pending[0];
            memmove(f->pending, f->pending + 1, (size_t)--f->n_pending * sizeof *f->pending);
            return 1;
        }
        if (changed)
            return 2;
        if (waited >= timeout_ms)
            return 0;
        nanosleep(&step, NULL);
    }
}

static int fake_probe(struct dp_backend *b, const char *uuid, struct gs_err *e)
{
    struct fake *f = (struct fake *)b;
    int i = find_uuid(&f->st, uuid);

    if (i < 0)
        return gs_errf(e, GS_ENOENT, "%s: not found", uuid);
    if (f->st.lost[i])
        return gs_errf(e, GS_EUNAVAIL, "%s: GPU is lost", uuid);
    if (f->st.probe_fails[i])
        return gs_errf(e, GS_EIO, "%s: probe failed", uuid);
    return 0;
}

/* Every call is a new sample of the processes the file lists for the GPU,
 * stamped now. */
static int fake_proc_util(struct dp_backend *b, const char *uuid, uint64_t *last_us,
                          struct dp_proc_sample *out, int max, struct gs_err *e)
{
    struct fake *f = (struct fake *)b;
    struct timespec ts;
    int n = 0;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    pthread_mutex_lock(&f->mu);
    int i = find_uuid(&f->st, uuid);
    if (i < 0)
        n = gs_errf(e, GS_ENOENT, "%s: not found", uuid);
    else if (now > *last_us)
        for (; n < f->st.nproc[i] && n < max; n++) {
            out[n] = f->st.procs[i][n];
            out[n].ts_us = now;
        }
    pthread_mutex_unlock(&f->mu);
    if (n >= 0 && now > *last_us)
        *last_us = now;
    return n;
}

static void fake_close(struct dp_backend *b)
{
    struct fake *f = (struct fake *)b;

    pthread_mutex_destroy(&f->mu);
    free(f->path);
    free(f);
}

int dp_backend_open_fake(const char *path, struct dp_backend **out, struct gs_err *e)
{
    struct fake *f = calloc(1, sizeof *f);

    *out = NULL;
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&f->mu, NULL);
    int rc = read_file(path, &f->st, &f->last, e);
    if (rc) {
        fake_close(&f->b);
        return rc;
    }
    /* XIDs already in the file at start are history, not new events; a GPU
     * already lost starts unhealthy through its first failed probe. */
    for (int i = 0; i < f->st.inv.n; i++)
        if (f->st.lost[i])
            push(f, f->st.inv.gpu[i].uuid, 79);
    f->b.name = "fake";
    f->b.discover = fake_discover;
    f->b.wait_event = fake_wait;
    f->b.proc_util = fake_proc_util;
    f->b.probe = fake_probe;
    f->b.close = fake_close;
    *out = &f->b;
    return 0;
}
