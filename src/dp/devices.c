/* dp/devices.c - see devices.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin.pb-c.h"
#include "dp/devices.h"
#include "dp/topology.h"

static struct dp_resource *resource_for(struct dp_resource *out, int *n, int max, const char *name)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(out[i].name, name) == 0)
            return &out[i];
    if (*n == max)
        return NULL;
    struct dp_resource *r = &out[(*n)++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

int dp_devices_build(const struct dp_inventory *inv, const struct dp_devices_cfg *cfg,
                     struct dp_resource *out, int max)
{
    char name[DP_RESOURCE_MAX];
    int n = 0;
    int reps = cfg->replicas < 1 ? 1 : cfg->replicas > DP_MAX_REPLICAS ? DP_MAX_REPLICAS
                                                                        : cfg->replicas;

    if (inv->n == 0)
        return 0;
    snprintf(name, sizeof name, "%sgpu", cfg->prefix);
    struct dp_resource *gpu = resource_for(out, &n, max, name);
    for (int i = 0; gpu && i < inv->n; i++) {
        const struct dp_gpu *g = &inv->gpu[i];
        if (g->mig_enabled) {
            for (int m = 0; m < g->n_mig; m++) {
                snprintf(name, sizeof name, "%smig-%s", cfg->prefix, g->mig[m].profile);
                struct dp_resource *r = resource_for(out, &n, max, name);
                if (!r)
                    continue;
                struct dp_device *d = &r->dev[r->n++];
                snprintf(d->id, sizeof d->id, "%s", g->mig[m].uuid);
                d->gpu = i;
                d->mig = m;
            }
            continue;
        }
        for (int k = 0; k < reps; k++) {
            struct dp_device *d = &gpu->dev[gpu->n++];
            if (reps == 1)
                snprintf(d->id, sizeof d->id, "%s", g->uuid);
            else
                snprintf(d->id, sizeof d->id, "%.56s::%d", g->uuid, k);
            d->gpu = i;
            d->mig = -1;
        }
    }
    return n;
}

const struct dp_device *dp_devices_find(const struct dp_resource *r, const char *id)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->dev[i].id, id) == 0)
            return &r->dev[i];
    return NULL;
}

void dp_devices_socket_name(const char *resource, char *buf, size_t cap)
{
    const char *slash = strrchr(resource, '/');
    snprintf(buf, cap, "gpusched-%s.sock", slash ? slash + 1 : resource);
}

int dp_devices_pack_list(const struct dp_resource *r, const struct dp_inventory *inv,
                         uint8_t **out, size_t *len, struct gs_err *e)
{
    V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    V1beta1__Device *devs = calloc((size_t)r->n + 1, sizeof *devs);
    V1beta1__Device **ptrs = calloc((size_t)r->n + 1, sizeof *ptrs);
    V1beta1__TopologyInfo *topo = calloc((size_t)r->n + 1, sizeof *topo);
    V1beta1__NUMANode *numa = calloc((size_t)r->n + 1, sizeof *numa);
    V1beta1__NUMANode **numap = calloc((size_t)r->n + 1, sizeof *numap);
    int rc = 0;

    *out = NULL;
    *len = 0;
    if (!devs || !ptrs || !topo || !numa || !numap) {
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < r->n; i++) {
        const struct dp_gpu *g = &inv->gpu[r->dev[i].gpu];
        v1beta1__device__init(&devs[i]);
        devs[i].id = (char *)r->dev[i].id;
        int ok = g->healthy && (r->dev[i].mig < 0 || g->mig[r->dev[i].mig].healthy);
        devs[i].health = (char *)(ok ? "Healthy" : "Unhealthy");
        if (g->numa_node >= 0) {
            v1beta1__topology_info__init(&topo[i]);
            v1beta1__numanode__init(&numa[i]);
            numa[i].id = g->numa_node;
            numap[i] = &numa[i];
            topo[i].n_nodes = 1;
            topo[i].nodes = &numap[i];
            devs[i].topology = &topo[i];
        }
        ptrs[i] = &devs[i];
    }
    resp.n_devices = (size_t)r->n;
    resp.devices = ptrs;
    *len = v1beta1__list_and_watch_response__get_packed_size(&resp);
    *out = malloc(*len ? *len : 1);
    if (!*out) {
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
        *len = 0;
        goto done;
    }
    v1beta1__list_and_watch_response__pack(&resp, *out);
done:
    free(devs);
    free(ptrs);
    free(topo);
    free(numa);
    free(numap);
    return rc;
}

/* ---- preferred allocation ------------------------------------------------- */

static int taken(const char **ids, int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ids[i], id) == 0)
            return 1;
    return 0;
}

int dp_devices_prefer(const struct dp_resource *r, const struct dp_inventory *inv,
                      char *const *avail, size_t n_avail, char *const *must, size_t n_must,
                      int size, const char **out_ids, struct gs_err *e)
{
    uint32_t cand = 0, mustm = 0, chosen = 0;
    int n = 0;

    if (size < 1 || (size_t)size > n_avail + n_must || size > DP_MAX_DEVICES)
        return gs_errf(e, GS_EINVAL, "allocation_size: %d is not within 1..%zu available devices",
                       size, n_avail);
    if (n_must > (size_t)size)
        return gs_errf(e, GS_EINVAL, "must_include_deviceIDs: %zu IDs but allocation_size is %d",
                       n_must, size);
    for (size_t i = 0; i < n_must; i++) {
        const struct dp_device *d = dp_devices_find(r, must[i]);
        if (!d)
            return gs_errf(e, GS_ENOENT, "must_include_deviceIDs[%zu]: unknown device '%.64s'", i,
                           must[i]);
        mustm |= 1u << d->gpu;
        if (!taken(out_ids, n, must[i]))
            out_ids[n++] = must[i];
    }
    for (size_t i = 0; i < n_avail; i++) {
        const struct dp_device *d = dp_devices_find(r, avail[i]);
        if (!d)
            return gs_errf(e, GS_ENOENT, "available_deviceIDs[%zu]: unknown device '%.64s'", i,
                           avail[i]);
        cand |= 1u << d->gpu;
    }
    cand |= mustm;

    /* How many distinct GPUs to spread over: all of them if there are
     * enough, else as many as there are (replicas then share). */
    int want = size, ngpu = __builtin_popcount(cand);
    if (want > ngpu)
        want = ngpu;
    if (__builtin_popcount(mustm) > want)
        want = __builtin_popcount(mustm);
    if (dp_topology_pick(inv, cand, mustm, want, &chosen) != 0)
        chosen = cand;

    /* One replica per chosen GPU first (in GPU order), then fill up. */
    for (int pass = 0; pass < 2 && n < size; pass++) {
        uint32_t used = mustm & (pass == 0 ? chosen : 0);
        for (size_t i = 0; i < n_avail && n < size; i++) {
            const struct dp_device *d = dp_devices_find(r, avail[i]);
            uint32_t bit = 1u << d->gpu;
            if (taken(out_ids, n, avail[i]))
                continue;
            if (pass == 0 && (!(chosen & bit) || (used & bit)))
                continue;
            out_ids[n++] = avail[i];
            used |= bit;
        }
    }
    if (n < size)
        return gs_errf(e, GS_ENOFIT, "only %d distinct devices for allocation_size %d", n, size);
    return 0;
}
