/* dp/health.c - see health.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/health.h"

/* Application errors (illegal address, MMU fault from user code, ...):
 * the job failed, the GPU is fine. The list NVIDIA's plugin ignores. */
static const uint64_t default_ignored[] = {13, 31, 43, 45, 68, 109};

/* The GPU needs a reset or a node drain: 48 double-bit ECC, 62 internal
 * micro-controller halt, 64 ECC page-retirement failure, 74 NVLink error,
 * 79 fallen off the bus, 95 uncontained ECC, 119/120 GSP errors,
 * 140 unrecovered ECC. Everything else (e.g. 63 row remap pending, 92 high
 * single-bit ECC rate, 94 contained ECC) is transient. */
static const uint64_t fatal_xids[] = {48, 62, 64, 74, 79, 95, 119, 120, 140};

void dp_health_cfg_default(struct dp_health_cfg *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof default_ignored / sizeof *default_ignored; i++)
        c->ignored[c->n_ignored++] = default_ignored[i];
    c->transient_ms = 10 * 1000;
    c->fatal_ms = 0;
}

/* When a GPU unhealthy from an XID of class k is probed again. */
static int64_t recheck(const struct dp_health_cfg *c, enum dp_xid_class k, int64_t now_ms)
{
    if (k != DP_XID_FATAL)
        return now_ms + c->transient_ms;
    return c->fatal_ms > 0 ? now_ms + c->fatal_ms : INT64_MAX;
}

/* A comma-separated XID list into out[], *n (flag names it in errors). */
static int parse_list(const char *flag, const char *list, uint64_t *out, int *n,
                      struct gs_err *e)
{
    char buf[512], *save = NULL;

    if (strlen(list) >= sizeof buf)
        return gs_errf(e, GS_EINVAL, "%s: list is too long", flag);
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(tok, &end, 10);
        if (errno || end == tok || *end || tok[0] == '-' || x > 100000)
            return gs_errf(e, GS_EINVAL, "%s: '%s' is not an XID number", flag, tok);
        if (*n == DP_HEALTH_MAX_IGNORED)
            return gs_errf(e, GS_EINVAL, "%s: more than %d XIDs", flag, DP_HEALTH_MAX_IGNORED);
        out[(*n)++] = x;
    }
    return 0;
}

int dp_health_parse_ignored(struct dp_health_cfg *c, const char *list, struct gs_err *e)
{
    if (strcmp(list, "all") == 0) {
        c->disabled = 1;
        return 0;
    }
    return parse_list("--ignore-xids", list, c->ignored, &c->n_ignored, e);
}

int dp_health_parse_forced(struct dp_health_cfg *c, const char *list, struct gs_err *e)
{
    return parse_list("--health-xids", list, c->forced, &c->n_forced, e);
}

static int listed(const uint64_t *xs, int n, uint64_t xid)
{
    for (int i = 0; i < n; i++)
        if (xs[i] == xid)
            return 1;
    return 0;
}

enum dp_xid_class dp_health_classify(const struct dp_health_cfg *c, uint64_t xid)
{
    if (c->disabled || (listed(c->ignored, c->n_ignored, xid) &&
                        !listed(c->forced, c->n_forced, xid)))
        return DP_XID_IGNORED;
    return listed(fatal_xids, (int)(sizeof fatal_xids / sizeof *fatal_xids), xid)
               ? DP_XID_FATAL
               : DP_XID_TRANSIENT;
}

const char *dp_xid_class_name(enum dp_xid_class k)
{
    return k == DP_XID_FATAL ? "fatal" : k == DP_XID_TRANSIENT ? "transient" : "ignored";
}

/* One thing with a health of its own: a GPU or a MIG instance. */
struct unit {
    int *healthy;
    char *reason;
    size_t cap;
    int64_t *recheck_at;
    uint64_t *last_xid;
};

