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

int dp_health_parse_ignored(struct dp_health_cfg *c, const char *list, struct gs_err *e)
{
    char buf[512], *save = NULL;

    if (strcmp(list, "all") == 0) {
        c->disabled = 1;
        return 0;
    }
    if (strlen(list) >= sizeof buf)
        return gs_errf(e, GS_EINVAL, "--ignore-xids: list is too long");
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(tok, &end, 10);
        if (errno || end == tok || *end || tok[0] == '-' || x > 100000)
            return gs_errf(e, GS_EINVAL, "--ignore-xids: '%s' is not an XID number", tok);
        if (c->n_ignored == DP_HEALTH_MAX_IGNORED)
            return gs_errf(e, GS_EINVAL, "--ignore-xids: more than %d XIDs",
                           DP_HEALTH_MAX_IGNORED);
        c->ignored[c->n_ignored++] = x;
    }
    return 0;
}

enum dp_xid_class dp_health_classify(const struct dp_health_cfg *c, uint64_t xid)
{
    if (c->disabled)
        return DP_XID_IGNORED;
    for (int i = 0; i < c->n_ignored; i++)
        if (c->ignored[i] == xid)
            return DP_XID_IGNORED;
    for (size_t i = 0; i < sizeof fatal_xids / sizeof *fatal_xids; i++)
        if (fatal_xids[i] == xid)
            return DP_XID_FATAL;
    return DP_XID_TRANSIENT;
}

const char *dp_xid_class_name(enum dp_xid_class k)
{
    return k == DP_XID_FATAL ? "fatal" : k == DP_XID_TRANSIENT ? "transient" : "ignored";
}

static int mark(struct dp_gpu *g, struct dp_health_state *hs, int i, uint64_t xid,
                enum dp_xid_class k, int64_t at)
{
    int changed = g->healthy;

    g->healthy = 0;
    snprintf(g->reason, sizeof g->reason, "XID %llu (%s)", (unsigned long long)xid,
             dp_xid_class_name(k));
    hs->xids[i]++;
    hs->last_xid[i] = xid;
    /* A fatal XID after a transient one pushes the re-probe out. */
    if (hs->recheck_at[i] < at)
        hs->recheck_at[i] = at;
    return changed;
}

int dp_health_event(const struct dp_health_cfg *c, struct dp_inventory *inv,
                    struct dp_health_state *hs, const struct dp_event *ev, int64_t now_ms)
{
    enum dp_xid_class k = ev->all ? DP_XID_TRANSIENT : dp_health_classify(c, ev->xid);
    int changed = 0;

    if (c->disabled || k == DP_XID_IGNORED)
        return 0;
    int64_t at = recheck(c, k, now_ms);
    for (int i = 0; i < inv->n; i++) {
        struct dp_gpu *g = &inv->gpu[i];
        int hit = ev->all || strcmp(g->uuid, ev->uuid) == 0;
        for (int m = 0; !hit && m < g->n_mig; m++)
            hit = strcmp(g->mig[m].uuid, ev->uuid) == 0;
        if (hit)
            changed |= mark(g, hs, i, ev->xid, k, at);
    }
    return changed;
}

int dp_health_reprobe(const struct dp_health_cfg *c, struct dp_inventory *inv,
                      struct dp_health_state *hs, struct dp_backend *b, int64_t now_ms)
{
    int changed = 0;

    for (int i = 0; i < inv->n; i++) {
        struct dp_gpu *g = &inv->gpu[i];
        struct gs_err e = GS_ERR_INIT;
        if (g->healthy || !hs->recheck_at[i] || hs->recheck_at[i] > now_ms)
            continue;
        if (b->probe(b, g->uuid, &e) == 0) {
            g->healthy = 1;
            g->reason[0] = '\0';
            hs->recheck_at[i] = 0;
            changed++;
        } else {
            snprintf(g->reason, sizeof g->reason, "re-probe failed after XID %llu: %.80s",
                     (unsigned long long)hs->last_xid[i], e.msg);
            hs->recheck_at[i] = recheck(c, dp_health_classify(c, hs->last_xid[i]), now_ms);
        }
    }
    return changed;
}

void dp_health_carry(const struct dp_inventory *prev, const struct dp_health_state *hprev,
                     struct dp_inventory *next, struct dp_health_state *hnext)
{
    memset(hnext, 0, sizeof *hnext);
    for (int i = 0; i < next->n; i++)
        for (int j = 0; j < prev->n; j++) {
            if (strcmp(next->gpu[i].uuid, prev->gpu[j].uuid) != 0)
                continue;
            if (!prev->gpu[j].healthy) {
                next->gpu[i].healthy = 0;
                snprintf(next->gpu[i].reason, sizeof next->gpu[i].reason, "%s",
                         prev->gpu[j].reason);
            }
            hnext->recheck_at[i] = hprev->recheck_at[j];
            hnext->xids[i] = hprev->xids[j];
            hnext->last_xid[i] = hprev->last_xid[j];
        }
}