static struct unit gpu_unit(struct dp_gpu *g, struct dp_health_state *hs, int i)
{
    return (struct unit){&g->healthy, g->reason, sizeof g->reason, &hs->recheck_at[i],
                         &hs->last_xid[i]};
}

static struct unit mig_unit(struct dp_gpu *g, struct dp_health_state *hs, int i, int m)
{
    return (struct unit){&g->mig[m].healthy, g->mig[m].reason, sizeof g->mig[m].reason,
                         &hs->mig_recheck_at[i][m], &hs->mig_last_xid[i][m]};
}

static int mark(struct unit u, uint64_t xid, enum dp_xid_class k, int64_t at)
{
    int changed = *u.healthy;

    *u.healthy = 0;
    snprintf(u.reason, u.cap, "XID %llu (%s)", (unsigned long long)xid, dp_xid_class_name(k));
    *u.last_xid = xid;
    /* A fatal XID after a transient one pushes the re-probe out. */
    if (*u.recheck_at < at)
        *u.recheck_at = at;
    return changed;
}

/* The MIG instance of GPU g an event is for, or -1 (the whole GPU). */
static int event_mig(const struct dp_gpu *g, const struct dp_event *ev)
{
    for (int m = 0; m < g->n_mig; m++) {
        const struct dp_mig *mi = &g->mig[m];
        if (strcmp(mi->uuid, ev->uuid) == 0)
            return m;
        if (ev->instance && strcmp(g->uuid, ev->uuid) == 0 && mi->gi != DP_NO_INSTANCE &&
            mi->gi == ev->gi && (ev->ci == DP_NO_INSTANCE || mi->ci == ev->ci))
            return m;
    }
    return -1;
}

static int uuid_listed(const char (*uuids)[DP_UUID_MAX], int n, const char *uuid)
{
    for (int i = 0; i < n; i++)
        if (strcmp(uuids[i], uuid) == 0)
            return 1;
    return 0;
}

int dp_health_event(const struct dp_health_cfg *c, struct dp_inventory *inv,
                    struct dp_health_state *hs, const struct dp_event *ev,
                    const char (*dead)[DP_UUID_MAX], int n_dead, int64_t now_ms)
{
    enum dp_xid_class k = ev->all ? DP_XID_TRANSIENT : dp_health_classify(c, ev->xid);
    int changed = 0;

    if (c->disabled || k == DP_XID_IGNORED)
        return 0;
    int64_t at = recheck(c, k, now_ms);
    for (int i = 0; i < inv->n; i++) {
        struct dp_gpu *g = &inv->gpu[i];
        int m = ev->all ? -1 : event_mig(g, ev);
        if (m < 0 && !ev->all && strcmp(g->uuid, ev->uuid) != 0)
            continue;
        /* the event source failed (it does on every wait once one GPU is
         * lost, XID 79): only the GPUs that did not answer a probe, and not
         * again one already out (its reason and re-probe stand) */
        if (ev->all && (!g->healthy || (dead && !uuid_listed(dead, n_dead, g->uuid))))
            continue;
        hs->xids[i]++;
        changed |= mark(m < 0 ? gpu_unit(g, hs, i) : mig_unit(g, hs, i, m), ev->xid, k, at);
    }
    return changed;
}

static int due(struct unit u, int64_t now_ms)
{
    return !*u.healthy && *u.recheck_at && *u.recheck_at <= now_ms;
}

/* Applies a re-probe of u's GPU (r->code 0: it passed) if u was due: 1
 * when it turned healthy. */
static int reprobe(const struct dp_health_cfg *c, struct unit u, const struct gs_err *r,
                   int64_t now_ms, int64_t done_ms)
{
    if (!due(u, now_ms))
        return 0;
    if (r->code == 0) {
        *u.healthy = 1;
        u.reason[0] = '\0';
        *u.recheck_at = 0;
        return 1;
    }
    /* the probe's message is cut to what the reason holds (96 bytes for a
     * MIG instance) */
    int n = snprintf(u.reason, u.cap, "re-probe failed after XID %llu: %s",
                     (unsigned long long)*u.last_xid, r->msg);
    if (n >= (int)u.cap && u.cap > 4)
        memcpy(u.reason + u.cap - 4, "...", 4);
    *u.recheck_at = recheck(c, dp_health_classify(c, *u.last_xid), done_ms);
    return 0;
}

int dp_health_due(struct dp_inventory *inv, struct dp_health_state *hs, int64_t now_ms,
                  char (*uuids)[DP_UUID_MAX])
{
    int n = 0;
    for (int i = 0; i < inv->n; i++) {
        struct dp_gpu *g = &inv->gpu[i];
        int d = due(gpu_unit(g, hs, i), now_ms);
        for (int m = 0; m < g->n_mig && !d; m++)
            d = due(mig_unit(g, hs, i, m), now_ms);
        if (d)
            snprintf(uuids[n++], DP_UUID_MAX, "%s", g->uuid);
    }
    return n;
}

int dp_health_reprobed(const struct dp_health_cfg *c, struct dp_inventory *inv,
                       struct dp_health_state *hs, const char (*uuids)[DP_UUID_MAX],
                       const struct gs_err *res, int n, int64_t now_ms, int64_t done_ms)
{
    int changed = 0;
    for (int i = 0; i < inv->n; i++) {
        struct dp_gpu *g = &inv->gpu[i];
        for (int k = 0; k < n; k++) {
            if (strcmp(uuids[k], g->uuid) != 0)
                continue;
            changed += reprobe(c, gpu_unit(g, hs, i), &res[k], now_ms, done_ms);
            for (int m = 0; m < g->n_mig; m++)
                changed += reprobe(c, mig_unit(g, hs, i, m), &res[k], now_ms, done_ms);
        }
    }
    return changed;
}

int dp_health_reprobe(const struct dp_health_cfg *c, struct dp_inventory *inv,
                      struct dp_health_state *hs, struct dp_backend *b, int64_t now_ms)
{
    char uuids[DP_MAX_GPUS][DP_UUID_MAX];
    struct gs_err res[DP_MAX_GPUS];
    int n = dp_health_due(inv, hs, now_ms, uuids);
    for (int k = 0; k < n; k++) {
        res[k] = (struct gs_err)GS_ERR_INIT;
        b->probe(b, uuids[k], &res[k]);
    }
    return dp_health_reprobed(c, inv, hs, uuids, res, n, now_ms, now_ms);
}

static void carry(int healthy, const char *reason, int64_t recheck_at, uint64_t last_xid,
                  struct unit to)
{
    if (!healthy) {
        *to.healthy = 0;
        snprintf(to.reason, to.cap, "%s", reason);
    }
    *to.recheck_at = recheck_at;
    *to.last_xid = last_xid;
}

void dp_health_carry(const struct dp_inventory *prev, const struct dp_health_state *hprev,
                     struct dp_inventory *next, struct dp_health_state *hnext)
{
    memset(hnext, 0, sizeof *hnext);
    for (int i = 0; i < next->n; i++)
        for (int j = 0; j < prev->n; j++) {
            struct dp_gpu *to = &next->gpu[i];
            const struct dp_gpu *from = &prev->gpu[j];
            if (strcmp(to->uuid, from->uuid) != 0)
                continue;
            carry(from->healthy, from->reason, hprev->recheck_at[j], hprev->last_xid[j],
                  gpu_unit(to, hnext, i));
            hnext->xids[i] = hprev->xids[j];
            for (int m = 0; m < to->n_mig; m++)
                for (int n = 0; n < from->n_mig; n++)
                    if (strcmp(to->mig[m].uuid, from->mig[n].uuid) == 0)
                        carry(from->mig[n].healthy, from->mig[n].reason,
                              hprev->mig_recheck_at[j][n], hprev->mig_last_xid[j][n],
                              mig_unit(to, hnext, i, m));
        }
}
